package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
)

// The baselines' router answers as the service's edge does: a body or a
// token it cannot take is refused as problem+json before the operation
// runs; a success is 201 with what was done; a refusal is 409 with a code
// and the operation's own word, which the client counts as in process;
// any other failure is a 500 that names nothing.
func TestBaselineRouter_Answers(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	users, tokens, err := seedUsers(ctx, pool, 2)
	if err != nil {
		t.Fatal(err)
	}
	flow := flowSpec{name: "orders", done: "order placed", strategies: map[string]strategy{"naive": {}, "layered": {}}}
	o := benchOptions{clients: 2}
	r, err := startBaselineRouter(ctx, o, pool, []flowSpec{flow}, users, tokens)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	if _, ok := r.slots[baselinePath("orders", "layered")]; ok {
		t.Error("the layered flow has a route of the router; it is the service's own")
	}

	var ran atomic.Int32
	var answer atomic.Value // the failure the operation returns
	answer.Store("")
	stop := r.serve("orders", "naive", []orderFunc{func(_ context.Context, client int, key string) string {
		ran.Add(1)
		if client != 1 || key != "SKU-1" {
			return "wrong client or key"
		}
		return answer.Load().(string)
	}})
	defer stop()

	path := baselinePath("orders", "naive")
	for _, tt := range []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"NoToken", "", `{"key":"SKU-1"}`, http.StatusUnauthorized, "unauthenticated"},
		{"UnknownToken", "shop_nobody", `{"key":"SKU-1"}`, http.StatusUnauthorized, "unauthenticated"},
		{"Malformed", tokens[1], `{"key":`, http.StatusBadRequest, "invalid_request"},
		{"UnknownField", tokens[1], `{"key":"SKU-1","qty":2}`, http.StatusBadRequest, "invalid_request"},
		{"NoKey", tokens[1], `{}`, http.StatusBadRequest, "invalid_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := r.svc.post(ctx, tt.token, path, tt.body, "")
			if a.status != tt.status || !strings.Contains(string(a.body), `"code":"`+tt.code+`"`) {
				t.Errorf("POST %s %s = %d %s, want %d with code %s", path, tt.body, a.status, a.body, tt.status, tt.code)
			}
		})
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the operation ran %d times for requests refused at the edge", n)
	}

	client := r.client("orders", "naive", 1)
	a := r.svc.post(ctx, tokens[1], path, `{"key":"SKU-1"}`, "")
	var done baselineAnswer
	if err := json.Unmarshal(a.body, &done); a.status != http.StatusCreated || err != nil ||
		done != (baselineAnswer{Flow: "orders", Strategy: "naive", Key: "SKU-1", Done: "order placed"}) {
		t.Errorf("success = %d %s, want 201 naming what was done", a.status, a.body)
	}
	if failure := client(ctx, 1, "SKU-1"); failure != "" {
		t.Errorf("client of a success = %q, want \"\"", failure)
	}

	answer.Store("out of stock")
	a = r.svc.post(ctx, tokens[1], path, `{"key":"SKU-1"}`, "")
	if a.status != http.StatusConflict || !strings.Contains(string(a.body), `"code":"out_of_stock"`) {
		t.Errorf("refusal = %d %s, want 409 out_of_stock", a.status, a.body)
	}
	if failure := client(ctx, 1, "SKU-1"); failure != "out of stock" {
		t.Errorf("client of a refusal = %q, want the operation's own word", failure)
	}

	answer.Store("sqlstate 40P01")
	if failure := client(ctx, 1, "SKU-1"); failure != "http 500" {
		t.Errorf("client of a fault = %q, want http 500", failure)
	}

	stop()
	if failure := client(ctx, 1, "SKU-1"); failure != "http 404" {
		t.Errorf("client with no cell running = %q, want http 404", failure)
	}

	// An operation of two steps is two requests, in order; a refusal of
	// the first ends it.
	var steps []string
	var mu sync.Mutex
	step := func(name string) orderFunc {
		return func(context.Context, int, string) string {
			mu.Lock()
			defer mu.Unlock()
			steps = append(steps, name)
			return answer.Load().(string)
		}
	}
	defer r.serve("orders", "naive", []orderFunc{step("hold"), step("release")})()
	two := r.client("orders", "naive", 2)
	answer.Store("")
	if failure := two(ctx, 1, "SKU-1"); failure != "" || strings.Join(steps, ",") != "hold,release" {
		t.Errorf("two steps = %q, ran %v; want both, in order", failure, steps)
	}
	steps = nil
	answer.Store("out of stock")
	if failure := two(ctx, 1, "SKU-1"); failure != "out of stock" || strings.Join(steps, ",") != "hold" {
		t.Errorf("two steps, the first refused = %q, ran %v; want the refusal, and the first only", failure, steps)
	}
	if a := r.svc.post(ctx, tokens[1], path, `{"key":"SKU-1","step":2}`, ""); a.status != http.StatusBadRequest {
		t.Errorf("a step past the operation's = %d %s, want 400", a.status, a.body)
	}
}
