package apptest

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestBalancer_Stream: an answer streamed back to a POST (the race lab's
// events) reaches the client whole through the balancer, even when the
// transport's last read of the request's body comes after the answer's
// headers, as on a loaded machine: the delay is staged here by a
// connection to the backend that is slow to return from each write.
// Passing the body on as it is read, the stream is cut.
func TestBalancer_Stream(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("backend: read body: %v", err)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: start\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-time.After(2 * writePause):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "event: outcome\n\n")
	}))
	t.Cleanup(backend.Close)
	u, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name         string
		streamBodies bool
		wantWhole    bool
	}{
		{"BodyPassedOnAsRead", true, false},
		{"BodyReadWhole", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			transport := &http.Transport{DialContext: slowWrites}
			t.Cleanup(transport.CloseIdleConnections)
			p := proxyTo(u, log.New(testLog(t, "balancer: "), "", 0), nil)
			p.Transport = transport
			lb := httptest.NewServer(&balancer{proxies: []*httputil.ReverseProxy{p}, streamBodies: c.streamBodies})
			t.Cleanup(lb.Close)

			res, err := http.Post(lb.URL, "application/json", strings.NewReader(`{"scenario":"pay_storm","size":10}`))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, err := io.ReadAll(res.Body)
			whole := err == nil && strings.HasSuffix(string(got), "event: outcome\n\n")
			if whole != c.wantWhole {
				t.Fatalf("whole stream %t, want %t: read %q, %v", whole, c.wantWhole, got, err)
			}
			t.Logf("read %q, %v", got, err)
		})
	}
}

// writePause is how long a write to the backend takes to return.
const writePause = 300 * time.Millisecond

// slowWrites dials a connection each of whose writes returns writePause
// after its bytes went out: the transport's writer is late, its reader
// and the backend are not.
func slowWrites(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return slowConn{c}, nil
}

type slowConn struct{ net.Conn }

func (c slowConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	time.Sleep(writePause)
	return n, err
}
