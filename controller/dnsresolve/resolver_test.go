package dnsresolve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
)

// TestLookupAAndAAAA: a name's A and AAAA answers, asked over real UDP to
// a server on 127.0.0.1 and one on ::1, make one sorted set; each lookup
// is one query of each type.
func TestLookupAAndAAAA(t *testing.T) {
	for _, family := range []string{"IPv4 server", "IPv6 server"} {
		t.Run(family, func(t *testing.T) {
			var srv *dnstest.Server
			if family == "IPv4 server" {
				srv = startServer(t, "127.0.0.1:0")
			} else {
				srv = startServer6(t)
			}
			srv.Set("Dual.Example.com",
				dnstest.A("192.0.2.2", 60), dnstest.AAAA("2001:db8::1", 60), dnstest.A("192.0.2.1", 60), dnstest.A("192.0.2.2", 60))
			srv.Set("v6only.example.com", dnstest.AAAA("2001:db8::6", 60))
			clock := newFakeClock()
			r := startResolver(t, testConfig(clock, srv))
			r.SetNames([]string{"dual.example.com", "v6only.example.com"})
			waitSettled(t, r, "dual.example.com")
			waitSettled(t, r, "v6only.example.com")
			wantSnapshot(t, r, "dual.example.com", addrs("192.0.2.1", "192.0.2.2", "2001:db8::1"))
			wantSnapshot(t, r, "v6only.example.com", addrs("2001:db8::6"))
			if n := srv.Queries("dual.example.com"); n != 2 {
				t.Errorf("server got %d queries for dual.example.com, want 2 (A and AAAA)", n)
			}
		})
	}
}

// TestCNAMEChain: the addresses at the end of a CNAME chain belong to the
// asked name, and live for the least TTL along the chain.
func TestCNAMEChain(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("www.example.com", dnstest.CNAME("edge.cdn.test", 30))
	srv.Set("edge.cdn.test", dnstest.CNAME("pop.cdn.test", 120))
	srv.Set("pop.cdn.test", dnstest.A("198.51.100.7", 300), dnstest.AAAA("2001:db8::7", 20))
	clock := newFakeClock()
	start := clock.Now()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"www.example.com"})
	next := waitSettled(t, r, "www.example.com")

	wantSnapshot(t, r, "www.example.com", addrs("198.51.100.7", "2001:db8::7"))
	if got, want := expiryOf(r, "www.example.com", netip.MustParseAddr("198.51.100.7")), start.Add(32*time.Second); !got.Equal(want) {
		t.Errorf("A address expires at +%v, want +32s (the CNAME's TTL, the least on the chain, and the 2 s grace)", got.Sub(start))
	}
	if got, want := expiryOf(r, "www.example.com", netip.MustParseAddr("2001:db8::7")), start.Add(22*time.Second); !got.Equal(want) {
		t.Errorf("AAAA address expires at +%v, want +22s (its own TTL and the grace)", got.Sub(start))
	}
	if want := start.Add(18 * time.Second); !next.Equal(want) {
		t.Errorf("next lookup at +%v, want +18s (least TTL 20 s less 2 s prefetch)", next.Sub(start))
	}
	if n := srv.Queries("pop.cdn.test"); n != 0 {
		t.Errorf("the chain's last name was asked %d times; the answer should carry it", n)
	}
}

// TestAddressesStickUntilTheirTTL: an answer that changes adds the new
// address at once; the old one stays until its own TTL (and the 2 s
// grace) has run out since it was last seen, then goes, with a Changed
// signal. The changed answer is checked again after MinTTL.
func TestAddressesStickUntilTheirTTL(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("api.example.com", dnstest.A("192.0.2.1", 60))
	clock := newFakeClock()
	start := clock.Now()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"api.example.com"})
	next := waitSettled(t, r, "api.example.com")
	wantSnapshot(t, r, "api.example.com", addrs("192.0.2.1"))
	if want := start.Add(58 * time.Second); !next.Equal(want) {
		t.Fatalf("next lookup at +%v, want +58s", next.Sub(start))
	}

	srv.Set("api.example.com", dnstest.A("192.0.2.2", 60))
	drain(r)
	clock.Advance(58 * time.Second)
	next = waitLookups(t, r, srv, "api.example.com", 2)
	waitChanged(t, r, "the new address")
	wantSnapshot(t, r, "api.example.com", addrs("192.0.2.1", "192.0.2.2"))
	if want := start.Add(63 * time.Second); !next.Equal(want) {
		t.Errorf("after a changed answer: next lookup at +%v, want +63s (MinTTL)", next.Sub(start))
	}

	// 192.0.2.1 was last seen at +0 with TTL 60: it goes at +62.
	clock.Advance(3 * time.Second)
	wantSnapshot(t, r, "api.example.com", addrs("192.0.2.1", "192.0.2.2"))
	drain(r)
	clock.Advance(time.Second)
	waitChanged(t, r, "the old address's expiry")
	wantSnapshot(t, r, "api.example.com", addrs("192.0.2.2"))
}

// TestTTLZeroAskedAtTheFloor: a TTL of 0 is asked again every MinTTL (the
// prefetch does not shorten it below), and its address stays between
// answers.
func TestTTLZeroAskedAtTheFloor(t *testing.T) {
	for _, minTTL := range []time.Duration{0, time.Second} {
		floor := cmpOr(minTTL, DefaultMinTTL)
		t.Run(fmt.Sprintf("MinTTL %v", floor), func(t *testing.T) {
			srv := startServer(t, "127.0.0.1:0")
			srv.Set("zero.example.com", dnstest.A("192.0.2.5", 0))
			clock := newFakeClock()
			start := clock.Now()
			cfg := testConfig(clock, srv)
			cfg.MinTTL = minTTL
			r := startResolver(t, cfg)
			r.SetNames([]string{"zero.example.com"})
			for i := 1; i <= 3; i++ {
				next := waitLookups(t, r, srv, "zero.example.com", i)
				if want := start.Add(time.Duration(i) * floor); !next.Equal(want) {
					t.Fatalf("after lookup %d: next at +%v, want +%v", i, next.Sub(start), want.Sub(start))
				}
				wantSnapshot(t, r, "zero.example.com", addrs("192.0.2.5"))
				clock.Advance(floor)
			}
		})
	}
}

func cmpOr(d, fallback time.Duration) time.Duration {
	if d == 0 {
		return fallback
	}
	return d
}

// TestRoundRobinConvergesToTheUnion: a server answering 2 of its 4
// addresses per query, a different pair each time, is sampled every
// MinTTL while its answers vary, and the set converges to all 4 and keeps
// them; once the answers settle on two, the other two leave when their
// TTL has run out, and the lookups go back to the TTL's pace.
func TestRoundRobinConvergesToTheUnion(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	all := []dnstest.Record{
		dnstest.A("203.0.113.1", 30), dnstest.A("203.0.113.2", 30),
		dnstest.A("203.0.113.3", 30), dnstest.A("203.0.113.4", 30),
	}
	srv.Set("rr.example.com", append(slices.Clone(all), dnstest.RoundRobin(2))...)
	clock := newFakeClock()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"rr.example.com"})
	next := waitLookups(t, r, srv, "rr.example.com", 1)
	wantSnapshot(t, r, "rr.example.com", addrs("203.0.113.1", "203.0.113.2"))
	if got := next.Sub(clock.Now()); got != 28*time.Second {
		t.Fatalf("after the first answer: next lookup in %v, want 28s", got)
	}
	union := addrs("203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4")
	// Answers: {2,3}, {3,4}, {4,1}, {1,2}, ... each differs from the last.
	// .1, seen at +0 only, has expired by lookup 3 (+33); from lookup 4
	// on, each address is seen every other lookup, well within its TTL.
	for lookup := 2; lookup <= 8; lookup++ {
		clock.Advance(next.Sub(clock.Now()))
		next = waitLookups(t, r, srv, "rr.example.com", lookup)
		if got := next.Sub(clock.Now()); got != DefaultMinTTL {
			t.Fatalf("lookup %d: next in %v, want %v: the answers vary", lookup, got, DefaultMinTTL)
		}
		if lookup >= 4 {
			wantSnapshot(t, r, "rr.example.com", union)
		}
	}

	// Upstream settles on .1 and .2.
	srv.Set("rr.example.com", all[0], all[1])
	for lookup := 9; ; lookup++ {
		clock.Advance(next.Sub(clock.Now()))
		next = waitLookups(t, r, srv, "rr.example.com", lookup)
		if next.Sub(clock.Now()) == 28*time.Second {
			break // two answers in a row agree
		}
		if lookup > 11 {
			t.Fatalf("lookups still at %v after the answers settled", next.Sub(clock.Now()))
		}
	}
	wantSnapshot(t, r, "rr.example.com", union)
	gone := expiryOf(r, "rr.example.com", netip.MustParseAddr("203.0.113.3"))
	if e4 := expiryOf(r, "rr.example.com", netip.MustParseAddr("203.0.113.4")); e4.After(gone) {
		gone = e4
	}
	if !gone.Before(next) {
		t.Fatalf(".3 and .4 expire at %v, after the next lookup at %v", gone, next)
	}
	drain(r)
	clock.Advance(gone.Sub(clock.Now()))
	waitChanged(t, r, "two addresses' expiry")
	wantSnapshot(t, r, "rr.example.com", addrs("203.0.113.1", "203.0.113.2"))
}

// TestNegativeAnswers: NXDOMAIN and NODATA are answers: the name is
// present with no address, and asked again at the SOA's negative TTL, or
// at the floor without a SOA. Addresses known before an NXDOMAIN stay
// until their TTL.
func TestNegativeAnswers(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("gone.example.com", dnstest.NXDomain(), dnstest.NegativeTTL(600))
	srv.Set("v4only.example.com", dnstest.A("192.0.2.4", 300), dnstest.NegativeTTL(60))
	srv.Set("nosoa.example.com", dnstest.A("192.0.2.8", 300))
	srv.Set("empty.example.com")
	srv.Set("moved.example.com", dnstest.A("192.0.2.9", 10))
	clock := newFakeClock()
	start := clock.Now()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"gone.example.com", "v4only.example.com", "nosoa.example.com", "empty.example.com", "moved.example.com", "never.example.com"})

	for _, tc := range []struct {
		name string
		want []netip.Addr
		next time.Duration
		why  string
	}{
		{"gone.example.com", []netip.Addr{}, 598 * time.Second, "NXDOMAIN, SOA negative TTL 600 s less prefetch"},
		{"never.example.com", []netip.Addr{}, DefaultMinTTL, "NXDOMAIN without SOA: the floor"},
		{"v4only.example.com", addrs("192.0.2.4"), 58 * time.Second, "the AAAA NODATA's negative TTL 60 s is the least"},
		{"nosoa.example.com", addrs("192.0.2.8"), 298 * time.Second, "a NODATA without SOA does not count"},
		{"empty.example.com", []netip.Addr{}, DefaultMinTTL, "NODATA for both, no SOA: the floor"},
	} {
		next := waitSettled(t, r, tc.name)
		wantSnapshot(t, r, tc.name, tc.want)
		if got := next.Sub(start); got != tc.next {
			t.Errorf("%s: next lookup at +%v, want +%v (%s)", tc.name, got, tc.next, tc.why)
		}
	}

	next := waitSettled(t, r, "moved.example.com")
	srv.Set("moved.example.com", dnstest.NXDomain())
	clock.Advance(next.Sub(clock.Now())) // +8: NXDOMAIN; the address seen at +0 stays
	waitLookups(t, r, srv, "moved.example.com", 2)
	wantSnapshot(t, r, "moved.example.com", addrs("192.0.2.9"))
	drain(r)
	clock.Advance(4 * time.Second) // +12: its TTL and grace ran out
	waitChanged(t, r, "the expiry after NXDOMAIN")
	wantSnapshot(t, r, "moved.example.com", []netip.Addr{})
}

// TestFailuresKeepAddresses: SERVFAIL is retried every RetryInterval for
// RetryAttempts failures, then at doubling waits; the addresses known
// stay while it fails, past their TTL; when answers come back the stale
// ones go.
func TestFailuresKeepAddresses(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("flaky.example.com", dnstest.A("192.0.2.9", 10))
	clock := newFakeClock()
	cfg := testConfig(clock, srv)
	cfg.RetryAttempts = 3
	cfg.MaxBackoff = 30 * time.Second
	r := startResolver(t, cfg)
	r.SetNames([]string{"flaky.example.com"})
	next := waitSettled(t, r, "flaky.example.com")

	srv.Set("flaky.example.com", dnstest.ServFail())
	// Waits after failures 1..6: 5, 5, 5, then 10, 20, and 30 (the cap).
	wantWaits := []time.Duration{5, 5, 5, 10, 20, 30}
	for i, wait := range wantWaits {
		clock.Advance(next.Sub(clock.Now()))
		next = waitLookups(t, r, srv, "flaky.example.com", i+2)
		if got := next.Sub(clock.Now()); got != wait*time.Second {
			t.Errorf("after failure %d: next lookup in %v, want %v", i+1, got, wait*time.Second)
		}
		wantSnapshot(t, r, "flaky.example.com", addrs("192.0.2.9"))
	}

	srv.Set("flaky.example.com", dnstest.A("192.0.2.10", 10))
	drain(r)
	clock.Advance(next.Sub(clock.Now()))
	next = waitLookups(t, r, srv, "flaky.example.com", len(wantWaits)+2)
	waitChanged(t, r, "the recovery")
	wantSnapshot(t, r, "flaky.example.com", addrs("192.0.2.10"))
	if got := next.Sub(clock.Now()); got != DefaultMinTTL {
		t.Errorf("after recovering: next lookup in %v, want %v (a changed answer is checked after MinTTL)", got, DefaultMinTTL)
	}
}

// TestTimeoutsAndRefusalsLeaveNameAbsent: a name whose lookups only fail
// has had no answer and stays absent; it is retried.
func TestTimeoutsAndRefusalsLeaveNameAbsent(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("silent.example.com", dnstest.Drop())
	srv.Set("refused.example.com", dnstest.Refused())
	clock := newFakeClock()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"silent.example.com", "refused.example.com"})
	for _, name := range []string{"silent.example.com", "refused.example.com"} {
		next := waitSettled(t, r, name)
		wantSnapshot(t, r, name, nil)
		if got := next.Sub(clock.Now()); got != DefaultRetryInterval {
			t.Errorf("%s: retry in %v, want %v", name, got, DefaultRetryInterval)
		}
	}
	clock.Advance(DefaultRetryInterval)
	waitLookups(t, r, srv, "silent.example.com", 2)
	waitLookups(t, r, srv, "refused.example.com", 2)
	r.mu.Lock()
	failures := r.entries["silent.example.com"].failures
	r.mu.Unlock()
	if failures != 2 {
		t.Errorf("silent.example.com: %d failures in a row, want 2", failures)
	}
	wantSnapshot(t, r, "silent.example.com", nil)
}

// TestNextServerOnError: a server that refuses, or one that does not
// answer, is passed over for the next.
func TestNextServerOnError(t *testing.T) {
	refusing := startServer(t, "127.0.0.1:0")
	silent := startServer(t, "127.0.0.1:0")
	answering := startServer6OrV4(t)
	refusing.Set("svc.example.com", dnstest.Refused())
	silent.Set("svc.example.com", dnstest.Drop())
	answering.Set("svc.example.com", dnstest.A("192.0.2.77", 60))
	clock := newFakeClock()
	r := startResolver(t, testConfig(clock, refusing, silent, answering))
	r.SetNames([]string{"svc.example.com"})
	waitSettled(t, r, "svc.example.com")
	wantSnapshot(t, r, "svc.example.com", addrs("192.0.2.77"))
	for _, s := range []*dnstest.Server{refusing, silent, answering} {
		if n := s.Queries("svc.example.com"); n != 2 {
			t.Errorf("server %v: %d queries, want 2", s.Addr(), n)
		}
	}
}

// startServer6OrV4 starts a server on ::1, or on 127.0.0.1 without IPv6.
func startServer6OrV4(t *testing.T) *dnstest.Server {
	if probe, err := dnstest.Start("[::1]:0"); err == nil {
		t.Cleanup(func() { probe.Close() })
		return probe
	}
	return startServer(t, "127.0.0.1:0")
}

// TestTruncatedReplyRetriedOverTCP: an answer too large for a 512-byte UDP
// reply comes truncated, and is asked again over TCP.
func TestTruncatedReplyRetriedOverTCP(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	var records []dnstest.Record
	var want []netip.Addr
	for i := 1; i <= 60; i++ {
		a := fmt.Sprintf("198.51.100.%d", i)
		records = append(records, dnstest.A(a, 300))
		want = append(want, netip.MustParseAddr(a))
	}
	srv.Set("big.example.com", records...)
	clock := newFakeClock()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"big.example.com"})
	waitSettled(t, r, "big.example.com")
	wantSnapshot(t, r, "big.example.com", want)
	if n := srv.TCPQueries("big.example.com"); n != 1 {
		t.Errorf("%d queries over TCP, want 1 (the A query; the empty AAAA answer fits UDP)", n)
	}
}

// TestSetNamesForgets: a name no longer wanted leaves the snapshot (with
// a Changed signal); wanted again, it is looked up afresh.
func TestSetNamesForgets(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("a.example.com", dnstest.A("192.0.2.1", 300))
	srv.Set("b.example.com", dnstest.A("192.0.2.2", 300))
	clock := newFakeClock()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"a.example.com", "B.example.com."})
	waitSettled(t, r, "a.example.com")
	waitSettled(t, r, "b.example.com")
	wantSnapshot(t, r, "b.example.com", addrs("192.0.2.2"))

	drain(r)
	r.SetNames([]string{"a.example.com"})
	waitChanged(t, r, "a name dropped")
	wantSnapshot(t, r, "b.example.com", nil)
	wantSnapshot(t, r, "a.example.com", addrs("192.0.2.1"))

	r.SetNames([]string{"a.example.com", "b.example.com"})
	wantSnapshot(t, r, "b.example.com", nil) // no answer yet
	waitLookups(t, r, srv, "b.example.com", 2)
	wantSnapshot(t, r, "b.example.com", addrs("192.0.2.2"))
	if n := srv.Queries("a.example.com"); n != 2 {
		t.Errorf("a.example.com asked %d times, want 2: SetNames must not restart a kept name", n)
	}
}

// TestLearnExactAndWildcard: Learn files under the exact name and under
// the one wildcard that covers it (one label), not under deeper names;
// the resolver's own answers fill wildcards too; learned addresses expire
// at their TTL.
func TestLearnExactAndWildcard(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("a.example.org", dnstest.A("192.0.2.1", 300))
	clock := newFakeClock()
	start := clock.Now()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"*.example.com", "*.example.org", "a.example.org", "exact.test"})
	waitSettled(t, r, "a.example.org")
	waitSettled(t, r, "exact.test")

	wantSnapshot(t, r, "*.example.com", nil) // nothing learned yet
	// The resolver's own answer for a.example.org is one for *.example.org.
	wantSnapshot(t, r, "*.example.org", addrs("192.0.2.1"))
	wantSnapshot(t, r, "exact.test", []netip.Addr{}) // NXDOMAIN

	r.Learn("c.b.example.com", addrs("198.51.100.1"), time.Minute) // two labels deep
	r.Learn("example.com", addrs("198.51.100.2"), time.Minute)     // the parent itself
	r.Learn("x.y.example.org.", addrs("198.51.100.3"), time.Minute)
	wantSnapshot(t, r, "*.example.com", nil)
	wantSnapshot(t, r, "*.example.org", addrs("192.0.2.1"))

	drain(r)
	r.Learn("B.Example.COM.", addrs("198.51.100.4", "2001:db8::4", "198.51.100.4"), time.Minute)
	waitChanged(t, r, "a learned wildcard address")
	wantSnapshot(t, r, "*.example.com", addrs("198.51.100.4", "2001:db8::4"))
	r.Learn("exact.test", addrs("198.51.100.5"), 30*time.Second)
	wantSnapshot(t, r, "exact.test", addrs("198.51.100.5"))
	r.Learn("unwanted.test", addrs("198.51.100.6"), time.Minute)
	if _, ok := r.Snapshot()["unwanted.test"]; ok {
		t.Errorf("an unwanted name was learned")
	}
	if got := expiryOf(r, "*.example.com", netip.MustParseAddr("2001:db8::4")); !got.Equal(start.Add(62 * time.Second)) {
		t.Errorf("learned address expires at +%v, want +1m2s (TTL and grace)", got.Sub(start))
	}

	// Learned addresses expire; the wildcard stays present, empty.
	drain(r)
	clock.Advance(62 * time.Second)
	waitChanged(t, r, "learned addresses' expiry")
	wantSnapshot(t, r, "*.example.com", []netip.Addr{})
	// a.example.org's own answers kept *.example.org's address fresh.
	wantSnapshot(t, r, "*.example.org", addrs("192.0.2.1"))
}

// TestLearnTTLZeroLastsTheFloor: a learned TTL of 0 still counts for
// MinTTL, so the address is seen at all.
func TestLearnTTLZeroLastsTheFloor(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	clock := newFakeClock()
	r := startResolver(t, testConfig(clock, srv))
	r.SetNames([]string{"*.example.net"})
	r.Learn("a.example.net", addrs("192.0.2.3"), 0)
	wantSnapshot(t, r, "*.example.net", addrs("192.0.2.3"))
	drain(r)
	clock.Advance(DefaultMinTTL + DefaultPrefetch)
	waitChanged(t, r, "expiry")
	wantSnapshot(t, r, "*.example.net", []netip.Addr{})
}

// TestConcurrentLookupsBounded: with more due names than
// maxConcurrentLookups and a silent server, never more lookups are in
// flight than the bound, and every name is tried.
func TestConcurrentLookupsBounded(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	var names []string
	for i := range 3 * maxConcurrentLookups {
		name := fmt.Sprintf("n%d.example.com", i)
		srv.Set(name, dnstest.Drop())
		names = append(names, name)
	}
	clock := newFakeClock()
	cfg := testConfig(clock, srv)
	cfg.Timeout = 100 * time.Millisecond
	r := startResolver(t, cfg)
	r.SetNames(names)
	deadline := time.Now().Add(waitLimit)
	most := 0
	for {
		inFlight, tried := 0, 0
		r.mu.Lock()
		for _, e := range r.entries {
			if e.inFlight {
				inFlight++
			}
			if e.failures > 0 {
				tried++
			}
		}
		r.mu.Unlock()
		most = max(most, inFlight)
		if tried == len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d names tried", tried, len(names))
		}
		time.Sleep(time.Millisecond)
	}
	if most > maxConcurrentLookups {
		t.Errorf("%d lookups in flight at once, bound %d", most, maxConcurrentLookups)
	}
	if most == 0 {
		t.Errorf("never saw a lookup in flight")
	}
}

// TestRunStopsAndRefusesASecondRun: Run returns ctx's error when it ends,
// stopping lookups in flight, and a second concurrent Run is refused.
func TestRunStopsAndRefusesASecondRun(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("hang.example.com", dnstest.Drop())
	cfg := testConfig(newFakeClock(), srv)
	cfg.Timeout = time.Hour // only ctx can end the lookup
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.SetNames([]string{"hang.example.com"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(waitLimit)
	for srv.Queries("hang.example.com") < 2 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("no query sent")
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.Run(context.Background()); err == nil {
		t.Errorf("a second Run was not refused")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return with a lookup in flight")
	}
}

// TestNewServersFromResolvConf: without Servers, New reads the
// nameservers of ResolvConf; with none there, it fails.
func TestNewServersFromResolvConf(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/resolv.conf"
	writeFile(t, path, "search svc.cluster.local\nnameserver 10.96.0.10\nnameserver fd00::a\noptions ndots:5\n")
	r, err := New(Config{ResolvConf: path})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53"), netip.MustParseAddrPort("[fd00::a]:53")}
	if got := r.Servers(); !slices.Equal(got, want) {
		t.Errorf("servers %v, want %v", got, want)
	}

	writeFile(t, path, "search example.com\n")
	if _, err := New(Config{ResolvConf: path}); err == nil {
		t.Errorf("New with no nameserver line succeeded")
	}
	if _, err := New(Config{ResolvConf: dir + "/missing"}); err == nil {
		t.Errorf("New with a missing resolv.conf succeeded")
	}
	if _, err := New(Config{Servers: []netip.AddrPort{{}}}); err == nil {
		t.Errorf("New with an invalid server succeeded")
	}
	if _, err := New(Config{Servers: want, MinTTL: time.Hour}); err == nil {
		t.Errorf("New with MinTTL above MaxTTL succeeded")
	}
}

// TestAddressesHeldWhileLookupInFlight: an address whose TTL runs out
// while the lookup that may refresh it is still waiting for the server
// stays, and stays while that lookup fails.
func TestAddressesHeldWhileLookupInFlight(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.Set("zero.example.com", dnstest.A("192.0.2.5", 0))
	clock := newFakeClock()
	start := clock.Now()
	cfg := testConfig(clock, srv)
	cfg.Timeout = time.Second
	r := startResolver(t, cfg)
	r.SetNames([]string{"zero.example.com"})
	next := waitSettled(t, r, "zero.example.com")
	if got, want := expiryOf(r, "zero.example.com", netip.MustParseAddr("192.0.2.5")), start.Add(7*time.Second); !got.Equal(want) {
		t.Fatalf("expires at +%v, want +7s", got.Sub(start))
	}

	srv.Set("zero.example.com", dnstest.Drop())
	clock.Advance(next.Sub(clock.Now())) // +5: the lookup goes out, unanswered
	deadline := time.Now().Add(waitLimit)
	for srv.Queries("zero.example.com") < 4 {
		if time.Now().After(deadline) {
			t.Fatal("second lookup not sent")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Advance(5 * time.Second) // +10: past the expiry, lookup still waiting
	wantSnapshot(t, r, "zero.example.com", addrs("192.0.2.5"))
	waitSettled(t, r, "zero.example.com") // it timed out: failing
	wantSnapshot(t, r, "zero.example.com", addrs("192.0.2.5"))
}
