// Package barrier releases goroutines at one moment, so that the calls a
// race test or a benchmark storm makes really overlap instead of trickling
// in as goroutines start.
package barrier

import "sync"

// Together runs fn(i) for every i in [0, n) on n goroutines that wait at a
// barrier and are released at once, and returns when all of them have.
func Together(n int, fn func(i int)) {
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			ready.Done()
			<-start
			fn(i)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
}
