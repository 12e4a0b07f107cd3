package dataplane

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// randomInputs draws one EgressService's inputs from small pools, so that
// services often share endpoints and LB IPs, hosts move between nodes,
// modes and hosts disagree, and objects go missing.
func randomInputs(r *rand.Rand, key string) ServiceInputs {
	ns, name := key[:1], key[2:]
	pick := func(options ...string) string { return options[r.IntN(len(options))] }
	mode := esv1.SourceIPMode(pick("", string(esv1.SourceIPByLoadBalancerIP), string(esv1.SourceIPByNetwork)))
	host := pick("", "n1", "n2", "n3", esv1.HostAll)
	if r.IntN(4) > 0 { // mostly consistent, sometimes a mismatch
		host = pick("n1", "n2", "n3")
		if mode == esv1.SourceIPByNetwork {
			host = esv1.HostAll
		}
	}
	in := ServiceInputs{EgressService: egressService(ns, name, mode, pick("", "blue", "7", "nosuch"), host)}
	if r.IntN(8) > 0 {
		in.Service = lbService(ns, name, pick("192.0.2.1", "192.0.2.2", "192.0.2.3"), pick("2001:db8::1", "2001:db8::2"))
		if r.IntN(8) == 0 {
			in.Service.Spec.Type = corev1.ServiceTypeClusterIP
		}
		if r.IntN(3) > 0 {
			in.Service.Spec.Selector = map[string]string{"app": pick("a", "b")}
		}
		switch r.IntN(3) {
		case 0:
			in.Service.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		case 1:
			in.Service.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}
	}
	var pairs []string
	for range r.IntN(5) {
		pairs = append(pairs, pick("n1", "n2", "n3"), fmt.Sprintf("10.244.%d.%d", r.IntN(3)+1, r.IntN(6)))
	}
	in.EndpointSlices = []*discoveryv1.EndpointSlice{endpointSlice(pairs...)}
	if r.IntN(3) == 0 {
		in.EndpointSlices = append(in.EndpointSlices, &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{fmt.Sprintf("fd00:10:244:%d::%d", r.IntN(3)+1, r.IntN(4))}, NodeName: ptr(pick("n1", "n2"))},
		}})
	}
	if r.IntN(10) == 0 {
		in = ServiceInputs{} // deleted
	}
	return in
}

// randomPods draws pods from the same small pools: a few of them on each
// node, labelled so that services select some, with addresses that are
// often endpoints.
func randomPods(r *rand.Rand) []*corev1.Pod { return randomPodsIn(r, "a", "b", "c") }

// randomPodsIn is randomPods in the namespaces given.
func randomPodsIn(r *rand.Rand, namespaces ...string) []*corev1.Pod {
	pick := func(options ...string) string { return options[r.IntN(len(options))] }
	var out []*corev1.Pod
	for range r.IntN(6) {
		ips := []string{fmt.Sprintf("10.244.%d.%d", r.IntN(3)+1, r.IntN(6))}
		if r.IntN(2) == 0 {
			ips = append(ips, fmt.Sprintf("fd00:10:244:%d::%d", r.IntN(3)+1, r.IntN(4)))
		}
		var labels map[string]string
		if app := pick("a", "b", ""); app != "" {
			labels = map[string]string{"app": app}
		}
		p := pod(pick(namespaces...), pick("n1", "n2"), labels, ips...)
		p.Name = fmt.Sprintf("p%d", len(out))
		if r.IntN(6) == 0 {
			p.Status.Phase = corev1.PodFailed
		}
		out = append(out, p)
	}
	return out
}

// randomEgressIP draws an EgressIP named name, or nil (deleted): addresses
// of both families from a small pool, status items naming the nodes of
// the test (one of them sometimes empty, sometimes for an address the spec
// lacks, sometimes twice), selectors over the labels randomNamespaces and
// randomPodsIn give (a selector that does not parse, as an object stored
// before the CRD refused it, now and then), and creation times that tie.
func randomEgressIP(r *rand.Rand, name string) *esv1.EgressIP {
	if r.IntN(6) == 0 {
		return nil
	}
	pool := []string{"172.18.0.100", "172.18.0.101", "172.18.0.102", "2001:db8::100", "2001:DB8::101"}
	eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, r.IntN(3), 0, 0, time.UTC))}}
	for _, i := range r.Perm(len(pool))[:1+r.IntN(3)] {
		eip.Spec.EgressIPs = append(eip.Spec.EgressIPs, pool[i])
	}
	if r.IntN(4) > 0 {
		eip.Spec.NamespaceSelector.MatchLabels = map[string]string{"team": []string{"x", "y"}[r.IntN(2)]}
	}
	switch r.IntN(4) {
	case 0:
		eip.Spec.PodSelector.MatchLabels = map[string]string{"app": "a"}
	case 1:
		eip.Spec.PodSelector.MatchExpressions = []esv1.LabelSelectorRequirement{{Key: "app", Operator: "In", Values: []string{"a", "b"}}}
	case 2:
		if r.IntN(5) == 0 {
			eip.Spec.PodSelector.MatchExpressions = []esv1.LabelSelectorRequirement{{Key: "app", Operator: "Gt"}}
		}
	}
	nodes := []string{"n1", "n2", "n3", ""}
	for _, addr := range pool {
		if r.IntN(2) == 0 {
			continue
		}
		item := esv1.EgressIPStatusItem{EgressIP: strings.ToLower(addr), Node: nodes[r.IntN(len(nodes))]}
		eip.Status.Items = append(eip.Status.Items, item)
		if r.IntN(8) == 0 {
			item.Node = nodes[r.IntN(len(nodes))]
			eip.Status.Items = append(eip.Status.Items, item)
		}
	}
	return eip
}

// randomNamespaces labels each of names team=x, team=y or not at all, and
// leaves one out now and then (not seen yet).
func randomNamespaces(r *rand.Rand, names ...string) []*corev1.Namespace {
	var out []*corev1.Namespace
	for _, name := range slices.Compact(slices.Sorted(slices.Values(names))) {
		if r.IntN(8) == 0 {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if team := []string{"x", "y", ""}[r.IntN(3)]; team != "" {
			ns.Labels = map[string]string{"team": team}
		}
		out = append(out, ns)
	}
	return out
}

// randomQoS draws an EgressQoS for namespace ns from small pools: rules
// that select by the labels randomPods gives, destinations of both
// families (one the nodes' pod CIDRs exempt), invalid values a CRD of old
// would have let through, and sometimes the wrong name or none at all.
func randomQoS(r *rand.Rand, ns string) *esv1.EgressQoS {
	if r.IntN(6) == 0 {
		return nil
	}
	name := esv1.EgressQoSName
	if r.IntN(8) == 0 {
		name = "other"
	}
	var rules []esv1.EgressQoSRule
	for range r.IntN(4) {
		rule := esv1.EgressQoSRule{DSCP: r.Int32N(64)}
		if r.IntN(10) == 0 {
			rule.DSCP = 64
		}
		rule.DstCIDR = []string{"", "", "203.0.113.0/24", "10.244.0.0/16", "2001:db8::/32", "not a cidr"}[r.IntN(6)]
		if app := []string{"", "a", "b"}[r.IntN(3)]; app != "" {
			rule.PodSelector = matchLabels("app", app)
		}
		rules = append(rules, rule)
	}
	return egressQoS(ns, name, rules...)
}

// qosCollidingNamespaces are two namespaces whose classes of rule 0 alone
// hash alike (qosClassHash), found once: the planner must then give them
// the IDs ComputeQoS gives, and move the second's when the first comes or
// goes.
var qosCollidingNamespaces = sync.OnceValue(func() [2]string {
	seen := map[uint32]string{}
	for i := 0; ; i++ {
		ns := fmt.Sprintf("q%d", i)
		h := qosClassHash(ObjectKey(APIEgressQoS, ns, esv1.EgressQoSName), []int{0})
		if other, ok := seen[h]; ok {
			return [2]string{other, ns}
		}
		seen[h] = ns
	}
})

// randomFirewall draws an EgressFirewall for namespace ns from small
// pools: rules to CIDRs of both families, to the names randomResolved
// answers (and one it never does), to the nodes by the labels
// randomNodeLabels gives, with and without ports, an invalid rule a CRD
// of old would have let through, and sometimes the wrong name or none at
// all.
func randomFirewall(r *rand.Rand, ns string) *esv1.EgressFirewall {
	if r.IntN(6) == 0 {
		return nil
	}
	name := esv1.EgressFirewallName
	if r.IntN(8) == 0 {
		name = "other"
	}
	fw := egressFirewall(ns, name)
	for range r.IntN(4) {
		rule := esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny}
		if r.IntN(2) == 0 {
			rule.Type = esv1.EgressFirewallRuleAllow
		}
		switch r.IntN(5) {
		case 0:
			rule.To = cidrTo([]string{"203.0.113.0/24", "2001:db8::/32", "0.0.0.0/0", "bad"}[r.IntN(4)])
		case 1, 2:
			rule.To = dnsTo([]string{"a.example", "B.example.", "never.example", "*.w.example"}[r.IntN(4)])
		default:
			rule.To = nodesTo("role", []string{"infra", "app"}[r.IntN(2)])
		}
		if r.IntN(3) == 0 {
			rule.Ports = []esv1.EgressFirewallPort{{Protocol: "TCP", Port: 443}}
		}
		fw.Spec.Egress = append(fw.Spec.Egress, rule)
	}
	return fw
}

// randomResolved draws the answers of the names randomFirewall uses:
// some unresolved, some empty.
func randomResolved(r *rand.Rand) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, name := range []string{"a.example", "b.example"} {
		if r.IntN(4) == 0 {
			continue
		}
		out[name] = []netip.Addr{}
		for range r.IntN(3) {
			out[name] = append(out[name], []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"),
				netip.MustParseAddr("2001:db8:9::1")}[r.IntN(3)])
		}
		slices.SortFunc(out[name], netip.Addr.Compare)
		out[name] = slices.Compact(out[name])
	}
	return out
}

// firewallCollidingNamespaces are two namespaces whose EgressFirewall
// keys hash alike (ServiceHash), found once: the planner must then give
// them the IDs ComputeFirewall gives, and move the second's when the first
// comes or goes.
var firewallCollidingNamespaces = sync.OnceValue(func() [2]string {
	seen := map[uint32]string{}
	for i := 0; ; i++ {
		ns := fmt.Sprintf("f%d", i)
		h := ServiceHash(ObjectKey(APIEgressFirewall, ns, esv1.EgressFirewallName))
		if other, ok := seen[h]; ok {
			return [2]string{other, ns}
		}
		seen[h] = ns
	}
})

// TestPlannerMatchesCompute drives a Planner through random histories of
// single-service, single-EgressQoS and single-EgressFirewall updates,
// lease, node (new ones, relabelled and readdressed ones), DNS answer and
// local pod changes (whole new sets, and one pod's labels changed), and
// checks after every step that it holds exactly what Compute, its specification written
// apart, returns for the current objects (every part the agent reads: the
// services, problems, admitted pods, exemptions and rules of its State, the
// counts by role its shared flows depend on, its keys), and that the keys
// each step returned include every service whose part changed (the agent
// re-renders only those).
func TestPlannerMatchesCompute(t *testing.T) {
	keys := []string{"a/x", "a/y", "b/x", "b/z", "c/w", "c/x"}
	collide := qosCollidingNamespaces()
	qosNamespaces := []string{"a", "b", collide[0], collide[1]}
	var qosKeys []string
	for _, ns := range qosNamespaces {
		qosKeys = append(qosKeys, ObjectKey(APIEgressQoS, ns, esv1.EgressQoSName))
	}
	fwCollide := firewallCollidingNamespaces()
	firewallNamespaces := []string{"a", "c", fwCollide[0], fwCollide[1]}
	var firewallKeys []string
	for _, ns := range firewallNamespaces {
		firewallKeys = append(firewallKeys, ObjectKey(APIEgressFirewall, ns, esv1.EgressFirewallName))
	}
	podNamespaces := append([]string{"c", fwCollide[0], fwCollide[1]}, qosNamespaces...)
	macs := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", ""}
	eipNames := []string{"e1", "e2", "e3"}
	var eipKeys []string
	for _, name := range eipNames {
		eipKeys = append(eipKeys, ObjectKey(APIEgressIP, "", name))
	}
	seen := map[string]bool{}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		// Each node under both choices for a selected pod whose EgressIP
		// holds no address of its family.
		// The resolver pods are those of namespace c labelled app=a: c has
		// an EgressFirewall at times, whose own snoop flows then cover them.
		var cfgs []NodeConfig
		for _, unheld := range []EgressIPUnheld{EgressIPUnheldDrop, EgressIPUnheldNodeIP} {
			for _, cfg := range []NodeConfig{n1Config, n2Config} {
				cfg.EgressIPUnheld = unheld
				cfg.DNSResolvers = DNSResolverPods{Namespace: "c", Selector: labels.SelectorFromSet(labels.Set{"app": "a"})}
				cfgs = append(cfgs, cfg)
			}
		}
		for _, cfg := range cfgs {
			inputs := map[string]ServiceInputs{}
			qoses := map[string]*esv1.EgressQoS{}
			firewalls := map[string]*esv1.EgressFirewall{}
			eips := map[string]*esv1.EgressIP{}
			var namespaces []*corev1.Namespace
			var resolved map[string][]netip.Addr
			leases := map[string]*coordinationv1.Lease{"n1": publishingLease(macs[0], randomHostAddresses(r)), "n2": publishingLease(macs[1], randomHostAddresses(r))}
			nodes := []*corev1.Node{node("n1", "172.18.0.11")}
			var pods []*corev1.Pod
			p := NewPlanner(cfg, tables)
			p.SetNodes(nodes)
			p.SetLeases(leases)
			before := p.State()
			for step := range 60 {
				var changed []string
				switch r.IntN(20) {
				case 0:
					name := fmt.Sprintf("n%d", r.IntN(3)+1)
					if i := r.IntN(len(macs) + 1); i < len(macs) {
						leases[name] = publishingLease(macs[i], randomHostAddresses(r)) // "": no MAC published
					} else {
						delete(leases, name)
					}
					changed = p.SetLeases(leases)
				case 2:
					cfg.Fenced = !cfg.Fenced
					changed = p.SetFenced(cfg.Fenced)
				case 3:
					pods = randomPodsIn(r, podNamespaces...)
					changed = p.SetLocalPods(pods)
					p.SetClusterPods(pods)
				case 10, 11:
					ns := qosNamespaces[r.IntN(len(qosNamespaces))]
					q := randomQoS(r, ns)
					if q == nil {
						delete(qoses, ns)
					} else {
						qoses[ns] = q
					}
					// An object of another name replaces the default one
					// (deleted); it counts as none.
					def := q
					if q != nil && q.Name != esv1.EgressQoSName {
						def = nil
						if other := p.UpdateQoS(ObjectKey(APIEgressQoS, ns, q.Name), q); len(other) != 0 {
							t.Fatalf("seed %d step %d: an EgressQoS not named default changed %v", seed, step, other)
						}
					}
					changed = p.UpdateQoS(ObjectKey(APIEgressQoS, ns, esv1.EgressQoSName), def)
				case 12:
					// One pod relabelled: a new version of it, the others
					// as they were.
					if len(pods) == 0 {
						continue
					}
					pods = slices.Clone(pods)
					i := r.IntN(len(pods))
					relabelled := pods[i].DeepCopy()
					relabelled.Labels = map[string]string{"app": []string{"a", "b", "c"}[r.IntN(3)]}
					pods[i] = relabelled
					changed = p.SetLocalPods(pods)
					p.SetClusterPods(pods)
				case 1:
					nodes = append(nodes, node(fmt.Sprintf("n%d", len(nodes)+1), fmt.Sprintf("172.18.0.%d", 11+len(nodes))))
					exemptChanged, fwChanged := p.SetNodes(nodes)
					if !exemptChanged {
						t.Fatalf("seed %d step %d: a new node's address did not change the exemptions", seed, step)
					}
					changed = fwChanged
				case 13:
					// A node relabelled, sometimes readdressed: a new
					// version of it.
					nodes = slices.Clone(nodes)
					i := r.IntN(len(nodes))
					relabelled := nodes[i].DeepCopy()
					relabelled.Labels = map[string]string{"role": []string{"infra", "app", "db"}[r.IntN(3)]}
					readdressed := r.IntN(3) == 0
					if readdressed {
						relabelled.Status.Addresses[0].Address = fmt.Sprintf("172.18.1.%d", 10+step)
					}
					nodes[i] = relabelled
					exemptChanged, fwChanged := p.SetNodes(nodes)
					if exemptChanged != readdressed {
						t.Fatalf("seed %d step %d: node readdressed %v, exemptions changed %v", seed, step, readdressed, exemptChanged)
					}
					changed = fwChanged
				case 14:
					resolved = randomResolved(r)
					changed = p.SetResolved(resolved)
				case 15, 16:
					ns := firewallNamespaces[r.IntN(len(firewallNamespaces))]
					fw := randomFirewall(r, ns)
					if fw == nil {
						delete(firewalls, ns)
					} else {
						firewalls[ns] = fw
					}
					def := fw
					if fw != nil && fw.Name != esv1.EgressFirewallName {
						def = nil
						if other := p.UpdateFirewall(ObjectKey(APIEgressFirewall, ns, fw.Name), fw); len(other) != 0 {
							t.Fatalf("seed %d step %d: an EgressFirewall not named default changed %v", seed, step, other)
						}
					}
					changed = p.UpdateFirewall(ObjectKey(APIEgressFirewall, ns, esv1.EgressFirewallName), def)
				case 17, 18:
					name := eipNames[r.IntN(len(eipNames))]
					if eip := randomEgressIP(r, name); eip == nil {
						delete(eips, name)
					} else {
						eips[name] = eip
					}
					p.SetEgressIPs(slices.Collect(maps.Values(eips)))
				case 19:
					namespaces = randomNamespaces(r, podNamespaces...)
					p.SetNamespaces(namespaces)
				default:
					k := keys[r.IntN(len(keys))]
					inputs[k] = randomInputs(r, k)
					changed = p.Update(k, inputs[k])
				}
				changed = append(changed, p.TakeEgressIPChanges()...)
				cluster := clusterOf(inputs, nodes, leases)
				cluster.Pods = pods
				for _, ns := range slices.Sorted(maps.Keys(qoses)) {
					cluster.EgressQoSes = append(cluster.EgressQoSes, qoses[ns])
				}
				for _, ns := range slices.Sorted(maps.Keys(firewalls)) {
					cluster.EgressFirewalls = append(cluster.EgressFirewalls, firewalls[ns])
				}
				cluster.Resolved = resolved
				cluster.Namespaces = namespaces
				for _, name := range slices.Sorted(maps.Keys(eips)) {
					cluster.EgressIPs = append(cluster.EgressIPs, eips[name])
				}
				want := Compute(cfg, cluster, tables)
				got := p.State()
				if g, w := normalize(got), normalize(want); g != w {
					i := 0
					for i < min(len(g), len(w)) && g[i] == w[i] {
						i++
					}
					t.Fatalf("seed %d node %s (unheld: %s) step %d: the planner's state and Compute's differ from byte %d:\nplanner …%s\nCompute …%s",
						seed, cfg.Name, cfg.EgressIPUnheld, step, i, g[max(0, i-300):min(len(g), i+300)], w[max(0, i-300):min(len(w), i+300)])
				}
				if got, want := fmt.Sprintf("%+v", p.Shared()), fmt.Sprintf("%+v", sharedOf(cfg, want)); got != want {
					t.Fatalf("seed %d node %s (unheld: %s) step %d: planner's shared flows depend on\n%s\nCompute's on\n%s", seed, cfg.Name, cfg.EgressIPUnheld, step, got, want)
				}
				for _, role := range []Role{RoleHost, RoleSteer, RoleNetwork} {
					n := 0
					for _, s := range want.Services {
						if s.Role == role {
							n++
						}
					}
					if p.Acting(role) != n {
						t.Fatalf("seed %d node %s (unheld: %s) step %d: planner acts on %d services as %s, Compute on %d", seed, cfg.Name, cfg.EgressIPUnheld, step, p.Acting(role), role, n)
					}
				}
				if got, want := p.Keys(), keysOf(cluster); !slices.Equal(got, want) {
					t.Fatalf("seed %d node %s (unheld: %s) step %d: planner keys %v, want %v", seed, cfg.Name, cfg.EgressIPUnheld, step, got, want)
				}
				if got, want := p.DNSNames(), dnsNamesOf(cfg, cluster); !slices.Equal(got, want) {
					t.Fatalf("seed %d node %s (unheld: %s) step %d: planner follows names %v, want %v", seed, cfg.Name, cfg.EgressIPUnheld, step, got, want)
				}
				if got, want := p.UnresolvedDNS(), unresolvedOf(want.Firewall); !slices.Equal(got, want) {
					t.Fatalf("seed %d node %s (unheld: %s) step %d: planner reports unresolved %v, want %v", seed, cfg.Name, cfg.EgressIPUnheld, step, got, want)
				}
				for _, k := range slices.Concat(keys, qosKeys, firewallKeys, eipKeys) {
					if !slices.Contains(changed, k) && !reflect.DeepEqual(partOf(before, k), partOf(got, k)) {
						t.Fatalf("seed %d node %s (unheld: %s) step %d: %s changed but was not returned (returned %v)", seed, cfg.Name, cfg.EgressIPUnheld, step, k, changed)
					}
				}
				before = got
				for _, prefix := range want.Exempt {
					if hostAddressPool.Contains(prefix.Addr()) || hostAddressPool6.Contains(prefix.Addr()) {
						seen["a published host address exempt"] = true
					}
				}
				for name, l := range leases {
					if !slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return n.Name == name }) && l.Annotations[heartbeat.AnnotationHostAddresses] != "" {
						seen["a node's Lease publishing addresses before its Node exists"] = true
					}
				}
				seen["a resolver pod snooped"] = seen["a resolver pod snooped"] || len(want.Firewall.Resolvers) > 0
				for _, ns := range want.Firewall.Namespaces {
					for _, pod := range pods {
						if ns.SnoopDNS && pod.Spec.NodeName == cfg.Name && cfg.DNSResolvers.Selects(pod) &&
							ns.Key == ObjectKey(APIEgressFirewall, pod.Namespace, esv1.EgressFirewallName) {
							seen["a resolver pod left to its namespace's snoop flows"] = true
						}
					}
				}
				for _, part := range want.EgressIP.Parts {
					seen["an EgressIP address held"] = seen["an EgressIP address held"] || len(part.Held) > 0
					for _, pod := range part.Pods {
						seen["a pod SNATed to an egress IP"] = seen["a pod SNATed to an egress IP"] || !pod.Spread && pod.HolderMAC == nil
						seen["a pod steered to a holder"] = seen["a pod steered to a holder"] || pod.HolderMAC != nil
						seen["a pod's connections spread over several egress IPs"] = seen["a pod's connections spread over several egress IPs"] || pod.Spread
					}
				}
				if cfg.EgressIPUnheld.LeavesThroughNode() {
					dropping := cfg
					dropping.EgressIPUnheld = EgressIPUnheldDrop
					unselected := len(ComputeEgressIP(dropping, cluster, func(netip.Addr) (string, bool) { return "", false }).Selected) >
						len(ComputeEgressIP(cfg, cluster, func(netip.Addr) (string, bool) { return "", false }).Selected)
					seen["a selected pod leaving through its node while unheld"] = seen["a selected pod leaving through its node while unheld"] || unselected
				}
				for _, p := range want.EgressIP.Problems {
					for _, what := range []string{"also selected by EgressIP", "is an endpoint of EgressService", "has not published its bridge MAC"} {
						seen[what] = seen[what] || strings.Contains(p.Message, what)
					}
				}
			}
		}
	}
	// The histories reach every case of EgressIP's part, and both of the
	// resolver pods'.
	for _, what := range []string{"an EgressIP address held", "a pod SNATed to an egress IP", "a pod steered to a holder", "a pod's connections spread over several egress IPs",
		"also selected by EgressIP", "is an endpoint of EgressService", "has not published its bridge MAC",
		"a selected pod leaving through its node while unheld", "a published host address exempt",
		"a node's Lease publishing addresses before its Node exists",
		"a resolver pod snooped", "a resolver pod left to its namespace's snoop flows"} {
		if !seen[what] {
			t.Errorf("no history reached %q", what)
		}
	}
}

// The host addresses agents publish in the property test: apart from the
// Node objects' addresses, so that a node's readdressing changes the
// exemptions exactly when the test expects it to.
var (
	hostAddressPool  = netip.MustParsePrefix("192.168.77.0/24")
	hostAddressPool6 = netip.MustParsePrefix("fd00:192:168:77::/64")
)

// randomHostAddresses draws the value of an agent's host addresses
// annotation: none, or a few addresses of the pools, some of them shared
// with other nodes (a VIP that moves), in any order, written as a careless
// writer might (repeated, with entries that are no host address).
func randomHostAddresses(r *rand.Rand) string {
	var out []string
	for range r.IntN(4) {
		switch r.IntN(6) {
		case 0:
			out = append(out, fmt.Sprintf("fd00:192:168:77::%x", r.IntN(4)+1))
		case 1:
			out = append(out, []string{"127.0.0.1", "fe80::1", "nonsense"}[r.IntN(3)])
		default:
			out = append(out, fmt.Sprintf("192.168.77.%d", r.IntN(4)+1))
		}
	}
	return strings.Join(out, ",")
}

// clusterOf turns per-service inputs into the Cluster Compute reads.
func clusterOf(inputs map[string]ServiceInputs, nodes []*corev1.Node, leases map[string]*coordinationv1.Lease) Cluster {
	c := Cluster{Services: map[string]*corev1.Service{}, EndpointSlices: map[string][]*discoveryv1.EndpointSlice{}, Nodes: nodes, Leases: leases}
	for _, k := range slices.Sorted(maps.Keys(inputs)) {
		in := inputs[k]
		if in.EgressService == nil {
			continue
		}
		c.EgressServices = append(c.EgressServices, in.EgressService)
		c.Services[k] = in.Service
		c.EndpointSlices[k] = in.EndpointSlices
	}
	return c
}

// keysOf are the keys of the cluster's EgressServices and EgressQoS
// objects named default, sorted.
func keysOf(c Cluster) []string {
	var out []string
	for _, es := range c.EgressServices {
		out = append(out, key(es.Namespace, es.Name))
	}
	for _, q := range c.EgressQoSes {
		if q.Name == esv1.EgressQoSName {
			out = append(out, ObjectKey(APIEgressQoS, q.Namespace, q.Name))
		}
	}
	for _, fw := range c.EgressFirewalls {
		if fw.Name == esv1.EgressFirewallName {
			out = append(out, ObjectKey(APIEgressFirewall, fw.Namespace, fw.Name))
		}
	}
	for _, eip := range c.EgressIPs {
		out = append(out, ObjectKey(APIEgressIP, "", eip.Name))
	}
	slices.Sort(out)
	return out
}

// dnsNamesOf are the names node needs answers for, by the API: those of
// the dnsName rules of every EgressFirewall named default in a namespace
// with a running pod on node, in esv1.DNSNameKey form, sorted.
func dnsNamesOf(node NodeConfig, c Cluster) []string {
	var out []string
	for _, fw := range c.EgressFirewalls {
		local := slices.ContainsFunc(c.Pods, func(p *corev1.Pod) bool {
			return p.Namespace == fw.Namespace && p.Spec.NodeName == node.Name && len(podAddresses(p, node.ClusterPodCIDRs)) > 0
		})
		if fw.Name != esv1.EgressFirewallName || !local {
			continue
		}
		for _, r := range fw.Spec.Egress {
			if r.To.DNSName != "" {
				out = append(out, strings.ToLower(strings.TrimSuffix(r.To.DNSName, ".")))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unresolvedOf is what UnresolvedDNS must say of a node whose
// TableFirewall is fw: the names of its DNSNameUnresolved problems, of the
// namespaces it has pods of, wildcards left out.
func unresolvedOf(fw Firewall) []UnresolvedDNSName {
	var out []UnresolvedDNSName
	for _, p := range fw.Problems {
		local := slices.ContainsFunc(fw.Namespaces, func(ns FirewallNamespace) bool { return ns.Key == p.Key })
		if p.Reason != reasons.DNSNameUnresolved || !local {
			continue
		}
		var index int
		var name string
		if _, err := fmt.Sscanf(p.Message, "rule %d: dnsName %s is not resolved yet", &index, &name); err != nil {
			panic(fmt.Sprintf("problem %q: %v", p.Message, err))
		}
		if strings.HasPrefix(name, "*.") {
			continue
		}
		namespace := strings.Split(p.Key, "/")[1] // EgressFirewall/<namespace>/default
		out = append(out, UnresolvedDNSName{Namespace: namespace, Name: esv1.DNSNameKey(name)})
	}
	slices.SortFunc(out, func(a, b UnresolvedDNSName) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return slices.Compact(out)
}

// partOf is one object's part (its Service, or its namespace's TableQoS)
// and Problems in a State.
func partOf(s State, key string) any {
	var svc *Service
	for i := range s.Services {
		if s.Services[i].Key == key {
			svc = &s.Services[i]
		}
	}
	var qos *QoSNamespace
	for i := range s.QoS.Namespaces {
		if s.QoS.Namespaces[i].Key == key {
			qos = &s.QoS.Namespaces[i]
		}
	}
	var firewall *FirewallNamespace
	for i := range s.Firewall.Namespaces {
		if s.Firewall.Namespaces[i].Key == key {
			firewall = &s.Firewall.Namespaces[i]
		}
	}
	var eip *EgressIPPart
	for i := range s.EgressIP.Parts {
		if s.EgressIP.Parts[i].Key == key {
			eip = &s.EgressIP.Parts[i]
		}
	}
	var problems []Problem
	for _, p := range slices.Concat(s.Problems, s.QoS.Problems, s.Firewall.Problems, s.EgressIP.Problems) {
		if p.Key == key {
			problems = append(problems, p)
		}
	}
	return fmt.Sprintf("%+v %+v %+v %+v %+v", svc, qos, firewall, eip, problems)
}

// normalize makes nil and empty slices compare equal.
func normalize(s State) string { return fmt.Sprintf("%+v", s) }

// TestPlannerSharedLBIP: of two services hosted here with one LB IP, the
// first by key renders the reply flow; when it goes, the second takes over.
func TestPlannerSharedLBIP(t *testing.T) {
	p := NewPlanner(n1Config, tables)
	for _, name := range []string{"b", "a"} {
		p.Update("shop/"+name, ServiceInputs{
			EgressService:  egressService("shop", name, "", "", "n1"),
			Service:        lbService("shop", name, "192.0.2.10"),
			EndpointSlices: []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1."+map[string]string{"a": "1", "b": "2"}[name])},
		})
	}
	a, _ := p.Service("shop/a")
	b, _ := p.Service("shop/b")
	if fmt.Sprint(a.ReplyLBIPs) != "[192.0.2.10]" || len(b.ReplyLBIPs) != 0 {
		t.Fatalf("reply LB IPs: a %v, b %v; want a to have it", a.ReplyLBIPs, b.ReplyLBIPs)
	}
	if changed := p.Update("shop/a", ServiceInputs{}); !slices.Equal(changed, []string{"shop/a", "shop/b"}) {
		t.Fatalf("deleting a returned %v, want a and b", changed)
	}
	if b, _ := p.Service("shop/b"); fmt.Sprint(b.ReplyLBIPs) != "[192.0.2.10]" {
		t.Fatalf("b did not take over the reply flow: %v", b.ReplyLBIPs)
	}
	if p.Acting(RoleHost) != 1 {
		t.Fatalf("%d services hosted, want 1", p.Acting(RoleHost))
	}
}

// TestPlannerOwnMACChangesNothing: only steering renders a host's bridge
// MAC, so a new MAC for this node (published after its first sync) leaves
// the services it hosts alone, while one for another host re-renders the
// services steered to it.
func TestPlannerOwnMACChangesNothing(t *testing.T) {
	p := NewPlanner(n1Config, tables)
	leases := map[string]*coordinationv1.Lease{"n1": agentLease(""), "n2": agentLease("02:00:00:00:00:02")}
	p.SetLeases(leases)
	for _, host := range []string{"n1", "n2"} {
		k := "shop/web-" + host
		p.Update(k, ServiceInputs{
			EgressService:  egressService("shop", "web-"+host, esv1.SourceIPByLoadBalancerIP, "", host),
			Service:        lbService("shop", "web-"+host, "192.0.2.1"+host[1:], "2001:db8::1"+host[1:]),
			EndpointSlices: []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1."+host[1:])},
		})
		if _, ok := p.Service(k); !ok {
			t.Fatalf("%s: no part on n1", k)
		}
	}
	leases["n1"] = agentLease("02:00:00:00:00:01")
	if changed := p.SetLeases(leases); len(changed) != 0 {
		t.Errorf("this node's own MAC appeared: %v re-rendered, want none", changed)
	}
	leases["n2"] = agentLease("02:00:00:00:00:22")
	if changed := p.SetLeases(leases); !slices.Equal(changed, []string{"shop/web-n2"}) {
		t.Errorf("the other host's MAC changed: %v re-rendered, want shop/web-n2", changed)
	}
}

// TestPlannerOwnAddresses: this node's addresses are its Node object's and
// those its own Lease publishes, never another node's, and follow both.
func TestPlannerOwnAddresses(t *testing.T) {
	p := NewPlanner(n1Config, tables)
	p.SetNodes([]*corev1.Node{node("n1", "172.18.0.11"), node("n2", "172.18.0.12")})
	p.SetLeases(map[string]*coordinationv1.Lease{
		"n1": publishingLease("02:00:00:00:00:01", "fd00:192:168:77::5,192.168.77.5"),
		"n2": publishingLease("02:00:00:00:00:02", "192.168.77.6"),
	})
	if got, want := p.OwnAddresses(), addrs("172.18.0.11", "192.168.77.5", "fd00:192:168:77::5"); !slices.Equal(got, want) {
		t.Errorf("own addresses %v, want %v", got, want)
	}
	p.SetNodes([]*corev1.Node{node("n1", "172.18.1.11")})
	p.SetLeases(map[string]*coordinationv1.Lease{"n1": publishingLease("02:00:00:00:00:01", "")})
	if got, want := p.OwnAddresses(), addrs("172.18.1.11"); !slices.Equal(got, want) {
		t.Errorf("readdressed, nothing published: own addresses %v, want %v", got, want)
	}
}
