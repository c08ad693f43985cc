package idempotency

import (
	"net/http"
	"strings"

	"github.com/shop-example/shop/internal/platform/problem"
)

// HeaderKey is the request header that carries the key; HeaderReplayed
// marks a response that was replayed from the store.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
	maxKeyLength   = 255
)

// KeyFrom returns the request's idempotency key: exactly one header of
// 1–255 printable ASCII characters (0x20–0x7E), the same rule as the
// table's CHECK constraint idempotency_keys_key_format. The payment
// gateway applies the same rule to its own keys.
func KeyFrom(h http.Header) (string, error) {
	values := h.Values(HeaderKey)
	switch {
	case len(values) == 0:
		return "", problem.New(problem.IdempotencyRequired, "this route needs an Idempotency-Key header")
	case len(values) > 1:
		return "", problem.New(problem.IdempotencyRequired, "send exactly one Idempotency-Key header")
	}
	key := values[0]
	if key == "" || len(key) > maxKeyLength {
		return "", problem.Errorf(problem.IdempotencyRequired, "Idempotency-Key must be 1–%d characters long", maxKeyLength)
	}
	if i := strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
		return "", problem.Errorf(problem.IdempotencyRequired, "Idempotency-Key must be printable ASCII; character %d is not", i+1)
	}
	return key, nil
}
