package v1

import (
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/controller/reasons"
)

// The one reading of EgressQoS's and EgressFirewall's rules: the node
// agents render what it gives, and the cluster component reports what it
// refuses, in the same words.

// RuleProblem is why a rule of an object is not applied as written (or,
// for reasons.WrongFamily, applies to no pod), in the words the object's
// status and Events use.
//
// +k8s:deepcopy-gen=false
type RuleProblem struct {
	// Rule is the position of the rule in spec.egress; the bound on the
	// rules (MaxEgressQoSRules, MaxEgressFirewallRules) for those past it.
	Rule    int
	Reason  reasons.Reason
	Message string
}

// ruleProblems collects the problems of one reading.
//
// +k8s:deepcopy-gen=false
type ruleProblems []RuleProblem

func (p *ruleProblems) add(rule int, reason reasons.Reason, format string, args ...any) {
	*p = append(*p, RuleProblem{Rule: rule, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// checkFamily reports a destination of a family that no pod of the
// cluster has (podCIDRs are the cluster's pod CIDRs): the rule matches no
// packet, which is not what its writer meant.
func (p *ruleProblems) checkFamily(rule int, field string, dst netip.Prefix, podCIDRs []netip.Prefix) {
	if !slices.ContainsFunc(podCIDRs, func(c netip.Prefix) bool { return c.Addr().Is4() == dst.Addr().Is4() }) {
		p.add(rule, reasons.WrongFamily, "rule %d: %s %s is %s, and the cluster has no pod of that family", rule, field, dst, familyName(dst.Addr()))
	}
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// QoSRule is one rule of an EgressQoS, read.
//
// +k8s:deepcopy-gen=false
type QoSRule struct {
	// Index is the rule's position in spec.egress: its precedence.
	Index int
	DSCP  uint8
	// Dst is the masked dstCIDR; the zero Prefix (invalid) for a rule
	// without one, which matches every destination of both families.
	Dst netip.Prefix
	// Pods selects the rule's pods in the object's namespace.
	Pods labels.Selector
}

// Rules reads spec.egress for a cluster whose pods have addresses in
// podCIDRs: the rules that can be applied, in spec order, and the problems
// of the others (and of those whose destination is of a family no pod
// has). An object stored before the CRD validated it may hold what it
// refuses.
func (s *EgressQoSSpec) Rules(podCIDRs []netip.Prefix) ([]QoSRule, []RuleProblem) {
	rules := make([]QoSRule, 0, min(len(s.Egress), MaxEgressQoSRules))
	var problems ruleProblems
	for i, r := range s.Egress {
		if i >= MaxEgressQoSRules {
			problems.add(MaxEgressQoSRules, reasons.InvalidRule, "rules past the first %d are ignored", MaxEgressQoSRules)
			break
		}
		if r.DSCP < 0 || r.DSCP > 63 {
			problems.add(i, reasons.InvalidRule, "rule %d: dscp %d is outside 0-63", i, r.DSCP)
			continue
		}
		rule := QoSRule{Index: i, DSCP: uint8(r.DSCP)}
		if r.DstCIDR != "" {
			p, err := netip.ParsePrefix(r.DstCIDR)
			if err != nil {
				problems.add(i, reasons.InvalidRule, "rule %d: dstCIDR %q: %v", i, r.DstCIDR, err)
				continue
			}
			rule.Dst = p.Masked()
			problems.checkFamily(i, "dstCIDR", rule.Dst, podCIDRs)
		}
		sel, err := metav1.LabelSelectorAsSelector(r.PodSelector.AsMeta())
		if err != nil {
			problems.add(i, reasons.InvalidRule, "rule %d: podSelector: %v", i, err)
			continue
		}
		rule.Pods = sel
		rules = append(rules, rule)
	}
	return rules, problems
}

// FirewallPort is one port a firewall rule names: an IP protocol number
// (6, 17, 132) and a port.
//
// +k8s:deepcopy-gen=false
type FirewallPort struct {
	Protocol uint8
	Port     uint16
}

// firewallProtocols are the protocols a port may name, by the API's names.
var firewallProtocols = map[string]uint8{"TCP": 6, "UDP": 17, "SCTP": 132}

// FirewallRule is one rule of an EgressFirewall, read. Exactly one of
// CIDR, DNSKey and Nodes is set.
//
// +k8s:deepcopy-gen=false
type FirewallRule struct {
	// Index is the rule's position in spec.egress: its precedence.
	Index int
	Deny  bool
	// Ports, sorted and without duplicates; none means every port of
	// every protocol.
	Ports []FirewallPort
	// CIDR is the masked cidrSelector.
	CIDR netip.Prefix
	// DNSName is the dnsName as written, and DNSKey its DNSNameKey, under
	// which its addresses are resolved.
	DNSName, DNSKey string
	// Nodes selects the nodes whose addresses the rule names.
	Nodes labels.Selector
}

// Rules reads spec.egress for a cluster whose pods have addresses in
// podCIDRs, as EgressQoSSpec.Rules does.
func (s *EgressFirewallSpec) Rules(podCIDRs []netip.Prefix) ([]FirewallRule, []RuleProblem) {
	return s.AppendRules(make([]FirewallRule, 0, min(len(s.Egress), MaxEgressFirewallRules)), podCIDRs)
}

// AppendRules is Rules appending the rules to dst, for a reader of many
// objects in turn that reuses one slice for them all: a node's first sync
// reads every EgressFirewall, up to 8,000 rules each, and would otherwise
// allocate a slice of them per object only to copy them out.
func (s *EgressFirewallSpec) AppendRules(dst []FirewallRule, podCIDRs []netip.Prefix) ([]FirewallRule, []RuleProblem) {
	var problems ruleProblems
	for i, r := range s.Egress {
		if i >= MaxEgressFirewallRules {
			problems.add(MaxEgressFirewallRules, reasons.InvalidRule, "rules past the first %d are ignored", MaxEgressFirewallRules)
			break
		}
		rule := FirewallRule{Index: i}
		switch r.Type {
		case EgressFirewallRuleAllow:
		case EgressFirewallRuleDeny:
			rule.Deny = true
		default:
			problems.add(i, reasons.InvalidRule, "rule %d: type %q is neither Allow nor Deny", i, r.Type)
			continue
		}
		ports, err := firewallPorts(r.Ports)
		if err != nil {
			problems.add(i, reasons.InvalidRule, "rule %d: %v", i, err)
			continue
		}
		rule.Ports = ports
		to := r.To
		set := 0
		for _, isSet := range []bool{to.CIDRSelector != "", to.DNSName != "", to.NodeSelector != nil} {
			if isSet {
				set++
			}
		}
		if set != 1 {
			problems.add(i, reasons.InvalidRule, "rule %d: sets %d of cidrSelector, dnsName and nodeSelector, not exactly one", i, set)
			continue
		}
		switch {
		case to.CIDRSelector != "":
			p, err := netip.ParsePrefix(to.CIDRSelector)
			if err != nil {
				problems.add(i, reasons.InvalidRule, "rule %d: cidrSelector %q: %v", i, to.CIDRSelector, err)
				continue
			}
			rule.CIDR = p.Masked()
			problems.checkFamily(i, "cidrSelector", rule.CIDR, podCIDRs)
		case to.DNSName != "":
			rule.DNSName, rule.DNSKey = to.DNSName, DNSNameKey(to.DNSName)
		default:
			sel, err := metav1.LabelSelectorAsSelector(to.NodeSelector.AsMeta())
			if err != nil {
				problems.add(i, reasons.InvalidRule, "rule %d: nodeSelector: %v", i, err)
				continue
			}
			rule.Nodes = sel
		}
		dst = append(dst, rule)
	}
	return dst, problems
}

// firewallPorts reads a rule's ports, sorted and without duplicates; an
// error names one the CRD would refuse.
func firewallPorts(ports []EgressFirewallPort) ([]FirewallPort, error) {
	var out []FirewallPort
	for j, p := range ports {
		proto, ok := firewallProtocols[p.Protocol]
		if !ok {
			return nil, fmt.Errorf("ports[%d]: protocol %q is none of TCP, UDP and SCTP", j, p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Errorf("ports[%d]: port %d is outside 1-65535", j, p.Port)
		}
		out = append(out, FirewallPort{Protocol: proto, Port: uint16(p.Port)})
	}
	slices.SortFunc(out, func(a, b FirewallPort) int {
		if a.Protocol != b.Protocol {
			return int(a.Protocol) - int(b.Protocol)
		}
		return int(a.Port) - int(b.Port)
	})
	return slices.Compact(out), nil
}
