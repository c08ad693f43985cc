package app_test

import (
	"testing"

	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
)

// The timings of one request, from the outside in, fit inside each other
// (config.checkTimings holds the settings to the same rule): the server
// outlasts the longest request, the idempotency claim outlasts the request
// and its answer, and storing the answer fits in the margin every request
// keeps for it.
func TestTimingsFit(t *testing.T) {
	if httpx.WriteTimeout <= config.MaxRequestTimeout {
		t.Errorf("the server's write timeout %s does not outlast the longest request timeout %s",
			httpx.WriteTimeout, config.MaxRequestTimeout)
	}
	if idempotency.DefaultLease < config.MaxRequestTimeout+config.AnswerMargin {
		t.Errorf("an idempotency claim (%s) could lapse while the longest request (%s) and its answer (%s) run",
			idempotency.DefaultLease, config.MaxRequestTimeout, config.AnswerMargin)
	}
	if idempotency.FinishTimeout >= config.AnswerMargin {
		t.Errorf("storing an answer may take %s, more than the %s each request keeps for its answer",
			idempotency.FinishTimeout, config.AnswerMargin)
	}
}
