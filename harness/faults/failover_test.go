//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/testenv"
)

// TestFailover fails PostgreSQL over under the workload: two PostgreSQL
// servers of its own (Debian's postgresql-15: initdb, pg_basebackup, a
// standby streaming from the primary through a proxy that holds the WAL
// back replicationLag, and that dies with the primary), two replicas on a URL that names both with
// target_session_attrs=read-write, and, in the middle of a storm of
// orders, payments, seat holds and likes, the primary SIGKILLed and the
// standby promoted a second later. Then the audits of TestFaults (every
// acknowledged order, payment and booking on the new primary; the books
// against the gateway's own charges; stock, seats, likes, every event
// delivered once), and every request with an Idempotency-Key answered
// in the three seconds before the kill or during the fault sent again:
// it must be answered its recorded answer, replayed, and make no second
// effect.
//
// It runs each of Failovers(): the shop's own setting must lose nothing,
// and each dangerous one must be seen to lose what the first keeps, or
// its row shows nothing.
func TestFailover(t *testing.T) {
	bin := postgresBin(t)
	sz := failoverSize()
	rep, err := newReport(sizeFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	var results []failoverResult
	for _, setting := range Failovers() {
		ok := t.Run(strings.ReplaceAll(setting, " ", "_"), func(t *testing.T) {
			r := runFailover(t, bin, sz, setting)
			results = append(results, r)
			t.Log(r.line())
			for _, f := range r.judge() {
				t.Error(f)
			}
		})
		if !ok && os.Getenv("SHOP_FAULTS_KEEP_GOING") == "" {
			break
		}
	}
	if len(results) == len(Failovers()) {
		rep.put(t, FailoverBlock, Failovers(), failoverBody(sz, results))
	} else if rep.path != "" {
		t.Errorf("report: %d of %d failovers ran; %s is not written", len(results), len(Failovers()), rep.path)
	}
}

// replicationLag is how long the proxy between the primary and the
// standby holds the WAL back: a standby in another zone. A synchronous
// commit waits for it; an asynchronous one, and a commit of the
// bookkeeping with SHOP_IDEMPOTENCY_ASYNC_COMMIT, do not, and what they
// acknowledged within it is not on the standby when the primary dies.
const replicationLag = 150 * time.Millisecond

// promoteAfter is how long after the primary's death the standby is
// promoted: what a failover manager takes to decide.
const promoteAfter = time.Second

// failoverSize is the workload of each failover: the size's clients and
// users, longer phases than TestFaults' small size (the kill comes once
// the flash sale has sold out, so that its refusals, which the
// bookkeeping commits, are part of the storm), and a small flash stock.
func failoverSize() size {
	sz := sizeFromEnv()
	sz.before, sz.during, sz.after = max(sz.before, 4*time.Second), max(sz.during, 6*time.Second), max(sz.after, 4*time.Second)
	sz.flashStock = 40
	return sz
}

// failoverResult is what one failover showed.
type failoverResult struct {
	setting string
	result
	killAt, promotedAt time.Time
	// downFor is from the first 503 after the kill to the last: the
	// time the clients saw no primary.
	downFor time.Duration
	// unavailable and internal are the 503 and 500 answers of the run.
	unavailable, internal int
	replays               replayTally
	// effects counts what the replays changed that they must not have.
	effects string
	// standby is how the standby stood at the kill: sync or async.
	standby string
	version string // PostgreSQL's
}

// replayTally is what the replays of acknowledged keys were answered.
type replayTally struct {
	sent     int
	replayed int // the recorded answer, marked replayed
	ranAgain int // the same answer, not replayed: the flow ran again
	busy     int // 409 request_in_progress: the key still claimed
	other    int // another answer
	examples []string
}

func (r replayTally) broken() int { return r.ranAgain + r.busy + r.other }

func (r replayTally) String() string {
	s := fmt.Sprintf("%d sent again: %d replayed, %d ran again, %d request_in_progress, %d answered otherwise",
		r.sent, r.replayed, r.ranAgain, r.busy, r.other)
	if len(r.examples) > 0 {
		s += " (" + strings.Join(r.examples, "; ") + ")"
	}
	return s
}

// safe says whether the setting is the one the shop runs with.
func (r failoverResult) safe() bool { return r.setting == Failovers()[0] }

// judge returns what the failover got wrong: for the shop's setting,
// anything lost; for a dangerous one, nothing lost (the row would then
// show nothing).
func (r failoverResult) judge() []string {
	var out []string
	if r.internal > 0 {
		out = append(out, fmt.Sprintf("%d answers 500: a failover must answer 503 while no primary takes writes", r.internal))
	}
	if r.unavailable == 0 {
		out = append(out, "no 503 during the failover: the kill did not reach the replicas' requests")
	}
	if r.replays.sent == 0 {
		out = append(out, "no acknowledged request with a key around the kill to send again")
	}
	lostWrites := r.audit.lost()
	switch r.setting {
	case Failovers()[0]:
		out = append(out, r.anomalies...)
		if r.replays.broken() > 0 {
			out = append(out, "replays after the failover: "+r.replays.String())
		}
		if r.effects != "" {
			out = append(out, "the replays had effects: "+r.effects)
		}
	case Failovers()[1]:
		if lostWrites > 0 {
			out = append(out, fmt.Sprintf("%d acknowledged writes lost with a synchronous standby", lostWrites))
		}
		if r.replays.broken() == 0 {
			out = append(out, "the bookkeeping committed asynchronously lost nothing: every replay got its answer ("+r.replays.String()+")")
		}
	case Failovers()[2]:
		if lostWrites == 0 {
			out = append(out, "the asynchronous standby lost no acknowledged write")
		}
	}
	return out
}

func (r failoverResult) line() string {
	return fmt.Sprintf("%s: standby %s; writes refused for %s (promoted %s after the kill); %d answers 503, %d answers 500; lost: %d orders, %d payments, %d bookings; replays: %s; effects of the replays: %s; books: %d paid, %d charges; anomalies: %s",
		r.setting, r.standby, r.downFor.Round(10*time.Millisecond), r.promotedAt.Sub(r.killAt).Round(10*time.Millisecond),
		r.unavailable, r.internal, r.audit.lostOrders, r.audit.lostPaid, r.audit.lostBookings, r.replays, orNone(r.effects),
		r.audit.books.Paid, r.audit.books.Charges, orNone(strings.Join(r.anomalies, "; ")))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// runFailover starts a primary and a standby, the cluster on both, and
// runs the workload across the failover.
func runFailover(t *testing.T, bin string, sz size, setting string) failoverResult {
	syncStandby := setting != Failovers()[2]
	var env []string
	if setting == Failovers()[1] {
		env = []string{"SHOP_IDEMPOTENCY_ASYNC_COMMIT=true"}
	}
	t0 := time.Now()
	step := func(what string) { t.Logf("%s after %s", what, time.Since(t0).Round(100*time.Millisecond)) }
	c := newCluster(t, "degrade")
	c.extraEnv = env
	step("shop built")
	pair := startPair(t, c, bin, syncStandby)
	step("primary and standby up")
	c.dbURL = pair.url()
	c.db = testenv.PoolFor(t, c.dbURL)
	c.replicaDB = c.dbURL
	c.startServices()
	step("replicas up")
	w := setUp(t, c, sz.users, sz.posts, sz.flashStock)
	w.clients, w.payClicks = sz.clients, 3
	step("servers, replicas and the fixture up")

	fr := failoverResult{setting: setting}
	if err := c.db.QueryRow(context.Background(), `SHOW server_version`).Scan(&fr.version); err != nil {
		t.Fatal(err)
	}
	sc := scenario{row: "failover", env: env,
		floors: []floor{{ofBefore: 0.3,
			why: "no primary takes writes from the kill until the promotion a second later, and every write answers 503 meanwhile; " +
				"then the new primary, with no standby to wait for, takes them faster than before: the floor is under a third"}},
		fault: func(t *testing.T, c *cluster) func() {
			fr.standby = pair.syncState(t)
			fr.killAt = time.Now()
			// The machine dies with its network: what the proxy holds
			// back on its way to the standby is lost with the primary.
			pair.repl.Stop()
			pair.primary.kill()
			time.Sleep(promoteAfter)
			pair.promote(t)
			fr.promotedAt = time.Now()
			return func() {}
		}}
	fr.result = runScenario(t, c, w, sz, sc)
	step("the workload and the audits done")
	answers := c.history.snapshot()
	var first503, last503 time.Time
	for _, a := range answers {
		switch {
		case a.status == http.StatusServiceUnavailable:
			fr.unavailable++
			if !a.at.Before(fr.killAt) {
				if first503.IsZero() {
					first503 = a.at
				}
				last503 = a.at
			}
		case a.status == http.StatusInternalServerError:
			fr.internal++
		}
	}
	fr.downFor = last503.Sub(first503)
	before := effectsNow(t, c)
	fr.replays = replayKeys(t, c, c.history.keyedCopy(), fr.killAt, fr.killAt.Add(-3*time.Second), fr.killAt.Add(sz.during))
	fr.effects = effectsChanged(before, effectsNow(t, c))
	step("the replays done")
	return fr
}

// replayKeys sends again, with its key, every request whose final
// answer arrived in [from, to), eight keys at a time, and tallies what it
// is answered. The requests of one key (a pay storm's click and its
// retry) go one after the other: sent together, the second would be told
// request_in_progress while the first holds the key, as the service
// answers any two copies of a request that arrive at once.
func replayKeys(t *testing.T, c *cluster, keyed []keyedRequest, killAt, from, to time.Time) replayTally {
	t.Helper()
	byKey := map[string][]keyedRequest{}
	var order []string
	for _, k := range keyed {
		if k.answer.at.Before(from) || !k.answer.at.Before(to) {
			continue
		}
		id := k.token + " " + k.key
		if byKey[id] == nil {
			order = append(order, id)
		}
		byKey[id] = append(byKey[id], k)
	}
	cl := newClient(c.replicaURLs, &history{})
	var mu sync.Mutex
	var tally replayTally
	work := make(chan []keyedRequest)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ks := range work {
				for _, k := range ks {
					var body any
					if k.body != nil {
						body = jsonRaw(k.body)
					}
					r := cl.do(context.Background(), k.flow, k.method, k.path, k.token, k.key, body)
					mu.Lock()
					tally.sent++
					same := r.status == k.answer.status && r.code == k.answer.code
					switch {
					case same && r.replayed:
						tally.replayed++
					case same:
						tally.ranAgain++
					case r.status == http.StatusConflict && r.code == "request_in_progress":
						tally.busy++
					default:
						tally.other++
					}
					if !(same && r.replayed) && len(tally.examples) < 3 {
						tally.examples = append(tally.examples, fmt.Sprintf("%s %s first %s at %s from the kill, again %s%s",
							k.method, k.flow, k.answer.key(), k.answer.at.Sub(killAt).Round(time.Millisecond), r.key(), rowsOf(c, k.path, killAt)))
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, id := range order {
		work <- byKey[id]
	}
	close(work)
	wg.Wait()
	return tally
}

// rowsOf describes the payments of the order a pay request's path names,
// their times from the kill: what a replay that went wrong found.
func rowsOf(c *cluster, path string, killAt time.Time) string {
	id, ok := strings.CutPrefix(path, "/v1/orders/")
	if !ok {
		return ""
	}
	id, ok = strings.CutSuffix(id, "/payments")
	if !ok {
		return ""
	}
	rows, err := c.db.Query(context.Background(), `SELECT status, created_at, updated_at FROM payments WHERE order_id = $1 ORDER BY created_at`, id)
	if err != nil {
		return ": " + err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var status string
		var created, updated time.Time
		if rows.Scan(&status, &created, &updated) == nil {
			out = append(out, fmt.Sprintf("%s, made %s, updated %s", status, created.Sub(killAt).Round(time.Millisecond), updated.Sub(killAt).Round(time.Millisecond)))
		}
	}
	return ": its order's payments " + strings.Join(out, "; ")
}

// jsonRaw is a request body sent as it was recorded.
type jsonRaw []byte

func (j jsonRaw) MarshalJSON() ([]byte, error) { return j, nil }

// effectsNow counts what a request could have done twice: orders,
// payments, bookings, and the gateway's charges.
func effectsNow(t *testing.T, c *cluster) map[string]int {
	t.Helper()
	settle(c, 15*time.Second)
	ctx := context.Background()
	out := map[string]int{}
	var orders, payments, bookings int
	if err := c.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders)::int, (SELECT count(*) FROM payments)::int,
		(SELECT count(*) FROM bookings)::int`).Scan(&orders, &payments, &bookings); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	charges, err := books.FromGateway(ctx, nil, c.gw.url)
	if err != nil {
		t.Fatalf("read charges: %v", err)
	}
	out["orders"], out["payments"], out["bookings"], out["charges"] = orders, payments, bookings, len(charges)
	return out
}

func effectsChanged(before, after map[string]int) string {
	var parts []string
	for _, k := range []string{"orders", "payments", "bookings", "charges"} {
		if after[k] != before[k] {
			parts = append(parts, fmt.Sprintf("%s %d → %d", k, before[k], after[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// failoverBody is the block of docs/RELIABILITY.md TestFailover writes.
func failoverBody(sz size, results []failoverResult) string {
	var b strings.Builder
	version := results[0].version // every run's servers are the same programs
	fmt.Fprintf(&b, "Each run: %d clients per flow; %s before, %s during, %s after the kill; the WAL held back %s on its way to the standby; "+
		"the standby promoted %s after the primary's SIGKILL. PostgreSQL %s, two servers of the test's own.\n\n",
		sz.clients, sz.before, sz.during, sz.after, replicationLag, promoteAfter, version)
	fmt.Fprintln(&b, "| setting | standby at the kill | 503s from first to last | 503 answers | 500 answers | acknowledged writes lost | replays of acknowledged keys | what the replays did again | books | verdict |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		verdict := "held"
		if !r.safe() {
			verdict = "lost what the first keeps, as expected"
		}
		if f := r.judge(); len(f) > 0 {
			verdict = fmt.Sprintf("**failed** (%d)", len(f))
		}
		books := fmt.Sprintf("%d paid, %d charges", r.audit.books.Paid, r.audit.books.Charges)
		if n := len(r.audit.books.Problems); n > 0 {
			books += fmt.Sprintf(", **%d problems**", n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d orders, %d payments, %d bookings | %s | %s | %s | %s |\n",
			r.setting, r.standby, r.downFor.Round(10*time.Millisecond), r.unavailable, r.internal,
			r.audit.lostOrders, r.audit.lostPaid, r.audit.lostBookings, r.replays, orNone(r.effects), books, verdict)
	}
	fmt.Fprintln(&b, "\nWhat each run's audits found (TestFaults' audits, over the whole run):")
	fmt.Fprintln(&b)
	for _, r := range results {
		fmt.Fprintf(&b, "- %s: %s\n", r.setting, orNone(strings.Join(r.anomalies, "; ")))
	}
	fmt.Fprintln(&b, "\nUseful answers per second by flow, before → during → after:")
	fmt.Fprintln(&b)
	for _, r := range results {
		fmt.Fprintf(&b, "- %s: %s\n", r.setting, r.perFlow)
	}
	fmt.Fprintln(&b, "\nAnswers by flow, status and code:")
	fmt.Fprintln(&b)
	for _, r := range results {
		fmt.Fprintf(&b, "- %s — %s\n", r.setting, answersLine(r.answers))
	}
	return b.String()
}

// postgresBin is the directory of the PostgreSQL server's programs:
// SHOP_FAULTS_PG_BIN, else the newest /usr/lib/postgresql/*/bin (Debian's
// layout), else the directory of the initdb on the PATH.
func postgresBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("SHOP_FAULTS_PG_BIN"); dir != "" {
		return dir
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("TestFailover runs PostgreSQL servers of its own: install the server (Debian: apt-get install postgresql-15), or name its bin directory in SHOP_FAULTS_PG_BIN")
	return ""
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// pgPair is a primary and its standby.
type pgPair struct {
	bin              string
	root             string
	cred             *syscall.Credential // the postgres user's, when the test runs as root
	primary, standby *pgNode
	repl             *toxiproxy.Proxy // the standby's way to the primary
	sync             bool
}

// pgNode is one PostgreSQL server process.
type pgNode struct {
	name string
	dir  string
	port int
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPair initialises a primary, creates the shop's database and its
// schema, copies it to a standby with pg_basebackup, and starts the
// standby streaming through a proxy that holds the WAL back
// replicationLag. With sync, the primary's commits wait for the standby
// (synchronous_standby_names); otherwise they do not.
func startPair(t *testing.T, c *cluster, bin string, sync bool) *pgPair {
	t.Helper()
	// PostgreSQL will not run as root: as root, the servers run as the
	// postgres user, in a directory it can enter (t.TempDir's is 0700).
	root, err := os.MkdirTemp("", "shop-failover-")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgPair{bin: bin, root: root, sync: sync}
	t.Cleanup(func() {
		for _, n := range []*pgNode{p.standby, p.primary} {
			if n != nil {
				n.kill()
				if t.Failed() {
					b, _ := os.ReadFile(n.log)
					t.Logf("%s log (last 4 KB):\n%s", n.name, tail(b, 4096))
				}
			}
		}
		os.RemoveAll(root)
	})
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the servers run as the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatal(err)
		}
	}

	p.primary = &pgNode{name: "primary", dir: filepath.Join(root, "primary"), port: freePort(t)}
	p.run(t, "initdb", "-D", p.primary.dir, "-U", "shop", "-A", "trust", "-E", "UTF8", "--no-sync")
	p.start(t, p.primary, "-c", "wal_level=replica", "-c", "max_wal_senders=4", "-c", "wal_keep_size=512MB")
	admin := p.connect(t, p.primary, "postgres")
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE shop"); err != nil {
		t.Fatal(err)
	}
	admin.Close(context.Background())
	migrate := exec.Command(c.bin, "migrate", "up")
	migrate.Env = append(os.Environ(), "SHOP_DATABASE_URL="+p.nodeURL(p.primary, "shop"))
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("shop migrate up: %v\n%s", err, out)
	}

	p.repl = c.proxy("replication", "127.0.0.1:"+strconv.Itoa(p.primary.port))
	c.toxic(p.repl, "lag", "latency", "downstream", fmt.Sprintf(`{"latency":%d}`, replicationLag.Milliseconds()))
	p.standby = &pgNode{name: "standby", dir: filepath.Join(root, "standby"), port: freePort(t)}
	p.run(t, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary.port), "-U", "shop",
		"-D", p.standby.dir, "-X", "stream", "--checkpoint=fast", "--no-sync")
	host, port, _ := strings.Cut(p.repl.Listen, ":")
	p.write(t, filepath.Join(p.standby.dir, "standby.signal"), "")
	p.write(t, filepath.Join(p.standby.dir, "postgresql.auto.conf"),
		fmt.Sprintf("primary_conninfo = 'host=%s port=%s user=shop application_name=standby'\n", host, port))
	p.start(t, p.standby)
	if sync {
		// Only now: with no standby to confirm them, the commits above
		// would have waited for ever.
		conn := p.connect(t, p.primary, "postgres")
		_, err := conn.Exec(context.Background(), "ALTER SYSTEM SET synchronous_standby_names = 'standby'")
		if err == nil {
			_, err = conn.Exec(context.Background(), "SELECT pg_reload_conf()")
		}
		conn.Close(context.Background())
		if err != nil {
			t.Fatalf("make the standby synchronous: %v", err)
		}
	}
	p.waitStreaming(t)
	return p
}

// url names both servers, the primary first, for whichever takes writes.
func (p *pgPair) url() string {
	return fmt.Sprintf("postgres://shop@127.0.0.1:%d,127.0.0.1:%d/shop?sslmode=disable&target_session_attrs=read-write",
		p.primary.port, p.standby.port)
}

func (p *pgPair) nodeURL(n *pgNode, db string) string {
	return fmt.Sprintf("postgres://shop@127.0.0.1:%d/%s?sslmode=disable", n.port, db)
}

// command is one of the server's programs, as the postgres user when
// the test runs as root.
func (p *pgPair) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	cmd.Dir = p.root
	return cmd
}

func (p *pgPair) run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := p.command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// write writes a file of a data directory, owned by the server's user.
func (p *pgPair) write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if p.cred != nil {
		if err := os.Chown(path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs postgres on n's data directory, listening on 127.0.0.1 and
// a socket in the directory itself, and waits until it takes
// connections.
func (p *pgPair) start(t *testing.T, n *pgNode, args ...string) {
	t.Helper()
	n.log = filepath.Join(p.root, n.name+".log")
	logs, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = p.command("postgres", append([]string{"-D", n.dir, "-p", strconv.Itoa(n.port), "-k", n.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100", "-c", "fsync=off"}, args...)...)
	n.cmd.Stdout, n.cmd.Stderr = logs, logs
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.name, err)
	}
	n.done = make(chan struct{})
	go func() { _ = n.cmd.Wait(); logs.Close(); close(n.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), p.nodeURL(n, "postgres"))
		if err == nil {
			conn.Close(context.Background())
			return
		}
		select {
		case <-n.done:
			b, _ := os.ReadFile(n.log)
			t.Fatalf("%s exited:\n%s", n.name, tail(b, 4096))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up within 30 s: %v", n.name, err)
		}
	}
}

func (p *pgPair) connect(t *testing.T, n *pgNode, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), p.nodeURL(n, db))
	if err != nil {
		t.Fatalf("connect to %s: %v", n.name, err)
	}
	return conn
}

// waitStreaming waits until the primary sees the standby streaming, in
// the state the pair asks for.
func (p *pgPair) waitStreaming(t *testing.T) {
	t.Helper()
	want := "async"
	if p.sync {
		want = "sync"
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p.syncState(t) == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the standby is not streaming (%s) within 30 s", want)
}

// syncState is the standby's sync_state as the primary sees it.
func (p *pgPair) syncState(t *testing.T) string {
	t.Helper()
	conn := p.connect(t, p.primary, "postgres")
	defer conn.Close(context.Background())
	var state string
	err := conn.QueryRow(context.Background(), `SELECT sync_state FROM pg_stat_replication
		WHERE application_name = 'standby' AND state = 'streaming'`).Scan(&state)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("read pg_stat_replication: %v", err)
	}
	return state
}

// promote makes the standby the primary, as a failover manager does
// once it has given the old one up.
func (p *pgPair) promote(t *testing.T) {
	t.Helper()
	conn := p.connect(t, p.standby, "postgres")
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT pg_promote(true, 30)`).Scan(&ok); err != nil || !ok {
		t.Fatalf("promote the standby: %v (%v)", err, ok)
	}
}

// kill stops the server and every process of it, as a crash of its
// machine does: nothing it had not written is kept.
func (n *pgNode) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}
