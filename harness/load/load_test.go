package load_test

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/redisx"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const adminToken = "load-test-admin-token"

// stack is one replica of the service with its metrics listener, and the
// gateway: one replica, so its request counter is every request the
// script sent.
type stack struct {
	baseURL, gatewayURL, metricsURL string
}

func startStack(t *testing.T) stack {
	t.Helper()
	environ := map[string]string{
		"SHOP_DATABASE_URL": testenv.DatabaseURL(t),
		"SHOP_REDIS_ADDRS":  strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_ADMIN_TOKEN":  adminToken,
		"SHOP_RATE_LIMIT":   "off",
	}
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logger := slog.New(slog.DiscardHandler)
	_, gwURL := gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, Logger: logger})
	cfg.GatewayURL = gwURL
	clients := redisx.Clients(cfg.RedisAddrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	a, err := app.New(cfg, app.Deps{Pool: testenv.PoolFor(t, environ["SHOP_DATABASE_URL"]), Redis: clients, Logger: logger})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	api := httptest.NewServer(a.Echo)
	t.Cleanup(api.Close)
	metrics := httptest.NewServer(a.MetricsHandler())
	t.Cleanup(metrics.Close)
	return stack{baseURL: api.URL, gatewayURL: gwURL, metricsURL: metrics.URL + "/metrics"}
}

// served sums shop_http_requests_total over every route and status.
func (s stack) served(t *testing.T) int {
	t.Helper()
	res, err := http.Get(s.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shop_http_requests_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return int(total)
}

func moduleRoot(t *testing.T) string {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// result is what one `shop load` process did.
type result struct {
	code           int
	stdout, stderr string
}

func shopLoad(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(testenv.ShopBinary(t), append([]string{"load"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("shop load: %v", err)
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("shop load %s: exit %d\n%s\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func script(t *testing.T, name string) string {
	return filepath.Join(moduleRoot(t), "loadtest", "k6", name)
}

// flashSale is flash-sale.js at a size for a shared two-core machine.
func flashSale(s stack, extra ...string) []string {
	args := []string{"-q", "-e", "BASE_URL=" + s.baseURL, "-e", "GATEWAY_URL=" + s.gatewayURL, "-e", "ADMIN_TOKEN=" + adminToken,
		"-e", "BUYERS=6", "-e", "STOCK=3", "-e", "CLICKS=2", "-e", "THINK=0.01", "-e", "RETRY_WAIT_MAX=0.05", "-e", "P95_MS=30000"}
	return append(args, extra...)
}

var httpReqsLine = regexp.MustCompile(`(?m)^\s+http_reqs\.+: (\d+)\s`)

// TestLoad_FlashSale runs flash-sale.js as a process: every threshold
// holds (exit 0), the summary's request count is the server's own count,
// and the outputs have k6's shapes.
func TestLoad_FlashSale(t *testing.T) {
	s := startStack(t)
	dir := t.TempDir()
	export, samples, report := filepath.Join(dir, "summary.json"), filepath.Join(dir, "samples.json"), filepath.Join(dir, "report.html")
	r := shopLoad(t, flashSale(s, "--summary-export", export, "--out", "json="+samples, "--report", report, script(t, "flash-sale.js"))...)
	if r.code != 0 {
		t.Fatalf("want exit 0, got %d", r.code)
	}
	for _, want := range []string{"█ THRESHOLDS", "✓ 'count<=3' count=", "http_req_duration...", "p(90)=", "p(95)=",
		"{ endpoint:orders.create }", "flash_sale_orders_created...", "✓ setup and teardown ran without an exception"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q", want)
		}
	}

	// The request count, three ways, against the server's counter.
	m := httpReqsLine.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatal("no http_reqs line in the summary")
	}
	printed, _ := strconv.Atoi(m[1])
	served := s.served(t)
	if printed == 0 || printed != served {
		t.Errorf("summary says %d requests, the server counted %d", printed, served)
	}
	sum := readSummaryExport(t, export)
	if got := int(sum.Metrics["http_reqs"]["count"].(float64)); got != served {
		t.Errorf("summary-export says %d requests, the server counted %d", got, served)
	}
	if got := countPoints(t, samples, "http_reqs"); got != served {
		t.Errorf("--out json has %d http_reqs points, the server counted %d", got, served)
	}

	checkSummaryShape(t, sum)
	if th := sum.Metrics["flash_sale_orders_created"]["thresholds"]; th == nil || th.(map[string]any)["count<=3"] != false {
		t.Errorf("want flash_sale_orders_created thresholds {count<=3: false} (false: not failed), got %v", th)
	}

	html, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<svg role="img" aria-label="Virtual users and iterations"`, "<td>orders.create</td>", "every threshold held"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(string(html), "http://") || strings.Contains(string(html), "https://") {
		t.Error("the report links to something: it must work offline")
	}
}

type summaryExport struct {
	RootGroup map[string]any            `json:"root_group"`
	Metrics   map[string]map[string]any `json:"metrics"`
}

func readSummaryExport(t *testing.T, path string) summaryExport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s summaryExport
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary-export: %v", err)
	}
	return s
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// checkSummaryShape holds the export to k6's documented --summary-export:
// root_group {name, path, id = md5(path), groups, checks {name: {name,
// path, id, passes, fails}}}; metrics by name with the values of their
// type, and thresholds {expr: bool}.
func checkSummaryShape(t *testing.T, s summaryExport) {
	t.Helper()
	rg := s.RootGroup
	if rg["name"] != "" || rg["path"] != "" || rg["id"] != "d41d8cd98f00b204e9800998ecf8427e" {
		t.Errorf("root_group name/path/id: %v %v %v", rg["name"], rg["path"], rg["id"])
	}
	if _, ok := rg["groups"].(map[string]any); !ok {
		t.Errorf("root_group.groups is %T, want an object", rg["groups"])
	}
	checks, ok := rg["checks"].(map[string]any)
	if !ok || len(checks) == 0 {
		t.Fatalf("root_group.checks: %v", rg["checks"])
	}
	for name, c := range checks {
		c := c.(map[string]any)
		path := "::" + name
		if c["name"] != name || c["path"] != path || c["id"] != md5Hex(path) {
			t.Errorf("check %q: %v", name, c)
		}
		for _, k := range []string{"passes", "fails"} {
			if _, ok := c[k].(float64); !ok {
				t.Errorf("check %q has no %s", name, k)
			}
		}
	}
	want := map[string][]string{
		"http_reqs":         {"count", "rate"},
		"iterations":        {"count", "rate"},
		"checks":            {"passes", "fails", "value"},
		"http_req_failed":   {"passes", "fails", "value"},
		"http_req_duration": {"avg", "min", "med", "max", "p(90)", "p(95)"},
		"vus":               {"value", "min", "max"},
		"http_req_duration{expected_response:true}": {"avg", "min", "med", "max", "p(90)", "p(95)"},
	}
	for name, keys := range want {
		m, ok := s.Metrics[name]
		if !ok {
			t.Errorf("metrics.%s missing", name)
			continue
		}
		for _, k := range keys {
			if _, ok := m[k].(float64); !ok {
				t.Errorf("metrics.%s.%s is %v, want a number", name, k, m[k])
			}
		}
	}
	for name, m := range s.Metrics {
		if th, ok := m["thresholds"]; ok {
			for expr, v := range th.(map[string]any) {
				if _, ok := v.(bool); !ok {
					t.Errorf("metrics.%s.thresholds[%q] is %v, want a bool", name, expr, v)
				}
			}
		}
	}
}

// countPoints counts the Point lines of metric in a --out json file, and
// checks each line has k6's fields and its Metric line came first.
func countPoints(t *testing.T, path, metric string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	declared := map[string]bool{}
	n := 0
	dec := json.NewDecoder(f)
	for {
		var line struct {
			Type   string         `json:"type"`
			Metric string         `json:"metric"`
			Data   map[string]any `json:"data"`
		}
		if err := dec.Decode(&line); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("--out json: %v", err)
		}
		switch line.Type {
		case "Metric":
			declared[line.Metric] = true
			if _, ok := line.Data["type"].(string); !ok {
				t.Fatalf("Metric line without data.type: %v", line)
			}
		case "Point":
			if !declared[line.Metric] {
				t.Fatalf("Point of %s before its Metric line", line.Metric)
			}
			if _, ok := line.Data["time"].(string); !ok {
				t.Fatalf("Point without data.time: %v", line)
			}
			if line.Metric == metric {
				n++
			}
		default:
			t.Fatalf("line type %q", line.Type)
		}
	}
	return n
}

// TestLoad_ExitCodes: k6's codes, seen from the process.
func TestLoad_ExitCodes(t *testing.T) {
	s := startStack(t)
	write := func(t *testing.T, src string) string {
		p := filepath.Join(t.TempDir(), "main.js")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("ThresholdFailed", func(t *testing.T) {
		// A p95 bound of 0 ms no request can meet; the run itself is sound.
		r := shopLoad(t, flashSale(s, "-e", "P95_MS=0", script(t, "flash-sale.js"))...)
		if r.code != 99 || !strings.Contains(r.stdout, "✗ 'p(95)<0'") || !strings.Contains(r.stdout, "✓ setup and teardown") {
			t.Errorf("want exit 99 with the p(95) threshold failed and teardown passed, got %d", r.code)
		}
	})
	t.Run("TeardownThrew", func(t *testing.T) {
		r := shopLoad(t, "-q", "-e", "BASE_URL="+s.baseURL, write(t, `import http from 'k6/http'; import { fail } from 'k6';
			export default function () { http.get(__ENV.BASE_URL + '/readyz'); }
			export function teardown() { fail('oversold: 3 units in orders, 2 in stock'); }`))
		if r.code != 107 || !strings.Contains(r.stdout, "✗ teardown threw (its invariant failed): GoError: oversold") {
			t.Errorf("want exit 107 with the teardown's failure in the summary, got %d", r.code)
		}
	})
	t.Run("SyntaxError", func(t *testing.T) {
		r := shopLoad(t, "-q", write(t, `export default function () { if { }`))
		if r.code != 107 || !strings.Contains(r.stderr, "script error") {
			t.Errorf("want exit 107 and a script error, got %d", r.code)
		}
	})
	t.Run("UnsupportedModule", func(t *testing.T) {
		r := shopLoad(t, "-q", write(t, `import ws from 'k6/ws'; export default function () {}`))
		if r.code != 107 || !strings.Contains(r.stderr, `module "k6/ws" is not supported`) {
			t.Errorf("want exit 107 naming k6/ws, got %d", r.code)
		}
	})
	t.Run("UnsupportedAPIInAnIteration", func(t *testing.T) {
		r := shopLoad(t, "-q", write(t, `import http from 'k6/http';
			export default function () { try { http.cookieJar(); } catch (e) {} }`))
		if r.code != 107 || !strings.Contains(r.stdout, "k6/http.cookieJar is not supported") {
			t.Errorf("want exit 107 naming k6/http.cookieJar, even caught, got %d", r.code)
		}
	})
	t.Run("Usage", func(t *testing.T) {
		if r := shopLoad(t, "--out", "influxdb=http://x", "a.js"); r.code != 2 || !strings.Contains(r.stderr, "only json=FILE") {
			t.Errorf("want exit 2 for an output it does not write, got %d", r.code)
		}
	})
}
