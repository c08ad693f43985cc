//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Bounds of the stack's lifecycle: nothing here waits forever.
const (
	upTimeout    = 10 * time.Minute // includes building the shop image if it is missing
	readyTimeout = 3 * time.Minute
	downTimeout  = 2 * time.Minute
)

// stack is one compose project of docker-compose.yml, under a name of its
// own so that it never touches another run's containers or volumes.
type stack struct {
	compose    []string
	project    string
	env        []string
	base       string // the balancer, http://127.0.0.1:<port>
	gateway    string // the payment gateway, http://127.0.0.1:<port>
	mailer     string // the mail provider, http://127.0.0.1:<port>
	adminToken string
}

// startStack brings the stack up and waits until the balancer answers
// /readyz. The stack is torn down (volumes included) when the test ends,
// whether it passed or not; if it failed, the services' logs are shown.
func startStack(ctx context.Context, t *testing.T) *stack {
	t.Helper()
	compose, err := composeCommand()
	if err != nil {
		t.Fatal(err)
	}
	port := envOr("SHOP_E2E_PORT", "18080")
	gwPort := envOr("SHOP_E2E_GATEWAY_PORT", "18081")
	mailPort := envOr("SHOP_E2E_MAILER_PORT", "18082")
	for name, p := range map[string]string{"SHOP_E2E_PORT": port, "SHOP_E2E_GATEWAY_PORT": gwPort, "SHOP_E2E_MAILER_PORT": mailPort} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Fatalf("port %s is taken (set %s): %v", p, name, err)
		}
		ln.Close()
	}
	s := &stack{
		compose:    compose,
		project:    "shop-e2e-" + strings.ToLower(rand.Text()[:8]),
		base:       "http://127.0.0.1:" + port,
		gateway:    "http://127.0.0.1:" + gwPort,
		mailer:     "http://127.0.0.1:" + mailPort,
		adminToken: "e2e-admin-" + rand.Text(),
	}
	// The smoke test registers and orders far faster than a person, from
	// one address: it runs with the rate limits off, as a load test would.
	s.env = append(os.Environ(), "SHOP_PORT="+port, "SHOP_GATEWAY_PORT="+gwPort, "SHOP_MAILER_PORT="+mailPort, "SHOP_ADMIN_TOKEN="+s.adminToken,
		"SHOP_RATE_LIMIT=off")
	t.Logf("compose: %s -p %s, balancer on %s", strings.Join(compose, " "), s.project, s.base)

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), downTimeout)
		defer cancel()
		if t.Failed() {
			out, _ := s.run(ctx, "ps")
			t.Logf("compose ps:\n%s", out)
			out, _ = s.run(ctx, "logs", "--no-color", "--tail=60")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := s.run(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})

	upCtx, cancel := context.WithTimeout(ctx, upTimeout)
	defer cancel()
	start := time.Now()
	if out, err := s.run(upCtx, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	if err := s.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stack ready in %s", time.Since(start).Round(time.Second))
	return s
}

// stop stops services, as `docker compose stop` does: SIGTERM, then the
// service drains its in-flight requests.
func (s *stack) stop(ctx context.Context, services ...string) error {
	out, err := s.run(ctx, append([]string{"stop"}, services...)...)
	if err != nil {
		return fmt.Errorf("compose stop %s: %w\n%s", strings.Join(services, " "), err, out)
	}
	return nil
}

// run runs one compose command on the stack and returns its output.
func (s *stack) run(ctx context.Context, args ...string) (string, error) {
	return s.runWith(ctx, nil, args...)
}

// runWith is run with extra variables in the command's environment (the
// compose file's ${…} take them).
func (s *stack) runWith(ctx context.Context, extra []string, args ...string) (string, error) {
	full := append([]string{}, s.compose[1:]...)
	full = append(full, "-p", s.project, "-f", "../docker-compose.yml")
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, s.compose[0], full...)
	cmd.Env = append(append([]string(nil), s.env...), extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitReady polls the balancer's /readyz: compose 1.29 has no --wait.
func (s *stack) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 2 * time.Second}
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack not ready after %s: last answer: %s", readyTimeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// composeCommand is SHOP_E2E_COMPOSE, else `docker compose` when the plugin
// exists, else `docker-compose`.
func composeCommand() ([]string, error) {
	if v := os.Getenv("SHOP_E2E_COMPOSE"); v != "" {
		return strings.Fields(v), nil
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}, nil
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	return nil, errors.New("neither `docker compose` nor `docker-compose` is installed")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
