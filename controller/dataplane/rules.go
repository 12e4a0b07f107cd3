package dataplane

import (
	"fmt"
	"net/netip"
)

// The policy-routing rules a Network-mode service needs: one
// `ip rule from <endpoint IP> lookup <table>` per local endpoint, at
// RulePriority. Traffic inside the cluster (to pods, ClusterIPs and nodes)
// is never rerouted: while any such rule exists, `ip rule to <cluster
// prefix> goto LandingRulePriority` rules at ExemptRulePriority jump over
// them, to a `nop` rule at LandingRulePriority, so that this traffic meets
// every other rule of the node as if egressflow's were not there. This is
// the model; controller/iprule installs it through netlink.

// RulePriority is the priority of egressflow's route rules. Lower numbers
// are consulted first: 5000 comes after the `local` table's rule (0), so
// traffic to the node's own addresses is never diverted, and before the
// `main` table's rule (32766), so it wins over default routing. Another
// component that needs to overrule egressflow uses a priority below 5000.
const RulePriority = 5000

// ExemptRulePriority and LandingRulePriority surround RulePriority: an
// exemption jumps from just before egressflow's route rules to just after
// them.
const (
	ExemptRulePriority  = RulePriority - 1
	LandingRulePriority = RulePriority + 1
)

// RuleKind tells egressflow's kinds of rules apart.
type RuleKind uint8

const (
	// RouteRule is `from Source lookup Table` at RulePriority.
	RouteRule RuleKind = iota
	// ExemptRule is `to Destination goto LandingRulePriority` at
	// ExemptRulePriority: a destination inside the cluster skips the route
	// rules.
	ExemptRule
	// LandingRule is `nop` at LandingRulePriority, in the family of
	// Destination (its zero prefix): the exemptions' goto needs a rule at
	// the priority it jumps to, and a nop changes nothing.
	LandingRule
)

// Rule is one of egressflow's policy-routing rules.
type Rule struct {
	Kind        RuleKind
	Source      netip.Addr   // RouteRule
	Table       int          // RouteRule
	Destination netip.Prefix // ExemptRule; LandingRule: the family's zero prefix
}

// RouteFrom is the rule that sends source's packets through table.
func RouteFrom(source netip.Addr, table int) Rule {
	return Rule{Kind: RouteRule, Source: source, Table: table}
}

// Landing is the landing rule of IPv6 or IPv4.
func Landing(ipv6 bool) Rule {
	zero := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if ipv6 {
		zero = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return Rule{Kind: LandingRule, Destination: zero}
}

// ExemptionRules are the rules that keep the cluster's own destinations on
// the node's other rules (ExemptRule, LandingRule), for the families that
// have route rules among routes.
func ExemptionRules(routes []Rule, cluster []netip.Prefix) []Rule {
	var v4, v6 bool
	for _, r := range routes {
		if r.Kind == RouteRule {
			v4, v6 = v4 || r.Source.Is4(), v6 || r.Source.Is6()
		}
	}
	var out []Rule
	for _, p := range cluster {
		if (p.Addr().Is4() && v4) || (p.Addr().Is6() && v6) {
			out = append(out, Rule{Kind: ExemptRule, Destination: p.Masked()})
		}
	}
	if v4 {
		out = append(out, Landing(false))
	}
	if v6 {
		out = append(out, Landing(true))
	}
	return out
}

func (r Rule) String() string {
	switch r.Kind {
	case ExemptRule:
		return fmt.Sprintf("%d: to %s goto %d", ExemptRulePriority, r.Destination, LandingRulePriority)
	case LandingRule:
		family := "ipv4"
		if r.Destination.Addr().Is6() {
			family = "ipv6"
		}
		return fmt.Sprintf("%d: %s nop", LandingRulePriority, family)
	}
	return fmt.Sprintf("%d: from %s lookup %d", RulePriority, r.Source, r.Table)
}

// Compare orders rules by kind, then source, destination and table.
func (r Rule) Compare(o Rule) int {
	if c := int(r.Kind) - int(o.Kind); c != 0 {
		return c
	}
	if c := r.Source.Compare(o.Source); c != 0 {
		return c
	}
	if c := r.Destination.Addr().Compare(o.Destination.Addr()); c != 0 {
		return c
	}
	if c := r.Destination.Bits() - o.Destination.Bits(); c != 0 {
		return c
	}
	return r.Table - o.Table
}

// RouterTableBase and RouterTables bound the routing tables egressflow
// owns: RouterTables of them from RouterTableBase, one for each subnet and
// gateway of the EgressRouters a node serves (RouterRouting). Every route
// in them is egressflow's, and any other is removed. The range sits far
// above the ids administrators and other components pick (small numbers,
// VRFs' low thousands); a node that uses it for tables of its own must not
// serve routers with gateways. More tables would make two gateways'
// sharing a hash slot rarer; it costs nothing but the range.
const (
	RouterTableBase = 0xef100000
	RouterTables    = 1 << 16
)

// IsRouterTable reports whether table is one of egressflow's own
// (RouterTableBase).
func IsRouterTable(table int) bool {
	return table >= RouterTableBase && table < RouterTableBase+RouterTables
}

// Route is a route in one of egressflow's own tables (RouterTableBase),
// through the route device (the bridge's interface): to Destination on
// the link when Gateway is invalid, else through Gateway.
type Route struct {
	Table       int
	Destination netip.Prefix
	Gateway     netip.Addr
}

func (r Route) String() string {
	if r.Gateway.IsValid() {
		return fmt.Sprintf("%s via %s table %d", r.Destination, r.Gateway, r.Table)
	}
	return fmt.Sprintf("%s scope link table %d", r.Destination, r.Table)
}

// Compare orders routes by table, then destination and gateway.
func (r Route) Compare(o Route) int {
	if c := r.Table - o.Table; c != 0 {
		return c
	}
	if c := r.Destination.Addr().Compare(o.Destination.Addr()); c != 0 {
		return c
	}
	if c := r.Destination.Bits() - o.Destination.Bits(); c != 0 {
		return c
	}
	return r.Gateway.Compare(o.Gateway)
}
