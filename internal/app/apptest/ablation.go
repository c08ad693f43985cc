package apptest

import (
	"context"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/ablation"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
)

// NewAblation is two replicas with row's layers, and the row's
// constraints dropped from the test's database (a row with the
// constraints off and nothing to drop fails: its switch would switch
// nothing). deps carries what else the flow's row needs (NaiveStock, a
// Logger). The lock runs in strict mode: a row with the lock on measures
// the lock, not its absence when a loaded machine's Redis answers late and
// degrade mode runs the work unlocked (a refusal is Retried by the
// clients).
func NewAblation(t *testing.T, row ablation.Row, deps app.Deps, dropped ...string) *Env {
	t.Helper()
	deps.Layers = row.Layers
	e := NewWith(t, 2, map[string]string{"SHOP_LOCK_MODE": "strict"}, deps)
	if !row.Layers.On(layers.Constraint) {
		if len(dropped) == 0 {
			t.Fatal("the constraints are off, but the flow names none to drop")
		}
		for _, sql := range dropped {
			if _, err := e.DB.Exec(context.Background(), sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	return e
}

// Retried sends a request as a well-behaved client does: again, with the
// same key, when the answer says when to come back (Retry-After: a busy
// resource, a request in progress, a lock quorum a loaded machine's Redis
// did not answer in time), within a bound. It returns the last answer.
func Retried(send func(attempt int) Response) Response {
	for attempt := 1; ; attempt++ {
		res := send(attempt)
		if res.Header.Get("Retry-After") == "" || attempt == 20 {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
}
