package gatewaytest

import (
	"context"
	"sync"
	"time"
)

// HoldBack is a gateway's pm_card_slow hold-back (Options.Sleep) that the
// test ends: a slow charge's answer waits until Release, or until its
// request ends, instead of for a wall-clock delay. A test then stages
// "charged, answer late" against its own steps (a cancel, a row taken),
// and a loaded machine cannot reorder them or make the test wait out the
// delay.
type HoldBack struct {
	release chan struct{}
	once    sync.Once
}

// NewHoldBack returns a hold-back that holds every slow answer until
// Release.
func NewHoldBack() *HoldBack { return &HoldBack{release: make(chan struct{})} }

// Sleep is the gateway's Options.Sleep.
func (h *HoldBack) Sleep(ctx context.Context, _ time.Duration) error {
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release lets every slow answer go, those held now and those to come.
func (h *HoldBack) Release() { h.once.Do(func() { close(h.release) }) }
