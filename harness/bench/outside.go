package bench

// `shop bench outside` measures the four flows as a client outside the
// service meets them: two replicas, each a `shop serve` process of its own
// (this binary, or -shop), on the bench's scratch database, the -redis
// nodes and the stand-in gateway, with the rate limits off as `make load`
// runs the compose stack. This process is only the client: it seeds the
// users, products, orders, events and posts through the API, sends each
// flow's requests over HTTP, each to the next replica in turn (alternate,
// the round robin of the stack's balancer), and audits what the replicas
// left in SQL and at the gateway.
//
// The operations, the cases and the audits are those of the layered
// cells of `shop bench strategies` (an order placed, a payment made, a
// hold granted and released, a like flipped; hot and spread), so that its
// table and this one differ in one thing: where the service runs. There,
// in the load generator's process behind one loopback server; here, in two
// processes of its own, so every flow also crosses replicas (a hold made
// on one is released on the other, a like set on one is unset on the
// other), as behind a real balancer. The figures are still those of the
// whole box: the replicas, the client, PostgreSQL and Redis share its
// cores.

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/shop-example/shop/harness/docblock"
	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/seats"
)

// outsideBlock is the generated block of docs/STRATEGIES.md the bench
// writes with -doc.
const outsideBlock = "strategies/outside"

// outsideFlowNames are the flows of `shop bench outside`, in the order
// they run.
func outsideFlowNames() []string { return []string{"orders", "payments", "seats", "likes"} }

// outsideRowNames are the rows of its table: flow/case.
func outsideRowNames(flows, shapes []string) []string {
	var names []string
	for _, f := range flows {
		for _, shape := range shapes {
			names = append(names, f+"/"+shape)
		}
	}
	return names
}

// outsideReplicas is how many replicas the client alternates between.
const outsideReplicas = 2

// seedWorkers is how many requests the seeding keeps in flight.
const seedWorkers = 16

// outsideRow is one flow in one case, measured and audited.
type outsideRow struct {
	flow, shape string
	result             // the window's figures
	done        int    // operations that succeeded, warm-up and overrun included
	counts      string // what the audit counts
	audit              // what it found
}

// outsideRun is what `shop bench outside` saw: its rows, the requests
// each replica answered, and the replicas' lock outcomes.
type outsideRun struct {
	rows   []outsideRow
	served []int
	locks  string
}

func benchOutside(ctx context.Context, o benchOptions, logger *slog.Logger) error {
	run, err := runOutside(ctx, o, logger)
	if err != nil {
		return err
	}
	var report strings.Builder
	printOutside(&report, o, run)
	fmt.Fprint(os.Stdout, report.String())
	if o.doc != nil {
		// The scratch database is gone: the server versions are read from
		// a pool of their own.
		pool, err := pgxpool.New(ctx, o.dbURL)
		if err != nil {
			return fmt.Errorf("-doc: %w", err)
		}
		defer pool.Close()
		names := make([]string, len(run.rows))
		for i, r := range run.rows {
			names[i] = r.flow + "/" + r.shape
		}
		if err := o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: outsideBlock, Rows: names, Body: asMarkdown(report.String())}); err != nil {
			return err
		}
	}
	broken := 0
	for _, r := range run.rows {
		broken += r.anomalies()
	}
	if broken > 0 {
		return fmt.Errorf("bench outside: the audits found %d violations of the flows' invariants", broken)
	}
	return nil
}

// runOutside starts the gateway and the replicas on a scratch database,
// then seeds, measures and audits each flow in each case.
func runOutside(ctx context.Context, o benchOptions, logger *slog.Logger) (run outsideRun, err error) {
	for _, f := range o.flows {
		if !slices.Contains(outsideFlowNames(), f) {
			return run, fmt.Errorf("bench outside: no flow %q; the flows are %s", f, strings.Join(outsideFlowNames(), ","))
		}
	}
	for _, shape := range o.shapes {
		if shape != hot && shape != spread {
			return run, fmt.Errorf("bench outside: no case %q; the cases are %s,%s", shape, hot, spread)
		}
	}
	bin := o.shopBin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return run, fmt.Errorf("bench outside: the binary to start the replicas from: %w", err)
		}
	}
	o.serviceConns *= outsideReplicas
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return run, err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	// The in-flight audits' triggers, as bench strategies adds them,
	// before any replica has a statement cached on these tables.
	for _, add := range []string{sqlSingleAddColumn, sqlLikesAddAuditColumns, sqlSeatsAddAuditColumn} {
		if _, err := pool.Exec(ctx, add); err != nil {
			return run, fmt.Errorf("add the audits' columns: %w", err)
		}
	}
	_, gateway, err := startGateway(ctx, gw.Options{})
	if err != nil {
		return run, err
	}
	defer gateway.stop()

	admin := crand.Text()
	reps, err := startReplicas(ctx, bin, replicaEnv{db: db.url, redis: o.redisAddrs, gateway: gateway.base, admin: admin}, logger)
	if err != nil {
		return run, err
	}
	defer func() { err = errors.Join(err, reps.stop(err != nil)) }()

	svc := outsideClient(reps.urls(), o.clients)
	api := apiClient{svc: svc, admin: admin}
	users, err := api.users(ctx, o.clients)
	if err != nil {
		return run, err
	}
	for _, u := range users {
		svc.tokens = append(svc.tokens, u.Token)
	}
	a := &arena{o: o, pool: pool, svc: svc, gatewayURL: gateway.base}
	for _, flow := range o.flows {
		for _, shape := range o.shapes {
			row, err := runOutsideCell(ctx, a, api, users, flow, shape, logger)
			if err != nil {
				return run, fmt.Errorf("%s/%s: %w", flow, shape, err)
			}
			run.rows = append(run.rows, row)
		}
	}
	run.served, run.locks, err = reps.outcomes(ctx)
	return run, err
}

// runOutsideCell seeds one flow's case through the API, measures it and
// audits it with the audit of its layered cell in bench strategies.
func runOutsideCell(ctx context.Context, a *arena, api apiClient, users []apiUser, flow, shape string, logger *slog.Logger) (outsideRow, error) {
	o := a.o
	t := newTold()
	row := outsideRow{flow: flow, shape: shape}
	var op orderFunc
	var keys []string
	var check func(ctx context.Context) (audit, error)
	switch flow {
	case "orders":
		n := 1
		if shape == spread {
			n = o.skus
		}
		skus, err := api.products(ctx, a.prefix("OUT"), n)
		if err != nil {
			return row, err
		}
		op, keys, row.counts = a.svc.order, skus, "units oversold"
		check = func(ctx context.Context) (audit, error) { return auditStock(ctx, a, skus, t.byKey()) }
	case "payments":
		n := max(int(float64(o.payRate)*(o.warmup+o.duration).Seconds()), o.clients)
		pending, err := api.pendingOrders(ctx, a.prefix("OUTPAY"), n)
		if err != nil {
			return row, err
		}
		if shape == hot {
			pending.repeat = o.clicks
		}
		pay := layeredPayFlow{svc: a.svc}
		op = func(ctx context.Context, client int, _ string) string {
			id, owner, ok := pending.take()
			if !ok {
				return outOfOrders()
			}
			failure := pay.payOrder(ctx, id, owner)
			if failure == "" {
				t.add(client, id)
			}
			return failure
		}
		row.counts = "double charges"
		check = func(ctx context.Context) (audit, error) { return a.auditPayments(ctx, pending.ids, t.byKey()) }
	case "seats":
		sh := seatShape{name: hot, rows: 1, perRow: 20}
		if shape == spread {
			sh = seatShape{name: spread, rows: o.seatRows, perRow: seats.MaxSeatsPerRow}
		}
		event, err := api.event(ctx, sh)
		if err != nil {
			return row, err
		}
		op, row.counts = layeredSeatFlow{svc: a.svc, event: event, shape: sh}.hold, "double-held seats"
		check = func(ctx context.Context) (audit, error) {
			var found audit
			if err := a.pool.QueryRow(ctx, sqlSeatsAudit, event).Scan(&found.inFlight); err != nil {
				return audit{}, err
			}
			after, err := seatViolations(ctx, a.pool, event)
			found.after = after
			return found, err
		}
	case "likes":
		n := 1
		if shape == spread {
			n = o.posts
		}
		posts, err := api.posts(ctx, users[0].Token, n)
		if err != nil {
			return row, err
		}
		flip := newLayeredLikeFlow(a.svc, o.clients)
		op, keys, row.counts = flip.toggle, posts, "lost like updates"
		check = func(ctx context.Context) (audit, error) {
			found, err := auditLikes(ctx, a, posts, likeAudit{counted: sqlLikesCountedSharded, after: sqlLikesAuditSharded}, t)
			if err != nil {
				return found, err
			}
			wrong, err := likesToldWrong(ctx, a.pool, users, posts, flip.liked)
			found.after += wrong
			return found, err
		}
	}
	if flow != "payments" {
		op = t.record(op)
	}
	if _, err := a.pool.Exec(ctx, "ANALYZE"); err != nil {
		return row, fmt.Errorf("analyze: %w", err)
	}
	res, err := runScenarios(ctx, a.pool, o, []scenario{{name: "outside/" + flow + "/" + shape, skus: keys, order: op, layered: true}}, logger)
	if err != nil {
		return row, err
	}
	row.result, row.done = res[0], t.total()
	row.audit, err = check(ctx)
	if err != nil {
		return row, fmt.Errorf("audit: %w", err)
	}
	return row, nil
}

// sqlLikedRows are the liked rows of the posts, by user.
const sqlLikedRows = `SELECT user_id::text, post_id::text FROM likes WHERE post_id = ANY($1::uuid[]) AND liked`

// likesToldWrong counts the (user, post) pairs whose like row says other
// than the last answer the user was told: a like answered done and lost,
// or one left behind that the user was told was undone.
func likesToldWrong(ctx context.Context, pool *pgxpool.Pool, users []apiUser, posts []string, told liked) (int, error) {
	rows, err := pool.Query(ctx, sqlLikedRows, posts)
	if err != nil {
		return 0, err
	}
	inDB := map[[2]string]bool{}
	var user, post string
	if _, err := pgx.ForEachRow(rows, []any{&user, &post}, func() error {
		inDB[[2]string{user, post}] = true
		return nil
	}); err != nil {
		return 0, err
	}
	wrong := 0
	for c, u := range users {
		for _, p := range posts {
			if inDB[[2]string{u.ID, p}] != told[c][p] {
				wrong++
			}
		}
	}
	return wrong, nil
}

// outsideClient is the HTTP client of the bench's clients: a *service whose
// every request goes to the next of the replicas at urls.
func outsideClient(urls []string, clients int) *service {
	hosts := make([]string, len(urls))
	for i, u := range urls {
		hosts[i] = strings.TrimPrefix(u, "http://")
	}
	transport := &http.Transport{MaxIdleConns: 2 * clients * len(urls), MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	return &service{base: urls[0], client: &http.Client{Transport: &alternate{hosts: hosts, next: transport}, Timeout: 30 * time.Second}}
}

// alternate is the bench's balancer: it sends each request to the next
// replica in turn, round robin, as the compose stack's nginx does.
type alternate struct {
	hosts []string // host:port of each replica
	n     atomic.Uint64
	next  http.RoundTripper
}

func (a *alternate) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Host = a.hosts[(a.n.Add(1)-1)%uint64(len(a.hosts))]
	r.Host = r.URL.Host
	return a.next.RoundTrip(r)
}

// apiClient seeds through the API, as the bench's clients and an admin.
type apiClient struct {
	svc   *service
	admin string // the replicas' SHOP_ADMIN_TOKEN
}

// apiUser is what POST /v1/users answers.
type apiUser struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// create POSTs body to path as token, with a fresh Idempotency-Key, and
// decodes the 201 it must answer into out.
func (c apiClient) create(ctx context.Context, token, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	a := c.svc.post(ctx, token, path, string(b), crand.Text())
	switch {
	case a.transport != "":
		return fmt.Errorf("seed: POST %s: %s", path, a.transport)
	case a.status != http.StatusCreated:
		return fmt.Errorf("seed: POST %s: %d %s", path, a.status, strings.TrimSpace(string(a.body)))
	}
	if err := json.Unmarshal(a.body, out); err != nil {
		return fmt.Errorf("seed: POST %s: %w", path, err)
	}
	return nil
}

// each runs seed(i) for i in [0, n), seedWorkers at a time; the first
// error stops the others.
func each(ctx context.Context, n int, seed func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(seedWorkers)
	for i := range n {
		g.Go(func() error { return seed(ctx, i) })
	}
	return g.Wait()
}

// users registers n users, one per client.
func (c apiClient) users(ctx context.Context, n int) ([]apiUser, error) {
	users := make([]apiUser, n)
	return users, each(ctx, n, func(ctx context.Context, i int) error {
		return c.create(ctx, "", "/v1/users", map[string]string{"name": fmt.Sprintf("outside client %d", i)}, &users[i])
	})
}

// products creates n products named prefix1…, stock that no run sells out.
func (c apiClient) products(ctx context.Context, prefix string, n int) ([]string, error) {
	skus := make([]string, n)
	return skus, each(ctx, n, func(ctx context.Context, i int) error {
		skus[i] = prefix + strconv.Itoa(i+1)
		var p struct{}
		return c.create(ctx, c.admin, "/v1/products", map[string]any{"sku": skus[i], "name": "outside product " + skus[i], "price_cents": payPrice, "stock": benchStock}, &p)
	})
}

// pendingOrders places n one-unit orders, owned by the clients in turn,
// for the payment cases to pay. Each owner buys a product of its own, so
// the seeding is not one hot row.
func (c apiClient) pendingOrders(ctx context.Context, prefix string, n int) (*pendingOrders, error) {
	clients := len(c.svc.tokens)
	skus, err := c.products(ctx, prefix, clients)
	if err != nil {
		return nil, err
	}
	p := &pendingOrders{ids: make([]string, n), owners: make([]int, n)}
	return p, each(ctx, n, func(ctx context.Context, i int) error {
		owner := i % clients
		var order struct {
			ID string `json:"id"`
		}
		body := map[string]any{"items": []map[string]any{{"sku": skus[owner], "quantity": 1}}}
		if err := c.create(ctx, c.svc.tokens[owner], "/v1/orders", body, &order); err != nil {
			return err
		}
		p.ids[i], p.owners[i] = order.ID, owner
		return nil
	})
}

// event creates an event of the shape, every seat available.
func (c apiClient) event(ctx context.Context, sh seatShape) (string, error) {
	var ev struct {
		ID string `json:"id"`
	}
	err := c.create(ctx, c.admin, "/v1/events", map[string]any{"name": "outside " + sh.name, "rows": sh.rows, "seats_per_row": sh.perRow}, &ev)
	return ev.ID, err
}

// posts creates n posts by the user of token.
func (c apiClient) posts(ctx context.Context, token string, n int) ([]string, error) {
	ids := make([]string, n)
	return ids, each(ctx, n, func(ctx context.Context, i int) error {
		var post struct {
			ID string `json:"id"`
		}
		if err := c.create(ctx, token, "/v1/posts", map[string]string{"title": "outside post " + strconv.Itoa(i+1)}, &post); err != nil {
			return err
		}
		ids[i] = post.ID
		return nil
	})
}

// printOutside writes the conditions of the run, the table, and what the
// replicas answered.
func printOutside(w io.Writer, o benchOptions, run outsideRun) {
	fmt.Fprintf(w, "\nshop bench outside: %d clients, each request to the next of %d replicas (`shop serve` processes, rate limits off), seeded through the API; %s measured after %s warmup per cell; spread over %d SKUs, %d posts or %d×%d seats; hot payments: %d clicks per order; %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.clients, outsideReplicas, o.duration, o.warmup, o.skus, o.posts, o.seatRows, seats.MaxSeatsPerRow, o.clicks, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintln(w, "ops: orders placed, payments made, holds granted (each then released), likes flipped; done: those over the whole cell, warm-up included")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| flow\t case\t ops/s\t p50\t p99\t errors\t done\t the audit counts\t in flight\t violations\t")
	fmt.Fprintln(tw, "|---\t---\t---:\t---:\t---:\t---\t---:\t---\t---:\t---:\t")
	for _, r := range run.rows {
		fmt.Fprintf(tw, "| %s\t %s\t %.0f\t %s\t %s\t %s\t %d\t %s\t %s\t %s\t\n", r.flow, r.shape, r.rate(), millis(r.p50), millis(r.p99),
			r.errorSummary(), r.done, r.counts, anomalyCell(r.inFlight), anomalyCell(r.anomalies()))
	}
	tw.Flush()
	fmt.Fprintln(w)
	served := make([]string, len(run.served))
	for i, n := range run.served {
		served[i] = fmt.Sprintf("%s %d", replicaName(i), n)
	}
	fmt.Fprintf(w, "requests answered: %s\n", strings.Join(served, ", "))
	fmt.Fprintf(w, "service lock (both replicas, whole run): %s\n", run.locks)
}
