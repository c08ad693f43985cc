package lab_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/lab"
)

// TestLab_DemoOnly: without SHOP_DEMO the lab's routes are 404, whatever
// is asked; every answer names its replica.
func TestLab_DemoOnly(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_REPLICA_NAME": "api-7"})
	for _, c := range []struct{ method, path string }{{"GET", "/v1/lab/stats"}, {"POST", "/v1/lab/races"}} {
		res := e.R(0).Do(t, c.method, c.path, "", map[string]any{"scenario": "flash_sale", "size": 10, "layers_off": []string{"version"}})
		if res.Status != http.StatusNotFound || res.Code() != "not_found" {
			t.Errorf("%s %s: %s, want 404 not_found", c.method, c.path, res)
		}
		if got := res.Header.Get("X-Served-By"); got != "api-7" {
			t.Errorf("X-Served-By %q, want api-7", got)
		}
	}
}

// TestLab_Refusals: a demo lab still refuses what it cannot bound.
func TestLab_Refusals(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	for name, body := range map[string]string{
		"TooBig":          `{"scenario":"flash_sale","size":201}`,
		"TooSmall":        `{"scenario":"flash_sale","size":9}`,
		"UnknownScenario": `{"scenario":"bank_run","size":10}`,
		"UnknownLayer":    `{"scenario":"flash_sale","size":10,"layers_off":["gravity"]}`,
		"UnknownField":    `{"scenario":"flash_sale","size":10,"amplify":true}`,
	} {
		t.Run(name, func(t *testing.T) {
			res := e.R(0).OffContract("a body outside the lab's schema, on purpose").Do(t, "POST", "/v1/lab/races", u.Token, body)
			if res.Status != http.StatusBadRequest || res.Code() != "invalid_request" {
				t.Errorf("%s: %s, want 400 invalid_request", body, res)
			}
		})
	}
}

// TestLab_SandboxOversells: a flash sale with the version layer off runs
// on the sandbox's own tables, streams one answer per request, and its
// outcome counts what the sandbox's tables hold: more orders than units,
// the lost updates of read-check-write. The real tables never see it.
func TestLab_SandboxOversells(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	const size = 50
	run := startRace(t, e.R(0), u.Token, map[string]any{"scenario": "flash_sale", "size": size, "layers_off": []string{"version"}})
	if run.Start.Target != "sandbox" || run.Start.Layers != "version off" {
		t.Errorf("start: %+v", run.Start)
	}
	sku := "LAB-" + run.Start.Run
	orders := e.Count(t, `SELECT count(*) FROM shop_lab.order_items WHERE sku = $1`, sku)
	if run.Out.Facts["orders"] != int64(orders) || run.Out.Tally["201"] != orders {
		t.Errorf("outcome %+v; the sandbox holds %d orders", run.Out, orders)
	}
	// 50 buyers, 25 units, no version check on the stock: buyers read the
	// same count and each writes its own difference back.
	if run.Out.OK || orders <= size/2 || run.Out.Facts["oversold"] != int64(orders-size/2) {
		t.Errorf("%d orders of %d units, outcome %q (ok=%t): the sandbox did not oversell", orders, size/2, run.Out.Line, run.Out.OK)
	}
	if n := e.Count(t, `SELECT count(*) FROM products WHERE sku = $1`, sku); n != 0 {
		t.Errorf("the sandbox's product is in the real catalogue")
	}
	t.Log(run.Out.Line)
}

// TestLab_LiveRunsStayOutOfTheShop: a live run, every layer on, goes
// through the balancer to both replicas, and leaves the real shop as it
// found it: no user, product, order, payment, refund, event, hold, post,
// like, outbox event, inbox row or fulfilment in its tables, no charge at its
// gateway and no mail at its provider. What the runs made is in the live
// copy's schema and at the lab's gateway and provider.
func TestLab_LiveRunsStayOutOfTheShop(t *testing.T) {
	// The lab's own reads of its counters (GET /v1/lab/stats) are not the
	// race's requests.
	s := apptest.StartWith(t, 2, apptest.StackOptions{Vars: map[string]string{"SHOP_DEMO": "true"}, LabGateway: true, LabMailer: true,
		Counted: func(r *http.Request) bool { return r.URL.Path != "/v1/lab/stats" }})
	e, served, labGateway := s.Env, s.Sent, s.LabGatewayURL
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")

	before := shopRows(t, e)
	for i, scenario := range []string{"flash_sale", "pay_storm", "like_storm", "seat_rush", "redelivery_storm", "refund_storm"} {
		// One run at a time per replica, a second apart: the lab's clock
		// is the replicas'.
		e.Clock.Advance(2 * time.Second)
		was := served()
		run := startRace(t, e.R(i), u.Token, map[string]any{"scenario": scenario, "size": 10})
		if run.Start.Target != "live" || !run.Out.OK {
			t.Errorf("%s: start %+v, outcome %+v; want a live run that holds", scenario, run.Start, run.Out)
		}
		for b, n := range served() {
			if n == was[b] {
				t.Errorf("%s: the balancer sent replica %d none of the race", scenario, b)
			}
		}
		after := shopRows(t, e)
		for what, n := range after {
			if n != before[what] {
				t.Errorf("%s: the real shop's %s went from %d to %d", scenario, what, before[what], n)
			}
		}
		before = after
	}
	var charges struct {
		Items []struct{} `json:"items"`
	}
	getJSON(t, labGateway+"/v1/charges", &charges)
	if len(charges.Items) != 3 {
		t.Errorf("the lab's gateway has %d charges, want the pay storm's one and the redelivery and refund storms' orders'", len(charges.Items))
	}
	if n := len(s.Env.LabMailer.Messages("")); n != 1 {
		t.Errorf("the lab's provider sent %d mails, want the redelivery storm's order's receipt", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM shop_lab_live.users`); n == 0 {
		t.Errorf("the live copy's tables are empty: the runs went elsewhere")
	}
}

// TestLab_LiveCopyNeedsItsKey: only the lab's own key reaches the live
// copy; a request with any other X-Shop-Lab is the real shop's.
func TestLab_LiveCopyNeedsItsKey(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	res := e.R(0).Do(t, "POST", "/v1/users", "", map[string]string{"name": "guesser"}, "X-Shop-Lab", "guessed")
	apptest.WantStatus(t, res, http.StatusCreated)
	if n := e.Count(t, `SELECT count(*) FROM public.users WHERE name = 'guesser'`); n != 1 {
		t.Errorf("a request with a guessed key made %d users in the real shop, want 1: it went elsewhere", n)
	}
}

// TestLab_NeedsToken: a race is started by a user, named by a bearer
// token; without one, or with one nobody holds, nothing runs.
func TestLab_NeedsToken(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	body := map[string]any{"scenario": "flash_sale", "size": 10, "layers_off": []string{"version"}}
	for name, token := range map[string]string{"None": "", "Unknown": "not-a-token"} {
		t.Run(name, func(t *testing.T) {
			res := e.R(0).Do(t, "POST", "/v1/lab/races", token, body)
			if res.Status != http.StatusUnauthorized || res.Code() != "unauthenticated" {
				t.Errorf("race with token %q: %s, want 401 unauthenticated", token, res)
			}
		})
	}
	if n := e.Count(t, `SELECT count(*) FROM users`); n != 0 {
		t.Errorf("%d users after refused races", n)
	}
}

// TestLab_RateLimited: each user starts at most SHOP_RATE_LIMIT_LAB races;
// the next is 429 rate_limited with Retry-After, and another user is not
// held back by it.
func TestLab_RateLimited(t *testing.T) {
	e := apptest.NewLimited(t, 1, map[string]string{"SHOP_DEMO": "true", "SHOP_RATE_LIMIT_LAB": "2/h"})
	a := apptest.Decode[apptest.User](t, apptest.RegisterFrom(t, e.R(0), "lab visitor a", "203.0.113.1"))
	b := apptest.Decode[apptest.User](t, apptest.RegisterFrom(t, e.R(0), "lab visitor b", "203.0.113.2"))
	// Refused bodies count too: the limit is on what a user asks of the
	// lab, and they are the cheapest to ask.
	r := e.R(0).OffContract("a size outside the lab's bounds, on purpose")
	tooSmall := `{"scenario":"flash_sale","size":9}`
	for i := range 2 {
		if res := r.Do(t, "POST", "/v1/lab/races", a.Token, tooSmall); res.Status != http.StatusBadRequest {
			t.Fatalf("race %d: %s, want 400", i+1, res)
		}
	}
	res := r.Do(t, "POST", "/v1/lab/races", a.Token, tooSmall)
	policy, _, _ := apptest.RateLimitOf(res)
	if res.Status != http.StatusTooManyRequests || res.Code() != "rate_limited" || res.Header.Get("Retry-After") == "" || policy != "lab" {
		t.Errorf("third race: %s (policy %q), want 429 rate_limited by the lab policy, with Retry-After", res, policy)
	}
	if res := r.Do(t, "POST", "/v1/lab/races", b.Token, tooSmall); res.Status != http.StatusBadRequest {
		t.Errorf("another user's race: %s, want 400", res)
	}
}

// race is a run as its stream told it.
type race struct {
	Start struct {
		Run, Target, Layers string
	}
	Out struct {
		OK       bool               `json:"ok"`
		Line     string             `json:"line"`
		Facts    map[string]int64   `json:"facts"`
		Tally    map[string]int     `json:"tally"`
		Replicas map[string]int     `json:"replicas"`
		Metrics  map[string]float64 `json:"metrics"`
		From     []string           `json:"metrics_from"`
	}
	// Answers are the answer events, in the order they landed.
	Answers []labAnswer
	// Waterfall is the event waterfall, nil without one.
	Waterfall *lab.Waterfall
}

// labAnswer is an answer event.
type labAnswer struct {
	I        int    `json:"i"`
	Status   int    `json:"status"`
	Code     string `json:"code"`
	Replica  string `json:"replica"`
	Replayed bool   `json:"replayed"`
}

// startRace posts a race as token and reads its stream, which must be a
// start, one answer per request and an outcome.
func startRace(t *testing.T, r *apptest.Replica, token string, body map[string]any) race {
	t.Helper()
	res := r.Do(t, "POST", "/v1/lab/races", token, body)
	if res.Status != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("race: %s", res)
	}
	events := map[string][]json.RawMessage{}
	sc := bufio.NewScanner(bytes.NewReader(res.Body))
	var event string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			events[event] = append(events[event], json.RawMessage(v))
		}
	}
	size, _ := body["size"].(int)
	if len(events["start"]) != 1 || len(events["answer"]) != size || len(events["outcome"]) != 1 || len(events["failure"]) != 0 {
		t.Fatalf("events: %d start, %d answers, %d outcome, %d failure; body:\n%s",
			len(events["start"]), len(events["answer"]), len(events["outcome"]), len(events["failure"]), res.Body)
	}
	var got race
	if err := json.Unmarshal(events["start"][0], &got.Start); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(events["outcome"][0], &got.Out); err != nil {
		t.Fatal(err)
	}
	got.Answers = make([]labAnswer, size)
	for i, raw := range events["answer"] {
		if err := json.Unmarshal(raw, &got.Answers[i]); err != nil {
			t.Fatal(err)
		}
	}
	switch len(events["waterfall"]) {
	case 0:
	case 1:
		got.Waterfall = new(lab.Waterfall)
		if err := json.Unmarshal(events["waterfall"][0], got.Waterfall); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("%d waterfalls", len(events["waterfall"]))
	}
	return got
}

// shopRows counts what the real shop holds: the rows of its tables, and
// the charges at its gateway.
func shopRows(t *testing.T, e *apptest.Env) map[string]int {
	t.Helper()
	rows := map[string]int{}
	for _, table := range []string{"users", "products", "orders", "order_items", "payments", "stock_releases",
		"events", "seats", "holds", "hold_seats", "bookings", "tickets", "posts", "likes", "post_like_shards", "idempotency_keys",
		"watermill_outbox", "inbox", "fulfilments", "refunds", "refund_items"} {
		rows[table] = e.Count(t, `SELECT count(*) FROM public.`+table)
	}
	var charges struct {
		Items []struct{} `json:"items"`
	}
	getJSON(t, e.Cfg.GatewayURL+"/v1/charges", &charges)
	rows["gateway charges"] = len(charges.Items)
	rows["mails"] = len(e.Mailer.Messages(""))
	return rows
}

// getJSON reads url into v, around the contract check: it is not the
// shop's API.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestLab_SeatRushSandbox: a seat rush with the lock, the version check
// and the constraints off runs on the bare sandbox schema, and its outcome
// counts the active holds that schema has.
func TestLab_SeatRushSandbox(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	res := e.R(0).Do(t, "POST", "/v1/lab/races", u.Token, map[string]any{"scenario": "seat_rush", "size": 20, "layers_off": []string{"lock", "version", "constraint"}})
	if res.Status != http.StatusOK {
		t.Fatalf("race: %s", res)
	}
	var start struct{ Run string }
	var out struct {
		Line  string           `json:"line"`
		Facts map[string]int64 `json:"facts"`
	}
	for _, block := range strings.Split(string(res.Body), "\n\n") {
		event, data, _ := strings.Cut(block, "\ndata: ")
		switch event {
		case "event: start":
			_ = json.Unmarshal([]byte(data), &start)
		case "event: outcome":
			_ = json.Unmarshal([]byte(data), &out)
		}
	}
	active := e.Count(t, `SELECT count(*) FROM shop_lab_bare.hold_seats h JOIN shop_lab_bare.events v ON v.id = h.event_id
		WHERE v.name = $1 AND h.seat = 'A1' AND h.active`, "Race lab seat rush "+start.Run)
	if out.Line == "" || out.Facts["active_holds"] != int64(active) {
		t.Fatalf("outcome %+v; the bare sandbox has %d active holds on A1\n%s", out, active, res.Body)
	}
	t.Log(out.Line)
}
