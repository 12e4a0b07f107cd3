// Package wait polls a condition in tests until it holds or a deadline
// passes: the one loop every test that waits for convergence (a controller
// writing status, an agent installing flows, OVS revalidating its cached
// datapath flows) shares.
package wait

import (
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
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}
