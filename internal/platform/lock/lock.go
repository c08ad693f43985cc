package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/redisx"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// Mode says what Do does when the Redis quorum cannot be reached.
type Mode string

const (
	// Degrade runs the work without the lock and counts it: layers 2–4
	// keep the outcome correct, only the efficiency of layer 1 is lost.
	Degrade Mode = "degrade"
	// Strict refuses the work with 503 unavailable.
	Strict Mode = "strict"
)

// Defaults of Options.
const (
	DefaultExpiry     = 8 * time.Second
	DefaultWaitBudget = 2 * time.Second
	DefaultPrefix     = "shop:lock:"

	// MinExpiry keeps the lease long enough for a per-node timeout, the
	// clock drift allowance and a watchdog period of Expiry/3 to fit in it.
	MinExpiry = 200 * time.Millisecond
)

// Retry-After values of the refusals. A busy resource frees up within a
// request's time; a lost quorum takes longer to come back.
const (
	busyRetryAfter        = 1 * time.Second
	unavailableRetryAfter = 2 * time.Second
)

// ErrLockLost is the cause of the cancellation of the work's context when the
// watchdog could not extend the lease: another holder may now hold the lock.
var ErrLockLost = errors.New("lock lost")

// Options configure a Locker. The zero value of each field means its default.
type Options struct {
	Expiry     time.Duration // lease TTL, default 8s
	WaitBudget time.Duration // how long a waiter tries before resource_busy, default 2s
	Mode       Mode          // default Degrade
	Prefix     string        // key namespace, default "shop:lock:"
	// Scheme names the locks (keyscheme.Scheme.LockNames); the zero
	// value is scheme 1, as before schemes existed.
	Scheme  keyscheme.Scheme
	Logger  *slog.Logger     // default slog.Default()
	Metrics *metrics.Metrics // may be nil (then metrics go to a private registry)
}

// Locker takes Redlock locks over independent Redis nodes. It is safe for
// concurrent use; every Do makes its own redsync Mutex.
type Locker struct {
	rs          *redsync.Redsync
	clients     []*redis.Client
	nodes       int
	quorum      int
	expiry      time.Duration
	nodeTimeout time.Duration
	waitBudget  time.Duration
	maxTries    int // attempts before busy; 0: as many as the wait budget allows
	mode        Mode
	prefix      string
	scheme      keyscheme.Scheme
	log         *slog.Logger
	m           *lockMetrics
}

// New returns a Locker over clients, one per Redis node. The quorum is a
// majority of them; a single node is allowed (and is its own quorum).
func New(clients []*redis.Client, opts Options) (*Locker, error) {
	if len(clients) == 0 {
		return nil, errors.New("new locker: no redis nodes")
	}
	pools := make([]redsyncredis.Pool, 0, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("new locker: redis node %d is nil", i)
		}
		pools = append(pools, goredis.NewPool(c))
	}
	return newLocker(pools, clients, opts)
}

// newLocker is New over redsync pools, one per node; clients are what Ping
// asks. Tests of the watchdog's timing pass nodes held in memory, so that
// they run on synctest's clock.
func newLocker(pools []redsyncredis.Pool, clients []*redis.Client, opts Options) (*Locker, error) {
	if opts.Expiry == 0 {
		opts.Expiry = DefaultExpiry
	}
	if opts.Expiry < MinExpiry {
		return nil, fmt.Errorf("new locker: expiry %s is below %s", opts.Expiry, MinExpiry)
	}
	if opts.WaitBudget == 0 {
		opts.WaitBudget = DefaultWaitBudget
	}
	if opts.WaitBudget < 0 {
		return nil, fmt.Errorf("new locker: negative wait budget %s", opts.WaitBudget)
	}
	switch opts.Mode {
	case "":
		opts.Mode = Degrade
	case Degrade, Strict:
	default:
		return nil, fmt.Errorf("new locker: unknown mode %q (want %q or %q)", opts.Mode, Degrade, Strict)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Scheme.Version == 0 {
		opts.Scheme = keyscheme.Scheme{Version: 1}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var reg prometheus.Registerer = prometheus.NewRegistry()
	if opts.Metrics != nil {
		reg = opts.Metrics.Registry
	}
	m, err := newLockMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("new locker: %w", err)
	}

	return &Locker{
		rs:          redsync.New(pools...),
		clients:     clients,
		nodes:       len(pools),
		quorum:      len(pools)/2 + 1,
		expiry:      opts.Expiry,
		nodeTimeout: nodeTimeout(opts.Expiry),
		waitBudget:  opts.WaitBudget,
		mode:        opts.Mode,
		prefix:      opts.Prefix,
		scheme:      opts.Scheme,
		log:         opts.Logger,
		m:           m,
	}, nil
}

// WithWaitBudget returns a Locker on the same nodes, metrics and lease
// whose waiters give up after budget instead: for a flow whose work is
// worth less than a long wait (a like), while other flows keep theirs.
func (l *Locker) WithWaitBudget(budget time.Duration) (*Locker, error) {
	if budget <= 0 {
		return nil, fmt.Errorf("lock: wait budget must be positive, got %s", budget)
	}
	c := *l
	c.waitBudget = budget
	return &c, nil
}

// WithTries returns a Locker on the same nodes, metrics, lease and wait
// budget whose waiters make at most n attempts before resource_busy, and
// stop at the first that finds the key taken on every node: for a flow
// whose holder keeps the lock for a long time (a gateway call) and whose
// losers are better told at once than queued (a second click on an order
// being paid). Attempts past the first are for the split vote: contenders
// that arrive together can each take a minority of the nodes, and all
// give up; a few milliseconds later one of them takes a majority. An
// attempt that took no node found a holder, or others fighting, and is
// the waiter's last. Attempts that reach no quorum count as for any
// waiter (two settle it), so a Redis outage is still told apart from a
// held lock.
func (l *Locker) WithTries(n int) (*Locker, error) {
	if n <= 0 {
		return nil, fmt.Errorf("lock: tries must be positive, got %d", n)
	}
	c := *l
	c.maxTries = n
	return &c, nil
}

// nodeTimeout is how long one acquisition attempt waits for each node:
// redsync's 5% of the lease (400 ms at 8 s), but never less than 50 ms, which
// a loaded test machine can need even on loopback.
func nodeTimeout(expiry time.Duration) time.Duration {
	return max(expiry/20, 50*time.Millisecond)
}

// Do takes the lock on key, runs fn under a watchdog, and releases the lock.
//
// When the lock stays taken for the whole wait budget (or for the
// Locker's tries, WithTries), Do returns a problem.ResourceBusy error
// without running fn. When the quorum cannot be reached, Degrade mode runs
// fn without the lock and Strict mode returns problem.Unavailable. If the lease is lost while fn runs, fn's context is
// cancelled with cause ErrLockLost, and an error fn then returns is wrapped
// so that errors.Is(err, ErrLockLost) holds. Once fn has succeeded, a failed
// release is logged and counted, never returned.
//
// The lock's Redis name is the key under the Locker's prefix and scheme
// (keyscheme.Scheme.LockNames). While a transition of schemes lasts the
// key has two names, and Do takes both, the scheme-1 name first, each a
// lock of its own as above but both within one wait budget: a replica on
// either scheme then excludes the others. An unreachable quorum is found
// once: the work then runs without either.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return l.doNamed(ctx, key, l.scheme.LockNames(l.prefix, key), time.Now().Add(l.waitBudget), fn)
}

// doNamed runs fn under the locks on names, each taken inside the one
// before, all of them within one wait budget, which ends at deadline.
func (l *Locker) doNamed(ctx context.Context, key string, names []string, deadline time.Time, fn func(ctx context.Context) error) error {
	if len(names) == 0 {
		return fn(ctx)
	}
	degraded := false
	return l.do(ctx, key, names[0], deadline, &degraded, func(ctx context.Context) error {
		if degraded {
			// The quorum did not answer for the first name: the work runs
			// without the lock once, not after a wait for each name.
			return fn(ctx)
		}
		return l.doNamed(ctx, key, names[1:], deadline, fn)
	})
}

// do is Do on one Redis name. When Degrade mode runs fn without the lock,
// it says so in degraded first.
func (l *Locker) do(ctx context.Context, key, name string, deadline time.Time, degraded *bool, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mu := l.rs.NewMutex(name,
		redsync.WithExpiry(l.expiry),
		redsync.WithTries(1), // acquire paces its own attempts
		redsync.WithTimeoutFactor(float64(l.nodeTimeout)/float64(l.expiry)),
		// Not WithFailFast: returning as soon as a quorum has answered
		// cancels the requests still in flight, including redsync's
		// clean-up after a failed attempt, which leaves keys behind on
		// some nodes until the lease expires; enough of those across
		// contenders and nobody reaches a quorum for a whole TTL.
	)

	start := time.Now()
	waitCtx, wait := tracing.Start(ctx, "lock.wait", attrKey.String(key), attrName.String(name), attrNodes.Int(l.nodes))
	res, err := l.acquire(waitCtx, mu, deadline)
	l.m.wait.Observe(time.Since(start).Seconds())
	l.m.tries.Observe(float64(res.tries))
	if wait.IsRecording() {
		wait.SetAttributes(attrTries.Int(res.tries), attrResult.String(res.outcome), attrAnswered.Int(answered(res.cause, l.nodes)))
		if res.outcome == outcomeUnavailable {
			wait.SetAttributes(attrMode.String(string(l.mode)))
		}
	}
	tracing.End(wait, err)
	if err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}

	switch res.outcome {
	case outcomeAcquired:
		l.m.outcome(outcomeAcquired)
		return l.runHeld(ctx, mu, key, fn)
	case outcomeBusy:
		l.m.outcome(outcomeBusy)
		return &problem.Error{
			Code:       problem.ResourceBusy,
			Detail:     "another request is working on this resource; retry shortly",
			RetryAfter: busyRetryAfter,
		}
	default: // outcomeUnavailable
		l.m.outcome(outcomeUnavailable)
		if l.mode == Strict {
			l.log.WarnContext(ctx, "lock quorum unreachable; refusing the work",
				"key", name, "err", res.cause)
			return &problem.Error{
				Code:       problem.Unavailable,
				Detail:     "lock quorum unreachable",
				RetryAfter: unavailableRetryAfter,
			}
		}
		l.m.degraded.Inc()
		l.log.WarnContext(ctx, "lock quorum unreachable; running without the lock",
			"key", name, "err", res.cause)
		*degraded = true
		return fn(ctx)
	}
}

// Quorum is the state of the lock's Redis nodes as one ping found it.
type Quorum struct {
	Answering int  // nodes that answered
	Nodes     int  // nodes of the quorum
	Needed    int  // nodes a lock needs: a majority
	Mode      Mode // what Do does while a lock cannot be had
}

// Reachable reports whether a lock can be taken.
func (q Quorum) Reachable() bool { return q.Answering >= q.Needed }

// Ping asks every node once (for /readyz).
func (l *Locker) Ping(ctx context.Context) Quorum {
	return Quorum{
		Answering: redisx.Ping(ctx, l.clients),
		Nodes:     len(l.clients),
		Needed:    l.quorum,
		Mode:      l.mode,
	}
}

// None is a Locker-shaped value that takes no lock, for tests that switch
// layer 1 off to show the database layers hold on their own.
type None struct{}

// Do runs fn without a lock.
func (None) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return fn(ctx)
}
