package conntrack_test

import (
	"testing"

	"github.com/egressflow/egressflow/conntrack"
)

// TestZonesReserved checks that each API has a zone of its own, clear of
// the kernel's default zone and of ovn-kubernetes' 64000.
func TestZonesReserved(t *testing.T) {
	zones := map[string]uint16{
		"SNAT": conntrack.SNATZone, "Firewall": conntrack.FirewallZone,
		"ExternalRoute": conntrack.ExternalRouteZone, "Router": conntrack.RouterZone, "RouterSNAT": conntrack.RouterSNATZone, "EgressIP": conntrack.EgressIPZone,
	}
	owner := map[uint16]string{0: "the kernel's default", 64000: "ovn-kubernetes"}
	for name, z := range zones {
		if other, ok := owner[z]; ok {
			t.Errorf("zone %d of %s is %s's", z, name, other)
		}
		owner[z] = name
	}
}
