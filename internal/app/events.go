package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/notify"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/mail"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// EventDeps are the settings of the events that only tests change.
type EventDeps struct {
	// Consumers are the variants the consumers (the fulfilment and the
	// mail) run on, apart from the API's: the ablation test takes layers
	// off the consumers only. The zero value takes none off.
	Consumers Variants
	// PublishAfterCommit takes the outbox off: a request's events are
	// published to their streams once its answer is written, as a flow
	// that publishes after its commit does (outbox.Deferred). Lost, when
	// set, is asked before each such publish: true drops the events, as a
	// process killed between its commit and its publish would.
	PublishAfterCommit bool
	Lost               func() bool
	// Interval is how often the relay redelivers and measures; 0 means
	// the job interval.
	Interval time.Duration
}

// events are one replica's relay and consumers.
type events struct {
	rdb       *redis.Client
	relay     *outbox.Relay
	metrics   *outbox.Metrics
	consumers []outbox.Consumer
	replica   string
	logger    *slog.Logger
}

// consumersPerStream is how many deliveries of one stream each consumer
// of a replica handles at once. Each one holds a connection of the events'
// Redis client for the whole of its blocking read, and the relay and the
// subscribers' claims use the same client, whose pool is redisx's 32
// connections: with 16 per stream (32 readers) `shop bench events` stopped
// making progress. More consumers need a pool sized for them.
const consumersPerStream = 4

// newEvents builds the relay on the events' Redis node (SHOP_EVENTS_REDIS,
// by default the first lock node) and the consumers: the fulfilment
// always, the mail when SHOP_MAILER_URL names a provider.
func newEvents(cfg config.Config, deps Deps, orderCfg orders.Config, m *metrics.Metrics, replica string, tp trace.TracerProvider) (*events, error) {
	addr := cfg.Events.Redis
	if addr == "" && len(deps.Redis) > 0 {
		addr = deps.Redis[0].Options().Addr
	}
	if addr == "" {
		return nil, errors.New("events: no Redis node for the streams")
	}
	om, err := outbox.NewMetrics(m)
	if err != nil {
		return nil, err
	}
	ev := &events{rdb: redisx.ClientWithin(addr, 3*time.Second), metrics: om, replica: replica, logger: deps.Logger}
	fulfilment, err := orders.NewService(deps.Events.Consumers.orders(orderCfg))
	if err != nil {
		return nil, err
	}
	ev.consumers = append(ev.consumers, outbox.Consumer{
		Name: orders.ConsumerFulfilment, Events: []string{outbox.OrderPaid},
		Handle: fulfilment.Fulfil, Concurrency: consumersPerStream,
	})
	if cfg.MailerURL != "" {
		mail, err := notify.New(deps.Events.Consumers.notify(notify.Config{
			DB: deps.Pool, Sender: mailSender{mail.NewClient(cfg.MailerURL, cfg.MailerTimeout, nil)},
			Metrics: m, Now: deps.Now,
		}))
		if err != nil {
			_ = ev.rdb.Close()
			return nil, err
		}
		ev.consumers = append(ev.consumers, mail.Consumer(consumersPerStream))
	}
	waiting := map[string][]string{}
	for _, c := range ev.consumers {
		for _, name := range c.Events {
			waiting[name] = append(waiting[name], c.Name)
		}
	}
	interval := deps.Events.Interval
	if interval <= 0 {
		interval = cfg.JobInterval
	}
	ev.relay, err = outbox.NewRelay(deps.Pool, ev.rdb, outbox.Options{
		Consumers: waiting, RedeliverAfter: cfg.Events.RedeliverAfter, Retention: cfg.Events.Retention,
		Interval: interval, Prefix: cfg.Events.Prefix, Metrics: om, Logger: deps.Logger, Tracing: tp,
	})
	if err != nil {
		_ = ev.rdb.Close()
		return nil, err
	}
	return ev, nil
}

// run relays and consumes until ctx ends.
func (ev *events) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { ev.relay.Run(ctx) })
	wg.Go(func() { ev.consume(ctx, 1) })
	wg.Wait()
}

// consume runs the consumers, as many times over as replicas would,
// until ctx ends.
func (ev *events) consume(ctx context.Context, replicas int) {
	var wg sync.WaitGroup
	for range replicas {
		for _, c := range ev.consumers {
			wg.Go(func() { outbox.Consume(ctx, ev.rdb, ev.relay.Prefix(), c, ev.replica, ev.metrics, ev.logger) })
		}
	}
	wg.Wait()
}

func (ev *events) close() { _ = ev.rdb.Close() }

// publishAfterCommit is the outbox taken off (EventDeps.PublishAfterCommit).
func (ev *events) publishAfterCommit(lost func() bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			d := &outbox.Deferred{}
			req := c.Request()
			c.SetRequest(req.WithContext(outbox.Defer(req.Context(), d)))
			err := next(c)
			if pending := d.Take(); len(pending) > 0 && (lost == nil || !lost()) {
				if perr := ev.relay.Publish(context.WithoutCancel(req.Context()), pending...); perr != nil {
					ev.logger.Error("events: publish after commit", "err", perr)
				}
			}
			return err
		}
	}
}

// mailSender is the mail provider's client as the mail consumer calls it.
type mailSender struct{ c *mail.Client }

func (s mailSender) Send(ctx context.Context, key string, m notify.Mail) error {
	_, err := s.c.Send(ctx, key, mail.Request{Reference: m.Reference, Kind: m.Kind, To: m.To, Subject: m.Subject, Text: m.Text})
	if errors.Is(err, mail.ErrRejected) {
		return fmt.Errorf("%w: %w", err, outbox.ErrPermanent)
	}
	return err
}
