package testenv

import "github.com/shop-example/shop/harness/barrier"

// Together runs fn(i) for every i in [0, n) on n goroutines that wait at a
// barrier and are released at once, so the calls really overlap, and
// returns when all of them have (barrier.Together, which the benchmarks'
// storms use too).
func Together(n int, fn func(i int)) { barrier.Together(n, fn) }
