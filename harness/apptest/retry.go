package apptest

import (
	"strconv"
	"testing"
	"time"
)

// Retried sends a request as a well-behaved client does: again, with the
// same key, when the answer says when to come back (Retry-After: a busy
// resource, a request in progress, a lock quorum a loaded machine's Redis
// did not answer in time), within a bound. It returns the last answer.
func Retried(send func(attempt int) Response) Response {
	for attempt := 1; ; attempt++ {
		res := send(attempt)
		if res.Header.Get("Retry-After") == "" || attempt == 20 {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// UntilNotBusy sends a request as a client honouring Retry-After would:
// again after the time a 409 resource_busy, a 409 request_in_progress or a
// 503 unavailable names, for up to 40 s. The longest wait it must outlast
// is a key left claimed until its idempotency lease (30 s) ends, when both
// tries to store its answer failed on a loaded machine; a lock whose
// release reached no quorum stays taken for its 8 s lease. PUT and DELETE
// of a like are safe to repeat, and a POST carries its key.
func UntilNotBusy(t testing.TB, send func(attempt int) Response) Response {
	t.Helper()
	start := time.Now()
	for attempt := 0; ; attempt++ {
		res := send(attempt)
		if res.Header.Get("Retry-After") == "" || time.Since(start) > 40*time.Second {
			return res
		}
		wait, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		time.Sleep(time.Duration(max(wait, 1)) * time.Second)
	}
}
