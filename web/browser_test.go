//go:build browser

package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shop-example/shop/harness/apptest"
)

// The pages in real Chromium (Debian's package) against a real stack:
// register, buy, pay, cancel, hold and book seats, release a hold, like,
// and each race-lab scenario; each time what the page shows is checked
// against what the API and the database say. Screenshots go to
// SHOP_SCREENSHOTS (default: the test's temporary directory).

// browser starts Chromium and returns a tab. SHOP_CHROMIUM names the
// binary; without one the test is skipped, except in CI.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("SHOP_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Chromium at %s (apt-get install chromium)", path)
		}
		t.Skipf("no Chromium at %s (apt-get install chromium, or set SHOP_CHROMIUM)", path)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return tab
}

// page drives one tab with a deadline per step.
type page struct {
	t   *testing.T
	tab context.Context
}

func (p page) step(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(p.tab, d)
}

func (p page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := p.step(20 * time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression.
func eval[T any](p page, expr string) T {
	p.t.Helper()
	ctx, cancel := p.step(10 * time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it is truthy.
func (p page) waitFor(what, expr string, timeout time.Duration) {
	p.t.Helper()
	ctx, cancel := p.step(timeout + time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		body, _ := chromedp.Run(p.tab, chromedp.Evaluate[string]("document.body.innerText"))
		p.t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, body)
	}
}

func (p page) text(sel string) string {
	p.t.Helper()
	return eval[string](p, fmt.Sprintf(`document.querySelector(%q).textContent.trim()`, sel))
}

func (p page) screenshot(name string) {
	p.t.Helper()
	dir := os.Getenv("SHOP_SCREENSHOTS")
	if dir == "" {
		dir = p.t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := p.step(20 * time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

// screenshotOf saves the element sel as name.png.
func (p page) screenshotOf(name, sel string) {
	p.t.Helper()
	dir := os.Getenv("SHOP_SCREENSHOTS")
	if dir == "" {
		dir = p.t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := p.step(20 * time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

var errNoToken = errors.New("no token in sessionStorage")

func TestBrowser(t *testing.T) {
	s := startStack(t)
	p := page{t: t, tab: browser(t)}

	var declined string // the trace of a declined payment's problem answer
	t.Run("Shop", func(t *testing.T) { p.t = t; declined = shop(t, p, s) })
	t.Run("Trace", func(t *testing.T) { p.t = t; tracePage(t, p, s, declined) })
	t.Run("Seats", func(t *testing.T) { p.t = t; seatsPage(t, p, s) })
	t.Run("Posts", func(t *testing.T) { p.t = t; posts(t, p, s) })
	t.Run("Lab", func(t *testing.T) { p.t = t; raceLab(t, p, s) })
	t.Run("Phone", func(t *testing.T) { p.t = t; phone(t, p, s) })
}

type product struct {
	Stock int64 `json:"stock_available"`
}

type orderList struct {
	Items []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"items"`
}

// shop returns the trace id the declined payment's answer linked.
func shop(t *testing.T, p page, s *stack) string {
	p.do("open the shop", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS("#register")))

	// Register: the token lands in sessionStorage, and the page says who.
	p.do("register",
		chromedp.SendKeys(chromedp.CSS("#reg-name"), "alice"),
		chromedp.Click(chromedp.CSS("#register button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#signed-in")))
	if got := p.text("#signed-in"); got != "alice" {
		t.Fatalf("signed in as %q", got)
	}
	token := eval[string](p, `sessionStorage.getItem('shop.token') || ''`)
	if token == "" {
		t.Fatal(errNoToken)
	}

	// The catalogue shows the stock the API has, and not what make load
	// made (loadtest/k6/lib/config.js tags it), which the API lists.
	s.post(t, "/v1/products", apptest.AdminToken, `{"sku":"LOAD-flash-browser","name":"Load test LOAD-flash-browser","price_cents":100,"stock":0}`)
	const sku = "MUG-LOGO"
	row := fmt.Sprintf(`tr[data-sku="%s"]`, sku)
	p.waitFor("the catalogue", fmt.Sprintf(`!!document.querySelector('%s .stock')`, row), 10*time.Second)
	p.do("reload the catalogue", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(row+" .stock")))
	var listed struct {
		Items []struct {
			SKU string `json:"sku"`
		} `json:"items"`
	}
	s.get(t, s.url, "/v1/products?limit=100", "", &listed)
	if !slices.ContainsFunc(listed.Items, func(p struct {
		SKU string `json:"sku"`
	}) bool {
		return p.SKU == "LOAD-flash-browser"
	}) {
		t.Fatal("the API does not list the load test's product: the check below would see nothing")
	}
	if n := eval[int](p, `document.querySelectorAll('#catalogue tr[data-sku^="LOAD-"]').length`); n != 0 {
		t.Errorf("the catalogue offers %d of make load's products", n)
	}
	var before product
	s.get(t, s.url, "/v1/products/"+sku, "", &before)
	if got := atoi(t, p.text(row+" .stock")); got != before.Stock {
		t.Fatalf("page shows %d in stock, the API %d", got, before.Stock)
	}

	// Buy: one key per click, shown; sending it again replays the order.
	p.do("buy", chromedp.Click(chromedp.CSS(row+" button.buy")))
	p.waitFor("the order", `(document.querySelector('#buy-status')?.textContent || '').includes('placed')`, 10*time.Second)
	key := p.text("#buy-key")
	p.do("send again", chromedp.Click(chromedp.CSS("#buy-again")))
	p.waitFor("the replay", `(document.querySelector('#buy-status')?.textContent || '').includes('replayed')`, 10*time.Second)
	if again := p.text("#buy-key"); again != key || key == "" {
		t.Fatalf("key %q, then %q", key, again)
	}
	var orders orderList
	s.get(t, s.url, "/v1/orders", token, &orders)
	if len(orders.Items) != 1 {
		t.Fatalf("one intent sent twice made %d orders", len(orders.Items))
	}
	var after product
	s.get(t, s.url, "/v1/products/"+sku, "", &after)
	if after.Stock != before.Stock-1 {
		t.Fatalf("stock %d → %d, want one less", before.Stock, after.Stock)
	}
	p.waitFor("the new stock", fmt.Sprintf(`document.querySelector('%s .stock').textContent.trim() === '%d'`, row, after.Stock), 10*time.Second)

	// Pay: declined first (the order stays payable), then flaky (fails
	// once at the gateway, then succeeds).
	id := orders.Items[0].ID
	orow := fmt.Sprintf(`tr[data-order="%s"]`, id)
	var declined string
	for _, c := range []struct{ card, want string }{{"pm_card_declined", "Not paid: 402"}, {"pm_card_flaky", "Paid"}} {
		p.waitFor("the pay button", fmt.Sprintf(`!!document.querySelector('%s button.pay')`, orow), 10*time.Second)
		// Choose and click in one go: the live refresh may redraw the row
		// between two separate steps.
		eval[bool](p, fmt.Sprintf(`(() => { const r = document.querySelector('%s'); r.querySelector('select.card').value = %q; r.querySelector('button.pay').click(); return true })()`, orow, c.card))
		p.waitFor(c.want, fmt.Sprintf(`document.querySelector('#order-result').textContent.startsWith(%q)`, c.want), 15*time.Second)
		// A problem answer names its trace, and the message links it to
		// the trace page; a 201 has no trace_id, and no link.
		link := eval[string](p, `document.querySelector('#order-result a.trace-link')?.getAttribute('href') || ''`)
		if c.card == "pm_card_declined" {
			declined = eval[string](p, `document.querySelector('#order-result a.trace-link')?.dataset.trace || ''`)
			if declined == "" || link != "/web/trace.html?id="+declined {
				t.Fatalf("the declined payment's message links %q (trace %q), want /web/trace.html?id=<its trace_id>", link, declined)
			}
		} else if link != "" {
			t.Fatalf("a paid order's message links a trace: %q", link)
		}
	}
	s.get(t, s.url, "/v1/orders", token, &orders)
	p.waitFor("paid on the page", fmt.Sprintf(`document.querySelector('%s .status').textContent === 'paid'`, orow), 10*time.Second)
	if orders.Items[0].Status != "paid" {
		t.Fatalf("the API says %s", orders.Items[0].Status)
	}
	if n := s.count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, id); n != 1 {
		t.Fatalf("%d succeeded payments", n)
	}

	// Buy another and cancel it: the stock comes back.
	p.do("buy again", chromedp.Click(chromedp.CSS(row+" button.buy")))
	p.waitFor("the second order", `document.querySelectorAll('#orders tr[data-order]').length === 2`, 10*time.Second)
	p.do("cancel", chromedp.Click(chromedp.CSS("#orders button.cancel")))
	p.waitFor("cancelled", `document.querySelector('#order-result').textContent.includes('cancelled')`, 10*time.Second)
	s.get(t, s.url, "/v1/orders", token, &orders)
	if orders.Items[0].Status != "cancelled" {
		t.Fatalf("newest order is %s", orders.Items[0].Status)
	}
	p.waitFor("cancelled on the page", fmt.Sprintf(`document.querySelector('tr[data-order="%s"] .status').textContent === 'cancelled'`, orders.Items[0].ID), 10*time.Second)
	s.get(t, s.url, "/v1/products/"+sku, "", &after)
	if after.Stock != before.Stock-1 {
		t.Fatalf("after the cancel the stock is %d, want %d", after.Stock, before.Stock-1)
	}
	p.screenshot("shop")
	return declined
}

// tracePage follows the declined payment's link to the trace page, which
// draws the trace from Jaeger's query API: every span the replicas sent,
// parents first, the card processor's call and the transactions as the
// lab draws them, and the answer's status. Then the latest traces of the
// shop, where a paid order's trace is a link to its waterfall; and, with
// Jaeger gone, the page says there is no trace store.
func tracePage(t *testing.T, p page, s *stack, declined string) {
	if declined == "" {
		t.Fatal("the shop's declined payment linked no trace")
	}
	p.do("open the declined payment's trace", chromedp.Navigate(s.url+"/web/trace.html?id="+declined))
	p.waitFor("the waterfall", `document.querySelector('#trace-msg').dataset.state === 'drawn' || /no trace|No trace|answered/.test(document.querySelector('#trace-msg').textContent)`, 25*time.Second)
	if state := eval[string](p, `document.querySelector('#trace-msg').dataset.state || ''`); state != "drawn" {
		t.Fatalf("trace %s not drawn: %s", declined, p.text("#trace-msg"))
	}
	drawnTrace(t, p, s, declined, "POST /v1/orders/:id/payments", "402")
	p.screenshot("trace-declined")

	p.do("open the latest traces", chromedp.Navigate(s.url+"/web/trace.html"))
	p.waitFor("the latest traces", `document.querySelectorAll('#recent tbody tr[data-trace]').length > 0`, 10*time.Second)
	if got := eval[string](p, `document.querySelector('#service').value`); got != "shop" {
		t.Errorf("the latest traces are of %q, want shop", got)
	}
	// The pages' own files are traced too (this page's among them); the
	// list leaves them out, as it does the background jobs.
	if s.jaeger.spanNamed("GET /web/:file") == 0 {
		t.Fatal("Jaeger holds no trace of the pages' files: the check below would see nothing left out")
	}
	if others := eval[[]string](p, `[...document.querySelectorAll('#recent tbody tr[data-trace]')].map(r => r.cells[0].textContent).filter(n => !/^(GET|POST|PUT|PATCH|DELETE) \/v1\//.test(n))`); len(others) > 0 {
		t.Errorf("the latest API requests list %q", others)
	}
	paid := eval[string](p, `[...document.querySelectorAll('#recent tbody tr[data-trace]')].find(r => r.cells[0].textContent === 'POST /v1/orders/:id/payments' && r.cells[4].textContent === '201')?.dataset.trace || ''`)
	if paid == "" {
		t.Fatalf("no paid payment among the latest traces:\n%s", p.text("#recent"))
	}
	href := eval[string](p, fmt.Sprintf(`document.querySelector('#recent tr[data-trace="%s"] a').href`, paid))
	if want := s.url + "/web/trace.html?id=" + paid; href != want {
		t.Fatalf("the paid payment's row links %q, want %q", href, want)
	}
	p.do("open the paid payment's trace", chromedp.Navigate(href))
	p.waitFor("its waterfall", fmt.Sprintf(`document.querySelector('#waterfall').dataset.trace === %q`, paid), 25*time.Second)
	drawnTrace(t, p, s, paid, "POST /v1/orders/:id/payments", "201")
	p.screenshotOf("trace-paid", "#wf-card")

	s.jaeger.down.Store(true)
	defer s.jaeger.down.Store(false)
	p.do("open a trace without Jaeger", chromedp.Navigate(s.url+"/web/trace.html?id="+paid))
	p.waitFor("the page to say so", `document.querySelector('#trace-msg').dataset.state === 'no-store'`, 10*time.Second)
	if msg := p.text("#trace-msg"); !strings.Contains(msg, "make up-observability") {
		t.Errorf("without Jaeger the page says %q, want it to name make up-observability", msg)
	}
}

// drawnTrace checks the waterfall of trace id: a row per span the
// replicas sent for it, the request's span first at depth 0 with its
// status, a call to the card processor and a transaction below it, and
// every bar inside the axis.
func drawnTrace(t *testing.T, p page, s *stack, id, root, status string) {
	t.Helper()
	rows := eval[[]map[string]string](p, `[...document.querySelectorAll('#waterfall .wf-row[data-span]')].map(r => Object.assign({
		tags: r.querySelector('.wf-tags').textContent,
		left: r.querySelector('.wf-bar').style.left, width: r.querySelector('.wf-bar').style.width}, r.dataset))`)
	if want := s.jaeger.spanCount(id); len(rows) != want || want == 0 {
		t.Fatalf("trace %s: %d rows drawn, the replicas sent %d spans", id, len(rows), want)
	}
	if rows[0]["name"] != root || rows[0]["depth"] != "0" || !strings.Contains(rows[0]["tags"], status) {
		t.Errorf("trace %s starts with %v, want the request %s at depth 0 answered %s", id, rows[0], root, status)
	}
	indented := eval[int](p, `[...document.querySelectorAll('#waterfall .wf-row[data-span]')].filter(r => r.dataset.depth > 0 && parseFloat(getComputedStyle(r.querySelector('.wf-name')).paddingLeft) > 0).length`)
	if indented != len(rows)-1 {
		t.Errorf("trace %s: %d of the %d spans below the request are drawn indented", id, indented, len(rows)-1)
	}
	kinds := map[string]int{}
	for _, r := range rows {
		kinds[r["kind"]]++
		left := strings.TrimSuffix(r["left"], "%")
		width := strings.TrimSuffix(r["width"], "%")
		l, errL := strconv.ParseFloat(left, 64)
		w, errW := strconv.ParseFloat(width, 64)
		if errL != nil || errW != nil || l < 0 || w <= 0 || l+w > 100.5 {
			t.Errorf("span %s %s drawn at left %s width %s, outside the axis", r["span"], r["name"], r["left"], r["width"])
		}
	}
	if kinds["gateway"] == 0 || kinds["db.tx"] == 0 {
		t.Errorf("trace %s draws %v, want the card processor's call and a transaction", id, kinds)
	}
	if got := eval[string](p, `document.querySelector('#waterfall').dataset.trace`); got != id {
		t.Errorf("the waterfall is of trace %q, want %q", got, id)
	}
}

func posts(t *testing.T, p page, s *stack) {
	p.do("open posts", chromedp.Navigate(s.url+"/web/posts.html"), chromedp.WaitVisible(chromedp.CSS("#signed-in")))
	token := eval[string](p, `sessionStorage.getItem('shop.token') || ''`)
	// A post make load made is left out (loadtest/k6/lib/config.js).
	s.post(t, "/v1/posts", token, `{"title":"Load test: Hot post browser"}`)
	for _, title := range []string{"Fifty clicks, one charge", "Which layer stopped it?"} {
		p.do("write "+title, chromedp.SendKeys(chromedp.CSS("#post-title"), title), chromedp.Click(chromedp.CSS("#new-post button[type=submit]")))
		p.waitFor("the post", fmt.Sprintf(`[...document.querySelectorAll('#posts .title')].some(e => e.textContent === %q)`, title), 10*time.Second)
	}
	if n := eval[int](p, `[...document.querySelectorAll('#posts .title')].filter(e => e.textContent.startsWith('Load test: ')).length`); n != 0 {
		t.Errorf("the posts page shows %d of make load's posts", n)
	}
	id := eval[string](p, `document.querySelector('#posts li[data-post]').dataset.post`)
	item := fmt.Sprintf(`#posts li[data-post="%s"]`, id)
	type post struct {
		LikeCount int64 `json:"like_count"`
		LikedByMe bool  `json:"liked_by_me"`
	}
	for i, want := range []post{{1, true}, {0, false}, {1, true}} {
		p.do("click like", chromedp.Click(chromedp.CSS(item+" button.like")))
		p.waitFor("the like", fmt.Sprintf(`document.querySelector('%s button.like').getAttribute('aria-pressed') === '%t' && !document.querySelector('%s button.like').disabled`, item, want.LikedByMe, item), 10*time.Second)
		var got post
		s.get(t, s.url, "/v1/posts/"+id, token, &got)
		if got != want {
			t.Fatalf("click %d: the API says %+v, want %+v", i+1, got, want)
		}
		if shown := atoi(t, p.text(item+" .count")); shown != got.LikeCount {
			t.Fatalf("click %d: the page shows %d, the API %d", i+1, shown, got.LikeCount)
		}
	}
	p.screenshot("posts")
}

// race runs one race on the lab page and returns the outcome's data.
func race(t *testing.T, p page, scenario string, size int, off ...string) map[string]string {
	t.Helper()
	set := fmt.Sprintf(`document.querySelector('input[name=scenario][value=%s]').checked = true;`, scenario)
	set += `document.querySelectorAll('input[name=off]').forEach(c => c.checked = false);`
	for _, o := range off {
		set += fmt.Sprintf(`document.querySelector('input[name=off][value=%s]').checked = true;`, o)
	}
	set += fmt.Sprintf(`document.querySelector('#size').value = '%d'; true`, size)
	eval[bool](p, set)
	// The lab takes one run at a time, with a pause between runs.
	time.Sleep(1100 * time.Millisecond)
	prev := eval[string](p, `document.querySelector('#outcome').dataset.run || ''`)
	p.do("run "+scenario, chromedp.Click(chromedp.CSS("#run")))
	p.waitFor(scenario+" outcome", fmt.Sprintf(`(document.querySelector('#outcome').dataset.run !== %q && document.querySelector('#outcome').dataset.ok !== undefined) || /failed|Refused/.test(document.querySelector('#lab-msg').textContent)`, prev), 60*time.Second)
	if msg := p.text("#lab-msg"); msg != "" {
		t.Fatalf("%s: %s", scenario, msg)
	}
	data := eval[map[string]string](p, `Object.assign({}, document.querySelector('#outcome').dataset)`)
	data["line"] = p.text("#outcome")
	data["progress"] = p.text("#progress")
	answered := eval[int](p, `[...document.querySelectorAll('#tally li .n')].reduce((a, e) => a + Number(e.textContent), 0)`)
	if want := fmt.Sprintf("%d of %d answers", size, size); data["progress"] != want || answered != size {
		t.Fatalf("%s: progress %q, tally sums to %d; want %q", scenario, data["progress"], answered, want)
	}
	data["created"] = strconv.Itoa(eval[int](p, `[...document.querySelectorAll('#tally li')].filter(e => /^201$/.test(e.dataset.key)).reduce((a, e) => a + Number(e.querySelector('.n').textContent), 0)`))
	t.Logf("%s ×%d (%s off): %s", scenario, size, strings.Join(off, ","), data["line"])
	if scenario != "redelivery_storm" {
		waterfallDrawn(t, p, data["run"], size)
	}
	return data
}

// maxWaterfallRows is how many rows the lab's waterfall draws (lab.js).
const maxWaterfallRows = 60

// waterfallDrawn waits for the waterfall of run and checks it: a row for
// every request found, the first maxWaterfallRows drawn, each with the
// status and the replica of its request's answer in the table of every
// answer.
func waterfallDrawn(t *testing.T, p page, run string, size int) {
	t.Helper()
	p.waitFor("the waterfall", fmt.Sprintf(`document.querySelector('#waterfall').dataset.run === %q`, run), 10*time.Second)
	w := eval[map[string]string](p, `Object.assign({}, document.querySelector('#waterfall').dataset)`)
	drawn := eval[int](p, `document.querySelectorAll('#waterfall .wf-row[data-i]').length`)
	if want := min(size, maxWaterfallRows); w["found"] != strconv.Itoa(size) || w["drawn"] != strconv.Itoa(want) || drawn != want {
		t.Fatalf("waterfall of %d requests: %v, %d rows drawn; want %d found, %d drawn", size, w, drawn, size, want)
	}
	mismatched := eval[[]string](p, `(() => {
		const answers = new Map([...document.querySelectorAll('#answers tbody tr')].map(tr => [tr.cells[0].textContent, [tr.cells[1].textContent, tr.cells[4].textContent]]));
		return [...document.querySelectorAll('#waterfall .wf-row[data-i]')]
			.filter(r => JSON.stringify(answers.get(r.dataset.i)) !== JSON.stringify([r.dataset.status, r.dataset.replica]))
			.map(r => '#' + r.dataset.i + ': ' + r.dataset.status + ' ' + r.dataset.replica + ', answered ' + JSON.stringify(answers.get(r.dataset.i)));
	})()`)
	if len(mismatched) > 0 {
		t.Fatalf("waterfall rows unlike their answers: %v", mismatched)
	}
}

// brokenNames lists the names in a page's prose (code without an id: a
// header, a variable) that a line break cuts in two; app.css lets only
// the ids and keys the page fills in break anywhere.
const brokenNames = `[...document.querySelectorAll('p code:not([id])')].filter(c => c.getClientRects().length > 1).map(c => c.textContent)`

func raceLab(t *testing.T, p page, s *stack) {
	p.do("open the lab", chromedp.Navigate(s.url+"/web/lab.html"), chromedp.WaitVisible(chromedp.CSS("#race")))
	if broken := eval[[]string](p, brokenNames); len(broken) > 0 {
		t.Errorf("names in the lab's prose broken across lines at 1280 px: %q", broken)
	}
	const size = 10

	// Six clicks from the page itself, one key: one order more.
	token := eval[string](p, `sessionStorage.getItem('shop.token') || ''`)
	var before, after orderList
	s.get(t, s.url, "/v1/orders?limit=100", token, &before)
	p.do("six at once", chromedp.Click(chromedp.CSS("#six")))
	p.waitFor("six answers", `document.querySelector('#six-outcome').dataset.orders !== undefined`, 20*time.Second)
	s.get(t, s.url, "/v1/orders?limit=100", token, &after)
	if shown := p.text("#six-outcome"); !strings.HasPrefix(shown, "✔ 6 requests with one key, 1 order") || len(after.Items) != len(before.Items)+1 {
		t.Fatalf("page: %q; the API: %d orders before, %d after", shown, len(before.Items), len(after.Items))
	}
	if n := eval[int](p, `document.querySelectorAll('#six-answers li').length`); n != 6 {
		t.Fatalf("%d answers shown, want 6", n)
	}
	t.Logf("six clicks: %s", eval[string](p, `document.querySelector('#six-answers').innerText`))

	// What the live runs make is the live copy's, in its own schema and at
	// its own gateway: the real shop's rows and charges stay as they are.
	realBefore := realShop(t, s)

	// Flash sale: the page's counts are the live copy's tables'.
	d := race(t, p, "flash_sale", size)
	sku := "LAB-" + d["run"]
	if d["ok"] != "true" || d["target"] != "live" {
		t.Fatalf("flash sale: %v", d)
	}
	left := s.count(t, `SELECT stock_available FROM shop_lab_live.products WHERE sku = $1`, sku)
	orders := s.count(t, `SELECT count(*) FROM shop_lab_live.order_items WHERE sku = $1`, sku)
	if d["orders"] != strconv.FormatInt(orders, 10) || d["created"] != d["orders"] || d["stockLeft"] != strconv.FormatInt(left, 10) {
		t.Fatalf("page %v; the live copy: %d left, %d orders", d, left, orders)
	}
	if want := fmt.Sprintf("✔ %d units, %d orders, 0 oversold", size/2, size/2); d["line"] != want {
		t.Fatalf("outcome %q, want %q", d["line"], want)
	}
	if n := eval[int](p, `document.querySelectorAll('#replicas li').length`); n != 2 {
		t.Errorf("answers came from %d replicas, want both", n)
	}
	// Every buyer turned away was stopped by the conditional decrement
	// (layer 3), counted on whichever replica served it: the page adds
	// both up.
	stopped := eval[string](p, `document.querySelector('#metrics tr[data-series='+JSON.stringify('shop_conflicts_stopped_total{flow="create_order",layer="version"}')+']')?.dataset.value || '0'`)
	refused := eval[int](p, `Number(document.querySelector('#tally li[data-key="409 out_of_stock"] .n')?.textContent || 0)`)
	if stopped != strconv.Itoa(refused) || refused != size/2 {
		t.Errorf("%d answers out_of_stock, the version layer's counter moved by %s", refused, stopped)
	}

	// Pay storm: one charge at the lab's gateway, as that gateway says.
	d = race(t, p, "pay_storm", size)
	var orderID string
	if err := s.db.QueryRow(context.Background(),
		`SELECT o.id FROM shop_lab_live.orders o JOIN shop_lab_live.order_items i ON i.order_id = o.id WHERE i.sku = $1`, "LAB-"+d["run"]).Scan(&orderID); err != nil {
		t.Fatal(err)
	}
	var charges struct {
		Items []struct{} `json:"items"`
	}
	s.get(t, s.labGateway, "/v1/charges?reference="+orderID, "", &charges)
	if d["ok"] != "true" || d["charges"] != "1" || len(charges.Items) != 1 || d["created"] != "1" {
		t.Fatalf("pay storm: page %v, gateway %d charges", d, len(charges.Items))
	}

	// Like storm: the count the page shows is the likes stored.
	d = race(t, p, "like_storm", size)
	rows := s.count(t, `SELECT count(*) FROM shop_lab_live.likes l JOIN shop_lab_live.posts p ON p.id = l.post_id WHERE p.title = $1 AND l.liked`, "Race lab like storm "+d["run"])
	if d["ok"] != "true" || d["likeCount"] != strconv.FormatInt(rows, 10) || rows != size/2 {
		t.Fatalf("like storm: page %v, database %d likes", d, rows)
	}

	// Seat rush: one active hold on the seat, as the database holds it.
	d = race(t, p, "seat_rush", size)
	held := s.count(t, `SELECT count(*) FROM shop_lab_live.hold_seats h JOIN shop_lab_live.events e ON e.id = h.event_id WHERE e.name = $1 AND h.seat = 'A1' AND h.active`, "Race lab seat rush "+d["run"])
	if d["ok"] != "true" || d["activeHolds"] != strconv.FormatInt(held, 10) || held != 1 || d["created"] != "1" {
		t.Fatalf("seat rush: page %v, database %d active holds", d, held)
	}
	// Redelivery storm: two paid orders, ten copies of each one's
	// order.paid at once; one fulfilment and one receipt each, as the live
	// copy's tables and the lab's provider hold them, and both replicas'
	// consumers took copies.
	d = race(t, p, "redelivery_storm", 20)
	ids := stormOrders(t, s, "shop_lab_live", d["run"])
	if d["ok"] != "true" || d["target"] != "live" || d["orders"] != "2" || len(ids) != 2 {
		t.Fatalf("redelivery storm: page %v, %d orders in the live copy", d, len(ids))
	}
	for _, id := range ids {
		f := s.count(t, `SELECT count(*) FROM shop_lab_live.fulfilments WHERE order_id = $1`, id)
		if r := receipts(t, s, s.labMailer, id); f != 1 || r != 1 {
			t.Fatalf("redelivery storm: order %s has %d fulfilments and %d receipts at the lab's provider", id, f, r)
		}
	}
	if d["fulfilments"] != "2" || d["receipts"] != "2" {
		t.Fatalf("redelivery storm: the page says %s fulfilments and %s receipts", d["fulfilments"], d["receipts"])
	}
	processed := eval[string](p, `document.querySelector('#metrics tr[data-series='+JSON.stringify('shop_events_consumed_total{consumer="fulfilment",event="order.paid",outcome="processed"}')+']')?.dataset.value || '0'`)
	deduplicated := eval[string](p, `document.querySelector('#metrics tr[data-series='+JSON.stringify('shop_events_consumed_total{consumer="fulfilment",event="order.paid",outcome="deduplicated"}')+']')?.dataset.value || '0'`)
	if processed != "2" || deduplicated != "18" {
		t.Errorf("the fulfilment processed %s copies and dropped %s, want 2 and 18", processed, deduplicated)
	}
	if n := eval[int](p, `document.querySelectorAll('#replicas li').length`); n != 2 {
		t.Errorf("the copies were handled on %d replicas, want both", n)
	}
	p.screenshot("lab-redelivery-storm")

	// Refund storm: two paid orders, ten agents refunding 60 % of each at
	// once; one refund per order at the lab's gateway and in the live
	// copy's tables, the other agents refused by the refund rule.
	d = race(t, p, "refund_storm", 20)
	ids = stormOrders(t, s, "shop_lab_live", d["run"])
	if d["ok"] != "true" || d["target"] != "live" || len(ids) != 2 {
		t.Fatalf("refund storm: page %v, %d orders in the live copy", d, len(ids))
	}
	var madeAt, given int64
	for _, id := range ids {
		made, cents := processorRefunds(t, s, s.labGateway, id)
		recorded := s.count(t, `SELECT count(*) FROM shop_lab_live.refunds WHERE order_id = $1 AND status = 'succeeded'`, id)
		if made != 1 || recorded != 1 || cents != 6000 {
			t.Fatalf("refund storm: order %s has %d refunds of %d cents at the lab's gateway, %d recorded", id, made, cents, recorded)
		}
		madeAt, given = madeAt+made, given+cents
	}
	if d["refundsAtProcessor"] != strconv.FormatInt(madeAt, 10) || d["refundsRecorded"] != "2" || d["refundedCents"] != strconv.FormatInt(given, 10) ||
		d["overRefundedCents"] != "0" || d["created"] != "2" {
		t.Fatalf("refund storm: the page says %v; the lab's gateway made %d refunds of %d cents", d, madeAt, given)
	}
	byRule := eval[string](p, `document.querySelector('#metrics tr[data-series='+JSON.stringify('shop_conflicts_stopped_total{flow="refund_order",layer="state"}')+']')?.dataset.value || '0'`)
	refusedRefunds := eval[int](p, `Number(document.querySelector('#tally li[data-key="422 refund_exceeds_remaining"] .n')?.textContent || 0)`)
	if refusedRefunds != 18 || byRule != "18" {
		t.Errorf("%d agents refused refund_exceeds_remaining, the refund rule's counter moved by %s; want 18 and 18", refusedRefunds, byRule)
	}
	p.screenshot("lab-refund-storm")

	if after := realShop(t, s); after != realBefore {
		t.Fatalf("six live runs moved the real shop: %+v, then %+v", realBefore, after)
	}

	// Layers off: the sandbox oversells, on its own tables; the real
	// catalogue never sees its product.
	const big = 40
	var broke map[string]string
	for range 3 {
		d = race(t, p, "flash_sale", big, "version")
		if d["target"] != "sandbox" {
			t.Fatalf("a run with layers off went to %q", d["target"])
		}
		sandboxOrders := s.count(t, `SELECT count(*) FROM shop_lab.order_items WHERE sku = $1`, "LAB-"+d["run"])
		if d["orders"] != strconv.FormatInt(sandboxOrders, 10) {
			t.Fatalf("page says %s orders, the sandbox has %d", d["orders"], sandboxOrders)
		}
		if n := s.count(t, `SELECT count(*) FROM products WHERE sku = $1`, "LAB-"+d["run"]); n != 0 {
			t.Fatalf("the sandbox's product is in the real catalogue")
		}
		if d["ok"] == "false" && atoi(t, d["orders"]) > big/2 {
			broke = d
			break
		}
	}
	if broke == nil {
		t.Errorf("three flash sales with the version layer off never oversold: the sandbox does not show the race")
	}
	p.screenshot("lab-layers-off")

	// The same race with every layer on.
	time.Sleep(1100 * time.Millisecond)
	prev := eval[string](p, `document.querySelector('#outcome').dataset.run`)
	p.do("run with every layer on", chromedp.Click(chromedp.CSS("#run-on")))
	p.waitFor("layers-on outcome", fmt.Sprintf(`document.querySelector('#outcome').dataset.run !== %q && document.querySelector('#outcome').dataset.ok !== undefined`, prev), 60*time.Second)
	if d := eval[map[string]string](p, `Object.assign({}, document.querySelector('#outcome').dataset)`); d["ok"] != "true" || d["target"] != "live" {
		t.Fatalf("every layer on: %v (%s)", d, p.text("#outcome"))
	}
	t.Logf("flash_sale ×%d, every layer on: %s", big, p.text("#outcome"))
	p.screenshot("lab")

	// A pay storm with every layer off: the sandbox's own gateway counts
	// the charges; the real one never sees them.
	var realCharges struct {
		Items []struct{} `json:"items"`
	}
	s.get(t, s.gateway, "/v1/charges", "", &realCharges)
	d = race(t, p, "pay_storm", size, "idempotency", "lock", "state", "version", "constraint")
	if d["target"] != "sandbox" || atoi(t, d["charges"]) < 1 {
		t.Fatalf("pay storm, every layer off: %v", d)
	}
	var stillReal struct {
		Items []struct{} `json:"items"`
	}
	s.get(t, s.gateway, "/v1/charges", "", &stillReal)
	if len(stillReal.Items) != len(realCharges.Items) {
		t.Fatalf("a sandbox run charged the real gateway: %d charges, then %d", len(realCharges.Items), len(stillReal.Items))
	}
	p.screenshot("lab-double-charge")

	// A redelivery storm with only the state rule on: copies that read an
	// order paid at once each fulfil it, in the bare sandbox schema; and
	// the sandbox's provider, its keys forgotten, mails each copy.
	broke = nil
	for range 3 {
		d = race(t, p, "redelivery_storm", 50, "idempotency", "lock", "version", "constraint")
		ids := stormOrders(t, s, "shop_lab_bare", d["run"])
		var rows int64
		for _, id := range ids {
			rows += s.count(t, `SELECT count(*) FROM shop_lab_bare.fulfilments WHERE order_id = $1`, id)
		}
		if d["target"] != "sandbox" || d["fulfilments"] != strconv.FormatInt(rows, 10) || len(ids) != 5 {
			t.Fatalf("redelivery storm in the sandbox: page %v; the sandbox has %d orders, %d fulfilments", d, len(ids), rows)
		}
		if d["ok"] == "false" && rows > 5 && atoi(t, d["duplicateReceipts"]) > 0 {
			broke = d
			break
		}
	}
	if broke == nil {
		t.Errorf("three redelivery storms with only the state rule on never fulfilled an order twice")
	}
	p.screenshot("lab-redelivery-storm-off")

	// A refund storm with the refund rule, the version check and the
	// constraints off, against the sandbox's processor, which refunds
	// whatever it is asked: every agent's 60 % is given back, five times
	// what each order was charged, as the sandbox's tables record.
	d = race(t, p, "refund_storm", 20, "state", "version", "constraint")
	ids = stormOrders(t, s, "shop_lab_bare", d["run"])
	var recordedOff int64
	for _, id := range ids {
		recordedOff += s.count(t, `SELECT count(*) FROM shop_lab_bare.refunds WHERE order_id = $1 AND status = 'succeeded'`, id)
	}
	if d["target"] != "sandbox" || d["ok"] != "false" || len(ids) != 2 || recordedOff != 20 ||
		d["refundsRecorded"] != "20" || d["refundsAtProcessor"] != "20" || d["overRefundedCents"] != "100000" {
		t.Fatalf("refund storm in the sandbox: page %v; the sandbox has %d orders, %d refunds succeeded", d, len(ids), recordedOff)
	}
	p.screenshot("lab-refund-storm-off")

	// The waterfall of a pay storm on the live copy, drawn from the spans
	// both replicas kept: the winner holds the order's lock across the
	// card processor's call; each loser names what turned it away, the
	// lock (its wait ends busy) or the state rule (the order read was
	// paying already, or paid).
	const storm = 30
	d = race(t, p, "pay_storm", storm)
	if d["ok"] != "true" || d["target"] != "live" {
		t.Fatalf("pay storm ×%d: %v", storm, d)
	}
	losers := eval[int](p, `['409 resource_busy', '409 invalid_state'].reduce((a, k) => a + Number(document.querySelector('#tally li[data-key="' + k + '"] .n')?.textContent || 0), 0)`)
	named := eval[int](p, `document.querySelectorAll('#waterfall .wf-row[data-layer="lock"], #waterfall .wf-row[data-layer="state"]').length`)
	byLock := eval[int](p, `document.querySelectorAll('#waterfall .wf-row[data-layer="lock"]').length`)
	busy := eval[int](p, `document.querySelectorAll('#waterfall .wf-row[data-i]:has(.wf-wait.busy)').length`)
	if losers == 0 || named != losers || busy != byLock {
		t.Errorf("%d answers refused, %d rows stopped by the lock or the state rule; %d stopped by the lock, %d with a busy wait", losers, named, byLock, busy)
	}
	winner := eval[[]string](p, `[...document.querySelectorAll('#waterfall .wf-row[data-status="201"] .wf-bar[data-kind]')].map(b => b.dataset.kind)`)
	for _, kind := range []string{"lock.wait", "lock.hold", "gateway", "db.tx"} {
		if !slices.Contains(winner, kind) {
			t.Errorf("the winner's row has no %s bar: %v", kind, winner)
		}
	}
	if n := eval[int](p, `new Set([...document.querySelectorAll('#waterfall .wf-row[data-i]')].map(r => r.dataset.replica)).size`); n != 2 {
		t.Errorf("the waterfall's rows are on %d replicas, want both", n)
	}
	t.Logf("waterfall: %s", p.text("#wf-info"))
	p.screenshotOf("lab-waterfall", "#wf-card")

	// The same storm without the lock, in a sandbox: the payments race
	// each other to the order's row, and the losers' rows show the write
	// the version check refused (a retry tick) before the state rule
	// turned them away.
	lost := 0
	for range 3 {
		d = race(t, p, "pay_storm", storm, "lock")
		lost = eval[int](p, `document.querySelectorAll('#waterfall .wf-row[data-version="true"]:has(.wf-retry)').length`)
		if d["target"] != "sandbox" || eval[int](p, `document.querySelectorAll('#waterfall .wf-row[data-layer="lock"]').length`) != 0 {
			t.Fatalf("pay storm without the lock: %v, or a row stopped by the lock", d)
		}
		if lost > 0 {
			break
		}
	}
	if lost == 0 {
		t.Errorf("three pay storms without the lock: no row lost at the version check")
	}
	t.Logf("waterfall without the lock: %s", p.text("#wf-info"))
	p.screenshotOf("lab-waterfall-version", "#wf-card")

	// A race longer than the waterfall draws: its first rows, and it says so.
	const long = 80
	d = race(t, p, "pay_storm", long)
	if info := p.text("#wf-info"); !strings.Contains(info, fmt.Sprintf("%d of %d requests", long, long)) ||
		!strings.Contains(info, fmt.Sprintf("The first %d to start are drawn", maxWaterfallRows)) {
		t.Errorf("waterfall of %d requests says %q", long, info)
	}
}

// stormOrders are the orders of a redelivery storm's run, in schema.
func stormOrders(t *testing.T, s *stack, schema, run string) []string {
	t.Helper()
	rows, err := s.db.Query(context.Background(), `SELECT o.id::text FROM `+schema+`.orders o
		JOIN `+schema+`.order_items i ON i.order_id = o.id WHERE i.sku = $1`, "LAB-"+run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// processorRefunds counts the refunds the gateway at base made of
// order's charges, and what they gave back.
func processorRefunds(t *testing.T, s *stack, base, order string) (n, cents int64) {
	t.Helper()
	var charges struct {
		Items []struct {
			Refunds []struct {
				AmountCents int64 `json:"amount_cents"`
			} `json:"refunds"`
		} `json:"items"`
	}
	s.get(t, base, "/v1/charges?reference="+order, "", &charges)
	for _, c := range charges.Items {
		for _, r := range c.Refunds {
			n, cents = n+1, cents+r.AmountCents
		}
	}
	return n, cents
}

// receipts counts the receipts of order at the mail provider at base.
func receipts(t *testing.T, s *stack, base, order string) int {
	t.Helper()
	var sent struct {
		Items []struct{} `json:"items"`
	}
	s.get(t, base, "/v1/messages?kind=receipt&reference="+order, "", &sent)
	return len(sent.Items)
}

// shopRows are what the real shop holds that a race could make.
type shopRows struct {
	users, products, orders, payments, events, posts, likes, charges int64
	outbox, inbox, fulfilments, refunds                              int64
}

func realShop(t *testing.T, s *stack) shopRows {
	t.Helper()
	var charges struct {
		Items []struct{} `json:"items"`
	}
	s.get(t, s.gateway, "/v1/charges", "", &charges)
	return shopRows{
		users:       s.count(t, `SELECT count(*) FROM public.users`),
		products:    s.count(t, `SELECT count(*) FROM public.products`),
		orders:      s.count(t, `SELECT count(*) FROM public.orders`),
		payments:    s.count(t, `SELECT count(*) FROM public.payments`),
		events:      s.count(t, `SELECT count(*) FROM public.events`),
		posts:       s.count(t, `SELECT count(*) FROM public.posts`),
		likes:       s.count(t, `SELECT count(*) FROM public.likes`),
		charges:     int64(len(charges.Items)),
		outbox:      s.count(t, `SELECT count(*) FROM public.watermill_outbox`),
		inbox:       s.count(t, `SELECT count(*) FROM public.inbox`),
		fulfilments: s.count(t, `SELECT count(*) FROM public.fulfilments`),
		refunds:     s.count(t, `SELECT count(*) FROM public.refunds`),
	}
}

func phone(t *testing.T, p page, s *stack) {
	p.do("phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS("#catalogue")))
	p.waitFor("the catalogue", `document.querySelectorAll('#catalogue tr[data-sku]').length > 0`, 10*time.Second)
	if w := eval[int](p, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("the shop is %d px wide on a 390 px phone", w)
	}
	p.screenshot("shop-phone")

	p.do("seats at phone width", chromedp.Navigate(s.url+"/web/seats.html?event="+seatsEvent), chromedp.WaitVisible(chromedp.CSS("#seatmap button.seat")))
	if w := eval[int](p, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("the seats page is %d px wide on a 390 px phone", w)
	}
	p.screenshot("seats-phone")
}

// send makes one request to the stack with token (may be empty) and an
// Idempotency-Key (may be empty), and reads the answer into v; it fails
// the test unless the status is want.
func (s *stack) send(t *testing.T, method, path, token, key string, body any, want int, v any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, b, want)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

type event struct {
	ID        string `json:"id"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Booked    int64  `json:"booked"`
}

// seatsEvent is the event the seats page was tested on, for the phone.
var seatsEvent string

// seatStates reads the event's seat map from the API.
func seatStates(t *testing.T, s *stack, id string) map[string]string {
	t.Helper()
	var m struct {
		Items []struct{ Seat, Status string } `json:"items"`
	}
	s.get(t, s.url, "/v1/events/"+id+"/seats", "", &m)
	out := map[string]string{}
	for _, it := range m.Items {
		out[it.Seat] = it.Status
	}
	return out
}

// sameCounts waits until the page's counts are the API's.
func sameCounts(t *testing.T, p page, s *stack, id string) event {
	t.Helper()
	var e event
	s.get(t, s.url, "/v1/events/"+id, "", &e)
	p.waitFor(fmt.Sprintf("the counts %+v", e), fmt.Sprintf(`document.querySelector('#count-available').textContent === '%d' && document.querySelector('#count-held').textContent === '%d' && document.querySelector('#count-booked').textContent === '%d' && document.querySelector('#count-total').textContent === '%d'`,
		e.Available, e.Held, e.Booked, e.Available+e.Held+e.Booked), 10*time.Second)
	return e
}

func seatsPage(t *testing.T, p page, s *stack) {
	var ev event
	s.send(t, http.MethodPost, "/v1/events", apptest.AdminToken, "", map[string]any{"name": "Browser concert", "rows": 4, "seats_per_row": 10}, http.StatusCreated, &ev)
	seatsEvent = ev.ID
	p.do("open seats", chromedp.Navigate(s.url+"/web/seats.html?event="+ev.ID), chromedp.WaitVisible(chromedp.CSS("#signed-in")))
	token := eval[string](p, `sessionStorage.getItem('shop.token') || ''`)
	if token == "" {
		t.Fatal(errNoToken)
	}
	p.waitFor("the seat map", `document.querySelectorAll('#seatmap button.seat').length === 40`, 10*time.Second)
	sameCounts(t, p, s, ev.ID)
	seat := func(id string) string { return fmt.Sprintf(`#seatmap button[data-seat="%s"]`, id) }

	// Select two seats, hold them: a key is shown, the countdown runs.
	p.do("select A1 and A2", chromedp.Click(chromedp.CSS(seat("A1"))), chromedp.Click(chromedp.CSS(seat("A2"))))
	if eval[string](p, fmt.Sprintf(`document.querySelector('%s').getAttribute('aria-pressed')`, seat("A2"))) != "true" {
		t.Fatal("A2 not pressed after a click")
	}
	p.do("hold", chromedp.Click(chromedp.CSS("#hold")))
	p.waitFor("the hold", `document.querySelector('#hold-status').dataset.state === 'active'`, 10*time.Second)
	if key := p.text("#hold-key"); key == "" {
		t.Fatal("no Idempotency-Key shown for the hold")
	}
	p.waitFor("the countdown", `/^[0-9]+:[0-5][0-9]$/.test(document.querySelector('#countdown').textContent) && Number(document.querySelector('#countdown').dataset.remaining) > 0`, 5*time.Second)
	if e := sameCounts(t, p, s, ev.ID); e.Held != 2 {
		t.Fatalf("after the hold the API says %+v", e)
	}
	p.waitFor("held seats on the map", fmt.Sprintf(`document.querySelector('%s').dataset.status === 'held'`, seat("A1")), 10*time.Second)

	// Confirm: the seats are booked, as the API says.
	p.do("confirm", chromedp.Click(chromedp.CSS("#confirm")))
	p.waitFor("the booking", `document.querySelector('#hold-status').dataset.state === 'booked'`, 10*time.Second)
	states := seatStates(t, s, ev.ID)
	if states["A1"] != "booked" || states["A2"] != "booked" {
		t.Fatalf("after the confirm A1 is %s, A2 %s", states["A1"], states["A2"])
	}
	if e := sameCounts(t, p, s, ev.ID); e.Booked != 2 || e.Held != 0 {
		t.Fatalf("after the confirm the API says %+v", e)
	}
	p.waitFor("booked seats on the map", fmt.Sprintf(`document.querySelector('%s').dataset.status === 'booked' && document.querySelector('%s').dataset.status === 'booked'`, seat("A1"), seat("A2")), 10*time.Second)

	// Another hold, released: the seat is free again.
	p.do("select B3", chromedp.Click(chromedp.CSS(seat("B3"))))
	p.do("hold B3", chromedp.Click(chromedp.CSS("#hold")))
	p.waitFor("the second hold", `document.querySelector('#hold-status').dataset.state === 'active'`, 10*time.Second)
	if e := sameCounts(t, p, s, ev.ID); e.Held != 1 {
		t.Fatalf("after the second hold the API says %+v", e)
	}
	p.screenshot("seats")
	p.do("release", chromedp.Click(chromedp.CSS("#release")))
	p.waitFor("the release", `document.querySelector('#hold-status').dataset.state === 'released'`, 10*time.Second)
	if st := seatStates(t, s, ev.ID)["B3"]; st != "available" {
		t.Fatalf("after the release B3 is %s", st)
	}
	if e := sameCounts(t, p, s, ev.ID); e.Held != 0 || e.Booked != 2 {
		t.Fatalf("after the release the API says %+v", e)
	}

	// A seat taken between the click and the hold: 409 seat_unavailable,
	// named on the page, nothing held.
	p.do("select C5", chromedp.Click(chromedp.CSS(seat("C5"))))
	s.send(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", token, "browser-seats-c5", map[string]any{"seats": []string{"C5"}}, http.StatusCreated, nil)
	p.do("hold C5", chromedp.Click(chromedp.CSS("#hold")))
	p.waitFor("the refusal", `document.querySelector('#seat-msg').dataset.taken === 'C5'`, 10*time.Second)
	if msg := p.text("#seat-msg"); !strings.Contains(msg, "C5") {
		t.Fatalf("the refusal says %q", msg)
	}
	sameCounts(t, p, s, ev.ID)
}
