package seats

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// counters are the seat metrics.
type counters struct {
	holds   *prometheus.CounterVec
	moves   *prometheus.CounterVec
	expired prometheus.Counter
}

func newCounters(m *metrics.Metrics) (*counters, error) {
	c := &counters{
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_seat_holds_total",
			Help: "Hold requests, by outcome: held, unavailable (a seat was taken), capped (the user's holds on the event reached a cap), busy (a lock or the seats kept changing), error.",
		}, []string{"outcome"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_seat_hold_moves_total",
			Help: "Confirms and releases answered with success, by flow (confirm_hold, release_hold); a repeat counts again.",
		}, []string{"flow"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shop_seat_holds_expired_total",
			Help: "Holds the expiry job expired in this process, their seats freed.",
		}),
	}
	if m != nil {
		if err := metrics.Register(m.Registry, c.holds, c.moves, c.expired); err != nil {
			return nil, fmt.Errorf("seats metrics: %w", err)
		}
	}
	return c, nil
}
