package lab

import (
	"context"
	"net/http"
	"regexp"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
)

// RunHeader goes with each request of a race, next to RouteHeader: its
// run and its number, "<run>/<i>". A copy of the service that serves it
// marks the request's context with them (MarkRuns) before its tracing
// middleware starts the request's span, so that the spans of the race's
// requests, and only those, are recorded (Traced) and kept (Recorder):
// the waterfall of the race is drawn from them. The setup's and the
// check's requests carry no mark.
const RunHeader = "X-Shop-Lab-Run"

// Attributes the Recorder gives every span of a race's request.
const (
	AttrRun     = attribute.Key("shop.lab.run")
	AttrRequest = attribute.Key("shop.lab.request")
)

// Mark names a race's request: its run, and its number in the race, the
// i of its answer.
type Mark struct {
	Run     string
	Request int
}

func (m Mark) header() string { return m.Run + "/" + strconv.Itoa(m.Request) }

// A run's id is runID's: eight hex digits. A number is below MaxSize.
var markValue = regexp.MustCompile(`^([0-9a-f]{8})/([0-9]{1,3})$`)

// parseMark reads RunHeader's value; anything else is no mark.
func parseMark(v string) (Mark, bool) {
	m := markValue.FindStringSubmatch(v)
	if m == nil {
		return Mark{}, false
	}
	i, err := strconv.Atoi(m[2])
	if err != nil || i >= MaxSize {
		return Mark{}, false
	}
	return Mark{Run: m[1], Request: i}, true
}

type markKey struct{}

// WithMark returns ctx carrying m.
func WithMark(ctx context.Context, m Mark) context.Context {
	return context.WithValue(ctx, markKey{}, m)
}

// MarkOf returns the mark ctx carries, if any.
func MarkOf(ctx context.Context) (Mark, bool) {
	m, ok := ctx.Value(markKey{}).(Mark)
	return m, ok
}

// Traced reports whether ctx belongs to a race's request: the Keep of a
// lab copy's tracing (tracing.Config.Keep). Every span started in such a
// context is recorded, even with nothing exported.
func Traced(ctx context.Context) bool {
	_, ok := MarkOf(ctx)
	return ok
}

// MarkRuns serves h, marking the context of a request that carries
// RunHeader. It must run before h's tracing middleware, whose sampler
// asks Traced of the context the request's span starts in: the live
// copy's route runs it after checking the lab's key, a sandbox's server
// in front of the sandbox.
func MarkRuns(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m, ok := parseMark(r.Header.Get(RunHeader)); ok {
			r = r.WithContext(WithMark(r.Context(), m))
		}
		h.ServeHTTP(w, r)
	})
}
