package lab

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// Recorder is a span processor (sdktrace.SpanProcessor) that keeps the
// spans of races' requests in the lab's store, where the lab that ran the
// race reads them back, whichever replica served each request: a race
// through the balancer lands on every replica, and each one's copy of
// the service records what it served.
//
// It never holds a request up. OnStart names the span's run and request
// (AttrRun, AttrRequest) from the context's mark; OnEnd hands a span of a
// race to a bounded queue and returns, dropping it if the queue is full.
// One goroutine writes what the queue holds in batches, at most Batch
// spans or every Every, and keeps at most PerRun spans of one run; what
// it drops is counted in shop_lab_spans_dropped_total{reason}.
//
// One Recorder serves every copy of the service in the process (the live
// copy, each sandbox), registered with each one's tracer provider: a
// provider's Shutdown (a sandbox's, at the end of its run) only flushes
// it. Close stops it.
type Recorder struct {
	store  SpanWriter
	opts   RecorderOptions
	queue  chan queued
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once

	queueFull, overCap, unwritten atomic.Int64
}

// SpanWriter stores a batch of spans (SpanStore.Write).
type SpanWriter interface {
	Write(ctx context.Context, spans []Span) error
}

// RecorderOptions bound a Recorder. Zero values take the defaults.
type RecorderOptions struct {
	Queue  int           // spans waiting to be written; default 4096
	Batch  int           // spans in one write; default 256
	Every  time.Duration // the longest a span waits for its batch; default 50 ms
	PerRun int           // spans kept of one run; default MaxRunSpans
	// Metrics, when set, gets shop_lab_spans_dropped_total.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// MaxRunSpans is how many spans of one run a replica keeps: a race of
// MaxSize payments makes about ten spans a request.
const MaxRunSpans = 4000

// writeTimeout bounds one batch's write.
const writeTimeout = 2 * time.Second

// queued is a span to write, or a ForceFlush's request to be told when
// everything before it is written.
type queued struct {
	span    sdktrace.ReadOnlySpan
	flushed chan struct{}
}

// NewRecorder starts a recorder writing to store.
func NewRecorder(store SpanWriter, opts RecorderOptions) (*Recorder, error) {
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.Batch <= 0 {
		opts.Batch = 256
	}
	if opts.Every <= 0 {
		opts.Every = 50 * time.Millisecond
	}
	if opts.PerRun <= 0 {
		opts.PerRun = MaxRunSpans
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Recorder{store: store, opts: opts, queue: make(chan queued, opts.Queue),
		stop: make(chan struct{}), done: make(chan struct{})}
	if opts.Metrics != nil {
		for reason, n := range map[string]*atomic.Int64{"queue_full": &r.queueFull, "run_cap": &r.overCap, "write_error": &r.unwritten} {
			c := prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "shop_lab_spans_dropped_total",
				Help:        "Spans of the race lab's requests not kept, by reason: the queue was full, the run had its share, the write failed.",
				ConstLabels: prometheus.Labels{"reason": reason},
			}, func() float64 { return float64(n.Load()) })
			if err := metrics.Register(opts.Metrics.Registry, c); err != nil {
				return nil, err
			}
		}
	}
	go r.loop()
	return r, nil
}

// OnStart names the run and the request of a span started in a race's
// request.
func (r *Recorder) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if m, ok := MarkOf(parent); ok {
		s.SetAttributes(AttrRun.String(m.Run), AttrRequest.Int(m.Request))
	}
}

// OnEnd queues a span of a race's request, or drops it if the queue is
// full: never waits.
func (r *Recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	if runOf(s) == "" {
		return
	}
	select {
	case r.queue <- queued{span: s}:
	default:
		r.queueFull.Add(1)
	}
}

// ForceFlush returns once every span queued before it is written, or ctx
// ends.
func (r *Recorder) ForceFlush(ctx context.Context) error {
	marker := queued{flushed: make(chan struct{})}
	select {
	case r.queue <- marker:
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-marker.flushed:
		return nil
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown flushes: the recorder outlives the providers it serves.
func (r *Recorder) Shutdown(ctx context.Context) error { return r.ForceFlush(ctx) }

// Close writes what is queued and stops the recorder.
func (r *Recorder) Close() {
	r.closed.Do(func() { close(r.stop) })
	<-r.done
}

// Dropped is how many spans of races were not kept.
func (r *Recorder) Dropped() int64 {
	return r.queueFull.Load() + r.overCap.Load() + r.unwritten.Load()
}

// loop is the writer: it takes spans off the queue, keeps each run's
// share, and writes them in batches.
func (r *Recorder) loop() {
	defer close(r.done)
	tick := time.NewTicker(r.opts.Every)
	defer tick.Stop()
	var batch []Span
	kept := runShares{limit: r.opts.PerRun}
	write := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := r.store.Write(ctx, batch)
		cancel()
		if err != nil {
			r.unwritten.Add(int64(len(batch)))
			r.opts.Logger.Warn("lab spans not written", "spans", len(batch), "err", err)
		}
		batch = nil
	}
	take := func(q queued) {
		if q.flushed != nil {
			write()
			close(q.flushed)
			return
		}
		sp := spanOf(q.span)
		if !kept.take(sp.Run) {
			r.overCap.Add(1)
			return
		}
		if batch = append(batch, sp); len(batch) >= r.opts.Batch {
			write()
		}
	}
	for {
		select {
		case q := <-r.queue:
			take(q)
		case <-tick.C:
			write()
		case <-r.stop:
			for {
				select {
				case q := <-r.queue:
					take(q)
				default:
					write()
					return
				}
			}
		}
	}
}

// runShares counts the spans kept of the latest runs, so that no run
// keeps more than limit; the oldest run is forgotten past maxRuns.
type runShares struct {
	limit int
	kept  map[string]int
	order []string
}

const maxRuns = 64

func (s *runShares) take(run string) bool {
	if s.kept == nil {
		s.kept = map[string]int{}
	}
	n, seen := s.kept[run]
	if !seen {
		if len(s.order) == maxRuns {
			delete(s.kept, s.order[0])
			s.order = s.order[1:]
		}
		s.order = append(s.order, run)
	}
	if n >= s.limit {
		return false
	}
	s.kept[run] = n + 1
	return true
}

var _ sdktrace.SpanProcessor = (*Recorder)(nil)
