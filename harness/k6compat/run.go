package k6compat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
)

// Limits bound a run whatever the script's options ask for: a compatibility
// check runs every scenario, briefly. A zero field bounds nothing, as for
// a load test (shop load), which runs what the script asks.
type Limits struct {
	VUs          int           // at most this many VUs per scenario
	Iterations   int           // at most this many iterations per scenario
	Duration     time.Duration // iterations start for at most this long (also caps startTime)
	GracefulStop time.Duration // then running ones get at most this long before they are interrupted
}

// Config is one run.
type Config struct {
	Script    string            // path to the entry file
	Env       map[string]string // __ENV
	Limits    Limits
	Shortcuts Shortcuts     // the command line's --vus, --duration, --iterations
	Live      *Live         // updated while the run goes on; nil: none
	Timeout   time.Duration // the whole run, setup and teardown included (default 5m)
	Client    *http.Client  // default: a client of its own
	Logf      func(format string, args ...any)
}

// Result is what a run saw. Failures says whether it passed.
type Result struct {
	Checks          []CheckResult
	Thresholds      []ThresholdResult
	Iterations      int      // completed
	Interrupted     int      // ended by the time bound
	IterationErrors []string // exceptions out of the default/exec function (the first 20)
	IterationFails  int      // how many there were
	SetupError      string
	TeardownError   string
	Unsupported     []string           // k6 APIs the script reached for that this runner lacks (the first 20)
	HasChecksLimit  bool               // options.thresholds has one on checks
	Counters        map[string]float64 // every Counter's count, for the log
	Metrics         []Metric           // every metric, by name, with its samples
	Start           time.Time          // when setup began
	Duration        time.Duration      // from setup to the end of teardown
}

// CheckResult counts one check's outcomes.
type CheckResult struct {
	Group, Name   string
	Passes, Fails int
}

// ThresholdResult is one evaluated threshold expression.
type ThresholdResult struct {
	Metric, Expr string            // as written: "http_req_duration{flow:pay}", "p(95)<500"
	Name         string            // the metric's name: "http_req_duration"
	Tags         map[string]string // the sub-metric's filter: {flow: pay}
	Value        float64
	OK           bool
}

// Failures lists why the run fails, as k6 would exit non-zero, plus what
// k6 only reports: an iteration that threw, a failed check that no
// threshold on checks allows, no iteration completed at all.
func (r *Result) Failures() []string {
	var out []string
	if r.SetupError != "" {
		out = append(out, "setup threw: "+r.SetupError)
	}
	if r.TeardownError != "" {
		out = append(out, "teardown threw: "+r.TeardownError)
	}
	for _, th := range r.Thresholds {
		if !th.OK {
			out = append(out, fmt.Sprintf("threshold %s %q crossed: value %g", th.Metric, th.Expr, th.Value))
		}
	}
	for _, u := range r.Unsupported {
		out = append(out, "the script used what k6 has and this runner lacks: "+u)
	}
	if r.IterationFails > 0 {
		out = append(out, fmt.Sprintf("%d iterations threw; first: %s", r.IterationFails, r.IterationErrors[0]))
	}
	if !r.HasChecksLimit {
		for _, c := range r.Checks {
			if c.Fails > 0 {
				out = append(out, fmt.Sprintf("check %q failed %d of %d times and no threshold on checks allows it", c.Name, c.Fails, c.Passes+c.Fails))
			}
		}
	}
	if r.SetupError == "" && r.Iterations == 0 {
		out = append(out, "no iteration completed")
	}
	return out
}

// runner is the state one run shares between its VUs.
type runner struct {
	ctx     context.Context
	program *goja.Program
	reg     *registry
	client  *http.Client
	logf    func(format string, args ...any)
	env     map[string]string
	nextVU  atomic.Int64
	live    *Live

	mu       sync.Mutex
	checks   []CheckResult
	checkIdx map[[2]string]int
	res      Result
}

func (r *runner) recordCheck(group, name string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, seen := r.checkIdx[[2]string{group, name}]
	if !seen {
		i = len(r.checks)
		r.checkIdx[[2]string{group, name}] = i
		r.checks = append(r.checks, CheckResult{Group: group, Name: name})
	}
	if ok {
		r.checks[i].Passes++
	} else {
		r.checks[i].Fails++
		r.live.failedChecks.Add(1)
	}
}

// Run runs the script: init code, setup, every scenario bounded by
// cfg.Limits, teardown, then the thresholds. The error is for a script this
// runner cannot run (a syntax error, an unsupported module, option or
// executor, a threshold on no metric); what the script did is in Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Live == nil {
		cfg.Live = &Live{}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	prg, err := compile(cfg.Script)
	if err != nil {
		return nil, err
	}
	r := &runner{ctx: ctx, program: prg, reg: newRegistry(), client: cfg.Client, logf: cfg.Logf,
		env: cfg.Env, checkIdx: map[[2]string]int{}, live: cfg.Live}

	// VU 0 reads the options, then runs setup and teardown, as k6's does.
	vu0, err := newVU(r, 0, "", cfg.Env, nil)
	if err != nil {
		return nil, err
	}
	if v := vu0.exports.Get("handleSummary"); v != nil && !goja.IsUndefined(v) {
		return nil, errors.New("handleSummary is not supported by the k6 compatibility runner")
	}
	var opts map[string]any
	if o := vu0.exports.Get("options"); o != nil && !goja.IsUndefined(o) {
		var ok bool
		if opts, ok = o.Export().(map[string]any); !ok {
			return nil, errors.New("options must be an object")
		}
	}
	if opts, err = cfg.Shortcuts.override(opts); err != nil {
		return nil, err
	}
	p, err := parseOptions(opts, cfg.Limits)
	if err != nil {
		return nil, err
	}
	vu0.tags = p.tags
	for _, th := range p.thresholds {
		if err := r.reg.validate(th); err != nil {
			return nil, err
		}
		r.res.HasChecksLimit = r.res.HasChecksLimit || th.metric == "checks"
	}
	for _, sc := range p.scenarios {
		if _, ok := goja.AssertFunction(vu0.exports.Get(sc.exec)); !ok {
			return nil, fmt.Errorf("scenario %q: the script exports no function %q", sc.name, sc.exec)
		}
	}

	start := time.Now()
	data, setupErr := vu0.lifecycle("setup", goja.Undefined(), optDuration(opts, "setupTimeout"))
	if setupErr != "" {
		// k6 ends a run whose setup threw without judging thresholds.
		r.res.SetupError = setupErr
		return r.finish(plan{}, start), nil
	}
	dataJSON := ""
	if data != nil && !goja.IsUndefined(data) {
		stringify, _ := goja.AssertFunction(vu0.rt.Get("JSON").ToObject(vu0.rt).Get("stringify"))
		s, err := stringify(goja.Undefined(), data)
		if err != nil {
			return nil, fmt.Errorf("setup data is not JSON: %s", describe(err))
		}
		dataJSON = s.String()
	}

	var planned time.Duration
	var maxVUs int64
	for _, sc := range p.scenarios {
		planned = max(planned, sc.startTime+sc.duration)
		maxVUs += int64(sc.vus)
	}
	r.live.planned.Store(int64(planned))
	r.live.maxVUs.Store(maxVUs)
	r.reg.add("vus_max", float64(maxVUs), nil)
	stopVUs := r.sampleVUs()

	var wg sync.WaitGroup
	errs := make(chan error, len(p.scenarios))
	for _, sc := range p.scenarios {
		wg.Go(func() {
			if err := r.runScenario(sc, p.tags, dataJSON); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	stopVUs()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}

	var arg goja.Value = goja.Undefined()
	if dataJSON != "" {
		if arg, err = vu0.parse(goja.Undefined(), vu0.rt.ToValue(dataJSON)); err != nil {
			return nil, err
		}
	}
	if _, tdErr := vu0.lifecycle("teardown", arg, optDuration(opts, "teardownTimeout")); tdErr != "" {
		r.res.TeardownError = tdErr
	}
	return r.finish(p, start), nil
}

func optDuration(opts map[string]any, key string) time.Duration {
	if v, ok := opts[key]; ok {
		if d, err := duration(v, key); err == nil {
			return d
		}
	}
	return 60 * time.Second
}

// lifecycle calls setup or teardown if the script exports it; the string
// is the exception it threw.
func (v *vu) lifecycle(name string, arg goja.Value, timeout time.Duration) (goja.Value, string) {
	fn, ok := goja.AssertFunction(v.exports.Get(name))
	if !ok {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(v.run.ctx, timeout)
	defer cancel()
	v.ctx = ctx
	stop := context.AfterFunc(ctx, func() { v.rt.Interrupt(name + " timed out") })
	defer func() {
		stop()
		v.rt.ClearInterrupt()
	}()
	res, err := fn(goja.Undefined(), arg)
	if err != nil {
		return nil, describe(err)
	}
	if p, isPromise := res.Export().(*goja.Promise); isPromise {
		return nil, fmt.Sprintf("%s is async (state %v): not supported by the k6 compatibility runner", name, p.State())
	}
	return res, ""
}

// sampleVUs records the vus gauge every second, as k6 does, until the
// returned function is called (a VU starting or ending records it too).
func (r *runner) sampleVUs() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			r.reg.add("vus", float64(r.live.vus.Load()), nil)
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func (r *runner) finish(p plan, start time.Time) *Result {
	took := time.Since(start)
	elapsed := took.Seconds()
	for _, th := range p.thresholds {
		got, ok := r.reg.evaluate(th, elapsed)
		r.res.Thresholds = append(r.res.Thresholds, ThresholdResult{Metric: th.key, Expr: th.expr,
			Name: th.metric, Tags: th.filter, Value: got, OK: ok})
	}
	r.res.Start, r.res.Duration = start, took
	r.res.Metrics = r.reg.export()
	r.mu.Lock()
	r.res.Checks = append([]CheckResult(nil), r.checks...)
	r.mu.Unlock()
	r.res.Counters = map[string]float64{}
	r.reg.mu.Lock()
	var counters []*metric
	for _, m := range r.reg.metrics {
		if m.typ == counterType {
			counters = append(counters, m)
		}
	}
	r.reg.mu.Unlock()
	for _, m := range counters {
		r.res.Counters[m.name] = r.reg.values(m, nil)["count"]
	}
	res := r.res
	return &res
}

// runScenario creates the scenario's VUs (each runs the init code) and
// runs its executor. Iterations start until the scenario's duration is
// over; running ones are interrupted gracefulStop later.
func (r *runner) runScenario(sc scenario, optTags map[string]string, dataJSON string) error {
	select {
	case <-time.After(sc.startTime):
	case <-r.ctx.Done():
		return nil
	}
	env := maps.Clone(r.env)
	maps.Copy(env, sc.env)
	tags := maps.Clone(optTags)
	maps.Copy(tags, sc.tags)
	vus := make([]*vu, sc.vus)
	for i := range vus {
		v, err := newVU(r, int(r.nextVU.Add(1)), sc.name, env, tags)
		if err != nil {
			return err
		}
		vus[i] = v
	}
	startCtx, cancelStart := context.WithTimeout(r.ctx, sc.duration)
	defer cancelStart()
	hardCtx, cancelHard := context.WithTimeout(r.ctx, sc.duration+sc.grace)
	defer cancelHard()

	var started atomic.Int64
	take := func(limit int) bool { return startCtx.Err() == nil && int(started.Add(1)) <= limit }
	var wg sync.WaitGroup
	active := func() func() {
		r.reg.add("vus", float64(r.live.vus.Add(1)), nil)
		return func() { r.reg.add("vus", float64(r.live.vus.Add(-1)), nil) }
	}
	switch sc.executor {
	case "shared-iterations", "constant-vus":
		for _, v := range vus {
			wg.Go(func() {
				defer active()()
				for take(sc.iterations) && v.iterate(hardCtx, sc.exec, dataJSON) {
				}
			})
		}
	case "per-vu-iterations":
		for _, v := range vus {
			wg.Go(func() {
				defer active()()
				for i := 0; i < sc.iterations && startCtx.Err() == nil && v.iterate(hardCtx, sc.exec, dataJSON); i++ {
				}
			})
		}
	case "constant-arrival-rate":
		idle := make(chan *vu, len(vus))
		for _, v := range vus {
			idle <- v
		}
		tick := time.NewTicker(sc.interval)
		defer tick.Stop()
		for n := 0; n < sc.iterations; n++ {
			if n > 0 {
				select {
				case <-tick.C:
				case <-startCtx.Done():
				}
			}
			if startCtx.Err() != nil {
				break
			}
			select {
			case v := <-idle:
				wg.Go(func() {
					defer active()()
					v.iterate(hardCtx, sc.exec, dataJSON)
					idle <- v
				})
			default: // every VU busy: k6 drops the iteration too
				r.reg.add("dropped_iterations", 1, map[string]string{"scenario": sc.name})
			}
		}
	}
	wg.Wait()
	return nil
}

// iterate runs one iteration; false once the scenario's time is up.
func (v *vu) iterate(ctx context.Context, exec, dataJSON string) bool {
	if ctx.Err() != nil {
		return false
	}
	rt := v.rt
	v.ctx, v.group = ctx, ""
	_ = rt.Set("__ITER", v.iter)
	v.iter++
	stop := context.AfterFunc(ctx, func() { rt.Interrupt("scenario ended") })
	defer func() {
		stop()
		rt.ClearInterrupt()
	}()
	var data goja.Value = goja.Undefined()
	if dataJSON != "" {
		d, err := v.parse(goja.Undefined(), rt.ToValue(dataJSON))
		if err != nil {
			v.run.iterationError(describe(err))
			return true
		}
		data = d
	}
	fn, _ := goja.AssertFunction(v.exports.Get(exec))
	start := time.Now()
	res, err := fn(goja.Undefined(), data)
	var interrupted *goja.InterruptedError
	switch {
	case errors.As(err, &interrupted):
		v.run.mu.Lock()
		v.run.res.Interrupted++
		v.run.mu.Unlock()
		return false
	case err != nil:
		v.run.iterationError(fmt.Sprintf("VU %d iteration %d: %s", v.id, v.iter-1, describe(err)))
		return true
	}
	if p, isPromise := res.Export().(*goja.Promise); isPromise {
		v.run.iterationError(fmt.Sprintf("%s is async (state %v): not supported by the k6 compatibility runner", exec, p.State()))
		return true
	}
	tags := v.sampleTags(nil)
	delete(tags, "group")
	v.run.reg.add("iterations", 1, tags)
	v.run.reg.add("iteration_duration", ms(time.Since(start)), tags)
	v.run.mu.Lock()
	v.run.res.Iterations++
	v.run.mu.Unlock()
	v.run.live.iterations.Add(1)
	return true
}

func (r *runner) iterationError(msg string) {
	r.logf("%s", msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.IterationFails++
	if len(r.res.IterationErrors) < 20 {
		r.res.IterationErrors = append(r.res.IterationErrors, msg)
	}
}
