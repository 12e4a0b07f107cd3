package hostfirewall

import (
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/egressflow/egressflow/controller/dataplane"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// local are the own addresses of the node of twoNamespaces.
var local = addrs("172.18.0.11", "fd00:172:18::11")

// twoNamespaces is a node's TableFirewall with a dual-stack namespace whose
// rules have ports, no ports, both families and one family, and a rule
// that covers none of the node's addresses; an IPv4-only namespace with
// one IPv6 rule (which it has no pod to judge); and a namespace whose one
// rule covers none of the node's addresses.
var twoNamespaces = dataplane.Firewall{
	Exempt: prefixes("10.96.0.0/12", "10.244.0.0/16", "fd00:10:244::/48"),
	Namespaces: []dataplane.FirewallNamespace{
		{Key: "EgressFirewall/shop/default", ID: 1, Sources: addrs("10.244.1.2", "10.244.1.3", "fd00:10:244:1::2"),
			Rules: []dataplane.FirewallRule{
				{Index: 0, Destinations: prefixes("172.18.0.11/32", "fd00:172:18::11/128"),
					Ports: []dataplane.FirewallPort{{Protocol: 6, Port: 22}, {Protocol: 17, Port: 53}}},
				{Index: 1, Deny: true, Destinations: prefixes("172.18.0.0/24")},
				// rule 2 was skipped for a problem
				{Index: 3, Deny: true, Destinations: prefixes("::/0"), Ports: []dataplane.FirewallPort{{Protocol: 132, Port: 9}}},
				{Index: 4, Deny: true, Destinations: prefixes("192.0.2.0/24", "198.51.100.7/32")},
			}},
		{Key: "EgressFirewall/v4only/default", ID: 2, Sources: addrs("10.244.1.9"),
			Rules: []dataplane.FirewallRule{{Index: 0, Deny: true, Destinations: prefixes("fd00:172:18::11/128")}}},
		{Key: "EgressFirewall/elsewhere/default", ID: 3, Sources: addrs("10.244.1.10"),
			Rules: []dataplane.FirewallRule{{Index: 0, Deny: true, Destinations: prefixes("203.0.113.0/24")}}},
	},
}

// twoRefusals are a node's refusals: an IPv4 address with TCP and UDP
// rules (two TCP ports), and an IPv6 one with no rule of its family.
var twoRefusals = []dataplane.RouterRefusal{
	{Address: netip.MustParseAddr("172.18.0.60"), Ports: map[uint8][]uint16{6: {80, 443}, 17: {53}}},
	{Address: netip.MustParseAddr("fd00:172:18::60"), Ports: map[uint8][]uint16{}},
}

// TestTable compares the transaction with the table written out by hand
// from the rules above: shop's rules 0, 1 and 3 (rule 4 covers no address
// of the node's), and no chain for v4only or elsewhere; and the refusals,
// each protocol of each address, on a port no rule of it names.
func TestTable(t *testing.T) {
	want := strings.Join([]string{
		`add table inet egressflow`,
		`delete table inet egressflow`,
		`add table inet egressflow { comment "egressflow-agent: EgressFirewall for pods' packets to their own node, EgressRouter refusals" ; }`,
		`add chain inet egressflow router-refusals { type filter hook forward priority 0 ; comment "new connections to an EgressRouter's address on a port without a rule or fallback" ; }`,
		`add rule inet egressflow router-refusals ct state new ip daddr 172.18.0.60 tcp dport != { 80, 443 } reject with tcp reset`,
		`add rule inet egressflow router-refusals ct state new ip daddr 172.18.0.60 udp dport != { 53 } reject`,
		`add rule inet egressflow router-refusals ct state new ip daddr 172.18.0.60 meta l4proto sctp reject`,
		`add rule inet egressflow router-refusals ct state new ip6 daddr fd00:172:18::60 meta l4proto tcp reject with tcp reset`,
		`add rule inet egressflow router-refusals ct state new ip6 daddr fd00:172:18::60 meta l4proto udp reject`,
		`add rule inet egressflow router-refusals ct state new ip6 daddr fd00:172:18::60 meta l4proto sctp reject`,
		`add chain inet egressflow pods-to-node { type filter hook input priority 0 ; comment "local pods' packets to this node's addresses" ; }`,
		`add rule inet egressflow pods-to-node ct direction reply accept`,
		`add rule inet egressflow pods-to-node ip6 daddr { fe80::/10, ff00::/8 } accept`,
		`add rule inet egressflow pods-to-node ct original ip daddr { 10.96.0.0/12, 10.244.0.0/16 } accept`,
		`add rule inet egressflow pods-to-node ct original ip6 daddr { fd00:10:244::/48 } accept`,
		`add chain inet egressflow namespace-1 { comment "EgressFirewall/shop/default" ; }`,
		`add rule inet egressflow pods-to-node ip saddr { 10.244.1.2, 10.244.1.3 } jump namespace-1`,
		`add rule inet egressflow pods-to-node ip6 saddr { fd00:10:244:1::2 } jump namespace-1`,
		`add rule inet egressflow namespace-1 ip daddr { 172.18.0.11 } meta l4proto . th dport { 6 . 22, 17 . 53 } accept comment "rule 0"`,
		`add rule inet egressflow namespace-1 ip6 daddr { fd00:172:18::11 } meta l4proto . th dport { 6 . 22, 17 . 53 } accept comment "rule 0"`,
		`add rule inet egressflow namespace-1 ip daddr { 172.18.0.0/24 } counter drop comment "rule 1"`,
		`add rule inet egressflow namespace-1 ip6 daddr { ::/0 } meta l4proto . th dport { 132 . 9 } counter drop comment "rule 3"`,
	}, "\n") + "\n"
	tx := knftables.NewFake(Family, TableName).NewTransaction()
	Table(tx, twoNamespaces, twoRefusals, local)
	if got := tx.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestSyncRunsOnChange checks that Sync replaces the table when what
// concerns the node changes, and runs nothing when it does not: a new
// address of a rule that covers none of the node's changes nothing.
func TestSyncRunsOnChange(t *testing.T) {
	fake := knftables.NewFake(Family, TableName)
	s := New(fake)
	ctx := context.Background()
	elsewhereGrew := twoNamespaces
	elsewhereGrew.Namespaces = slices.Clone(twoNamespaces.Namespaces)
	elsewhereGrew.Namespaces[2].Rules = []dataplane.FirewallRule{{Index: 0, Deny: true, Destinations: prefixes("203.0.113.0/24", "203.0.114.9/32")}}
	for i, step := range []struct {
		fw       dataplane.Firewall
		refusals []dataplane.RouterRefusal
		wantRun  bool
	}{
		{dataplane.Firewall{}, nil, true}, // the first replaces what a predecessor left
		{dataplane.Firewall{}, nil, false},
		{twoNamespaces, nil, true},
		{twoNamespaces, nil, false},
		{elsewhereGrew, nil, false},
		{elsewhereGrew, twoRefusals, true},
		{elsewhereGrew, twoRefusals, false},
		{dataplane.Firewall{}, nil, true},
	} {
		ran, err := s.Sync(ctx, step.fw, step.refusals, local)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if ran != step.wantRun {
			t.Errorf("step %d: ran %v, want %v", i, ran, step.wantRun)
		}
	}
	chains, err := fake.List(ctx, "chains")
	if err != nil {
		t.Fatal(err)
	}
	if len(chains) != 1 || chains[0] != podsToNodeChain {
		t.Errorf("after the last sync, chains %v, want only %s (the namespaces' and the refusals' gone)", chains, podsToNodeChain)
	}
}

// TestTableAcceptedByNFT loads the table into a real kernel's nftables, in
// a network namespace of its own (unshare), with the nft binary the agent
// image carries: the syntax the unit test pins down is one nft takes.
func TestTableAcceptedByNFT(t *testing.T) {
	tx := knftables.NewFake(Family, TableName).NewTransaction()
	Table(tx, twoNamespaces, twoRefusals, local)
	script := tx.String()
	// One namespace for both: the load, then the listing of what it made.
	cmd := exec.Command("unshare", "--net", "sh", "-c", "nft -f - && nft list table inet egressflow")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nft -f: %v\n%s\nscript:\n%s", err, out, script)
	}
	for _, want := range []string{"chain namespace-1", "tcp . 22", "counter packets 0 bytes 0 drop",
		"hook forward", "tcp dport != { 80, 443 } reject with tcp reset", "ip6 daddr fd00:172:18::60 meta l4proto sctp reject"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the kernel's table lacks %q:\n%s", want, out)
		}
	}
}
