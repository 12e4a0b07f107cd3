package v1

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// TestEgressIPConfigRoundTrip: what FormatEgressIPConfig writes,
// ParseEgressIPConfig reads back, in OpenShift's JSON.
func TestEgressIPConfigRoundTrip(t *testing.T) {
	v4, v6 := 14, 15
	cfg := NodeEgressIPConfig{Interface: "eni-0a1b", IfAddr: EgressIPConfigIfAddr{IPv4: "10.0.128.0/18", IPv6: "2600:1f18::/64"},
		Capacity: EgressIPConfigCapacity{IPv4: &v4, IPv6: &v6}}
	value := FormatEgressIPConfig(cfg)
	if want := `[{"interface":"eni-0a1b","ifaddr":{"ipv4":"10.0.128.0/18","ipv6":"2600:1f18::/64"},"capacity":{"ipv4":14,"ipv6":15}}]`; value != want {
		t.Errorf("formatted %s, want %s", value, want)
	}
	got, subnets, err := ParseEgressIPConfig(value)
	if err != nil || !reflect.DeepEqual(got, cfg) {
		t.Errorf("read back %+v (%v), want %+v", got, err, cfg)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("10.0.128.0/18"), netip.MustParsePrefix("2600:1f18::/64")}; !reflect.DeepEqual(subnets, want) {
		t.Errorf("subnets %v, want %v", subnets, want)
	}
	// A host address is read as its subnet; a zone is refused.
	if _, subnets, err := ParseEgressIPConfig(`[{"ifaddr":{"ipv4":"10.0.128.7/18"},"capacity":{"ip":3}}]`); err != nil || subnets[0] != netip.MustParsePrefix("10.0.128.0/18") {
		t.Errorf("host address: %v, %v", subnets, err)
	}
	if _, _, err := ParseEgressIPConfig(`[{"ifaddr":{"ipv6":"fe80::1%eth0/64"}}]`); err == nil || !strings.Contains(err.Error(), "ifaddr.ipv6") {
		t.Errorf("zoned prefix: %v, want an error naming ifaddr.ipv6", err)
	}
}
