package load

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/shop-example/shop/harness/k6compat"
)

// console writes the progress line and the script's log to one stream: on
// a terminal the progress line is redrawn in place (a log line clears it
// first), elsewhere a plain line every plainEvery.
type console struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	quiet    bool
	drawn    bool // a progress line is on screen, without its newline
	started  time.Time
	lastReqs int64
	lastAt   time.Time
}

const (
	ttyEvery   = 200 * time.Millisecond
	plainEvery = 5 * time.Second
)

func newConsole(w io.Writer, quiet bool) *console {
	c := &console{w: w, quiet: quiet, started: time.Now()}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			c.tty = true
		}
	}
	return c
}

// line prints one log line, clearing a progress line first.
func (c *console) line(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	fmt.Fprintln(c.w, s)
}

// logf is the runner's log: the script's console and its exceptions,
// stamped with the seconds since the start, as k6's INFO[0012].
func (c *console) logf(format string, args ...any) {
	c.line(fmt.Sprintf("[%04d] ", int(time.Since(c.started).Seconds())) + fmt.Sprintf(format, args...))
}

func (c *console) clear() {
	if c.drawn {
		fmt.Fprint(c.w, "\r\x1b[K")
		c.drawn = false
	}
}

// progress shows live until the returned function is called with the
// run's result (nil when the run could not start), which prints the last
// line for good.
func (c *console) progress(live *k6compat.Live, start time.Time) func(*k6compat.Result) {
	c.lastAt = start
	done := make(chan struct{})
	finished := make(chan struct{})
	every := plainEvery
	if c.tty {
		every = ttyEvery
	}
	go func() {
		defer close(finished)
		if c.quiet {
			<-done
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				c.show(live, start, false)
			case <-done:
				return
			}
		}
	}()
	return func(res *k6compat.Result) {
		close(done)
		<-finished
		if !c.quiet && res != nil {
			c.show(live, start, true)
		}
	}
}

// show draws one progress line, k6's way: elapsed of the planned time,
// VUs, iterations, requests per second since the last line, failed checks.
func (c *console) show(live *k6compat.Live, start time.Time, final bool) {
	p := live.Progress()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	rate := 0.0
	if d := now.Sub(c.lastAt).Seconds(); d > 0 {
		rate = float64(p.Requests-c.lastReqs) / d
	}
	if final {
		if d := now.Sub(start).Seconds(); d > 0 {
			rate = float64(p.Requests) / d
		}
	}
	c.lastReqs, c.lastAt = p.Requests, now
	s := fmt.Sprintf("running (%s/%s), %d/%d VUs, %d complete iterations, %d requests, %.1f req/s, %d failed checks",
		clock(now.Sub(start)), clock(p.Planned), p.VUs, p.MaxVUs, p.Iterations, p.Requests, rate, p.FailedChecks)
	if final {
		s = fmt.Sprintf("done (%s), %d/%d VUs, %d complete iterations, %d requests, %.1f req/s on average, %d failed checks",
			clock(now.Sub(start)), p.VUs, p.MaxVUs, p.Iterations, p.Requests, rate, p.FailedChecks)
	}
	c.clear()
	if c.tty && !final {
		fmt.Fprint(c.w, s)
		c.drawn = true
		return
	}
	fmt.Fprintln(c.w, s)
}

// clock prints a duration as k6's progress does: 1m05.2s.
func clock(d time.Duration) string {
	m := int(d / time.Minute)
	sec := (d - time.Duration(m)*time.Minute).Seconds()
	return fmt.Sprintf("%dm%04.1fs", m, sec)
}
