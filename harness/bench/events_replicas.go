package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// eventReplicas are replicas of the service in this process, each running
// its relay and its consumers (App.RunEvents) and nothing else: no HTTP
// server, no other job.
type eventReplicas struct {
	apps    []*app.App
	started time.Time // when the first began to run its events
	cancel  context.CancelFunc
	running sync.WaitGroup
	closers []func()
	closed  chan struct{} // closed once stop has closed the connections
}

// startEventReplicas builds n replicas as `shop serve` does, from the
// SHOP_* settings, on the scratch database, the -redis nodes and the
// mailer at mailerURL, their streams named with prefix, and starts their
// events.
func startEventReplicas(ctx context.Context, o benchOptions, dbURL, mailerURL, prefix string, n int) (*eventReplicas, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg.DatabaseURL, cfg.RedisAddrs, cfg.MailerURL = dbURL, o.redisAddrs, mailerURL
	cfg.Events.Off, cfg.Events.Prefix = false, prefix
	cfg.RateLimit.Off = true // no request is served: no limiter to connect
	rs := &eventReplicas{}
	for i := range n {
		c := cfg
		c.ReplicaName = fmt.Sprintf("events-%d", i+1)
		pool, err := postgres.Open(ctx, dbURL, c.DBMaxConns)
		if err != nil {
			rs.close()
			return nil, err
		}
		rdb := redisx.Clients(c.RedisAddrs)
		a, err := app.New(c, app.Deps{Pool: pool, Redis: rdb, Logger: serviceLogger()})
		if err != nil {
			redisx.Close(rdb) //nolint:errcheck
			pool.Close()
			rs.close()
			return nil, err
		}
		rs.apps = append(rs.apps, a)
		rs.closers = append(rs.closers, func() {
			a.Close()
			redisx.Close(rdb) //nolint:errcheck
			pool.Close()
		})
	}
	runCtx, cancel := context.WithCancel(ctx)
	rs.cancel, rs.started = cancel, time.Now()
	for _, a := range rs.apps {
		rs.running.Go(func() { a.RunEvents(runCtx) })
	}
	return rs, nil
}

// stop ends the replicas' events, waits for them, and returns what their
// metrics counted. Their connections are closed in the background once
// watermill's readers of the streams have seen the end (RunEvents returns
// before: each may still wait out its blocking read, and closing the
// Redis clients under them would log every one as a failed read); closed
// is closed then.
func (rs *eventReplicas) stop() (eventCounts, error) {
	cancelled := time.Now()
	rs.cancel()
	rs.running.Wait()
	counts, err := gatherEventCounts(rs.apps)
	rs.closed = make(chan struct{})
	go func() {
		defer close(rs.closed)
		time.Sleep(streamReadBlock - time.Since(cancelled))
		rs.close()
	}()
	return counts, err
}

func (rs *eventReplicas) close() {
	for _, c := range rs.closers {
		c()
	}
	rs.closers = nil
}

// streamReadBlock is longer than a consumer's blocking read of its stream
// (outbox.Consume reads for a second at most).
const streamReadBlock = 1500 * time.Millisecond

// eventCounts are the replicas' outbox series, summed over the replicas.
type eventCounts struct {
	published   int
	redelivered int
	consumed    map[string]int // "consumer outcome" → deliveries
	retried     map[string]int // "consumer reason" → deliveries left for later
}

// gatherEventCounts reads the outbox's series (outbox.NewMetrics) from
// each app's registry.
func gatherEventCounts(apps []*app.App) (eventCounts, error) {
	c := eventCounts{consumed: map[string]int{}, retried: map[string]int{}}
	for _, a := range apps {
		families, err := a.Metrics.Registry.Gather()
		if err != nil {
			return c, fmt.Errorf("metrics: %w", err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				v := int(m.GetCounter().GetValue())
				switch f.GetName() {
				case "shop_outbox_published_total":
					c.published += v
				case "shop_outbox_redelivered_total":
					c.redelivered += v
				case "shop_events_consumed_total":
					c.consumed[label(m, "consumer")+" "+label(m, "outcome")] += v
				case "shop_events_retried_total":
					c.retried[label(m, "consumer")+" "+label(m, "reason")] += v
				}
			}
		}
	}
	return c, nil
}

// summary names what the replicas did beyond one delivery of each event:
// the redeliveries, the copies a consumer recognised, and the deliveries
// left for later, or "0".
func (c eventCounts) summary() string {
	extra := map[string]int{}
	if c.redelivered > 0 {
		extra["redelivered"] = c.redelivered
	}
	for k, n := range c.consumed {
		if n > 0 && !isProcessed(k) {
			extra[k] = n
		}
	}
	for k, n := range c.retried {
		if n > 0 {
			extra[k+" retried"] = n
		}
	}
	return countSummary(extra)
}

// processed is how many deliveries consumer acted on.
func (c eventCounts) processed(consumer string) int { return c.consumed[consumer+" processed"] }

// failed is how many deliveries a consumer gave up on for good.
func (c eventCounts) failed() int {
	n := 0
	for _, consumer := range eventConsumers {
		n += c.consumed[consumer+" failed"]
	}
	return n
}

func isProcessed(key string) bool {
	for _, consumer := range eventConsumers {
		if key == consumer+" processed" {
			return true
		}
	}
	return false
}

// startMailer runs the stand-in mail provider in this process, as `shop
// mailer` does, on a loopback port of its own, with its journal in a new
// temporary directory that stop removes.
func startMailer(ctx context.Context) (*mailer.Server, *service, error) {
	dir, err := os.MkdirTemp("", "shop-bench-mailer-")
	if err != nil {
		return nil, nil, fmt.Errorf("mailer journal: %w", err)
	}
	m, err := mailer.New(mailer.Options{JournalPath: filepath.Join(dir, "mailer.jsonl"), Logger: serviceLogger()})
	if err != nil {
		os.RemoveAll(dir) //nolint:errcheck
		return nil, nil, err
	}
	srv, err := serveLoopback(ctx, m.Handler(), "/healthz", 2*consumerConns, func() {
		m.Close()         //nolint:errcheck // every message was fsynced when it was answered
		os.RemoveAll(dir) //nolint:errcheck
	})
	if err != nil {
		return nil, nil, err
	}
	return m, srv, nil
}

// consumerConns bounds the mail consumer's requests in flight per
// replica, for the mailer's idle connections: more than it sends.
const consumerConns = 16
