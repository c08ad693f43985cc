package k6compat

import (
	"sync/atomic"
	"time"
)

// Metric is one metric of a finished run, with every sample it got.
type Metric struct {
	Name    string
	Type    string // counter, gauge, rate or trend
	IsTime  bool   // a trend or gauge of milliseconds
	Samples []Sample
}

// Sample is one value added to a metric.
type Sample struct {
	Time  time.Time
	Value float64
	Tags  map[string]string
}

// Values aggregates the samples whose tags hold every pair of filter (nil:
// all of them), as k6's summary does: count for a counter; value, min and
// max for a gauge; rate, passes and fails for a rate; count, avg, min,
// max, med, p(90), p(95) and p(99) for a trend.
func (m Metric) Values(filter map[string]string) map[string]float64 {
	var vs []float64
	for _, s := range m.Samples {
		if matches(s.Tags, filter) {
			vs = append(vs, s.Value)
		}
	}
	return aggregate(metricType(m.Type), vs)
}

// Live is what a run has done so far, for a progress display: Run updates
// it, any goroutine may read it meanwhile. The zero value is ready.
type Live struct {
	planned      atomic.Int64 // nanoseconds: the latest end of a scenario
	maxVUs       atomic.Int64
	vus          atomic.Int64
	iterations   atomic.Int64
	requests     atomic.Int64
	failedChecks atomic.Int64
}

// Progress is a snapshot of Live.
type Progress struct {
	Planned      time.Duration // how long the scenarios may take, gracefulStop aside
	VUs, MaxVUs  int64         // VUs running now; VUs in all scenarios
	Iterations   int64         // completed
	Requests     int64         // HTTP requests answered or failed
	FailedChecks int64
}

// Progress reads l.
func (l *Live) Progress() Progress {
	return Progress{
		Planned: time.Duration(l.planned.Load()), VUs: l.vus.Load(), MaxVUs: l.maxVUs.Load(),
		Iterations: l.iterations.Load(), Requests: l.requests.Load(), FailedChecks: l.failedChecks.Load(),
	}
}
