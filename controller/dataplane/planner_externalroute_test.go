package dataplane

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// erHistory is the cluster a random history of external routes builds,
// as the agent would give it to the planner.
type erHistory struct {
	r          *rand.Rand
	routes     map[string]*esv1.AdminPolicyBasedExternalRoute // by name
	namespaces map[string]*corev1.Namespace
	gateways   map[string]*corev1.Pod // by namespace/name
	local      map[string]*corev1.Pod
	macs       map[netip.Addr]net.HardwareAddr
	bfdUp      map[netip.Addr]bool
}

var (
	erNamespaces = []string{"a", "b", "c", "d"}
	erHopPool    = []string{"172.18.0.50", "172.18.0.51", "172.18.0.52", "2001:db8::50", "2001:db8::51", "bad"}
	erGatewayIPs = []string{"172.18.0.60", "172.18.0.61", "2001:db8::60", "192.168.9.1", "192.168.9.2"}
	erTeams      = []string{"x", "y"}
)

func (h *erHistory) pick(s []string) string { return s[h.r.IntN(len(s))] }

// randomRoute is a policy named name: a namespace selector on team (or,
// rarely, one the API server would refuse), some static hops, and
// sometimes a dynamic hop on the gateway pods of a team's namespaces,
// host-networked or on a network attachment.
func (h *erHistory) randomRoute(name string) *esv1.AdminPolicyBasedExternalRoute {
	from := esv1.LabelSelector{MatchLabels: map[string]string{"team": h.pick(erTeams)}}
	if h.r.IntN(10) == 0 {
		from = esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}}
	}
	var static []esv1.StaticHop
	for range h.r.IntN(3) {
		static = append(static, esv1.StaticHop{IP: h.pick(erHopPool), BFDEnabled: h.r.IntN(2) == 0})
	}
	var dynamic []esv1.DynamicHop
	if h.r.IntN(2) == 0 {
		d := esv1.DynamicHop{PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "yes"}},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": h.pick(erTeams)}},
			BFDEnabled:        h.r.IntN(2) == 0}
		if h.r.IntN(2) == 0 {
			d.NetworkAttachmentName = "ext"
		}
		dynamic = append(dynamic, d)
	}
	route := externalRoute(name, nil, static, dynamic...)
	route.Spec.From.NamespaceSelector = from
	return route
}

func (h *erHistory) randomNamespace(name string) *corev1.Namespace {
	var l map[string]string
	if h.r.IntN(4) > 0 {
		l = map[string]string{"team": h.pick(erTeams)}
	}
	return labelledNamespace(name, l)
}

// randomGateway is a pod that a dynamic hop may select: ready or not,
// host-networked or annotated with its address on network ext, on this
// node or another.
func (h *erHistory) randomGateway(ns, name string) *corev1.Pod {
	l := map[string]string{}
	if h.r.IntN(4) > 0 {
		l["gw"] = "yes"
	}
	ip := h.pick(erGatewayIPs)
	status := ""
	if h.r.IntN(2) == 0 {
		status = fmt.Sprintf(`[{"name":"%s/ext","ips":[%q]}]`, ns, ip)
	}
	p := gatewayPod(ns, name, l, h.r.IntN(3) > 0, status == "" && h.r.IntN(4) > 0, status, ip)
	p.Spec.NodeName = []string{"n1", "n2"}[h.r.IntN(2)]
	return p
}

func (h *erHistory) randomLocal(ns string, i int) *corev1.Pod {
	var ips []string
	if h.r.IntN(3) > 0 {
		ips = append(ips, fmt.Sprintf("10.244.1.%d", 10+i))
	}
	if h.r.IntN(2) == 0 {
		ips = append(ips, fmt.Sprintf("fd00:10:244:1::%x", 0x10+i))
	}
	return pod(ns, "n1", nil, ips...)
}

// view is a snapshot of the node's knowledge of the hops.
func (h *erHistory) view() ExternalRouteNode {
	macs, up := maps.Clone(h.macs), maps.Clone(h.bfdUp)
	return ExternalRouteNode{
		MAC:   func(a netip.Addr) (net.HardwareAddr, bool) { mac, ok := macs[a]; return mac, ok },
		BFDUp: func(a netip.Addr) bool { return up[a] },
	}
}

// TestExternalRouteMemberMatchesSpecification drives the planner's
// external route member through random histories of policies,
// namespaces' labels, gateway pods, this node's pods and what the node
// knows of the hops (MACs, BFD sessions), and after every change compares
// the planner's state (the parts and problems, the pods admitted late,
// the rules) with Compute's, and checks that every key whose part or
// problems changed was returned.
func TestExternalRouteMemberMatchesSpecification(t *testing.T) {
	addrs := func(pool []string) (out []netip.Addr) {
		for _, s := range pool {
			if a, err := netip.ParseAddr(s); err == nil {
				out = append(out, a)
			}
		}
		return out
	}
	hopAddrs := append(addrs(erHopPool), addrs(erGatewayIPs)...)
	for seed := range uint64(40) {
		h := &erHistory{r: rand.New(rand.NewPCG(seed, 7)), routes: map[string]*esv1.AdminPolicyBasedExternalRoute{},
			namespaces: map[string]*corev1.Namespace{}, gateways: map[string]*corev1.Pod{}, local: map[string]*corev1.Pod{},
			macs: map[netip.Addr]net.HardwareAddr{}, bfdUp: map[netip.Addr]bool{}}
		p := NewPlanner(n1Config, tables)
		before := ExternalRoutes{}
		for step := range 150 {
			var changed []string
			switch h.r.IntN(6) {
			case 0: // a policy
				name := h.pick([]string{"p1", "p2", "p3"})
				key := ObjectKey(APIExternalRoute, "", name)
				if h.r.IntN(4) == 0 {
					delete(h.routes, name)
					changed = p.UpdateObject(key, nil)
				} else {
					h.routes[name] = h.randomRoute(name)
					changed = p.UpdateObject(key, h.routes[name])
				}
			case 1: // a namespace's labels
				ns := h.pick(erNamespaces)
				if h.r.IntN(5) == 0 {
					delete(h.namespaces, ns)
				} else {
					h.namespaces[ns] = h.randomNamespace(ns)
				}
				changed = p.SetNamespaces(slices.Collect(maps.Values(h.namespaces)))
			case 2: // a gateway pod
				ns, name := h.pick(erNamespaces), h.pick([]string{"gw1", "gw2"})
				if h.r.IntN(4) == 0 {
					delete(h.gateways, ns+"/"+name)
				} else {
					h.gateways[ns+"/"+name] = h.randomGateway(ns, name)
				}
				changed = p.SetExternalRouteGateways(slices.Collect(maps.Values(h.gateways)))
			case 3, 4: // this node's pods
				ns, i := h.pick(erNamespaces), h.r.IntN(3)
				ref := fmt.Sprintf("%s/%d", ns, i)
				if h.r.IntN(4) == 0 {
					delete(h.local, ref)
				} else {
					h.local[ref] = h.randomLocal(ns, i+10*slices.Index(erNamespaces, ns))
				}
				changed = p.SetLocalPods(slices.Collect(maps.Values(h.local)))
			case 5: // what the node knows of a hop
				a := hopAddrs[h.r.IntN(len(hopAddrs))]
				if h.r.IntN(2) == 0 {
					if _, ok := h.macs[a]; ok {
						delete(h.macs, a)
					} else {
						h.macs[a] = net.HardwareAddr{2, 0, 0, 0, byte(h.r.IntN(2)), a.As16()[15]}
					}
				} else {
					h.bfdUp[a] = !h.bfdUp[a]
				}
				changed = p.SetExternalRouteView(h.view(), []netip.Addr{a})
			}

			cluster := Cluster{ExternalRoutes: slices.Collect(maps.Values(h.routes)), Namespaces: slices.Collect(maps.Values(h.namespaces)),
				ExternalRouteHops: h.view()}
			for _, pod := range h.local {
				cluster.Pods = append(cluster.Pods, pod)
			}
			for _, pod := range h.gateways {
				cluster.Pods = append(cluster.Pods, pod)
			}
			want, got := Compute(n1Config, cluster, tables), p.State()
			if g, w := fmt.Sprintf("%+v", got.ExternalRoute), fmt.Sprintf("%+v", want.ExternalRoute); g != w {
				t.Fatalf("seed %d step %d: the planner's external routes\n%s\nCompute's\n%s", seed, step, g, w)
			}
			got.ExternalRoute, want.ExternalRoute = ExternalRoutes{}, ExternalRoutes{}
			if g, w := normalize(got), normalize(want); g != w {
				t.Fatalf("seed %d step %d: the planner's state\n%s\nCompute's\n%s", seed, step, g, w)
			}
			now := p.externalRoute.externalRoutes()
			for _, name := range []string{"p1", "p2", "p3"} {
				key := ObjectKey(APIExternalRoute, "", name)
				if !slices.Contains(changed, key) && !reflect.DeepEqual(erPartOf(before, key), erPartOf(now, key)) {
					t.Fatalf("seed %d step %d: %s changed but was not returned (returned %v)", seed, step, key, changed)
				}
			}
			if got, want := slices.Sorted(p.externalRoute.Keys()), erKeys(h.routes); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: keys %v, want %v", seed, step, got, want)
			}
			wantHops, wantReport := h.used()
			if got := p.ExternalRouteHops(); !slices.Equal(got, wantHops) {
				t.Fatalf("seed %d step %d: hops %v, want %v", seed, step, got, wantHops)
			}
			if got := p.ExternalRouteReport(h.hopNote); !reflect.DeepEqual(got, wantReport) {
				t.Fatalf("seed %d step %d: report %+v, want %+v", seed, step, got, wantReport)
			}
			before = now
		}
	}
}

// hopNote is the note on a hop the test's node knows no MAC of.
func (h *erHistory) hopNote(a netip.Addr) string {
	if _, ok := h.macs[a]; ok {
		return ""
	}
	return "no MAC"
}

// used is what the node must follow of the hops, and what it reports,
// read from the history directly: the hops (BFD if any policy asks) of
// every policy selecting a namespace with a pod on the node; by policy
// name, those hops counted and hopNote's notes on them, and every
// policy's gateway pods that are no hop.
func (h *erHistory) used() ([]ExternalHop, ExternalRouteReport) {
	var gateways []*corev1.Pod
	nsLabels := map[string]labels.Set{}
	for _, ns := range h.namespaces {
		nsLabels[ns.Name] = ns.Labels
	}
	for _, pod := range h.gateways {
		gateways = append(gateways, pod)
	}
	slices.SortFunc(gateways, byNamespacedName)
	bfd := map[netip.Addr]bool{}
	notes := map[string][]string{}
	counts := map[string]PolicyHops{}
	for _, route := range h.routes {
		from, hops, problems := readExternalRoute(route, nsLabels, gateways)
		for _, problem := range problems {
			if problem.Reason == reasons.GatewayNotHostNetwork || problem.Reason == reasons.GatewayNetworkUnknown {
				notes[route.Name] = append(notes[route.Name], problem.Message)
			}
		}
		used := false
		for _, pod := range h.local {
			if l, known := nsLabels[pod.Namespace]; known && from != nil && from.Matches(l) {
				used = true
			}
		}
		if !used {
			continue
		}
		count := PolicyHops{}
		for a, b := range hops {
			bfd[a] = bfd[a] || b
			if h.hopNote(a) != "" {
				notes[route.Name] = append(notes[route.Name], "next hop "+a.String()+": "+h.hopNote(a))
				count.Unusable++
			} else {
				count.Usable++
			}
		}
		counts[route.Name] = count
	}
	hops := []ExternalHop{}
	for _, a := range slices.SortedFunc(maps.Keys(bfd), netip.Addr.Compare) {
		hops = append(hops, ExternalHop{IP: a, BFD: bfd[a]})
	}
	for name := range notes {
		slices.Sort(notes[name])
		notes[name] = slices.Compact(notes[name])
	}
	return hops, ExternalRouteReport{Notes: notes, Hops: counts}
}

// erPartOf is key's part and problems in s.
func erPartOf(s ExternalRoutes, key string) string {
	var b strings.Builder
	for _, part := range s.Parts {
		if part.Key == key {
			fmt.Fprintf(&b, "%+v", part)
		}
	}
	for _, problem := range s.Problems {
		if problem.Key == key {
			fmt.Fprintf(&b, "%+v", problem)
		}
	}
	return b.String()
}

func erKeys(routes map[string]*esv1.AdminPolicyBasedExternalRoute) []string {
	var out []string
	for name := range routes {
		out = append(out, ObjectKey(APIExternalRoute, "", name))
	}
	slices.Sort(out)
	return out
}

// TestExternalRouteMemberGroupCollisions: two policies whose routes hash
// to the same group ID (found by search): the planner's IDs stay those
// Compute allots over every part, as the policies come and go in either
// order, including after the collision is gone.
func TestExternalRouteMemberGroupCollisions(t *testing.T) {
	hop := esv1.StaticHop{IP: "172.18.0.50"}
	route := func(name string) *esv1.AdminPolicyBasedExternalRoute {
		return externalRoute(name, map[string]string{"route": name}, []esv1.StaticHop{hop})
	}
	seen := map[uint32]string{}
	var names [2]string
	for i := 0; names[0] == ""; i++ {
		name := fmt.Sprintf("c-%d", i)
		id := naturalRouteGroup(ObjectKey(APIExternalRoute, "", name), ExternalRoute{Family: 0, Hops: []netip.Addr{netip.MustParseAddr(hop.IP)}})
		if other, ok := seen[id]; ok {
			names = [2]string{other, name}
		}
		seen[id] = name
	}
	view := ExternalRouteNode{
		MAC:   func(netip.Addr) (net.HardwareAddr, bool) { return net.HardwareAddr{2, 0, 0, 0, 0, 1}, true },
		BFDUp: func(netip.Addr) bool { return false },
	}
	var namespaces []*corev1.Namespace
	var pods []*corev1.Pod
	for i, name := range names {
		namespaces = append(namespaces, labelledNamespace(name, map[string]string{"route": name}))
		pods = append(pods, pod(name, "n1", nil, fmt.Sprintf("10.244.1.%d", 10+i)))
	}
	p := NewPlanner(n1Config, tables)
	p.SetNamespaces(namespaces)
	p.SetLocalPods(pods)
	p.SetExternalRouteView(view, []netip.Addr{netip.MustParseAddr(hop.IP)})
	present := map[string]bool{}
	for step, s := range []struct {
		name string
		add  bool
	}{{names[0], true}, {names[1], true}, {names[0], false}, {names[0], true}, {names[1], false}, {names[1], true}, {names[0], false}, {names[1], false}} {
		var obj *esv1.AdminPolicyBasedExternalRoute
		if s.add {
			obj = route(s.name)
		}
		present[s.name] = s.add
		p.UpdateObject(ObjectKey(APIExternalRoute, "", s.name), obj)
		var routes []*esv1.AdminPolicyBasedExternalRoute
		for _, name := range names {
			if present[name] {
				routes = append(routes, route(name))
			}
		}
		want := Compute(n1Config, Cluster{ExternalRoutes: routes, Namespaces: namespaces, Pods: pods, ExternalRouteHops: view}, tables)
		if g, w := fmt.Sprintf("%+v", p.State().ExternalRoute), fmt.Sprintf("%+v", want.ExternalRoute); g != w {
			t.Fatalf("step %d (%s %v): the planner's external routes\n%s\nCompute's\n%s", step, s.name, s.add, g, w)
		}
	}
}
