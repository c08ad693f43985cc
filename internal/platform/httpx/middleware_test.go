package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestWithRequestID(t *testing.T) {
	tests := []struct {
		name    string
		inbound string // "" sends no header
		reused  bool
	}{
		{"None", "", false},
		{"UUID", "0b6f7a9e-4c1d-4f7e-9a51-2d3c4b5a6f70", true},
		{"Token", "lb-01:req.42_a", true},
		{"OneChar", "x", true},
		{"SixtyFourChars", strings.Repeat("a", 64), true},
		{"SixtyFiveChars", strings.Repeat("a", 65), false},
		{"Space", "abc def", false},
		{"Injection", `abc"}{"level":"ERROR`, false},
		{"NonASCII", "réq-1", false},
		{"Slash", "a/b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := echo.New()
			var fromCtx, fromEcho string
			h := WithRequestID()(func(c echo.Context) error {
				fromCtx = RequestIDFrom(c.Request().Context())
				fromEcho = RequestID(c)
				return c.NoContent(http.StatusNoContent)
			})
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.inbound != "" {
				req.Header.Set(HeaderRequestID, tt.inbound)
			}
			rec := httptest.NewRecorder()
			if err := h(e.NewContext(req, rec)); err != nil {
				t.Fatal(err)
			}
			got := rec.Header().Get(HeaderRequestID)
			if tt.reused {
				if got != tt.inbound {
					t.Errorf("response id = %q, want the inbound %q", got, tt.inbound)
				}
			} else {
				if got == tt.inbound {
					t.Errorf("response id = %q, want a generated one", got)
				}
				if _, err := uuid.Parse(got); err != nil {
					t.Errorf("generated id %q is not a UUID: %v", got, err)
				}
			}
			if fromCtx != got || fromEcho != got {
				t.Errorf("RequestIDFrom(ctx) = %q, RequestID(c) = %q, want both %q", fromCtx, fromEcho, got)
			}
		})
	}
}

func TestWithRequestID_Unique(t *testing.T) {
	e := echo.New()
	h := WithRequestID()(func(c echo.Context) error { return nil })
	seen := map[string]bool{}
	for range 100 {
		rec := httptest.NewRecorder()
		if err := h(e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)); err != nil {
			t.Fatal(err)
		}
		id := rec.Header().Get(HeaderRequestID)
		if seen[id] {
			t.Fatalf("id %q generated twice", id)
		}
		seen[id] = true
	}
}

func TestRequestIDFrom_Empty(t *testing.T) {
	if got := RequestIDFrom(httptest.NewRequest(http.MethodGet, "/", nil).Context()); got != "" {
		t.Errorf("RequestIDFrom(no id) = %q, want empty", got)
	}
}

// logLines parses the JSON log lines written to buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// counter returns the value of shop_http_requests_total for the labels, or
// -1 when the series does not exist.
func counter(t *testing.T, m *metrics.Metrics, method, route, status string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "shop_http_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if labels(s) == method+" "+route+" "+status {
				return s.GetCounter().GetValue()
			}
		}
	}
	return -1
}

func labels(s *dto.Metric) string {
	l := map[string]string{}
	for _, p := range s.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l["method"] + " " + l["route"] + " " + l["status"]
}

func histogramCount(t *testing.T, m *metrics.Metrics, method, route string) uint64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "shop_http_request_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			if labels(s) == method+" "+route+" " {
				return s.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// The log line and the metric carry the status the client saw, which for
// an error is the one the error handler wrote, not echo's default 200.
func TestObserve(t *testing.T) {
	var logs bytes.Buffer
	m := metrics.New()
	e := New(m, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	e.GET("/things/:id", func(c echo.Context) error {
		if c.Param("id") == "missing" {
			return problem.New(problem.NotFound, "no such thing")
		}
		if c.Param("id") == "broken" {
			return errTest
		}
		return c.String(http.StatusOK, "ok")
	})

	do := func(path, id string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set(HeaderRequestID, id)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("/things/1", "req-ok"); rec.Code != 200 {
		t.Fatalf("GET /things/1 = %d, want 200", rec.Code)
	}
	if rec := do("/things/missing", "req-missing"); rec.Code != 404 {
		t.Fatalf("GET /things/missing = %d, want 404", rec.Code)
	}
	if rec := do("/things/broken", "req-broken"); rec.Code != 500 {
		t.Fatalf("GET /things/broken = %d, want 500", rec.Code)
	}
	if rec := do("/nowhere", "req-nowhere"); rec.Code != 404 {
		t.Fatalf("GET /nowhere = %d, want 404", rec.Code)
	}

	for _, tt := range []struct {
		route, status string
	}{
		{"/things/:id", "200"},
		{"/things/:id", "404"},
		{"/things/:id", "500"},
	} {
		if got := counter(t, m, "GET", tt.route, tt.status); got != 1 {
			t.Errorf("shop_http_requests_total{GET %s %s} = %v, want 1", tt.route, tt.status, got)
		}
	}
	if got := histogramCount(t, m, "GET", "/things/:id"); got != 3 {
		t.Errorf("duration samples for /things/:id = %d, want 3", got)
	}
	// An unrouted path is one label value, not one per path a scanner tries.
	if got := counter(t, m, "GET", "unmatched", "404"); got != 1 {
		t.Errorf("shop_http_requests_total{GET unmatched 404} = %v, want 1", got)
	}
	if got := counter(t, m, "GET", "/nowhere", "404"); got != -1 {
		t.Errorf("unrouted path got its own series (%v)", got)
	}

	byID := map[string]map[string]any{}
	for _, l := range logLines(t, &logs) {
		if l["msg"] == "request" {
			id, _ := l["request_id"].(string)
			byID[id] = l
		}
	}
	for id, want := range map[string]struct {
		status float64
		level  string
	}{
		"req-ok":      {200, "INFO"},
		"req-missing": {404, "INFO"},
		"req-broken":  {500, "ERROR"},
		"req-nowhere": {404, "INFO"},
	} {
		l, ok := byID[id]
		if !ok {
			t.Errorf("no request log line with request_id %s in %q", id, logs.String())
			continue
		}
		if l["status"] != want.status || l["level"] != want.level || l["method"] != "GET" {
			t.Errorf("log for %s = %v, want status %v at %s", id, l, want.status, want.level)
		}
	}
	if l := byID["req-ok"]; l != nil && l["route"] != "/things/:id" {
		t.Errorf("route = %v, want the route pattern /things/:id", l["route"])
	}
	if l := byID["req-nowhere"]; l != nil && l["route"] != "unmatched" {
		t.Errorf("route = %v, want unmatched", l["route"])
	}
}

// A query string net/url cannot parse is refused at the edge, whatever the
// route; one it can parse reaches the route whole.
func TestWithParsableQuery(t *testing.T) {
	e := New(metrics.New(), Options{Logger: slog.New(slog.DiscardHandler)})
	e.GET("/things", func(c echo.Context) error { return c.String(http.StatusOK, c.QueryParam("cursor")) })
	for _, tt := range []struct {
		query  string
		status int
	}{
		{"", 200},
		{"cursor=abc&limit=5", 200},
		{"cursor=%41", 200},
		{"cursor=%%%", 400},
		{"cursor=%zz", 400},
		{"cursor=%4", 400},
		{"limit=5;cursor=x", 400},
		{"%", 400},
	} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/things?"+tt.query, nil))
		if rec.Code != tt.status {
			t.Errorf("GET /things?%s = %d %s, want %d", tt.query, rec.Code, rec.Body, tt.status)
		}
		if tt.status == 400 && !strings.Contains(rec.Body.String(), `"code":"invalid_request"`) {
			t.Errorf("GET /things?%s: %s, want invalid_request", tt.query, rec.Body)
		}
	}
}

// A request whose client had gone before its answer (the connection
// closed, or the replica paused past the client's patience) is logged as
// 499 at INFO and counted under status 499: not as a 500 at ERROR, since
// nothing failed but the wait. An answer the handler gave, a 404 here,
// keeps its status.
func TestObserve_ClientGone(t *testing.T) {
	var logs bytes.Buffer
	m := metrics.New()
	e := New(m, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	e.GET("/things/:id", func(c echo.Context) error {
		<-c.Request().Context().Done()
		if c.Param("id") == "missing" {
			return problem.New(problem.NotFound, "no such thing")
		}
		return fmt.Errorf("read thing: %w", c.Request().Context().Err())
	})
	for _, id := range []string{"1", "missing"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client is gone before the handler looks
		req := httptest.NewRequest(http.MethodGet, "/things/"+id, nil).WithContext(ctx)
		req.Header.Set(HeaderRequestID, "req-"+id)
		e.ServeHTTP(httptest.NewRecorder(), req)
	}
	for status, want := range map[string]float64{"499": 1, "404": 1, "500": -1} {
		if got := counter(t, m, "GET", "/things/:id", status); got != want {
			t.Errorf("shop_http_requests_total{GET /things/:id %s} = %v, want %v", status, got, want)
		}
	}
	for _, l := range logLines(t, &logs) {
		if l["level"] == "ERROR" {
			t.Errorf("a client gone is logged at ERROR: %v", l)
		}
		if l["msg"] == "request" && l["request_id"] == "req-1" && (l["status"] != float64(499) || l["level"] != "INFO" || l["err"] == nil) {
			t.Errorf("log for the client gone = %v, want status 499 at INFO with the error", l)
		}
	}
}

// TestExemplarDue: one request in each exemplarEvery carries its trace,
// and every slow one.
func TestExemplarDue(t *testing.T) {
	var h httpMetrics
	t0 := time.Unix(1000, 0)
	fast := time.Millisecond
	steps := []struct {
		at      time.Duration
		elapsed time.Duration
		want    bool
	}{
		{0, fast, true},
		{10 * time.Millisecond, fast, false},
		{50 * time.Millisecond, 200 * time.Millisecond, true}, // slow
		{90 * time.Millisecond, fast, false},
		{400 * time.Millisecond, fast, true},
	}
	for _, s := range steps {
		if got := h.exemplarDue(t0.Add(s.at), s.elapsed); got != s.want {
			t.Errorf("at %s, took %s: due %v, want %v", s.at, s.elapsed, got, s.want)
		}
	}
}
