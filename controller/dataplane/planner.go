package dataplane

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// ServiceInputs are the API objects one EgressService's part of the
// dataplane is computed from, besides the nodes and the host's Lease.
type ServiceInputs struct {
	// EgressService is nil when it does not exist (any more).
	EgressService *esv1.EgressService
	// Service is the LoadBalancer Service of the same namespace and name.
	Service *corev1.Service
	// EndpointSlices are the Service's slices.
	EndpointSlices []*discoveryv1.EndpointSlice
}

// Planner holds the State that Compute would return, and keeps it current
// as one EgressService's inputs change at a time, recomputing only that
// service and the few others it shares an endpoint or LB IP with. The node
// agent uses it so that one endpoint added costs one service's work, not a
// pass over every service of the cluster.
//
// A Planner is deterministic: its State depends only on the inputs it was
// last given, never on the order they came in (TestPlannerMatchesCompute).
// It is not safe for concurrent use.
type Planner struct {
	node   NodeConfig
	tables TableResolver

	// exempt is State.Exempt: nodeExempt and the host addresses of the
	// nodes in nodeNames.
	exempt []netip.Prefix
	// nodeExempt are the exemptions the Node objects give (exemptions).
	nodeExempt []netip.Prefix
	// nodeNames are the names of the Node objects: only their agents'
	// host addresses are exempt.
	nodeNames map[string]bool
	// ownNodeAddresses are the addresses of this node's Node object.
	ownNodeAddresses []netip.Addr
	// hostAddresses are the host addresses each agent publishes, by node
	// name, with the annotation they were read from.
	hostAddresses map[string]publishedAddresses
	hostMACs      map[string]net.HardwareAddr // by node name

	services map[string]*planned // by key: every EgressService given
	// endpointClaims holds, for each endpoint IP, the keys of the active
	// services that have it: the first owns it.
	endpointClaims claims
	// replyClaims holds, for each LB IP, the keys of the services hosted on
	// this node that would send its replies through conntrack: the first
	// renders the flow.
	replyClaims claims
	// byHost holds the keys of the active services hosted on each node, to
	// find those a new bridge MAC concerns.
	byHost map[string]map[string]bool
	// withTable holds the keys of the services that have ip rules.
	withTable map[string]bool
	// acting counts the services in State by role.
	acting map[Role]int

	// localPods are this node's pods (SetLocalPods).
	localPods []*corev1.Pod
	// selecting holds, by namespace, the keys of the active services whose
	// Service has a pod selector: those that may hold a local pod.
	selecting map[string]map[string]bool
	// admitted and admittedLate are the pod guard's admitted addresses
	// (State.Admitted, State.AdmittedLate), recomputed when admittedStale.
	admitted, admittedLate []netip.Addr
	admittedStale          bool
	// held are the addresses the guard holds (State.Held), recomputed
	// with them.
	held []netip.Addr

	// qos holds every EgressQoS named default given, by key.
	qos map[string]*plannedQoS
	// qosByNamespace is the key of each namespace's EgressQoS.
	qosByNamespace map[string]string
	// podsByNamespace are the local pods by namespace, sorted by name: a
	// namespace's TableQoS part is recomputed when its pods change.
	podsByNamespace map[string][]*corev1.Pod
	// qosHashes counts the classes by their hash (qosClassHash);
	// qosCollisions counts the hashes that more than one class has, and 0
	// if a class has it. While there is none, every class's ID is its
	// hash, and one namespace's change changes no other's IDs.
	qosHashes     map[uint32]int
	qosCollisions int
	// qosRules counts the rules TableQoS applies (plannedQoS.rules).
	qosRules int

	firewallInputs
	egressIP egressIPInputs
	// externalRoute is AdminPolicyBasedExternalRoute's member, which keeps
	// its own inputs (planner_externalroute.go).
	externalRoute *externalRouteMember

	// members are the family's APIs, the built-in ones and those
	// registered (member.go).
	members members
}

// plannedQoS is one EgressQoS's part (its namespace's TableQoS).
type plannedQoS struct {
	q        *esv1.EgressQoS
	ns       QoSNamespace // with the classes' IDs
	hashes   []uint32     // of its classes, counted in qosHashes
	problems []Problem
	// rules are the rules that select a local pod: those TableQoS applies.
	rules int
}

// planned is one EgressService's inputs and what came of them.
type planned struct {
	es *esv1.EgressService
	// active: the service has a host that fits its mode and a LoadBalancer
	// Service, so it claims its endpoints (on every node alike).
	active   bool
	all      []endpoints.Endpoint // cluster-network endpoints, when active
	selector labels.Selector      // the Service's pod selector, when active
	families []corev1.IPFamily    // the Service's IP families, when active
	lbIPs    []netip.Addr
	mismatch bool // status.host does not fit sourceIPBy

	result Service // what the node does; in State if len(Endpoints) > 0
	// part is result as a Part, boxed once per change rather than on
	// each of the Ledger's reads (three a key in a full sync).
	part     Part
	problems []Problem
	replyIPs []netip.Addr // LB IPs this service claims in replyClaims
}

func (p *planned) inState() bool { return len(p.result.Endpoints) > 0 }

// NewPlanner returns an empty Planner for node.
func NewPlanner(node NodeConfig, tables TableResolver) *Planner {
	p := &Planner{
		node:           node,
		tables:         tables,
		exempt:         exemptions(node, nil),
		nodeExempt:     exemptions(node, nil),
		nodeNames:      map[string]bool{},
		hostAddresses:  map[string]publishedAddresses{},
		hostMACs:       map[string]net.HardwareAddr{},
		services:       map[string]*planned{},
		endpointClaims: newClaims(),
		replyClaims:    newClaims(),
		byHost:         map[string]map[string]bool{},
		withTable:      map[string]bool{},
		acting:         map[Role]int{},
		selecting:      map[string]map[string]bool{},
		qos:            map[string]*plannedQoS{},
		qosByNamespace: map[string]string{},
		qosHashes:      map[uint32]int{},
		firewallInputs: newFirewallInputs(node),
		egressIP:       newEgressIPInputs(),
		externalRoute:  newExternalRouteMember(node),
	}
	// Which namespaces a policy selects decides where their pods are
	// admitted.
	p.externalRoute.selectionChanged = func() { p.admittedStale = true }
	for _, m := range builtInMembers(p) {
		if err := p.RegisterMember(m); err != nil {
			panic(err) // two built-in members of one API
		}
	}
	return p
}

// SetLocalPods takes the pods bound to this node, whose addresses the pod
// guard admits or holds (AdmittedPods), TableFirewall and TableQoS
// classify and registered members may read (PodReader), and returns the
// keys whose part changed: those of the namespaces whose pods changed (a
// pod added, gone, or replaced by a newer version, its labels perhaps
// changed).
func (p *Planner) SetLocalPods(pods []*corev1.Pod) []string {
	p.localPods = pods
	p.admittedStale = true
	byNamespace := map[string][]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == p.node.Name {
			byNamespace[pod.Namespace] = append(byNamespace[pod.Namespace], pod)
		}
	}
	var changedNamespaces []string
	for ns, list := range byNamespace {
		slices.SortFunc(list, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		if !slices.Equal(list, p.podsByNamespace[ns]) {
			changedNamespaces = append(changedNamespaces, ns)
		}
	}
	for ns := range p.podsByNamespace {
		if len(byNamespace[ns]) == 0 {
			changedNamespaces = append(changedNamespaces, ns)
		}
	}
	p.podsByNamespace = byNamespace
	var qos, firewalls []string
	for _, ns := range changedNamespaces {
		if k, ok := p.qosByNamespace[ns]; ok {
			qos = append(qos, k)
		}
		if k, ok := p.firewallByNamespace[ns]; ok {
			firewalls = append(firewalls, k)
		}
	}
	changed := append(p.replanQoS(qos), p.replanFirewalls(firewalls)...)
	if len(changedNamespaces) > 0 {
		slices.Sort(changedNamespaces)
		for _, m := range p.members.list {
			if r, ok := m.(PodReader); ok {
				changed = append(changed, r.SetLocalPods(byNamespace, changedNamespaces)...)
			}
		}
	}
	return changed
}

// Admitted returns the addresses the pod guard admits in TableClassify
// (State.Admitted). Only the services of the local pods' namespaces are
// consulted, and only after a change to the pods, to a service with a
// selector or to which namespaces have an EgressQoS.
func (p *Planner) Admitted() []netip.Addr {
	p.admit()
	return p.admitted
}

// AdmittedLate returns the addresses admitted after the node-local stages
// (State.AdmittedLate).
func (p *Planner) AdmittedLate() []netip.Addr {
	p.admit()
	return p.admittedLate
}

// Held returns the addresses the pod guard holds (State.Held).
func (p *Planner) Held() []netip.Addr {
	p.admit()
	return p.held
}

// admit recomputes the admitted and held addresses, if stale.
func (p *Planner) admit() {
	p.replanEgressIPs() // which local pods an EgressIP selects
	if !p.admittedStale {
		return
	}
	p.admittedStale = false
	p.admitted, p.admittedLate, p.held = p.admitted[:0], p.admittedLate[:0], p.held[:0]
	for _, pod := range p.localPods {
		if pod.Spec.NodeName != p.node.Name {
			continue
		}
		_, qos := p.qosByNamespace[pod.Namespace]
		_, firewall := p.firewallByNamespace[pod.Namespace]
		_, routed := p.externalRoute.ownerOf(pod.Namespace)
		late := qos || firewall || routed
		podLabels := labels.Set(pod.Labels)
		for _, addr := range podAddresses(pod, p.node.ClusterPodCIDRs) {
			held := false
			for k := range p.selecting[pod.Namespace] {
				pl := p.services[k]
				if pl.selector.Matches(podLabels) && servesFamily(pl.families, addr) && !listed(pl.all, addr) {
					held = true
					break
				}
			}
			switch {
			case held:
				p.held = append(p.held, addr)
			case p.selectedByEgressIP(addr):
			case late:
				p.admittedLate = append(p.admittedLate, addr)
			default:
				p.admitted = append(p.admitted, addr)
			}
		}
	}
	for _, list := range []*[]netip.Addr{&p.admitted, &p.admittedLate, &p.held} {
		slices.SortFunc(*list, netip.Addr.Compare)
		*list = slices.Compact(*list)
	}
}

// UpdateQoS takes the EgressQoS of key (ObjectKey(APIEgressQoS, namespace,
// name); nil when it is gone) and returns the keys of the EgressQoS
// objects whose part or Problems may have changed: key, and, only when
// class IDs collide, those whose IDs moved. An object not named default
// counts as none (only default counts, as in the reference).
func (p *Planner) UpdateQoS(key string, q *esv1.EgressQoS) []string {
	if q != nil && q.Name != esv1.EgressQoSName {
		q = nil
	}
	old := p.qos[key]
	switch {
	case q == nil && old == nil:
		return nil
	case q == nil:
		p.dropQoSPart(old)
		delete(p.qosByNamespace, old.q.Namespace)
		delete(p.qos, key)
		p.admittedStale = true
		return p.assignQoSIDs([]string{key}, 0)
	case old == nil:
		p.qos[key] = &plannedQoS{q: q}
		p.qosByNamespace[q.Namespace] = key
		p.admittedStale = true
	default:
		old.q = q
	}
	return p.replanQoS([]string{key})
}

// replanQoS recomputes the parts of keys from their objects and their
// namespaces' pods, and returns the keys whose part may have changed.
func (p *Planner) replanQoS(keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	collisionsBefore := p.qosCollisions
	for _, k := range keys {
		pl := p.qos[k]
		p.dropQoSPart(pl)
		pl.ns, pl.problems = computeQoSNamespace(p.node, pl.q, p.podsByNamespace[pl.q.Namespace])
		applied := map[int]bool{}
		for _, c := range pl.ns.Classes {
			h := qosClassHash(pl.ns.Key, c.Rules)
			pl.hashes = append(pl.hashes, h)
			p.qosHashes[h]++
			if n := p.qosHashes[h]; n == 2 || (h == 0 && n == 1) {
				p.qosCollisions++
			}
			for _, r := range c.Rules {
				applied[r] = true
			}
		}
		pl.rules = len(applied)
		p.qosRules += pl.rules
	}
	return p.assignQoSIDs(keys, collisionsBefore)
}

// dropQoSPart takes pl's classes out of the hash counts.
func (p *Planner) dropQoSPart(pl *plannedQoS) {
	for _, h := range pl.hashes {
		if n := p.qosHashes[h]; n == 2 || (h == 0 && n == 1) {
			p.qosCollisions--
		}
		if p.qosHashes[h]--; p.qosHashes[h] == 0 {
			delete(p.qosHashes, h)
		}
	}
	pl.hashes = nil
	p.qosRules -= pl.rules
	pl.rules = 0
}

// assignQoSIDs gives the classes of the changed keys their IDs, as
// assignQoSClassIDs gives them over the whole node, and returns the keys
// whose part may have changed. Without a collision, before the change or
// after it, each class's ID is its hash and only the changed keys move;
// otherwise every namespace's IDs are assigned again (a collision is rare:
// 32-bit hashes of the classes of one node) and those that moved are
// returned too.
func (p *Planner) assignQoSIDs(changed []string, collisionsBefore int) []string {
	if collisionsBefore == 0 && p.qosCollisions == 0 {
		for _, k := range changed {
			if pl := p.qos[k]; pl != nil {
				for i := range pl.ns.Classes {
					pl.ns.Classes[i].ID = pl.hashes[i]
				}
			}
		}
		slices.Sort(changed)
		return slices.Compact(changed)
	}
	var keys []string
	var namespaces []QoSNamespace
	for _, k := range slices.Sorted(maps.Keys(p.qos)) {
		if ns := p.qos[k].ns; len(ns.Classes) > 0 {
			// A copy: the part as it was may still be the ledger's record
			// of the bridge.
			ns.Classes = slices.Clone(ns.Classes)
			keys, namespaces = append(keys, k), append(namespaces, ns)
		}
	}
	assignQoSClassIDs(namespaces)
	for i, k := range keys {
		pl := p.qos[k]
		if !slices.EqualFunc(pl.ns.Classes, namespaces[i].Classes, func(a, b QoSClass) bool { return a.ID == b.ID }) {
			changed = append(changed, k)
		}
		pl.ns = namespaces[i]
	}
	slices.Sort(changed)
	return slices.Compact(changed)
}

// QoS returns key's part of TableQoS; false when the node does nothing for
// it (no such EgressQoS, or no local pod that one of its rules selects).
func (p *Planner) QoS(key string) (QoSNamespace, bool) {
	pl := p.qos[key]
	if pl == nil || len(pl.ns.Classes) == 0 {
		return QoSNamespace{}, false
	}
	return pl.ns, true
}

// QoSRules returns how many rules TableQoS applies: of each EgressQoS,
// those that select a local pod.
func (p *Planner) QoSRules() int { return p.qosRules }

// listed reports whether addr is among eps, sorted by IP.
func listed(eps []endpoints.Endpoint, addr netip.Addr) bool {
	_, found := slices.BinarySearchFunc(eps, addr, func(ep endpoints.Endpoint, a netip.Addr) int { return ep.IP.Compare(a) })
	return found
}

// SetNodes takes the cluster's nodes, whose addresses are exempt and
// nodeSelector rules match; it reports whether the exemptions changed,
// and returns the keys of the EgressFirewall objects whose part the nodes
// changed.
func (p *Planner) SetNodes(nodes []*corev1.Node) (exemptChanged bool, firewalls []string) {
	firewalls = p.setFirewallNodes(nodes)
	p.nodeExempt = exemptions(p.node, nodes)
	clear(p.nodeNames)
	p.ownNodeAddresses = nil
	for _, n := range nodes {
		p.nodeNames[n.Name] = true
		if n.Name == p.node.Name {
			p.ownNodeAddresses = endpoints.NodeAddresses(n)
		}
	}
	return p.updateExempt(), firewalls
}

// OwnAddresses are this node's addresses, sorted: its Node object's and
// the host addresses its agent publishes on its Lease.
func (p *Planner) OwnAddresses() []netip.Addr {
	out := slices.Concat(p.ownNodeAddresses, p.hostAddresses[p.node.Name].addrs)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// publishedAddresses are one agent's host addresses and the annotation
// value they were read from, so that a Lease renewed with the same value
// (every renewal, mostly) is not parsed again.
type publishedAddresses struct {
	annotation string
	addrs      []netip.Addr
}

// updateExempt recomputes the exemptions from the nodes' and the agents'
// addresses, and reports whether they changed.
func (p *Planner) updateExempt() bool {
	exempt := slices.Clone(p.nodeExempt)
	for name, published := range p.hostAddresses {
		if !p.nodeNames[name] {
			continue // a Lease left by a deleted node: its addresses may be anyone's now
		}
		for _, addr := range published.addrs {
			exempt = append(exempt, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	slices.SortFunc(exempt, comparePrefixes)
	exempt = slices.Compact(exempt)
	if slices.Equal(exempt, p.exempt) {
		return false
	}
	p.exempt = exempt
	return true
}

// SetLeases takes the agents' heartbeat Leases by node name, whose bridge
// MACs steering reads and whose host addresses are exempt (the shared
// flows, which every sync diffs), and returns the keys of the services
// whose Service changed with a host's bridge MAC.
func (p *Planner) SetLeases(leases map[string]*coordinationv1.Lease) []string {
	macs := make(map[string]net.HardwareAddr, len(leases))
	addressesChanged := len(leases) != len(p.hostAddresses)
	hostAddresses := make(map[string]publishedAddresses, len(leases))
	for nodeName, l := range leases {
		if mac := hostMAC(l); mac != nil {
			macs[nodeName] = mac
		}
		annotation := l.Annotations[heartbeat.AnnotationHostAddresses]
		published, known := p.hostAddresses[nodeName]
		if !known || published.annotation != annotation {
			published = publishedAddresses{annotation: annotation, addrs: heartbeat.ReadFacts(l).HostAddresses}
			addressesChanged = true
		}
		hostAddresses[nodeName] = published
	}
	if addressesChanged {
		p.hostAddresses = hostAddresses
		p.updateExempt()
	}
	macChanged := map[string]bool{}
	for _, m := range []map[string]net.HardwareAddr{macs, p.hostMACs} {
		for nodeName := range m {
			if !bytes.Equal(macs[nodeName], p.hostMACs[nodeName]) {
				macChanged[nodeName] = true
			}
		}
	}
	if len(macChanged) > 0 {
		p.egressIP.hostsChanged(macChanged) // a local pod may be steered there
	}
	var dirty []string
	for nodeName := range macChanged {
		// Only steering renders a host's MAC: this node's own MAC never
		// changes its flows (it is published after the first sync).
		if nodeName != p.node.Name {
			dirty = slices.AppendSeq(dirty, maps.Keys(p.byHost[nodeName]))
		}
	}
	p.hostMACs = macs
	return p.resolve(dirty)
}

// HostMAC is the bridge MAC that node's heartbeat Lease publishes; nil
// when unknown.
func (p *Planner) HostMAC(node string) net.HardwareAddr { return p.hostMACs[node] }

// SetFenced fences or unfences this node (NodeConfig.Fenced) and returns
// the keys of the services it hosts, whose role changes with it.
func (p *Planner) SetFenced(fenced bool) []string {
	if p.node.Fenced == fenced {
		return nil
	}
	p.node.Fenced = fenced
	p.egressIP.markAll() // a fenced node holds no address
	changed := p.resolve(slices.Collect(maps.Keys(p.byHost[p.node.Name])))
	for _, m := range p.members.list {
		if f, ok := m.(FenceFollower); ok {
			changed = append(changed, f.SetFenced(fenced)...)
		}
	}
	return changed
}

// RouterRefusals are the refusals of the EgressRouters this node serves
// (RouterRefusal), sorted by address; none without an EgressRouter
// member.
func (p *Planner) RouterRefusals() []RouterRefusal {
	if m := p.routerMember(); m != nil {
		return m.Refusals()
	}
	return nil
}

// routerMember is the EgressRouter member; nil when none is registered.
func (p *Planner) routerMember() *routerMember {
	for _, m := range p.members.list {
		if r, ok := m.(*routerMember); ok {
			return r
		}
	}
	return nil
}

// Fenced reports whether this node is fenced.
func (p *Planner) Fenced() bool { return p.node.Fenced }

// Update takes key's current inputs (a zero ServiceInputs when its
// EgressService is gone) and returns the keys of the services whose Service
// or Problems may have changed: key itself, and those it shares an
// endpoint or an LB IP with.
func (p *Planner) Update(key string, in ServiceInputs) []string {
	old := p.services[key]
	next := p.plan(in)
	dirty := []string{key}
	// Which endpoints a LoadBalancerIP-mode service claims may change.
	for _, pl := range []*planned{old, next} {
		if pl != nil {
			for _, ep := range pl.all {
				p.egressIP.claimsChanged(ep.IP)
			}
		}
	}
	p.trackSelector(key, old, next)
	if old != nil {
		dirty = append(dirty, p.unclaim(key, old)...)
		if old.active {
			delete(p.byHost[old.es.Status.Host], key)
			if len(p.byHost[old.es.Status.Host]) == 0 {
				delete(p.byHost, old.es.Status.Host)
			}
		}
		if next != nil {
			// The old result stays until resolve replaces it, so the
			// counts by role stay right.
			next.result, next.part, next.problems = old.result, old.part, old.problems
		}
	}
	if next == nil {
		if old != nil {
			p.setResult(key, old, Service{}, nil)
			delete(p.services, key)
		}
		return p.resolve(dirty)
	}
	p.services[key] = next
	if next.active {
		for _, ep := range next.all {
			dirty = append(dirty, p.endpointClaims.add(ep.IP, key)...)
		}
		host := next.es.Status.Host
		if p.byHost[host] == nil {
			p.byHost[host] = map[string]bool{}
		}
		p.byHost[host][key] = true
	}
	return p.resolve(dirty)
}

// trackSelector keeps the selecting index as key goes from old to next,
// and marks the admitted addresses stale if either may hold a pod.
func (p *Planner) trackSelector(key string, old, next *planned) {
	if old != nil && old.selector != nil {
		ns := old.es.Namespace
		delete(p.selecting[ns], key)
		if len(p.selecting[ns]) == 0 {
			delete(p.selecting, ns)
		}
		p.admittedStale = true
	}
	if next != nil && next.selector != nil {
		ns := next.es.Namespace
		if p.selecting[ns] == nil {
			p.selecting[ns] = map[string]bool{}
		}
		p.selecting[ns][key] = true
		p.admittedStale = true
	}
}

// plan reads key's inputs; nil when there is no EgressService.
func (p *Planner) plan(in ServiceInputs) *planned {
	es := in.EgressService
	if es == nil {
		return nil
	}
	pl := &planned{es: es}
	svc := in.Service
	if es.Status.Host == "" || svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return pl // no host: endpoints egress normally
	}
	if !claimsEndpoints(es, svc) {
		pl.mismatch = true
		return pl
	}
	pl.active = true
	pl.all = endpoints.OnClusterNetwork(in.EndpointSlices, p.node.ClusterPodCIDRs)
	pl.selector = podSelector(svc)
	pl.families = svc.Spec.IPFamilies
	pl.lbIPs = lbIPs(svc)
	return pl
}

// unclaim withdraws key's claims on its endpoints and LB IPs, returning
// the other claimants, whose share may grow.
func (p *Planner) unclaim(key string, pl *planned) []string {
	var others []string
	if pl.active {
		for _, ep := range pl.all {
			others = append(others, p.endpointClaims.remove(ep.IP, key)...)
		}
	}
	return append(others, p.unclaimReplies(key, pl)...)
}

// unclaimReplies withdraws key's claims on LB IPs, returning the other
// claimants.
func (p *Planner) unclaimReplies(key string, pl *planned) []string {
	var others []string
	for _, lb := range pl.replyIPs {
		others = append(others, p.replyClaims.remove(lb, key)...)
	}
	pl.replyIPs = nil
	return others
}

// claims lists, for each address, the keys that claim it, in order. Nearly
// every address has one claimant (a pod is an endpoint of one service), so
// that case is kept without a slice: at 100,000 endpoints this is most of
// the planner's index.
type claims struct {
	sole   map[netip.Addr]string   // addresses with one claimant
	shared map[netip.Addr][]string // addresses with several, sorted
}

func newClaims() claims {
	return claims{sole: map[netip.Addr]string{}, shared: map[netip.Addr][]string{}}
}

// owner returns the first claimant of addr ("" if none).
func (c claims) owner(addr netip.Addr) string {
	if k, ok := c.sole[addr]; ok {
		return k
	}
	if keys := c.shared[addr]; len(keys) > 0 {
		return keys[0]
	}
	return ""
}

// add adds key to the claimants of addr and returns the others.
func (c claims) add(addr netip.Addr, key string) []string {
	if k, ok := c.sole[addr]; ok {
		if k == key {
			return nil
		}
		delete(c.sole, addr)
		c.shared[addr] = slices.Sorted(slices.Values([]string{k, key}))
		return []string{k}
	}
	keys, ok := c.shared[addr]
	if !ok {
		c.sole[addr] = key
		return nil
	}
	if i, found := slices.BinarySearch(keys, key); !found {
		keys = slices.Insert(keys, i, key)
		c.shared[addr] = keys
	}
	return others(keys, key)
}

// remove removes key from the claimants of addr and returns the others.
func (c claims) remove(addr netip.Addr, key string) []string {
	if k, ok := c.sole[addr]; ok {
		if k == key {
			delete(c.sole, addr)
			return nil
		}
		return []string{k}
	}
	keys := c.shared[addr]
	if i, found := slices.BinarySearch(keys, key); found {
		keys = slices.Delete(keys, i, i+1)
	}
	switch len(keys) {
	case 0:
		delete(c.shared, addr)
		return nil
	case 1:
		delete(c.shared, addr)
		c.sole[addr] = keys[0]
	default:
		c.shared[addr] = keys
	}
	return others(keys, key)
}

func others(keys []string, key string) []string {
	if len(keys) == 1 && keys[0] == key {
		return nil // the common case: nobody else
	}
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == key })
}

// resolve recomputes the Service and Problems of the dirty keys from their
// inputs and the claims, and returns them, sorted and without repeats, with
// the keys whose reply flows moved as a result.
func (p *Planner) resolve(dirty []string) []string {
	slices.Sort(dirty)
	dirty = slices.Compact(dirty)
	// Endpoint claims do not depend on any result, so one pass settles
	// every Service but its ReplyLBIPs; reply claims come second.
	var replyDirty []string
	for _, k := range dirty {
		pl := p.services[k]
		if pl == nil {
			continue
		}
		s, problems := p.compute(k, pl)
		replyDirty = append(replyDirty, p.unclaimReplies(k, pl)...)
		if s.Role == RoleHost && len(s.Endpoints) > 0 {
			pl.replyIPs = s.LoadBalancerIPs
			for _, lb := range pl.replyIPs {
				replyDirty = append(replyDirty, p.replyClaims.add(lb, k)...)
			}
		}
		s.ReplyLBIPs = p.ownedReplies(k, pl)
		p.setResult(k, pl, s, problems)
	}
	for _, k := range replyDirty {
		if pl := p.services[k]; pl != nil {
			s := pl.result
			s.ReplyLBIPs = p.ownedReplies(k, pl)
			p.setResult(k, pl, s, pl.problems)
		}
	}
	dirty = append(dirty, replyDirty...)
	slices.Sort(dirty)
	return slices.Compact(dirty)
}

// ownedReplies are the LB IPs of pl whose first claimant is key.
func (p *Planner) ownedReplies(key string, pl *planned) []netip.Addr {
	var out []netip.Addr
	for _, lb := range pl.replyIPs {
		if p.replyClaims.owner(lb) == key {
			out = append(out, lb)
		}
	}
	return out
}

// compute is the rule for one service (Compute's serviceSpec), given the
// claims.
func (p *Planner) compute(k string, pl *planned) (Service, []Problem) {
	var problems []Problem
	problem := func(reason reasons.Reason, format string, args ...any) {
		problems = append(problems, Problem{Key: k, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	es := pl.es
	if pl.mismatch {
		problem(reasons.HostMismatch, "status.host %q does not fit sourceIPBy %q", es.Status.Host, sourceIPBy(es))
	}
	if !pl.active {
		return Service{}, problems
	}
	// Claims are made on the full endpoint set, so every node agrees on
	// which service owns a pod shared by several.
	mine := make([]endpoints.Endpoint, 0, len(pl.all))
	for _, ep := range pl.all {
		if owner := p.endpointClaims.owner(ep.IP); owner != k {
			problem(reasons.EndpointClaimed, "endpoint %s already egresses through EgressService %s", ep.IP, owner)
			continue
		}
		mine = append(mine, ep)
	}

	s := Service{Key: k}
	switch {
	case es.Status.Host == esv1.HostAll:
		s.Role = RoleNetwork
		s.Endpoints = addresses(mine, func(ep endpoints.Endpoint) bool { return ep.Node == p.node.Name })
	case es.Status.Host == p.node.Name && p.node.Fenced:
		// As a steering node that does not know the host: every endpoint
		// caught, none let out.
		s.Role = RoleSteer
		s.LoadBalancerIPs = pl.lbIPs
		s.Endpoints = addresses(mine, s.hasLoadBalancerIP)
		if len(s.Endpoints) > 0 {
			problem(reasons.Fenced, "node %s could not renew its heartbeat: it does not act as the host, and drops its endpoints' egress, until it can", p.node.Name)
		}
	case es.Status.Host == p.node.Name:
		s.Role = RoleHost
		s.LoadBalancerIPs = pl.lbIPs
		s.Endpoints = addresses(mine, s.hasLoadBalancerIP)
	default:
		s.Role = RoleSteer
		s.LoadBalancerIPs = pl.lbIPs
		// Every endpoint, not only local ones: a former host still
		// receives packets that slower nodes steer to it, and must pass
		// them on to the new host rather than let them out unSNATed.
		s.Endpoints = addresses(mine, s.hasLoadBalancerIP)
		s.HostMAC = p.hostMACs[es.Status.Host]
		if s.HostMAC == nil && len(s.Endpoints) > 0 {
			problem(reasons.HostUnknown, "host %s has not published its bridge MAC; dropping local endpoints' egress until it does", es.Status.Host)
		}
	}
	// The host routes (steered packets cross its stack), so a steering
	// node needs no table.
	if es.Spec.Network != "" && s.Role != RoleSteer && len(s.Endpoints) > 0 {
		table, err := p.tables(es.Spec.Network)
		if err != nil {
			problem(reasons.UnknownNetwork, "spec.network %q: %v; using default routing", es.Spec.Network, err)
		} else {
			s.Table = table
		}
	}
	return s, problems
}

// setResult records key's new Service and Problems, keeping the indexes.
func (p *Planner) setResult(key string, pl *planned, s Service, problems []Problem) {
	if pl.inState() {
		p.acting[pl.result.Role]--
	}
	pl.result, pl.part, pl.problems = s, s, problems
	if pl.inState() {
		p.acting[s.Role]++
	}
	if pl.inState() && s.Table != 0 {
		p.withTable[key] = true
	} else {
		delete(p.withTable, key)
	}
}

// Service returns key's part of the node's dataplane; false when the node
// does nothing for it (no such service, no host, no endpoint to act on).
func (p *Planner) Service(key string) (Service, bool) {
	pl := p.services[key]
	if pl == nil || !pl.inState() {
		return Service{}, false
	}
	return pl.result, true
}

// Exempt returns the destinations never rewritten (State.Exempt).
func (p *Planner) Exempt() []netip.Prefix { return p.exempt }

// Acting returns how many services of role the node acts on.
func (p *Planner) Acting(role Role) int { return p.acting[role] }

// Shared returns what the shared flows depend on (SharedFlows).
func (p *Planner) Shared() Shared {
	return Shared{Exempt: p.exempt, Guarded: p.node.ClusterPodCIDRs, Admitted: p.Admitted(), AdmittedLate: p.AdmittedLate(), Held: p.Held(),
		FirewallExempt: p.firewallExempt, FirewallResolvers: p.firewallResolvers(), Hosting: p.acting[RoleHost], Steering: p.acting[RoleSteer],
		HoldingEgressIPs: p.egressIPsHeld()}
}

// Rules returns the policy-routing rules of every service (State.Rules).
func (p *Planner) Rules() []Rule {
	return p.withExemptions(p.serviceRules())
}

// Routing returns every policy-routing rule of the node, the services'
// (Rules) and those of the gateways of the EgressRouters it serves, with
// the exemptions of both, and the routes of the routers' tables
// (RouterRouting).
func (p *Planner) Routing() ([]Rule, []Route) {
	var gateways []RouterGateway
	if m := p.routerMember(); m != nil {
		gateways = m.Gateways()
	}
	routerRules, routes := RouterRouting(gateways)
	return p.withExemptions(append(p.serviceRules(), routerRules...)), routes
}

// serviceRules are the route rules of every service, in no order.
func (p *Planner) serviceRules() []Rule {
	var out []Rule
	for k := range p.withTable {
		out = p.appendRules(out, p.services[k].result)
	}
	return out
}

// withExemptions appends to route rules the exemptions that keep the
// cluster's own traffic off them, and sorts them.
func (p *Planner) withExemptions(out []Rule) []Rule {
	out = append(out, ExemptionRules(out, p.exempt)...)
	slices.SortFunc(out, Rule.Compare)
	return out
}

// appendRules appends the rules of s's endpoints, but not of those an
// EgressIP selects or an external route sends through its gateways (see
// Compute).
func (p *Planner) appendRules(out []Rule, s Service) []Rule {
	for _, ep := range s.Endpoints {
		if !p.selectedByEgressIP(ep) && !p.externalRoute.routesAddr(ep) {
			out = append(out, RouteFrom(ep, s.Table))
		}
	}
	return out
}

// State assembles the whole desired dataplane, as Compute returns it.
func (p *Planner) State() State {
	state := State{Exempt: p.exempt, Rules: p.Rules(), Admitted: slices.Clone(p.Admitted()), AdmittedLate: slices.Clone(p.AdmittedLate()), Held: slices.Clone(p.Held()),
		Firewall: p.FirewallState(), EgressIP: p.egressIPState(), ExternalRoute: p.externalRoute.externalRoutes()}
	for _, k := range slices.Sorted(maps.Keys(p.services)) {
		pl := p.services[k]
		state.Problems = append(state.Problems, pl.problems...)
		if pl.inState() {
			state.Services = append(state.Services, pl.result)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.qos)) {
		pl := p.qos[k]
		state.QoS.Problems = append(state.QoS.Problems, pl.problems...)
		if ns, ok := p.QoS(k); ok {
			state.QoS.Namespaces = append(state.QoS.Namespaces, ns)
		}
	}
	return state
}

// addresses returns the IPs of the endpoints keep accepts, in a slice of
// just that size: the planner holds one per service, 100,000 addresses at
// 10,000 services.
func addresses(eps []endpoints.Endpoint, keep func(endpoints.Endpoint) bool) []netip.Addr {
	n := 0
	for _, ep := range eps {
		if keep(ep) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]netip.Addr, 0, n)
	for _, ep := range eps {
		if keep(ep) {
			out = append(out, ep.IP)
		}
	}
	return out
}

func (s Service) hasLoadBalancerIP(ep endpoints.Endpoint) bool {
	_, ok := s.LoadBalancerIP(ep.IP)
	return ok
}
