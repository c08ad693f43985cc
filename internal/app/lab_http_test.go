package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestLab_DemoOnly: without SHOP_DEMO the lab's routes are 404, whatever
// is asked; every answer names its replica.
func TestLab_DemoOnly(t *testing.T) {
	e := newEnv(t, 1, map[string]string{"SHOP_REPLICA_NAME": "api-7"})
	for _, c := range []struct{ method, path string }{{"GET", "/v1/lab/stats"}, {"POST", "/v1/lab/races"}} {
		res := e.r(0).do(t, c.method, c.path, "", map[string]any{"scenario": "flash_sale", "size": 10, "layers_off": []string{"version"}})
		if res.Status != http.StatusNotFound || res.code() != "not_found" {
			t.Errorf("%s %s: %s, want 404 not_found", c.method, c.path, res)
		}
		if got := res.Header.Get("X-Served-By"); got != "api-7" {
			t.Errorf("X-Served-By %q, want api-7", got)
		}
	}
}

// TestLab_Refusals: a demo lab still refuses what it cannot bound.
func TestLab_Refusals(t *testing.T) {
	e := newEnv(t, 1, map[string]string{"SHOP_DEMO": "true"})
	for name, body := range map[string]string{
		"TooBig":          `{"scenario":"flash_sale","size":201}`,
		"TooSmall":        `{"scenario":"flash_sale","size":9}`,
		"UnknownScenario": `{"scenario":"bank_run","size":10}`,
		"UnknownLayer":    `{"scenario":"flash_sale","size":10,"layers_off":["gravity"]}`,
		"UnknownField":    `{"scenario":"flash_sale","size":10,"amplify":true}`,
	} {
		t.Run(name, func(t *testing.T) {
			res := e.r(0).offContract("a body outside the lab's schema, on purpose").do(t, "POST", "/v1/lab/races", "", body)
			if res.Status != http.StatusBadRequest || res.code() != "invalid_request" {
				t.Errorf("%s: %s, want 400 invalid_request", body, res)
			}
		})
	}
}

// TestLab_SandboxOversells: a flash sale with the version layer off runs
// on the sandbox's own tables, streams one answer per request, and its
// outcome line counts what the sandbox's tables hold; the real tables
// never see it.
func TestLab_SandboxOversells(t *testing.T) {
	e := newEnv(t, 1, map[string]string{"SHOP_DEMO": "true"})
	const size = 10
	res := e.r(0).do(t, "POST", "/v1/lab/races", "", map[string]any{"scenario": "flash_sale", "size": size, "layers_off": []string{"version"}})
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
	if len(events["start"]) != 1 || len(events["answer"]) != size || len(events["outcome"]) != 1 || len(events["failure"]) != 0 {
		t.Fatalf("events: %d start, %d answers, %d outcome, %d failure; body:\n%s",
			len(events["start"]), len(events["answer"]), len(events["outcome"]), len(events["failure"]), res.Body)
	}
	var start struct {
		Run, Target, Layers string
	}
	var out struct {
		OK    bool             `json:"ok"`
		Line  string           `json:"line"`
		Facts map[string]int64 `json:"facts"`
		Tally map[string]int   `json:"tally"`
	}
	if err := json.Unmarshal(events["start"][0], &start); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(events["outcome"][0], &out); err != nil {
		t.Fatal(err)
	}
	if start.Target != "sandbox" || start.Layers != "version off" {
		t.Errorf("start: %+v", start)
	}
	sku := "LAB-" + start.Run
	orders := e.count(t, `SELECT count(*) FROM shop_lab.order_items WHERE sku = $1`, sku)
	if out.Facts["orders"] != int64(orders) || out.Tally["201"] != orders {
		t.Errorf("outcome %+v; the sandbox holds %d orders", out, orders)
	}
	if n := e.count(t, `SELECT count(*) FROM products WHERE sku = $1`, sku); n != 0 {
		t.Errorf("the sandbox's product is in the real catalogue")
	}
	t.Logf("%s (ok=%t)", out.Line, out.OK)
}

// TestLab_SeatRushSandbox: a seat rush with the lock, the version check
// and the constraints off runs on the bare sandbox schema, and its outcome
// counts the active holds that schema has.
func TestLab_SeatRushSandbox(t *testing.T) {
	e := newEnv(t, 1, map[string]string{"SHOP_DEMO": "true"})
	res := e.r(0).do(t, "POST", "/v1/lab/races", "", map[string]any{"scenario": "seat_rush", "size": 20, "layers_off": []string{"lock", "version", "constraint"}})
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
	active := e.count(t, `SELECT count(*) FROM shop_lab_bare.hold_seats h JOIN shop_lab_bare.events v ON v.id = h.event_id
		WHERE v.name = $1 AND h.seat = 'A1' AND h.active`, "Race lab seat rush "+start.Run)
	if out.Line == "" || out.Facts["active_holds"] != int64(active) {
		t.Fatalf("outcome %+v; the bare sandbox has %d active holds on A1\n%s", out, active, res.Body)
	}
	t.Log(out.Line)
}
