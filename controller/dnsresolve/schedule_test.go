package dnsresolve

import (
	"testing"
	"time"
)

// TestRetryDelay: with the defaults, 5 s for ten failures, then doubling
// to the 2-minute cap.
func TestRetryDelay(t *testing.T) {
	c := Config{}.withDefaults()
	want := map[int]time.Duration{
		1: 5 * time.Second, 2: 5 * time.Second, 10: 5 * time.Second,
		11: 10 * time.Second, 12: 20 * time.Second, 13: 40 * time.Second, 14: 80 * time.Second,
		15: 2 * time.Minute, 16: 2 * time.Minute, 1000: 2 * time.Minute, 1 << 30: 2 * time.Minute,
	}
	for attempt, d := range want {
		if got := retryDelay(attempt, c); got != d {
			t.Errorf("retryDelay(%d) = %v, want %v", attempt, got, d)
		}
	}
	// The schedule never shrinks.
	prev := time.Duration(0)
	for attempt := 1; attempt < 40; attempt++ {
		d := retryDelay(attempt, c)
		if d < prev {
			t.Errorf("retryDelay(%d) = %v, below attempt %d's %v", attempt, d, attempt-1, prev)
		}
		prev = d
	}
}

// TestRefreshDelay: the TTL less the prefetch, within [MinTTL, MaxTTL];
// MinTTL when the answer varied.
func TestRefreshDelay(t *testing.T) {
	c := Config{}.withDefaults()
	for _, tc := range []struct {
		ttl    time.Duration
		varies bool
		want   time.Duration
	}{
		{0, false, 5 * time.Second},                 // TTL 0: the floor, as the reference
		{time.Second, false, 5 * time.Second},       // below the floor
		{6 * time.Second, false, 5 * time.Second},   // 6 − 2 is under the floor
		{60 * time.Second, false, 58 * time.Second}, // TTL less prefetch
		{30 * time.Minute, false, 30*time.Minute - 2*time.Second},
		{24 * time.Hour, false, 30*time.Minute - 2*time.Second}, // the ceiling
		{time.Hour, true, 5 * time.Second},                      // a varying answer is sampled
	} {
		if got := refreshDelay(tc.ttl, tc.varies, c); got != tc.want {
			t.Errorf("refreshDelay(%v, %v) = %v, want %v", tc.ttl, tc.varies, got, tc.want)
		}
	}
}

// TestAddressLifetime: the TTL within [MinTTL, MaxAddressTTL], plus the
// grace; it always outlasts the lookup that refreshes the address.
func TestAddressLifetime(t *testing.T) {
	c := Config{}.withDefaults()
	for ttl, want := range map[time.Duration]time.Duration{
		0:                7 * time.Second,
		60 * time.Second: 62 * time.Second,
		48 * time.Hour:   24*time.Hour + 2*time.Second,
	} {
		if got := addressLifetime(ttl, c); got != want {
			t.Errorf("addressLifetime(%v) = %v, want %v", ttl, got, want)
		}
	}
	for ttl := time.Duration(0); ttl < time.Hour; ttl += 700 * time.Millisecond {
		if life, next := addressLifetime(ttl, c), refreshDelay(ttl, false, c); life <= next {
			t.Fatalf("TTL %v: the address lives %v, not past the next lookup at %v", ttl, life, next)
		}
	}
}

// TestLookupTTL: the least known TTL of a lookup's answers; a negative
// answer without SOA does not count; none known is 0.
func TestLookupTTL(t *testing.T) {
	pos := answer{ttl: 300 * time.Second}
	negSOA := answer{negative: true, ttl: 60 * time.Second}
	negNoSOA := answer{negative: true, ttl: unknownTTL}
	for _, tc := range []struct {
		answers []answer
		want    time.Duration
	}{
		{[]answer{pos, negSOA}, 60 * time.Second},
		{[]answer{pos, negNoSOA}, 300 * time.Second},
		{[]answer{negNoSOA, negNoSOA}, 0},
		{[]answer{{ttl: 0}, pos}, 0},
		{nil, 0},
	} {
		if got := lookupTTL(tc.answers); got != tc.want {
			t.Errorf("lookupTTL(%v) = %v, want %v", tc.answers, got, tc.want)
		}
	}
}

// TestWildcardKey: the one wildcard covering a name replaces its first
// label; a wildcard covers itself; a one-label name has none.
func TestWildcardKey(t *testing.T) {
	for in, want := range map[string]string{
		"a.example.com":   "*.example.com",
		"b.a.example.com": "*.a.example.com",
		"example.com":     "*.com",
		"*.example.com":   "*.example.com",
		"localhost":       "",
		"":                "",
		"a.":              "",
	} {
		if got := wildcardKey(in); got != want {
			t.Errorf("wildcardKey(%q) = %q, want %q", in, got, want)
		}
	}
}
