package v1

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/controller/reasons"
)

func validSpec() EgressRouterSpec {
	return EgressRouterSpec{
		Addresses:        []EgressRouterAddress{{IP: "192.0.2.10/24", Gateway: "192.0.2.1"}, {IP: "2001:db8::10/64"}},
		NetworkInterface: EgressRouterInterface{Macvlan: MacvlanConfig{Master: "eth1"}},
		Redirect: &RedirectConfig{
			RedirectRules: []L4RedirectRule{
				{DestinationIP: "203.0.113.10", Port: 80, Protocol: ProtocolTypeTCP},
				{DestinationIP: "2001:db8:ff::53", Port: 53, Protocol: ProtocolTypeUDP, TargetPort: 5353},
				{DestinationIP: "203.0.113.12", Port: 53, Protocol: ProtocolTypeTCP},
			},
			FallbackIP: "203.0.113.99",
		},
	}
}

// TestReadValid: every field read, the target port defaulting to the port,
// the mode and macvlan mode to their defaults.
func TestReadValid(t *testing.T) {
	got, problems := validSpec().Read()
	want := Redirect{
		Addresses: []RouterAddress{
			{Prefix: netip.MustParsePrefix("192.0.2.10/24"), Gateway: netip.MustParseAddr("192.0.2.1")},
			{Prefix: netip.MustParsePrefix("2001:db8::10/64")},
		},
		Rules: []RedirectRule{
			{Protocol: ProtocolTypeTCP, Port: 80, TargetPort: 80, Destination: netip.MustParseAddr("203.0.113.10")},
			{Protocol: ProtocolTypeUDP, Port: 53, TargetPort: 5353, Destination: netip.MustParseAddr("2001:db8:ff::53")},
			{Protocol: ProtocolTypeTCP, Port: 53, TargetPort: 53, Destination: netip.MustParseAddr("203.0.113.12")},
		},
		Fallback: netip.MustParseAddr("203.0.113.99"),
		Master:   "eth1",
	}
	if len(problems) != 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("Read: %+v, %v\nwant %+v", got, problems, want)
	}
	if a, ok := got.Address(true); !ok || a.Prefix.Addr() != netip.MustParseAddr("2001:db8::10") {
		t.Errorf("Address(IPv6): %v, %v", a, ok)
	}
	v6only := EgressRouterSpec{Addresses: []EgressRouterAddress{{IP: "2001:db8::10/64"}}, Redirect: &RedirectConfig{FallbackIP: "2001:db8::99"}}
	if r, problems := v6only.Read(); len(problems) != 0 || r.Fallback != netip.MustParseAddr("2001:db8::99") || len(r.Rules) != 0 {
		t.Errorf("IPv6 fallback only: %+v, %v", r, problems)
	}
	if _, ok := (Redirect{}).Address(false); ok {
		t.Error("a router without addresses has an IPv4 address")
	}
}

// TestReadProblems: each way a stored spec can be unservable gives one
// problem naming its field, with its reason.
func TestReadProblems(t *testing.T) {
	cases := []struct {
		name   string
		change func(*EgressRouterSpec)
		reason reasons.Reason
		want   string
	}{
		{"mode", func(s *EgressRouterSpec) { s.Mode = "HTTPProxy" }, reasons.InvalidRule, `spec.mode: "HTTPProxy" is not served`},
		{"macvlan-mode", func(s *EgressRouterSpec) { s.NetworkInterface.Macvlan.Mode = "Source" }, reasons.InvalidRule, "spec.networkInterface.macvlan.mode"},
		{"master", func(s *EgressRouterSpec) { s.NetworkInterface.Macvlan.Master = "eth0/1" }, reasons.InvalidRule, "spec.networkInterface.macvlan.master"},
		{"master-long", func(s *EgressRouterSpec) { s.NetworkInterface.Macvlan.Master = strings.Repeat("e", 16) }, reasons.InvalidRule, "is not an interface name"},
		{"no-addresses", func(s *EgressRouterSpec) { s.Addresses = nil }, reasons.InvalidAddress, "spec.addresses: none given"},
		{"not-cidr", func(s *EgressRouterSpec) { s.Addresses[0].IP = "192.0.2.10" }, reasons.InvalidAddress, "spec.addresses[0].ip"},
		{"mapped", func(s *EgressRouterSpec) { s.Addresses[1].IP = "::ffff:192.0.2.10/120" }, reasons.InvalidAddress, "spec.addresses[1].ip"},
		{"gateway-family", func(s *EgressRouterSpec) { s.Addresses[0].Gateway = "2001:db8::1" }, reasons.InvalidAddress, "spec.addresses[0].gateway"},
		{"gateway-garbage", func(s *EgressRouterSpec) { s.Addresses[1].Gateway = "gw" }, reasons.InvalidAddress, "spec.addresses[1].gateway"},
		{"gateway-outside", func(s *EgressRouterSpec) { s.Addresses[0].Gateway = "192.0.3.1" }, reasons.InvalidAddress, "spec.addresses[0].gateway: 192.0.3.1 is not another address of 192.0.2.10/24's subnet"},
		{"gateway-itself", func(s *EgressRouterSpec) { s.Addresses[1].Gateway = "2001:db8::10" }, reasons.InvalidAddress, "spec.addresses[1].gateway: 2001:db8::10 is not another address"},
		{"two-v4", func(s *EgressRouterSpec) { s.Addresses[1].IP = "192.0.2.11/24" }, reasons.InvalidAddress, "spec.addresses[1].ip: 192.0.2.11/24 is a second address of its family"},
		{"no-redirect", func(s *EgressRouterSpec) { s.Redirect = nil }, reasons.InvalidRule, "spec.redirect: mode Redirect needs it"},
		{"empty-redirect", func(s *EgressRouterSpec) { s.Redirect = &RedirectConfig{} }, reasons.InvalidRule, "neither a fallbackIP nor a rule"},
		{"protocol", func(s *EgressRouterSpec) { s.Redirect.RedirectRules[1].Protocol = "tcp" }, reasons.InvalidRule, "spec.redirect.redirectRules[1].protocol"},
		{"port-zero", func(s *EgressRouterSpec) { s.Redirect.RedirectRules[0].Port = 0 }, reasons.InvalidRule, "spec.redirect.redirectRules[0].port: 0"},
		{"port-high", func(s *EgressRouterSpec) { s.Redirect.RedirectRules[0].Port = 65536 }, reasons.InvalidRule, "spec.redirect.redirectRules[0].port: 65536"},
		{"target-high", func(s *EgressRouterSpec) { s.Redirect.RedirectRules[2].TargetPort = 65536 }, reasons.InvalidRule, "spec.redirect.redirectRules[2].targetPort"},
		{"duplicate", func(s *EgressRouterSpec) { s.Redirect.RedirectRules[2].Port = 80 }, reasons.InvalidRule, "spec.redirect.redirectRules[2]: a second rule for TCP port 80"},
		{"destination", func(s *EgressRouterSpec) { s.Redirect.RedirectRules[0].DestinationIP = "203.0.113.0/24" }, reasons.InvalidRule, "spec.redirect.redirectRules[0].destinationIP"},
		{"destination-family", func(s *EgressRouterSpec) { s.Addresses = s.Addresses[:1] }, reasons.WrongFamily, "spec.redirect.redirectRules[1].destinationIP: 2001:db8:ff::53 has no address of its family"},
		{"fallback", func(s *EgressRouterSpec) { s.Redirect.FallbackIP = "example.com" }, reasons.InvalidRule, "spec.redirect.fallbackIP"},
		{"fallback-family", func(s *EgressRouterSpec) { s.Addresses = s.Addresses[1:]; s.Redirect.RedirectRules = nil },
			reasons.WrongFamily, "spec.redirect.fallbackIP: 203.0.113.99 has no address of its family"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := validSpec()
			c.change(&spec)
			_, problems := spec.Read()
			if len(problems) != 1 || problems[0].Reason != c.reason || !strings.Contains(problems[0].Message, c.want) {
				t.Fatalf("problems %+v; want one %s containing %q", problems, c.reason, c.want)
			}
		})
	}
}
