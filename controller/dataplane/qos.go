package dataplane

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/openflow"
)

// EgressQoS's part of a node's desired state: TableQoS (docs/dataplane.md,
// "The egress pipeline for the family"). ComputeQoS is a pure function of
// the EgressQoS objects and this node's pods; QoSFlows renders it. Since
// layout 4 TableOrigin sends every packet from the host stack to TableQoS,
// Compute includes it (State.QoS), and the Planner keeps it current one
// namespace at a time (UpdateQoS, SetLocalPods).
//
// # How the flows stay off pods × rules
//
// A pod's packet is classified once: a flow per local pod address loads
// the pod's class into reg5 (EgressQoS's register) and looks TableQoS up
// again. A class is the set of its namespace's rules that select the pod,
// so pods with the same labels share one. Each class then has one flow per
// rule in it and family it has pods of, at the rule's priority, matching
// reg5 and the rule's dstCIDR: the first (highest) that matches sets the
// DSCP. A node's TableQoS therefore holds
//
//	local pod addresses + Σ_classes (rules in the class × families) + exemptions + 1
//
// flows. It grows with pods plus rules times the distinct label sets that
// rules tell apart, not with pods × rules; only when every pod has labels
// of its own does it reach pods × rules, as the naive rendering would
// always be.
//
// A conjunctive match (conjunction(id,1/2) for a rule's pod sources,
// conjunction(id,2/2) for its destination) does not help here. A rule has
// a single destination, so it would still cost one flow per selected pod
// and rule. One flow cannot carry the clauses of several rules either,
// because all the clauses of a conjunction share one priority, and rule
// order needs one priority per rule (OVS leaves the choice between
// conjunctions matched at one priority undefined).

// Flow kinds of EgressQoS, in TableQoS.
var (
	// KindQoSClassify loads a local pod's class into reg5 and looks
	// TableQoS up again; its namespace's hash.
	KindQoSClassify = APIEgressQoS.Kind(1)
	// KindQoSMark sets a class's DSCP for one rule and family and goes on
	// to TableEgress; its namespace's hash.
	KindQoSMark = APIEgressQoS.Kind(2)
	// KindQoSPass sends, unmarked, what no rule marks on to TableEgress:
	// the exempt destinations above everything, and the table's default.
	// Hash 0 (no one object owns them).
	KindQoSPass = APIEgressQoS.Kind(3)
)

// qosClassRegister holds a packet's class in its pass through TableQoS:
// reg5 is EgressQoS's (docs/dataplane.md, "Conntrack zones, marks and
// registers"). 0 means "not classified yet".
var qosClassRegister = openflow.FieldReg(5)

// QoSRule is one rule of an EgressQoS as TableQoS matches it.
type QoSRule struct {
	// Index is the rule's position in spec.egress: its precedence.
	Index int
	DSCP  uint8
	// Dst is the masked dstCIDR; the zero Prefix (invalid) for a rule
	// without one, which matches every destination of both families.
	Dst netip.Prefix
}

// QoSClass is a set of local pod addresses that the same rules of their
// namespace select.
type QoSClass struct {
	// ID is the value of reg5 for the class's packets, unique on the node
	// and never 0.
	ID uint32
	// Rules are the rules that select the class's pods, in precedence
	// order (positions in QoSNamespace.Rules).
	Rules []int
	// Sources are the pod addresses, sorted.
	Sources []netip.Addr
}

// QoSNamespace is one namespace's EgressQoS (the object named default) on
// this node.
type QoSNamespace struct {
	// Key is ObjectKey(APIEgressQoS, namespace, "default"): its flows'
	// cookie hash.
	Key string
	// Rules are the rules TableQoS can apply, in spec.egress order; a rule
	// skipped for a Problem is not among them.
	Rules []QoSRule
	// Classes, sorted by their rules and then by first source. A local pod
	// that no rule selects is in no class: its packets pass unmarked.
	Classes []QoSClass
}

// QoS is the node's desired TableQoS.
type QoS struct {
	// Namespaces, sorted by Key; only those with local pods that a rule
	// selects.
	Namespaces []QoSNamespace
	// Problems, sorted by Service (the object's key) and then as found.
	Problems []Problem
}

// ComputeQoS returns the node's TableQoS for the EgressQoS objects (of any
// namespace; only those named default count) and the pods (only those
// bound to node count). Which pod addresses count is podAddresses': those
// in the cluster pod CIDRs, of pods not finished.
func ComputeQoS(node NodeConfig, qoses []*esv1.EgressQoS, pods []*corev1.Pod) QoS {
	var out QoS
	byNamespace := map[string][]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == node.Name {
			byNamespace[pod.Namespace] = append(byNamespace[pod.Namespace], pod)
		}
	}
	for _, q := range qoses {
		if q.Name != esv1.EgressQoSName {
			continue
		}
		ns, problems := computeQoSNamespace(node, q, byNamespace[q.Namespace])
		out.Problems = append(out.Problems, problems...)
		if len(ns.Classes) > 0 {
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	slices.SortFunc(out.Namespaces, func(a, b QoSNamespace) int { return strings.Compare(a.Key, b.Key) })
	slices.SortStableFunc(out.Problems, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	assignQoSClassIDs(out.Namespaces)
	return out
}

// computeQoSNamespace computes q's rules and the classes of its namespace's
// local pods (IDs not yet assigned).
func computeQoSNamespace(node NodeConfig, q *esv1.EgressQoS, pods []*corev1.Pod) (QoSNamespace, []Problem) {
	ns := QoSNamespace{Key: ObjectKey(APIEgressQoS, q.Namespace, q.Name)}
	rules, ruleProblems := q.Spec.Rules(node.ClusterPodCIDRs)
	problems := keyProblems(ns.Key, ruleProblems)
	selectors := make([]labels.Selector, 0, len(rules))
	for _, r := range rules {
		ns.Rules = append(ns.Rules, QoSRule{Index: r.Index, DSCP: r.DSCP, Dst: r.Dst})
		selectors = append(selectors, r.Pods)
	}
	classes := map[string]*QoSClass{}
	for _, pod := range pods {
		var selected []int
		for i, sel := range selectors {
			if sel.Matches(labels.Set(pod.Labels)) {
				selected = append(selected, i)
			}
		}
		addrs := podAddresses(pod, node.ClusterPodCIDRs)
		if len(selected) == 0 || len(addrs) == 0 {
			continue
		}
		signature := qosSignature(selected)
		c := classes[signature]
		if c == nil {
			c = &QoSClass{Rules: selected}
			classes[signature] = c
		}
		c.Sources = append(c.Sources, addrs...)
	}
	for _, c := range classes {
		slices.SortFunc(c.Sources, netip.Addr.Compare)
		c.Sources = slices.Compact(c.Sources)
		ns.Classes = append(ns.Classes, *c)
	}
	slices.SortFunc(ns.Classes, func(a, b QoSClass) int {
		if c := slices.Compare(a.Rules, b.Rules); c != 0 {
			return c
		}
		return a.Sources[0].Compare(b.Sources[0])
	})
	return ns, problems
}

// qosSignature names a set of rule positions, for grouping pods by it.
func qosSignature(rules []int) string {
	var b []byte
	for _, r := range rules {
		b = strconv.AppendInt(b, int64(r), 10)
		b = append(b, ',')
	}
	return string(b)
}

// assignQoSClassIDs gives each class an ID derived from its namespace's
// key and its rules (FNV-1a), so that a class keeps its ID, and its flows
// stay unchanged, while other namespaces come and go. A collision (or 0)
// takes the next free value, in the order of namespaces and classes, so
// the IDs depend on the whole set only then, and are the same on every
// computation of the same input.
func assignQoSClassIDs(namespaces []QoSNamespace) {
	taken := map[uint32]bool{0: true}
	for i := range namespaces {
		for j := range namespaces[i].Classes {
			c := &namespaces[i].Classes[j]
			c.ID = takeID(taken, qosClassHash(namespaces[i].Key, c.Rules))
		}
	}
}

// qosClassHash is the ID a class of the namespace with key has unless it
// collides: FNV-1a of the key and the class's rules.
func qosClassHash(key string, rules []int) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(qosSignature(rules)))
	return h.Sum32()
}

// Families, IPv4 first, as the unspecified address of each: what setIP
// takes to match a family alone.
var qosFamilies = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}

// resubmitEgress is the end of every path through TableQoS: TableEgress
// decides the packet's source (an OpenFlow goto cannot go back to 41).
var resubmitEgress = []openflow.Instruction{openflow.Apply(openflow.ResubmitTable(TableEgress))}

// QoSFlows renders TableQoS: the shared flows (QoSSharedFlows), then each
// namespace's (AppendQoSNamespace).
func QoSFlows(qos QoS, exempt []netip.Prefix) []*openflow.FlowMod {
	var buf FlowBuffer // never reset: the flows are the caller's
	out := QoSSharedFlows(exempt)
	for _, ns := range qos.Namespaces {
		out = buf.AppendQoSNamespace(out, ns)
	}
	return out
}

// QoSSharedFlows renders the flows of TableQoS that no object owns: each
// exempt destination passes unmarked above every rule, and whatever else
// no rule marks passes at the bottom.
//
// Which destinations are exempt is the caller's choice, and still open
// (issue 18). egress-family.md ("Scope") says the family leaves pod-to-pod,
// pod-to-service and pod-to-node traffic alone, which State.Exempt as
// exempt gives. The reference's own match does not exclude them. Its QoS
// rows sit on every node switch, direction to-lport, and for a rule
// without dstCIDR they match
// `(ip4.dst == 0.0.0.0/0 || ip6.dst == ::/0) && ip4.src == $<rule's pods>`
// (ovn-kubernetes, go-controller/pkg/ovn/egressqos.go,
// generateEgressQoSMatch). Read from the code, not tried on a cluster, that
// marks pod-to-pod and pod-to-service packets as well. A nil exempt
// reproduces that for the packets that cross br-ex. Same-node pod-to-pod
// traffic never crosses br-ex, so egressflow cannot mark it either way.
func QoSSharedFlows(exempt []netip.Prefix) []*openflow.FlowMod {
	var buf FlowBuffer
	var out []*openflow.FlowMod
	for _, p := range exempt {
		fm := buf.Add(Cookie(KindQoSPass, ""), TableQoS, priorityQoSExempt, resubmitEgress)
		setIP(&fm.Match, p.Addr(), openflow.FieldNone)
		fm.Match.SetPrefix(dstField(p.Addr()), p.Masked())
		out = append(out, fm)
	}
	return append(out, buf.Add(Cookie(KindQoSPass, ""), TableQoS, priorityQoSDefault, resubmitEgress))
}

// AppendFlows renders ns's flows into b and appends them to dst
// (AppendQoSNamespace).
func (ns QoSNamespace) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, _ Ports) []*openflow.FlowMod {
	return b.AppendQoSNamespace(dst, ns)
}

// FlowRole is RoleQoS.
func (QoSNamespace) FlowRole() Role { return RoleQoS }

// AppendQoSNamespace renders ns's flows into b and appends them to dst:
// for each class, a classifying flow per source, and a marking flow per
// rule and family of its sources (both families for a rule without
// dstCIDR, the dstCIDR's family otherwise).
func (b *FlowBuffer) AppendQoSNamespace(dst []*openflow.FlowMod, ns QoSNamespace) []*openflow.FlowMod {
	cookieClassify, cookieMark := Cookie(KindQoSClassify, ns.Key), Cookie(KindQoSMark, ns.Key)
	for _, c := range ns.Classes {
		classify := []openflow.Instruction{openflow.Apply(
			openflow.SetField{Field: qosClassRegister, Value: be32(c.ID)},
			openflow.ResubmitTable(TableQoS))}
		var families [2]bool // IPv4, IPv6: of the class's sources
		for _, src := range c.Sources {
			fm := b.Add(cookieClassify, TableQoS, priorityQoSClassify, classify)
			setIP(&fm.Match, src, srcField(src))
			fm.Match.SetUint(qosClassRegister, 0)
			dst = append(dst, fm)
			families[familyIndex(src)] = true
		}
		for _, i := range c.Rules {
			rule := ns.Rules[i]
			mark := []openflow.Instruction{openflow.Apply(
				openflow.SetField{Field: openflow.FieldIPDSCP, Value: []byte{rule.DSCP}},
				openflow.ResubmitTable(TableEgress))}
			for _, family := range qosFamilies {
				if !families[familyIndex(family)] || (rule.Dst.IsValid() && rule.Dst.Addr().Is4() != family.Is4()) {
					continue
				}
				fm := b.Add(cookieMark, TableQoS, priorityQoSFirstRule-uint16(rule.Index), mark)
				setIP(&fm.Match, family, openflow.FieldNone)
				fm.Match.SetUint(qosClassRegister, uint64(c.ID))
				if rule.Dst.IsValid() {
					fm.Match.SetPrefix(dstField(family), rule.Dst)
				}
				dst = append(dst, fm)
			}
		}
	}
	return dst
}

func familyIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
