package layers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// recorder is a Locker that records the keys it takes and releases, and
// answers resource_busy for the keys in busy.
type recorder struct {
	events []string
	busy   map[string]bool
}

func (r *recorder) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	if r.busy[key] {
		return &problem.Error{Code: problem.ResourceBusy, Detail: "held"}
	}
	r.events = append(r.events, "take "+key)
	err := fn(ctx)
	r.events = append(r.events, "release "+key)
	return err
}

func stopped(m *metrics.Metrics, flow, layer string) float64 {
	return testutil.ToFloat64(m.ConflictsStopped.WithLabelValues(flow, layer))
}

func TestFlow_LockAll(t *testing.T) {
	t.Run("InOrderReleasedInReverse", func(t *testing.T) {
		r := &recorder{}
		f := layers.Flow{Name: "f", Locker: r}
		ran := false
		err := f.LockAll(context.Background(), []string{"a", "b", "c"}, func(context.Context) error {
			ran = true
			return nil
		})
		want := []string{"take a", "take b", "take c", "release c", "release b", "release a"}
		if err != nil || !ran || !slices.Equal(r.events, want) {
			t.Fatalf("err %v, ran %v, events %v; want nil, true, %v", err, ran, r.events, want)
		}
	})
	t.Run("NoKeysTakesNoLock", func(t *testing.T) {
		r := &recorder{}
		f := layers.Flow{Name: "f", Locker: r}
		ran := false
		if err := f.LockAll(context.Background(), nil, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("err %v, ran %v", err, ran)
		}
		if len(r.events) > 0 {
			t.Errorf("a flow with no lock to take took one: %v", r.events)
		}
	})
	t.Run("BusyCountedOnlyWhenTheWorkDidNotRun", func(t *testing.T) {
		m := metrics.New()
		r := &recorder{busy: map[string]bool{"b": true}}
		f := layers.Flow{Name: "f", Locker: r, Metrics: m}
		ran := false
		err := f.LockAll(context.Background(), []string{"a", "b"}, func(context.Context) error { ran = true; return nil })
		if problem.CodeOf(err) != problem.ResourceBusy || ran {
			t.Fatalf("err %v, ran %v; want resource_busy without the work", err, ran)
		}
		if got := stopped(m, "f", "lock"); got != 1 {
			t.Errorf("lock stopped %v, want 1", got)
		}
		// A busy answer of the work itself (its rows kept changing) is not
		// the lock's.
		err = f.Lock(context.Background(), "a", func(context.Context) error { return f.KeepsChanging() })
		if problem.CodeOf(err) != problem.ResourceBusy {
			t.Fatalf("err %v", err)
		}
		if got := stopped(m, "f", "lock"); got != 1 {
			t.Errorf("lock stopped %v after the work's own busy, want still 1", got)
		}
	})
}

func TestFlow_Retry(t *testing.T) {
	errMoved := errors.New("moved")
	t.Run("UntilNotARace", func(t *testing.T) {
		m := metrics.New()
		f := layers.Flow{Name: "f", Noun: "thing", Metrics: m}
		var tries []int
		err := f.Retry(context.Background(), func(attempt int) error {
			tries = append(tries, attempt)
			switch attempt {
			case 1:
				return layers.Lost(layers.Version, errMoved)
			case 2:
				return layers.Again(errMoved)
			}
			return nil
		})
		if err != nil || !slices.Equal(tries, []int{1, 2, 3}) {
			t.Fatalf("err %v, tries %v", err, tries)
		}
		if v, c := stopped(m, "f", "version"), stopped(m, "f", "constraint"); v != 1 || c != 0 {
			t.Errorf("version %v, constraint %v; want 1 and 0 (Again is not counted)", v, c)
		}
	})
	t.Run("BoundedAndBusy", func(t *testing.T) {
		m := metrics.New()
		f := layers.Flow{Name: "f", Noun: "thing", Metrics: m}
		n := 0
		err := f.Retry(context.Background(), func(int) error { n++; return layers.Lost(layers.Constraint, errMoved) })
		var pe *problem.Error
		if !errors.As(err, &pe) || pe.Code != problem.ResourceBusy || pe.RetryAfter <= 0 ||
			!strings.Contains(pe.Detail, "the thing keeps changing") {
			t.Fatalf("err %#v, want resource_busy naming the thing, with Retry-After", err)
		}
		if n != layers.MaxTries {
			t.Errorf("%d tries, want %d", n, layers.MaxTries)
		}
		if got := stopped(m, "f", "constraint"); got != float64(layers.MaxTries) {
			t.Errorf("constraint stopped %v, want %d", got, layers.MaxTries)
		}
	})
	t.Run("OtherErrorsEndIt", func(t *testing.T) {
		f := layers.Flow{Name: "f"}
		n := 0
		err := f.Retry(context.Background(), func(int) error { n++; return errMoved })
		if !errors.Is(err, errMoved) || n != 1 {
			t.Fatalf("err %v after %d tries, want moved after 1", err, n)
		}
	})
	t.Run("RaceUnwraps", func(t *testing.T) {
		if err := layers.Lost(layers.Version, errMoved); !errors.Is(err, errMoved) {
			t.Errorf("Lost(%v) does not unwrap to it", errMoved)
		}
	})
}
