package endpoints

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func slice(addressType discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{AddressType: addressType, Endpoints: eps}
}

func ep(node string, addrs ...string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: addrs}
	if node != "" {
		e.NodeName = &node
	}
	return e
}

func TestOnClusterNetwork(t *testing.T) {
	notReady := ep("n2", "10.244.2.7")
	notReady.Conditions.Ready = new(bool)
	all := []*discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, ep("n1", "10.244.1.5"), ep("n1", "172.18.0.11"), notReady, ep("", "10.244.3.3")),
		slice(discoveryv1.AddressTypeIPv4, ep("n1", "10.244.1.5"), ep("n2", "not-an-ip")),
		slice(discoveryv1.AddressTypeIPv6, ep("n1", "fd00:10:244:1::5"), ep("n1", "::ffff:10.244.1.9")),
		slice(discoveryv1.AddressTypeFQDN, ep("n1", "example.com")),
		nil,
	}
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
	got := OnClusterNetwork(all, pods)
	want := []Endpoint{
		{netip.MustParseAddr("10.244.1.5"), "n1"},
		{netip.MustParseAddr("10.244.1.9"), "n1"}, // IPv4-mapped IPv6 counts as IPv4
		{netip.MustParseAddr("10.244.2.7"), "n2"}, // not ready still counts
		{netip.MustParseAddr("10.244.3.3"), ""},
		{netip.MustParseAddr("fd00:10:244:1::5"), "n1"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("OnClusterNetwork =\n%v\nwant\n%v", got, want)
	}
	// Without pod CIDRs every address counts, host-networked ones too.
	if all := OnClusterNetwork(all, nil); len(all) != 6 {
		t.Fatalf("without pod CIDRs: %v", all)
	}
	if got := OnClusterNetwork(nil, pods); len(got) != 0 {
		t.Fatalf("no slices: %v", got)
	}
}

func TestLoadBalancerIPs(t *testing.T) {
	cases := []struct {
		ingress  []string
		v4, v6   string
		describe string
	}{
		{[]string{"192.0.2.1"}, "192.0.2.1", "", "one IPv4"},
		{[]string{"192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2"}, "192.0.2.1", "2001:db8::1", "first of each family"},
		{[]string{"2001:db8::1", "192.0.2.9"}, "192.0.2.9", "2001:db8::1", "order across families does not matter"},
		{[]string{"", "bogus", "::ffff:192.0.2.7"}, "192.0.2.7", "", "hostname-only and bad entries skipped, mapped v4 unmapped"},
		{nil, "", "", "none"},
	}
	for _, tc := range cases {
		v4, v6 := LoadBalancerIPs(lbService(tc.ingress...))
		if addrString(v4) != tc.v4 || addrString(v6) != tc.v6 {
			t.Errorf("%s: got %v %v, want %s %s", tc.describe, v4, v6, tc.v4, tc.v6)
		}
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// lbService is a Service whose status lists ingress entries with ips.
func lbService(ips ...string) *corev1.Service {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}
