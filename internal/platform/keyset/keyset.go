// Package keyset is the cursor of the lists that page newest first by
// (created_at, id): orders, posts and holds. A cursor is opaque to clients: the
// (created_at, id) of the last row of a page, base64url-encoded.
package keyset

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Encode is the cursor after the row created at at with id.
func Encode(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// Decode returns the (created_at, id) a cursor stands for; the empty
// cursor stands for the start of the list (after every row). A cursor the
// service did not issue, or whose id is not in its one spelling (package
// ids), is 400 invalid_request.
func Decode(cursor string) (time.Time, string, error) {
	if cursor == "" {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff", nil
	}
	bad := problem.New(problem.Invalid, "cursor: not a cursor this service issued")
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return time.Time{}, "", bad
	}
	at, id, ok := strings.Cut(string(b), "|")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || !ids.Valid(id) {
		return time.Time{}, "", bad
	}
	return t, id, nil
}

// Page cuts rows, read with a limit of one more than the page holds, to
// the page, and returns the cursor of the next page: "" when rows held no
// more than limit, so this page is the last. key gives a row's
// (created_at, id).
func Page[T any](rows []T, limit int, key func(T) (time.Time, string)) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, Encode(key(rows[limit-1]))
}
