package dataplane

import (
	"cmp"
	"maps"
	"net"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// The Planner's EgressIP part, kept incrementally. Each pod address that
// an EgressIP selects is decided once (eipAddr: the object that takes it,
// and for a local pod the later objects that select it too) and filed
// under those objects; an input marks only what it touches:
//
//   - a pod added, changed or gone: its own addresses are decided again,
//     against the objects that select its namespace (selecting);
//   - a namespace's labels: the objects that select it, and its pods;
//   - an EgressIP's selectors: the pods of the namespaces it selected or
//     selects; its status (the holders) only its own part;
//   - a host's bridge MAC: the objects with a holder there; the fence:
//     every object; a LoadBalancerIP-mode service's endpoints: the
//     objects that take those addresses.
//
// A marked object's part, problems and local selected addresses are then
// rebuilt from the addresses filed under it, so that a change costs the
// pods it touches plus the pods of the objects it marks, not the whole
// cluster. The spread groups' IDs are allotted again, over every part that
// spreads, only when which parts spread changes. ComputeEgressIP is the
// specification it is held to (TestPlannerMatchesCompute,
// TestEgressIPPlannerIncremental).

// plannedEgressIP is one EgressIP as the planner keeps it.
type plannedEgressIP struct {
	eip           *esv1.EgressIP
	key           string
	nsSel, podSel labels.Selector // nil when they do not parse
	holders       [2][]egressIPHolder
	families      [2]bool // of its spec's addresses
	// namespaces are those whose selecting list holds it.
	namespaces map[string]bool
	// owned are the pod addresses it takes (each knows its index here);
	// outranked the local pod addresses it selects that an object before
	// it takes (nil while none: that is rare).
	owned     []*eipAddr
	outranked map[*eipAddr]bool
	// dirty: it is in egressIPInputs.dirty.
	dirty bool
	// part, problems and selected (the local pod addresses it takes,
	// sorted) are as last rebuilt; part.Spread's groups as last allotted.
	part     EgressIPPart
	problems []Problem
	selected []netip.Addr
}

// hasFlows reports whether the object's part renders flows.
func (pl *plannedEgressIP) hasFlows() bool { return len(pl.part.Held)+len(pl.part.Pods) > 0 }

// spreads reports, by family, whether the part spreads pods.
func (pl *plannedEgressIP) spreads() [2]bool {
	return [2]bool{len(pl.part.Spread[0].Hops) > 0, len(pl.part.Spread[1].Hops) > 0}
}

// spreadGroups are the part's spread groups, by family.
func (pl *plannedEgressIP) spreadGroups() [2]uint32 {
	return [2]uint32{pl.part.Spread[0].Group, pl.part.Spread[1].Group}
}

// eipAddr is one address of a pod that an EgressIP selects.
type eipAddr struct {
	pod  *corev1.Pod
	addr netip.Addr
	// owner takes it: the first object in precedence order that selects
	// it.
	owner *plannedEgressIP
	// outranked are the later objects that select it too, for a pod of
	// this node only (their problems).
	outranked []*plannedEgressIP
	// ownedAt is its index in owner.owned; sameAddr is the next decided
	// address equal to addr (egressIPInputs.byAddr's chain).
	ownedAt  int
	sameAddr *eipAddr
}

// sameDecision reports whether d and o take the same address of the same
// pod the same way, so that a new version of the pod changes no part.
func (d eipAddr) sameDecision(o eipAddr) bool {
	return d.addr == o.addr && d.owner == o.owner && slices.Equal(d.outranked, o.outranked) &&
		d.pod.Spec.NodeName == o.pod.Spec.NodeName
}

// podRef names a pod.
type podRef struct{ namespace, name string }

// egressIPInputs are the Planner's EgressIP inputs, indexes and results.
type egressIPInputs struct {
	// byKey are the EgressIPs given; order the same, in precedence order
	// (compareEgressIPs).
	byKey map[string]*plannedEgressIP
	order []*plannedEgressIP
	// namespaces are the namespaces' labels, by name; selecting, for each,
	// the objects whose namespaceSelector matches them, in precedence
	// order.
	namespaces map[string]labels.Set
	selecting  map[string][]*plannedEgressIP
	// pods are the pods given to SetClusterPods, by namespace and name.
	pods map[string]map[string]*corev1.Pod
	// decided are the selected addresses of each pod; byAddr the first of
	// those of each address (for the claims of LoadBalancerIP-mode
	// services), the others chained through sameAddr.
	decided map[podRef][]eipAddr
	byAddr  map[netip.Addr]*eipAddr

	// redecide are the pods whose addresses are to be decided again, or
	// every pod held with redecideAll (the first pods: no decision yet to
	// undo, and no set of every pod to build); dirty the objects whose
	// part is to be rebuilt (mark); regroup: which parts spread changed,
	// and the groups are to be allotted again.
	redecide    map[podRef]bool
	redecideAll bool
	dirty       []*plannedEgressIP
	regroup     bool

	// selectedCount counts, for each local pod address, the objects that
	// list it in selected (one, unless it moves between objects within a
	// sync); selectedMoved: an address came or went since the pod guard
	// last learnt of it.
	selectedCount map[netip.Addr]int
	selectedMoved bool
	// changed holds the keys whose part or problems changed since
	// TakeEgressIPChanges.
	changed map[string]bool
	// addrs is decide's buffer of a pod's addresses.
	addrs []netip.Addr
	// work counts the pods decided and the objects rebuilt, for the tests
	// that hold the planner to touching only what an input changed.
	work struct{ decided, rebuilt int }
}

func newEgressIPInputs() egressIPInputs {
	return egressIPInputs{byKey: map[string]*plannedEgressIP{}, namespaces: map[string]labels.Set{},
		selecting: map[string][]*plannedEgressIP{}, pods: map[string]map[string]*corev1.Pod{},
		decided: map[podRef][]eipAddr{}, byAddr: map[netip.Addr]*eipAddr{},
		redecide:      map[podRef]bool{},
		selectedCount: map[netip.Addr]int{}, changed: map[string]bool{}}
}

// SetEgressIPs takes the cluster's EgressIP objects.
func (p *Planner) SetEgressIPs(eips []*esv1.EgressIP) {
	given := make(map[string]bool, len(eips))
	for _, eip := range eips {
		key := ObjectKey(APIEgressIP, "", eip.Name)
		given[key] = true
		p.egressIP.put(key, eip)
	}
	for key, pl := range p.egressIP.byKey {
		if !given[key] {
			p.egressIP.remove(pl)
		}
	}
}

// updateEgressIP takes one EgressIP, nil when it is gone.
func (p *Planner) updateEgressIP(key string, eip *esv1.EgressIP) {
	if eip != nil {
		p.egressIP.put(key, eip)
	} else if pl := p.egressIP.byKey[key]; pl != nil {
		p.egressIP.remove(pl)
	}
}

// put takes eip, keyed key: a new version whose selection is the same
// (only its status changed, say) marks its own part; any other is taken
// as the old one gone and a new one come.
func (in *egressIPInputs) put(key string, eip *esv1.EgressIP) {
	old := in.byKey[key]
	if old != nil && old.eip == eip {
		return
	}
	pl := &plannedEgressIP{eip: eip, key: key, holders: egressIPHolders(eip), families: egressIPFamilies(eip),
		namespaces: map[string]bool{}}
	pl.nsSel, pl.podSel, _ = egressIPSelectors(eip)
	if old != nil && sameSelection(old, pl) {
		old.eip, old.holders = eip, pl.holders
		in.mark(old)
		return
	}
	if old != nil {
		in.remove(old)
	}
	in.byKey[key] = pl
	i, _ := slices.BinarySearchFunc(in.order, pl, compareRank)
	in.order = slices.Insert(in.order, i, pl)
	in.mark(pl) // its held addresses
	if pl.nsSel == nil {
		return
	}
	for ns, nsLabels := range in.namespaces {
		if !pl.nsSel.Matches(nsLabels) {
			continue
		}
		list := in.selecting[ns]
		i, _ := slices.BinarySearchFunc(list, pl, compareRank)
		in.selecting[ns] = slices.Insert(list, i, pl)
		pl.namespaces[ns] = true
		for name, pod := range in.pods[ns] {
			if pl.podSel.Matches(labels.Set(pod.Labels)) {
				in.redecide[podRef{ns, name}] = true
			}
		}
	}
}

// sameSelection reports whether a and b select the same pods with the
// same precedence.
func sameSelection(a, b *plannedEgressIP) bool {
	selString := func(s labels.Selector) string {
		if s == nil {
			return "\x00invalid"
		}
		return s.String()
	}
	return a.families == b.families && selString(a.nsSel) == selString(b.nsSel) && selString(a.podSel) == selString(b.podSel) &&
		a.eip.CreationTimestamp.Equal(&b.eip.CreationTimestamp)
}

// compareRank orders planned objects by precedence.
func compareRank(a, b *plannedEgressIP) int { return compareEgressIPs(a.eip, b.eip) }

// remove forgets pl: its pods are decided again without it.
func (in *egressIPInputs) remove(pl *plannedEgressIP) {
	for _, d := range pl.owned {
		in.redecide[podRef{d.pod.Namespace, d.pod.Name}] = true
	}
	for d := range pl.outranked {
		in.redecide[podRef{d.pod.Namespace, d.pod.Name}] = true
	}
	for ns := range pl.namespaces {
		in.selecting[ns] = slices.DeleteFunc(in.selecting[ns], func(o *plannedEgressIP) bool { return o == pl })
	}
	if i := slices.Index(in.order, pl); i >= 0 {
		in.order = slices.Delete(in.order, i, i+1)
	}
	in.setSelected(pl, nil)
	if pl.hasFlows() || len(pl.problems) > 0 {
		in.changed[pl.key] = true
	}
	if pl.spreads() != [2]bool{} {
		in.regroup = true
	}
	delete(in.byKey, pl.key)
}

// SetNamespaces takes the cluster's namespaces, whose labels
// namespaceSelector reads, and returns the keys of the external routes
// whose part or problems changed (EgressIP's: TakeEgressIPChanges).
func (p *Planner) SetNamespaces(namespaces []*corev1.Namespace) []string {
	in := &p.egressIP
	given := make(map[string]bool, len(namespaces))
	for _, ns := range namespaces {
		given[ns.Name] = true
		if old, known := in.namespaces[ns.Name]; !known || !maps.Equal(old, labels.Set(ns.Labels)) {
			in.relist(ns.Name, labels.Set(ns.Labels), true)
		}
	}
	for ns := range in.namespaces {
		if !given[ns] {
			in.relist(ns, nil, false)
		}
	}
	return p.externalRoute.setNamespaces(namespaces)
}

// relist gives the namespace ns new labels (known: false when it is gone),
// finds the objects that select it, and marks its pods.
func (in *egressIPInputs) relist(ns string, nsLabels labels.Set, known bool) {
	for _, pl := range in.selecting[ns] {
		delete(pl.namespaces, ns)
	}
	delete(in.selecting, ns)
	delete(in.namespaces, ns)
	if known {
		in.namespaces[ns] = nsLabels
		var list []*plannedEgressIP
		for _, pl := range in.order {
			if pl.nsSel != nil && pl.nsSel.Matches(nsLabels) {
				list = append(list, pl)
				pl.namespaces[ns] = true
			}
		}
		if len(list) > 0 {
			in.selecting[ns] = list
		}
	}
	for name := range in.pods[ns] {
		in.redecide[podRef{ns, name}] = true
	}
}

// SetClusterPods takes the pods beyond the node's own that the node acts
// on: an EgressIP's holder SNATs the pods it selects wherever they run.
// The agent gives it its node's pods and those of the EgressIPs it holds
// (HolderPodWatches); the parts are those of every pod given. Only the
// pods added, gone or replaced by a new version are decided again.
func (p *Planner) SetClusterPods(pods []*corev1.Pod) {
	in := &p.egressIP
	if len(in.pods) == 0 && len(in.decided) == 0 && len(pods) > 0 {
		// The first pods (a start): sized for them, not grown to them,
		// and every one decided at the next plan.
		in.decided = make(map[podRef][]eipAddr, len(pods))
		in.byAddr = make(map[netip.Addr]*eipAddr, 2*len(pods))
		in.redecideAll = true
	}
	// In place: a change costs the pods it touches, not a new map of every
	// pod (the list comes whole on every change of any pod).
	if in.pods == nil {
		in.pods = map[string]map[string]*corev1.Pod{}
	}
	for _, pod := range pods {
		byName := in.pods[pod.Namespace]
		if byName == nil {
			byName = map[string]*corev1.Pod{}
			in.pods[pod.Namespace] = byName
		}
		if byName[pod.Name] != pod {
			byName[pod.Name] = pod
			if !in.redecideAll {
				in.redecide[podRef{pod.Namespace, pod.Name}] = true
			}
		}
	}
	held := 0
	for _, byName := range in.pods {
		held += len(byName)
	}
	if held == len(pods) {
		return // every pod held is listed (an informer lists each pod once): none is gone
	}
	listed := make(map[podRef]bool, len(pods))
	for _, pod := range pods {
		listed[podRef{pod.Namespace, pod.Name}] = true
	}
	for ns, byName := range in.pods {
		for name := range byName {
			if !listed[podRef{ns, name}] {
				delete(byName, name)
				in.redecide[podRef{ns, name}] = true
			}
		}
		if len(byName) == 0 {
			delete(in.pods, ns)
		}
	}
}

// mark marks pl's part to be rebuilt.
func (in *egressIPInputs) mark(pl *plannedEgressIP) {
	if !pl.dirty {
		pl.dirty = true
		in.dirty = append(in.dirty, pl)
	}
}

// hostsChanged marks the objects with a holder on one of nodes,
// whose bridge MAC changed: a local pod may be steered there.
func (in *egressIPInputs) hostsChanged(nodes map[string]bool) {
	for _, pl := range in.order {
		for _, hs := range pl.holders {
			if slices.ContainsFunc(hs, func(h egressIPHolder) bool { return nodes[h.node] }) {
				in.mark(pl)
			}
		}
	}
}

// markAll marks every object (the fence changed: a fenced node holds no
// address and SNATs no other node's pod).
func (in *egressIPInputs) markAll() {
	for _, pl := range in.order {
		in.mark(pl)
	}
}

// claimsChanged marks the objects that take addr, which a
// LoadBalancerIP-mode service may have begun or stopped claiming.
func (in *egressIPInputs) claimsChanged(addr netip.Addr) {
	for d := in.byAddr[addr]; d != nil; d = d.sameAddr {
		in.mark(d.owner)
	}
}

// TakeEgressIPChanges brings the EgressIP parts up to date and returns the
// keys of the EgressIPs whose part or problems changed since it was last
// called, sorted.
func (p *Planner) TakeEgressIPChanges() []string {
	p.replanEgressIPs()
	out := slices.Sorted(maps.Keys(p.egressIP.changed))
	clear(p.egressIP.changed)
	return out
}

// EgressIP returns key's part; false when the node does nothing for it.
func (p *Planner) EgressIP(key string) (EgressIPPart, bool) {
	p.replanEgressIPs()
	if pl := p.egressIP.byKey[key]; pl != nil && pl.hasFlows() {
		return pl.part, true
	}
	return EgressIPPart{}, false
}

// egressIPProblems returns key's problems.
func (p *Planner) egressIPProblems(key string) []Problem {
	p.replanEgressIPs()
	if pl := p.egressIP.byKey[key]; pl != nil {
		return pl.problems
	}
	return nil
}

// egressIPsHeld counts the EgressIPs of which this node holds an address.
func (p *Planner) egressIPsHeld() int {
	p.replanEgressIPs()
	n := 0
	for _, pl := range p.egressIP.order {
		if len(pl.part.Held) > 0 {
			n++
		}
	}
	return n
}

// selectedByEgressIP reports whether a local pod address is one an
// EgressIP selects.
func (p *Planner) selectedByEgressIP(addr netip.Addr) bool {
	p.replanEgressIPs()
	return p.egressIP.selectedCount[addr] > 0
}

// lbClaimed returns the LoadBalancerIP-mode service that claims an
// endpoint address, if one does.
func (p *Planner) lbClaimed(addr netip.Addr) (string, bool) {
	k := p.endpointClaims.owner(addr)
	if k == "" {
		return "", false
	}
	return k, p.services[k].es.Status.Host != esv1.HostAll
}

// replanEgressIPs decides the marked pods again, rebuilds the marked
// objects' parts, and allots the spread groups again if which parts
// spread changed.
func (p *Planner) replanEgressIPs() {
	in := &p.egressIP
	if len(in.redecide) == 0 && !in.redecideAll && len(in.dirty) == 0 && !in.regroup && !in.selectedMoved {
		return
	}
	if in.redecideAll {
		// No decision was made before: the gone pods have none to undo.
		in.redecideAll = false
		clear(in.redecide)
		for ns, byName := range in.pods {
			for name := range byName {
				p.decide(podRef{ns, name})
			}
		}
	}
	for ref := range in.redecide {
		p.decide(ref)
	}
	clear(in.redecide)
	// rebuilt are the objects rebuilt, each with itself as it was.
	type rebuilt struct{ pl, old *plannedEgressIP }
	done := make([]rebuilt, 0, len(in.dirty))
	for _, pl := range in.dirty {
		pl.dirty = false
		if in.byKey[pl.key] != pl {
			continue // removed since it was marked
		}
		old := *pl
		done = append(done, rebuilt{pl, &old})
		p.rebuild(pl)
		if pl.spreads() != old.spreads() {
			in.regroup = true
		}
	}
	clear(in.dirty)
	in.dirty = in.dirty[:0]
	if in.regroup {
		in.regroup = false
		in.allotSpreadGroups()
	}
	if in.selectedMoved {
		in.selectedMoved = false
		// The pod guard admits none of them, and their Network-mode
		// routes are withheld.
		p.admittedStale = true
	}
	for _, r := range done {
		pl, old := r.pl, r.old
		partChanged := pl.hasFlows() != old.hasFlows() || (pl.hasFlows() && !pl.part.Equal(old.part))
		if partChanged || !slices.Equal(pl.problems, old.problems) {
			in.changed[pl.key] = true
		}
	}
}

// allotSpreadGroups allots the groups of every part that spreads
// (allotSpreadGroups, in key order), and marks the objects whose groups
// it changed.
func (in *egressIPInputs) allotSpreadGroups() {
	var spreading []*plannedEgressIP
	for _, pl := range in.order {
		if pl.spreads() != [2]bool{} {
			spreading = append(spreading, pl)
		}
	}
	slices.SortFunc(spreading, func(a, b *plannedEgressIP) int { return cmp.Compare(a.key, b.key) })
	parts := make([]*EgressIPPart, len(spreading))
	before := make([][2]uint32, len(spreading))
	for i, pl := range spreading {
		parts[i], before[i] = &pl.part, pl.spreadGroups()
	}
	allotSpreadGroups(parts)
	for i, pl := range spreading {
		if pl.spreadGroups() != before[i] {
			in.changed[pl.key] = true
		}
	}
}

// decide decides the addresses of the pod ref (given to SetClusterPods,
// or gone) again: for each, the first object that selects it in
// precedence order, among those that select its namespace, takes it. A
// new version of the pod decided the same way only replaces the old one;
// any other change marks the objects involved before and after.
func (p *Planner) decide(ref podRef) {
	in := &p.egressIP
	in.work.decided++
	old := in.decided[ref]
	var next []eipAddr
	if pod := in.pods[ref.namespace][ref.name]; pod != nil && len(in.selecting[ref.namespace]) > 0 {
		local := pod.Spec.NodeName == p.node.Name
		podLabels := labels.Set(pod.Labels)
		in.addrs = appendPodAddresses(in.addrs[:0], pod, p.node.ClusterPodCIDRs)
		next = make([]eipAddr, 0, len(in.addrs))
		for _, addr := range in.addrs {
			d := eipAddr{pod: pod, addr: addr}
			for _, pl := range in.selecting[ref.namespace] {
				if !pl.families[family(addr)] || !pl.podSel.Matches(podLabels) {
					continue
				}
				if d.owner == nil {
					d.owner = pl
					if !local {
						break // problems are reported for local pods only
					}
					continue
				}
				d.outranked = append(d.outranked, pl)
			}
			if d.owner != nil {
				next = append(next, d)
			}
		}
	}
	if len(old) > 0 && slices.EqualFunc(old, next, eipAddr.sameDecision) {
		for i := range old {
			old[i].pod = next[i].pod
		}
		return
	}
	for i := range old {
		in.file(&old[i], false)
	}
	for i := range next {
		in.file(&next[i], true)
	}
	if len(next) > 0 {
		in.decided[ref] = next
	} else {
		delete(in.decided, ref)
	}
}

// file files d under its objects and its address (add), or takes it out
// of them, and marks the objects.
func (in *egressIPInputs) file(d *eipAddr, add bool) {
	owner := d.owner
	in.mark(owner)
	for _, pl := range d.outranked {
		in.mark(pl)
		if add {
			if pl.outranked == nil {
				pl.outranked = map[*eipAddr]bool{}
			}
			pl.outranked[d] = true
		} else {
			delete(pl.outranked, d)
		}
	}
	if add {
		d.ownedAt, owner.owned = len(owner.owned), append(owner.owned, d)
		d.sameAddr, in.byAddr[d.addr] = in.byAddr[d.addr], d
		return
	}
	last := owner.owned[len(owner.owned)-1]
	owner.owned[d.ownedAt], last.ownedAt = last, d.ownedAt
	owner.owned[len(owner.owned)-1] = nil
	owner.owned = owner.owned[:len(owner.owned)-1]
	if first := in.byAddr[d.addr]; first == d {
		if d.sameAddr != nil {
			in.byAddr[d.addr] = d.sameAddr
		} else {
			delete(in.byAddr, d.addr)
		}
	} else {
		for o := first; o != nil; o = o.sameAddr {
			if o.sameAddr == d {
				o.sameAddr = d.sameAddr
				break
			}
		}
	}
}

// rebuild computes pl's part, problems and local selected addresses from
// the addresses filed under it, keeping its spread groups for the
// families it still spreads.
func (p *Planner) rebuild(pl *plannedEgressIP) {
	p.egressIP.work.rebuilt++
	part := EgressIPPart{Key: pl.key}
	if !p.node.Fenced {
		for _, hs := range pl.holders {
			for _, h := range hs {
				if h.node == p.node.Name {
					part.Held = append(part.Held, h.addr)
				}
			}
		}
	}
	var problems []Problem
	var selected []netip.Addr
	for d := range pl.outranked {
		problems = append(problems, outrankedProblem(pl.eip.Name, d.pod, d.addr, d.owner.eip.Name))
	}
	for _, d := range pl.owned {
		local := d.pod.Spec.NodeName == p.node.Name
		if len(pl.holders[family(d.addr)]) == 0 && p.node.EgressIPUnheld.LeavesThroughNode() {
			continue // leaves as its node's unselected pods do
		}
		if local {
			selected = append(selected, d.addr)
		}
		if svc, claimed := p.lbClaimed(d.addr); claimed {
			if local {
				problems = append(problems, claimedProblem(pl.eip.Name, d.pod, d.addr, svc))
			}
			continue
		}
		problems = append(problems, planEgressIPPod(&part, p.node, pl.eip.Name, pl.holders, d.pod, d.addr,
			func(n string) net.HardwareAddr { return p.hostMACs[n] })...)
	}
	slices.SortFunc(part.Held, netip.Addr.Compare)
	part.Pods = sortEgressIPPods(part.Pods)
	for f := range part.Spread {
		if len(part.Spread[f].Hops) > 0 {
			part.Spread[f].Group = pl.part.Spread[f].Group
		}
	}
	slices.SortFunc(problems, compareProblems)
	slices.SortFunc(selected, netip.Addr.Compare)
	pl.part, pl.problems = part, problems
	p.egressIP.setSelected(pl, slices.Compact(selected))
}

// setSelected makes selected pl's local selected addresses, and marks the
// pod guard's admitted addresses stale if the node's set of them changed.
func (in *egressIPInputs) setSelected(pl *plannedEgressIP, selected []netip.Addr) {
	if slices.Equal(pl.selected, selected) {
		return
	}
	for _, a := range pl.selected {
		if in.selectedCount[a]--; in.selectedCount[a] == 0 {
			delete(in.selectedCount, a)
			in.selectedMoved = true
		}
	}
	for _, a := range selected {
		if in.selectedCount[a]++; in.selectedCount[a] == 1 {
			in.selectedMoved = true
		}
	}
	pl.selected = selected
}

// egressIPState is State.EgressIP, as ComputeEgressIP returns it.
func (p *Planner) egressIPState() EgressIPs {
	p.replanEgressIPs()
	var out EgressIPs
	keys := slices.Sorted(maps.Keys(p.egressIP.byKey))
	for _, k := range keys {
		if pl := p.egressIP.byKey[k]; pl.hasFlows() {
			out.Parts = append(out.Parts, pl.part)
		}
	}
	for _, k := range keys {
		out.Problems = append(out.Problems, p.egressIP.byKey[k].problems...)
	}
	out.Selected = slices.SortedFunc(maps.Keys(p.egressIP.selectedCount), netip.Addr.Compare)
	return out
}

func compareProblems(a, b Problem) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Message, b.Message), cmp.Compare(a.Reason, b.Reason))
}
