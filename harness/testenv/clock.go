package testenv

import (
	"sync/atomic"
	"time"
)

// Clock is the injected time of a test (the services' Now), moved by
// hand so that nothing needs to sleep for an order or a lease to expire.
// Every clock starts at the real time when it is made, truncated to
// PostgreSQL's microseconds: one epoch, so the timestamps a test writes
// agree with those the database and the gateway write.
type Clock struct {
	start  time.Time
	frozen bool
	offset atomic.Int64
}

// NewClock returns a clock that runs with the real time, plus whatever the
// test has advanced it by: timestamps still grow between requests (lists
// sort by them).
func NewClock() *Clock {
	return &Clock{start: time.Now().UTC().Truncate(time.Microsecond)}
}

// NewFrozenClock returns a clock that stands still until the test moves
// it, for tests that compare durations exactly.
func NewFrozenClock() *Clock {
	c := NewClock()
	c.frozen = true
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	now := c.start
	if !c.frozen {
		now = time.Now().UTC()
	}
	return now.Add(time.Duration(c.offset.Load()))
}

// Advance moves the clock by d (back, if d is negative).
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
