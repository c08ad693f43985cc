//go:build faults

package faults

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// size is how long each phase lasts and how much load there is. Small is
// what CI runs; SHOP_FAULTS_SIZE=large is for a longer look.
type size struct {
	name                  string
	before, during, after time.Duration
	clients               int // per flow
	users, posts          int
	flashStock            int
}

func sizeFromEnv() size {
	if os.Getenv("SHOP_FAULTS_SIZE") == "large" {
		return size{name: "large", before: 8 * time.Second, during: 15 * time.Second, after: 12 * time.Second,
			clients: 4, users: 200, posts: 5, flashStock: 6000}
	}
	return size{name: "small", before: 2 * time.Second, during: 5 * time.Second, after: 4 * time.Second,
		clients: 2, users: 60, posts: 3, flashStock: 1500}
}

var allFlows = []string{flowOrders, flowPay, flowLikes, flowSeats}

// scenario is one fault under load.
type scenario struct {
	row   string
	name  string
	flows []string
	// fault starts the fault and returns what ends it.
	fault func(t *testing.T, c *cluster) (heal func())
	// during overrides the size's fault phase.
	during time.Duration
	// unusable: the fault leaves a dependency unusable, so the floor does
	// not apply; the answers must be fast and clear instead.
	unusable bool
	// noFloor, when set, says why the floor does not apply although no
	// dependency is down: the answers must still be fast and clear.
	noFloor string
	// stall, when set, is how long after the fault began a request may go
	// unanswered: a replica stopped inside a transaction keeps its row
	// locks until PostgreSQL ends that transaction, idle past
	// postgres.IdleInTxTimeout. A request whose last attempt started
	// within stall of the fault and got no answer is counted and reported;
	// one that started later and got none fails the scenario.
	stall time.Duration
	// lockMode the replicas run in; "" is degrade.
	lockMode string
	// env overrides the replicas' timings for this scenario.
	env []string
	// isolate: once the fault ends, replica 0 gets no more requests, so
	// what it does afterwards is only the work it had in hand.
	isolate bool
	// observe, when set, reads extra figures from the cluster: it is
	// called when the fault ends and after the run.
	observe func(c *cluster) map[string]float64
	// report describes those figures (at the heal, at the end).
	report func(t *testing.T, c *cluster, healed, end map[string]float64) string
	// linearizable: the seat rush's history is checked with porcupine
	// against the seat map's model.
	linearizable bool
}

// result is what a scenario's run showed.
type result struct {
	sc                    scenario
	before, during, after phaseStats
	recover               time.Duration
	p99During             time.Duration
	answers               map[string]map[string]int
	sent                  int
	audit                 audit
	extra                 string
	layers                string // counterDelta over the scenario
	perFlow               string // useful answers per second of each flow, before → during → after
	unanswered            int    // requests without an answer within the scenario's stall
	floorMissed           bool   // throughput during the fault below half of before
	firstRatio            string // the ratio of a first measurement that missed the floor, when it was measured again
	anomalies             []string
	seatHistory           string // the porcupine check's verdict, when the scenario has one
}

func TestFaults(t *testing.T) {
	sz := sizeFromEnv()
	c := startCluster(t, "degrade")
	w := setUp(t, c, sz.users, sz.posts, sz.flashStock)
	w.clients, w.payClicks = sz.clients, 3

	var results []result
	for _, sc := range scenarios() {
		ok := t.Run(sc.row+"_"+strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			r := runScenario(t, c, w, sz, sc)
			// Throughput over a few seconds of a shared 2-core machine is
			// noisy: a floor missed on an otherwise clean run is measured
			// once more, and the report says so. Anomalies, 500s and slow
			// answers are never given a second run.
			if r.floorMissed && !t.Failed() && len(r.anomalies) == 0 {
				first := fmt.Sprintf("%.0f%%", 100*r.during.rate()/r.before.rate())
				t.Logf("throughput during the fault %.1f/s, below half of %.1f/s before: measuring again",
					r.during.rate(), r.before.rate())
				r = runScenario(t, c, w, sz, sc)
				r.firstRatio = first
			}
			if r.floorMissed {
				t.Errorf("throughput during the fault %.1f/s, below half of %.1f/s before", r.during.rate(), r.before.rate())
			}
			results = append(results, r)
			t.Log(r.line())
			for _, a := range r.anomalies {
				t.Errorf("anomaly: %s", a)
			}
		})
		if !ok && os.Getenv("SHOP_FAULTS_KEEP_GOING") == "" {
			break
		}
	}
	writeReport(t, sz, results)
}

// answerWithin is how fast "fast" is while a dependency is unusable:
// within the replicas' SHOP_REQUEST_TIMEOUT (6 s), and a second to send it.
const answerWithin = 7 * time.Second

// runScenario runs the workload before, during and after sc's fault, then
// audits.
func runScenario(t *testing.T, c *cluster, w *workload, sz size, sc scenario) result {
	mode := sc.lockMode
	if mode == "" {
		mode = "degrade"
	}
	if c.lockMode != mode || strings.Join(c.extraEnv, " ") != strings.Join(sc.env, " ") {
		c.lockMode, c.extraEnv = mode, sc.env
		for i := range c.replicas {
			c.restartReplica(i)
		}
	}
	flows := sc.flows
	if flows == nil {
		flows = allFlows
	}
	during := sz.during
	if sc.during > 0 {
		during = sc.during
	}
	restockFlash(t, c, w)
	newHall(t, c, w)
	countersAt := snapshotCounters(c)

	h := &history{}
	c.route.Store(routeBoth)
	defer c.route.Store(routeBoth)
	cl := newClient(c.replicaURLs, h)
	if sc.unusable {
		// Whether the service answers within its request timeout is
		// the question: the clients wait that long.
		cl.quick = attemptTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx, cl, flows) })
	wg.Go(func() { cl.probe(ctx) })

	start := time.Now()
	time.Sleep(sz.before)
	faultAt := time.Now()
	c.workload = w
	heal := sc.fault(t, c)
	time.Sleep(time.Until(faultAt.Add(during)))
	healAt := time.Now()
	heal()
	var obsHealed map[string]float64
	if sc.observe != nil {
		obsHealed = sc.observe(c)
	}
	if sc.isolate {
		c.route.Store(routeOnly1)
	}
	c.heal()
	time.Sleep(sz.after)
	end := time.Now()
	cancel()
	wg.Wait()
	if c.staleDone != nil {
		c.staleDone.Wait()
		c.staleDone = nil
	}

	answers := h.snapshot()
	r := result{sc: sc, sent: len(answers),
		before: split(answers, start, faultAt), during: split(answers, faultAt, healAt), after: split(answers, healAt, end),
		p99During: percentile(answers, faultAt, healAt, 0.99), answers: tally(answers)}
	r.recover = recovery(answers, healAt, end, r.before.rate())
	var flowRates []string
	for _, f := range flows {
		fa := byFlow(answers, f)
		flowRates = append(flowRates, fmt.Sprintf("%s %.0f → %.0f → %.0f", f,
			split(fa, start, faultAt).rate(), split(fa, faultAt, healAt).rate(), split(fa, healAt, end).rate()))
	}
	r.perFlow = strings.Join(flowRates, "; ")
	r.layers = counterDelta(countersAt, snapshotCounters(c))
	r.audit = check(t, c, w, h)
	r.anomalies = append(r.anomalies, r.audit.problems...)
	if sc.linearizable {
		res, n, unknown := w.seats.check(time.Minute)
		r.seatHistory = fmt.Sprintf("seat history %s (%d operations, %d without a definite answer)", res, n, unknown)
		t.Log(r.seatHistory)
		switch res {
		case porcupine.Illegal:
			r.anomalies = append(r.anomalies, "the seat rush's history is not linearizable: "+r.seatHistory)
		case porcupine.Unknown:
			t.Errorf("the seat history check ran out of time: %s", r.seatHistory)
		}
	}
	if sc.observe != nil {
		r.extra = sc.report(t, c, obsHealed, sc.observe(c))
	}

	// The floor (judged by the caller, which may measure again), or fast
	// and clear answers.
	r.floorMissed = !sc.unusable && sc.noFloor == "" && r.during.rate() < r.before.rate()/2
	if sc.unusable || sc.noFloor != "" {
		for _, a := range answers {
			if a.at.Before(faultAt) || !a.at.Before(healAt) {
				continue
			}
			if a.status == 0 && sc.stall > 0 && a.at.Add(-a.answerTook).Before(faultAt.Add(sc.stall)) {
				r.unanswered++
				continue
			}
			if a.status == 0 {
				t.Errorf("%s: no answer during the fault (after %s)", a.flow, a.took.Round(time.Millisecond))
				break
			}
			if a.answerTook > answerWithin {
				t.Errorf("%s: an answer took %s during the fault, more than %s", a.flow, a.answerTook.Round(time.Millisecond), answerWithin)
				break
			}
			if a.status == http.StatusServiceUnavailable && !a.retry {
				t.Errorf("%s: 503 %s without Retry-After", a.flow, a.code)
				break
			}
		}
	}
	if r.unanswered > 0 {
		t.Logf("%d requests without an answer in the first %s of the fault, while a stopped transaction held its rows", r.unanswered, sc.stall)
	}
	for _, a := range answers {
		if a.status == http.StatusInternalServerError {
			t.Errorf("%s: 500 %s: a fault must not surface as an internal error", a.flow, a.code)
			break
		}
	}
	if r.recover < 0 {
		t.Errorf("throughput not back to half of before within %s of the heal", sz.after)
	}
	return r
}

func (r result) line() string {
	return fmt.Sprintf("row %s %s: sent %d; useful/s before %.1f, during %.1f, after %.1f (%s); recovered in %s; p99 during %s; %s; %s; books: %d paid, %d charges (%d refunded); flash sold %d of %d stocked; likes %d; %s anomalies %d",
		r.sc.row, r.sc.name, r.sent, r.before.rate(), r.during.rate(), r.after.rate(), r.perFlow, fmtRecover(r.recover),
		r.p99During.Round(time.Millisecond), r.layers, r.extra, r.audit.books.Paid, r.audit.books.Charges, r.audit.books.Refunded,
		r.audit.sold["SKU-FLASH"], r.audit.stocked, r.audit.liked, answersLine(r.answers), len(r.anomalies))
}

func fmtRecover(d time.Duration) string {
	if d < 0 {
		return "not within the run"
	}
	return d.Round(250 * time.Millisecond).String()
}

func answersLine(m map[string]map[string]int) string {
	var parts []string
	for _, f := range []string{flowOrders, "pay storm: order", flowPay, flowLikes, flowSeats} {
		if m[f] != nil {
			parts = append(parts, f+": "+formatTally(m[f]))
		}
	}
	return strings.Join(parts, "; ")
}

// writeReport writes the results as Markdown to SHOP_FAULTS_REPORT, when
// set, for docs/RELIABILITY.md.
func writeReport(t *testing.T, sz size, results []result) {
	path := os.Getenv("SHOP_FAULTS_REPORT")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	b := bufio.NewWriter(f)
	defer b.Flush()
	host, _ := os.Hostname()
	fmt.Fprintf(b, "Run of %s, size %s, on %s.\n\n", time.Now().UTC().Format(time.RFC3339), sz.name, host)
	fmt.Fprintln(b, "| # | fault | flows | sent | useful/s before → during → after | check | p99 during | recovered in | audits |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		flows := r.sc.flows
		if flows == nil {
			flows = allFlows
		}
		audits := "0 anomalies"
		if n := len(r.anomalies); n > 0 {
			audits = fmt.Sprintf("**%d anomalies**", n)
		}
		ratio := 0.0
		if r.before.rate() > 0 {
			ratio = 100 * r.during.rate() / r.before.rate()
		}
		check := fmt.Sprintf("floor: %.0f%% of before", ratio)
		if r.firstRatio != "" {
			check += fmt.Sprintf(" (measured twice: the first run gave %s)", r.firstRatio)
		}
		switch {
		case r.sc.unusable:
			check = fmt.Sprintf("unusable (%.0f%%): every answer within %s", ratio, answerWithin)
		case r.sc.noFloor != "":
			check = fmt.Sprintf("floor waived (%.0f%%): every answer within %s", ratio, answerWithin)
		}
		if r.unanswered > 0 {
			check += fmt.Sprintf("; %d requests unanswered in its first %s (rows a stopped transaction held)", r.unanswered, r.sc.stall)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %.1f → %.1f → %.1f | %s | %s | %s | %s; %d paid, %d charges, %d refunded; flash %d/%d sold; %d likes; %d seats booked |\n",
			r.sc.row, r.sc.name, strings.Join(flows, ", "), r.sent, r.before.rate(), r.during.rate(), r.after.rate(), check,
			r.p99During.Round(time.Millisecond), fmtRecover(r.recover), audits, r.audit.books.Paid, r.audit.books.Charges,
			r.audit.books.Refunded, r.audit.sold["SKU-FLASH"], r.audit.stocked, r.audit.liked, r.audit.tickets)
	}
	fmt.Fprintln(b, "\nThe seat map's linearizability (porcupine, package seatcheck) under the faults that check it:")
	fmt.Fprintln(b)
	for _, r := range results {
		if r.seatHistory != "" {
			fmt.Fprintf(b, "- %s: %s\n", r.sc.row, r.seatHistory)
		}
	}
	fmt.Fprintln(b, "\nUseful answers per second by flow, before → during → after:")
	fmt.Fprintln(b)
	for _, r := range results {
		fmt.Fprintf(b, "- %s: %s\n", r.sc.row, r.perFlow)
	}
	fmt.Fprintln(b, "\nWhat the replicas counted over each scenario (their /metrics):")
	fmt.Fprintln(b)
	for _, r := range results {
		fmt.Fprintf(b, "- %s: %s\n", r.sc.row, r.layers)
	}
	for _, r := range results {
		if r.extra != "" {
			fmt.Fprintf(b, "\nScenario %s, %s\n", r.sc.row, r.extra)
		}
	}
	fmt.Fprintln(b, "\nAnswers by flow, status and code (the whole run of the scenario):")
	fmt.Fprintln(b)
	for _, r := range results {
		fmt.Fprintf(b, "- %s %s — %s\n", r.sc.row, r.sc.name, answersLine(r.answers))
	}
}

// scenarios are the table, row by row.
func scenarios() []scenario {
	return []scenario{
		{row: "1", name: "one Redis node SIGKILLed, restarted", linearizable: true, fault: func(t *testing.T, c *cluster) func() {
			c.redis[1].kill()
			return c.redis[1].start
		}},
		{row: "2", name: "two of three Redis nodes restarted empty within the lease", linearizable: true, fault: func(t *testing.T, c *cluster) func() {
			c.redis[0].kill()
			c.redis[1].kill()
			c.redis[0].start()
			c.redis[1].start()
			return func() {}
		}},
		{row: "3a", name: "all Redis nodes down, degrade mode", fault: allRedisDown, unusable: true},
		{row: "3b", name: "all Redis nodes down, strict mode", fault: allRedisDown, lockMode: "strict", unusable: true},
		{row: "4", name: "replica SIGSTOPped past the lease while paying and liking, resumed", flows: []string{flowPay, flowLikes, flowSeats},
			during: pauseFor, fault: pausedHolder, isolate: true, observe: fencing, report: reportFencing, linearizable: true,
			noFloor: "the keys the paused replica holds are locked until its lease ends (8 s): a request on one waits its lock budget and answers 409 resource_busy",
			// A replica stopped inside a transaction holds its rows (the
			// pay storm's SKU row) until PostgreSQL ends the transaction.
			stall: postgres.IdleInTxTimeout + time.Second,
			// Deadlines longer than the pause, so that the stale holder's
			// requests are still alive when it resumes: what fences them
			// must then be the lease and the version checks, not a
			// deadline that ran out during the pause.
			env: []string{"SHOP_REQUEST_TIMEOUT=20s", "SHOP_PAYMENT_BUDGET=14s", "SHOP_PAYMENT_RECONCILE_AFTER=15s"}},
		{row: "5", name: "replica SIGKILLed mid-payment, restarted", flows: []string{flowPay}, fault: func(t *testing.T, c *cluster) func() {
			c.replicas[1].kill()
			return func() { c.restartReplica(1) }
		}},
		{row: "6a", name: "gateway slow (2 s, beyond the 1 s timeout)", flows: []string{flowPay}, unusable: true,
			fault: func(t *testing.T, c *cluster) func() {
				c.toxic(c.gwPx, "slow", "latency", "downstream", `{"latency":2000}`)
				return func() {}
			}},
		{row: "6b", name: "gateway flaky (30% of connections reset)", flows: []string{flowPay},
			fault: func(t *testing.T, c *cluster) func() {
				js := `{"name":"flaky","type":"reset_peer","stream":"downstream","toxicity":0.3,"attributes":{"timeout":0}}`
				if _, err := c.gwPx.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
					t.Fatal(err)
				}
				return func() {}
			}},
		{row: "6c", name: "gateway blackholed", flows: []string{flowPay}, unusable: true,
			fault: func(t *testing.T, c *cluster) func() {
				c.toxic(c.gwPx, "hole_up", "timeout", "upstream", `{"timeout":0}`)
				c.toxic(c.gwPx, "hole_down", "timeout", "downstream", `{"timeout":0}`)
				return func() {}
			}},
		{row: "6d", name: "gateway SIGKILLed, restarted", flows: []string{flowPay}, unusable: true,
			fault: func(t *testing.T, c *cluster) func() {
				c.gw.kill()
				return c.startGateway
			}},
		{row: "7a", name: "PostgreSQL latency 1 ms each way", fault: func(t *testing.T, c *cluster) func() {
			c.toxic(c.pg, "lat_up", "latency", "upstream", `{"latency":1}`)
			c.toxic(c.pg, "lat_down", "latency", "downstream", `{"latency":1}`)
			return func() {}
		}},
		{row: "7b", name: "PostgreSQL connections reset, twice 2.5 s apart",
			// Measured on this machine: 80–101 % of before against a local
			// server; against the PostgreSQL container CI runs, 88 % with
			// nothing else running but 28–38 % on a loaded machine, where
			// requests stall about a second after each reset (p99 1.1–1.3
			// s) while both replicas open their pools again
			// (docs/RELIABILITY.md, item 7).
			noFloor: "every reset makes both replicas re-open their pools; what that costs depends on the server's setup and the machine's load more than on the service",
			fault: func(t *testing.T, c *cluster) func() {
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					for range 2 {
						c.pg.Stop() // closes every open connection
						_ = c.pg.Start()
						select {
						case <-stop:
							return
						case <-time.After(2500 * time.Millisecond):
						}
					}
				}()
				return func() { close(stop); <-done }
			}},
		{row: "7c", name: "PostgreSQL blackholed for 4 s", during: 4 * time.Second, unusable: true,
			fault: func(t *testing.T, c *cluster) func() {
				c.toxic(c.pg, "hole_up", "timeout", "upstream", `{"timeout":0}`)
				c.toxic(c.pg, "hole_down", "timeout", "downstream", `{"timeout":0}`)
				return func() {}
			}},
		{row: "8", name: "every Redis node 500 ms slower (past the per-node timeout)", unusable: true,
			fault: func(t *testing.T, c *cluster) func() {
				for _, p := range c.redisPx {
					c.toxic(p, "slow", "latency", "downstream", `{"latency":500}`)
				}
				return func() {}
			}},
	}
}

func allRedisDown(t *testing.T, c *cluster) func() {
	for _, n := range c.redis {
		n.kill()
	}
	return func() {
		for _, n := range c.redis {
			n.start()
		}
	}
}

// pauseFor is how long scenario 4 keeps a replica stopped: past the
// lease, within the stretched deadlines.
const pauseFor = lease + 2*time.Second

// pausedHolder sends replica 0, for a moment, pay storms and likes of its
// own that wait as long as it takes (the stale holders), with the gateway
// slowed so that it holds payment locks across its calls; then stops it
// with SIGSTOP past the lease, gives the gateway its speed back, and
// leaves the balancer's probe to send everything else to replica 1. Its locks expire; replica 1 takes the
// same keys. On SIGCONT the stale holders carry on with what they had in
// hand, and the lease check and the version checks must refuse their
// writes (reportFencing counts them on replica 0).
func pausedHolder(t *testing.T, c *cluster) func() {
	c.toxic(c.gwPx, "hold", "latency", "downstream", `{"latency":400}`)
	c.stale = &history{}
	stale := newClient(func() []string { return []string{c.replicas[0].url} }, c.stale)
	stale.http.Timeout = pauseFor + 20*time.Second
	var stop atomic.Bool
	c.staleDone = &sync.WaitGroup{}
	for i := range 8 {
		c.staleDone.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 4))
			for !stop.Load() {
				if i < 2 {
					c.workload.payStormAs(context.Background(), stale, rng, "stale pay")
				} else {
					c.workload.likeAs(context.Background(), stale, rng, "stale like")
				}
			}
		})
	}
	time.Sleep(600 * time.Millisecond)
	c.replicas[0].signal(syscall.SIGSTOP)
	c.stalePausedAt = time.Now()
	stop.Store(true)
	// The fault is the pause: the other replica pays at full speed.
	if err := c.gwPx.Toxics.RemoveToxic(context.Background(), "hold"); err != nil {
		t.Errorf("remove the gateway's latency: %v", err)
	}
	return func() { c.replicas[0].signal(syscall.SIGCONT) }
}
