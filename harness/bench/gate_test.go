package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/docblock"
)

// fakeBox is a gate whose box reads loads one after the other (the last
// one from then on), and whose sleeps only count.
type fakeBox struct {
	loads []float64
	reads int
	slept time.Duration
}

func (f *fakeBox) gate() boxGate {
	return boxGate{
		read: func() docblock.Box {
			l := f.loads[min(f.reads, len(f.loads)-1)]
			f.reads++
			return docblock.Box{Cores: 2, Load: l}
		},
		sleep: func(_ context.Context, d time.Duration) error { f.slept += d; return nil },
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestDocGate_RefusesALoadedBox: `shop bench … -doc` on a box busier than
// its cores stops before anything else: no scratch database (-db names a
// server that is not there, which would be the error otherwise), no
// commit check (the file is in no repository), the file untouched; and
// the error names the load, the cores and the two ways on.
func TestDocGate_RefusesALoadedBox(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	const text = "# Benchmarks\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"orders", "payments", "likes", "seats", "strategies", "outside"} {
		box := &fakeBox{loads: []float64{5.5}}
		err := runOn(context.Background(), []string{what, "-doc", doc, "-db", "postgres://nobody@127.0.0.1:1/none", "-redis", "127.0.0.1:1"},
			quietLogger(), box.gate())
		if !errors.Is(err, ErrLoadedBox) {
			t.Fatalf("bench %s on a box at load 5.5 with 2 cores: err = %v, want ErrLoadedBox", what, err)
		}
		for _, want := range []string{"5.50", "2 cores", "-loaded", "-settle", "nothing was measured"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("bench %s: the refusal %q does not say %q", what, err, want)
			}
		}
		if box.slept != 0 {
			t.Errorf("bench %s waited %s without -settle", what, box.slept)
		}
	}
	if b, _ := os.ReadFile(doc); string(b) != text {
		t.Errorf("the refused runs changed %s:\n%s", doc, b)
	}
}

// TestDocGate_Settles: with -settle the gate reads the box again every
// loadPoll until it is quiet, and refuses it once the wait is used up.
func TestDocGate_Settles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		settle time.Duration
		loads  []float64
		quiet  bool
		slept  time.Duration
	}{
		{"quiet at once", 0, []float64{1.2}, true, 0},
		{"quiet after two readings", time.Minute, []float64{6, 3, 1.9}, true, 2 * loadPoll},
		{"still loaded when the wait is up", 2 * loadPoll, []float64{6, 5, 4, 1}, false, 2 * loadPoll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBox{loads: tc.loads}
			box, err := f.gate().wait(context.Background(), benchOptions{settle: tc.settle}, quietLogger())
			if tc.quiet != (err == nil) {
				t.Fatalf("err = %v, want quiet %t", err, tc.quiet)
			}
			if f.slept != tc.slept {
				t.Errorf("waited %s, want %s", f.slept, tc.slept)
			}
			if tc.quiet && strings.Contains(box.String(), docblock.LoadedMarker) {
				t.Errorf("a quiet box is named %q", box)
			}
			if !tc.quiet && !strings.Contains(err.Error(), "after waiting "+tc.settle.String()) {
				t.Errorf("the refusal %q does not say how long it waited", err)
			}
		})
	}
}

// TestDocGate_LoadedWritesMarked: -loaded lets a loaded box through, and
// the machine its blocks name carries the marker docs/docs_test.go
// reports; a box whose load cannot be read is refused without it.
func TestDocGate_LoadedWritesMarked(t *testing.T) {
	f := &fakeBox{loads: []float64{7.36}}
	box, err := f.gate().wait(context.Background(), benchOptions{loaded: true}, quietLogger())
	if err != nil {
		t.Fatalf("-loaded: %v", err)
	}
	b := docblock.Block{Name: "benchmarks/orders", Command: "bin/shop bench orders -doc docs/BENCHMARKS.md -loaded", Commit: "0123456789abcdef", Machine: box.String()}
	text, err := b.Render()
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := docblock.Parse(text)
	if err != nil || len(parsed) != 1 || !parsed[0].Loaded() {
		t.Fatalf("the block written with -loaded does not read back as loaded (%v):\n%s", err, text)
	}
	if !strings.Contains(text, "load 7.36 at the start, "+docblock.LoadedMarker) {
		t.Errorf("the provenance line does not show the load and the marker:\n%s", text)
	}

	unknown := boxGate{read: func() docblock.Box { return docblock.Box{Cores: 2, LoadErr: errors.New("no /proc/loadavg")} }}
	if _, err := unknown.wait(context.Background(), benchOptions{}, quietLogger()); !errors.Is(err, ErrLoadedBox) {
		t.Errorf("a box whose load cannot be read: err = %v, want ErrLoadedBox", err)
	}
}
