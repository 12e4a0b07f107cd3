package v1

import (
	"net/netip"
	"testing"
)

// TestObjectNameRoundTrip: each address has one name, which reads back as
// the address; a mapped IPv4 address is named as IPv4.
func TestObjectNameRoundTrip(t *testing.T) {
	for addr, name := range map[string]string{
		"192.0.2.10":              "192.0.2.10",
		"0.0.0.0":                 "0.0.0.0",
		"2001:db8::10":            "2001.0db8.0000.0000.0000.0000.0000.0010",
		"fd00:1:2:3:4:5:6:7":      "fd00.0001.0002.0003.0004.0005.0006.0007",
		"::1":                     "0000.0000.0000.0000.0000.0000.0000.0001",
		"::ffff:192.0.2.10":       "192.0.2.10",
		"ffff:ffff:ffff:ffff::ab": "ffff.ffff.ffff.ffff.0000.0000.0000.00ab",
	} {
		a := netip.MustParseAddr(addr)
		if got := ObjectName(a); got != name {
			t.Errorf("ObjectName(%s) = %q, want %q", addr, got, name)
		}
		if got, err := AddressOf(name); err != nil || got != a.Unmap() {
			t.Errorf("AddressOf(%q) = %v, %v; want %s", name, got, err, a.Unmap())
		}
	}
	for _, name := range []string{"", "node-a", "2001:db8::10", "2001.db8..10", "2001.db8.0.0.0.0.0.10", "2001.0DB8.0000.0000.0000.0000.0000.0010",
		"0000.0000.0000.0000.0000.ffff.c000.020a", "192.0.2.010", "fe80.0000.0000.0000.0000.0000.0000.0001%eth0"} {
		if a, err := AddressOf(name); err == nil {
			t.Errorf("AddressOf(%q) = %v, want an error", name, a)
		}
	}
}
