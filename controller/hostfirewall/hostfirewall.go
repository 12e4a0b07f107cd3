// Package hostfirewall owns egressflow's nftables table on a node (inet
// egressflow): what Open vSwitch cannot do for the family.
//   - The part of EgressFirewall that Open vSwitch cannot enforce. A pod's
//     packet to one of its own node's addresses is taken by the node's
//     kernel where the pod's interface meets the node, and never crosses
//     br-ex, so TableFirewall never judges it (docs/egressfirewall.md, "A
//     pod's packets to its own node"). The table judges those packets, at
//     the input hook, by the same rules and in the same order as
//     TableFirewall.
//   - EgressRouter's refusals (dataplane.RouterRefusal): a switch cannot
//     answer a connection, so the node's host stack, which forwards each
//     connection to a reserved address it serves, refuses one to a port
//     without a rule or fallback, at the forward hook.
//
// Table renders it as a pure function of the node's desired TableFirewall
// (dataplane.Firewall) and refusals; Syncer applies it through
// sigs.k8s.io/knftables, replacing the whole table in one nft transaction,
// atomically, and only when it changed; Remove deletes it on uninstall.
package hostfirewall

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/egressflow/egressflow/controller/dataplane"
)

// Family and TableName name egressflow's table: inet, so that one table
// holds both address families.
const (
	Family    = knftables.InetFamily
	TableName = "egressflow"
)

// podsToNodeChain is the base chain, at the input hook: it sends each local
// pod's packet to its namespace's chain.
const podsToNodeChain = "pods-to-node"

// routerRefusalsChain is the base chain, at the forward hook, that refuses
// new connections to a reserved address on a port it does not redirect.
const routerRefusalsChain = "router-refusals"

// NamespaceChain is the chain of the namespace whose reg4 ID is id: its
// rules, in spec.egress order.
func NamespaceChain(id uint32) string { return "namespace-" + strconv.FormatUint(uint64(id), 10) }

// exemptIPv6 are IPv6 destinations no rule judges at the input hook: the
// link-local and multicast addresses of neighbour discovery and MLD, which
// a pod needs to reach its node at all (TableFirewall never sees them, as
// the bridge answers or floods them itself).
var exemptIPv6 = []netip.Prefix{netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("ff00::/8")}

// Table fills tx with the whole of egressflow's table for fw and refusals
// on a node whose own addresses are local: the table added and deleted first, so
// that the transaction replaces whatever was there (nft's idiom for
// "create or replace" without `destroy`, which Debian 12's nft 1.0.6
// lacks), then
//   - the base chain pods-to-node (filter, input): a packet of the reply
//     direction of a connection the node opened passes (the node's probes
//     of its pods), as do the link-local and multicast IPv6 destinations
//     and fw.Exempt, judged by the connection's original destination
//     (before a Service's DNAT, as TableFirewall judges it); then a jump
//     per namespace, matching its local pod addresses;
//   - a chain per namespace (NamespaceChain) with a rule per rule and
//     family: its destinations, its ports as protocol . port pairs, and
//     accept (Allow) or counter drop (Deny). What no rule judges returns to
//     the base chain, whose policy is accept: no match allows;
//   - with refusals, the base chain router-refusals (filter, forward): for
//     each refused address and protocol (TCP, UDP, SCTP), a new
//     connection to it on a port no rule names is rejected, TCP with a
//     reset and the others with ICMP port unreachable (nft's default
//     reject). Only a connection's first packet is judged: the replies
//     of the redirected connections to the address pass.
//
// The input hook sees only packets to the node's own addresses, so a
// destination that holds none of local can never match there: it is left
// out, and so are a rule left without destinations and a namespace left
// without rules (no chain, no jump). The table holds what concerns the
// node (a nodeSelector of it, a cidrSelector that covers it), and does not
// change when a rule elsewhere does, a dnsName's answers above all.
func Table(tx *knftables.Transaction, fw dataplane.Firewall, refusals []dataplane.RouterRefusal, local []netip.Addr) {
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("egressflow-agent: EgressFirewall for pods' packets to their own node, EgressRouter refusals")})
	refuse(tx, refusals)
	tx.Add(&knftables.Chain{
		Name:     podsToNodeChain,
		Type:     knftables.PtrTo(knftables.FilterType),
		Hook:     knftables.PtrTo(knftables.InputHook),
		Priority: knftables.PtrTo(knftables.FilterPriority),
		Comment:  knftables.PtrTo("local pods' packets to this node's addresses"),
	})
	base := func(rule string) { tx.Add(&knftables.Rule{Chain: podsToNodeChain, Rule: rule}) }
	base("ct direction reply accept")
	base("ip6 daddr " + prefixSet(exemptIPv6) + " accept")
	v4, v6 := byFamily(fw.Exempt)
	if len(v4) > 0 {
		base("ct original ip daddr " + prefixSet(v4) + " accept")
	}
	if len(v6) > 0 {
		base("ct original ip6 daddr " + prefixSet(v6) + " accept")
	}
	for _, ns := range fw.Namespaces {
		chain := NamespaceChain(ns.ID)
		src4, src6 := addrsByFamily(ns.Sources)
		var rules []*knftables.Rule
		for _, rule := range ns.Rules {
			verdict := "accept"
			if rule.Deny {
				verdict = "counter drop"
			}
			ports := ""
			if len(rule.Ports) > 0 {
				ports = " meta l4proto . th dport " + portSet(rule.Ports)
			}
			d4, d6 := byFamily(holdingAny(rule.Destinations, local))
			for _, fam := range []struct {
				match string
				dsts  []netip.Prefix
				srcs  []netip.Addr
			}{{"ip daddr ", d4, src4}, {"ip6 daddr ", d6, src6}} {
				if len(fam.dsts) == 0 || len(fam.srcs) == 0 {
					continue // as TableFirewall: only the families the namespace's pods have
				}
				rules = append(rules, &knftables.Rule{
					Chain:   chain,
					Rule:    fam.match + prefixSet(fam.dsts) + ports + " " + verdict,
					Comment: knftables.PtrTo("rule " + strconv.Itoa(rule.Index)),
				})
			}
		}
		if len(rules) == 0 {
			continue
		}
		tx.Add(&knftables.Chain{Name: chain, Comment: knftables.PtrTo(ns.Key)})
		if len(src4) > 0 {
			base("ip saddr " + addrSet(src4) + " jump " + chain)
		}
		if len(src6) > 0 {
			base("ip6 saddr " + addrSet(src6) + " jump " + chain)
		}
		for _, r := range rules {
			tx.Add(r)
		}
	}
}

// refusalProtocols are the protocols a router refuses, with the verdict
// that refuses each.
var refusalProtocols = []struct {
	number  uint8
	name    string
	verdict string
}{{6, "tcp", "reject with tcp reset"}, {17, "udp", "reject"}, {132, "sctp", "reject"}}

// refuse adds the router-refusals chain and its rules, when there are
// refusals (Table).
func refuse(tx *knftables.Transaction, refusals []dataplane.RouterRefusal) {
	if len(refusals) == 0 {
		return
	}
	tx.Add(&knftables.Chain{
		Name:     routerRefusalsChain,
		Type:     knftables.PtrTo(knftables.FilterType),
		Hook:     knftables.PtrTo(knftables.ForwardHook),
		Priority: knftables.PtrTo(knftables.FilterPriority),
		Comment:  knftables.PtrTo("new connections to an EgressRouter's address on a port without a rule or fallback"),
	})
	for _, r := range refusals {
		daddr := "ip daddr "
		if r.Address.Is6() {
			daddr = "ip6 daddr "
		}
		for _, proto := range refusalProtocols {
			match := "meta l4proto " + proto.name
			if ports := r.Ports[proto.number]; len(ports) > 0 {
				elems := make([]string, len(ports))
				for i, port := range ports {
					elems[i] = strconv.Itoa(int(port))
				}
				match = proto.name + " dport != { " + strings.Join(elems, ", ") + " }"
			}
			tx.Add(&knftables.Rule{Chain: routerRefusalsChain, Rule: "ct state new " + daddr + r.Address.String() + " " + match + " " + proto.verdict})
		}
	}
}

// holdingAny are the prefixes that hold at least one of addrs.
func holdingAny(prefixes []netip.Prefix, addrs []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range prefixes {
		if slices.ContainsFunc(addrs, p.Contains) {
			out = append(out, p)
		}
	}
	return out
}

// byFamily splits prefixes into IPv4 and IPv6, keeping their order.
func byFamily(prefixes []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range prefixes {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}

// addrsByFamily splits addresses into IPv4 and IPv6, keeping their order.
func addrsByFamily(addrs []netip.Addr) (v4, v6 []netip.Addr) {
	for _, a := range addrs {
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	return v4, v6
}

// prefixSet is an anonymous set of prefixes; a full-length prefix is
// written as its address.
func prefixSet(prefixes []netip.Prefix) string {
	elems := make([]string, len(prefixes))
	for i, p := range prefixes {
		if p.IsSingleIP() {
			elems[i] = p.Addr().String()
		} else {
			elems[i] = p.String()
		}
	}
	return "{ " + strings.Join(elems, ", ") + " }"
}

// addrSet is an anonymous set of addresses.
func addrSet(addrs []netip.Addr) string {
	elems := make([]string, len(addrs))
	for i, a := range addrs {
		elems[i] = a.String()
	}
	return "{ " + strings.Join(elems, ", ") + " }"
}

// portSet is an anonymous set of protocol . port pairs, by protocol
// number (6, 17, 132), which nft reads as well as names.
func portSet(ports []dataplane.FirewallPort) string {
	elems := make([]string, len(ports))
	for i, p := range ports {
		elems[i] = fmt.Sprintf("%d . %d", p.Protocol, p.Port)
	}
	return "{ " + strings.Join(elems, ", ") + " }"
}

// Syncer keeps egressflow's table equal to the node's desired
// TableFirewall. It is not safe for concurrent use: the agent's sync loop
// owns it.
type Syncer struct {
	nft knftables.Interface
	// applied is the last transaction that ran, as text; "" before the
	// first, whose run replaces whatever a predecessor left.
	applied string
}

// New returns a Syncer of the table nft was made for (Family, TableName).
func New(nft knftables.Interface) *Syncer { return &Syncer{nft: nft} }

// Interface returns the knftables interface of egressflow's table on this
// host, through the nft binary; it fails when nft is missing or cannot
// run, which the agent treats as fatal: without it, a pod's packets to its
// own node would go unjudged.
func Interface() (knftables.Interface, error) {
	nft, err := knftables.New(Family, TableName)
	if err != nil {
		return nil, fmt.Errorf("nftables (for EgressFirewall on pods' packets to their own node): %w", err)
	}
	return nft, nil
}

// Sync replaces the table with fw's and refusals' on a node whose own
// addresses are local when it differs from the last one applied, and
// reports whether it ran a transaction.
func (s *Syncer) Sync(ctx context.Context, fw dataplane.Firewall, refusals []dataplane.RouterRefusal, local []netip.Addr) (bool, error) {
	tx := s.nft.NewTransaction()
	Table(tx, fw, refusals, local)
	text := tx.String()
	if text == s.applied {
		return false, nil
	}
	if err := s.nft.Run(ctx, tx); err != nil {
		return false, fmt.Errorf("replace nftables table %s %s: %w", Family, TableName, err)
	}
	s.applied = text
	return true, nil
}

// Remove deletes egressflow's table, if there is one.
func Remove(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("delete nftables table %s %s: %w", Family, TableName, err)
	}
	return nil
}
