package assign

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

func egressService(mode esv1.SourceIPMode, sel metav1.LabelSelector) *esv1.EgressService {
	return &esv1.EgressService{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec:       esv1.EgressServiceSpec{SourceIPBy: mode, NodeSelector: sel},
	}
}

func lbService(etp corev1.ServiceExternalTrafficPolicy, ips ...string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: etp},
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// slice holds endpoints given as "address@node" ("address" for no node).
func slice(addrType discoveryv1.AddressType, endpoints ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{AddressType: addrType}
	for _, e := range endpoints {
		addr, node, _ := strings.Cut(e, "@")
		ep := discoveryv1.Endpoint{Addresses: []string{addr}}
		if node != "" {
			ep.NodeName = &node
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

var podCIDRs = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("fd00:10::/48")}

func TestEvaluate(t *testing.T) {
	ipv4 := discoveryv1.AddressTypeIPv4
	cases := []struct {
		name       string
		es         *esv1.EgressService
		svc        *corev1.Service
		slices     []*discoveryv1.EndpointSlice
		cidrs      []netip.Prefix
		reason     reasons.Reason
		localNodes []string // nil: not ETP=Local
	}{
		{name: "eligible", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "10.128.0.5@n1")}, cidrs: podCIDRs},
		{name: "explicit LoadBalancerIP", es: egressService(esv1.SourceIPByLoadBalancerIP, metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "10.128.0.5@n1")}, cidrs: podCIDRs},
		{name: "service missing", es: egressService("", metav1.LabelSelector{}), reason: reasons.ServiceNotFound},
		{name: "ClusterIP service", es: egressService("", metav1.LabelSelector{}),
			svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}, reason: reasons.NotLoadBalancer},
		{name: "no ingress", es: egressService("", metav1.LabelSelector{}), svc: lbService(""),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "10.128.0.5@n1")}, reason: reasons.NoIngressIP},
		{name: "hostname-only ingress", es: egressService("", metav1.LabelSelector{}),
			svc: func() *corev1.Service {
				s := lbService("")
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}
				return s
			}(),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "10.128.0.5@n1")}, reason: reasons.NoIngressIP},
		{name: "no slices", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"), reason: reasons.NoEndpoints},
		{name: "empty slice", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4)}, reason: reasons.NoEndpoints},
		{name: "only host-network endpoints", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "172.18.0.2@n1", "172.18.0.3@n2")}, cidrs: podCIDRs, reason: reasons.NoEndpoints},
		{name: "FQDN slices ignored", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeFQDN, "10.128.0.5@n1")}, cidrs: podCIDRs, reason: reasons.NoEndpoints},
		{name: "no pod CIDRs configured: every address counts", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "172.18.0.2@n1")}},
		{name: "IPv6 endpoint in IPv6 pod CIDR", es: egressService("", metav1.LabelSelector{}), svc: lbService("", "2001:db8::10"),
			slices: []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv6, "fd00:10::5@n1")}, cidrs: podCIDRs},
		{name: "invalid selector wins over everything", es: egressService("", metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: "Near", Values: []string{"a"}}}}),
			reason: reasons.InvalidSelector},
		{name: "invalid label value in selector", es: egressService("", metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a b"}}),
			svc: lbService("", "192.0.2.10"), reason: reasons.InvalidSelector},
		{name: "Network mode needs neither ingress nor endpoints", es: egressService(esv1.SourceIPByNetwork, metav1.LabelSelector{}),
			svc: lbService(""), reason: reasons.AllNodes},
		{name: "Network mode ignores an invalid selector", es: egressService(esv1.SourceIPByNetwork, metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a b"}}),
			svc: lbService(""), reason: reasons.AllNodes},
		{name: "Network mode needs the Service", es: egressService(esv1.SourceIPByNetwork, metav1.LabelSelector{}), reason: reasons.ServiceNotFound},
		{name: "Network mode needs a LoadBalancer", es: egressService(esv1.SourceIPByNetwork, metav1.LabelSelector{}),
			svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}}, reason: reasons.NotLoadBalancer},
		{name: "ETP Local lists the nodes of every endpoint, host-network ones too", es: egressService("", metav1.LabelSelector{}),
			svc:    lbService(corev1.ServiceExternalTrafficPolicyLocal, "192.0.2.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ipv4, "10.128.0.5@n1", "172.18.0.9@n3", "10.128.0.6"), slice(ipv4, "10.129.0.5@n2")}, cidrs: podCIDRs,
			localNodes: []string{"n1", "n2", "n3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			el := Evaluate(Input{EgressService: tc.es, Service: tc.svc, EndpointSlices: tc.slices, PodCIDRs: tc.cidrs})
			if el.Reason != tc.reason {
				t.Fatalf("reason %q (%s), want %q", el.Reason, el.Message, tc.reason)
			}
			if el.Reason != "" && el.Message == "" {
				t.Error("no message")
			}
			if el.Reason == "" && el.Selector == nil {
				t.Error("eligible without a selector")
			}
			if (el.LocalNodes == nil) != (tc.localNodes == nil) || len(el.LocalNodes) != len(tc.localNodes) {
				t.Fatalf("local nodes %v, want %v", el.LocalNodes, tc.localNodes)
			}
			for _, n := range tc.localNodes {
				if !el.LocalNodes[n] {
					t.Errorf("local nodes %v lack %s", el.LocalNodes, n)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]string{"egress": "yes"}
	cases := []struct {
		name  string
		el    Eligibility
		node  Node
		wants NodeProblem
	}{
		{"candidate", Eligibility{Selector: sel}, Node{Name: "a", Labels: good, Ready: true, AgentAlive: true}, NodeOK},
		{"not ready first", Eligibility{Selector: sel}, Node{Name: "a", Ready: false, AgentAlive: false}, NodeNotReady},
		{"lease expired", Eligibility{Selector: sel}, Node{Name: "a", Labels: good, Ready: true}, NodeAgentLeaseExpired},
		{"not selected", Eligibility{Selector: sel}, Node{Name: "a", Labels: map[string]string{"egress": "no"}, Ready: true, AgentAlive: true}, NodeNotSelected},
		{"no local endpoint", Eligibility{Selector: sel, LocalNodes: map[string]bool{"b": true}}, Node{Name: "a", Labels: good, Ready: true, AgentAlive: true}, NodeNoLocalEndpoint},
		{"local endpoint", Eligibility{Selector: sel, LocalNodes: map[string]bool{"a": true}}, Node{Name: "a", Labels: good, Ready: true, AgentAlive: true}, NodeOK},
	}
	for _, tc := range cases {
		if got := tc.el.Check(&tc.node); got != tc.wants {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.wants)
		}
	}
}

// nodes builds candidate nodes; a name with a suffix says what is wrong with
// it: "!ready", "!lease", "!selected".
func nodes(specs ...string) map[string]*Node {
	m := map[string]*Node{}
	for _, s := range specs {
		name, problem, _ := strings.Cut(s, "!")
		n := &Node{Name: name, Labels: map[string]string{"egress": "yes"}, Ready: true, AgentAlive: true}
		switch problem {
		case "ready":
			n.Ready = false
		case "lease":
			n.AgentAlive = false
		case "selected":
			n.Labels = nil
		case "restarting":
			n.AgentRestarting = true
		}
		m[name] = n
	}
	return m
}

// withLoads sets each node's load from m (0 when m has none) and returns
// the nodes.
func withLoads(ns map[string]*Node, m map[string]int) map[string]*Node {
	for name, n := range ns {
		n.Load = m[name]
	}
	return ns
}

func TestDecide(t *testing.T) {
	sel, _ := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}})
	eligible := Eligibility{Selector: sel}
	cases := []struct {
		name    string
		el      Eligibility
		current string
		nodes   map[string]*Node
		load    map[string]int
		host    string
		reason  reasons.Reason
		lost    NodeProblem
		message string // a substring
	}{
		{name: "least loaded wins", el: eligible, nodes: nodes("a", "b", "c"), load: map[string]int{"a": 2, "b": 1, "c": 2},
			host: "b", reason: reasons.Assigned, message: "label egress-service.k8s.ovn.org/ns-web"},
		{name: "valid current kept although unbalanced", el: eligible, current: "a", nodes: nodes("a", "b"), load: map[string]int{"a": 9, "b": 0},
			host: "a", reason: reasons.Assigned},
		{name: "an agent restarting is chosen last, whatever the loads", el: eligible, nodes: nodes("a!restarting", "b", "c!restarting"),
			load: map[string]int{"b": 5}, host: "b", reason: reasons.Assigned},
		{name: "only restarting agents: the least loaded of them", el: eligible, nodes: nodes("a!restarting", "b!restarting"),
			load: map[string]int{"a": 1}, host: "b", reason: reasons.Assigned},
		{name: "a current host whose agent restarts is kept", el: eligible, current: "a", nodes: nodes("a!restarting", "b"),
			host: "a", reason: reasons.Assigned},
		{name: "current deleted", el: eligible, current: "gone", nodes: nodes("a"), host: "a", reason: reasons.Assigned, lost: NodeDeleted},
		{name: "current not ready", el: eligible, current: "a", nodes: nodes("a!ready", "b"), host: "b", reason: reasons.Assigned, lost: NodeNotReady},
		{name: "current lease expired", el: eligible, current: "a", nodes: nodes("a!lease", "b"), host: "b", reason: reasons.Assigned, lost: NodeAgentLeaseExpired},
		{name: "current no longer selected", el: eligible, current: "a", nodes: nodes("a!selected", "b"), host: "b", reason: reasons.Assigned, lost: NodeNotSelected},
		{name: "current lost, no replacement", el: eligible, current: "a", nodes: nodes("a!lease", "b!ready", "c!selected"),
			reason: reasons.NoMatchingNode, lost: NodeAgentLeaseExpired,
			message: "the nodes are not Ready, or have no fresh agent Lease, or do not match nodeSelector"},
		{name: "no nodes at all", el: eligible, reason: reasons.NoMatchingNode, message: "there are no nodes"},
		{name: "ETP Local restricts to endpoint nodes", el: Eligibility{Selector: sel, LocalNodes: map[string]bool{"c": true}}, nodes: nodes("a", "b", "c"),
			load: map[string]int{"c": 5}, host: "c", reason: reasons.Assigned},
		{name: "ineligible service drops its host without a node cause", el: Eligibility{Reason: reasons.NoEndpoints, Message: "none"}, current: "a", nodes: nodes("a"),
			reason: reasons.NoEndpoints, message: "none"},
		{name: "ineligible service with a deleted host", el: Eligibility{Reason: reasons.ServiceNotFound, Message: "gone"}, current: "x", nodes: nodes("a"),
			reason: reasons.ServiceNotFound},
		{name: "network mode is ALL", el: Eligibility{Reason: reasons.AllNodes, Message: "net"}, current: "a", nodes: nodes("a"),
			host: esv1.HostAll, reason: reasons.AllNodes},
		{name: "back from network mode picks a node", el: eligible, current: esv1.HostAll, nodes: nodes("a"), host: "a", reason: reasons.Assigned},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide("ns/web", tc.el, tc.current, withLoads(tc.nodes, tc.load))
			if d.Host != tc.host || d.Reason != tc.reason || d.Lost != tc.lost {
				t.Fatalf("got host %q reason %q lost %q (%s); want %q %q %q", d.Host, d.Reason, d.Lost, d.Message, tc.host, tc.reason, tc.lost)
			}
			if !strings.Contains(d.Message, tc.message) {
				t.Errorf("message %q lacks %q", d.Message, tc.message)
			}
		})
	}
}

// TestDecideTieBreak: equal loads are broken by the rendezvous hash, so the
// answer does not depend on map order and differs between services.
func TestDecideTieBreak(t *testing.T) {
	ns := nodes("a", "b", "c", "d")
	el := Eligibility{Selector: nil}
	seen := map[string]bool{}
	for i := range 40 {
		key := fmt.Sprintf("ns/svc-%d", i)
		first := Decide(key, el, "", withLoads(ns, nil)).Host
		for range 20 { // map iteration order varies between calls
			if got := Decide(key, el, "", withLoads(ns, nil)).Host; got != first {
				t.Fatalf("%s: %s then %s", key, first, got)
			}
		}
		seen[first] = true
	}
	if len(seen) < 3 {
		t.Errorf("40 services with equal loads went to %v only", seen)
	}
}

// TestDecideMatchesSpecification compares Decide, which hashes the key
// once and looks only at the endpoints' nodes under externalTrafficPolicy
// Local, with the rule written out plainly: of every node that passes
// Check, those whose agent is not restarting if any, of them the least
// loaded, then the lowest FNV-1a of (key, NUL, node)
// (hash/fnv), then the lowest name; none, and every problem named, if no
// node passes.
func TestDecideMatchesSpecification(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sel, _ := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}})
	for round := range 2000 {
		ns := map[string]*Node{}
		load := map[string]int{}
		for i := range rng.IntN(12) {
			name := fmt.Sprintf("node-%d", i)
			n := &Node{Name: name, Ready: rng.IntN(5) > 0, AgentAlive: rng.IntN(5) > 0, AgentRestarting: rng.IntN(4) == 0}
			if rng.IntN(3) > 0 {
				n.Labels = map[string]string{"egress": "yes"}
			}
			ns[name], load[name] = n, rng.IntN(3)
		}
		el := Eligibility{}
		if rng.IntN(2) == 0 {
			el.Selector = sel
		}
		if rng.IntN(2) == 0 {
			el.LocalNodes = map[string]bool{}
			for i := range rng.IntN(14) { // some name no node has
				el.LocalNodes[fmt.Sprintf("node-%d", rng.IntN(14)+i%2)] = true
			}
		}
		key := fmt.Sprintf("ns/svc-%d", round)

		want, wantLoad, wantScore := "", 0, uint64(0)
		problems := map[NodeProblem]bool{}
		for name, n := range ns {
			if p := el.Check(n); p != NodeOK {
				problems[p] = true
				continue
			}
			// A restarting agent's node ranks after every other: its
			// load counts as beyond any other's.
			score, l := fnvScore(key, name), load[name]
			if n.AgentRestarting {
				l += 1 << 20
			}
			if want == "" || l < wantLoad || (l == wantLoad && (score < wantScore || (score == wantScore && name < want))) {
				want, wantLoad, wantScore = name, l, score
			}
		}
		d := Decide(key, el, "", withLoads(ns, load))
		if d.Host != want {
			t.Fatalf("round %d: host %q, want %q (nodes %d, local %v, selector %v)", round, d.Host, want, len(ns), el.LocalNodes, el.Selector)
		}
		if want == "" {
			if d.Reason != reasons.NoMatchingNode || d.Message != noCandidateMessage(len(ns), problems) {
				t.Fatalf("round %d: %s %q, want %s %q", round, d.Reason, d.Message, reasons.NoMatchingNode, noCandidateMessage(len(ns), problems))
			}
		}
	}
}

// TestDecideSpread: assigning services one after another keeps max-min <= 1.
func TestDecideSpread(t *testing.T) {
	ns := map[string]*Node{}
	for i := range 7 {
		name := fmt.Sprintf("node-%d", i)
		ns[name] = &Node{Name: name, Ready: true, AgentAlive: true}
	}
	load := map[string]int{}
	for i := range 100 {
		d := Decide(fmt.Sprintf("ns/svc-%d", i), Eligibility{}, "", withLoads(ns, load))
		load[d.Host]++
	}
	lo, hi := 1<<30, 0
	for n := range ns {
		lo, hi = min(lo, load[n]), max(hi, load[n])
	}
	if hi-lo > 1 {
		t.Errorf("spread %d (loads %v)", hi-lo, load)
	}
}

func TestLabelKey(t *testing.T) {
	long63 := strings.Repeat("n", 63)
	cases := []struct {
		ns, name, want string
	}{
		{"default", "web", "egress-service.k8s.ovn.org/default-web"},
		// exactly 63: kept as is
		{strings.Repeat("a", 31), strings.Repeat("b", 31), "egress-service.k8s.ovn.org/" + strings.Repeat("a", 31) + "-" + strings.Repeat("b", 31)},
		// 64: shortened
		{strings.Repeat("a", 32), strings.Repeat("b", 31), ""},
		// longest possible, and a cut that would end in '-'
		{long63, long63, ""},
		{strings.Repeat("a", 51) + "-x", long63, ""},
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	seen := map[string]string{}
	for _, tc := range cases {
		got := LabelKey(tc.ns, tc.name)
		if tc.want != "" && got != tc.want {
			t.Errorf("LabelKey(%s, %s) = %s, want %s", tc.ns, tc.name, got, tc.want)
		}
		if errs := validation.IsQualifiedName(got); len(errs) > 0 {
			t.Errorf("LabelKey(%s, %s) = %s is not a valid label key: %v", tc.ns, tc.name, got, errs)
		}
		name := strings.TrimPrefix(got, LabelPrefix)
		if len(name) > 63 || !valid.MatchString(name) || !IsLabelKey(got) {
			t.Errorf("bad label name %q", name)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s/%s and %s share %s", tc.ns, tc.name, other, got)
		}
		seen[got] = tc.ns + "/" + tc.name
		if LabelKey(tc.ns, tc.name) != got {
			t.Error("not stable")
		}
	}
	// Two long names that differ only after the cut get different keys.
	a, b := LabelKey(long63, strings.Repeat("x", 62)+"1"), LabelKey(long63, strings.Repeat("x", 62)+"2")
	if a == b {
		t.Errorf("long names differing at the end share %s", a)
	}
	if !strings.HasPrefix(strings.TrimPrefix(a, LabelPrefix), long63[:52]) {
		t.Errorf("shortened name %s does not start with the readable name", a)
	}
}

// TestNodeServes: a node serves while its Ready condition is True, or
// Unknown (the node lifecycle controller heard nothing lately) while its
// agent is alive; never when False (the kubelet's own report) or missing.
func TestNodeServes(t *testing.T) {
	ready := func(s corev1.ConditionStatus) []corev1.NodeCondition {
		return []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}, {Type: corev1.NodeReady, Status: s}}
	}
	for _, tc := range []struct {
		conds      []corev1.NodeCondition
		agentAlive bool
		want       bool
	}{
		{nil, true, false},
		{ready(corev1.ConditionTrue), true, true},
		{ready(corev1.ConditionTrue), false, true}, // the agent's liveness is judged apart
		{ready(corev1.ConditionUnknown), true, true},
		{ready(corev1.ConditionUnknown), false, false},
		{ready(corev1.ConditionFalse), true, false},
		{ready(corev1.ConditionFalse), false, false},
	} {
		if got := NodeServes(&corev1.Node{Status: corev1.NodeStatus{Conditions: tc.conds}}, tc.agentAlive); got != tc.want {
			t.Errorf("NodeServes(%v, agent alive %v) = %v", tc.conds, tc.agentAlive, got)
		}
	}
}
