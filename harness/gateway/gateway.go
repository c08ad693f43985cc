package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/journal"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// The test payment methods (see the package comment).
const (
	MethodOK       = "pm_card_ok"
	MethodDeclined = "pm_card_declined"
	MethodSlow     = "pm_card_slow"
	MethodFlaky    = "pm_card_flaky"
)

// Statuses of a charge and of a refund.
const (
	StatusSucceeded = "succeeded"
	StatusRefunded  = "refunded"
)

// The headers of the idempotency contract, spelled as the shop spells them.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// DefaultSlowDelay is the hold-back of pm_card_slow when Options leave it 0.
const DefaultSlowDelay = 10 * time.Second

// Charge is money moved from a card: the body of POST /v1/charges and an
// item of GET /v1/charges. RefundedCents is what its refunds gave back;
// a charge given back whole is refunded. The answer to a charge's key is
// the charge as it was made.
type Charge struct {
	ID            string    `json:"id"`
	Status        string    `json:"status"`
	AmountCents   int64     `json:"amount_cents"`
	RefundedCents int64     `json:"refunded_cents"`
	Reference     string    `json:"reference"`
	PaymentMethod string    `json:"payment_method"`
	CreatedAt     time.Time `json:"created_at"`
}

// Audited is an item of GET /v1/charges: a charge with its refunds, in
// the order they were made.
type Audited struct {
	Charge
	Refunds []Refund `json:"refunds"`
}

// Refund gives all or part of a charge back: the body of POST /v1/refunds.
type Refund struct {
	ID          string    `json:"id"`
	ChargeID    string    `json:"charge_id"`
	AmountCents int64     `json:"amount_cents"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
}

// Options configure a Server.
type Options struct {
	JournalPath string        // required
	SlowDelay   time.Duration // hold-back for pm_card_slow; 0 → DefaultSlowDelay
	Now         func() time.Time
	// Sleep waits d, or until ctx ends: the pm_card_slow hold-back. Tests
	// inject one that the test's clock controls; the default is a timer.
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
	// Tracing, when set, gives every request a span that continues the
	// caller's trace; nil traces nothing.
	Tracing trace.TracerProvider
	// AfterCharge, when set, is called after a new charge is durably journaled and
	// before its answer is written. Tests use it to crash the caller mid-charge.
	AfterCharge func(Charge)
	// NoRefundLimit turns off the check real processors make of a refund:
	// that it gives back no more than is left of its charge
	// (SHOP_GATEWAY_REFUND_LIMIT=off). With it off, every refund asked is
	// made, so a test can show that the shop's own layers keep refunds
	// within what was captured without the processor's help.
	NoRefundLimit bool
}

// Server is the gateway: the index of what it decided, the journal that
// makes it durable, and the HTTP API over both.
type Server struct {
	opts Options
	now  func() time.Time
	// beforeRefund is BeforeRefund's hook; nil runs none.
	beforeRefund atomic.Pointer[func(chargeID string)]
	locks        journal.KeyLocks
	echo         *echo.Echo

	mu      sync.Mutex // guards ledger and journal together
	ledger  *ledger
	journal *journal.Journal[record]
}

// New opens the journal at opts.JournalPath (creating it if absent),
// replays it, and returns a server ready to answer.
func New(opts Options) (*Server, error) {
	if opts.JournalPath == "" {
		return nil, errors.New("gateway: a journal path is required")
	}
	if opts.SlowDelay <= 0 {
		opts.SlowDelay = DefaultSlowDelay
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, now: opts.Now, ledger: newLedger()}
	j, err := journal.Open(opts.JournalPath, journal.Options[record]{
		Name: "gateway", Check: record.check, Apply: s.ledger.apply, Logger: opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s.journal = j
	s.echo = s.routes()
	return s, nil
}

// routes builds the HTTP API. The request timeout leaves room for the
// pm_card_slow hold-back, which is an answer, not a hang.
func (s *Server) routes() *echo.Echo {
	e := httpx.New(metrics.New(), httpx.Options{
		Logger:         s.opts.Logger,
		Tracing:        s.opts.Tracing,
		RequestTimeout: s.opts.SlowDelay + 10*time.Second,
	})
	h := handlers{s: s}
	e.POST("/v1/charges", h.createCharge)
	e.GET("/v1/charges", h.listCharges)
	e.POST("/v1/refunds", h.createRefund)
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	return e
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler { return s.echo }

// Charges returns the charges that moved money, in creation order: all of
// them, or those with the given reference.
func (s *Server) Charges(reference string) []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledger.chargesFor(reference)
}

// Refunds returns the refunds of charge chargeID, in the order they were
// made.
func (s *Server) Refunds(chargeID string) []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledger.refundsFor(chargeID)
}

// BeforeRefund sets fn to be called with the charge of each refund asked
// for, before it is decided and outside every lock of the gateway's: a
// test runs there what must land while a caller's refund is in flight (a
// fulfilment committing between a refund's begin and its settle). nil
// takes it away.
func (s *Server) BeforeRefund(fn func(chargeID string)) {
	if fn == nil {
		s.beforeRefund.Store(nil)
		return
	}
	s.beforeRefund.Store(&fn)
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
