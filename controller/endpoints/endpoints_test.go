package endpoints

import (
	"net/netip"
	"slices"
	"testing"

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
