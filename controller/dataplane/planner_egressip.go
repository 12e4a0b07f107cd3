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
	"github.com/egressflow/egressflow/controller/reasons"
)

// The Planner's EgressIP part. Its inputs (the EgressIP objects, the
// namespaces' labels, the cluster's pods, the hosts' bridge MACs, the
// fence, and which endpoints a LoadBalancerIP-mode service claims) mark it
// stale; replanEgressIPs then recomputes every object's part at once, from
// indexes: each object's selectors and holders parsed once per object
// version, the pods by namespace, and each object's selected namespaces
// found before its pods. It costs the selected pods plus objects ×
// namespaces, once per sync that changed an input, however many inputs
// changed; the Ledger then diffs only the objects whose part differs.
// ComputeEgressIP is the specification it is held to
// (TestPlannerMatchesCompute).

// plannedEgressIP is one EgressIP as the planner keeps it.
type plannedEgressIP struct {
	eip           *esv1.EgressIP
	key           string
	nsSel, podSel labels.Selector // nil when they do not parse
	holders       [2][]egressIPHolder
	families      [2]bool // of its spec's addresses
}

// egressIPInputs are the Planner's EgressIP inputs and results.
type egressIPInputs struct {
	// eips are the EgressIPs given, in precedence order (compareEgressIPs).
	eips []*plannedEgressIP
	// namespaces are the namespaces' labels, by name.
	namespaces map[string]labels.Set
	// clusterPods are the pods given to SetClusterPods, by namespace.
	clusterPods map[string][]*corev1.Pod
	// stale: an input changed since the parts were computed.
	stale bool

	parts    map[string]EgressIPPart // by key; only parts with flows
	problems map[string][]Problem    // by key
	// selected are the local pod addresses an EgressIP selects, sorted.
	selected []netip.Addr
	// changed holds the keys whose part or problems changed since
	// TakeEgressIPChanges.
	changed map[string]bool
}

func newEgressIPInputs() egressIPInputs {
	return egressIPInputs{namespaces: map[string]labels.Set{}, clusterPods: map[string][]*corev1.Pod{},
		parts: map[string]EgressIPPart{}, problems: map[string][]Problem{}, changed: map[string]bool{}}
}

// SetEgressIPs takes the cluster's EgressIP objects.
func (p *Planner) SetEgressIPs(eips []*esv1.EgressIP) {
	byName := map[string]*plannedEgressIP{}
	for _, pl := range p.egressIP.eips {
		byName[pl.eip.Name] = pl
	}
	next := make([]*plannedEgressIP, 0, len(eips))
	for _, eip := range eips {
		if pl := byName[eip.Name]; pl != nil && pl.eip == eip {
			next = append(next, pl)
			continue
		}
		pl := &plannedEgressIP{eip: eip, key: ObjectKey(APIEgressIP, "", eip.Name), holders: egressIPHolders(eip), families: egressIPFamilies(eip)}
		pl.nsSel, pl.podSel, _ = egressIPSelectors(eip)
		next = append(next, pl)
		p.egressIP.stale = true
	}
	if len(next) != len(p.egressIP.eips) {
		p.egressIP.stale = true
	}
	slices.SortFunc(next, func(a, b *plannedEgressIP) int { return compareEgressIPs(a.eip, b.eip) })
	p.egressIP.eips = next
}

// SetNamespaces takes the cluster's namespaces, whose labels
// namespaceSelector reads.
func (p *Planner) SetNamespaces(namespaces []*corev1.Namespace) {
	next := make(map[string]labels.Set, len(namespaces))
	for _, ns := range namespaces {
		next[ns.Name] = labels.Set(ns.Labels)
	}
	if !maps.EqualFunc(next, p.egressIP.namespaces, func(a, b labels.Set) bool { return maps.Equal(a, b) }) {
		p.egressIP.stale = true
	}
	p.egressIP.namespaces = next
}

// SetClusterPods takes the pods beyond the node's own that the node acts
// on: an EgressIP's holder SNATs the pods it selects wherever they run.
// The agent gives it its node's pods and those of the EgressIPs it holds
// (HolderPodWatches); the parts are those of every pod given.
func (p *Planner) SetClusterPods(pods []*corev1.Pod) {
	next := map[string][]*corev1.Pod{}
	for _, pod := range pods {
		next[pod.Namespace] = append(next[pod.Namespace], pod)
	}
	for _, list := range next {
		slices.SortFunc(list, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	}
	if !maps.EqualFunc(next, p.egressIP.clusterPods, slices.Equal) {
		p.egressIP.stale = true
	}
	p.egressIP.clusterPods = next
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
	part, ok := p.egressIP.parts[key]
	return part, ok
}

// HeldEgressIPs returns every EgressIP address this node holds, sorted.
func (p *Planner) HeldEgressIPs() []netip.Addr {
	p.replanEgressIPs()
	var out []netip.Addr
	for _, part := range p.egressIP.parts {
		out = append(out, part.Held...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// egressIPsHeld counts the EgressIPs of which this node holds an address.
func (p *Planner) egressIPsHeld() int {
	p.replanEgressIPs()
	n := 0
	for _, part := range p.egressIP.parts {
		if len(part.Held) > 0 {
			n++
		}
	}
	return n
}

// selectedByEgressIP reports whether a local pod address is one an
// EgressIP selects.
func (p *Planner) selectedByEgressIP(addr netip.Addr) bool {
	p.replanEgressIPs()
	_, found := slices.BinarySearchFunc(p.egressIP.selected, addr, netip.Addr.Compare)
	return found
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

// replanEgressIPs recomputes every EgressIP's part, if an input changed.
func (p *Planner) replanEgressIPs() {
	in := &p.egressIP
	if !in.stale {
		return
	}
	in.stale = false
	// The owner's name, by pod and address: each pod's own (two pods never
	// share an address for long, but a pod the kubelet has not reported
	// finished yet may still hold its successor's).
	type podAddrKey struct {
		namespace, name string
		addr            netip.Addr
	}
	owned := map[podAddrKey]string{}
	parts := map[string]*EgressIPPart{}
	problems := map[string][]Problem{}
	var selected []netip.Addr
	namespaces := slices.Sorted(maps.Keys(in.clusterPods))
	for _, pl := range in.eips {
		part := &EgressIPPart{Key: pl.key}
		parts[pl.key] = part
		if !p.node.Fenced {
			for _, hs := range pl.holders {
				for _, h := range hs {
					if h.node == p.node.Name {
						part.Held = append(part.Held, h.addr)
					}
				}
			}
		}
		if pl.nsSel == nil {
			continue
		}
		for _, pa := range in.selectedBy(pl, namespaces, p.node.ClusterPodCIDRs) {
			local := pa.pod.Spec.NodeName == p.node.Name
			pk := podAddrKey{pa.pod.Namespace, pa.pod.Name, pa.addr}
			if owner := owned[pk]; owner != "" {
				if local {
					problems[pl.key] = append(problems[pl.key], egressIPProblem(pl.eip.Name, reasons.PodClaimed,
						"pod %s/%s (%s) also selected by EgressIP %s, which takes precedence (older)",
						pa.pod.Namespace, pa.pod.Name, pa.addr, owner))
				}
				continue
			}
			owned[pk] = pl.eip.Name
			if len(pl.holders[family(pa.addr)]) == 0 && p.node.EgressIPUnheld.LeavesThroughNode() {
				continue // leaves as its node's unselected pods do
			}
			if local {
				selected = append(selected, pa.addr)
			}
			if svc, claimed := p.lbClaimed(pa.addr); claimed {
				if local {
					problems[pl.key] = append(problems[pl.key], egressIPProblem(pl.eip.Name, reasons.PodClaimed,
						"pod %s/%s (%s) is an endpoint of EgressService %s, whose LB IP it leaves with", pa.pod.Namespace, pa.pod.Name, pa.addr, svc))
				}
				continue
			}
			if found := planEgressIPPod(part, p.node, pl.eip.Name, pl.holders, pa.pod, pa.addr,
				func(n string) net.HardwareAddr { return p.hostMACs[n] }); len(found) > 0 {
				problems[pl.key] = append(problems[pl.key], found...)
			}
		}
	}

	if in.take(parts, problems, selected) {
		// The pod guard admits none of them, and their Network-mode
		// routes are withheld.
		p.admittedStale = true
	}
}

// podAddr is one address of a pod.
type podAddr struct {
	pod  *corev1.Pod
	addr netip.Addr
}

// selectedBy are the addresses (of its families, in cidrs) of the pods pl
// selects: those of the namespaces it selects, in the order of namespaces
// (the order does not matter: every address is decided by the first
// object in precedence order).
func (in *egressIPInputs) selectedBy(pl *plannedEgressIP, namespaces []string, cidrs []netip.Prefix) []podAddr {
	var mine []podAddr
	for _, ns := range namespaces {
		nsLabels, known := in.namespaces[ns]
		if !known || !pl.nsSel.Matches(nsLabels) {
			continue
		}
		for _, pod := range in.clusterPods[ns] {
			if !pl.podSel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			for _, addr := range podAddresses(pod, cidrs) {
				if pl.families[family(addr)] {
					mine = append(mine, podAddr{pod, addr})
				}
			}
		}
	}
	return mine
}

// take makes parts (empty ones left out), problems and the local selected
// pod addresses the current ones, marks in changed every key whose part
// or problems differ from before, and reports whether the selected
// addresses changed.
func (in *egressIPInputs) take(parts map[string]*EgressIPPart, problems map[string][]Problem, selected []netip.Addr) bool {
	// What changed, by key: parts gone, parts new or different, problems.
	for k := range in.parts {
		if _, ok := parts[k]; !ok {
			in.changed[k] = true
		}
	}
	next := make(map[string]EgressIPPart, len(parts))
	var kept []*EgressIPPart
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		part := parts[k]
		if len(part.Held)+len(part.Pods) == 0 {
			if _, had := in.parts[k]; had {
				in.changed[k] = true
			}
			continue
		}
		slices.SortFunc(part.Held, netip.Addr.Compare)
		part.Pods = sortEgressIPPods(part.Pods)
		kept = append(kept, part)
	}
	allotSpreadGroups(kept)
	for _, part := range kept {
		if old, had := in.parts[part.Key]; !had || !old.Equal(*part) {
			in.changed[part.Key] = true
		}
		next[part.Key] = *part
	}
	for k, list := range problems {
		slices.SortFunc(list, compareProblems)
		if !slices.Equal(list, in.problems[k]) {
			in.changed[k] = true
		}
	}
	for k := range in.problems {
		if _, ok := problems[k]; !ok {
			in.changed[k] = true
		}
	}
	in.parts, in.problems = next, problems
	slices.SortFunc(selected, netip.Addr.Compare)
	selected = slices.Compact(selected)
	selectedChanged := !slices.Equal(selected, in.selected)
	in.selected = selected
	return selectedChanged
}

// egressIPState is State.EgressIP, as ComputeEgressIP returns it.
func (p *Planner) egressIPState() EgressIPs {
	p.replanEgressIPs()
	var out EgressIPs
	for _, k := range slices.Sorted(maps.Keys(p.egressIP.parts)) {
		out.Parts = append(out.Parts, p.egressIP.parts[k])
	}
	for _, k := range slices.Sorted(maps.Keys(p.egressIP.problems)) {
		out.Problems = append(out.Problems, p.egressIP.problems[k]...)
	}
	out.Selected = slices.Clone(p.egressIP.selected)
	return out
}

func compareProblems(a, b Problem) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Message, b.Message), cmp.Compare(a.Reason, b.Reason))
}
