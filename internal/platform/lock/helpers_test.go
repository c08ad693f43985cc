package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"net"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/redisx"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// An address nothing listens on: a Redis node that is down.
const deadNode = "127.0.0.1:1"

// mustLocker returns a Locker over new clients for addrs, closed when the
// test ends.
func mustLocker(t *testing.T, addrs []string, opts Options) *Locker {
	t.Helper()
	clients := redisx.Clients(addrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	l, err := New(clients, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// holdLock takes the lock on key in another goroutine and keeps it until the
// returned function is called (which waits for the release).
func holdLock(t *testing.T, l *Locker, key string) (release func()) {
	t.Helper()
	held := make(chan struct{})
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.Do(context.Background(), key, func(context.Context) error {
			close(held)
			<-stop
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("hold %s: %v", key, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			if err := <-done; err != nil {
				t.Errorf("holder of %s: %v", key, err)
			}
		})
	}
}

// assertReleased fails the test if any node still has the lock key.
func assertReleased(t *testing.T, addrs []string, name string) {
	t.Helper()
	for _, c := range redisClients(t, addrs) {
		n, err := c.Exists(context.Background(), name).Result()
		if err != nil {
			t.Fatalf("exists %s on %s: %v", name, c.Options().Addr, err)
		}
		if n != 0 {
			t.Errorf("%s still set on %s after Do returned", name, c.Options().Addr)
		}
	}
}

func redisClients(t *testing.T, addrs []string) []*redis.Client {
	t.Helper()
	clients := redisx.Clients(addrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	return clients
}

// uniqueKey returns a lock key no other test (or earlier run) uses: tests
// share the Redis nodes.
func uniqueKey(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "test:" + t.Name() + ":" + hex.EncodeToString(b)
}

// metricValue returns the value of a counter, or the sample count of a
// histogram, whose labels include the given name/value pairs.
func metricValue(t *testing.T, m *metrics.Metrics, name string, labelPairs ...string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, metric := range f.GetMetric() {
			if !hasLabels(metric, labelPairs) {
				continue
			}
			if f.GetType() == dto.MetricType_HISTOGRAM {
				return float64(metric.GetHistogram().GetSampleCount())
			}
			return metric.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s%v not registered", name, labelPairs)
	return 0
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// blackholeNode returns the address of a node that accepts connections and
// never answers: a hung or partitioned Redis, the slow kind of down.
func blackholeNode(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// histogramSum returns the sum of the samples of an unlabelled histogram.
func histogramSum(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	return histogram(t, m, name).GetSampleSum()
}

// histogramMax returns the smallest bucket bound that holds every sample
// of an unlabelled histogram (+Inf past the last).
func histogramMax(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	h := histogram(t, m, name)
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() == h.GetSampleCount() {
			return b.GetUpperBound()
		}
	}
	return math.Inf(1)
}

func histogram(t *testing.T, m *metrics.Metrics, name string) *dto.Histogram {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("histogram %s not registered", name)
	return nil
}
