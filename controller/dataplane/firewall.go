package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
)

// EgressFirewall's part of a node's desired state: TableFirewall
// (docs/dataplane.md, "The egress pipeline for the family";
// docs/egressfirewall.md). ComputeFirewall is a pure function of the
// EgressFirewall objects, this node's pods, the Nodes (for nodeSelector
// rules) and the addresses of the rules' DNS names; FirewallFlows renders
// it. Compute includes it in State.Firewall; the Planner keeps the same
// namespaces current incrementally (UpdateFirewall, SetNodes, SetResolved,
// SetLocalPods), and the Ledger diffs each namespace by its key.
//
// # How the flows stay off pods × rules
//
// A pod's packet is classified once: a flow per local pod address of a
// namespace with an EgressFirewall loads the namespace's ID into reg4
// (EgressFirewall's register) and looks TableFirewall up again through
// conntrack (FirewallZone): a packet of the reply direction of a
// connection the outside opened passes unjudged, and what a rule lets
// through is committed in the direction the pod opened it. The rules
// then match reg4, not the pods: rule i of the namespace becomes flows at
// priority 10000 − i (the reference's ACL priorities) matching reg4, one
// destination prefix and, if the rule has ports, one protocol and port.
// The first (highest) that matches drops the packet (Deny) or sends it on
// to TableQoS (Allow); a packet that matches none goes on too (the
// default allow). A node's TableFirewall therefore holds
//
//	Σ_namespaces (local pod addresses
//	    + Σ_rules destinations × (max(1, ports) + fragment protocols))
//	  + exemptions + 2 × 2 + 1
//
// flows (the 2 × 2: per family, the replies' pass and the commit of what
// no rule judged), counting a rule's destinations only in the families the
// namespace has local pods of: a cidrSelector is one destination, a
// dnsName one per address, a nodeSelector one per address of each
// selected node. A Deny with ports has fragment protocols, the number of
// distinct protocols among its ports (see "Fragments"); every other rule
// has none. It grows with pods plus rules, never with pods × rules.
// Outside it, in TableClassify, each local pod address of such a namespace
// has an inbound commit (KindFirewallInbound) and, if the namespace has a
// dnsName rule, a snoop flow (KindFirewallSnoop).
//
// A destination × port cross product is the one product left. A
// conjunctive match would make it a sum (conjunction(id,1/2) per
// destination, conjunction(id,2/2) per port, at the rule's priority,
// where one rule's clauses may share it), at the cost of one more flow per
// rule and a packet tracer that models conjunctions; rules with several
// ports and several addresses are rare, and the benchmark found they would
// save 600 of 160,871 flows (docs/egressfirewall.md, "Benchmark"). The API's ports are single ports (the seed's
// `port: integer`), so no masked tp_dst matches are needed; a range, if the
// API grew one, would cost at most 2 × 16 − 2 masked matches.
//
// # Fragments
//
// A rule's ports are read from the transport header, which only a
// datagram's first IP fragment carries; and a bridge whose fragment
// handling is "normal" (the default, which egressflow keeps) reads the
// ports of every fragment, the first one included, as 0. On the kernel
// datapath that does not matter here: the ct action of the classifying
// flow reassembles a fragmented datagram before it recirculates, and the
// rules judge the whole datagram, ports and all (as the reference relies
// on). The userspace datapath's connection tracker hands the fragments
// on, not the datagram: a fragment matches no flow with a port, and a
// Deny with ports would let the whole datagram pass. So each Deny with
// ports also drops, for each destination and each distinct protocol of
// its ports, every fragment of that protocol to that destination
// (ip_frag=yes, at the rule's priority, with its cookie: the denied
// packets count them). An Allow with ports gets no such flow: a fragment
// cannot be shown to match it, and goes on to the later rules. So a
// fragment of protocol P to destination D is dropped if a Deny with ports
// of P for D comes before every rule without ports that judges D, and
// judged by the rules without ports otherwise. An IPv6 fragment after the
// first is protocol 44 to the bridge (its Fragment header): these flows
// drop the datagram's first fragment, without which it cannot be
// reassembled, and the rules without ports judge the rest. The cost, on
// the userspace datapath only: fragmented datagrams to a port an Allow
// lets through are dropped too if a Deny with ports of the same protocol
// covers the destination (failing closed). On the kernel datapath these
// flows never match: what they would see is reassembled first.

// Flow kinds of EgressFirewall, in TableFirewall and (snoop, inbound)
// TableClassify.
var (
	// KindFirewallClassify loads a local pod's namespace ID into reg4 and
	// looks TableFirewall up again; its namespace's hash.
	KindFirewallClassify = APIEgressFirewall.Kind(1)
	// KindFirewallDeny drops a packet a Deny rule matches; its namespace's
	// hash. Their packet counters are the denied packets.
	KindFirewallDeny = APIEgressFirewall.Kind(2)
	// KindFirewallAllow sends a packet an Allow rule matches on to
	// TableQoS; its namespace's hash.
	KindFirewallAllow = APIEgressFirewall.Kind(3)
	// KindFirewallPass sends on to TableQoS what no rule judges: the
	// exempt destinations above everything, and the table's default.
	// Hash 0 (no one object owns them).
	KindFirewallPass = APIEgressFirewall.Kind(4)
	// KindFirewallSnoop, in TableClassify, sends the agent a copy of each
	// DNS reply (UDP from port 53) to a local pod of a namespace with a
	// dnsName rule, and the packet on as OVS would (NORMAL): the agent
	// learns the names' addresses as the pods do (dnsresolve.LearnFrame).
	// Its namespace's hash.
	KindFirewallSnoop = APIEgressFirewall.Kind(5)
	// KindFirewallInbound, in TableClassify, commits each packet to a
	// local pod of a namespace with an EgressFirewall in FirewallZone, and
	// sends it on (NORMAL): a connection the outside opens is known, so
	// that the pod's replies pass TableFirewall unjudged. Its namespace's
	// hash.
	KindFirewallInbound = APIEgressFirewall.Kind(6)
)

// dnsReplyMaxLen is how much of a snooped reply the switch sends the
// agent: all of it (a UDP DNS reply is at most 64 KiB, and nearly always
// under 512 bytes; a paused packet is sent whole anyway).
const dnsReplyMaxLen = 0xffff

// firewallNamespaceRegister holds a packet's namespace ID in its pass
// through TableFirewall: reg4 is EgressFirewall's (docs/dataplane.md,
// "Conntrack zones, marks and registers"). 0 means "not classified yet".
var firewallNamespaceRegister = openflow.FieldReg(4)

// FirewallPort is one protocol and destination port a rule matches.
type FirewallPort = esv1.FirewallPort

// FirewallRule is one rule of an EgressFirewall as TableFirewall matches it.
type FirewallRule struct {
	// Index is the rule's position in spec.egress: its precedence.
	Index int
	Deny  bool
	// Destinations are masked prefixes, sorted and without duplicates: the
	// cidrSelector, or a full-length prefix per address of the dnsName or
	// of the selected nodes. Empty for a name or selector that has no
	// address now: the rule matches nothing.
	Destinations []netip.Prefix
	// Ports, sorted and without duplicates; none means every protocol and
	// port (ICMP too).
	Ports []FirewallPort
	// DNSKey is the dnsName's esv1.DNSNameKey, for a dnsName rule: its
	// flows carry it in a note, so that a restarted agent reads back the
	// addresses its predecessor learned for the name (FirewallAnswers).
	DNSKey string
}

// FirewallNamespace is one namespace's EgressFirewall (the object named
// default) on this node.
type FirewallNamespace struct {
	// Key is ObjectKey(APIEgressFirewall, namespace, "default"): its flows'
	// cookie hash.
	Key string
	// ID is the value of reg4 for the namespace's packets, unique on the
	// node and never 0.
	ID uint32
	// Sources are the namespace's local pod addresses, sorted.
	Sources []netip.Addr
	// Rules are the rules TableFirewall applies, in spec.egress order; a
	// rule skipped for a Problem is not among them.
	Rules []FirewallRule
	// SnoopDNS: a rule names a dnsName, so the DNS replies to the
	// namespace's local pods are copied to the agent (KindFirewallSnoop).
	SnoopDNS bool
}

// Firewall is the node's desired TableFirewall.
type Firewall struct {
	// Exempt are the destinations no rule judges: the cluster's pod and
	// service CIDRs, masked and sorted. Node addresses are not exempt
	// (docs/dataplane.md, "Precedence", rule 1): nodeSelector rules are
	// for them.
	Exempt []netip.Prefix
	// Namespaces, sorted by Key; only those with local pods.
	Namespaces []FirewallNamespace
	// Resolvers are the addresses of the local DNS resolver pods
	// (NodeConfig.DNSResolvers), sorted, whose DNS replies are snooped
	// too when a namespace here has a dnsName rule (and not already as
	// the pods of such a namespace): a resolver on a pod's own node
	// answers it without crossing br-ex, but what it answers it learned
	// from an upstream reply that does (docs/egressfirewall.md, "A
	// resolver on the pod's own node"). None when no namespace here
	// snoops.
	Resolvers []netip.Addr
	// Problems, sorted by Service (the object's key) and then as found.
	Problems []Problem
}

// ComputeFirewall returns the node's TableFirewall for the EgressFirewall
// objects (of any namespace; only those named default count), the pods
// (only those bound to node count; which addresses count is
// podAddresses'), the Nodes (whose InternalIP and ExternalIP addresses
// nodeSelector rules match) and the addresses of the rules' DNS names,
// keyed by esv1.DNSNameKey. A name missing from resolved has no answer
// yet: its rule matches nothing, and is reported (DNSNameUnresolved); a
// name present with no address matches nothing and is not reported.
func ComputeFirewall(node NodeConfig, firewalls []*esv1.EgressFirewall, pods []*corev1.Pod, nodes []*corev1.Node,
	resolved map[string][]netip.Addr) Firewall {
	out := Firewall{Exempt: firewallExemptions(node)}
	sources := map[string][]netip.Addr{}
	for _, pod := range pods {
		if pod.Spec.NodeName == node.Name {
			sources[pod.Namespace] = append(sources[pod.Namespace], podAddresses(pod, node.ClusterPodCIDRs)...)
		}
	}
	var read []esv1.FirewallRule
	for _, fw := range firewalls {
		if fw.Name != esv1.EgressFirewallName {
			continue
		}
		ns, problems := computeFirewallNamespace(node, fw, nodes, resolved, &read)
		out.Problems = append(out.Problems, problems...)
		ns.Sources = slices.Compact(slices.SortedFunc(slices.Values(sources[fw.Namespace]), netip.Addr.Compare))
		if len(ns.Sources) > 0 {
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	slices.SortFunc(out.Namespaces, func(a, b FirewallNamespace) int { return strings.Compare(a.Key, b.Key) })
	slices.SortStableFunc(out.Problems, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	taken := map[uint32]bool{0: true}
	for i := range out.Namespaces {
		out.Namespaces[i].ID = takeID(taken, ServiceHash(out.Namespaces[i].Key))
	}
	var resolvers []*corev1.Pod
	for _, pod := range pods {
		if pod.Spec.NodeName == node.Name && node.DNSResolvers.Selects(pod) {
			resolvers = append(resolvers, pod)
		}
	}
	out.Resolvers = snoopedResolvers(node, resolvers, out.Namespaces)
	return out
}

// snoopedResolvers are the addresses of the local resolver pods (of
// resolvers) whose DNS replies are snooped by a flow of no namespace:
// none unless some namespace snoops, and none that a snooping
// namespace's own flows cover.
func snoopedResolvers(node NodeConfig, resolvers []*corev1.Pod, namespaces []FirewallNamespace) []netip.Addr {
	snooped := map[netip.Addr]bool{}
	for _, ns := range namespaces {
		if ns.SnoopDNS {
			for _, a := range ns.Sources {
				snooped[a] = true
			}
		}
	}
	if len(snooped) == 0 {
		return nil
	}
	var out []netip.Addr
	for _, pod := range resolvers {
		for _, a := range podAddresses(pod, node.ClusterPodCIDRs) {
			if !snooped[a] {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// firewallExemptions are the destinations TableFirewall never judges: the
// cluster pod and service CIDRs (not the node addresses).
func firewallExemptions(node NodeConfig) []netip.Prefix {
	out := slices.Concat(node.ClusterPodCIDRs, node.ServiceCIDRs)
	for i, p := range out {
		out[i] = p.Masked()
	}
	slices.SortFunc(out, comparePrefixes)
	return slices.Compact(out)
}

// computeFirewallNamespace computes fw's rules (Sources and ID not yet
// set) and their problems. It reads fw's rules into *read, emptied again
// after: one slice for the readings of every object its caller computes.
func computeFirewallNamespace(node NodeConfig, fw *esv1.EgressFirewall, nodes []*corev1.Node,
	resolved map[string][]netip.Addr, read *[]esv1.FirewallRule) (FirewallNamespace, []Problem) {
	ns := FirewallNamespace{Key: ObjectKey(APIEgressFirewall, fw.Namespace, fw.Name)}
	rules, ruleProblems := fw.Spec.AppendRules((*read)[:0], node.ClusterPodCIDRs)
	var problems []Problem
	// In rule order, as the rules are read: a rule's own problems, then
	// whether its name is resolved.
	for _, r := range rules {
		for len(ruleProblems) > 0 && ruleProblems[0].Rule <= r.Index {
			problems = append(problems, keyProblems(ns.Key, ruleProblems[:1])...)
			ruleProblems = ruleProblems[1:]
		}
		rule := FirewallRule{Index: r.Index, Deny: r.Deny, Ports: r.Ports}
		switch {
		case r.CIDR.IsValid():
			rule.Destinations = []netip.Prefix{r.CIDR}
		case r.DNSKey != "":
			ns.SnoopDNS = true
			rule.DNSKey = r.DNSKey
			addrs, ok := resolved[rule.DNSKey]
			if !ok {
				problems = append(problems, Problem{Key: ns.Key, Reason: reasons.DNSNameUnresolved,
					Message: fmt.Sprintf("rule %d: dnsName %s is not resolved yet; the rule matches nothing until it is", r.Index, r.DNSName)})
			}
			rule.Destinations = hostPrefixes(addrs)
		default:
			var addrs []netip.Addr
			for _, n := range nodes {
				if r.Nodes.Matches(labels.Set(n.Labels)) {
					addrs = append(addrs, endpoints.NodeAddresses(n)...)
				}
			}
			rule.Destinations = hostPrefixes(addrs)
		}
		ns.Rules = append(ns.Rules, rule)
	}
	clear(rules) // holds no rule's ports or selector until the next reading
	*read = rules[:0]
	return ns, append(problems, keyProblems(ns.Key, ruleProblems)...)
}

// hostPrefixes are the full-length prefixes of addrs, sorted and without
// duplicates.
func hostPrefixes(addrs []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	slices.SortFunc(out, comparePrefixes)
	return slices.Compact(out)
}

// commitInbound commits a packet to a pod in FirewallZone (no
// recirculation: the actions go on).
var commitInbound = openflow.CT{Flags: openflow.CTCommit, Zone: conntrack.FirewallZone}

// inboundToPod commits a packet to a pod and sends it on.
var inboundToPod = []openflow.Instruction{openflow.Apply(commitInbound, openflow.Output{Port: openflow.PortNormal})}

// snoopDNSReply commits a DNS reply to a pod and pauses it in the
// pipeline, sent to the agent (controller(pause)): the agent learns its
// addresses and resumes it once their flows are in place, and then it
// goes on (NORMAL). So the pod gets no answer before the firewall can
// judge what it opens with it (agent.SnoopDNS).
var snoopDNSReply = []openflow.Instruction{openflow.Apply(
	commitInbound,
	openflow.ControllerPause{MaxLen: dnsReplyMaxLen},
	openflow.Output{Port: openflow.PortNormal})}

// snoopDNSReplyCopying is snoopDNSReply without the hold: the reply is
// copied to the agent and goes on at once. An agent that stops while
// egressflow stays, configured to let replies pass while it is away,
// leaves its snoop flows so (SnoopCopyingFlowMod); its successor's first
// sync holds them again.
var snoopDNSReplyCopying = []openflow.Instruction{openflow.Apply(
	commitInbound,
	openflow.Output{Port: openflow.PortController, MaxLen: dnsReplyMaxLen},
	openflow.Output{Port: openflow.PortNormal})}

// SnoopCopyingFlowMods turn every snoop flow of the bridge, of every
// namespace, to copying (snoopDNSReplyCopying): a modify of TableClassify
// per family (ct needs a match on one), filtered by the snoop flows'
// cookie kind.
func SnoopCopyingFlowMods() []*openflow.FlowMod {
	var out []*openflow.FlowMod
	for _, family := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		fm := &openflow.FlowMod{
			Command: openflow.FlowModify, Table: TableClassify,
			Cookie: Cookie(KindFirewallSnoop, ""), CookieMask: KindCookieMask,
			Instructions: snoopDNSReplyCopying,
		}
		setIP(&fm.Match, family, openflow.FieldNone)
		out = append(out, fm)
	}
	return out
}

// allowAndCommit commits a pod's packet that a rule (or the default)
// lets through in FirewallZone, in the direction the pod opened it, and
// sends it on to TableQoS.
var allowAndCommit = []openflow.Instruction{openflow.Apply(commitInbound, openflow.ResubmitTable(TableQoS))}

// withNote puts a note of text before insts' actions (a note does nothing
// to the packet; a flow with nothing but a note still drops). ovs-ofctl
// prints it as the name's bytes in hex: note:77.77.77.2e... for "www.".
func withNote(insts []openflow.Instruction, text string) []openflow.Instruction {
	// The switch pads a note's data with zeros to the action's 8-byte
	// boundary (10 bytes of header), and dumps it padded: pad it so here,
	// or the flow read back would differ from the flow rendered.
	data := []byte(text)
	for (len(data)+10)%8 != 0 {
		data = append(data, 0)
	}
	var actions []openflow.Action
	if len(insts) > 0 {
		actions = slices.Clone(insts[0].(openflow.ApplyActions).Actions)
	}
	return []openflow.Instruction{openflow.Apply(append([]openflow.Action{openflow.Note{Data: data}}, actions...)...)}
}

// FirewallAnswers reads back, from the rule flows of TableFirewall that a
// bridge holds, the addresses each dnsName rule matched: by the name in
// the flow's note (withNote) and the flow's destination, when it is one
// address. A restarted agent gives them to its resolver before its first
// sync, so that the addresses its predecessor learned from the pods'
// replies (a wildcard's above all, which no lookup finds again) stay
// judged while the pods may still use them.
func FirewallAnswers(flows []openflow.Flow) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for i := range flows {
		f := &flows[i]
		c, ok := DecodeCookie(f.Cookie)
		if !ok || f.Table != TableFirewall || (c.Kind != KindFirewallAllow && c.Kind != KindFirewallDeny) {
			continue
		}
		name := ""
		for _, in := range f.Instructions {
			if apply, ok := in.(openflow.ApplyActions); ok {
				for _, a := range apply.Actions {
					if note, ok := a.(openflow.Note); ok {
						name = strings.TrimRight(string(note.Data), "\x00")
					}
				}
			}
		}
		if name == "" || name != esv1.DNSNameKey(name) {
			continue
		}
		for _, field := range []openflow.Field{openflow.FieldIPv4Dst, openflow.FieldIPv6Dst} {
			if a, ok := f.Match.Addr(field); ok {
				out[name] = append(out[name], a)
			}
		}
	}
	for name, addrs := range out {
		slices.SortFunc(addrs, netip.Addr.Compare)
		out[name] = slices.Compact(addrs)
	}
	return out
}

// resubmitQoS ends every path through TableFirewall that lets a packet go
// on: to TableQoS, the next stage. A goto_table would do (45 is after 44),
// but the stages end alike, by resubmit, as docs/dataplane.md lays out.
var resubmitQoS = []openflow.Instruction{openflow.Apply(openflow.ResubmitTable(TableQoS))}

// FirewallFlows renders TableFirewall: the shared flows
// (FirewallSharedFlows of fw.Exempt and fw.Resolvers), then each namespace's
// (AppendFirewallNamespace).
func FirewallFlows(fw Firewall) []*openflow.FlowMod {
	var buf FlowBuffer // never reset: the flows are the caller's
	out := FirewallSharedFlows(fw.Exempt, fw.Resolvers)
	for _, ns := range fw.Namespaces {
		out = buf.AppendFirewallNamespace(out, ns)
	}
	return out
}

// FirewallSharedFlows renders the flows of EgressFirewall that no object
// owns: in TableFirewall, each exempt destination goes on to TableQoS
// above every rule, and whatever no rule judges goes on at the bottom
// (the default allow); in TableClassify, the snoop flows of the DNS
// replies to the local resolver pods (Firewall.Resolvers).
func FirewallSharedFlows(exempt []netip.Prefix, resolvers []netip.Addr) []*openflow.FlowMod {
	var buf FlowBuffer
	out := buf.appendSnoopDNS(nil, Cookie(KindFirewallSnoop, ""), resolvers)
	for _, p := range exempt {
		fm := buf.Add(Cookie(KindFirewallPass, ""), TableFirewall, priorityFirewallExempt, resubmitQoS)
		setIP(&fm.Match, p.Addr(), openflow.FieldNone)
		fm.Match.SetPrefix(dstField(p.Addr()), p)
		out = append(out, fm)
	}
	// A classified packet has been through FirewallZone: the reply
	// direction of a connection the outside opened passes, and what no
	// rule judges is committed, so that its own replies are known as such.
	for _, family := range qosFamilies {
		fm := buf.Add(Cookie(KindFirewallPass, ""), TableFirewall, priorityFirewallReply, resubmitQoS)
		setIP(&fm.Match, family, openflow.FieldNone)
		fm.Match.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk|openflow.CTStateRpl), uint64(openflow.CTStateTrk|openflow.CTStateRpl))
		out = append(out, fm)
		fm = buf.Add(Cookie(KindFirewallPass, ""), TableFirewall, priorityFirewallCommitted, allowAndCommit)
		setIP(&fm.Match, family, openflow.FieldNone)
		fm.Match.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk), uint64(openflow.CTStateTrk))
		out = append(out, fm)
	}
	return append(out, buf.Add(Cookie(KindFirewallPass, ""), TableFirewall, priorityFirewallDefault, resubmitQoS))
}

// AppendFlows renders ns's flows into b and appends them to dst
// (AppendFirewallNamespace).
func (ns FirewallNamespace) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, _ Ports) []*openflow.FlowMod {
	return b.AppendFirewallNamespace(dst, ns)
}

// FlowRole is RoleFirewall.
func (FirewallNamespace) FlowRole() Role { return RoleFirewall }

// AppendFirewallNamespace renders ns's flows into b and appends them to
// dst: a classifying flow per source, then for each rule a flow per
// destination of a family the sources have, times each port (or one
// without ports), and for a Deny with ports one more per destination and
// protocol that drops the protocol's fragments ("Fragments" in the
// package comment).
func (b *FlowBuffer) AppendFirewallNamespace(dst []*openflow.FlowMod, ns FirewallNamespace) []*openflow.FlowMod {
	cookieClassify := Cookie(KindFirewallClassify, ns.Key)
	cookieDeny, cookieAllow := Cookie(KindFirewallDeny, ns.Key), Cookie(KindFirewallAllow, ns.Key)
	classify := []openflow.Instruction{openflow.Apply(
		openflow.SetField{Field: firewallNamespaceRegister, Value: be32(ns.ID)},
		openflow.CT{Zone: conntrack.FirewallZone, Recirculate: true, Table: TableFirewall})}
	var families [2]bool // IPv4, IPv6: of the sources
	for _, src := range ns.Sources {
		fm := b.Add(cookieClassify, TableFirewall, priorityFirewallClassify, classify)
		setIP(&fm.Match, src, srcField(src))
		fm.Match.SetUint(firewallNamespaceRegister, 0)
		dst = append(dst, fm)
		families[familyIndex(src)] = true
	}
	cookieInbound := Cookie(KindFirewallInbound, ns.Key)
	for _, pod := range ns.Sources {
		fm := b.Add(cookieInbound, TableClassify, priorityFirewallInbound, inboundToPod)
		setIP(&fm.Match, pod, dstField(pod))
		dst = append(dst, fm)
	}
	if ns.SnoopDNS {
		dst = b.appendSnoopDNS(dst, Cookie(KindFirewallSnoop, ns.Key), ns.Sources)
	}
	for _, rule := range ns.Rules {
		cookie, insts := cookieAllow, allowAndCommit
		if rule.Deny {
			cookie, insts = cookieDeny, nil // no instructions: drop
		}
		if rule.DNSKey != "" {
			insts = withNote(insts, rule.DNSKey)
		}
		priority := priorityFirewallFirstRule - uint16(rule.Index)
		for _, d := range rule.Destinations {
			if !families[familyIndex(d.Addr())] {
				continue
			}
			add := func() *openflow.Match {
				fm := b.Add(cookie, TableFirewall, priority, insts)
				setIP(&fm.Match, d.Addr(), openflow.FieldNone)
				fm.Match.SetUint(firewallNamespaceRegister, uint64(ns.ID))
				fm.Match.SetPrefix(dstField(d.Addr()), d)
				dst = append(dst, fm)
				return &fm.Match
			}
			if len(rule.Ports) == 0 {
				add()
				continue
			}
			for _, p := range rule.Ports {
				m := add()
				m.SetUint(openflow.FieldIPProto, uint64(p.Protocol))
				m.SetUint(portField(p.Protocol), uint64(p.Port))
			}
			if !rule.Deny {
				continue // a fragment cannot be shown to match an Allow's ports
			}
			for _, proto := range ruleProtocols(rule.Ports) {
				m := add()
				m.SetUint(openflow.FieldIPProto, uint64(proto))
				m.SetUintMasked(openflow.FieldIPFrag, uint64(openflow.IPFragAny), uint64(openflow.IPFragAny))
			}
		}
	}
	return dst
}

// appendSnoopDNS renders into b, and appends to dst, the snoop flows of
// the DNS replies to each of pods (KindFirewallSnoop), with cookie.
func (b *FlowBuffer) appendSnoopDNS(dst []*openflow.FlowMod, cookie uint64, pods []netip.Addr) []*openflow.FlowMod {
	for _, pod := range pods {
		// UDP and TCP: a truncated answer is asked again over TCP.
		for _, from := range []struct {
			proto uint64
			port  openflow.Field
		}{{17, openflow.FieldUDPSrc}, {6, openflow.FieldTCPSrc}} {
			fm := b.Add(cookie, TableClassify, priorityFirewallSnoop, snoopDNSReply)
			setIP(&fm.Match, pod, dstField(pod))
			fm.Match.SetUint(openflow.FieldIPProto, from.proto)
			fm.Match.SetUint(from.port, 53)
			dst = append(dst, fm)
		}
	}
	return dst
}

// ruleProtocols are the distinct protocols of ports (sorted, as
// firewallPorts sorts them by protocol first): a Deny with ports drops
// the fragments of each (see "Fragments" in the package comment).
func ruleProtocols(ports []FirewallPort) []uint8 {
	var out []uint8
	for _, p := range ports {
		if len(out) == 0 || out[len(out)-1] != p.Protocol {
			out = append(out, p.Protocol)
		}
	}
	return out
}

// portField is the destination port field of a protocol of an
// EgressFirewall's ports or an EgressRouter's rules: TCP, UDP or SCTP.
func portField(protocol uint8) openflow.Field {
	switch protocol {
	case 6:
		return openflow.FieldTCPDst
	case 17:
		return openflow.FieldUDPDst
	}
	return openflow.FieldSCTPDst
}
