package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// eventsRun is what `shop bench events` saw: its drains, its paced phase,
// and the messages the mail provider holds at the end.
type eventsRun struct {
	drains []*eventPhase
	paced  *pacedPhase
	mails  int
}

// phases are the drains, then the paced phase.
func (r eventsRun) phases() []*eventPhase {
	out := slices.Clone(r.drains)
	if r.paced != nil {
		out = append(out, &r.paced.eventPhase)
	}
	return out
}

// orders is how many orders the run paid, over every phase.
func (r eventsRun) orders() int {
	n := 0
	for _, ph := range r.phases() {
		n += ph.tally.orders
	}
	return n
}

// rowNames are the block's rows, as the run made them.
func (r eventsRun) rowNames() []string {
	var names []string
	for _, d := range r.drains {
		names = append(names, d.name)
	}
	if r.paced != nil {
		for _, s := range eventLagSteps {
			names = append(names, "paced/"+s)
		}
	}
	return names
}

// violations are the failed checks of every phase, and of the mail
// provider as a whole: one message per paid order, none about anything
// else.
func (r eventsRun) violations() []string {
	var bad []string
	for _, ph := range r.phases() {
		for _, v := range ph.tally.violations() {
			bad = append(bad, ph.name+": "+v)
		}
	}
	if r.mails != r.orders() {
		bad = append(bad, fmt.Sprintf("the mailer holds %d messages for %d paid orders", r.mails, r.orders()))
	}
	return bad
}

// step is a moment of an event after its commit.
type step int

const (
	stepPublished step = iota // its first entry in the stream
	stepFulfilled             // the fulfilment's inbox row
	stepMailed                // the mail's inbox row
	stepConsumed              // the later of the two
)

// eventTimes are one event's moments, each zero if it never came.
type eventTimes struct {
	committed time.Time // the outbox row's created_at: its transaction's start
	at        [stepConsumed]time.Time
}

func (e eventTimes) time(s step) time.Time {
	if s != stepConsumed {
		return e.at[s]
	}
	f, m := e.at[stepFulfilled], e.at[stepMailed]
	if f.IsZero() || m.IsZero() {
		return time.Time{}
	}
	return maxTime(f, m)
}

// eventPhase is one phase of the run: the orders it paid, their events'
// moments, the replicas' counts and the checks.
type eventPhase struct {
	name   string
	prefix string    // of its streams
	start  time.Time // its replicas' start
	orders []string  // the orders it paid
	events []eventTimes
	counts eventCounts
	tally  eventTally
}

// last is the latest moment s of any event, or start if none came.
func (p *eventPhase) last(s step) time.Time {
	last := p.start
	for _, e := range p.events {
		last = maxTime(last, e.time(s))
	}
	return last
}

// lags are, sorted, the times from commit to s of the events committed in
// [from, to); an event that never reached s is left out (the checks fail
// the run).
func (p *eventPhase) lags(s step, from, to time.Time) []time.Duration {
	var lags []time.Duration
	for _, e := range p.events {
		if at := e.time(s); !at.IsZero() && !e.committed.Before(from) && e.committed.Before(to) {
			lags = append(lags, at.Sub(e.committed))
		}
	}
	slices.Sort(lags)
	return lags
}

// behind is how many events committed by at had not reached s by then.
func (p *eventPhase) behind(s step, at time.Time) int {
	n := 0
	for _, e := range p.events {
		if !e.committed.After(at) && (e.time(s).IsZero() || e.time(s).After(at)) {
			n++
		}
	}
	return n
}

// pacedPhase is the phase whose orders were paid at a rate: its window and
// its payers' figures.
type pacedPhase struct {
	eventPhase
	from, to time.Time
	writer   writerStats
}

// eventsEnv is what every phase runs on.
type eventsEnv struct {
	o       benchOptions
	logger  *slog.Logger
	dbURL   string
	pool    *pgxpool.Pool
	users   []string
	payer   payer
	mail    *mailer.Server
	mailURL string
	rdb     *redis.Client // the events' node
	prefix  string        // of every stream of the run: each phase adds its name
	streams []string      // every stream a phase's replicas may have made
	stopped []*eventReplicas
}

// eventsStall is how long the consumers may record nothing before the
// bench gives up: longer than a redelivery takes to bring back an event
// the stream lost.
const eventsStall = time.Minute

// runEventsBench runs the drains and the paced phase on a scratch
// database, then checks them.
func runEventsBench(ctx context.Context, o benchOptions, logger *slog.Logger) (run eventsRun, err error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return run, fmt.Errorf("config: %w", err)
	}
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return run, err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	users, _, err := seedUsers(ctx, pool, o.clients)
	if err != nil {
		return run, err
	}
	if _, err := pool.Exec(ctx, sqlSeedProducts, payPrefix, 1, benchStock); err != nil {
		return run, fmt.Errorf("seed product: %w", err)
	}
	mail, mailSrv, err := startMailer(ctx)
	if err != nil {
		return run, err
	}
	defer mailSrv.stop()
	// The replicas stream on SHOP_EVENTS_REDIS, else the first lock node.
	addr := cfg.Events.Redis
	if addr == "" {
		addr = o.redisAddrs[0]
	}
	env := &eventsEnv{o: o, logger: logger, dbURL: db.url, pool: pool, users: users, payer: newPayer(pool),
		mail: mail, mailURL: mailSrv.base, rdb: redisx.Client(addr), prefix: "bench:" + db.name + ":"}
	defer func() { err = errors.Join(err, env.close()) }()

	for _, n := range eventDrainReplicas {
		ph, err := env.drain(ctx, n)
		if err != nil {
			return run, err
		}
		run.drains = append(run.drains, ph)
	}
	run.paced, err = env.pace(ctx, eventDrainReplicas[len(eventDrainReplicas)-1])
	if err != nil {
		return run, err
	}
	run.mails = len(mail.Messages(""))
	return run, nil
}

// close waits for the stopped replicas to close their connections, then
// deletes the phases' streams (with their consumer groups) from the
// shared Redis node.
func (env *eventsEnv) close() error {
	for _, rs := range env.stopped {
		<-rs.closed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if len(env.streams) > 0 {
		err = env.rdb.Del(ctx, env.streams...).Err()
	}
	return errors.Join(err, env.rdb.Close())
}

// phasePrefix is the prefix of the streams of the phase called name; close
// deletes them.
func (env *eventsEnv) phasePrefix(name string) string {
	prefix := env.prefix + name + ":"
	// A stream per event a consumer reads.
	env.streams = append(env.streams, prefix+outbox.OrderPaid, prefix+outbox.BookingConfirmed)
	return prefix
}

// drain pays o.events fresh orders with no relay running, then starts
// replicas replicas and waits until both consumers recorded every event.
func (env *eventsEnv) drain(ctx context.Context, replicas int) (*eventPhase, error) {
	ph := &eventPhase{name: drainName(replicas), prefix: env.phasePrefix(fmt.Sprintf("drain-%d", replicas))}
	po, err := seedPendingOrders(ctx, env.pool, env.users, env.o.events)
	if err != nil {
		return nil, err
	}
	env.logger.Info("bench: paying, no relay running", "phase", ph.name, "orders", len(po.ids))
	paid, failures := env.payer.payAll(ctx, po.ids, env.o.clients)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ph.orders, ph.tally.payFailures = paid, failures
	env.settle(ctx)

	stopProfile, err := startProfile(env.o.cpuProfile, scenario{name: fmt.Sprintf("events/drain-%d", replicas), layered: true})
	if err != nil {
		return nil, err
	}
	env.logger.Info("bench: running", "phase", ph.name)
	rs, err := startEventReplicas(ctx, env.o, env.dbURL, env.mailURL, ph.prefix, replicas)
	if err != nil {
		stopProfile()
		return nil, err
	}
	ph.start = rs.started
	waited := waitConsumed(ctx, env.pool, ph.start, len(paid))
	stopProfile()
	ph.counts, err = rs.stop()
	env.stopped = append(env.stopped, rs)
	if err := errors.Join(waited, err); err != nil {
		return nil, fmt.Errorf("%s: %w", ph.name, err)
	}
	return ph, env.collect(ctx, ph)
}

// pace starts replicas replicas, pays fresh orders at o.rate for the
// warm-up and the window, then waits until both consumers recorded every
// event.
func (env *eventsEnv) pace(ctx context.Context, replicas int) (*pacedPhase, error) {
	o := env.o
	ph := &pacedPhase{eventPhase: eventPhase{name: "paced", prefix: env.phasePrefix("paced")}}
	n := max(int(float64(o.rate)*(o.warmup+o.duration).Seconds()), 1)
	po, err := seedPendingOrders(ctx, env.pool, env.users, n)
	if err != nil {
		return nil, err
	}
	env.settle(ctx)

	stopProfile, err := startProfile(o.cpuProfile, scenario{name: "events/paced", layered: true})
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	env.logger.Info("bench: running", "phase", ph.name, "rate", o.rate, "orders", n)
	rs, err := startEventReplicas(ctx, o, env.dbURL, env.mailURL, ph.prefix, replicas)
	if err != nil {
		return nil, err
	}
	ph.start = rs.started
	begin := time.Now()
	ph.from, ph.to = begin.Add(o.warmup), begin.Add(o.warmup+o.duration)
	run := env.payer.paced(ctx, po.ids, o.rate, o.clients, begin)
	ph.orders, ph.tally.payFailures = run.paid()
	ph.writer = run.stats(ph.from, ph.to)
	waited := waitConsumed(ctx, env.pool, ph.start, len(ph.orders))
	ph.counts, err = rs.stop()
	env.stopped = append(env.stopped, rs)
	if err := errors.Join(waited, err); err != nil {
		return nil, fmt.Errorf("%s: %w", ph.name, err)
	}
	return ph, env.collect(ctx, &ph.eventPhase)
}

// settle makes the phase start on a quiet database: its statistics
// current, its dirty pages written.
func (env *eventsEnv) settle(ctx context.Context) {
	for _, sql := range []string{"ANALYZE", "CHECKPOINT"} {
		if _, err := env.pool.Exec(ctx, sql); err != nil {
			env.logger.Warn("bench: refused; the phase may pay for the last one's writes", "sql", sql, "err", err)
		}
	}
}

// sqlInboxSince counts the events each consumer recorded since a phase's
// replicas started.
const sqlInboxSince = `SELECT count(*) FILTER (WHERE consumer = $2), count(*) FILTER (WHERE consumer = $3)
	FROM inbox WHERE processed_at >= $1`

// waitConsumed waits until each consumer has recorded want events since
// since, or fails once they recorded nothing for eventsStall.
func waitConsumed(ctx context.Context, pool *pgxpool.Pool, since time.Time, want int) error {
	progress, moved := -1, time.Now()
	for {
		var fulfilled, mailed int
		if err := pool.QueryRow(ctx, sqlInboxSince, since, eventConsumers[0], eventConsumers[1]).Scan(&fulfilled, &mailed); err != nil {
			return fmt.Errorf("count the inbox: %w", err)
		}
		switch {
		case fulfilled >= want && mailed >= want:
			return nil
		case fulfilled+mailed != progress:
			progress, moved = fulfilled+mailed, time.Now()
		case time.Since(moved) > eventsStall:
			return fmt.Errorf("%w for %s: %d of %d events recorded by %s, %d by %s",
				errStalled, eventsStall, fulfilled, want, eventConsumers[0], mailed, eventConsumers[1])
		}
		if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
			return ctx.Err()
		}
	}
}
