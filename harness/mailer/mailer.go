package mailer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/journal"
	"github.com/shop-example/shop/internal/platform/mail"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// The kinds of message and the headers, as the shop's client spells them.
const (
	KindReceipt          = mail.KindReceipt
	KindTicket           = mail.KindTicket
	KindRefund           = mail.KindRefund
	HeaderIdempotencyKey = mail.HeaderIdempotencyKey
	HeaderReplayed       = mail.HeaderReplayed
)

// DefaultKeyTTL is how long a key is remembered when Options leave KeyTTL 0.
const DefaultKeyTTL = 24 * time.Hour

// MaxDelay bounds the hold-back (Options.Delay, delay_ms): a held answer
// must still fit the request timeout, and that the server's write timeout
// (httpx.WriteTimeout). config.MaxMailerDelay is the same bound.
const MaxDelay = 20 * time.Second

// Request and Message are the provider's API as the shop's client
// (package mail) sends and reads it.
type (
	Request = mail.Request
	Message = mail.Message
)

// request is what m's key was used for.
func request(m Message) Request {
	return Request{Reference: m.Reference, Kind: m.Kind, To: m.To, Subject: m.Subject, Text: m.Text}
}

// Faults are the failures the mailer stages (see the package comment).
// The zero value stages none.
type Faults struct {
	FailRate float64       // fraction of new keys answered 503, 0–1
	Delay    time.Duration // hold-back of every message's answer, 0–MaxDelay
}

func (f Faults) check() error {
	if !(f.FailRate >= 0 && f.FailRate <= 1) { // NaN fails too
		return fmt.Errorf("fail rate %v: want 0–1", f.FailRate)
	}
	if f.Delay < 0 || f.Delay > MaxDelay {
		return fmt.Errorf("delay %s: want 0–%s", f.Delay, MaxDelay)
	}
	return nil
}

// Options configure a Server.
type Options struct {
	JournalPath string        // required
	KeyTTL      time.Duration // how long a key is remembered; 0 → DefaultKeyTTL
	FailRate    float64       // the starting Faults.FailRate
	Delay       time.Duration // the starting Faults.Delay
	Now         func() time.Time
	// Sleep waits d, or until ctx ends: the hold-back. Tests inject one
	// that the test controls; the default is a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1) for each attempt that may fail;
	// the default is math/rand/v2's.
	Rand   func() float64
	Logger *slog.Logger
	// Tracing, when set, gives every request a span that continues the
	// caller's trace; nil traces nothing.
	Tracing trace.TracerProvider
}

// Server is the mailer: the index of what it sent, the journal that makes
// it durable, and the HTTP API over both.
type Server struct {
	opts  Options
	now   func() time.Time
	locks journal.KeyLocks
	echo  *echo.Echo

	mu      sync.Mutex // guards index, journal and faults together
	index   *index
	journal *journal.Journal[Message]
	faults  Faults
}

// New opens the journal at opts.JournalPath (creating it if absent),
// replays it, and returns a server ready to answer.
func New(opts Options) (*Server, error) {
	if opts.JournalPath == "" {
		return nil, errors.New("mailer: a journal path is required")
	}
	faults := Faults{FailRate: opts.FailRate, Delay: opts.Delay}
	if err := faults.check(); err != nil {
		return nil, fmt.Errorf("mailer: %w", err)
	}
	if opts.KeyTTL <= 0 {
		opts.KeyTTL = DefaultKeyTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, now: opts.Now, index: newIndex(), faults: faults}
	j, err := journal.Open(opts.JournalPath, journal.Options[Message]{
		Name: "mailer", Check: check, Apply: s.index.apply, Logger: opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("mailer: %w", err)
	}
	s.journal = j
	s.echo = s.routes()
	return s, nil
}

// routes builds the HTTP API. The request timeout leaves room for the
// longest hold-back, which is an answer, not a hang.
func (s *Server) routes() *echo.Echo {
	e := httpx.New(metrics.New(), httpx.Options{
		Logger:         s.opts.Logger,
		Tracing:        s.opts.Tracing,
		RequestTimeout: MaxDelay + 5*time.Second,
	})
	h := handlers{s: s}
	e.POST("/v1/messages", h.createMessage)
	e.GET("/v1/messages", h.listMessages)
	e.GET("/v1/messages/:id", h.getMessage)
	e.GET("/v1/faults", h.getFaults)
	e.PUT("/v1/faults", h.putFaults)
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	return e
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler { return s.echo }

// Messages returns the messages sent, in creation order: all of them, or
// those with the given reference.
func (s *Server) Messages(reference string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index.messagesFor(reference, "")
}

// Faults returns the faults staged now.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetFaults stages f from the next request on, as PUT /v1/faults does.
func (s *Server) SetFaults(f Faults) error {
	if err := f.check(); err != nil {
		return fmt.Errorf("mailer: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	return nil
}

// Close closes the journal; requests that would write to it fail from now on.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.journal.Close()
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
