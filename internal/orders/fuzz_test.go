package orders_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/problem"
)

// FuzzDecodeCreate feeds arbitrary bodies to the decoder of POST /v1/orders.
// Whatever the body, DecodeCreate must not panic, must only accept lines
// that obey API.md (1–20 items, distinct well-formed SKUs, quantity 1–100)
// and that plain encoding/json reads the same way, and must refuse
// everything else with a 400 invalid_request problem.
func FuzzDecodeCreate(f *testing.F) {
	item := func(sku string, q int) string { return fmt.Sprintf(`{"sku": %q, "quantity": %d}`, sku, q) }
	items := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = item(fmt.Sprintf("SKU-%d", i), 1)
		}
		return `{"items": [` + strings.Join(parts, ",") + `]}`
	}
	for _, seed := range []string{
		// accepted
		`{"items": [{"sku": "SKU-1", "quantity": 1}]}`,
		`{"items": [{"sku": "A", "quantity": 100}, {"sku": "b_2-Z", "quantity": 7}]}`,
		`{"items":[{"quantity":3,"sku":"x"}]}`,
		items(20),
		`{"items": [{"sku": "` + strings.Repeat("a", 64) + `", "quantity": 1}]}`,
		"\n {\"items\": [{\"sku\": \"S\", \"quantity\": 1}]} \n",
		// refused
		``,
		`{}`,
		`null`,
		`{"items": null}`,
		`{"items": []}`,
		`{"items": [`,
		`{"items": {"sku": "A", "quantity": 1}}`,
		`{"items": ["A"]}`,
		`[{"sku": "A", "quantity": 1}]`,
		`{"items": [{"sku": "A", "quantity": "2"}]}`,
		`{"items": [{"sku": "A", "quantity": 1.5}]}`,
		`{"items": [{"sku": "A", "quantity": 1e2}]}`,
		`{"items": [{"sku": "A", "quantity": 0}]}`,
		`{"items": [{"sku": "A", "quantity": -1}]}`,
		`{"items": [{"sku": "A", "quantity": 101}]}`,
		`{"items": [{"sku": "A", "quantity": 99999999999999999999}]}`,
		`{"items": [{"sku": "A"}]}`,
		`{"items": [{"quantity": 1}]}`,
		`{"items": [{"sku": "A B", "quantity": 1}]}`,
		`{"items": [{"sku": "` + strings.Repeat("a", 65) + `", "quantity": 1}]}`,
		`{"items": [{"sku": "A", "quantity": 1}, {"sku": "A", "quantity": 2}]}`,
		items(21),
		`{"items": [{"sku": "A", "quantity": 1}], "coupon": "FREE"}`,
		`{"items": [{"sku": "A", "quantity": 1, "price": 0}]}`,
		`{"Items": [{"sku": "A", "quantity": 1}]}`,
		`{"items": [{"SKU": "A", "quantity": 1}]}`,
		`{"items": [{"ſku": "A", "quantity": 1}]}`,
		`{"items": [{"sku": "A", "quantity": 1, "quantity": 2}]}`,
		`{"items": [], "items": [{"sku": "A", "quantity": 1}]}`,
		`{"items": [{"sku": "A", "quantity": 1}]} {}`,
		`{"items": [{"sku": "A", "quantity": 1}]} x`,
		`{"items": [{"sku": "\u0041", "quantity": 1}]}`,
		"{\"items\": [{\"sku\": \"A\xff\", \"quantity\": 1}]}",
		`{"items": [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}`,
		// nested past the limit: refused after 33 brackets, not after the
		// whole body (60,000 of them once cost gigabytes)
		strings.Repeat("[", 60_000),
		`{"items": ` + strings.Repeat("[", 60_000),
		`{"items": [{"sku": "A", "quantity": 1, "x": ` + strings.Repeat(`{"x": `, 40) + `1` + strings.Repeat("}", 40) + `}]}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		lines, err := orders.DecodeCreate(body)
		if err != nil {
			p, ok := problem.As(err)
			if !ok || p.Code != problem.Invalid || p.Detail == "" {
				t.Fatalf("DecodeCreate(%q): error %v (%T), want an invalid_request problem with a detail", body, err, err)
			}
			if lines != nil {
				t.Fatalf("DecodeCreate(%q): lines %v alongside error %v", body, lines, err)
			}
			return
		}
		checkLines(t, body, lines)

		// encoding/json alone reads the accepted body as the same lines: the
		// strict checks only ever refuse, they never change a meaning.
		var plain struct {
			Items []struct {
				SKU      string `json:"sku"`
				Quantity int    `json:"quantity"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &plain); err != nil {
			t.Fatalf("DecodeCreate accepted %q, encoding/json refuses it: %v", body, err)
		}
		same := len(plain.Items) == len(lines)
		for i := 0; same && i < len(lines); i++ {
			same = plain.Items[i].SKU == lines[i].SKU && plain.Items[i].Quantity == lines[i].Quantity
		}
		if !same {
			t.Fatalf("DecodeCreate(%q) = %v, encoding/json reads %+v", body, lines, plain.Items)
		}

		// What was accepted, re-encoded, is accepted as the same lines.
		type wire struct {
			SKU      string `json:"sku"`
			Quantity int    `json:"quantity"`
		}
		re := struct {
			Items []wire `json:"items"`
		}{}
		for _, l := range lines {
			re.Items = append(re.Items, wire{l.SKU, l.Quantity})
		}
		b, err := json.Marshal(re)
		if err != nil {
			t.Fatal(err)
		}
		again, err := orders.DecodeCreate(b)
		if err != nil || !slices.Equal(again, lines) {
			t.Fatalf("re-encoded %s decodes to %v, %v; want %v", b, again, err, lines)
		}
	})
}

// checkLines checks the rules of API.md on accepted lines, independently of
// the package's own validation.
func checkLines(t *testing.T, body []byte, lines []inventory.Line) {
	t.Helper()
	if len(lines) < 1 || len(lines) > 20 {
		t.Fatalf("DecodeCreate(%q) accepted %d items, want 1–20", body, len(lines))
	}
	seen := map[string]bool{}
	for i, l := range lines {
		if !wellFormedSKU(l.SKU) {
			t.Fatalf("DecodeCreate(%q): item %d has SKU %q, want 1–64 of [A-Za-z0-9_-]", body, i, l.SKU)
		}
		if seen[l.SKU] {
			t.Fatalf("DecodeCreate(%q): SKU %q accepted twice", body, l.SKU)
		}
		seen[l.SKU] = true
		if l.Quantity < 1 || l.Quantity > 100 {
			t.Fatalf("DecodeCreate(%q): item %d has quantity %d, want 1–100", body, i, l.Quantity)
		}
	}
}

func wellFormedSKU(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}
