package keyset_test

import (
	"testing"
	"time"

	"github.com/shop-example/shop/internal/platform/keyset"
)

type row struct {
	at time.Time
	id string
}

func key(r row) (time.Time, string) { return r.at, r.id }

func TestPage(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	rows := []row{{t0, "a"}, {t0.Add(-time.Second), "b"}, {t0.Add(-2 * time.Second), "c"}}

	page, next := keyset.Page(rows, 2, key)
	if len(page) != 2 || page[1].id != "b" {
		t.Fatalf("page = %v, want the first two rows", page)
	}
	if want := keyset.Encode(rows[1].at, "b"); next != want {
		t.Errorf("next = %q, want the cursor after the page's last row %q", next, want)
	}

	for _, limit := range []int{3, 4} {
		page, next := keyset.Page(rows, limit, key)
		if len(page) != 3 || next != "" {
			t.Errorf("limit %d: %d rows, next %q; want every row and no next page", limit, len(page), next)
		}
	}
}
