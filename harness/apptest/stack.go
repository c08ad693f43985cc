package apptest

import (
	"bytes"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/shop-example/shop/internal/app"
)

// Stack is replicas of the service behind a balancer; everything stops
// when the test ends.
type Stack struct {
	BaseURL       string   // the balancer
	GatewayURL    string   // the payment gateway, for its audit
	LabGatewayURL string   // the race lab's live copy's gateway (StackOptions.LabGateway); empty without one
	LabMailerURL  string   // the race lab's live copy's mail provider (StackOptions.LabMailer); empty without one
	Replicas      []string // each replica's own URL
	Env           *Env     // the replicas, the gateway and the database behind them
	lb            *balancer
}

// Sent is how many requests (StackOptions.Counted) the balancer has
// passed to each replica so far, in the order of Replicas.
func (s *Stack) Sent() []int64 {
	out := make([]int64, len(s.lb.sent))
	for i := range s.lb.sent {
		out[i] = s.lb.sent[i].Load()
	}
	return out
}

// StackOptions are what a Stack may ask for beyond New's replicas.
type StackOptions struct {
	// Vars override the service's environment, as New's do: the rate
	// limits are off unless they turn them on (SHOP_RATE_LIMIT=on).
	Vars map[string]string
	// Names are the replicas' SHOP_REPLICA_NAME, in order: what each one's
	// X-Served-By says. A replica without one has Vars' or the host's.
	Names []string
	// LabGateway gives the race lab's live copy a payment gateway of its
	// own (SHOP_LAB_GATEWAY_URL), reached by the test at LabGatewayURL;
	// without it the copy starts one no test can ask.
	LabGateway bool
	// LabMailer gives the race lab's live copy a mail provider of its own
	// (SHOP_LAB_MAILER_URL), shared by the replicas as compose's
	// lab-mailer is, reached by the test at LabMailerURL; without it each
	// replica's copy starts one of its own.
	LabMailer bool
	// Counted picks the requests Stack.Sent counts; nil counts every one.
	Counted func(*http.Request) bool
	// Rewrite, when set, changes each request the balancer passes on,
	// after its own rewrite: a test's stand-in for a broken client or
	// proxy in front of the service (one that gives every order request
	// a key of its own).
	Rewrite func(*httputil.ProxyRequest)
	// Deps are the replicas' switches, as NewWith's: variants that take
	// layers off (harness/variants), for a test that shows a client's
	// check catching what a missing layer lets through.
	Deps app.Deps
}

// Start starts replicas of the service (New) behind a balancer. vars
// override the service's environment; the rate limits are off unless vars
// turn them on (load scripts register many users from one address).
func Start(t testing.TB, replicas int, vars map[string]string) *Stack {
	t.Helper()
	return StartWith(t, replicas, StackOptions{Vars: vars})
}

// StartWith is Start with opts. The balancer's address is taken before
// the replicas start, so their SHOP_LAB_TARGET is the balancer (unless
// Vars name another): the race lab's live runs come back in through it,
// as under compose.
func StartWith(t testing.TB, replicas int, opts StackOptions) *Stack {
	t.Helper()
	lb := &balancer{counted: opts.Counted}
	srv := httptest.NewUnstartedServer(lb)
	started := false
	defer func() {
		if !started {
			_ = srv.Listener.Close()
		}
	}()
	baseURL := "http://" + srv.Listener.Addr().String()
	vars := map[string]string{"SHOP_LAB_TARGET": baseURL}
	maps.Copy(vars, opts.Vars)

	e := build(t, spec{replicas: replicas, vars: vars, switches: opts.Deps, names: opts.Names, labGateway: opts.LabGateway, labMailer: opts.LabMailer})
	s := &Stack{BaseURL: baseURL, GatewayURL: e.Cfg.GatewayURL, LabGatewayURL: e.Cfg.LabGatewayURL, LabMailerURL: e.Cfg.LabMailerURL, Env: e, lb: lb}
	errs := log.New(testLog(t, "balancer: "), "", 0)
	for _, r := range e.Replicas {
		u, err := url.Parse(r.URL)
		if err != nil {
			t.Fatalf("replica URL: %v", err)
		}
		s.Replicas = append(s.Replicas, r.URL)
		lb.proxies = append(lb.proxies, proxyTo(u, errs, opts.Rewrite))
	}
	lb.sent = make([]atomic.Int64, len(lb.proxies))
	srv.Start()
	started = true
	t.Cleanup(srv.Close)
	return s
}

// balancer sends each request to the next replica in turn, as the
// compose stack's nginx does (deploy/nginx.conf).
type balancer struct {
	next    atomic.Uint64
	proxies []*httputil.ReverseProxy // set before the balancer serves
	sent    []atomic.Int64           // requests passed to each proxy that counted picks
	counted func(*http.Request) bool // nil: every one
	// streamBodies passes each request's body on as it is read, not
	// whole: only the balancer's own test sets it, to show the cut
	// stream that reading it whole prevents (TestBalancer_Stream).
	streamBodies bool
}

// ServeHTTP reads the request's body whole before passing the request on,
// as nginx does (proxy_request_buffering on); the replica enforces its
// own limit on it. A body passed on as it is read races the answer: the
// transport reads it once more after its last byte (a body longer than
// its Content-Length is an error), and that read may land after the
// answer's headers went back to the client, which made this server drain
// and close the body. The read fails, and the transport closes the
// connection under the answer: a stream (the race lab's events) is cut
// mid-way, "use of closed network connection".
func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !b.streamBodies && r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	}
	i := int(b.next.Add(1) % uint64(len(b.proxies)))
	if b.sent != nil && (b.counted == nil || b.counted(r)) {
		b.sent[i].Add(1)
	}
	b.proxies[i].ServeHTTP(w, r)
}

// proxyTo passes requests to backend with the X-Forwarded-* headers a
// proxy adds (a replica reads the client's address from them only when
// SHOP_TRUSTED_PROXIES names the balancer), and passes each write of the
// answer on at once, so Server-Sent Events are not held back, as
// nginx's X-Accel-Buffering: no has it. Its errors go to the test log.
// rewrite, when not nil, changes each request after that.
func proxyTo(backend *url.URL, errs *log.Logger, rewrite func(*httputil.ProxyRequest)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.SetXForwarded()
			if rewrite != nil {
				rewrite(r)
			}
		},
		FlushInterval: -1,
		ErrorLog:      errs,
	}
}
