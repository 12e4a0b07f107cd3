package dnsresolve

import "time"

// refreshDelay is the wait from an answer to the next lookup of the name:
// the answer's TTL (the least of its records'), clamped to [MinTTL,
// MaxTTL], less Prefetch, but never under MinTTL. A TTL of 0 gives MinTTL
// (5 s by default), as the reference re-resolves.
//
// An answer that differs from the one before (varies) is followed by a
// lookup after MinTTL whatever its TTL: a name whose answers vary (a
// round-robin server answering subsets, cache replicas holding different
// answers, a change under way) is sampled at MinTTL, so that every subset
// a cache may hold is seen within its TTL, and the set holds their union.
// Back to the TTL once two answers in a row agree.
//
// It follows the last answer's TTL, not the earliest expiry among every
// address the name holds: an address the last answer left out keeps its
// old expiry, which would call for a lookup right away, again and again,
// until it expires.
func refreshDelay(ttl time.Duration, varies bool, c Config) time.Duration {
	if varies {
		return c.MinTTL
	}
	d := min(max(ttl, c.MinTTL), c.MaxTTL) - c.Prefetch
	return max(d, c.MinTTL)
}

// retryDelay is the wait after the attempt-th failed lookup in a row
// (attempt ≥ 1): RetryInterval for the first RetryAttempts failures, then
// doubling from there up to MaxBackoff. With the defaults: 5 s ten times,
// then 10 s, 20 s, 40 s, 80 s, and 2 min from then on.
func retryDelay(attempt int, c Config) time.Duration {
	d := c.RetryInterval
	for i := c.RetryAttempts; i < attempt && d < c.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.MaxBackoff)
}

// addressLifetime is how long an address stays after an answer (or Learn)
// gave it with ttl: the TTL, at least MinTTL (an address with TTL 0 would
// otherwise never be seen) and at most MaxAddressTTL, plus Prefetch as a
// grace. The grace covers the lookup that refreshes it (sent Prefetch
// before the TTL runs out, or right at MinTTL for a shorter TTL), so an
// address given again never blinks out, not even where it is filed under
// a wildcard; and a cache that got the same answer a moment after the
// resolver holds it a moment longer.
func addressLifetime(ttl time.Duration, c Config) time.Duration {
	return min(max(ttl, c.MinTTL), c.MaxAddressTTL) + c.Prefetch
}

// lookupTTL is the TTL that schedules the next lookup after the answers
// to one lookup (A and AAAA): the least known one. A negative answer
// without a SOA (unknownTTL) does not count, so that an IPv4-only name
// whose server sends no SOA with its empty AAAA answer is not asked every
// MinTTL; with no known TTL at all it is 0, the floor.
func lookupTTL(answers []answer) time.Duration {
	ttl := unknownTTL
	for _, a := range answers {
		if a.ttl != unknownTTL && (ttl == unknownTTL || a.ttl < ttl) {
			ttl = a.ttl
		}
	}
	return max(ttl, 0)
}
