package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
)

func egressQoS(ns, name string, rules ...esv1.EgressQoSRule) *esv1.EgressQoS {
	return &esv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: esv1.EgressQoSSpec{Egress: rules}}
}

func matchLabels(kv ...string) esv1.LabelSelector {
	s := esv1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

// qosExempt are n1's exemptions in these tests: the cluster pod and
// service CIDRs.
var qosExempt = []netip.Prefix{
	netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48"), netip.MustParsePrefix("10.96.0.0/16"),
}

// TestQoSFlowsText pins TableQoS for a small state to the text of
// `ovs-ofctl -O OpenFlow15 dump-flows`: two voice pods share a class (one
// classifying flow each, one set of marking flows), a web pod has a class
// of its own, a pod no rule selects and a pod of another node get nothing.
func TestQoSFlowsText(t *testing.T) {
	qos := ComputeQoS(n1Config, []*esv1.EgressQoS{
		egressQoS("shop", "default",
			esv1.EgressQoSRule{DSCP: 46, DstCIDR: "203.0.113.0/24", PodSelector: matchLabels("app", "voice")},
			esv1.EgressQoSRule{DSCP: 10, PodSelector: matchLabels("app", "web")},
			esv1.EgressQoSRule{DSCP: 8, PodSelector: matchLabels("app", "voice")}),
	}, []*corev1.Pod{
		pod("shop", "n1", map[string]string{"app": "voice"}, "10.244.1.5", "fd00:10:244:1::5"),
		pod("shop", "n1", map[string]string{"app": "voice"}, "10.244.1.6"),
		pod("shop", "n1", map[string]string{"app": "web"}, "10.244.1.7"),
		pod("shop", "n1", map[string]string{"app": "db"}, "10.244.1.8"),
		pod("shop", "n2", map[string]string{"app": "voice"}, "10.244.2.5"),
	})
	if len(qos.Problems) != 0 {
		t.Fatalf("problems: %+v", qos.Problems)
	}
	var got []string
	for _, f := range QoSFlows(qos, qosExempt[:1]) {
		got = append(got, f.String())
	}
	ids := map[string]uint32{}
	for _, c := range qos.Namespaces[0].Classes {
		ids[qosSignature(c.Rules)] = c.ID
	}
	voice, web := fmt.Sprintf("%#x", ids["0,2,"]), fmt.Sprintf("%#x", ids["1,"])
	cookie := func(kind FlowKind) string { return fmt.Sprintf("%#x", Cookie(kind, "EgressQoS/shop/default")) }
	want := []string{
		"cookie=0xef10330000000006, table=45, priority=3000,ip,nw_dst=10.244.0.0/16 actions=resubmit(,41)",
		"cookie=0xef10330000000006, table=45, priority=0 actions=resubmit(,41)",
		"cookie=" + cookie(KindQoSClassify) + ", table=45, priority=2500,ip,reg5=0,nw_src=10.244.1.5 actions=set_field:" + voice + "->reg5,resubmit(,45)",
		"cookie=" + cookie(KindQoSClassify) + ", table=45, priority=2500,ip,reg5=0,nw_src=10.244.1.6 actions=set_field:" + voice + "->reg5,resubmit(,45)",
		"cookie=" + cookie(KindQoSClassify) + ", table=45, priority=2500,ipv6,reg5=0,ipv6_src=fd00:10:244:1::5 actions=set_field:" + voice + "->reg5,resubmit(,45)",
		"cookie=" + cookie(KindQoSMark) + ", table=45, priority=1999,ip,reg5=" + voice + ",nw_dst=203.0.113.0/24 actions=set_field:46->ip_dscp,resubmit(,41)",
		"cookie=" + cookie(KindQoSMark) + ", table=45, priority=1997,ip,reg5=" + voice + " actions=set_field:8->ip_dscp,resubmit(,41)",
		"cookie=" + cookie(KindQoSMark) + ", table=45, priority=1997,ipv6,reg5=" + voice + " actions=set_field:8->ip_dscp,resubmit(,41)",
		"cookie=" + cookie(KindQoSClassify) + ", table=45, priority=2500,ip,reg5=0,nw_src=10.244.1.7 actions=set_field:" + web + "->reg5,resubmit(,45)",
		"cookie=" + cookie(KindQoSMark) + ", table=45, priority=1998,ip,reg5=" + web + " actions=set_field:10->ip_dscp,resubmit(,41)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// qosPipeline wraps TableQoS in the least of a bridge that lets a test
// trace it (stagePipeline): the emitted packet shows the DSCP TableQoS left
// it.
func qosPipeline(t *testing.T, flows []*openflow.FlowMod) *trace.Tables {
	t.Helper()
	return stagePipeline(t, TableQoS, TableEgress, flows)
}

// stagePipeline wraps a family stage's flows in the least of a bridge that
// lets a test trace them: table 0 sends every packet to stage, and table
// next (the one the stage goes on to) sends whatever reaches it out of port
// 1. A packet the stage drops emits nothing.
func stagePipeline(t *testing.T, stage, next uint8, flows []*openflow.FlowMod) *trace.Tables {
	t.Helper()
	all := append([]*openflow.FlowMod{
		{Command: openflow.FlowAdd, Table: TableClassify, Instructions: []openflow.Instruction{openflow.GotoTable{Table: stage}}},
		{Command: openflow.FlowAdd, Table: next, Instructions: []openflow.Instruction{openflow.Apply(openflow.Output{Port: 1})}},
	}, flows...)
	tables, err := trace.New(all)
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// qosSpec is the API's rule, written from the seed and the issue and not
// from ComputeQoS: a packet from src to dst leaves with the DSCP of the
// first rule, in spec.egress order, of its pod's namespace's EgressQoS
// named default that selects the pod and whose dstCIDR (if any) contains
// dst; with its own DSCP when no rule matches, when src is no pod of this
// node, or when dst is inside the cluster (exempt).
func qosSpec(node string, qoses []*esv1.EgressQoS, pods []*corev1.Pod, exempt []netip.Prefix, src, dst netip.Addr, dscp uint8) uint8 {
	for _, p := range exempt {
		if p.Contains(dst) {
			return dscp
		}
	}
	var owner *corev1.Pod
	for _, pod := range pods {
		if pod.Spec.NodeName != node || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ip := range pod.Status.PodIPs {
			if netip.MustParseAddr(ip.IP) == src {
				owner = pod
			}
		}
	}
	if owner == nil {
		return dscp
	}
	for _, q := range qoses {
		if q.Namespace != owner.Namespace || q.Name != "default" {
			continue
		}
		for _, r := range q.Spec.Egress {
			sel, err := metav1.LabelSelectorAsSelector(r.PodSelector.AsMeta())
			if err != nil || !sel.Matches(labels.Set(owner.Labels)) {
				continue
			}
			if r.DstCIDR == "" || netip.MustParsePrefix(r.DstCIDR).Contains(dst) {
				return uint8(r.DSCP)
			}
		}
	}
	return dscp
}

// TestQoSMatchesSpecification traces random packets through the rendered
// TableQoS of random objects and pods, and compares the DSCP each leaves
// with against qosSpec. The tracer also fails on two flows of one
// priority matching one packet, which would make OVS's choice undefined.
func TestQoSMatchesSpecification(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 6))
	namespaces := []string{"a", "b", "c"}
	keys, values := []string{"app", "tier"}, []string{"x", "y", "z"}
	cidrs := []string{"", "", "203.0.113.0/24", "203.0.113.77/24", "203.0.113.128/25", "198.51.100.7/32", "0.0.0.0/0", "2001:db8::/32", "2001:db8:1::/48", "10.244.0.0/16"}
	dsts := addrs("203.0.113.1", "203.0.113.200", "198.51.100.7", "198.51.100.8", "192.0.2.1",
		"2001:db8::1", "2001:db8:1::1", "2001:db9::1", "10.244.9.9", "10.96.0.10", "fd00:10:244:9::9")
	randomLabels := func() map[string]string {
		l := map[string]string{}
		for _, k := range keys {
			if r.IntN(3) > 0 {
				l[k] = values[r.IntN(len(values))]
			}
		}
		return l
	}
	randomSelector := func() esv1.LabelSelector {
		var s esv1.LabelSelector
		switch r.IntN(4) {
		case 0: // every pod
		case 1:
			s.MatchLabels = map[string]string{keys[r.IntN(2)]: values[r.IntN(3)]}
		case 2:
			ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn}
			s.MatchExpressions = []esv1.LabelSelectorRequirement{{Key: keys[r.IntN(2)], Operator: ops[r.IntN(2)], Values: []string{values[r.IntN(3)], values[r.IntN(3)]}}}
		case 3:
			ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
			s.MatchExpressions = []esv1.LabelSelectorRequirement{{Key: keys[r.IntN(2)], Operator: ops[r.IntN(2)]}}
		}
		return s
	}
	for round := range 300 {
		var qoses []*esv1.EgressQoS
		for _, ns := range namespaces {
			if r.IntN(4) == 0 {
				continue
			}
			name := "default"
			if r.IntN(6) == 0 {
				name = "other" // never counts
			}
			q := egressQoS(ns, name)
			for range 1 + r.IntN(5) {
				q.Spec.Egress = append(q.Spec.Egress, esv1.EgressQoSRule{
					DSCP: int32(r.IntN(64)), DstCIDR: cidrs[r.IntN(len(cidrs))], PodSelector: randomSelector()})
			}
			qoses = append(qoses, q)
		}
		var pods []*corev1.Pod
		var sources []netip.Addr
		for i := range 2 + r.IntN(8) {
			nodeName := "n1"
			if r.IntN(5) == 0 {
				nodeName = "n2"
			}
			ips := []string{fmt.Sprintf("10.244.1.%d", i+1)}
			if r.IntN(2) == 0 {
				ips = append(ips, fmt.Sprintf("fd00:10:244:1::%d", i+1))
			}
			p := pod(namespaces[r.IntN(len(namespaces))], nodeName, randomLabels(), ips...)
			if r.IntN(10) == 0 {
				p.Status.Phase = corev1.PodSucceeded
			}
			pods = append(pods, p)
			for _, ip := range ips {
				sources = append(sources, netip.MustParseAddr(ip))
			}
		}
		sources = append(sources, addrs("10.244.1.200", "fd00:10:244:1::200")...) // no pod's

		qos := ComputeQoS(n1Config, qoses, pods)
		tables := qosPipeline(t, QoSFlows(qos, qosExempt))
		for _, src := range sources {
			for _, dst := range dsts {
				if src.Is4() != dst.Is4() {
					continue
				}
				in := uint8(r.IntN(2) * 12) // a pod's own DSCP, kept when nothing marks
				res, err := tables.Trace(trace.Packet{InPort: openflow.PortLocal, Src: src, Dst: dst, Proto: 6, DSCP: in}, trace.Conntrack{})
				if err != nil {
					t.Fatalf("round %d: %v -> %v: %v", round, src, dst, err)
				}
				if len(res.Emits) != 1 || res.Emits[0].Port != 1 {
					t.Fatalf("round %d: %v -> %v did not reach TableEgress once:\n%v", round, src, dst, res)
				}
				want := qosSpec("n1", qoses, pods, qosExempt, src, dst, in)
				if got := res.Emits[0].Packet.DSCP; got != want {
					t.Fatalf("round %d: %v -> %v leaves with DSCP %d, want %d\nobjects: %s\npath:\n%v",
						round, src, dst, got, want, describeQoS(qoses, pods), res)
				}
			}
		}
	}
}

func describeQoS(qoses []*esv1.EgressQoS, pods []*corev1.Pod) string {
	var b strings.Builder
	for _, q := range qoses {
		fmt.Fprintf(&b, "\n  %s/%s:", q.Namespace, q.Name)
		for _, r := range q.Spec.Egress {
			fmt.Fprintf(&b, " {%d %q %v}", r.DSCP, r.DstCIDR, r.PodSelector)
		}
	}
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  pod %s on %s %v %v %s", p.Namespace, p.Spec.NodeName, p.Status.PodIPs, p.Labels, p.Status.Phase)
	}
	return b.String()
}

// TestQoSFlowCount checks the growth docs claim: local pod addresses plus
// rules per class and family, not pods × rules. 100 pods of two label
// sets under 10 rules that each select one set cost 100 classifying flows
// and 10 marking flows; with labels of their own, the pods cost one class
// each.
func TestQoSFlowCount(t *testing.T) {
	const pods, rules = 100, 10
	var q []esv1.EgressQoSRule
	for i := range rules {
		q = append(q, esv1.EgressQoSRule{DSCP: int32(i), DstCIDR: fmt.Sprintf("198.51.%d.0/24", i), PodSelector: matchLabels("tier", fmt.Sprint(i%2))})
	}
	objects := []*esv1.EgressQoS{egressQoS("shop", "default", q...)}
	count := func(labelsOf func(i int) map[string]string) int {
		var ps []*corev1.Pod
		for i := range pods {
			ps = append(ps, pod("shop", "n1", labelsOf(i), fmt.Sprintf("10.244.1.%d", i+1)))
		}
		return len(QoSFlows(ComputeQoS(n1Config, objects, ps), nil)) - 1 // less the default flow
	}
	if got, want := count(func(i int) map[string]string { return map[string]string{"tier": fmt.Sprint(i % 2)} }), pods+rules; got != want {
		t.Errorf("two label sets: %d flows, want %d (pods + rules)", got, want)
	}
	// Each pod its own labels: still one class per label set that the
	// rules tell apart, two here.
	if got, want := count(func(i int) map[string]string {
		return map[string]string{"tier": fmt.Sprint(i % 2), "pod": fmt.Sprint(i)}
	}), pods+rules; got != want {
		t.Errorf("labels of their own, two rule sets: %d flows, want %d", got, want)
	}
	// Rules that tell every pod apart: pods × selected rules, the bound.
	q = nil
	for i := range pods {
		q = append(q, esv1.EgressQoSRule{DSCP: 1, PodSelector: matchLabels("pod", fmt.Sprint(i))})
	}
	objects = []*esv1.EgressQoS{egressQoS("shop", "default", q...)}
	if got, want := count(func(i int) map[string]string { return map[string]string{"pod": fmt.Sprint(i)} }), pods+pods; got != want {
		t.Errorf("a rule per pod: %d flows, want %d", got, want)
	}
}

// TestQoSProblemsAndIgnored: a rule of a family the cluster lacks is
// reported; rules the CRD refuses are skipped and reported; an object not
// named default and the pods of other namespaces and nodes count for
// nothing.
func TestQoSProblemsAndIgnored(t *testing.T) {
	v4only := NodeConfig{Name: "n1", ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	qos := ComputeQoS(v4only, []*esv1.EgressQoS{
		egressQoS("shop", "default",
			esv1.EgressQoSRule{DSCP: 1, DstCIDR: "2001:db8::/32"},
			esv1.EgressQoSRule{DSCP: 64},
			esv1.EgressQoSRule{DSCP: 2, DstCIDR: "10.0.0.0/33"},
			esv1.EgressQoSRule{DSCP: 3, PodSelector: esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "k", Operator: "Gt"}}}},
			esv1.EgressQoSRule{DSCP: 4}),
		egressQoS("shop", "custom", esv1.EgressQoSRule{DSCP: 9}),
		egressQoS("empty", "default", esv1.EgressQoSRule{DSCP: 9}),
	}, []*corev1.Pod{
		pod("shop", "n1", nil, "10.244.1.5"),
		pod("shop", "n2", nil, "10.244.2.5"),
		pod("other", "n1", nil, "10.244.1.6"),
	})
	var got []string
	for _, p := range qos.Problems {
		if p.Key != "EgressQoS/shop/default" {
			t.Errorf("problem of %q", p.Key)
		}
		got = append(got, string(p.Reason)+":"+p.Message[:len("rule 0")])
	}
	if want := []string{"WrongFamily:rule 0", "InvalidRule:rule 1", "InvalidRule:rule 2", "InvalidRule:rule 3"}; !slices.Equal(got, want) {
		t.Errorf("problems %v, want %v", got, want)
	}
	if len(qos.Namespaces) != 1 || qos.Namespaces[0].Key != "EgressQoS/shop/default" {
		t.Fatalf("namespaces %+v", qos.Namespaces)
	}
	ns := qos.Namespaces[0]
	var kept []int
	for _, r := range ns.Rules {
		kept = append(kept, r.Index)
	}
	if !slices.Equal(kept, []int{0, 4}) || len(ns.Classes) != 1 || !slices.Equal(ns.Classes[0].Sources, addrs("10.244.1.5")) {
		t.Errorf("rules %v, classes %+v", kept, ns.Classes)
	}
}

// TestQoSClassIDsStable: a namespace's class IDs, and so its flows, do not
// change when another namespace's EgressQoS comes or goes.
func TestQoSClassIDsStable(t *testing.T) {
	shop := egressQoS("shop", "default", esv1.EgressQoSRule{DSCP: 1, PodSelector: matchLabels("app", "a")}, esv1.EgressQoSRule{DSCP: 2})
	pods := []*corev1.Pod{
		pod("shop", "n1", map[string]string{"app": "a"}, "10.244.1.5"), pod("shop", "n1", nil, "10.244.1.6"),
		pod("bank", "n1", nil, "10.244.1.7"),
	}
	alone := ComputeQoS(n1Config, []*esv1.EgressQoS{shop}, pods)
	both := ComputeQoS(n1Config, []*esv1.EgressQoS{egressQoS("bank", "default", esv1.EgressQoSRule{DSCP: 3}), shop}, pods)
	var buf FlowBuffer
	render := func(ns QoSNamespace) []string {
		var out []string
		for _, f := range buf.AppendQoSNamespace(nil, ns) {
			out = append(out, f.String())
		}
		return out
	}
	if len(both.Namespaces) != 2 || both.Namespaces[1].Key != "EgressQoS/shop/default" {
		t.Fatalf("namespaces %+v", both.Namespaces)
	}
	if a, b := render(alone.Namespaces[0]), render(both.Namespaces[1]); !slices.Equal(a, b) {
		t.Errorf("shop's flows changed when bank came:\n%s\nthen:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	seen := map[uint32]bool{}
	for _, ns := range both.Namespaces {
		for _, c := range ns.Classes {
			if c.ID == 0 || seen[c.ID] {
				t.Errorf("class ID %#x is 0 or used twice", c.ID)
			}
			seen[c.ID] = true
		}
	}
}

// TestQoSClassIDCollision: classes whose hashes collide still get distinct
// IDs, in a stable order.
func TestQoSClassIDCollision(t *testing.T) {
	namespaces := []QoSNamespace{
		{Key: "k", Classes: []QoSClass{{Rules: []int{0}}, {Rules: []int{0}}}}, // same hash twice
	}
	assignQoSClassIDs(namespaces)
	a, b := namespaces[0].Classes[0].ID, namespaces[0].Classes[1].ID
	if a == b || b != a+1 {
		t.Fatalf("colliding classes got IDs %#x and %#x; want the second to take the next value", a, b)
	}
}
