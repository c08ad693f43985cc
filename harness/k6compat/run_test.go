package k6compat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testLimits keep the runner's own tests quick.
var testLimits = Limits{VUs: 3, Iterations: 6, Duration: 5 * time.Second, GracefulStop: time.Second}

// echoServer answers /ok with JSON, /conflict with a 409 problem and counts
// what it served.
func echoServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		switch r.URL.Path {
		case "/conflict":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"code":"resource_busy"}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"method":"` + r.Method + `","items":[{"id":"a1"}],"auth":"` + r.Header.Get("Authorization") + `"}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// writeScript writes files (path → source) into a temporary directory and
// returns the path of main.js.
func writeScript(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "main.js")
}

func run(t *testing.T, script string, env map[string]string) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Run(ctx, Config{Script: script, Env: env, Limits: testLimits, Timeout: 20 * time.Second, Logf: t.Logf})
}

const okScript = `
import http from 'k6/http';
import { check, group, sleep } from 'k6';
import { Counter, Trend } from 'k6/metrics';
import { auth } from './lib/auth.js';

const busy = new Counter('busy');
const took = new Trend('took', true);

export const options = {
  scenarios: {
    a: { executor: 'shared-iterations', vus: 2, iterations: 4 },
    b: { executor: 'constant-arrival-rate', rate: 20, timeUnit: '1s', duration: '1s', preAllocatedVUs: 2, exec: 'other' },
  },
  thresholds: {
    checks: ['rate==1'],
    'http_req_duration{flow:t}': ['p(95)<2000', { threshold: 'max<5000', abortOnFail: true }],
    busy: ['count>=4'],
    http_req_failed: ['rate==0'],
  },
};

export function setup() {
  return { token: 'tok-' + __VU, base: __ENV.BASE_URL };
}

export default function (data) {
  group('read', () => {
    const res = http.get(data.base + '/ok', { headers: auth(data.token), tags: { flow: 't' } });
    check(res, {
      'is 200': (r) => r.status === 200,
      'has items': (r) => r.json('items.0.id') === 'a1',
      'sent token': (r) => r.json().auth === 'Bearer tok-0',
      'json type': (r) => r.headers['Content-Type'] === 'application/json',
    });
    took.add(res.timings.duration);
  });
  const c = http.post(data.base + '/conflict', '{}', { responseCallback: http.expectedStatuses(200, 409) });
  if (c.status === 409 && c.json().code === 'resource_busy') busy.add(1);
  sleep(0.01);
}

export function other(data) {
  const rs = http.batch([['GET', data.base + '/ok'], { method: 'PUT', url: data.base + '/ok', body: 'x' }]);
  check(rs, { 'batch ok': (r) => r[0].status === 200 && r[1].json().method === 'PUT' && __ITER >= 0 && __VU > 0 });
}

export function teardown(data) {
  if (!data.token) throw new Error('no setup data');
}
`

func TestRun_PassingScript(t *testing.T) {
	base, served := echoServer(t)
	script := writeScript(t, map[string]string{
		"main.js":     okScript,
		"lib/auth.js": "export function auth(token) { return { Authorization: 'Bearer ' + token }; }\n",
	})
	res, err := run(t, script, map[string]string{"BASE_URL": base})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Log(res.Summary())
	if f := res.Failures(); len(f) > 0 {
		t.Fatalf("want no failures, got %q", f)
	}
	if res.Counters["busy"] != 4 || res.Iterations < 5 || len(res.Thresholds) != 5 {
		t.Errorf("want busy 4, at least 5 iterations and 5 thresholds; got %v, %d, %d", res.Counters["busy"], res.Iterations, len(res.Thresholds))
	}
	if served.Load() < 10 {
		t.Errorf("server saw %d requests, want at least 10", served.Load())
	}
}

// Each case is a script the runner must not let pass.
func TestRun_CatchesFailures(t *testing.T) {
	base, _ := echoServer(t)
	for _, tc := range []struct {
		name, script, want string
	}{
		{"FailedCheck", `import http from 'k6/http'; import { check } from 'k6';
			export default function () { check(http.get(__ENV.BASE_URL + '/conflict'), { 'is 200': (r) => r.status === 200 }); }`,
			`check "is 200" failed`},
		{"FailedCheckPastItsThreshold", `import { check } from 'k6';
			export const options = { thresholds: { checks: ['rate>0.9'] } };
			export default function () { check(1, { 'one': false }); }`,
			`threshold checks "rate>0.9" crossed`},
		{"CrossedThreshold", `import http from 'k6/http';
			export const options = { thresholds: { http_req_failed: ['rate<0.01'] } };
			export default function () { http.get(__ENV.BASE_URL + '/conflict'); }`,
			`threshold http_req_failed "rate<0.01" crossed`},
		{"CrossedCustomThreshold", `import { Counter } from 'k6/metrics';
			const c = new Counter('oversold');
			export const options = { thresholds: { 'oversold{sku:x}': ['count==0'] } };
			export default function () { c.add(1, { sku: 'x' }); }`,
			`threshold oversold{sku:x} "count==0" crossed`},
		{"ThrowingTeardown", `import { fail } from 'k6';
			export default function () {}
			export function teardown() { fail('2 orders for 1 unit'); }`,
			`teardown threw: GoError: 2 orders for 1 unit`},
		{"ThrowingIteration", `export default function () { throw new Error('boom'); }`,
			`iterations threw; first: VU 1 iteration 0: Error: boom`},
		{"ThrowingSetup", `export function setup() { throw new Error('no admin'); }
			export default function () {}`,
			`setup threw: Error: no admin`},
		{"UnsupportedAPI", `import http from 'k6/http';
			export default function () { http.cookieJar(); }`,
			`k6/http.cookieJar is not supported`},
		{"UnsupportedNamedImport", `import http, { cookieJar } from 'k6/http';
			export default function () { cookieJar(); }`,
			`k6/http.cookieJar is not supported`},
		{"UnsupportedResponseMember", `import http from 'k6/http';
			export default function () { http.get(__ENV.BASE_URL + '/ok').html(); }`,
			`Response.html is not supported`},
		{"UnsupportedParam", `import http from 'k6/http';
			export default function () { http.get(__ENV.BASE_URL, { cookies: {} }); }`,
			`params.cookies is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(t, writeScript(t, map[string]string{"main.js": tc.script}), map[string]string{"BASE_URL": base})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			failures := strings.Join(res.Failures(), "\n")
			if !strings.Contains(failures, tc.want) {
				t.Fatalf("want a failure with %q, got %q", tc.want, failures)
			}
		})
	}
}

// Scripts outside the subset are refused before anything runs.
func TestRun_RefusesWhatItDoesNotImplement(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"Module", `import ws from 'k6/ws'; export default function () {}`, `module "k6/ws" is not supported`},
		{"RemoteModule", `import { x } from 'https://jslib.k6.io/k6-utils/1.4.0/index.js'; export default function () {}`, `is not supported`},
		{"Executor", `export const options = { scenarios: { s: { executor: 'ramping-vus', stages: [] } } };
			export default function () {}`, `executor "ramping-vus" is not supported`},
		{"Option", `export const options = { stages: [{ duration: '1s', target: 1 }] }; export default function () {}`, `options.stages is not supported`},
		{"ThresholdOnNoMetric", `export const options = { thresholds: { nope: ['count<1'] } }; export default function () {}`, `no metric named "nope"`},
		{"ThresholdAggregation", `export const options = { thresholds: { checks: ['p(95)<1'] } }; export default function () {}`, `a rate offers [rate], not p`},
		{"HandleSummary", `export default function () {} export function handleSummary() { return {}; }`, `handleSummary is not supported`},
		{"MissingExec", `export const options = { scenarios: { s: { executor: 'per-vu-iterations', exec: 'nope' } } };
			export default function () {}`, `exports no function "nope"`},
		{"RequestInInit", `import http from 'k6/http'; http.get('http://127.0.0.1:1/'); export default function () {}`, `not allowed in the init code`},
		{"Open", `const f = open('./data.json'); export default function () {}`, `open() is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, writeScript(t, map[string]string{"main.js": tc.script}), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

// A script that would run forever is stopped by the limits, and the
// interrupted iterations are counted, not reported as errors.
func TestRun_Bounded(t *testing.T) {
	script := writeScript(t, map[string]string{"main.js": `import { sleep } from 'k6';
		export const options = { scenarios: { s: { executor: 'constant-vus', vus: 50, duration: '1h', gracefulStop: '0s' } } };
		export default function () { sleep(0.2); while (__ITER > 1) {} }`})
	start := time.Now()
	res, err := Run(context.Background(), Config{Script: script, Logf: t.Logf, Timeout: 20 * time.Second,
		Limits: Limits{VUs: 2, Iterations: 100, Duration: time.Second, GracefulStop: 200 * time.Millisecond}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("run took %v, want about 1.2s", took)
	}
	if res.Interrupted != 2 || res.IterationFails != 0 || res.Iterations != 4 {
		t.Errorf("want 4 iterations and 2 interrupted, none threw; got %s", res.Summary())
	}
}
