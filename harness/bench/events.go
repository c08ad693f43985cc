package bench

// `shop bench events` measures the outbox (package outbox, DESIGN.md §9):
// how fast the relay publishes the events the flows committed, and how
// fast the consumers act on them, then how long an event waits between
// its commit and each of those steps while orders are paid at a steady
// rate.
//
// Every event is an order.paid, written as the pay flow's settle writes
// it (payer): the succeeded payment and the order's move to paid at the
// version read, then the event with the COMMIT, in one transaction of
// real orders in the scratch database. The replicas are the real
// service's (app.New, App.RunEvents) in this process, each with its relay
// and its consumers, the fulfilment and the mail, sending receipts to the
// stand-in mail provider (`shop mailer`, package mailer) on a loopback
// port of its own.
//
// What is measured:
//   - drains: -events orders are paid with no relay running, so their
//     events wait in the outbox; then one replica (then, on fresh orders,
//     two) starts, and the bench waits until both consumers have recorded
//     every event in their inbox. The rates are the events over the time
//     from the replicas' start to the last event's publish (the relay), to
//     its last fulfilment or receipt (each consumer), and to the later of
//     those two (consumed).
//   - paced: two replicas run while -clients payers pay fresh orders at
//     -rate per second, open loop, for -warmup then -duration. Each event
//     committed in the window is followed from its commit (the outbox
//     row's created_at) to its publish (the id of its first entry in the
//     Redis stream, in ms) and to each consumer's record of it (its inbox
//     row's processed_at): p50, p99 and max, and how many events committed
//     by the end of the window had not reached each step by then.
//
// Each phase has streams of its own (a prefix per phase), and a phase's
// figures come only from timestamps the pipeline wrote; the bench reads
// them once the phase is over. Afterwards every phase is checked
// (eventTally): one order.paid row per paid order, each in the stream,
// each order fulfilled once, one inbox row per consumer and event, one
// receipt per order at the mail provider, no delivery failed for good. A
// run that fails a check prints its report and writes no block.
//
// What is not measured: a real network or mail provider, the payment's
// HTTP request, lock, begin and gateway call before its last transaction,
// Redis or PostgreSQL restarting (the fault suite's work), the ticket
// mails of bookings. As in every bench, the payers, the replicas, the
// mailer, PostgreSQL and Redis share the machine's cores.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/docblock"
)

// eventsBlock is the generated block of docs/BENCHMARKS.md the bench
// writes with -doc.
const eventsBlock = "benchmarks/events"

// defaultEventRate is -rate's default: the layered/spread orders per
// second of the benchmarks/orders block of docs/BENCHMARKS.md when the
// bench was written (commit 7bece53), an order placed as fast as the
// service places them, each then paid.
const defaultEventRate = 2095

// eventDrainReplicas are the replicas of each drain, one drain each; the
// paced phase runs with the last.
var eventDrainReplicas = []int{1, 2}

// eventLagSteps are the steps of an event the paced phase follows from its
// commit, in order.
var eventLagSteps = []string{"published", "fulfilled", "mailed", "consumed"}

// eventRowNames are the rows of the block: the drains, then the steps of
// the paced phase.
func eventRowNames() []string {
	var names []string
	for _, n := range eventDrainReplicas {
		names = append(names, drainName(n))
	}
	for _, s := range eventLagSteps {
		names = append(names, "paced/"+s)
	}
	return names
}

func drainName(replicas int) string { return fmt.Sprintf("drain/replicas=%d", replicas) }

func benchEvents(ctx context.Context, o benchOptions, logger *slog.Logger) error {
	run, err := runEventsBench(ctx, o, logger)
	if err != nil {
		return err
	}
	var report strings.Builder
	printEvents(&report, o, run)
	fmt.Fprint(os.Stdout, report.String())
	if bad := run.violations(); len(bad) > 0 {
		return fmt.Errorf("bench events: %d checks failed, so no figures are written: %s", len(bad), strings.Join(bad, "; "))
	}
	if o.doc == nil {
		return nil
	}
	// The scratch database is gone: the server versions are read from a
	// pool of their own.
	pool, err := pgxpool.New(ctx, o.dbURL)
	if err != nil {
		return fmt.Errorf("-doc: %w", err)
	}
	defer pool.Close()
	return o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: eventsBlock, Rows: run.rowNames(), Body: asMarkdown(report.String())})
}

// printEvents writes the drains' table, the paced phase's table and its
// writer, then the checks of every phase.
func printEvents(w io.Writer, o benchOptions, run eventsRun) {
	fmt.Fprintf(w, "\nshop bench events: drains of %d order.paid events waiting in the outbox, by %s; then %d payments/s offered for %s after %s warmup against %d replicas, by %d payers; each replica runs the relay, the fulfilment and the mail as `shop serve` does, the mailer in this process; %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.events, replicaCounts(eventDrainReplicas), o.rate, o.duration, o.warmup, eventDrainReplicas[len(eventDrainReplicas)-1], o.clients,
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())

	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| drain\t events\t published/s\t fulfilled/s\t mailed/s\t consumed/s\t all consumed after\t copies and retries\t")
	fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---:\t---:\t---:\t---\t")
	for _, d := range run.drains {
		n := len(d.events)
		fmt.Fprintf(tw, "| %s\t %d\t %.0f\t %.0f\t %.0f\t %.0f\t %s\t %s\t\n", d.name, n,
			perSecond(n, d.last(stepPublished).Sub(d.start)), perSecond(n, d.last(stepFulfilled).Sub(d.start)),
			perSecond(n, d.last(stepMailed).Sub(d.start)), perSecond(n, d.last(stepConsumed).Sub(d.start)),
			seconds(d.last(stepConsumed).Sub(d.start)), d.counts.summary())
	}
	tw.Flush()
	fmt.Fprintln(w)

	if p := run.paced; p != nil {
		tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintln(tw, "| from commit to\t events\t p50\t p99\t max\t behind at the window's end\t")
		fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---:\t---:\t")
		for i, s := range eventLagSteps {
			lags := p.lags(step(i), p.from, p.to)
			fmt.Fprintf(tw, "| paced/%s\t %d\t %s\t %s\t %s\t %d\t\n", s, len(lags),
				millis(percentile(lags, 0.50)), millis(percentile(lags, 0.99)), millis(percentile(lags, 1)), p.behind(step(i), p.to))
		}
		tw.Flush()
		fmt.Fprintln(w)
		fmt.Fprintf(w, "paced payers: %d paid in the %s window, %.0f/s of %d/s offered; a payment's transaction p50 %s, p99 %s; %d payments behind their time at the window's end; every event consumed %s after the window\n",
			p.writer.inWindow, o.duration, perSecond(p.writer.inWindow, o.duration), o.rate,
			millis(p.writer.p50), millis(p.writer.p99), p.writer.late, seconds(p.last(stepConsumed).Sub(p.to)))
		fmt.Fprintf(w, "paced copies and retries: %s\n", p.counts.summary())
	}
	for _, ph := range run.phases() {
		fmt.Fprintf(w, "checks %s: %s\n", ph.name, ph.tally)
	}
	fmt.Fprintf(w, "checks mailer: %d messages for %d paid orders\n", run.mails, run.orders())
}

// replicaCounts says counts of replicas: "1 and by 2 replicas".
func replicaCounts(counts []int) string {
	s := make([]string, len(counts))
	for i, n := range counts {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " and by ") + " replicas"
}

// perSecond is n over d, or 0 when d is not positive.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// errStalled means the consumers stopped recording events before every
// one was.
var errStalled = errors.New("the consumers stopped making progress")
