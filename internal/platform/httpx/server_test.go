package httpx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/metrics"
)

var errTest = errors.New("test: connection reset by 10.0.0.9")

// newEcho returns New's echo instance with a handler that binds the body
// into a struct with a string field and echoes the field's length.
func newEcho(t *testing.T, opts Options) *echo.Echo {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	e := New(metrics.New(), opts)
	e.POST("/things", func(c echo.Context) error {
		var req struct {
			S string `json:"s"`
		}
		if err := Bind(c, &req); err != nil {
			return err
		}
		return JSON(c, http.StatusCreated, map[string]int{"len": len(req.S)})
	})
	e.GET("/things", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	return e
}

// bodyOf returns a JSON object {"s":"xxx…"} of exactly n bytes.
func bodyOf(n int) []byte {
	const overhead = len(`{"s":""}`)
	return []byte(`{"s":"` + strings.Repeat("x", n-overhead) + `"}`)
}

func TestNew_BodyLimit(t *testing.T) {
	e := newEcho(t, Options{})
	tests := []struct {
		name    string
		size    int
		chunked bool // no Content-Length: the limit is met while reading
		status  int
	}{
		{"Small", 100, false, http.StatusCreated},
		{"Exactly64KiB", 64 << 10, false, http.StatusCreated},
		{"Exactly64KiBChunked", 64 << 10, true, http.StatusCreated},
		{"OneByteOver", 64<<10 + 1, false, http.StatusRequestEntityTooLarge},
		{"OneByteOverChunked", 64<<10 + 1, true, http.StatusRequestEntityTooLarge},
		// 64K read as 64,000 bytes would refuse these.
		{"Over64000", 64000 + 1, false, http.StatusCreated},
		{"FarOver", 1 << 20, true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := bodyOf(tt.size)
			if len(body) != tt.size {
				t.Fatalf("body is %d bytes, want %d", len(body), tt.size)
			}
			var r io.Reader = bytes.NewReader(body)
			if tt.chunked {
				r = io.MultiReader(r) // hides the length from NewRequest
			}
			req := httptest.NewRequest(http.MethodPost, "/things", r)
			if tt.chunked && req.ContentLength != -1 {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d %s, want %d", rec.Code, rec.Body.String(), tt.status)
			}
			if tt.status == http.StatusRequestEntityTooLarge {
				if doc := problemDoc(t, rec); doc["code"] != "payload_too_large" {
					t.Errorf("code = %v, want payload_too_large", doc["code"])
				}
			}
		})
	}
}

func TestNew_RouterErrors(t *testing.T) {
	e := newEcho(t, Options{})
	tests := []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"NotFound", http.MethodGet, "/nowhere", 404, "not_found"},
		{"MethodNotAllowed", http.MethodDelete, "/things", 405, "method_not_allowed"},
		{"UnknownField", http.MethodPost, "/things", 400, "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"t":"x"}`))
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d", rec.Code, tt.status)
			}
			if doc := problemDoc(t, rec); doc["code"] != tt.code {
				t.Errorf("code = %v, want %s", doc["code"], tt.code)
			}
			if rec.Header().Get(HeaderRequestID) == "" {
				t.Errorf("no %s on an error response", HeaderRequestID)
			}
		})
	}
}

func TestNew_Panic(t *testing.T) {
	var logs bytes.Buffer
	e := newEcho(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	e.GET("/panic", func(c echo.Context) error { panic("secret state 10.0.0.9") })
	req := httptest.NewRequest(http.MethodGet, "/panic", nil)
	req.Header.Set(HeaderRequestID, "req-panic")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status = %d, want 500", rec.Code)
	}
	if doc := problemDoc(t, rec); doc["code"] != "internal" {
		t.Errorf("code = %v, want internal", doc["code"])
	}
	if strings.Contains(rec.Body.String(), "10.0.0.9") {
		t.Errorf("body %q reveals the panic", rec.Body.String())
	}
	found := false
	for _, l := range logLines(t, &logs) {
		found = found || (l["msg"] == "panic" && l["request_id"] == "req-panic")
	}
	if !found {
		t.Errorf("no panic log line with the request id in %q", logs.String())
	}
}

func TestNew_RequestTimeout(t *testing.T) {
	e := newEcho(t, Options{RequestTimeout: 20 * time.Millisecond})
	e.GET("/slow", func(c echo.Context) error {
		select {
		case <-c.Request().Context().Done():
			return c.Request().Context().Err()
		case <-time.After(10 * time.Second):
			return c.String(http.StatusOK, "too late")
		}
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slow", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", rec.Code)
	}
	if doc := problemDoc(t, rec); doc["code"] != "unavailable" {
		t.Errorf("code = %v, want unavailable", doc["code"])
	}
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
}

// A client-supplied X-Forwarded-For does not become the client's address.
func TestNew_IPFromSocket(t *testing.T) {
	e := newEcho(t, Options{})
	e.GET("/ip", func(c echo.Context) error { return c.String(http.StatusOK, c.RealIP()) })
	req := httptest.NewRequest(http.MethodGet, "/ip", nil)
	req.RemoteAddr = "192.0.2.10:5555"
	req.Header.Set(echo.HeaderXForwardedFor, "203.0.113.7")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if got := rec.Body.String(); got != "192.0.2.10" {
		t.Errorf("RealIP = %q, want the socket's 192.0.2.10", got)
	}
}

// slowHandler answers 200 once release is closed, after telling started.
type slowHandler struct {
	started chan struct{}
	release chan struct{}
}

func (h *slowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	close(h.started)
	<-h.release
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "done")
}

type result struct {
	status int
	body   string
	err    error
}

func get(url string) result {
	resp, err := http.Get(url)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, body: string(b), err: err}
}

// waitClosed waits until addr refuses connections: Shutdown closes the
// listener before it starts waiting for in-flight requests.
func waitClosed(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		conn.Close()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s still accepts connections after the context was cancelled", addr)
}

func TestServe_Drains(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	h := &slowHandler{started: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, "", h, 10*time.Second) }()

	responses := make(chan result, 1)
	go func() { responses <- get("http://" + addr + "/") }()
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the handler")
	}

	cancel()
	waitClosed(t, addr)
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v while a request was in flight", err)
	case r := <-responses:
		t.Fatalf("the in-flight request ended (%+v) before its handler returned", r)
	default:
	}

	close(h.release)
	r := <-responses
	if r.err != nil || r.status != http.StatusOK || r.body != "done" {
		t.Errorf("in-flight request = %+v, want 200 done", r)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	if r := get("http://" + addr + "/"); r.err == nil {
		t.Errorf("a request after shutdown got %d, want a refused connection", r.status)
	}
}

// A request that outlives the drain budget makes Serve report it, so the
// operator knows a request was cut off.
func TestServe_DrainTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &slowHandler{started: make(chan struct{}), release: make(chan struct{})}
	defer close(h.release)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, "", h, 50*time.Millisecond) }()
	go get("http://" + ln.Addr().String() + "/")
	<-h.started
	cancel()
	select {
	case err := <-served:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Serve = %v, want a shutdown error wrapping context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not give up after the drain budget")
	}
}

func TestServe_ListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The port is taken, so Serve's own Listen fails and says where.
	err = Serve(context.Background(), nil, ln.Addr().String(), http.NotFoundHandler(), time.Second)
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Serve on a taken port = %v, want a listen error naming the address", err)
	}
}

// A listener that fails makes Serve return at once, not wait for ctx.
func TestServe_ListenerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = Serve(context.Background(), ln, "", http.NotFoundHandler(), time.Second)
	if err == nil {
		t.Error("Serve on a closed listener = nil, want an error")
	}
}

// The client address the rate limits count by: a header is believed only
// from a trusted proxy, and only the part that proxy appended.
func TestNew_ClientAddress(t *testing.T) {
	lb := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     []string
		want    string
	}{
		{"NoProxyNoHeader", nil, "203.0.113.7:5000", nil, "203.0.113.7"},
		{"NoProxyHeaderIgnored", nil, "203.0.113.7:5000", []string{"198.51.100.1"}, "203.0.113.7"},
		{"FromProxy", lb, "10.0.0.5:5000", []string{"203.0.113.7"}, "203.0.113.7"},
		{"FromProxyIPv6", lb, "[fd00::5]:5000", []string{"2001:db8::7"}, "2001:db8::7"},
		{"ClientSpoofBehindProxy", lb, "10.0.0.5:5000", []string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
		{"TwoTrustedHops", lb, "10.0.0.5:5000", []string{"203.0.113.7, 10.0.0.9"}, "203.0.113.7"},
		{"TwoHeaders", lb, "10.0.0.5:5000", []string{"198.51.100.1", "203.0.113.7"}, "203.0.113.7"},
		{"UntrustedPeerHeaderIgnored", lb, "198.51.100.1:5000", []string{"203.0.113.7"}, "198.51.100.1"},
		// echo's defaults would trust these; only the listed ranges count.
		{"LoopbackNotTrusted", lb, "127.0.0.1:5000", []string{"203.0.113.7"}, "127.0.0.1"},
		{"PrivateNotTrusted", lb, "172.17.0.2:5000", []string{"203.0.113.7"}, "172.17.0.2"},
		{"GarbageFromProxy", lb, "10.0.0.5:5000", []string{"not-an-address"}, "10.0.0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(metrics.New(), Options{Logger: discardLogger(), TrustedProxies: tt.trusted})
			e.GET("/ip", func(c echo.Context) error { return c.String(http.StatusOK, c.RealIP()) })
			req := httptest.NewRequest(http.MethodGet, "/ip", nil)
			req.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				req.Header.Add(echo.HeaderXForwardedFor, v)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("client address %q, want %q", got, tt.want)
			}
		})
	}
}

// Every answer of the echo instance carries nosniff and no-store: handler
// answers, router errors, refusals and panics alike.
func TestNew_StandardHeaders(t *testing.T) {
	e := newEcho(t, Options{})
	e.GET("/panic", func(c echo.Context) error { panic("boom") })
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"OK", http.MethodGet, "/things", "", http.StatusOK},
		{"Created", http.MethodPost, "/things", `{"s":"x"}`, http.StatusCreated},
		{"Refused", http.MethodPost, "/things", `{"t":1}`, http.StatusBadRequest},
		{"NotFound", http.MethodGet, "/nowhere", "", http.StatusNotFound},
		{"MethodNotAllowed", http.MethodDelete, "/things", "", http.StatusMethodNotAllowed},
		{"Panic", http.MethodGet, "/panic", "", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if rec.Code != tc.status {
				t.Fatalf("status = %d, want %d", rec.Code, tc.status)
			}
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
			}
			if got := rec.Header().Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store", got)
			}
		})
	}
}
