// Package wait polls a condition in tests until it holds or a deadline
// passes: the one loop every test that waits for convergence (a controller
// writing status, an agent installing flows, OVS revalidating its cached
// datapath flows) shares; and Parallel, which waits for a batch of work
// spread over goroutines.
package wait

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pollInterval is how often a condition is checked: short against the
// millisecond convergence the tests expect, long enough not to load the API
// server or the switch being watched.
const pollInterval = 20 * time.Millisecond

// Until calls check until it returns nil, and fails the test with check's
// last error once timeout has passed.
func Until(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	UntilEvery(t, timeout, pollInterval, check)
}

// UntilEvery is Until with another interval between checks, for checks
// that cost more (listing thousands of objects).
func UntilEvery(t testing.TB, timeout, interval time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Parallel runs f(0), ..., f(n-1) on workers goroutines, waits for them all,
// and fails t with the first error (the workers stop taking new indexes
// once one failed). Benchmarks use it to create thousands of API objects.
func Parallel(t testing.TB, n, workers int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}
