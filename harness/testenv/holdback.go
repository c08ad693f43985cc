package testenv

import (
	"context"
	"sync"
	"time"
)

// HoldBack is a stand-in provider's hold-back (the Sleep of
// gateway.Options and mailer.Options) that the test ends: every answer
// held back waits until Release, or until its request ends, instead of for
// a wall-clock delay. A test then stages "done, but the answer is late"
// against its own steps (a cancel, a retry, a row taken), and a loaded
// machine can neither reorder them nor make the test wait out the delay.
type HoldBack struct {
	asked   chan time.Duration
	release chan struct{}
	once    sync.Once
}

// holdBackAsks is how many asked durations a HoldBack keeps for the test
// to read; a test that never reads them does not block the provider.
const holdBackAsks = 64

// NewHoldBack returns a hold-back that holds every answer until Release.
func NewHoldBack() *HoldBack {
	return &HoldBack{asked: make(chan time.Duration, holdBackAsks), release: make(chan struct{})}
}

// Sleep is the provider's Options.Sleep.
func (h *HoldBack) Sleep(ctx context.Context, d time.Duration) error {
	select {
	case h.asked <- d:
	default:
	}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Asked delivers each hold-back the provider asked for, in order; while 64
// wait unread, later ones are not kept. With the provider's clock frozen
// what it asked is exact, and receiving from it waits until an answer is
// held.
func (h *HoldBack) Asked() <-chan time.Duration { return h.asked }

// Release lets every held answer go, those held now and those to come.
func (h *HoldBack) Release() { h.once.Do(func() { close(h.release) }) }
