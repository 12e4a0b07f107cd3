package v1

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestEgressIPAddresses: spec.egressIPs is read as the CRD admits it
// (isIP: no zone, no IPv4-mapped IPv6), each address once however it is
// written, in spec order.
func TestEgressIPAddresses(t *testing.T) {
	spec := EgressIPSpec{EgressIPs: []string{"2001:DB8::1", "192.0.2.1", "2001:db8:0::1", "fe80::1%eth0",
		"::ffff:192.0.2.2", "192.0.2.0/24", "", "nonsense", "192.0.2.1", "198.51.100.7"}}
	want := []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")}
	if got := spec.Addresses(); !slices.Equal(got, want) {
		t.Errorf("Addresses() = %v, want %v", got, want)
	}
	for _, s := range []string{"fe80::1%eth0", "::ffff:192.0.2.2", "192.0.2.0/24", ""} {
		if a, ok := ParseEgressIP(s); ok {
			t.Errorf("ParseEgressIP(%q) = %v, want refused", s, a)
		}
	}
}

func TestParseEgressIPUnheld(t *testing.T) {
	for in, want := range map[string]EgressIPUnheld{"": EgressIPUnheldDrop, "drop": EgressIPUnheldDrop, "node-ip": EgressIPUnheldNodeIP} {
		if got, err := ParseEgressIPUnheld(in); err != nil || got != want {
			t.Errorf("ParseEgressIPUnheld(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Drop", "nodeip", "node", "$(EGRESSIP_UNHELD)"} {
		if _, err := ParseEgressIPUnheld(in); err == nil || !strings.Contains(err.Error(), `"drop"`) {
			t.Errorf("ParseEgressIPUnheld(%q): %v, want an error naming the values", in, err)
		}
	}
}
