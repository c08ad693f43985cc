package standin

import (
	"context"
	"os"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// TestProviderTracing_NamesItsInstance: the spans of a stand-in provider
// (shop gateway, shop mailer) name their process (service.instance.id) as
// a replica's do: SHOP_REPLICA_NAME, else the host's name; never empty,
// which a trace viewer shows as an instance without a name.
func TestProviderTracing_NamesItsInstance(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Fatalf("no host name (%v)", err)
	}
	for _, tc := range []struct{ configured, want string }{{"gateway-a", "gateway-a"}, {"", host}} {
		cfg := config.Config{ReplicaName: tc.configured, Tracing: tracing.Settings{Export: true}}
		tp, stop, err := providerTracing(cfg, "shop-gateway")
		if err != nil {
			t.Fatal(err)
		}
		// Not ended, so nothing is exported when it stops.
		_, span := tp.Tracer("test").Start(context.Background(), "probe")
		ro, ok := span.(sdktrace.ReadOnlySpan)
		if !ok {
			t.Fatalf("SHOP_REPLICA_NAME %q: a %T, not a recorded span", tc.configured, span)
		}
		got, _ := ro.Resource().Set().Value(semconv.ServiceInstanceIDKey)
		stop()
		if got.AsString() != tc.want {
			t.Errorf("SHOP_REPLICA_NAME %q: service.instance.id %q, want %q", tc.configured, got.AsString(), tc.want)
		}
	}
}
