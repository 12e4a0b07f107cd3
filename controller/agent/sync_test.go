package agent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/egressflow/egressflow/controller/dataplane"
)

func TestStaleTranslations(t *testing.T) {
	a := netip.MustParseAddr
	host := func(lb string, eps ...string) dataplane.Service {
		s := dataplane.Service{Key: "ns/" + lb, Role: dataplane.RoleHost, LoadBalancerIPs: []netip.Addr{a(lb)}}
		for _, ep := range eps {
			s.Endpoints = append(s.Endpoints, a(ep))
		}
		return s
	}
	before := dataplane.State{Services: []dataplane.Service{
		host("192.0.2.1", "10.0.0.1", "10.0.0.2", "10.0.0.3"),
		host("192.0.2.2", "10.0.0.9"),
		{Key: "ns/steered", Role: dataplane.RoleSteer, Endpoints: []netip.Addr{a("10.0.0.7")}},
	}}
	after := dataplane.State{Services: []dataplane.Service{
		host("192.0.2.1", "10.0.0.1"), // 10.0.0.2 gone, 10.0.0.3 moves below
		host("192.0.2.5", "10.0.0.3"), // new LB IP for it
		host("192.0.2.2", "10.0.0.9"), // unchanged
	}}
	want := []netip.Addr{a("10.0.0.2"), a("10.0.0.3")}
	if got := StaleTranslations(before, after); !slices.Equal(got, want) {
		t.Fatalf("StaleTranslations = %v, want %v (steered endpoints have no translation here)", got, want)
	}
	if got := StaleTranslations(after, after); len(got) != 0 {
		t.Fatalf("no change, yet %v", got)
	}
}
