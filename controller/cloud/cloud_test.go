package cloud

import (
	"net/netip"
	"testing"
)

// TestNext: a move releases before it assigns; a deletion only releases.
func TestNext(t *testing.T) {
	for _, tc := range []struct {
		desired, holder string
		action          Action
		on              string
	}{
		{"eni-a", "", Assign, "eni-a"},
		{"eni-a", "eni-a", Settled, ""},
		{"eni-b", "eni-a", Release, "eni-a"},
		{"", "eni-a", Release, "eni-a"},
		{"", "", Settled, ""},
	} {
		if action, on := Next(tc.desired, tc.holder); action != tc.action || on != tc.on {
			t.Errorf("Next(%q, %q) = %v %q, want %v %q", tc.desired, tc.holder, action, on, tc.action, tc.on)
		}
	}
}

// TestNodeConfig: the capacity is the slots left once the addresses
// egressflow does not manage, the primary among them, are counted out.
func TestNodeConfig(t *testing.T) {
	a := netip.MustParseAddr
	iface := Interface{ID: "eni-1", Subnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2600:1f18::/64")},
		PerInterfaceIPv4: 10, PerInterfaceIPv6: 2,
		Addresses: []netip.Addr{a("10.0.0.10"), a("10.0.0.20"), a("10.0.0.21"), a("2600:1f18::5"), a("2600:1f18::6"), a("2600:1f18::7")}}
	managed := map[netip.Addr]bool{a("10.0.0.21"): true, a("2600:1f18::7"): true}
	cfg := NodeConfig(iface, func(x netip.Addr) bool { return managed[x] })
	if cfg.Interface != "eni-1" || cfg.IfAddr.IPv4 != "10.0.0.0/24" || cfg.IfAddr.IPv6 != "2600:1f18::/64" || cfg.Capacity.IP != nil {
		t.Errorf("config %+v", cfg)
	}
	// IPv4: 10 - primary - one other = 8. IPv6: 2 - two others = 0, never
	// below.
	if *cfg.Capacity.IPv4 != 8 || *cfg.Capacity.IPv6 != 0 {
		t.Errorf("capacity %d/%d, want 8/0", *cfg.Capacity.IPv4, *cfg.Capacity.IPv6)
	}
}
