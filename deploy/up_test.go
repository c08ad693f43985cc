package deploy_test

import (
	"net"
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
// in FAKE_IMAGES ("all": every one) and can pull none, and the containers
// of FAKE_HOLDERS ("port id project dir" lines) publish ports; compose
// runs the containers of FAKE_OURS (ids), takes FAKE_UP_SECONDS to come
// up, as `compose up -d` does while it waits on healthchecks, or fails
// with FAKE_UP_FAIL, and notes the profiles and the OTLP endpoint it was
// started with in FAKE_DIR/up-env and each project it took down in
// FAKE_DIR/down; curl answers 200 only once compose is done.
var upFakes = map[string]string{
	"docker": `#!/usr/bin/env bash
case "$1 $2" in
"image inspect")
  [ "$FAKE_IMAGES" = all ] && exit 0
  for i in $FAKE_IMAGES; do [ "$i" = "$3" ] && exit 0; done
  exit 1 ;;
"compose version") exit 1 ;;
esac
if [ "$1" = ps ]; then
  sleep "${FAKE_PS_SECONDS:-0}"
  port=$(printf '%s\n' "$@" | sed -n 's/^publish=//p')
  printf '%s\n' "${FAKE_HOLDERS:-}" | awk -v p="$port" '$1 == p {print $2, $3, $4}'
  exit 0
fi
[ "$1" = pull ] && { echo "no registry" >&2; exit 1; }
exit 0
`,
	"fake-compose": `#!/usr/bin/env bash
case "$1" in
up)
  echo "COMPOSE_PROFILES=${COMPOSE_PROFILES:-} SHOP_OTLP_ENDPOINT=${SHOP_OTLP_ENDPOINT:-}" >"$FAKE_DIR/up-env"
  echo "SHOP_PG_SYNC_STANDBY=${SHOP_PG_SYNC_STANDBY:-} SHOP_COMPOSE_DATABASE_URL=${SHOP_COMPOSE_DATABASE_URL:-}" >"$FAKE_DIR/up-ha-env"
  echo "Creating shop_postgres_1 ... done"
  [ -n "${FAKE_RECREATE:-}" ] && echo "$FAKE_RECREATE"
  sleep "${FAKE_UP_SECONDS:-0}"
  [ -n "${FAKE_UP_FAIL:-}" ] && { echo "ERROR: for api-1  Container is unhealthy"; exit 1; }
  touch "$FAKE_DIR/up-done" ;;
ps)
  if [ "${2:-}" = -q ]; then
    for id in ${FAKE_OURS:-}; do echo "$id"; done
    exit 0
  fi
  printf 'Name  Command  State  Ports\n----------\n'
  [ -f "$FAKE_DIR/up-done" ] || echo "shop_api-1_1  serve  Up (health: starting)" ;;
down) echo "${COMPOSE_PROJECT_NAME:-this} $*" >>"$FAKE_DIR/down" ;;
restart) echo "$*" >>"$FAKE_DIR/restart" ;;
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
		"SHOP_IMAGE=shop:t", "SHOP_UP_TIMEOUT=60", "SHOP_IMAGE_BUILD=host",
		"COMPOSE_PROFILES=", "SHOP_OTLP_ENDPOINT=", "COMPOSE_PROJECT_NAME=",
		// Ports nothing listens on: the host's own must not count.
		"SHOP_PORT="+freePort(t), "SHOP_GATEWAY_PORT="+freePort(t), "SHOP_MAILER_PORT="+freePort(t),
		"SHOP_JAEGER_PORT="+freePort(t), "SHOP_PROMETHEUS_PORT="+freePort(t))
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
// on an engine that can pull none, make up's plan is the stand-ins of the
// missing ones only: the Go image only when the host has no Go to build
// the binary with (which it does in the background meanwhile); with them
// present, it builds none.
func TestUp_BuildsStandInsWhenImagesCannotBePulled(t *testing.T) {
	for _, tc := range []struct {
		build string
		want  []string
	}{
		{"host", []string{"missing: redis:t nginx:t rt:t;", "deploy/images/build.sh redis nginx debian)",
			"would build the shop's binary on the host in the background", "would build the shop image shop:t (deploy/images/shop-image.sh, host)", "would run:"}},
		{"docker", []string{"missing: redis:t nginx:t rt:t go:t;", "deploy/images/build.sh redis nginx debian golang)",
			"would build the shop image shop:t (deploy/images/shop-image.sh, docker)", "would run:"}},
	} {
		out, err := runUp(t, []string{"FAKE_IMAGES=pg:t", "SHOP_IMAGE_BUILD=" + tc.build}, "--dry-run")
		if err != nil {
			t.Fatalf("up.sh --dry-run: %v\n%s", err, out)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("up.sh --dry-run (%s build) with images missing does not say %q:\n%s", tc.build, want, out)
			}
		}
		if tc.build == "docker" && strings.Contains(out, "binary on the host") {
			t.Errorf("up.sh --dry-run (docker build) builds a binary on the host:\n%s", out)
		}
	}
	out, err := runUp(t, []string{"FAKE_IMAGES=all"}, "--dry-run")
	if err != nil {
		t.Fatalf("up.sh --dry-run: %v\n%s", err, out)
	}
	if strings.Contains(out, "build.sh") || !strings.Contains(out, "base images present") {
		t.Errorf("up.sh --dry-run with every image present:\n%s", out)
	}
}

// TestUp_Ports: before compose starts, each of the stack's ports is
// looked at. A container of this project's is the stack brought up again;
// one of another project of this checkout (the failover demo's) is taken
// down, and up.sh says so; a container of elsewhere, or a process of the
// host, stops up.sh before compose creates anything.
func TestUp_Ports(t *testing.T) {
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	here = filepath.Dir(here)
	port := freePort(t)
	for _, tc := range []struct {
		name, holders, ours string
		started             bool
		down, says          string
	}{
		{"ours", port + " c1 wt " + here, "c1", true, "", "the stack runs already"},
		{"demo", port + " c2 shop-ha " + here, "", true, "shop-ha", "taking it down (its volumes kept"},
		{"elsewhere", port + " c3 other /nonexistent", "", false, "", "port " + port + " is taken by the container c3 of the compose project other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var downs string
			out, err := runUpWithDir(t, func(dir string) {
				_, statErr := os.Stat(filepath.Join(dir, "up-env"))
				if started := statErr == nil; started != tc.started {
					t.Errorf("compose up ran: %v, want %v", started, tc.started)
				}
				b, _ := os.ReadFile(filepath.Join(dir, "down"))
				downs = string(b)
			}, []string{"FAKE_IMAGES=all", "FAKE_HOLDERS=" + tc.holders, "FAKE_OURS=" + tc.ours, "SHOP_PORT=" + port}, "--no-build")
			if (err == nil) != tc.started {
				t.Errorf("up.sh: %v\n%s", err, out)
			}
			if !strings.Contains(out, tc.says) {
				t.Errorf("up.sh does not say %q:\n%s", tc.says, out)
			}
			if tc.down == "" && downs != "" {
				t.Errorf("up.sh took down %q", downs)
			}
			if tc.down != "" && !strings.HasPrefix(downs, tc.down+" down") {
				t.Errorf("up.sh took down %q, want the project %s", downs, tc.down)
			}
		})
	}

	// A process of the host on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, taken, _ := net.SplitHostPort(ln.Addr().String())
	out, err := runUpWithDir(t, func(dir string) {
		if _, err := os.Stat(filepath.Join(dir, "up-env")); err == nil {
			t.Error("compose up ran with the port taken by a process of the host")
		}
	}, []string{"FAKE_IMAGES=all", "SHOP_GATEWAY_PORT=" + taken}, "--no-build")
	if err == nil || !strings.Contains(out, "port "+taken+" is taken by a process of this host") {
		t.Errorf("up.sh with port %s taken (%v):\n%s", taken, err, out)
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

// TestUp_RecreatedReplicasRestartTheBalancer: nginx resolves api-1 and
// api-2 when it starts, so when compose recreated them in a running stack
// (make up-observability on make up's) the balancer starts again; a
// stack started afresh, or one whose replicas stayed, leaves it alone.
func TestUp_RecreatedReplicasRestartTheBalancer(t *testing.T) {
	for _, tc := range []struct {
		ours, recreate, want string
	}{
		{"c1", "Recreating shop_api-1_1 ... done", "restart lb\n"},
		{"c1", "Container shop-api-2-1  Recreated", "restart lb\n"},
		{"c1", "Recreating shop_migrate_1 ... done", ""},
		{"", "Recreating shop_api-1_1 ... done", ""},
	} {
		var restarted string
		out, err := runUpWithDir(t, func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "restart"))
			restarted = string(b)
		}, []string{"FAKE_IMAGES=all", "FAKE_OURS=" + tc.ours, "FAKE_RECREATE=" + tc.recreate}, "--no-build")
		if err != nil {
			t.Fatalf("up.sh: %v\n%s", err, out)
		}
		if restarted != tc.want {
			t.Errorf("running before: %q, compose said %q: restarted %q, want %q\n%s", tc.ours, tc.recreate, restarted, tc.want, out)
		}
	}
}

// TestUp_TimeoutBoundsTheWaitOnly: SHOP_UP_TIMEOUT bounds the wait for
// compose and /readyz, not the builds before it: a first make up that
// spent longer than the timeout building must still wait for compose.
func TestUp_TimeoutBoundsTheWaitOnly(t *testing.T) {
	out, err := runUp(t, []string{"FAKE_IMAGES=all", "FAKE_PS_SECONDS=1.5", "FAKE_UP_SECONDS=2", "SHOP_UP_TIMEOUT=4"}, "--no-build")
	if err != nil {
		t.Fatalf("up.sh gave up on compose after %s of steps before it: %v\n%s", "4.5 s", err, out)
	}
	if !strings.Contains(out, "ready in") {
		t.Errorf("up.sh does not say it is ready:\n%s", out)
	}
	out, err = runUp(t, []string{"FAKE_IMAGES=all", "FAKE_UP_SECONDS=6", "SHOP_UP_TIMEOUT=2"}, "--no-build")
	if err == nil || !strings.Contains(out, "did not answer 200 within 2s") {
		t.Errorf("up.sh waited past SHOP_UP_TIMEOUT (%v):\n%s", err, out)
	}
}

// TestUp_ComposeFails: a compose that fails stops up.sh with its output,
// rather than a wait for a balancer that will not come, and leaves no
// container behind: when none of the project ran before, the project is
// taken down; a stack that ran before is left to run.
func TestUp_ComposeFails(t *testing.T) {
	for _, tc := range []struct {
		ours, down string
	}{{"", "this down --remove-orphans\n"}, {"c1", ""}} {
		var downs string
		out, err := runUpWithDir(t, func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "down"))
			downs = string(b)
		}, []string{"FAKE_IMAGES=all", "FAKE_UP_FAIL=1", "FAKE_OURS=" + tc.ours}, "--no-build")
		if err == nil {
			t.Fatalf("up.sh succeeded although compose failed:\n%s", out)
		}
		if !strings.Contains(out, "Container is unhealthy") {
			t.Errorf("up.sh does not show compose's output:\n%s", out)
		}
		if downs != tc.down {
			t.Errorf("with %q running before, up.sh took down %q, want %q:\n%s", tc.ours, downs, tc.down, out)
		}
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
	if !regexp.MustCompile(`traces +open http://localhost:\d+/web/trace\.html\?id=<trace_id>`).MatchString(out) {
		t.Errorf("up.sh --observability does not say which page shows a trace:\n%s", out)
	}
	if strings.Contains(out, "/trace/<trace_id>") {
		t.Errorf("up.sh --observability points at Jaeger's own UI, which the stand-in lacks:\n%s", out)
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
