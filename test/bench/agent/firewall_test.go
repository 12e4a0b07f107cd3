package agent

// BenchmarkAgentFirewall: the node agent's EgressFirewall part
// (TableFirewall) at the scale, on the same harness as
// BenchmarkAgent and BenchmarkAgentQoS (a real kube-apiserver, a real Open
// vSwitch, the agent in-process, ovs-ofctl --bundle of the same flow set
// into the same emptied switch, alternately).

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/controller/agent"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/wait"
)

// The scale; the defaults are the figures (100 namespaces × 1,000
// rules × 50 pods). -rounds, -setup-workers and the binary's profiling
// flags are BenchmarkAgent's. The names differ from BenchmarkAgentQoS's
// (-namespaces, -pods, -changes): one package holds both.
var (
	fwNamespaces = flag.Int("fw-namespaces", 100, "namespaces, each with an EgressFirewall default (BenchmarkAgentFirewall)")
	fwRules      = flag.Int("fw-rules", 1000, "rules of each namespace's EgressFirewall (BenchmarkAgentFirewall)")
	fwPodsPer    = flag.Int("fw-pods", 50, "pods per namespace, all bound to the benchmarked node, dual-stack (BenchmarkAgentFirewall)")
	// 50 samples make p99 the worst one; each costs a sync that replans
	// one namespace's rules (a rule change) or those of every namespace
	// whose rules name the DNS name (an answer change).
	fwChanges = flag.Int("fw-changes", 50, "rule flips, CIDR moves and DNS answer changes, each, timed for p50/p99 (BenchmarkAgentFirewall)")
)

// The shape of the firewall cluster.
const (
	// fwOtherNodes are the nodes besides benchNode, there for the
	// nodeSelector rules: the first fwInfraNodes are labelled
	// node-role.kubernetes.io/infra, the odd ones zone=a (the rest, and
	// benchNode, zone=b). Each has an InternalIP and an ExternalIP: two
	// destinations of a rule that selects it, and two exemptions of the
	// other stages' shared flows.
	fwOtherNodes = 6
	fwInfraNodes = 2
	// fwDNSNames is the pool of names the dnsName rules use: a namespace's
	// rules take 20 of them per 1,000 rules, from an offset of its own, so
	// each name is followed for about 40 of the 100 namespaces. Each
	// answers two IPv4 addresses and one IPv6 address.
	fwDNSNames = 50
	// fwFlippedRule is the rule the flips turn from Allow to Deny and
	// back: an IPv4 /32 without ports, one flow, at priority 10000 − 4.
	fwFlippedRule = 4
	// fwMovedRule is the rule whose cidrSelector the moves change between
	// two /24s: a Deny without ports, one flow replaced by another.
	fwMovedRule = 6
	// fwOpenRule is an Allow /32 without ports that no rule above
	// shadows: the trace checks a packet to it goes on.
	fwOpenRule = 0
	// fwMinRules is the fewest rules that hold every kind of the mix
	// (fwRule): the rules above, a dnsName rule (5), a nodeSelector rule
	// (10), then the two catch-all Denies.
	fwMinRules = 13
	// fwFirstRulePriority is rule 0's priority in TableFirewall; rule i
	// has fwFirstRulePriority − i (docs/egressfirewall.md: the
	// reference's numbers).
	fwFirstRulePriority = 10000
)

// The rules' destinations. No packet is sent to any of them: they are
// matched by flows, and two are traced with ofproto/trace.
var (
	// fwBlocks holds the /24s of the IPv4 CIDR rules, the k-th rule of
	// namespace i the (i × rules + k)-th; fwMovedBlocks the moved rule's
	// other /24, alike. 2^18 /24s each.
	fwBlocks      = netip.MustParsePrefix("20.0.0.0/6")
	fwMovedBlocks = netip.MustParsePrefix("24.0.0.0/6")
	// fwHosts holds the /32 rules' addresses, alike.
	fwHosts = netip.MustParsePrefix("64.0.0.0/8")
	// fwDNSAddrs holds the DNS names' IPv4 answers.
	fwDNSAddrs = netip.MustParsePrefix("198.18.0.0/15")
	// fwNodeExternal holds the other nodes' ExternalIPs.
	fwNodeExternal = netip.MustParsePrefix("203.0.113.0/24")
	// fwUnnamed is an address only the catch-all Deny 0.0.0.0/0 matches.
	fwUnnamed = netip.MustParseAddr("150.0.0.1")
)

// Labels of the other nodes, selected by the nodeSelector rules.
const (
	fwInfraLabel = "node-role.kubernetes.io/infra"
	fwZoneLabel  = "topology.kubernetes.io/zone"
)

func fwNamespace(i int) string { return fmt.Sprintf("fw-%03d", i) }
func fwDNSName(n int) string   { return fmt.Sprintf("api-%02d.example.com", n) }

// fwPodIPs are pod j of namespace i's addresses, IPv4 and IPv6.
func fwPodIPs(i, j int) [2]netip.Addr { return dualStackPodIPs(i*(*fwPodsPer) + j) }

// fwPod is pod j of namespace i, bound to node, Running, with its
// addresses (the status a kubelet would write).
func fwPod(i, j int) *corev1.Pod {
	ips := fwPodIPs(i, j)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: fwNamespace(i), Name: qosPodName(j), Labels: map[string]string{"app": "app"}},
		Spec:       corev1.PodSpec{NodeName: benchNode, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0].String(),
			PodIPs: []corev1.PodIP{{IP: ips[0].String()}, {IP: ips[1].String()}}},
	}
}

// fwBlock is the /24 of rule k of namespace i (moved: its other one).
func fwBlock(i, k int, moved bool) netip.Prefix {
	blocks := fwBlocks
	if moved {
		blocks = fwMovedBlocks
	}
	return netip.PrefixFrom(nth(blocks, (i*(*fwRules)+k)<<8), 24)
}

// fwHost is the /32 of rule k of namespace i.
func fwHost(i, k int) netip.Addr { return nth(fwHosts, i*(*fwRules)+k+1) }

// fwRule is rule k of namespace i's EgressFirewall of n rules. Of each
// 1,000: 2 nodeSelector rules (k mod 500 = 10: Deny the infra nodes;
// = 260: Allow zone a on TCP 443 and 6443), 20 dnsName Allows (k mod 50 =
// 5, half of them on TCP 443), 100 IPv6 CIDRs (k mod 10 = 3: a /64 Deny
// or a /128 Allow), and the rest IPv4 CIDRs, each destination distinct:
// a /32 Allow (k mod 4 = 0) or a /24 (Deny for k mod 4 = 2, else Allow).
// A CIDR rule has TCP 443 for k mod 7 = 1, TCP 80 and 443 for k mod 7 =
// 2, else no ports. The last two rules deny all of IPv6 and IPv4: an
// allow-list, as namespaces with a firewall usually have.
func fwRule(i, k, n int) esv1.EgressFirewallRule {
	tcp := func(ports ...int32) []esv1.EgressFirewallPort {
		var out []esv1.EgressFirewallPort
		for _, p := range ports {
			out = append(out, esv1.EgressFirewallPort{Protocol: "TCP", Port: p})
		}
		return out
	}
	allow, deny := esv1.EgressFirewallRuleAllow, esv1.EgressFirewallRuleDeny
	cidr := func(t esv1.EgressFirewallRuleType, p netip.Prefix) esv1.EgressFirewallRule {
		return esv1.EgressFirewallRule{Type: t, To: esv1.EgressFirewallDestination{CIDRSelector: p.String()}}
	}
	switch {
	case k == n-1:
		return cidr(deny, netip.MustParsePrefix("0.0.0.0/0"))
	case k == n-2:
		return cidr(deny, netip.MustParsePrefix("::/0"))
	case k%500 == 10:
		return esv1.EgressFirewallRule{Type: deny, To: esv1.EgressFirewallDestination{
			NodeSelector: &esv1.LabelSelector{MatchLabels: map[string]string{fwInfraLabel: ""}}}}
	case k%500 == 260:
		return esv1.EgressFirewallRule{Type: allow, Ports: tcp(443, 6443), To: esv1.EgressFirewallDestination{
			NodeSelector: &esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{
				{Key: fwZoneLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}}}}}
	case k%50 == 5:
		r := esv1.EgressFirewallRule{Type: allow, To: esv1.EgressFirewallDestination{DNSName: fwDNSName(fwRuleName(i, k))}}
		if k%100 == 5 {
			r.Ports = tcp(443)
		}
		return r
	}
	var r esv1.EgressFirewallRule
	switch {
	case k%20 == 3:
		r = cidr(deny, netip.PrefixFrom(fwIPv6(i, k, 0), 64))
	case k%20 == 13:
		r = cidr(allow, netip.PrefixFrom(fwIPv6(i, k, 1), 128))
	case k%4 == 0:
		r = cidr(allow, netip.PrefixFrom(fwHost(i, k), 32))
	case k%4 == 2:
		r = cidr(deny, fwBlock(i, k, false))
	default:
		r = cidr(allow, fwBlock(i, k, false))
	}
	switch k % 7 {
	case 1:
		r.Ports = tcp(443)
	case 2:
		r.Ports = tcp(80, 443)
	}
	return r
}

// fwRuleName is the pool name of dnsName rule k of namespace i (k mod 50
// = 5): consecutive rules take consecutive names, from an offset of the
// namespace's own.
func fwRuleName(i, k int) int { return (i*7 + k/50) % fwDNSNames }

// fwIPv6 is 2001:db8:i:k::host, for rule k of namespace i.
func fwIPv6(i, k, host int) netip.Addr {
	a := netip.MustParseAddr("2001:db8::").As16()
	a[4], a[5], a[6], a[7] = byte(i>>8), byte(i), byte(k>>8), byte(k)
	a[15] = byte(host)
	return netip.AddrFrom16(a)
}

func fwObject(i int) *esv1.EgressFirewall {
	rules := make([]esv1.EgressFirewallRule, *fwRules)
	for k := range rules {
		rules[k] = fwRule(i, k, *fwRules)
	}
	return &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: fwNamespace(i), Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: rules}}
}

// fwAnswer is DNS name n's answer: two IPv4 addresses and one IPv6; moved,
// the second IPv4 address is another one.
func fwAnswer(n int, moved bool) []netip.Addr {
	second := nth(fwDNSAddrs, 2*n+2)
	if moved {
		second = nth(fwDNSAddrs, 1000+n)
	}
	v6 := netip.MustParseAddr("2001:db8:ffff::").As16()
	v6[15] = byte(n + 1)
	return []netip.Addr{nth(fwDNSAddrs, 2*n+1), second, netip.AddrFrom16(v6)}
}

// fwAnswers are every pool name's answers, by esv1.DNSNameKey.
func fwAnswers() map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for n := range fwDNSNames {
		out[esv1.DNSNameKey(fwDNSName(n))] = fwAnswer(n, false)
	}
	return out
}

// fwNodes are benchNode and the other nodes, with their labels and
// addresses (the status a kubelet would write).
func fwNodes() []*corev1.Node {
	bench := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode, Labels: map[string]string{fwZoneLabel: "b"}},
		Spec:   corev1.NodeSpec{PodCIDR: qosNodePodCIDRs[0].String(), PodCIDRs: []string{qosNodePodCIDRs[0].String(), qosNodePodCIDRs[1].String()}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nth(nodeIPs, 10).String()}}}}
	out := []*corev1.Node{bench}
	for n := 1; n <= fwOtherNodes; n++ {
		nodeLabels := map[string]string{fwZoneLabel: "b"}
		if n%2 == 1 {
			nodeLabels[fwZoneLabel] = "a"
		}
		if n <= fwInfraNodes {
			nodeLabels[fwInfraLabel] = ""
		}
		out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fw-node-%d", n), Labels: nodeLabels},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: nth(nodeIPs, 10+n).String()},
				{Type: corev1.NodeExternalIP, Address: nth(fwNodeExternal, 10+n).String()}}}})
	}
	return out
}

// fwNodeAddresses is how many addresses the nodes have: each one an
// exemption of the other stages (not of TableFirewall).
func fwNodeAddresses() int { return 1 + 2*fwOtherNodes }

// fwCount is the benchmark's own count of a node's EgressFirewall flows,
// written from the API and docs/egressfirewall.md's flow-count formula,
// not from controller/dataplane:
//
//	TableFirewall = Σ_namespaces (local pod addresses
//	                  + Σ_rules destinations in the pods' families
//	                      × (max(1, ports) + fragment protocols))
//	                + exemptions + 2 × 2 + 1
//
// where a Deny with ports has a fragment protocol per distinct protocol of
// its ports, and every other rule none.
type fwCount struct {
	// addresses are the local pod addresses of namespaces with an
	// EgressFirewall: a classifying flow each in TableFirewall, an inbound
	// commit each in TableClassify, and a late admission each in
	// TableEgress. snooped are the snoop flows of the pod addresses of
	// namespaces with a dnsName rule in TableClassify: two each, DNS
	// replies over UDP and over TCP.
	addresses, snooped int
	// ruleFlows is Σ rules destinations × (max(1, ports) + fragment
	// protocols); deny and allow split it by the rule's type, cidr, dns
	// and nodes by its destination.
	ruleFlows, deny, allow int
	cidr, dns, nodes       int
	// fragments are the rule flows that drop fragments: Σ over the Deny
	// rules with ports, destinations × distinct protocols of the ports.
	fragments int
	// portExtra are the rule flows beyond one per destination: Σ
	// destinations × (ports − 1), the destination × port product.
	portExtra int
	// crossRules have several destinations and several ports: crossFlows
	// is what they cost as a product, conjunctive what a conjunctive match
	// would (destinations + ports + 1 each).
	crossRules, crossFlows, conjunctive int
}

// countFirewall counts for the firewalls, the pods given by namespace
// (all bound to the counted node), the nodes and the DNS answers.
func countFirewall(firewalls []*esv1.EgressFirewall, podsOf func(namespace string) [][2]netip.Addr,
	nodes []*corev1.Node, answers map[string][]netip.Addr) fwCount {
	var c fwCount
	for _, fw := range firewalls {
		var families [2]bool // IPv4, IPv6: of the namespace's pod addresses
		addrs := map[netip.Addr]bool{}
		for _, pod := range podsOf(fw.Namespace) {
			for _, a := range pod {
				addrs[a] = true
				families[fwFamily(a)] = true
			}
		}
		if len(addrs) == 0 {
			continue // no local pod: nothing on this node
		}
		c.addresses += len(addrs)
		for _, r := range fw.Spec.Egress {
			if r.To.DNSName != "" {
				c.snooped += 2 * len(addrs)
				break
			}
		}
		inFamilies := func(dsts map[netip.Addr]bool) int {
			n := 0
			for a := range dsts {
				if families[fwFamily(a)] {
					n++
				}
			}
			return n
		}
		for _, r := range fw.Spec.Egress {
			dsts := map[netip.Addr]bool{} // by address (a prefix's masked one)
			var counter *int
			switch {
			case r.To.CIDRSelector != "":
				dsts[netip.MustParsePrefix(r.To.CIDRSelector).Masked().Addr()] = true
				counter = &c.cidr
			case r.To.DNSName != "":
				for _, a := range answers[strings.ToLower(strings.TrimSuffix(r.To.DNSName, "."))] {
					dsts[a] = true
				}
				counter = &c.dns
			default:
				sel, err := metav1.LabelSelectorAsSelector(r.To.NodeSelector.AsMeta())
				if err != nil {
					panic(err)
				}
				for _, n := range nodes {
					if !sel.Matches(labels.Set(n.Labels)) {
						continue
					}
					for _, a := range n.Status.Addresses {
						if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
							dsts[netip.MustParseAddr(a.Address)] = true
						}
					}
				}
				counter = &c.nodes
			}
			ports := map[esv1.EgressFirewallPort]bool{}
			protocols := map[string]bool{}
			for _, p := range r.Ports {
				ports[p] = true
				protocols[p.Protocol] = true
			}
			d, p := inFamilies(dsts), len(ports)
			flows := d * max(1, p)
			if r.Type == esv1.EgressFirewallRuleDeny {
				c.fragments += d * len(protocols)
				flows += d * len(protocols)
			}
			c.ruleFlows += flows
			*counter += flows
			if r.Type == esv1.EgressFirewallRuleDeny {
				c.deny += flows
			} else {
				c.allow += flows
			}
			if p > 1 {
				c.portExtra += d * (p - 1)
			}
			if d > 1 && p > 1 {
				c.crossRules++
				c.crossFlows += d * p
				c.conjunctive += d + p + 1
			}
		}
	}
	return c
}

func fwFamily(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// tableFirewall is the formula's TableFirewall for exempt exemptions.
func (c fwCount) tableFirewall(exempt int) int { return c.addresses + c.ruleFlows + exempt + 2*2 + 1 }

// expectedFlows is benchNode's whole flow set: the shared flows, a
// classifying flow, an inbound commit and a late admission per pod
// address, two snoop flows (UDP, TCP) per pod address of a namespace with
// a dnsName rule, the rule flows.
func (c fwCount) expectedFlows(e *env) int {
	return stageSharedFlows(len(e.podCIDRs), len(e.serviceCIDRs), fwNodeAddresses()) + 3*c.addresses + c.snooped + c.ruleFlows
}

// fixedDNS is a FirewallDNS with fixed answers (agent.FirewallDNS): the
// bench measures the agent, not a resolver. It has answered already when
// the agent starts (Changed is signalled once from the start), as a warm
// resolver would have, so that the first sync holds the names' flows; a
// fresh agent with a real resolver would add them in a later sync.
type fixedDNS struct {
	mu       sync.Mutex
	answers  map[string][]netip.Addr
	followed []string
	changed  chan struct{} // buffered 1
	// generation counts the changes (agent.FirewallDNS).
	generation uint64
}

func newFixedDNS(answers map[string][]netip.Addr) *fixedDNS {
	d := &fixedDNS{answers: answers, changed: make(chan struct{}, 1)}
	d.changed <- struct{}{}
	return d
}

func (d *fixedDNS) SetNames(keys []string) {
	d.mu.Lock()
	d.followed = slices.Clone(keys)
	d.mu.Unlock()
}

func (d *fixedDNS) Snapshot() map[string][]netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]netip.Addr{}
	for _, k := range d.followed {
		if a, ok := d.answers[k]; ok {
			out[k] = slices.Clone(a)
		}
	}
	return out
}

func (d *fixedDNS) Changed() <-chan struct{} { return d.changed }

// Learn ignores what it is given: the bench's answers are fixed.
func (d *fixedDNS) Learn(string, []netip.Addr, time.Duration) {}

func (d *fixedDNS) Generation() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.generation
}

// set changes key's answer and signals it, as a resolver whose answer
// changed would.
func (d *fixedDNS) set(key string, addrs []netip.Addr) {
	d.mu.Lock()
	d.answers[key] = addrs
	d.generation++
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

func (d *fixedDNS) answer(key string) []netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.answers[key])
}

func BenchmarkAgentFirewall(b *testing.B) {
	ovstest.RequireRoot(b)
	logs := captureKlog()
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	if *fwNamespaces < 1 || *fwPodsPer < 1 || *rounds < 1 || *fwChanges < 1 {
		b.Fatal("-fw-namespaces, -fw-pods, -rounds and -fw-changes must be positive")
	}
	if *fwRules < fwMinRules || *fwRules > esv1.MaxEgressFirewallRules {
		b.Fatalf("-fw-rules must be %d to %d", fwMinRules, esv1.MaxEgressFirewallRules)
	}
	if *fwNamespaces*(*fwPodsPer) >= 1<<(32-qosNodePodCIDRs[0].Bits())-2 {
		b.Fatalf("more pods than the node's pod CIDR %s holds", qosNodePodCIDRs[0])
	}
	if *fwNamespaces*(*fwRules) >= 1<<(24-fwBlocks.Bits()) || *fwNamespaces >= 1<<16 {
		b.Fatalf("more rules than %s has /24s", fwBlocks)
	}
	benchStart := time.Now()
	e := newEnv(b)
	e.podCIDRs = []netip.Prefix{clusterPodCIDR, qosClusterPodCIDR6}
	e.serviceCIDRs = []netip.Prefix{serviceCIDR, qosServiceCIDR6}
	// Every in-process agent gets the same answers, each its own resolver;
	// the DNS changes go to the running agent's.
	answers := fwAnswers()
	e.newDNS = func() agent.FirewallDNS { return newFixedDNS(maps.Clone(answers)) }
	pods := *fwNamespaces * (*fwPodsPer)
	out("EgressFirewall bench: %d namespaces x %d rules x %d pods, dual-stack: all %d pods on %s, the WORST CASE for one agent's pods (a real node runs ~%d); the rule flows are the same on any node that runs a pod of every namespace",
		*fwNamespaces, *fwRules, *fwPodsPer, pods, benchNode, qosRealPodsPerNode)
	out("  rules of a namespace: %s", fwMix(fwObject(0)))

	bin := proc.Build(b, "cmd/egressflow-agent")

	t0 := time.Now()
	e.createFirewallCluster(b)
	out("setup: %d nodes, %d namespaces with an EgressFirewall, %d Pods (created and their status written, %d workers) in %v",
		fwOtherNodes+1, *fwNamespaces, pods, *setupWorkers, time.Since(t0).Round(time.Millisecond))

	// The count, from the objects as created.
	firewalls := make([]*esv1.EgressFirewall, *fwNamespaces)
	for i := range firewalls {
		firewalls[i] = fwObject(i)
	}
	podsOf := func(namespace string) [][2]netip.Addr {
		var i int
		if _, err := fmt.Sscanf(namespace, "fw-%d", &i); err != nil {
			panic(err)
		}
		out := make([][2]netip.Addr, *fwPodsPer)
		for j := range out {
			out[j] = fwPodIPs(i, j)
		}
		return out
	}
	count := countFirewall(firewalls, podsOf, fwNodes(), answers)
	fwExempt := len(e.podCIDRs) + len(e.serviceCIDRs)
	wantTable := count.tableFirewall(fwExempt)
	wantFlows := count.expectedFlows(e)
	wantMods := wantFlows - 1 // the marker stays on a cleared bridge
	tableFilter := fmt.Sprintf("table=%d,%s", dataplane.TableFirewall, cookieFilter)

	// Warm-up: one full sync, unmeasured, capturing the flow set.
	e.clearFlows(b)
	warm := e.startAgent(b, logs, true)
	warm.waitHealthy(b)
	flowSet := warm.sw.firstBundle()
	if got, want := gaugeValue(b, warm.reg, "egressflow_agent_firewall_rules"), *fwNamespaces*(*fwRules); got != float64(want) {
		b.Fatalf("egressflow_agent_firewall_rules is %v, want %d", got, want)
	}
	warm.stop()
	if len(flowSet) != wantMods {
		b.Fatalf("the agent's first bundle has %d flows, the benchmark counts %d besides the marker (%+v); a first sync without the DNS names' flows would be %d short",
			len(flowSet), wantMods, count, count.dns)
	}
	byKind := map[dataplane.FlowKind]int{}
	tableFW := 0
	for _, fm := range flowSet {
		if fm.Command != openflow.FlowAdd {
			b.Fatalf("the first bundle into an empty bridge holds a %v", fm.Command)
		}
		c, _ := dataplane.DecodeCookie(fm.Cookie)
		byKind[c.Kind]++
		if fm.Table == dataplane.TableFirewall {
			tableFW++
		}
	}
	if tableFW != wantTable {
		b.Fatalf("the agent's first bundle has %d TableFirewall flows, the formula %d", tableFW, wantTable)
	}
	for kind, want := range map[dataplane.FlowKind]int{dataplane.KindFirewallClassify: count.addresses,
		dataplane.KindFirewallDeny: count.deny, dataplane.KindFirewallAllow: count.allow, dataplane.KindFirewallPass: fwExempt + 2*2 + 1,
		dataplane.KindAdmit: count.addresses, dataplane.KindFirewallSnoop: count.snooped, dataplane.KindFirewallInbound: count.addresses} {
		if byKind[kind] != want {
			b.Fatalf("%d flows of kind %#x in the agent's first bundle, the benchmark counts %d", byKind[kind], kind, want)
		}
	}
	flowFile := ovstest.WriteFlowFile(b, flowSet)
	out("flow set: %d flows, of which %d in TableFirewall; written to %s for ovs-ofctl", wantFlows, tableFW, flowFile)
	out("  TableFirewall = pod addresses %d (classify) + Σ rules destinations x (max(1, ports) + fragment protocols) %d + exemptions %d + replies and commits 4 + default 1 = %d (the formula; the agent's first bundle and the bridge agree)",
		count.addresses, count.ruleFlows, fwExempt, wantTable)
	out("  rule flows by destination: cidrSelector %d, dnsName %d, nodeSelector %d; by verdict: deny %d, allow %d; beyond one per destination (ports) %d; dropping fragments (Deny with ports) %d",
		count.cidr, count.dns, count.nodes, count.deny, count.allow, count.portExtra, count.fragments)
	out("  rules with several destinations and several ports: %d, costing %d flows as destinations x ports, %d as conjunctive matches",
		count.crossRules, count.crossFlows, count.conjunctive)
	out("  outside TableFirewall: a late admission per pod address %d (TableEgress) + an inbound commit per pod address %d and two DNS snoop flows (UDP, TCP) per pod address of a namespace with a dnsName rule %d (TableClassify) + %d shared",
		count.addresses, count.addresses, count.snooped, wantFlows-tableFW-2*count.addresses-count.snooped)

	full := e.compareFullSync(b, logs, fullSyncRounds{
		flowMods: wantMods, checkMods: true,
		install: func() time.Duration { return e.sw.BundleAddFlows(b, flowFile) },
		check: func(who string) {
			e.expectFlowCount(b, wantFlows)
			if n := e.sw.FlowCount(b, tableFilter); n != wantTable {
				b.Fatalf("%s: %d TableFirewall flows on the bridge, the formula %d", who, n, wantTable)
			}
		},
	})
	syncMed, ofctlMed, ratio, last := full.sync, full.ofctl, full.ratio, full.last

	// Restart with everything in place.
	before := e.sw.Ofctl(b, "dump-flows", e.sw.Bridge, cookieFilter, "--no-stats", "--sort")
	last.stop()
	restarted := e.startAgent(b, logs, false)
	restartHealthy := restarted.waitHealthy(b)
	restartSynced := restarted.cachesSynced(b, logs)
	time.Sleep(restartSettle)
	restartMods := restarted.sw.mods.Load()
	if after := e.sw.Ofctl(b, "dump-flows", e.sw.Bridge, cookieFilter, "--no-stats", "--sort"); after != before {
		b.Errorf("the flows changed across the restart")
	}
	restartTotal := restartHealthy.Sub(restarted.started)
	out("restart with everything in place: %d flow mods (%v after healthy); healthy %v after start (informers %v, then sync %v)",
		restartMods, restartSettle, restartTotal.Round(time.Millisecond),
		restartSynced.Sub(restarted.started).Round(time.Millisecond), restartHealthy.Sub(restartSynced).Round(time.Millisecond))

	// Changes: rules flipped, rules' CIDRs moved, DNS answers changed.
	var flipAPI, moveAPI []time.Duration
	flip, flipSync := changeLatency(b, restarted, *fwNamespaces, *fwChanges, e.flipRule(&flipAPI))
	e.expectFlowCount(b, wantFlows)
	flipAPI = flipAPI[latencyWarmup:]
	out("rule %d flipped Allow<->Deny -> its flow in OVS (%d samples): p50 %v, p99 %v, max %v; the API Update call alone p50 %v, p99 %v; mean agent node sync meanwhile %v",
		fwFlippedRule, len(flip), percentile(flip, 50).Round(100*time.Microsecond), percentile(flip, 99).Round(100*time.Microsecond),
		slices.Max(flip).Round(100*time.Microsecond), percentile(flipAPI, 50).Round(100*time.Microsecond), percentile(flipAPI, 99).Round(100*time.Microsecond),
		flipSync.Round(100*time.Microsecond))
	move, moveSync := changeLatency(b, restarted, *fwNamespaces, *fwChanges, e.moveRule(&moveAPI))
	e.expectFlowCount(b, wantFlows)
	moveAPI = moveAPI[latencyWarmup:]
	out("rule %d's cidrSelector moved to another /24 -> its flow in OVS (%d samples): p50 %v, p99 %v, max %v; the API Update call alone p50 %v, p99 %v; mean agent node sync meanwhile %v",
		fwMovedRule, len(move), percentile(move, 50).Round(100*time.Microsecond), percentile(move, 99).Round(100*time.Microsecond),
		slices.Max(move).Round(100*time.Microsecond), percentile(moveAPI, 50).Round(100*time.Microsecond), percentile(moveAPI, 99).Round(100*time.Microsecond),
		moveSync.Round(100*time.Microsecond))
	dns, dnsSync := changeLatency(b, restarted, *fwNamespaces, *fwChanges, moveAnswer)
	e.expectFlowCount(b, wantFlows)
	out("a DNS name's answer changed (one of two IPv4 addresses; each name is followed for %.1f namespaces on average) -> its flows in OVS (%d samples): p50 %v, p99 %v, max %v; mean agent node sync meanwhile %v",
		fwFollowers(firewalls), len(dns), percentile(dns, 50).Round(100*time.Microsecond), percentile(dns, 99).Round(100*time.Microsecond),
		slices.Max(dns).Round(100*time.Microsecond), dnsSync.Round(100*time.Microsecond))
	e.checkEnforced(b)
	out("ofproto/trace: a pod's packet to the last flipped rule's /32 gets its new verdict, to rule %d's /32 goes on, to %s is dropped by the catch-all", fwOpenRule, fwUnnamed)
	restarted.stop()

	// The agent binary's memory: a full sync into the emptied bridge. Its
	// resolver asks a closed port (runBinary), so its dnsName rules match
	// nothing: their flows are not installed.
	e.clearFlows(b)
	binaryFlows := wantFlows - count.dns
	mem := e.runBinary(b, bin, binaryFlows-1, binaryFlows, "")
	out("agent binary (the DaemonSet's GOMEMLIMIT; no DNS answers, so %d flows, without the %d of the dnsName rules): healthy %v after start (informers synced %v); VmRSS %.1f MB when healthy, %.1f MB after %v; peak VmHWM %.1f MB; then Go heap in use %.1f MB",
		binaryFlows, count.dns, mem.healthy.Round(time.Millisecond), mem.synced.Round(time.Millisecond), mb(mem.rssHealthy), mb(mem.rssSettled), binarySettle, mb(mem.peak), mb(mem.heapInuse))
	out("total bench time %v", time.Since(benchStart).Round(time.Second))

	out("")
	out("%-66s %14s", fmt.Sprintf("EgressFirewall bench, %d namespaces x %d rules x %d pods, all on one node (worst case)", *fwNamespaces, *fwRules, *fwPodsPer), "value")
	out("%s", strings.Repeat("-", 81))
	row := func(name, value string) { out("%-66s %14s", name, value) }
	row("flows in the full set", strconv.Itoa(wantFlows))
	row("  of which in TableFirewall (= the formula's prediction)", strconv.Itoa(tableFW))
	row("    classifying: local pod addresses", strconv.Itoa(count.addresses))
	row("    rules: Σ destinations x (max(1, ports) + fragment protocols)", strconv.Itoa(count.ruleFlows))
	row("      of which beyond one per destination (ports)", strconv.Itoa(count.portExtra))
	row("      of which dropping fragments (Deny with ports)", strconv.Itoa(count.fragments))
	row("  late admissions, TableEgress: local pod addresses", strconv.Itoa(count.addresses))
	row("informer sync of the agent, median (s)", secs(full.informers))
	row("full sync, agent: sync start to Healthy, median (s)", secs(syncMed))
	row("same flows, ovs-ofctl --bundle add-flows, median (s)", secs(ofctlMed))
	row("ratio agent / ovs-ofctl (flows/s)", fmt.Sprintf("%.2f", ratio))
	row("restart, everything in place: flow mods", strconv.FormatInt(restartMods, 10))
	row("restart, everything in place: start to Healthy (s)", secs(restartTotal))
	row("rule flipped Allow<->Deny: Update to bundle acked, p50 (ms)", ms(percentile(flip, 50)))
	row("rule flipped Allow<->Deny: Update to bundle acked, p99 (ms)", ms(percentile(flip, 99)))
	row("  the API Update call alone, p50 (ms)", ms(percentile(flipAPI, 50)))
	row("rule's CIDR moved: Update to bundle acked, p50 (ms)", ms(percentile(move, 50)))
	row("rule's CIDR moved: Update to bundle acked, p99 (ms)", ms(percentile(move, 99)))
	row("  the API Update call alone, p50 (ms)", ms(percentile(moveAPI, 50)))
	row("DNS answer changed: answer to bundle acked, p50 (ms)", ms(percentile(dns, 50)))
	row("DNS answer changed: answer to bundle acked, p99 (ms)", ms(percentile(dns, 99)))
	row("agent binary peak RSS, VmHWM (MB; without dnsName flows)", fmt.Sprintf("%.1f", mb(mem.peak)))
	row("agent binary Go heap in use after sync (MB)", fmt.Sprintf("%.1f", mb(mem.heapInuse)))

	b.ReportMetric(float64(wantFlows), "flows")
	b.ReportMetric(float64(tableFW), "tablefw-flows")
	b.ReportMetric(ratio, "ratio-vs-ofctl")
	b.ReportMetric(float64(restartMods), "restart-mods")
	b.ReportMetric(float64(percentile(flip, 99).Microseconds())/1000, "flip-p99-ms")
	b.ReportMetric(float64(percentile(move, 99).Microseconds())/1000, "cidr-p99-ms")
	b.ReportMetric(float64(percentile(dns, 99).Microseconds())/1000, "dns-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// fwFollowers is how many namespaces' rules name a DNS name of the pool,
// on average over the names named at all.
func fwFollowers(firewalls []*esv1.EgressFirewall) float64 {
	followers := map[string]int{}
	for _, fw := range firewalls {
		names := map[string]bool{}
		for _, r := range fw.Spec.Egress {
			if r.To.DNSName != "" {
				names[r.To.DNSName] = true
			}
		}
		for name := range names {
			followers[name]++
		}
	}
	sum := 0
	for _, n := range followers {
		sum += n
	}
	return float64(sum) / float64(max(1, len(followers)))
}

// fwMix describes a namespace's rules by kind.
func fwMix(fw *esv1.EgressFirewall) string {
	var v4, v6, names, selectors, ported, deny int
	for _, r := range fw.Spec.Egress {
		switch {
		case r.To.DNSName != "":
			names++
		case r.To.NodeSelector != nil:
			selectors++
		case strings.Contains(r.To.CIDRSelector, ":"):
			v6++
		default:
			v4++
		}
		if len(r.Ports) > 0 {
			ported++
		}
		if r.Type == esv1.EgressFirewallRuleDeny {
			deny++
		}
	}
	return fmt.Sprintf("%d IPv4 cidrSelector (/24 and /32, 0.0.0.0/0 last), %d IPv6 (/64, /128, ::/0), %d dnsName, %d nodeSelector; %d with 1-2 ports; %d Deny, %d Allow",
		v4, v6, names, selectors, ported, deny, len(fw.Spec.Egress)-deny)
}

// gaugeValue reads a gauge without labels from the agent's registry.
func gaugeValue(b *testing.B, reg *prometheus.Registry, name string) float64 {
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	b.Fatalf("no %s metric", name)
	return 0
}

// createFirewallCluster creates the nodes (benchNode with pod CIDRs that
// hold every pod), the namespaces, their EgressFirewall objects and their
// pods, all bound to benchNode, with their status written.
func (e *env) createFirewallCluster(b *testing.B) {
	ctx := context.Background()
	nodes := fwNodes()
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		status := nodes[i].Status
		n, err := e.admin.CoreV1().Nodes().Create(ctx, nodes[i], metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Status = status
		_, err = e.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	wait.Parallel(b, *fwNamespaces, *setupWorkers, func(i int) error {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fwNamespace(i)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := e.adminES.K8sV1().EgressFirewalls(fwNamespace(i)).Create(ctx, fwObject(i), metav1.CreateOptions{})
		return err
	})
	e.createPods(b, *fwNamespaces*(*fwPodsPer), func(k int) *corev1.Pod { return fwPod(k / *fwPodsPer, k%*fwPodsPer) })
}

// fwKey is namespace i's EgressFirewall's key, its flows' cookie hash.
func fwKey(i int) string {
	return dataplane.ObjectKey(dataplane.APIEgressFirewall, fwNamespace(i), esv1.EgressFirewallName)
}

// updateRule reads namespace i's EgressFirewall, lets edit change its rule
// k, and awaits the bundle with a flow mod for which carries holds (given
// the edited rule) after the Update; the Update call's own duration is
// appended to api.
func (e *env) updateRule(b *testing.B, r *runningAgent, i, k int, api *[]time.Duration, what string,
	edit func(rule *esv1.EgressFirewallRule) (carries func(*openflow.FlowMod) bool)) time.Duration {
	ctx := context.Background()
	client := e.adminES.K8sV1().EgressFirewalls(fwNamespace(i))
	fw, err := client.Get(ctx, esv1.EgressFirewallName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	carries := edit(&fw.Spec.Egress[k])
	return newFlowWatch(carries).await(b, r.sw, fmt.Sprintf("%s's %s", fw.Namespace, what), func() error {
		start := time.Now()
		_, err := client.Update(ctx, fw, metav1.UpdateOptions{})
		*api = append(*api, time.Since(start))
		return err
	})
}

// ruleFlow is a flowWatch predicate: a flow mod that adds (or replaces)
// rule k's flow with cookie kind of namespace i.
func ruleFlow(i, k int, kind dataplane.FlowKind) func(*openflow.FlowMod) bool {
	cookie := dataplane.Cookie(kind, fwKey(i))
	priority := uint16(fwFirstRulePriority - k)
	return func(m *openflow.FlowMod) bool {
		return m.Command == openflow.FlowAdd && m.Table == dataplane.TableFirewall && m.Priority == priority && m.Cookie == cookie
	}
}

// flipRule turns namespace i's rule fwFlippedRule from Allow to Deny, or
// back: its flow is replaced by one with the other verdict.
func (e *env) flipRule(api *[]time.Duration) func(b *testing.B, r *runningAgent, i int) time.Duration {
	return func(b *testing.B, r *runningAgent, i int) time.Duration {
		return e.updateRule(b, r, i, fwFlippedRule, api, "flipped rule", func(rule *esv1.EgressFirewallRule) func(*openflow.FlowMod) bool {
			if rule.Type == esv1.EgressFirewallRuleDeny {
				rule.Type = esv1.EgressFirewallRuleAllow
				return ruleFlow(i, fwFlippedRule, dataplane.KindFirewallAllow)
			}
			rule.Type = esv1.EgressFirewallRuleDeny
			return ruleFlow(i, fwFlippedRule, dataplane.KindFirewallDeny)
		})
	}
}

// moveRule moves namespace i's rule fwMovedRule between its two /24s: its
// flow is deleted and one for the other /24 added.
func (e *env) moveRule(api *[]time.Duration) func(b *testing.B, r *runningAgent, i int) time.Duration {
	return func(b *testing.B, r *runningAgent, i int) time.Duration {
		return e.updateRule(b, r, i, fwMovedRule, api, "moved rule", func(rule *esv1.EgressFirewallRule) func(*openflow.FlowMod) bool {
			to := fwBlock(i, fwMovedRule, true)
			if rule.To.CIDRSelector == to.String() {
				to = fwBlock(i, fwMovedRule, false)
			}
			rule.To.CIDRSelector = to.String()
			inRule := ruleFlow(i, fwMovedRule, dataplane.KindFirewallDeny)
			return func(m *openflow.FlowMod) bool { return inRule(m) && matchesDst(m, to) }
		})
	}
}

// moveAnswer changes the answer of the name of namespace i's first
// dnsName rule (rule 5) between its two second IPv4 addresses, in the
// running agent's resolver: the flows of every rule naming it, in every
// namespace, are replaced.
func moveAnswer(b *testing.B, r *runningAgent, i int) time.Duration {
	d, ok := r.dns.(*fixedDNS)
	if !ok {
		b.Fatal("the agent has no fixedDNS")
	}
	n := fwRuleName(i, 5)
	key := esv1.DNSNameKey(fwDNSName(n))
	next := fwAnswer(n, true)
	if slices.Equal(d.answer(key), next) {
		next = fwAnswer(n, false)
	}
	to := netip.PrefixFrom(next[1], 32)
	carries := func(m *openflow.FlowMod) bool {
		return m.Command == openflow.FlowAdd && m.Table == dataplane.TableFirewall && matchesDst(m, to)
	}
	return newFlowWatch(carries).await(b, r.sw, "the flows of "+key+"'s new address "+to.Addr().String(), func() error {
		d.set(key, next)
		return nil
	})
}

// matchesDst reports whether m matches exactly destination p.
func matchesDst(m *openflow.FlowMod, p netip.Prefix) bool {
	field := openflow.FieldIPv4Dst
	if p.Addr().Is6() {
		field = openflow.FieldIPv6Dst
	}
	value, mask, ok := m.Match.Get(field)
	if !ok {
		return false
	}
	addr, ok := netip.AddrFromSlice(value)
	if !ok {
		return false
	}
	length := addr.BitLen() // no mask: the whole address
	if mask != nil {
		length = 0
		for _, m := range mask {
			length += bits.OnesCount8(m)
		}
	}
	return netip.PrefixFrom(addr, length) == p
}

// checkEnforced traces pod packets through the bridge with ofproto/trace,
// after the changes: the last flipped rule's /32 gets the rule's verdict
// now in the API, fwOpenRule's goes on, and fwUnnamed is dropped by the
// catch-all.
func (e *env) checkEnforced(b *testing.B) {
	ctx := context.Background()
	total := latencyWarmup + *fwChanges
	i := (total - 1) * (*fwNamespaces) / total // the last flip's namespace
	fw, err := e.adminES.K8sV1().EgressFirewalls(fwNamespace(i)).Get(ctx, esv1.EgressFirewallName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	src := fwPodIPs(i, 0)[0]
	for _, c := range []struct {
		dst  netip.Addr
		rule int
		deny bool
	}{
		{fwHost(i, fwFlippedRule), fwFlippedRule, fw.Spec.Egress[fwFlippedRule].Type == esv1.EgressFirewallRuleDeny},
		{fwHost(i, fwOpenRule), fwOpenRule, false},
		{fwUnnamed, *fwRules - 1, true},
	} {
		flow := fmt.Sprintf("in_port=LOCAL,ip,nw_src=%s,nw_dst=%s", src, c.dst)
		trace := e.sw.Appctl(b, "ofproto/trace", e.sw.Bridge, flow, "--ct-next", "trk,new") // a new connection the pod opens
		judged := fmt.Sprintf("priority %d, cookie %#x", fwFirstRulePriority-c.rule, dataplane.Cookie(map[bool]dataplane.FlowKind{
			true: dataplane.KindFirewallDeny, false: dataplane.KindFirewallAllow}[c.deny], fwKey(i)))
		// The last pass decides: the first ends in conntrack's
		// recirculation.
		actions := trace[strings.LastIndex(trace, "Datapath actions: ")+len("Datapath actions: "):]
		actions, _, _ = strings.Cut(actions, "\n")
		if !strings.Contains(trace, judged) || (actions == "drop") != c.deny {
			b.Fatalf("ofproto/trace %s: want rule %d (%s) to %s it:\n%s", flow, c.rule, judged,
				map[bool]string{true: "drop", false: "let out"}[c.deny], trace)
		}
	}
}
