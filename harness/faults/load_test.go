//go:build faults

package faults

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shop-example/shop/internal/seats/seatcheck"
)

// Flows of the workload.
const (
	flowOrders   = "flash sale"
	flowPay      = "pay storm"
	flowPayOrder = "pay storm: order" // the order each pay storm pays
	flowLikes    = "likes"
	flowSeats    = "seat rush"
	// The refund storm (refunds_test.go): admin agents refunding parts
	// of paid orders at once, and the orders it pays for them.
	flowRefund      = "refund storm"
	flowRefundOrder = "refund storm: order"
)

// answer is one request as its client saw it, after at most one failover.
type answer struct {
	flow     string
	status   int    // 0: no HTTP answer (transport error or client timeout)
	code     string // the problem's code, "" on success
	retry    bool   // a Retry-After header came with it
	replayed bool
	at       time.Time // when the answer arrived, or the client gave up
	// took is the client's whole wait, from its first attempt to the
	// answer, the wait for a replica that did not answer included.
	took     time.Duration
	failover bool // the first replica did not answer; the other did or did not
}

// sent is when the client sent the request's first attempt.
func (a answer) sent() time.Time { return a.at.Add(-a.took) }

// key names the answer in the tables: "201", "409 out_of_stock", "no answer".
func (a answer) key() string {
	if a.status == 0 {
		return "no answer"
	}
	k := strconv.Itoa(a.status)
	if a.code != "" {
		k += " " + a.code
	}
	if a.replayed {
		k += " replayed"
	}
	return k
}

// useful says the answer is a final outcome of the business request:
// done, or refused for a business reason. Busy, unavailable and timeouts
// are not.
func (a answer) useful() bool {
	switch {
	case a.status >= 200 && a.status < 300:
		return true
	case a.status == http.StatusConflict && (a.code == "out_of_stock" || a.code == "invalid_state" ||
		a.code == "seat_unavailable" || a.code == "hold_limit_reached" || a.code == "hold_expired"):
		return true
	case a.status == http.StatusPaymentRequired:
		return true
	case a.status == http.StatusUnprocessableEntity && a.code == "refund_exceeds_remaining":
		return true
	}
	return false
}

// history is every answer of a run, in arrival order.
type history struct {
	mu      sync.Mutex
	answers []answer
	// acknowledged are the ids the service said it created: orders
	// answered 201 and payments answered 201 (paid).
	ackOrders   []string
	ackPaid     []string
	ackBookings []string // bookings answered 201
	// ackRefunds are the refunds answered 2xx, by id: succeeded (201) or
	// processing (202), as the latest answer about each said.
	ackRefunds map[string]int
	// keyed are the requests sent with an Idempotency-Key whose answer
	// was a final outcome, to be sent again (TestFailover's replays).
	keyed []keyedRequest
}

// keyedRequest is a request with an Idempotency-Key and the answer it got.
type keyedRequest struct {
	flow, method, path, token, key string
	body                           []byte
	answer                         answer
}

func (h *history) keyedCopy() []keyedRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]keyedRequest(nil), h.keyed...)
}

func (h *history) add(a answer) {
	h.mu.Lock()
	h.answers = append(h.answers, a)
	h.mu.Unlock()
}

func (h *history) snapshot() []answer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]answer(nil), h.answers...)
}

// client sends requests to the replicas in turn, as a load balancer
// would, and fails over once to the other replica when one does not
// answer (connection refused, or nothing within attemptTimeout).
type client struct {
	http     *http.Client
	replicas func() []string // their URLs now
	next     atomic.Uint64
	hist     *history
	// down holds, per replica URL, until when it is left out after it
	// did not answer: a balancer's passive health check (nginx's
	// max_fails=1 fail_timeout=2s).
	mu   sync.Mutex
	down map[string]time.Time
}

// downFor is how long a replica that did not answer is left out.
const downFor = 2 * time.Second

// pick returns the replicas in the order to try them: the next in turn
// first, unless it is left out.
func (c *client) pick() []string {
	urls := c.replicas()
	first := int(c.next.Add(1)) % len(urls)
	order := append(append([]string(nil), urls[first:]...), urls[:first]...)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	sort.SliceStable(order, func(i, j int) bool { return !c.down[order[i]].After(now) && c.down[order[j]].After(now) })
	return order
}

// probe is the balancer's active health check: every replica's /readyz
// every 200 ms; one that does not answer 200 within 300 ms is left out
// for downFor. It runs until ctx ends.
func (c *client) probe(ctx context.Context) {
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	for ctx.Err() == nil {
		for _, u := range c.replicas() {
			res, err := hc.Get(u + "/readyz")
			if err == nil {
				io.Copy(io.Discard, res.Body) //nolint:errcheck
				res.Body.Close()
			}
			if err != nil || res.StatusCode != http.StatusOK {
				c.markDown(u)
			}
		}
		pause(ctx, 200*time.Millisecond)
	}
}

func (c *client) markDown(url string) {
	c.mu.Lock()
	c.down[url] = time.Now().Add(downFor)
	c.mu.Unlock()
}

// attemptTimeout bounds one attempt, as a balancer's read timeout does:
// longer than the replicas' SHOP_REQUEST_TIMEOUT (6 s), so a live replica
// always answers within it, and a replica that has not answered by then
// is one that cannot (stopped, or cut off). The client then asks the
// other, with the same key.
const attemptTimeout = 7 * time.Second

func newClient(replicas func() []string, hist *history) *client {
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	return &client{http: &http.Client{Transport: tr, Timeout: attemptTimeout}, replicas: replicas, hist: hist, down: map[string]time.Time{}}
}

type reply struct {
	answer
	body []byte
}

// do sends one request (with the same Idempotency-Key on the failover) and
// records its answer under flow, timed over the client's whole wait.
func (c *client) do(ctx context.Context, flow, method, path, token, key string, body any) reply {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	urls := c.pick()
	start := time.Now()
	r := c.once(ctx, c.http.Timeout, urls[0], method, path, token, key, b)
	if r.status == 0 && ctx.Err() == nil && len(urls) > 1 {
		c.markDown(urls[0])
		r = c.once(ctx, c.http.Timeout, urls[1], method, path, token, key, b)
		r.failover = true
	}
	r.flow, r.at, r.took = flow, time.Now(), time.Since(start)
	if ctx.Err() == nil {
		c.hist.add(r.answer)
		if key != "" && r.useful() {
			c.hist.mu.Lock()
			c.hist.keyed = append(c.hist.keyed, keyedRequest{flow: flow, method: method, path: path, token: token, key: key, body: b, answer: r.answer})
			c.hist.mu.Unlock()
		}
	}
	return r
}

func (c *client) once(ctx context.Context, timeout time.Duration, base, method, path, token, key string, body []byte) reply {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return reply{}
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return reply{}
	}
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	r := reply{answer: answer{status: res.StatusCode, retry: res.Header.Get("Retry-After") != "",
		replayed: res.Header.Get("Idempotent-Replayed") != ""}, body: rb}
	if res.StatusCode >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(rb, &p)
		r.code = p.Code
	}
	return r
}

// workload is the fixture the flows run on.
type workload struct {
	tokens   []string
	flashSKU string
	// flashStock is the flash sale's stock at the start of each scenario.
	flashStock int
	payerSKU   string
	posts      []string
	clients    int // goroutines per flow
	payClicks  int // concurrent clicks per order in the pay storm
	// event is the seat rush's hall, a fresh one per scenario, and seats
	// the history of its holds and confirms.
	event string
	seats *seatLog
	// stocked is each SKU's stock over the run: created plus restocked.
	stocked map[string]int
	// refundable are paid orders the refund storm has not taken yet; it
	// keeps at least poolTarget of them while the gateway takes payments.
	refundable chan *refundable
	poolTarget int
}

// run drives every flow in flows until ctx ends.
func (w *workload) run(ctx context.Context, c *client, flows []string) {
	var wg sync.WaitGroup
	for _, f := range flows {
		for i := range w.clientsOf([]string{f}) {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(len(f))))
				var current *refundable // the refund storm's order in hand
				for ctx.Err() == nil {
					switch f {
					case flowOrders:
						w.flashOrder(ctx, c, rng)
					case flowPay:
						w.payStorm(ctx, c, rng)
					case flowLikes:
						w.like(ctx, c, rng)
					case flowSeats:
						w.seatRush(ctx, c, rng)
					case flowRefund:
						w.refundStorm(ctx, c, rng, &current)
					}
				}
			})
		}
	}
	wg.Wait()
}

func (w *workload) token(rng *rand.Rand) string { return w.tokens[rng.IntN(len(w.tokens))] }

// clientsOf is how many clients run flows: the size's, and twice that for
// the refund storm, whose rounds wait on each other (a round's agents
// race for one order) rather than on the machine.
func (w *workload) clientsOf(flows []string) int {
	if slices.Contains(flows, flowRefund) {
		return 2 * w.clients
	}
	return w.clients
}

// flashOrder buys one unit of the flash-sale SKU, whose stock runs out.
func (w *workload) flashOrder(ctx context.Context, c *client, rng *rand.Rand) {
	r := c.do(ctx, flowOrders, "POST", "/v1/orders", w.token(rng), crand.Text(),
		map[string]any{"items": []map[string]any{{"sku": w.flashSKU, "quantity": 1}}})
	c.hist.ack(&c.hist.ackOrders, r)
}

// ack records in list the id of what r created, when r is the 201 that
// created it (a replay names what an earlier answer already recorded).
func (h *history) ack(list *[]string, r reply) {
	if r.status != http.StatusCreated || r.replayed {
		return
	}
	var created struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.body, &created) == nil {
		h.mu.Lock()
		*list = append(*list, created.ID)
		h.mu.Unlock()
	}
}

// payStorm creates an order and clicks Pay on it payClicks times at once,
// on both replicas: two thirds of the clicks share a key (a client
// retrying), the others carry their own (the user clicking again).
func (w *workload) payStorm(ctx context.Context, c *client, rng *rand.Rand) {
	w.payStormAs(ctx, c, rng, flowPay)
}

// payStormAs is payStorm with its clicks recorded under flow.
func (w *workload) payStormAs(ctx context.Context, c *client, rng *rand.Rand, flow string) {
	token := w.token(rng)
	r := c.do(ctx, flowPayOrder, "POST", "/v1/orders", token, crand.Text(),
		map[string]any{"items": []map[string]any{{"sku": w.payerSKU, "quantity": 1}}})
	c.hist.ack(&c.hist.ackOrders, r)
	if r.status != http.StatusCreated {
		if r.status == 0 || r.status >= 500 || r.code == "resource_busy" {
			pause(ctx, 100*time.Millisecond)
		}
		return
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.body, &o) != nil {
		return
	}
	shared := crand.Text()
	var wg sync.WaitGroup
	for k := range w.payClicks {
		key := shared
		if k >= w.payClicks*2/3 {
			key = crand.Text()
		}
		wg.Go(func() {
			r := c.do(ctx, flow, "POST", "/v1/orders/"+o.ID+"/payments", token, key,
				map[string]string{"payment_method": "pm_card_ok"})
			if r.status == http.StatusCreated {
				c.hist.mu.Lock()
				c.hist.ackPaid = append(c.hist.ackPaid, o.ID)
				c.hist.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// Hall size of the seat rush: small, so that fans collide.
const (
	hallRows        = 4
	hallSeatsPerRow = 10
)

// seatRush holds two adjacent seats of the hall and, when the hold is
// granted, confirms it.
func (w *workload) seatRush(ctx context.Context, c *client, rng *rand.Rand) {
	token := w.token(rng)
	row := string(rune('A' + rng.IntN(hallRows)))
	first := 1 + rng.IntN(hallSeatsPerRow-1)
	seats := []string{fmt.Sprintf("%s%d", row, first), fmt.Sprintf("%s%d", row, first+1)}
	in := seatcheck.Input{Kind: seatcheck.Hold, Hold: w.seats.next.Add(1), Seats: []int{seatIndex(seats[0]), seatIndex(seats[1])}}
	call := w.seats.since()
	r := c.do(ctx, flowSeats, "POST", "/v1/events/"+w.event+"/holds", token, crand.Text(), map[string]any{"seats": seats})
	w.seats.add(in, r, call)
	if r.status != http.StatusCreated {
		if r.status == 0 || r.status >= 500 {
			pause(ctx, 50*time.Millisecond)
		}
		return
	}
	var h struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.body, &h) != nil {
		return
	}
	in.Kind = seatcheck.Confirm
	call = w.seats.since()
	r = c.do(ctx, flowSeats, "POST", "/v1/holds/"+h.ID+"/confirm", token, crand.Text(), nil)
	w.seats.add(in, r, call)
	c.hist.ack(&c.hist.ackBookings, r)
}

// like likes or unlikes one of a few hot posts.
func (w *workload) like(ctx context.Context, c *client, rng *rand.Rand) {
	w.likeAs(ctx, c, rng, flowLikes)
}

// likeAs is like recorded under flow.
func (w *workload) likeAs(ctx context.Context, c *client, rng *rand.Rand, flow string) {
	method := "PUT"
	if rng.IntN(2) == 0 {
		method = "DELETE"
	}
	r := c.do(ctx, flow, method, "/v1/posts/"+w.posts[rng.IntN(len(w.posts))]+"/like", w.token(rng), "", nil)
	if r.status == 0 || r.status >= 500 {
		pause(ctx, 50*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// phaseStats are the figures of one phase of a scenario.
type phaseStats struct {
	seconds float64
	useful  int
	total   int
}

func (p phaseStats) rate() float64 {
	if p.seconds <= 0 {
		return 0
	}
	return float64(p.useful) / p.seconds
}

// byFlow returns the answers of one flow.
func byFlow(answers []answer, flow string) []answer {
	var out []answer
	for _, a := range answers {
		if a.flow == flow {
			out = append(out, a)
		}
	}
	return out
}

// split counts answers in [from, to).
func split(answers []answer, from, to time.Time) phaseStats {
	s := phaseStats{seconds: to.Sub(from).Seconds()}
	for _, a := range answers {
		if a.at.Before(from) || !a.at.Before(to) {
			continue
		}
		s.total++
		if a.useful() {
			s.useful++
		}
	}
	return s
}

// recovery is how long after healed the useful answers per half second
// first reached half the rate before the fault; -1 if never before end.
func recovery(answers []answer, healed, end time.Time, before float64) time.Duration {
	const step = 250 * time.Millisecond
	const window = 500 * time.Millisecond
	for t := healed; !t.Add(window).After(end); t = t.Add(step) {
		if split(answers, t, t.Add(window)).rate() >= before/2 {
			return t.Add(window).Sub(healed)
		}
	}
	return -1
}

// tally counts answers by flow and key.
func tally(answers []answer) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, a := range answers {
		if out[a.flow] == nil {
			out[a.flow] = map[string]int{}
		}
		out[a.flow][a.key()]++
	}
	return out
}

func formatTally(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// percentile of the answers' latencies in [from, to).
func percentile(answers []answer, from, to time.Time, q float64) time.Duration {
	var ds []time.Duration
	for _, a := range answers {
		if !a.at.Before(from) && a.at.Before(to) {
			ds = append(ds, a.took)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
