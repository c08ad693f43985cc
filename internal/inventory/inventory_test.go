package inventory_test

import (
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestProduct_Validate(t *testing.T) {
	valid := inventory.Product{SKU: "SKU-1_a", Name: "Mug", PriceCents: 0, StockAvailable: 0}
	tests := []struct {
		name   string
		change func(*inventory.Product)
		field  string // "" when valid
	}{
		{"valid", func(*inventory.Product) {}, ""},
		{"sku of 64", func(p *inventory.Product) { p.SKU = strings.Repeat("a", 64) }, ""},
		{"empty sku", func(p *inventory.Product) { p.SKU = "" }, "sku"},
		{"sku of 65", func(p *inventory.Product) { p.SKU = strings.Repeat("a", 65) }, "sku"},
		{"sku with a dot", func(p *inventory.Product) { p.SKU = "a.b" }, "sku"},
		{"sku with a space", func(p *inventory.Product) { p.SKU = "a b" }, "sku"},
		{"blank name", func(p *inventory.Product) { p.Name = "  " }, "name"},
		{"long name", func(p *inventory.Product) { p.Name = strings.Repeat("é", 201) }, "name"},
		{"name with NUL", func(p *inventory.Product) { p.Name = "Mug\x00" }, "name"},
		{"name with a newline", func(p *inventory.Product) { p.Name = "Mug\nCup" }, "name"},
		{"name with DEL", func(p *inventory.Product) { p.Name = "Mug\x7f" }, "name"},
		{"name with a C1 control", func(p *inventory.Product) { p.Name = "Mug\u0085" }, "name"},
		{"name with accents and symbols", func(p *inventory.Product) { p.Name = "Café mug ☕" }, ""},
		{"negative price", func(p *inventory.Product) { p.PriceCents = -1 }, "price_cents"},
		{"huge price", func(p *inventory.Product) { p.PriceCents = inventory.MaxPriceCents + 1 }, "price_cents"},
		{"negative stock", func(p *inventory.Product) { p.StockAvailable = -1 }, "stock"},
		{"huge stock", func(p *inventory.Product) { p.StockAvailable = inventory.MaxStock + 1 }, "stock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := valid
			tt.change(&p)
			wantInvalid(t, p.Validate(), tt.field)
		})
	}
}

func TestPatch_Validate(t *testing.T) {
	name, blank, bell := "New name", " ", "New\aname"
	price, negative := int64(5), int64(-5)
	tests := []struct {
		name  string
		patch inventory.Patch
		field string
	}{
		{"name", inventory.Patch{Name: &name}, ""},
		{"price", inventory.Patch{PriceCents: &price}, ""},
		{"both", inventory.Patch{Name: &name, PriceCents: &price}, ""},
		{"nothing", inventory.Patch{}, "body"},
		{"blank name", inventory.Patch{Name: &blank}, "name"},
		{"name with a control character", inventory.Patch{Name: &bell}, "name"},
		{"negative price", inventory.Patch{PriceCents: &negative}, "price_cents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantInvalid(t, tt.patch.Validate(), tt.field) })
	}
}

func TestValidateRestock(t *testing.T) {
	for _, q := range []int{1, inventory.MaxRestock} {
		wantInvalid(t, inventory.ValidateRestock(q), "")
	}
	for _, q := range []int{0, -1, inventory.MaxRestock + 1} {
		wantInvalid(t, inventory.ValidateRestock(q), "quantity")
	}
}

// wantInvalid checks err is nil when field is "", else an invalid_request
// whose detail starts with the field's name.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		return
	}
	p, ok := problem.As(err)
	if !ok || p.Code != problem.Invalid || !strings.HasPrefix(p.Detail, field+":") {
		t.Fatalf("got %v, want invalid_request about %s", err, field)
	}
}
