package apptest

import (
	"context"
	"maps"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// NewAblation is two replicas with row's layers, and the row's
// constraints (by name, from the flows' catalogues) dropped from the
// test's database (a row with the
// constraints off and nothing to drop fails: its switch would switch
// nothing). The flows run on the row's variants (harness/variants.For),
// which tell the row's probe when they take their layer off; deps
// carries what else the row needs (a Logger). The lock runs in strict mode: a row with the lock on measures
// the lock, not its absence when a loaded machine's Redis answers late and
// degrade mode runs the work unlocked (a refusal is retried by the
// clients).
func NewAblation(t *testing.T, row ablation.Row, deps app.Deps, dropped ...string) *Env {
	t.Helper()
	return NewAblationWith(t, row, nil, deps, dropped...)
}

// NewAblationWith is NewAblation with vars over the service's environment
// (SHOP_GATEWAY_REFUND_LIMIT=off, for a flow whose matrix runs with the
// processor's own check off).
func NewAblationWith(t *testing.T, row ablation.Row, vars map[string]string, deps app.Deps, dropped ...string) *Env {
	t.Helper()
	deps.Variants = variants.For(row.Layers, row.Variant, row.Layers.Probe())
	all := map[string]string{"SHOP_LOCK_MODE": "strict"}
	maps.Copy(all, vars)
	e := NewWith(t, 2, all, deps)
	if !row.Layers.On(layers.Constraint) {
		e.Drop(t, dropped...)
	}
	return e
}

// Drop drops the constraints named (from the flows' catalogues, app.Layer4)
// from the test's database: layer 4 off. Naming none fails the test: the
// row's switch would switch nothing.
func (e *Env) Drop(t testing.TB, names ...string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("the constraints are off, but the flow names none to drop")
	}
	for _, name := range names {
		c, ok := postgres.Lookup(app.Layer4, name)
		if !ok {
			t.Fatalf("%s is in no flow's catalogue of constraints (app.Layer4)", name)
		}
		e.broken.Store(true)
		if _, err := e.DB.Exec(context.Background(), c.Drop()); err != nil {
			t.Fatalf("%s: %v", c.Drop(), err)
		}
	}
}
