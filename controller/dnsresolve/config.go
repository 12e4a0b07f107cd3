package dnsresolve

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Defaults of Config. Each trades freshness or robustness against load.
const (
	// DefaultResolvConf is read for nameservers when Config.Servers is
	// empty. In the agent's pod it names the cluster DNS (CoreDNS), which is
	// what the pods ask too, so both get their answers from the same cache.
	DefaultResolvConf = "/etc/resolv.conf"

	// DNSPort is the port of every nameserver read from a resolv.conf.
	DNSPort = 53

	// DefaultTimeout bounds one query to one server (UDP, and the TCP retry
	// of a truncated reply each get their own). Shorter notices a dead
	// server sooner and moves on to the next; longer waits out a slow
	// upstream recursion instead of counting it as an error.
	DefaultTimeout = 3 * time.Second

	// DefaultMinTTL is the floor of every TTL: a name whose TTL is 0 is
	// asked again every 5 s (the reference's figure), and an address with
	// TTL 0 stays at least this long after it was last seen. Lower follows
	// fast-changing names more closely at more queries per name.
	DefaultMinTTL = 5 * time.Second

	// DefaultMaxTTL is the ceiling of the re-query interval: a name is
	// asked again at least every 30 min whatever its TTL (the reference's
	// figure), so a change its long TTL hides is noticed within that time.
	DefaultMaxTTL = 30 * time.Minute

	// DefaultMaxAddressTTL caps how long an address stays after it was last
	// seen, whatever TTL it came with. A day is the usual ceiling of a
	// recursive cache (unbound's cache-max-ttl), so no cache the pods
	// use holds it longer; a lower cap forgets removed addresses sooner at
	// the risk of dropping one a cache still hands out.
	DefaultMaxAddressTTL = 24 * time.Hour

	// DefaultRetryInterval is the wait after a failed lookup (timeout,
	// SERVFAIL, REFUSED, a network error), for the first
	// DefaultRetryAttempts failures in a row: the reference's 5 s. Shorter
	// recovers sooner from a blip and loads a failing server more.
	DefaultRetryInterval = 5 * time.Second

	// DefaultRetryAttempts is how many failures in a row are retried at
	// RetryInterval before the wait doubles (the reference's ten).
	DefaultRetryAttempts = 10

	// DefaultMaxBackoff caps the doubling wait after RetryAttempts
	// failures: a name that keeps failing is still asked every 2 min (the
	// reference's cap), so it recovers within that time once the server
	// does.
	DefaultMaxBackoff = 2 * time.Minute

	// DefaultPrefetch is how long before the last answer's TTL runs out
	// the name is asked again, so that the new answer is in place before a
	// cache that fetched at the same moment (CoreDNS's) fetches its own
	// (the wait never drops below MinTTL); and the grace an address gets
	// past its TTL, so that the lookup refreshing it ends before it
	// expires. Larger is earlier and keeps addresses longer, at slightly
	// more queries.
	DefaultPrefetch = 2 * time.Second

	// maxConcurrentLookups bounds the names being looked up at once (each
	// lookup is an A and an AAAA query in parallel). More refreshes a long
	// list faster after start; fewer spares the DNS server a burst.
	maxConcurrentLookups = 8
)

// Config tunes a Resolver. A zero field takes the default of the same name.
type Config struct {
	// Servers are the nameservers, asked in order: the next one when a
	// query times out or gets SERVFAIL, REFUSED or another error code.
	// Empty: those of ResolvConf.
	Servers []netip.AddrPort
	// ResolvConf is read for `nameserver` lines (port 53) when Servers is
	// empty. Default DefaultResolvConf.
	ResolvConf string
	// Timeout bounds one query to one server.
	Timeout time.Duration
	// MinTTL and MaxTTL clamp the interval between two lookups of a name;
	// MinTTL is also the least time an address stays after it was seen.
	MinTTL, MaxTTL time.Duration
	// MaxAddressTTL caps how long an address stays after it was seen.
	MaxAddressTTL time.Duration
	// RetryInterval is the wait after each of the first RetryAttempts
	// failures in a row; then the wait doubles up to MaxBackoff.
	RetryInterval time.Duration
	RetryAttempts int
	MaxBackoff    time.Duration
	// Prefetch: how long before the last answer expires a name is asked
	// again (never sooner than MinTTL after the answer), and the grace an
	// address gets past its TTL.
	Prefetch time.Duration
	// Clock schedules lookups and expiries; nil is the real clock. Query
	// timeouts are always real time.
	Clock Clock
}

// withDefaults returns c with every zero field set to its default; Servers
// is left to New.
func (c Config) withDefaults() Config {
	if c.ResolvConf == "" {
		c.ResolvConf = DefaultResolvConf
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MinTTL <= 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.MaxAddressTTL <= 0 {
		c.MaxAddressTTL = DefaultMaxAddressTTL
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.RetryAttempts <= 0 {
		c.RetryAttempts = DefaultRetryAttempts
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Prefetch <= 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return c
}

// validate reports settings that contradict each other.
func (c Config) validate() error {
	if c.MinTTL > c.MaxTTL {
		return fmt.Errorf("MinTTL %v is above MaxTTL %v", c.MinTTL, c.MaxTTL)
	}
	if c.MinTTL > c.MaxAddressTTL {
		return fmt.Errorf("MinTTL %v is above MaxAddressTTL %v", c.MinTTL, c.MaxAddressTTL)
	}
	if c.RetryInterval > c.MaxBackoff {
		return fmt.Errorf("RetryInterval %v is above MaxBackoff %v", c.RetryInterval, c.MaxBackoff)
	}
	for _, s := range c.Servers {
		if !s.IsValid() || s.Port() == 0 {
			return fmt.Errorf("server %v: not an address and port", s)
		}
	}
	return nil
}

// ReadResolvConf returns the nameservers of the resolv.conf at path, on
// port 53.
func ReadResolvConf(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	servers, err := ParseResolvConf(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return servers, nil
}

// ParseResolvConf returns the addresses of the `nameserver` lines, in
// order, on port 53. IPv6 addresses may carry a zone (fe80::1%eth0).
// Comments (# or ;) and every other keyword (search, options, domain) are
// ignored: names are asked as absolute names, once per server, and a line
// whose address does not parse is skipped, as the C library does. Unlike
// the C library, every nameserver counts, not only the first three.
func ParseResolvConf(r io.Reader) ([]netip.AddrPort, error) {
	var servers []netip.AddrPort
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		line := scanner.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		addr, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue
		}
		servers = append(servers, netip.AddrPortFrom(addr, DNSPort))
	}
	return servers, scanner.Err()
}
