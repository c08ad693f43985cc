package bench

// What one operation of the shoot-out costs, besides its time: the round
// trips to PostgreSQL, the transactions committed, the Redis commands and
// the CPU time. A costMeter counts them for every pool and Redis client of
// the run (the bench's own, the service's, the bookkeeping pool that
// app.New derives from the service's pool), and measure samples it at the
// start and the end of each cell's measured window: cells run one after
// the other, so a window's difference is the work of its cell.
//
// Commits are counted from PostgreSQL's answers, not read from
// pg_stat_database: a backend reports its xact_commit at most once a
// second, and less often while its siblings hold the database's entry, so
// a window of seconds read there misses work. The count is what
// xact_commit counts (TestCostMeter_CommitsAsPostgreSQLCounts), read-only
// transactions included: a statement run outside a transaction that
// succeeded, and a COMMIT that committed.

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/procfs"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/internal/platform/postgres"
)

// costMeter is a pgx tracer (statements, batches, preparations,
// connections) and a go-redis hook. Its zero value counts from zero.
//
// What pgx does without telling a tracer is not counted: preparing the
// statements of a batch on their first use on a connection, and closing
// a cached statement that failed before it is prepared again (one round
// trip, no commit).
type costMeter struct {
	trips   atomic.Int64 // PostgreSQL round trips
	commits atomic.Int64 // transactions PostgreSQL committed
	cmds    atomic.Int64 // Redis commands
}

// poolOptions are the options of postgres.Open that report to m; none
// for a nil meter.
func (m *costMeter) poolOptions() []postgres.Option {
	if m == nil {
		return nil
	}
	return []postgres.Option{postgres.WithTracer(m)}
}

// countRedis adds m's hook to each client; nothing for a nil meter.
func (m *costMeter) countRedis(clients []*redis.Client) {
	if m == nil {
		return
	}
	for _, c := range clients {
		c.AddHook(m)
	}
}

// TraceQueryStart is pgx.QueryTracer's: every Exec, Query and QueryRow,
// BEGIN and COMMIT included, is one round trip.
func (m *costMeter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	m.trips.Add(1)
	return ctx
}

// TraceQueryEnd counts the statement's commit, if it made one.
func (m *costMeter) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if committed(conn, d.CommandTag, d.Err) {
		m.commits.Add(1)
	}
}

// TraceBatchStart is pgx.BatchTracer's: a batch is sent and answered in
// one round trip, however many statements it holds.
func (m *costMeter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	m.trips.Add(1)
	return ctx
}

func (m *costMeter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd counts the batch's commit: a batch sent outside a
// transaction runs as one.
func (m *costMeter) TraceBatchEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	if committed(conn, pgconn.CommandTag{}, d.Err) {
		m.commits.Add(1)
	}
}

// TracePrepareStart is pgx.PrepareTracer's: pgx prepares a statement on
// its first use on a connection (and again after it failed), in a round
// trip of its own, which commits when outside a transaction.
func (m *costMeter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (m *costMeter) TracePrepareEnd(_ context.Context, conn *pgx.Conn, d pgx.TracePrepareEndData) {
	if d.AlreadyPrepared {
		return
	}
	m.trips.Add(1)
	if committed(conn, pgconn.CommandTag{}, d.Err) {
		m.commits.Add(1)
	}
}

// TraceConnectStart is pgx.ConnectTracer's: a new connection counts as
// one round trip, though its handshake takes several.
func (m *costMeter) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	m.trips.Add(1)
	return ctx
}

func (m *costMeter) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}

// committed reports whether a statement that ended with tag and err left
// a transaction committed: the session is outside a transaction now, so
// the statement either ran in one of its own or ended one, and neither
// failed nor rolled back.
func committed(conn *pgx.Conn, tag pgconn.CommandTag, err error) bool {
	return err == nil && conn.PgConn().TxStatus() == 'I' && tag.String() != "ROLLBACK"
}

// DialHook is redis.Hook's; a dial is no command.
func (m *costMeter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts each command sent alone.
func (m *costMeter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		m.cmds.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts each command of a pipeline.
func (m *costMeter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		m.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// costSample is the meter's counts and the CPU time used, at one moment
// or (from since) between two.
type costSample struct {
	trips, commits, cmds int64
	process              time.Duration // this process's CPU time (getrusage: user and system)
	box                  time.Duration // the machine's busy CPU time (/proc/stat), or -1 if unknown
}

// sample reads the counts and the CPU times now; a nil meter samples
// nothing.
func (m *costMeter) sample() costSample {
	if m == nil {
		return costSample{}
	}
	return costSample{trips: m.trips.Load(), commits: m.commits.Load(), cmds: m.cmds.Load(), process: processCPU(), box: boxBusy()}
}

// since is what was used from earlier to s.
func (s costSample) since(earlier costSample) costSample {
	d := costSample{trips: s.trips - earlier.trips, commits: s.commits - earlier.commits, cmds: s.cmds - earlier.cmds,
		process: s.process - earlier.process, box: -1}
	if s.box >= 0 && earlier.box >= 0 {
		d.box = s.box - earlier.box
	}
	return d
}

// processCPU is the CPU time this process has used, in user and system
// mode: the service, the load generator and the bench's HTTP server.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// boxBusy is the CPU time the whole machine has spent busy, every process
// on it (PostgreSQL, Redis, the gateway, and whatever else runs there)
// and the kernel, or -1 where /proc/stat cannot be read.
func boxBusy() time.Duration {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return -1
	}
	st, err := fs.Stat()
	if err != nil {
		return -1
	}
	c := st.CPUTotal // guest time is counted in User already
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return time.Duration(busy * float64(time.Second))
}

// perOp is a window's costs divided by its operations (those completed in
// it, refused ones included); ok is false with none.
type perOp struct {
	ok                   bool
	trips, commits, cmds float64
	process, box         time.Duration // box: -1 if unknown
}

func (s costSample) perOp(ops int) perOp {
	if ops == 0 {
		return perOp{}
	}
	n := float64(ops)
	p := perOp{ok: true, trips: float64(s.trips) / n, commits: float64(s.commits) / n, cmds: float64(s.cmds) / n,
		process: s.process / time.Duration(ops), box: -1}
	if s.box >= 0 {
		p.box = s.box / time.Duration(ops)
	}
	return p
}

// cpuCell is the table's "CPU µs/op (shop, box)" cell.
func (p perOp) cpuCell() string {
	if !p.ok {
		return "—"
	}
	box := "—"
	if p.box >= 0 {
		box = fmt.Sprintf("%.0f", float64(p.box)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.0f, %s", float64(p.process)/float64(time.Microsecond), box)
}
