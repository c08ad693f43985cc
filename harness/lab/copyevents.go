package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// The race lab's events. A copy of the service for the lab (the live
// copy, a sandbox) runs the shop's consumers, the fulfilment and the
// mail, built as the shop builds them, but on streams of its own (the
// shop's SHOP_EVENTS_PREFIX, then "lab:"), over the copy's tables, and
// mailing through a provider of the lab's: no lab event reaches the
// shop's consumers, and no lab receipt the shop's provider.
//
// It runs no relay. The lab is the broker: a redelivery storm takes each
// event from the copy's outbox and writes its copies into the stream
// together. A relay would deliver each event as soon as its payment
// committed, so the storm would only meet events handled already; and in
// a sandbox it would bring the events of earlier runs into this one.

// labStreams starts the name of the lab's streams: the live copy's, and,
// with a name of the run after it, a sandbox's.
func labStreams(shop string) string { return shop + "lab:" }

// forgetfulKeys is how long a sandbox's mail provider remembers a key
// when the idempotency layer is off: a millisecond, as a real provider
// has forgotten it a day later. A copy of an event that comes after that
// is a second mail, unless the inbox stops it.
const forgetfulKeys = time.Millisecond

// labEvents are a lab copy's consumers, running, and its stream as the
// lab's broker (Broker).
type labEvents struct {
	relay   *outbox.Relay // the copy's: it publishes the copies, and runs nowhere
	streams app.Streams   // the copy's streams, and the consumers that read each
	db      *pgxpool.Pool // the copy's tables, its outbox among them
	stop    context.CancelFunc
	done    chan struct{}
	prefix  string
}

// startLabEvents runs the consumers of copied, whose tables db holds,
// until close, as that many replicas of it would run them: the replica's
// consumers without the relay.
func startLabEvents(copied *app.App, db *pgxpool.Pool, replicas int) *labEvents {
	ctx, cancel := context.WithCancel(context.Background())
	l := &labEvents{relay: copied.Relay(), streams: copied.Streams(), db: db, stop: cancel, done: make(chan struct{}), prefix: copied.Relay().Prefix()}
	go func() {
		defer close(l.done)
		copied.RunConsumers(ctx, replicas)
	}()
	return l
}

// close stops the consumers and waits for them.
func (l *labEvents) close() {
	l.stop()
	<-l.done
}

// expire has the copy's streams, and their consumer groups with them,
// deleted by Redis after d: a sandbox's, once its run is over and its
// consumers' last blocked reads have ended.
func (l *labEvents) expire(ctx context.Context, d time.Duration) error {
	for name := range l.streams.Readers {
		if err := l.streams.Redis.Expire(ctx, l.prefix+name, d).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Event returns the event name about subject as the copy's outbox holds
// it.
func (l *labEvents) Event(ctx context.Context, name, subject string) (outbox.Event, error) {
	return outbox.Lookup(ctx, l.db, name, subject)
}

// Publish writes copies into their streams in one MULTI
// (outbox.Relay.PublishAtOnce): the consumers, blocked on the stream, are
// woken once every copy is in it, and take several copies of one event at
// once.
func (l *labEvents) Publish(ctx context.Context, copies ...outbox.Event) error {
	return l.relay.PublishAtOnce(ctx, copies...)
}

// Handled reports whether every consumer of name's stream has read it to
// its last entry and acknowledged all it read: a delivery handed back
// for later (a lock held) stays pending until it is handled.
func (l *labEvents) Handled(ctx context.Context, name string) (bool, error) {
	stream := l.prefix + name
	info, err := l.streams.Redis.XInfoStream(ctx, stream).Result()
	if err != nil {
		return false, fmt.Errorf("stream %s: %w", stream, err)
	}
	groups, err := l.streams.Redis.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return false, fmt.Errorf("groups of %s: %w", stream, err)
	}
	for _, consumer := range l.streams.Readers[name] {
		i := slices.IndexFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == consumer })
		if i < 0 || groups[i].Pending > 0 || groups[i].LastDeliveredID != info.LastGeneratedID {
			return false, nil
		}
	}
	return true, nil
}

var _ Broker = (*labEvents)(nil)

// mailer starts a stand-in mail provider for the lab, remembering keys
// for ttl, its journal in a temporary directory removed when it stops.
func (s *sandboxes) mailer(ttl time.Duration) (string, func(), error) {
	dir, err := os.MkdirTemp("", "shop-lab-mailer-")
	if err != nil {
		return "", nil, err
	}
	m, err := mailer.New(mailer.Options{JournalPath: filepath.Join(dir, "journal.jsonl"), KeyTTL: ttl, Logger: s.a.deps.Logger})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = m.Close()
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		_ = srv.Close()
		_ = m.Close()
		_ = os.RemoveAll(dir)
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// replayCounter passes a copy's calls on to the lab's mail provider and
// counts the mails it answered from a key it remembered
// (MailReplayed): the copies of an event that the provider's key made
// one mail. The provider is the lab's, outside the copy; the copy's mail
// consumer calls it through here.
type replayCounter struct {
	URL      string
	replayed prometheus.Counter
	srv      *http.Server
}

func newReplayCounter(provider string) (*replayCounter, error) {
	u, err := url.Parse(provider)
	if err != nil {
		return nil, err
	}
	rc := &replayCounter{replayed: prometheus.NewCounter(prometheus.CounterOpts{
		Name: MailReplayed,
		Help: "Mails the race lab's mail provider answered from an Idempotency-Key it remembered: copies of an event its key made one mail.",
	})}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		ModifyResponse: func(res *http.Response) error {
			if res.Request.Method == http.MethodPost && res.Header.Get(mailer.HeaderReplayed) == "true" {
				rc.replayed.Inc()
			}
			return nil
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc.URL = "http://" + ln.Addr().String()
	rc.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

// register counts into m, the copy's registry.
func (rc *replayCounter) register(m *metrics.Metrics) error {
	return metrics.Register(m.Registry, rc.replayed)
}

func (rc *replayCounter) close() { _ = rc.srv.Close() }
