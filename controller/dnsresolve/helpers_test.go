package dnsresolve

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
)

// fakeClock is a Clock that moves only when Advance is called.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*fakeWaiter]struct{}
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC), waiters: map[*fakeWaiter]struct{}{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) WakeAt(t time.Time) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWaiter{at: t, ch: make(chan time.Time, 1)}
	if !t.After(c.now) {
		w.ch <- c.now
		return w.ch, func() {}
	}
	c.waiters[w] = struct{}{}
	return w.ch, func() {
		c.mu.Lock()
		delete(c.waiters, w)
		c.mu.Unlock()
	}
}

// Advance moves the clock by d and wakes every waiter now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			delete(c.waiters, w)
		}
	}
}

// waitLimit bounds every wait for the resolver in real time: reaching it
// fails the test; nothing is asserted about how long things take.
const waitLimit = 10 * time.Second

// startServer starts a dnstest server on addr ("127.0.0.1:0", "[::1]:0"),
// closed at the end of the test.
func startServer(t *testing.T, addr string) *dnstest.Server {
	t.Helper()
	s, err := dnstest.Start(addr)
	if err != nil {
		t.Fatalf("dnstest.Start(%s): %v", addr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startServer6 starts a dnstest server on [::1]; the test fails on a
// machine without IPv6 loopback (CI has one) rather than skip.
func startServer6(t *testing.T) *dnstest.Server {
	t.Helper()
	probe, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback (the tests need ::1): %v", err)
	}
	probe.Close()
	return startServer(t, "[::1]:0")
}

// testConfig asks servers with a fake clock and a short real timeout.
func testConfig(clock Clock, servers ...*dnstest.Server) Config {
	cfg := Config{Clock: clock, Timeout: 300 * time.Millisecond}
	for _, s := range servers {
		cfg.Servers = append(cfg.Servers, s.Addr())
	}
	return cfg
}

// startResolver runs a Resolver on cfg until the end of the test.
func startResolver(t *testing.T, cfg Config) *Resolver {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Run did not return after its context ended")
		}
	})
	return r
}

// waitSettled waits until key's last lookup has been applied and the next
// one is scheduled after the clock's present, and returns when it is due.
func waitSettled(t *testing.T, r *Resolver, key string) time.Time {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		now := r.cfg.Clock.Now()
		r.mu.Lock()
		e := r.entries[key]
		var next time.Time
		if e != nil && !e.inFlight && e.nextQuery.After(now) {
			next = e.nextQuery
		}
		r.mu.Unlock()
		if !next.IsZero() {
			return next
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no lookup settled within %v", key, waitLimit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitLookups waits until key has had n lookups applied (its failures or
// answers), judged by the server's query count (two per lookup) and the
// resolver having settled after it.
func waitLookups(t *testing.T, r *Resolver, s *dnstest.Server, key string, n int) time.Time {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for s.Queries(key) < 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d queries, want %d", key, s.Queries(key), 2*n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return waitSettled(t, r, key)
}

// drain empties the Changed channel.
func drain(r *Resolver) {
	select {
	case <-r.Changed():
	default:
	}
}

// waitChanged waits for a Changed signal.
func waitChanged(t *testing.T, r *Resolver, what string) {
	t.Helper()
	select {
	case <-r.Changed():
	case <-time.After(waitLimit):
		t.Fatalf("no Changed signal for %s", what)
	}
}

// addrs parses addresses for comparisons.
func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// wantSnapshot compares the snapshot's entry for key: present with want,
// or absent when want is nil.
func wantSnapshot(t *testing.T, r *Resolver, key string, want []netip.Addr) {
	t.Helper()
	got, ok := r.Snapshot()[key]
	switch {
	case want == nil && ok:
		t.Errorf("%s: present with %v, want absent", key, got)
	case want != nil && !ok:
		t.Errorf("%s: absent, want %v", key, want)
	case want != nil && !slices.Equal(got, want):
		t.Errorf("%s: %v, want %v", key, got, want)
	}
}

// expiryOf is when key's address a expires (zero if it has none).
func expiryOf(r *Resolver, key string, a netip.Addr) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[key]; e != nil {
		return e.addrs[a]
	}
	return time.Time{}
}
