//go:build faults

package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/shop-example/shop/harness/testenv"
)

// adminToken is the replicas' SHOP_ADMIN_TOKEN.
const adminToken = "faults-admin"

// The timings the replicas run with: shorter than production's so a run
// sees a payment go from budget to reconciler within a scenario, in the
// same proportions (config.checkTimings holds them to the same rules).
// The lock lease stays the production 8 s (lock.DefaultExpiry).
var replicaTimings = []string{
	"SHOP_GATEWAY_TIMEOUT=1s",
	"SHOP_PAYMENT_BUDGET=3s",
	"SHOP_REQUEST_TIMEOUT=6s",
	"SHOP_PAYMENT_RECONCILE_AFTER=4s",
	"SHOP_JOB_INTERVAL=500ms",
	"SHOP_SHUTDOWN_DRAIN=2s",
	"SHOP_DB_MAX_CONNS=8",
	// The events: a mail that has not answered in a second is sent again
	// with its key, and an event a consumer has not recorded two seconds
	// after its commit is published again from the outbox (production:
	// 3 s and 30 s), so that the audit after each scenario sees every
	// event through.
	"SHOP_MAILER_TIMEOUT=1s",
	"SHOP_OUTBOX_REDELIVER_AFTER=2s",
	// Not a fault of the suite: the limits would refuse its few users'
	// hundreds of requests a second.
	"SHOP_RATE_LIMIT=off",
}

// lease is the lock's lease (lock.DefaultExpiry), which scenarios 2 and 4
// play against.
const lease = 8 * time.Second

// cluster is everything a scenario runs against.
type cluster struct {
	t     *testing.T
	dir   string
	bin   string
	db    *pgxpool.Pool // direct, not through the proxy: the auditor's
	dbURL string
	// replicaDB is the replicas' SHOP_DATABASE_URL: through the proxy
	// pg, or (TestFailover) straight to a primary and its standby.
	replicaDB string
	toxics    *toxiproxy.ApiServer
	pg        *toxiproxy.Proxy
	redis     []*redisNode
	redisPx   []*toxiproxy.Proxy
	gw        *process
	gwAddr    string
	gwPx      *toxiproxy.Proxy
	mailer    *process
	mailAddr  string
	mailPx    *toxiproxy.Proxy
	replicas  []*process
	lockMode  string
	// extraEnv overrides replicaTimings for the scenario running now;
	// replicaEnv, one replica's, overrides both (scenario 9 moves replica
	// 0 to another key scheme).
	extraEnv   []string
	replicaEnv map[int][]string
	// replicasMu guards replicas while scenario 9 replaces one under load.
	replicasMu sync.Mutex
	// route says where the balancer sends requests: to both replicas,
	// or (once scenario 4's pause ends) only to replica 1.
	route atomic.Int32
	// workload is the scenario's, for faults that send requests of their
	// own; stale records those of scenario 4's paused replica, which
	// staleDone waits for.
	workload      *workload
	history       *history // the answers of the scenario running, or run last
	settled       settledEvents
	stale         *history
	staleDone     *sync.WaitGroup
	stalePausedAt time.Time
}

// Where the balancer sends requests.
const (
	routeBoth = iota
	routeOnly1
)

// replicaURLs are the replicas the balancer may send to now.
func (c *cluster) replicaURLs() []string {
	c.replicasMu.Lock()
	defer c.replicasMu.Unlock()
	if c.route.Load() == routeOnly1 {
		return []string{c.replicas[1].url}
	}
	return []string{c.replicas[0].url, c.replicas[1].url}
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCluster starts the Redis nodes, the gateway, the proxies and two
// replicas in lockMode, on a fresh database of the test server, which the
// replicas reach through a fault proxy.
func startCluster(t *testing.T, lockMode string) *cluster {
	t.Helper()
	c := newCluster(t, lockMode)
	c.dbURL = testenv.DatabaseURL(t)
	c.db = testenv.PoolFor(t, c.dbURL)
	pgHost, err := hostOf(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	c.pg = c.proxy("postgres", pgHost)
	c.replicaDB = c.viaProxy()
	c.startServices()
	return c
}

// newCluster builds shop and starts the fault proxies' server: a cluster
// with nothing running yet, and no database.
func newCluster(t *testing.T, lockMode string) *cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("the fault suite runs its own redis-server processes: %v", err)
	}
	c := &cluster{t: t, dir: t.TempDir(), lockMode: lockMode}
	c.bin = testenv.ShopBinary(t)
	c.toxics = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	return c
}

// startServices starts the Redis nodes, the gateway, the mailer, their
// proxies and two replicas on c.replicaDB.
func (c *cluster) startServices() {
	t := c.t
	for i := range 3 {
		n := startRedis(t, c.dir, i)
		c.redis = append(c.redis, n)
		c.redisPx = append(c.redisPx, c.proxy(fmt.Sprintf("redis%d", i), n.addr()))
	}
	c.gwAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	c.startGateway()
	c.gwPx = c.proxy("gateway", c.gwAddr)
	c.mailAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	c.startMailer()
	c.mailPx = c.proxy("mailer", c.mailAddr)
	for i := range 2 {
		c.replicas = append(c.replicas, c.startReplica(i))
	}
}

// proxy starts a fault proxy to upstream on a free loopback port.
func (c *cluster) proxy(name, upstream string) *toxiproxy.Proxy {
	c.t.Helper()
	p := toxiproxy.NewProxy(c.toxics, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		c.t.Fatalf("proxy %s: %v", name, err)
	}
	c.t.Cleanup(p.Stop)
	return p
}

// toxic adds a toxic to p, written as toxiproxy's JSON.
func (c *cluster) toxic(p *toxiproxy.Proxy, name, typ, stream string, attrs string) {
	c.t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		c.t.Fatalf("toxic %s on %s: %v", name, p.Name, err)
	}
}

// heal removes every toxic from every proxy and starts any stopped one.
func (c *cluster) heal() {
	for _, p := range append([]*toxiproxy.Proxy{c.pg, c.gwPx, c.mailPx}, c.redisPx...) {
		if p == nil {
			continue // no proxy in front of PostgreSQL (TestFailover)
		}
		p.Toxics.ResetToxics(context.Background())
		_ = p.Start() // a no-op error when it runs
	}
}

func hostOf(rawURL string) (string, error) {
	rest, ok := strings.CutPrefix(rawURL, "postgres://")
	if !ok {
		rest, ok = strings.CutPrefix(rawURL, "postgresql://")
	}
	if !ok {
		return "", fmt.Errorf("not a postgres URL: %s", rawURL)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	host, _, _ := strings.Cut(rest, "/")
	return host, nil
}

// viaProxy is the database URL with its host replaced by the proxy's.
func (c *cluster) viaProxy() string {
	host, _ := hostOf(c.dbURL)
	return strings.Replace(c.dbURL, "@"+host+"/", "@"+c.pg.Listen+"/", 1)
}

func (c *cluster) redisAddrs() string {
	addrs := make([]string, len(c.redisPx))
	for i, p := range c.redisPx {
		addrs[i] = p.Listen
	}
	return strings.Join(addrs, ",")
}

// process is a child process of the suite: a replica or the gateway.
type process struct {
	name       string
	args       []string
	env        []string
	url        string
	metricsURL string
	logPath    string
	cmd        *exec.Cmd
	done       chan struct{}
}

func (c *cluster) startGateway() { c.gw = c.startProvider("gateway", c.gwAddr) }

// startMailer starts the stand-in mail provider, its journal on disk, so
// that a kill and restart keeps the messages and the keys that sent them.
func (c *cluster) startMailer() { c.mailer = c.startProvider("mailer", c.mailAddr) }

// startProvider starts `shop gateway` or `shop mailer` (name) on addr,
// its journal in the cluster's directory, and waits until it answers.
func (c *cluster) startProvider(name, addr string) *process {
	upper := strings.ToUpper(name)
	p := &process{
		name: name, args: []string{name}, url: "http://" + addr,
		env: []string{
			"SHOP_" + upper + "_ADDR=" + addr,
			"SHOP_" + upper + "_JOURNAL=" + filepath.Join(c.dir, name+"-journal.jsonl"),
		},
	}
	c.start(p, "/healthz")
	return p
}

func (c *cluster) startReplica(i int) *process {
	p := c.replicaProcess(i)
	c.start(p, "/readyz")
	return p
}

// replicaProcess is replica i as it would start now, not started.
func (c *cluster) replicaProcess(i int) *process {
	addr, metrics := freePort(c.t), freePort(c.t)
	p := &process{
		name: fmt.Sprintf("replica%d", i), args: []string{"serve"},
		url:        "http://127.0.0.1:" + strconv.Itoa(addr),
		metricsURL: "http://127.0.0.1:" + strconv.Itoa(metrics),
		env: append([]string{
			"SHOP_HTTP_ADDR=127.0.0.1:" + strconv.Itoa(addr),
			"SHOP_METRICS_ADDR=127.0.0.1:" + strconv.Itoa(metrics),
			"SHOP_DATABASE_URL=" + c.replicaDB,
			"SHOP_REDIS_ADDRS=" + c.redisAddrs(),
			"SHOP_GATEWAY_URL=http://" + c.gwPx.Listen,
			"SHOP_MAILER_URL=http://" + c.mailPx.Listen,
			"SHOP_ADMIN_TOKEN=" + adminToken,
			"SHOP_LOCK_MODE=" + c.lockMode,
		}, slices.Concat(replicaTimings, c.extraEnv, c.replicaEnv[i])...),
	}
	return p
}

// rollReplica stops replica i as an orchestrator does, with SIGTERM, waits
// for it to drain and exit, and starts it again with the cluster's
// settings now. It may run beside the workload, off the test's goroutine,
// so it reports a failure instead of ending the test.
func (c *cluster) rollReplica(i int) error {
	c.replicasMu.Lock()
	old := c.replicas[i]
	c.replicasMu.Unlock()
	if err := old.terminate(30 * time.Second); err != nil {
		return err
	}
	p := c.replicaProcess(i)
	p.logPath = old.logPath
	if err := c.launch(p, "/readyz"); err != nil {
		return err
	}
	c.replicasMu.Lock()
	c.replicas[i] = p
	c.replicasMu.Unlock()
	return nil
}

// restartReplica starts replica i again, in the cluster's lock mode now.
func (c *cluster) restartReplica(i int) {
	old := c.replicas[i]
	old.kill()
	p := c.replicaProcess(i)
	p.logPath = old.logPath
	c.start(p, "/readyz")
	c.replicasMu.Lock()
	c.replicas[i] = p
	c.replicasMu.Unlock()
}

// start runs p and waits until readyPath answers 200.
func (c *cluster) start(p *process, readyPath string) {
	c.t.Helper()
	if err := c.launch(p, readyPath); err != nil {
		c.t.Fatal(err)
	}
}

// launch is start, reporting what went wrong.
func (c *cluster) launch(p *process, readyPath string) error {
	if p.logPath == "" {
		p.logPath = filepath.Join(c.dir, p.name+".log")
	}
	logs, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(c.bin, p.args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	p.done = make(chan struct{})
	if err := p.cmd.Start(); err != nil {
		logs.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() { _ = p.cmd.Wait(); logs.Close(); close(p.done) }()
	c.t.Cleanup(func() {
		p.kill()
		if c.t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			c.t.Logf("%s log (last 4 KB):\n%s", p.name, tail(b, 4096))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(p.url + readyPath); err == nil {
			io.Copy(io.Discard, res.Body) //nolint:errcheck
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.logPath)
			return fmt.Errorf("%s exited:\n%s", p.name, tail(b, 4096))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within 30 s", p.name)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// kill stops p the way a crash does.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate stops p the way an orchestrator does: SIGTERM, and the
// process's own drain; it is killed, and an error returned, if it has not
// exited within timeout.
func (p *process) terminate(timeout time.Duration) error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM", p.name, timeout)
	}
}

func (p *process) signal(s syscall.Signal) {
	_ = p.cmd.Process.Signal(s)
}

// redisNode is one redis-server process of the suite, without
// persistence.
type redisNode struct {
	t    *testing.T
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *redisNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

func startRedis(t *testing.T, dir string, i int) *redisNode {
	t.Helper()
	n := &redisNode{t: t, dir: filepath.Join(dir, fmt.Sprintf("redis%d", i)), port: freePort(t)}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.start()
	t.Cleanup(n.kill)
	return n
}

// start runs the node on its port, empty, and waits until it answers.
func (n *redisNode) start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	var logs bytes.Buffer
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(n.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", n.dir, "--protected-mode", "no")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.cmd, n.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", n.addr(), 200*time.Millisecond); err == nil {
			_, _ = conn.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			k, _ := io.ReadFull(conn, buf)
			conn.Close()
			if string(buf[:k]) == "+PONG\r\n" {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("redis-server on %d not up: %s", n.port, logs.String())
}

// kill stops the node with SIGKILL; its keys are gone.
func (n *redisNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
}
