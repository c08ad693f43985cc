package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The commands up.sh runs, as stand-ins: docker knows the images listed
// in FAKE_IMAGES ("all": every one) and can pull none; compose takes
// FAKE_UP_SECONDS to come up, as `compose up -d` does while it waits on
// healthchecks, or fails with FAKE_UP_FAIL, and notes the profiles and the
// OTLP endpoint it was started with in FAKE_DIR/up-env; curl answers 200
// only once compose is done.
var upFakes = map[string]string{
	"docker": `#!/usr/bin/env bash
case "$1 $2" in
"image inspect")
  [ "$FAKE_IMAGES" = all ] && exit 0
  for i in $FAKE_IMAGES; do [ "$i" = "$3" ] && exit 0; done
  exit 1 ;;
"compose version") exit 1 ;;
esac
[ "$1" = pull ] && { echo "no registry" >&2; exit 1; }
exit 0
`,
	"fake-compose": `#!/usr/bin/env bash
case "$1" in
up)
  echo "COMPOSE_PROFILES=${COMPOSE_PROFILES:-} SHOP_OTLP_ENDPOINT=${SHOP_OTLP_ENDPOINT:-}" >"$FAKE_DIR/up-env"
  echo "SHOP_PG_SYNC_STANDBY=${SHOP_PG_SYNC_STANDBY:-} SHOP_COMPOSE_DATABASE_URL=${SHOP_COMPOSE_DATABASE_URL:-}" >"$FAKE_DIR/up-ha-env"
  echo "Creating shop_postgres_1 ... done"
  sleep "${FAKE_UP_SECONDS:-0}"
  [ -n "${FAKE_UP_FAIL:-}" ] && { echo "ERROR: for api-1  Container is unhealthy"; exit 1; }
  touch "$FAKE_DIR/up-done" ;;
ps)
  printf 'Name  Command  State  Ports\n----------\n'
  [ -f "$FAKE_DIR/up-done" ] || echo "shop_api-1_1  serve  Up (health: starting)" ;;
logs) echo "seed_1 | SHOP_DEMO_TOKEN=tok123" ;;
esac
`,
	"curl": `#!/usr/bin/env bash
if [ -f "$FAKE_DIR/up-done" ]; then printf 200; else printf 000; fi
`,
}

// runUp runs deploy/up.sh with the stand-ins first on the PATH and the
// image variables set (so that no .env of the working tree counts), and
// returns its output and error.
func runUp(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	return runUpWithDir(t, nil, env, args...)
}

// runUpWithDir is runUp, then check looks at what the stand-ins left in
// their directory.
func runUpWithDir(t *testing.T, check func(dir string), env []string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		// up.sh is a bash script, as make up and .ci/run are: a machine
		// without bash cannot run what this test checks, and must not
		// pass it green.
		t.Fatalf("bash is not installed: %v", err)
	}
	dir := t.TempDir()
	for name, body := range upFakes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", append([]string{"up.sh"}, args...)...)
	cmd.Env = append(os.Environ(),
		"PATH="+dir+":"+os.Getenv("PATH"), "FAKE_DIR="+dir, "COMPOSE="+filepath.Join(dir, "fake-compose"),
		"POSTGRES_IMAGE=pg:t", "REDIS_IMAGE=redis:t", "NGINX_IMAGE=nginx:t", "GO_IMAGE=go:t", "RUNTIME_IMAGE=rt:t",
		"PROMETHEUS_IMAGE=prom:t", "JAEGER_IMAGE=jaeger:t",
		"SHOP_IMAGE=shop:t", "SHOP_UP_TIMEOUT=60",
		"COMPOSE_PROFILES=", "SHOP_OTLP_ENDPOINT=", "SHOP_JAEGER_PORT=", "SHOP_PROMETHEUS_PORT=")
	// Unset rather than empty: deploy/ha.env fills only what the shell
	// has not set.
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "SHOP_PG_SYNC_STANDBY=") || strings.HasPrefix(kv, "SHOP_COMPOSE_DATABASE_URL=")
	})
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if check != nil {
		check(dir)
	}
	return string(out), err
}

// TestUp_BuildsStandInsWhenImagesCannotBePulled: with base images missing
// on an engine that can pull none, make up's plan is the stand-ins; with
// them present, it builds none.
func TestUp_BuildsStandInsWhenImagesCannotBePulled(t *testing.T) {
	out, err := runUp(t, []string{"FAKE_IMAGES=pg:t"}, "--dry-run")
	if err != nil {
		t.Fatalf("up.sh --dry-run: %v\n%s", err, out)
	}
	for _, want := range []string{"missing: redis:t nginx:t go:t rt:t", "deploy/images/build.sh", "would build the shop image shop:t", "would run:"} {
		if !strings.Contains(out, want) {
			t.Errorf("up.sh --dry-run with images missing does not say %q:\n%s", want, out)
		}
	}
	out, err = runUp(t, []string{"FAKE_IMAGES=all"}, "--dry-run")
	if err != nil {
		t.Fatalf("up.sh --dry-run: %v\n%s", err, out)
	}
	if strings.Contains(out, "build.sh") || !strings.Contains(out, "base images present") {
		t.Errorf("up.sh --dry-run with every image present:\n%s", out)
	}
}

// TestUp_SaysWhatItWaitsFor: compose up -d returns only once its
// healthchecks pass, so up.sh says what it waits for while compose runs,
// and counts the time from its own start.
func TestUp_SaysWhatItWaitsFor(t *testing.T) {
	const upSeconds = 3
	out, err := runUp(t, []string{"FAKE_IMAGES=all", "FAKE_UP_SECONDS=" + strconv.Itoa(upSeconds)}, "--no-build")
	if err != nil {
		t.Fatalf("up.sh: %v\n%s", err, out)
	}
	waiting := strings.Index(out, "waiting for compose up -d; not ready yet: shop_api-1_1")
	done := strings.Index(out, "compose is done")
	if waiting < 0 || done < 0 || waiting > done {
		t.Errorf("up.sh says nothing while compose starts (a waiting line, then compose is done):\n%s", out)
	}
	m := regexp.MustCompile(`ready in (\d+)s`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up.sh does not say when it is ready:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[1]); n < upSeconds {
		t.Errorf("up.sh says ready in %ss, but compose alone took %ds:\n%s", m[1], upSeconds, out)
	}
	if !strings.Contains(out, "export TOKEN=tok123") {
		t.Errorf("up.sh does not print the demo user's token:\n%s", out)
	}
}

// TestUp_ComposeFails: a compose that fails stops up.sh with its output,
// rather than a wait for a balancer that will not come.
func TestUp_ComposeFails(t *testing.T) {
	out, err := runUp(t, []string{"FAKE_IMAGES=all", "FAKE_UP_FAIL=1"}, "--no-build")
	if err == nil {
		t.Fatalf("up.sh succeeded although compose failed:\n%s", out)
	}
	if !strings.Contains(out, "Container is unhealthy") {
		t.Errorf("up.sh does not show compose's output:\n%s", out)
	}
}

// TestUp_Observability: make up-observability (--observability) also needs
// Prometheus and Jaeger, and builds Jaeger's stand-in (the slow one) only
// when Jaeger cannot be pulled; it starts compose with the profile and
// the services' spans pointed at Jaeger, and says where Jaeger is. make up
// needs neither image and starts compose without them.
func TestUp_Observability(t *testing.T) {
	const base = "FAKE_IMAGES=pg:t redis:t nginx:t go:t rt:t"
	out, err := runUp(t, []string{base + " prom:t"}, "--dry-run", "--observability")
	if err != nil {
		t.Fatalf("up.sh --dry-run --observability: %v\n%s", err, out)
	}
	for _, want := range []string{"missing: jaeger:t", "deploy/images/build.sh jaeger",
		"would run: COMPOSE_PROFILES=observability SHOP_OTLP_ENDPOINT=" + otlpEndpoint + " "} {
		if !strings.Contains(out, want) {
			t.Errorf("up.sh --dry-run --observability without Jaeger does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "deploy/images/build.sh)") {
		t.Errorf("up.sh --dry-run --observability would build every stand-in for Jaeger alone:\n%s", out)
	}
	out, err = runUp(t, []string{base}, "--dry-run", "--observability")
	if err != nil || !strings.Contains(out, "missing: prom:t") {
		t.Errorf("up.sh --dry-run --observability does not see Prometheus missing (%v):\n%s", err, out)
	}

	out, err = runUp(t, []string{base}, "--dry-run")
	if err != nil {
		t.Fatalf("up.sh --dry-run: %v\n%s", err, out)
	}
	if strings.Contains(out, "jaeger") || strings.Contains(out, "prom:t") || strings.Contains(out, "COMPOSE_PROFILES") {
		t.Errorf("make up's plan names the observability profile or its images:\n%s", out)
	}

	out, err = runUpWithDir(t, func(dir string) {
		b, err := os.ReadFile(filepath.Join(dir, "up-env"))
		if err != nil {
			t.Fatalf("compose was not started: %v", err)
		}
		if got, want := strings.TrimSpace(string(b)), "COMPOSE_PROFILES=observability SHOP_OTLP_ENDPOINT="+otlpEndpoint; got != want {
			t.Errorf("compose up ran with %q, want %q", got, want)
		}
	}, []string{"FAKE_IMAGES=all"}, "--no-build", "--observability")
	if err != nil {
		t.Fatalf("up.sh --observability: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Jaeger on http://localhost:16686") {
		t.Errorf("up.sh --observability does not say where Jaeger is:\n%s", out)
	}
}

// TestUp_HA: make failover-demo (--ha) starts compose with the ha profile
// and every setting of deploy/ha.env, and says so; make up starts it with
// neither.
func TestUp_HA(t *testing.T) {
	ha := haEnv(t)
	wantHA := "SHOP_PG_SYNC_STANDBY=" + ha["SHOP_PG_SYNC_STANDBY"] + " SHOP_COMPOSE_DATABASE_URL=" + ha["SHOP_COMPOSE_DATABASE_URL"]
	for _, tc := range []struct {
		args          []string
		profiles, env string
	}{
		{[]string{"--no-build", "--ha"}, "COMPOSE_PROFILES=ha SHOP_OTLP_ENDPOINT=", wantHA},
		{[]string{"--no-build"}, "COMPOSE_PROFILES= SHOP_OTLP_ENDPOINT=", "SHOP_PG_SYNC_STANDBY= SHOP_COMPOSE_DATABASE_URL="},
	} {
		out, err := runUpWithDir(t, func(dir string) {
			for file, want := range map[string]string{"up-env": tc.profiles, "up-ha-env": tc.env} {
				b, err := os.ReadFile(filepath.Join(dir, file))
				if err != nil {
					t.Fatalf("compose was not started: %v", err)
				}
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("up.sh %q: compose up ran with %q, want %q", tc.args, got, want)
				}
			}
		}, []string{"FAKE_IMAGES=all"}, tc.args...)
		if err != nil {
			t.Fatalf("up.sh %q: %v\n%s", tc.args, err, out)
		}
		if says := strings.Contains(out, "synchronous standby"); says != slices.Contains(tc.args, "--ha") {
			t.Errorf("up.sh %q names the standby: %v:\n%s", tc.args, says, out)
		}
	}
}
