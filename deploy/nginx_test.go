// Package deploy_test checks the files in deploy/ and the compose file:
// the Prometheus rules (prometheus_test.go), the Kubernetes manifests
// (k8s_test.go), the replicas' stop grace period (compose_test.go) and, here,
// the load balancer's configuration (nginx.conf), run in a real nginx in
// front of two stand-in replicas. It checks what docs/CONTAINERS.md and the
// comments in nginx.conf promise: nginx's own errors are problem documents
// with the service's codes, its body limit is the service's, a replica's
// answer (a 503 too) passes as it is and does not take the replica out of
// rotation, and a POST that reached a replica is never sent to the other.
// Skipped when no nginx is installed (Debian: nginx-light), except in CI
// (CI=true), where a missing nginx fails the test instead of passing green.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// readTimeout replaces nginx's 60 s proxy_read_timeout in these tests, so
// a replica that never answers makes a 504 in a second.
const readTimeout = "1s"

// bodyLimit is httpx.BodyLimit, the service's 64 KiB.
const bodyLimit = 64 << 10

// balancer is nginx running nginx.conf, its replicas rewritten to
// addresses on this machine.
type balancer struct {
	url string
}

// startBalancer checks nginx.conf with `nginx -t` and starts nginx on it,
// with api-1 and api-2 at the given addresses, and no Jaeger.
func startBalancer(t *testing.T, api1, api2 string) balancer {
	t.Helper()
	return startBalancerWithJaeger(t, api1, api2, deadAddr(t))
}

// startBalancerWithJaeger is startBalancer with Jaeger's query API at
// jaeger.
func startBalancerWithJaeger(t *testing.T, api1, api2, jaeger string) balancer {
	t.Helper()
	// Debian installs it in /usr/sbin, which a user's PATH may not hold.
	bin, err := exec.LookPath("/usr/sbin/nginx")
	if err != nil {
		bin = needTool(t, "nginx", "apt-get install nginx-light; .ci/run installs it")
	}
	conf, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	text := string(conf)
	for _, r := range []struct{ old, new string }{
		{"server api-1:8080 ", "server " + api1 + " "},
		{"server api-2:8080 ", "server " + api2 + " "},
		{"listen 8080;", "listen 127.0.0.1:" + port + ";"},
		{"set $jaeger http://jaeger:16686;", "set $jaeger http://" + jaeger + ";"},
		{"proxy_connect_timeout 2s;", "proxy_connect_timeout 2s;\n      proxy_read_timeout " + readTimeout + ";"},
	} {
		if n := strings.Count(text, r.old); n != 1 {
			t.Fatalf("nginx.conf has %q %d times, want once: the test cannot point it at its replicas", r.old, n)
		}
		text = strings.Replace(text, r.old, r.new, 1)
	}

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// Workers run as root when the test does: the default user could not
	// reach the private temporary directory that holds request bodies.
	globals := "pid " + filepath.Join(dir, "nginx.pid") + "; error_log stderr notice;"
	if os.Geteuid() == 0 {
		globals += " user root;"
	}
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", path, "-g", globals).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}

	var logs bytes.Buffer
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-g", "daemon off; "+globals)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("nginx log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			return balancer{url: "http://127.0.0.1:" + port}
		}
		select {
		case <-done:
			t.Fatalf("nginx exited: %s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen: %s", logs.String())
		}
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// replica is a stand-in API replica that counts the requests it got.
type replica struct {
	addr string
	hits atomic.Int64
}

func newReplica(t *testing.T, h http.HandlerFunc) *replica {
	t.Helper()
	r := &replica{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		h(w, req)
	}))
	t.Cleanup(srv.Close)
	r.addr = srv.Listener.Addr().String()
	return r
}

// created answers as the service does to a good POST, after reading the body.
func created(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"read":%d}`, n)
}

// hangUp reads the request and closes the connection without an answer:
// a replica that dies after the request reached it.
func hangUp(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		c.Close()
	}
}

// deadAddr is an address that refuses connections: a replica that is gone.
func deadAddr(t *testing.T) string { return "127.0.0.1:" + freePort(t) }

type answer struct {
	status int
	header http.Header
	body   []byte
}

func send(t *testing.T, method, url string, body io.Reader) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, url, err)
	}
	return answer{status: res.StatusCode, header: res.Header, body: b}
}

// wantProblem checks an answer nginx made itself: the status, a problem
// document with the code (httpx/errors.go's shape), nosniff, and
// Retry-After on unavailable.
func wantProblem(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("got %d %s, want %d", a.status, a.body, status)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json: %s", ct, a.body)
	}
	var doc struct {
		Type, Title, Code, Detail string
		Status                    int
	}
	if err := json.Unmarshal(a.body, &doc); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, a.body)
	}
	wantType := "https://shop.example/problems/" + strings.ReplaceAll(code, "_", "-")
	if doc.Code != code || doc.Status != status || doc.Type != wantType || doc.Title == "" || doc.Detail == "" {
		t.Errorf("problem %s, want code %s, status %d, type %s, a title and a detail", a.body, code, status, wantType)
	}
	if got := a.header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", got)
	}
	if got := a.header.Get("Retry-After"); (code == "unavailable") != (got == "2") {
		t.Errorf("Retry-After %q on %s", got, code)
	}
}

func TestNginx_NoReplica(t *testing.T) {
	lb := startBalancer(t, deadAddr(t), deadAddr(t))
	wantProblem(t, send(t, http.MethodGet, lb.url+"/v1/products", nil), http.StatusBadGateway, "unavailable")
	wantProblem(t, send(t, http.MethodPost, lb.url+"/v1/orders", strings.NewReader(`{}`)), http.StatusBadGateway, "unavailable")
}

// One replica gone: every request is answered by the other, POSTs too,
// since a refused connection never carried the request.
func TestNginx_OneReplicaGone(t *testing.T) {
	up := newReplica(t, created)
	lb := startBalancer(t, deadAddr(t), up.addr)
	for i := range 6 {
		if a := send(t, http.MethodPost, lb.url+"/v1/orders", strings.NewReader(`{}`)); a.status != http.StatusCreated {
			t.Fatalf("POST %d: %d %s, want the live replica's 201", i, a.status, a.body)
		}
	}
}

func TestNginx_ReplicaTimesOut(t *testing.T) {
	// It reads the body first: only then does the server notice nginx
	// hanging up, and end the handler.
	hang := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
	a, b := newReplica(t, hang), newReplica(t, hang)
	lb := startBalancer(t, a.addr, b.addr)

	wantProblem(t, send(t, http.MethodPost, lb.url+"/v1/orders", strings.NewReader(`{}`)), http.StatusGatewayTimeout, "unavailable")
	if n := a.hits.Load() + b.hits.Load(); n != 1 {
		t.Errorf("a POST that timed out reached %d replicas, want 1: it may have taken effect", n)
	}
	wantProblem(t, send(t, http.MethodGet, lb.url+"/v1/products", nil), http.StatusGatewayTimeout, "unavailable")
}

// A replica that takes a request and dies before answering: nginx answers
// 502, and sends a POST to no other replica; a GET it may send on.
func TestNginx_PostIsNotReplayed(t *testing.T) {
	a, b := newReplica(t, hangUp), newReplica(t, hangUp)
	lb := startBalancer(t, a.addr, b.addr)

	wantProblem(t, send(t, http.MethodPost, lb.url+"/v1/orders", strings.NewReader(`{}`)), http.StatusBadGateway, "unavailable")
	if n := a.hits.Load() + b.hits.Load(); n != 1 {
		t.Fatalf("the POST reached %d replicas, want 1", n)
	}
	wantProblem(t, send(t, http.MethodGet, lb.url+"/v1/products", nil), http.StatusBadGateway, "unavailable")
	if n := a.hits.Load() + b.hits.Load(); n != 3 {
		t.Errorf("the GET reached %d replicas, want 2 (passed on)", n-1)
	}
}

func TestNginx_BodyLimit(t *testing.T) {
	a := newReplica(t, created)
	lb := startBalancer(t, a.addr, a.addr)
	for _, tt := range []struct {
		name    string
		size    int
		chunked bool // no Content-Length: nginx counts while reading
		status  int
	}{
		{"Exactly64KiB", bodyLimit, false, http.StatusCreated},
		{"Exactly64KiBChunked", bodyLimit, true, http.StatusCreated},
		{"OneByteOver", bodyLimit + 1, false, http.StatusRequestEntityTooLarge},
		{"OneByteOverChunked", bodyLimit + 1, true, http.StatusRequestEntityTooLarge},
		{"FarOver", 1 << 20, false, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := a.hits.Load()
			var body io.Reader = bytes.NewReader(bytes.Repeat([]byte("x"), tt.size))
			if tt.chunked {
				body = io.MultiReader(body) // hides the length
			}
			res := send(t, http.MethodPost, lb.url+"/v1/orders", body)
			if tt.status == http.StatusCreated {
				if res.status != http.StatusCreated || string(res.body) != fmt.Sprintf(`{"read":%d}`, tt.size) {
					t.Errorf("got %d %s, want the replica to read all %d bytes", res.status, res.body, tt.size)
				}
				return
			}
			wantProblem(t, res, http.StatusRequestEntityTooLarge, "payload_too_large")
			if a.hits.Load() != before {
				t.Errorf("the replica got a body over the limit")
			}
		})
	}
}

// A replica's own error passes as it is. And a 503 does not take the
// replica out of rotation: with the old configuration (proxy_next_upstream
// http_503, max_fails=1) two 503s from /readyz, as every replica answered
// while the lock quorum was lost, marked both replicas failed, and the
// orders that followed got nginx's 502.
func TestNginx_ReplicaAnswersPass(t *testing.T) {
	const notReady = `{"type":"https://shop.example/problems/unavailable","title":"Service unavailable","status":503,"code":"unavailable","detail":"from the replica"}`
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, notReady)
			return
		}
		created(w, r)
	}
	a, b := newReplica(t, handler), newReplica(t, handler)
	lb := startBalancer(t, a.addr, b.addr)

	for range 2 {
		res := send(t, http.MethodGet, lb.url+"/readyz", nil)
		if res.status != http.StatusServiceUnavailable || string(res.body) != notReady || res.header.Get("Retry-After") != "7" {
			t.Errorf("GET /readyz: %d %s (Retry-After %q), want the replica's own 503 as it is", res.status, res.body, res.header.Get("Retry-After"))
		}
	}
	for i := range 6 {
		if res := send(t, http.MethodPost, lb.url+"/v1/orders", strings.NewReader(`{}`)); res.status != http.StatusCreated {
			t.Fatalf("POST %d after the 503s: %d %s, want a replica's 201", i, res.status, res.body)
		}
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Errorf("requests per replica: %d and %d, want both in rotation", a.hits.Load(), b.hits.Load())
	}
}

// Requests nginx refuses before any replica sees them.
func TestNginx_OwnRefusals(t *testing.T) {
	a := newReplica(t, created)
	lb := startBalancer(t, a.addr, a.addr)
	long := strings.Repeat("a", 10_000)

	t.Run("NotFound", func(t *testing.T) {
		wantProblem(t, send(t, http.MethodGet, lb.url+"/_problem/502", nil), http.StatusNotFound, "not_found")
	})
	t.Run("Trace", func(t *testing.T) {
		wantProblem(t, send(t, http.MethodTrace, lb.url+"/v1/products", nil), http.StatusMethodNotAllowed, "method_not_allowed")
	})
	t.Run("URITooLong", func(t *testing.T) {
		wantProblem(t, send(t, http.MethodGet, lb.url+"/v1/products/"+long, nil), http.StatusBadRequest, "invalid_request")
	})
	t.Run("HeaderTooLarge", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, lb.url+"/v1/products", nil)
		req.Header.Set("X-Long", long)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		wantProblem(t, answer{status: res.StatusCode, header: res.Header, body: b}, http.StatusBadRequest, "invalid_request")
	})
	t.Run("Malformed", func(t *testing.T) {
		c, err := net.Dial("tcp", strings.TrimPrefix(lb.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /v1/products HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		wantProblem(t, answer{status: res.StatusCode, header: res.Header, body: b}, http.StatusBadRequest, "invalid_request")
	})
	if n := a.hits.Load(); n != 0 {
		t.Errorf("the replica got %d of the refused requests", n)
	}
}

// TestNginx_JaegerQuery: the trace page reads Jaeger's query API on the
// shop's origin, GET only; without Jaeger (make up without the
// observability profile) the answer is the balancer's own 502 problem,
// and the replicas see none of it.
func TestNginx_JaegerQuery(t *testing.T) {
	var asked atomic.Value
	jaeger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(r.Method + " " + r.URL.RequestURI())
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"data":[{"traceID":"abc","spans":[]}]}`)
	}))
	t.Cleanup(jaeger.Close)
	api := newReplica(t, created)
	lb := startBalancerWithJaeger(t, api.addr, api.addr, jaeger.Listener.Addr().String())

	a := send(t, http.MethodGet, lb.url+"/jaeger/api/traces/abc?raw=1", nil)
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"traceID":"abc"`) {
		t.Fatalf("GET /jaeger/api/traces/abc: %d %s, want Jaeger's answer", a.status, a.body)
	}
	if got, _ := asked.Load().(string); got != "GET /api/traces/abc?raw=1" {
		t.Errorf("Jaeger was asked %q, want GET /api/traces/abc?raw=1", got)
	}
	wantProblem(t, send(t, http.MethodPost, lb.url+"/jaeger/api/traces/abc", strings.NewReader("{}")), http.StatusMethodNotAllowed, "method_not_allowed")
	if n := api.hits.Load(); n != 0 {
		t.Errorf("the replicas got %d of the requests for Jaeger", n)
	}

	gone := startBalancer(t, api.addr, api.addr)
	wantProblem(t, send(t, http.MethodGet, gone.url+"/jaeger/api/traces/abc", nil), http.StatusBadGateway, "unavailable")
}
