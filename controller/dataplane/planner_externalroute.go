package dataplane

import (
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// externalRouteMember keeps the AdminPolicyBasedExternalRoute parts of a
// node incrementally; ComputeExternalRoutes is its specification
// (TestExternalRouteMemberMatchesSpecification). A change recomputes the
// policies it touched, the namespaces those select, and the parts of the
// namespaces' owners before and after:
//   - a policy: its hops and problems, and the namespaces its selector
//     matches, before and after;
//   - a namespace's labels, or a gateway pod: the policies with dynamic
//     hops (their gateways may have moved), and that namespace;
//   - the local pods of a namespace: its owner's part;
//   - what the node knows of some hops (their MACs, their BFD sessions):
//     the parts of the owners of the namespaces that list them.
//
// A part whose routes changed gets the group IDs allotRouteGroups would
// give it over every part: its natural ones (a hash) while no two routes'
// natural IDs collide, which is all but always; on a collision, or when
// one ends, every part is allotted again (a collision moves another's).
type externalRouteMember struct {
	node NodeConfig

	routes map[string]*plannedRoute // by key
	// namespaces are the namespaces' labels; local this node's pods, by
	// namespace.
	namespaces map[string]labels.Set
	local      map[string][]*corev1.Pod
	// gatewayPods are the pods that dynamic hops may select, as last
	// given to setGateways; sortedGateways the same in namespace and name
	// order (nil until a dynamic hop reads them); gateways the same by
	// namespace and name, which tells the next call which moved, kept only
	// while some policy has dynamic hops.
	gatewayPods, sortedGateways []*corev1.Pod
	gateways                    map[string]map[string]*corev1.Pod
	view                        ExternalRouteNode

	// selectors are the keys of every policy selecting each selected
	// namespace, by name (the first is the namespace's owner, ownerOf);
	// hops the merged hops of them all; owned, by key, the namespaces each
	// owns.
	selectors map[string][]string
	hops      map[string][]ExternalHop
	owned     map[string]map[string]bool
	parts     map[string]*ExternalRoutePart
	// byName are the policies' keys in name order, kept as they come
	// and go.
	byName []string
	// natural counts the parts' routes by their natural group ID
	// (naturalRouteGroup), and shared those IDs held by more than one:
	// while none is, every route has its natural ID, and a part that
	// changes is allotted alone.
	natural map[uint32]int
	shared  int
	// routed are the pod addresses the parts route (routesAddr), nil
	// when a part changed since they were gathered.
	routed map[netip.Addr]bool
	// selectionChanged, if not nil, is called when a namespace comes to
	// be selected or stops being selected (the pod guard admits its pods
	// late, after the stages).
	selectionChanged func()
}

// plannedRoute is one policy as read (readExternalRoute).
type plannedRoute struct {
	route    *esv1.AdminPolicyBasedExternalRoute
	from     labels.Selector // nil: unreadable, it selects nothing
	hops     map[netip.Addr]bool
	problems []Problem
	dynamic  bool // it has dynamic hops: gateway pods and namespace labels move them
}

func newExternalRouteMember(node NodeConfig) *externalRouteMember {
	return &externalRouteMember{node: node, routes: map[string]*plannedRoute{}, namespaces: map[string]labels.Set{},
		gateways: map[string]map[string]*corev1.Pod{}, local: map[string][]*corev1.Pod{},
		hops: map[string][]ExternalHop{}, selectors: map[string][]string{}, owned: map[string]map[string]bool{}, parts: map[string]*ExternalRoutePart{},
		natural: map[uint32]int{}}
}

func (*externalRouteMember) API() API { return APIExternalRoute }

// Update takes key's policy (*esv1.AdminPolicyBasedExternalRoute; nil
// when it is gone).
func (m *externalRouteMember) Update(key string, obj any) []string {
	route, _ := obj.(*esv1.AdminPolicyBasedExternalRoute)
	old := m.routes[key]
	if route == nil && old == nil {
		return nil
	}
	namespaces := map[string]bool{}
	if old != nil {
		m.addSelected(namespaces, old)
	}
	changed := map[string]bool{key: true}
	if route == nil {
		delete(m.routes, key)
	} else {
		m.routes[key] = m.read(route)
		m.addSelected(namespaces, m.routes[key])
	}
	switch {
	case old == nil:
		// New: into byName at its name's place (a key names one policy,
		// so its name never changes).
		i, _ := slices.BinarySearchFunc(m.byName, route.Name, func(k, name string) int { return strings.Compare(m.routes[k].route.Name, name) })
		m.byName = slices.Insert(m.byName, i, key)
	case route == nil:
		m.byName = slices.DeleteFunc(m.byName, func(k string) bool { return k == key })
	}
	return m.replan(namespaces, changed)
}

// ownerOf is the policy that renders namespace ns's pods, the first by
// name of those selecting it; false when none does.
func (m *externalRouteMember) ownerOf(ns string) (string, bool) {
	if keys := m.selectors[ns]; len(keys) > 0 {
		return keys[0], true
	}
	return "", false
}

func (m *externalRouteMember) Part(key string) (Part, bool) {
	if part, ok := m.parts[key]; ok {
		return *part, true
	}
	return nil, false
}

func (m *externalRouteMember) Problems(key string) []Problem {
	if pl := m.routes[key]; pl != nil {
		return pl.problems
	}
	return nil
}

func (m *externalRouteMember) Keys() iter.Seq[string] { return maps.Keys(m.routes) }

// SetLocalPods takes this node's pods (PodReader).
func (m *externalRouteMember) SetLocalPods(pods map[string][]*corev1.Pod, changed []string) []string {
	owners := map[string]bool{}
	for _, ns := range changed {
		if pods[ns] == nil {
			delete(m.local, ns)
		} else {
			m.local[ns] = pods[ns]
		}
		if key, ok := m.ownerOf(ns); ok {
			owners[key] = true
		}
	}
	return m.rebuild(owners, map[string]bool{})
}

// setNamespaces takes the cluster's namespaces and returns the keys whose
// part or problems changed.
func (m *externalRouteMember) setNamespaces(namespaces []*corev1.Namespace) []string {
	given := make(map[string]bool, len(namespaces))
	moved := map[string]bool{}
	for _, ns := range namespaces {
		given[ns.Name] = true
		if old, known := m.namespaces[ns.Name]; !known || !maps.Equal(old, labels.Set(ns.Labels)) {
			m.namespaces[ns.Name] = labels.Set(ns.Labels)
			moved[ns.Name] = true
		}
	}
	for ns := range m.namespaces {
		if !given[ns] {
			delete(m.namespaces, ns)
			moved[ns] = true
		}
	}
	if len(moved) == 0 {
		return nil
	}
	return m.regather(moved)
}

// setGateways takes the pods that dynamic hops may select (at least every
// one they select) and returns the keys whose part or problems changed.
func (m *externalRouteMember) setGateways(pods []*corev1.Pod) []string {
	m.gatewayPods, m.sortedGateways = pods, nil
	if !m.anyDynamic() {
		// Nothing reads them now: a dynamic hop that comes reads
		// gatewayPods, and the next call finds them all moved.
		m.gateways = nil
		return nil
	}
	given := map[string]map[string]*corev1.Pod{}
	moved := false
	for _, pod := range pods {
		if given[pod.Namespace] == nil {
			given[pod.Namespace] = map[string]*corev1.Pod{}
		}
		given[pod.Namespace][pod.Name] = pod
		moved = moved || m.gateways[pod.Namespace][pod.Name] != pod
	}
	for ns, byName := range m.gateways {
		moved = moved || len(byName) != len(given[ns])
	}
	m.gateways = given
	if !moved {
		return nil
	}
	return m.regather(map[string]bool{})
}

// anyDynamic says whether some policy has dynamic hops.
func (m *externalRouteMember) anyDynamic() bool {
	for _, pl := range m.routes {
		if pl.dynamic {
			return true
		}
	}
	return false
}

// setView takes what the node knows of the hops now, changed the
// addresses whose MAC or BFD session may have changed, and returns the
// keys whose part changed.
func (m *externalRouteMember) setView(view ExternalRouteNode, changed []netip.Addr) []string {
	m.view = view
	owners := map[string]bool{}
	for ns, hops := range m.hops {
		if slices.ContainsFunc(hops, func(h ExternalHop) bool { return slices.Contains(changed, h.IP) }) {
			owner, _ := m.ownerOf(ns)
			owners[owner] = true
		}
	}
	return m.rebuild(owners, map[string]bool{})
}

// regather reads the policies with dynamic hops again (their gateways may
// have moved), and replans them with the namespaces in moved.
func (m *externalRouteMember) regather(moved map[string]bool) []string {
	changed := map[string]bool{}
	for key, pl := range m.routes {
		if !pl.dynamic {
			continue // its hops and problems read no namespace or pod
		}
		m.addSelected(moved, pl)
		next := m.read(pl.route)
		if !slices.Equal(next.problems, pl.problems) {
			changed[key] = true
		}
		m.routes[key] = next
		m.addSelected(moved, next)
	}
	return m.replan(moved, changed)
}

// read reads route with the namespaces and gateway pods given.
func (m *externalRouteMember) read(route *esv1.AdminPolicyBasedExternalRoute) *plannedRoute {
	var pods []*corev1.Pod
	if len(route.Spec.NextHops.DynamicHops) > 0 {
		if m.sortedGateways == nil {
			m.sortedGateways = slices.SortedFunc(slices.Values(m.gatewayPods), byNamespacedName)
		}
		pods = m.sortedGateways
	}
	from, hops, problems := readExternalRoute(route, m.namespaces, pods)
	return &plannedRoute{route: route, from: from, hops: hops, problems: problems, dynamic: len(route.Spec.NextHops.DynamicHops) > 0}
}

// addSelected adds the namespaces pl selects to set.
func (m *externalRouteMember) addSelected(set map[string]bool, pl *plannedRoute) {
	if pl.from == nil {
		return
	}
	for ns, l := range m.namespaces {
		if pl.from.Matches(l) {
			set[ns] = true
		}
	}
}

// replan decides the owner and hops of each namespace in namespaces
// again, and rebuilds the parts of their owners before and after; changed
// holds the keys already known to have changed.
func (m *externalRouteMember) replan(namespaces, changed map[string]bool) []string {
	owners := map[string]bool{}
	for ns := range namespaces {
		oldOwner, wasOwned := m.ownerOf(ns)
		oldHops := m.hops[ns]
		var selectors []string
		hopSets := []map[netip.Addr]bool(nil)
		if l, known := m.namespaces[ns]; known {
			for _, key := range m.byName {
				pl := m.routes[key]
				if pl.from != nil && pl.from.Matches(l) {
					selectors = append(selectors, key)
					hopSets = append(hopSets, pl.hops)
				}
			}
		}
		hops := mergeHops(hopSets)
		if len(selectors) == 0 {
			delete(m.hops, ns)
			delete(m.selectors, ns)
		} else {
			m.hops[ns], m.selectors[ns] = hops, selectors
		}
		owner, _ := m.ownerOf(ns)
		if wasOwned != (owner != "") && m.selectionChanged != nil {
			m.selectionChanged()
		}
		if oldOwner == owner && slices.Equal(oldHops, hops) {
			continue
		}
		if wasOwned {
			delete(m.owned[oldOwner], ns)
			owners[oldOwner] = true
		}
		if owner != "" {
			if m.owned[owner] == nil {
				m.owned[owner] = map[string]bool{}
			}
			m.owned[owner][ns] = true
			owners[owner] = true
		}
	}
	return m.rebuild(owners, changed)
}

// rebuild builds the parts of owners again, allots the groups again if
// any part's routes changed, and returns the keys in changed and those
// whose part changed, sorted.
func (m *externalRouteMember) rebuild(owners, changed map[string]bool) []string {
	// regrouped are the keys of the parts whose routes changed (added,
	// gone, or other hops), with their parts before.
	regrouped := map[string]*ExternalRoutePart{}
	for key := range owners {
		var pods []*corev1.Pod
		for ns := range m.owned[key] {
			pods = append(pods, m.local[ns]...)
		}
		if len(m.owned[key]) == 0 {
			delete(m.owned, key)
		}
		part := assembleExternalRoutePart(key, pods, func(ns string) []ExternalHop { return m.hops[ns] }, m.view, m.node.ClusterPodCIDRs)
		old := m.parts[key]
		if part == nil {
			if old != nil {
				delete(m.parts, key)
				changed[key], regrouped[key] = true, old
			}
			continue
		}
		if old != nil && slices.EqualFunc(old.Routes, part.Routes, func(a, b ExternalRoute) bool { return a.Family == b.Family && slices.Equal(a.Hops, b.Hops) }) {
			// Keep the IDs while the routes are the same, so that Equal
			// compares what would render.
			for i := range part.Routes {
				part.Routes[i].Group = old.Routes[i].Group
			}
			if old.Equal(*part) {
				continue
			}
		} else if _, seen := regrouped[key]; !seen {
			regrouped[key] = old
		}
		m.parts[key] = part
		changed[key] = true
	}
	if len(regrouped) > 0 {
		m.allot(regrouped, changed)
	}
	if len(changed) > 0 {
		m.routed = nil
	}
	return slices.Sorted(maps.Keys(changed))
}

// allot gives the routes of the parts in regrouped (key → part before,
// nil if none) their group IDs as allotRouteGroups over every part would,
// and records in changed the keys of the parts whose IDs that moved.
// While no two routes share a natural ID, before or after, each has its
// own, and only the parts in regrouped are touched; otherwise every part
// is allotted again.
func (m *externalRouteMember) allot(regrouped map[string]*ExternalRoutePart, changed map[string]bool) {
	sharedBefore := m.shared
	count := func(key string, routes []ExternalRoute, delta int) {
		for _, r := range routes {
			id := naturalRouteGroup(key, r)
			if n := m.natural[id]; n > 1 && n+delta <= 1 {
				m.shared--
			} else if n <= 1 && n+delta > 1 {
				m.shared++
			}
			if m.natural[id] += delta; m.natural[id] == 0 {
				delete(m.natural, id)
			}
		}
	}
	for key, old := range regrouped {
		if old != nil {
			count(key, old.Routes, -1)
		}
		if now := m.parts[key]; now != nil {
			count(key, now.Routes, 1)
		}
	}
	if sharedBefore == 0 && m.shared == 0 {
		for key := range regrouped {
			if now := m.parts[key]; now != nil {
				for i := range now.Routes {
					now.Routes[i].Group = APIExternalRoute.GroupID(naturalRouteGroup(key, now.Routes[i]))
				}
			}
		}
		return
	}
	// On copies: a part given out (Part) never changes under its holder.
	sorted := make([]*ExternalRoutePart, 0, len(m.parts))
	for _, key := range slices.Sorted(maps.Keys(m.parts)) {
		part := *m.parts[key]
		part.Routes = slices.Clone(part.Routes)
		sorted = append(sorted, &part)
	}
	allotRouteGroups(sorted)
	for _, part := range sorted {
		if !part.Equal(*m.parts[part.Key]) {
			m.parts[part.Key] = part
			changed[part.Key] = true
		}
	}
}

// externalRoutes returns the node's part of the member (State.ExternalRoute).
func (m *externalRouteMember) externalRoutes() ExternalRoutes {
	var out ExternalRoutes
	byName := slices.SortedFunc(maps.Keys(m.routes), func(a, b string) int {
		return strings.Compare(m.routes[a].route.Name, m.routes[b].route.Name)
	})
	for _, key := range byName {
		out.Problems = append(out.Problems, m.routes[key].problems...)
	}
	for _, key := range slices.Sorted(maps.Keys(m.parts)) {
		out.Parts = append(out.Parts, *m.parts[key])
	}
	return out
}

// routesAddr reports whether a part routes the local pod address addr.
func (m *externalRouteMember) routesAddr(addr netip.Addr) bool {
	if m.routed == nil {
		m.routed = map[netip.Addr]bool{}
		for _, part := range m.parts {
			for _, p := range part.Pods {
				m.routed[p.Pod] = true
			}
		}
	}
	return m.routed[addr]
}

// SetExternalRouteGateways takes the pods that the external routes'
// dynamic hops may select (at least each one they select, wherever it
// runs), and returns the keys whose part or problems changed.
func (p *Planner) SetExternalRouteGateways(pods []*corev1.Pod) []string {
	return p.externalRoute.setGateways(pods)
}

// SetExternalRouteView takes what the node knows of the external routes'
// hops (their MACs, their BFD sessions), changed the addresses whose
// knowledge may have changed, and returns the keys whose part changed.
func (p *Planner) SetExternalRouteView(view ExternalRouteNode, changed []netip.Addr) []string {
	return p.externalRoute.setView(view, changed)
}

// ExternalRouteHops returns the next hops of the namespaces that an
// external route selects and that have a pod on this node, sorted by
// address, each followed with BFD if any policy asks for it: the addresses
// whose MACs (and sessions) the node must find. A node without such pods
// runs no session: a gateway's BFD load grows with the nodes that use it,
// not with the cluster.
func (p *Planner) ExternalRouteHops() []ExternalHop {
	var sets []map[netip.Addr]bool
	for ns, hops := range p.externalRoute.hops {
		if len(p.externalRoute.local[ns]) == 0 {
			continue
		}
		set := make(map[netip.Addr]bool, len(hops))
		for _, h := range hops {
			set[h.IP] = h.BFD
		}
		sets = append(sets, set)
	}
	return mergeHops(sets)
}

// ExternalRouteReport is what a node says of the external routes
// (Planner.ExternalRouteReport), by policy name.
type ExternalRouteReport struct {
	// Notes are heartbeat.Facts.ExternalRouteNotes: a note on each hop
	// of a used policy that cannot be used, and on each gateway pod a
	// policy's dynamic hops select that is no hop.
	Notes map[string][]string
	// Hops are the hops of each used policy, those usable and the others.
	Hops map[string]PolicyHops
}

// PolicyHops counts one policy's hops on a node.
type PolicyHops struct{ Usable, Unusable int }

// ExternalRouteReport says, for each policy that selects a namespace with
// a pod on this node (a used policy), how many of its hops can be used
// and a note on each that cannot, as hopNote says ("" when it can); and,
// for every policy, the gateway pods its dynamic hops select that are no
// hop. The cluster component reports the policies' other problems itself.
func (p *Planner) ExternalRouteReport(hopNote func(netip.Addr) string) ExternalRouteReport {
	m := p.externalRoute
	used := map[string]bool{}
	for ns, keys := range m.selectors {
		if len(m.local[ns]) > 0 {
			for _, key := range keys {
				used[key] = true
			}
		}
	}
	report := ExternalRouteReport{Notes: map[string][]string{}, Hops: map[string]PolicyHops{}}
	for key, pl := range m.routes {
		name := pl.route.Name
		var notes []string
		if used[key] {
			var count PolicyHops
			for addr := range pl.hops {
				if text := hopNote(addr); text != "" {
					count.Unusable++
					notes = append(notes, "next hop "+addr.String()+": "+text)
				} else {
					count.Usable++
				}
			}
			report.Hops[name] = count
		}
		for _, problem := range pl.problems {
			if problem.Reason == reasons.GatewayNotHostNetwork || problem.Reason == reasons.GatewayNetworkUnknown {
				notes = append(notes, problem.Message)
			}
		}
		if len(notes) > 0 {
			slices.Sort(notes)
			report.Notes[name] = slices.Compact(notes)
		}
	}
	return report
}
