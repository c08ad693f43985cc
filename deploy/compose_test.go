package deploy_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shop-example/shop/internal/platform/config"
)

// TestCompose_StopGracePeriod: `docker compose stop` sends SIGTERM and
// kills after the service's stop_grace_period (10 s unless set). Like a
// pod's grace period, a replica's must outlast the drain and the late
// idempotency tries, or a stop kills requests it could have finished.
func TestCompose_StopGracePeriod(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command         []string          `yaml:"command"`
			StopGracePeriod string            `yaml:"stop_grace_period"`
			Environment     map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	replicas := 0
	for name, s := range doc.Services {
		if !slices.Equal(s.Command, []string{"serve"}) {
			continue
		}
		replicas++
		cfg, err := config.FromEnv(func(k string) string {
			if k == "SHOP_SHUTDOWN_DRAIN" {
				return s.Environment[k]
			}
			return ""
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		grace := 10 * time.Second // compose's default
		if s.StopGracePeriod != "" {
			if grace, err = time.ParseDuration(s.StopGracePeriod); err != nil {
				t.Fatalf("%s: stop_grace_period: %v", name, err)
			}
		}
		if need := cfg.ShutdownDrain + drainMargin; grace < need {
			t.Errorf("%s: stop_grace_period %s, want at least %s (SHOP_SHUTDOWN_DRAIN %s + %s)",
				name, grace, need, cfg.ShutdownDrain, drainMargin)
		}
	}
	if replicas < 2 {
		t.Errorf("%d services run `serve`, want the two replicas", replicas)
	}
}
