package cluster

import (
	"cmp"
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/endpoints"
	cloudinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions/cloudnetwork/v1"
	esinformersv1 "github.com/egressflow/egressflow/controller/generated/informers/externalversions/egressservice/v1"
	cloudlisters "github.com/egressflow/egressflow/controller/generated/listers/cloudnetwork/v1"
	eslisters "github.com/egressflow/egressflow/controller/generated/listers/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// EgressIP assignment: which node holds each address of every EgressIP
// (status.items), decided by assign.DecideEgressIP. This file holds the
// term's bookkeeping (load per node, who holds what, which EgressIP owns
// an address two of them list) and the event handlers; sync_egressip.go
// the sync, the status write, Events and metrics.
//
// The contract with the node agents is status.items alone: the agent of
// the node an item names brings the address up. The agents publish their
// uplink subnets on their Leases (heartbeat.Facts.EgressSubnets).

// ConditionAssigned is the EgressIP condition that says whether every
// address is held by a node and, as its reason, why not (that of the
// first address not held, in spec order).
const ConditionAssigned = "Assigned"

// egressIPs is the EgressIP assignment, a member (member.go): it gives
// each address of an EgressIP a node, in status.items, from its queue of
// EgressIP names; its part of a term is the queue and the eipState.
type egressIPs struct {
	c        *Controller
	informer cache.SharedIndexInformer
	lister   eslisters.EgressIPLister
	// cloudInformer and cloudLister are the CloudPrivateIPConfigs, which
	// the assignment asks the cloud with (egressip_cloud.go).
	cloudInformer cache.SharedIndexInformer
	cloudLister   cloudlisters.CloudPrivateIPConfigLister
	slot          slot[*eipTerm]
	memberHooks
}

// eipTerm is the EgressIP assignment's part of a term.
type eipTerm struct {
	state *eipState
	queue workqueue.TypedRateLimitingInterface[string]
}

func newEgressIPs(c *Controller, inf esinformersv1.EgressIPInformer, cloudInf cloudinformers.CloudPrivateIPConfigInformer, s slot[*eipTerm]) *egressIPs {
	return &egressIPs{c: c, informer: inf.Informer(), lister: inf.Lister(), cloudInformer: cloudInf.Informer(), cloudLister: cloudInf.Lister(), slot: s}
}

func (m *egressIPs) state(t *term) *eipState { return m.slot.of(t).state }
func (m *egressIPs) queue(t *term) workqueue.TypedRateLimitingInterface[string] {
	return m.slot.of(t).queue
}

func (m *egressIPs) watches() []watch {
	w := []watch{{m.informer, cache.ResourceEventHandlerFuncs{AddFunc: m.onEgressIP, UpdateFunc: m.onEgressIPUpdate, DeleteFunc: m.onEgressIP}}}
	if m.onCloud() {
		w = append(w, m.cloudConfigWatch())
	}
	return w
}

func (m *egressIPs) newTerm(limiter func() workqueue.TypedRateLimiter[string]) any {
	return &eipTerm{state: newEIPState(), queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressips", Clock: m.c.opts.Clock})}
}

// prepare adopts the assignments the objects' status records
// (adoptEgressIPs), and reports the egress nodes whose limits cannot be
// read: their annotations changed before this term, with no one to say so.
func (m *egressIPs) prepare(ctx context.Context, t *term) {
	m.adoptEgressIPs(ctx, t)
	nodes, _ := m.c.nodeLister.List(labels.Everything())
	for _, n := range nodes {
		if assign.EgressAssignable(n) {
			m.reportEgressLimits(n)
		}
	}
}

func (m *egressIPs) pools() []workerPool {
	return []workerPool{{m.c.opts.EgressIPWorkers, func(ctx context.Context, t *term) bool {
		return process(ctx, m.c, m.queue(t), queueEgressIP, func(ctx context.Context, name string) error { return m.syncEgressIP(ctx, t, name) })
	}}}
}

func (m *egressIPs) queueLen(t *term) int { return m.queue(t).Len() }
func (m *egressIPs) shutDown(t *term)     { m.queue(t).ShutDown() }

func (m *egressIPs) enqueueAll(t *term) {
	eips, _ := m.lister.List(labels.Everything())
	for _, eip := range eips {
		m.queue(t).Add(eip.Name)
	}
}

// agentsLivenessChanged and agentCandidacyChanged (its subnets or its
// restart mark) sync again the EgressIPs the nodes may concern.
func (m *egressIPs) agentsLivenessChanged(t *term, nodes []string) {
	for _, node := range nodes {
		m.agentChanged(t, node)
	}
}
func (m *egressIPs) agentCandidacyChanged(t *term, node string, _, _ bool) { m.agentChanged(t, node) }

// agentUnreachable is noteUnreachable.
func (m *egressIPs) agentUnreachable(t *term, node string, cause assign.NodeProblem) {
	m.noteUnreachable(t, node, cause)
}

// addHolders adds the nodes that hold an address.
func (m *egressIPs) addHolders(t *term, into map[string]bool) {
	e := m.state(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	addHolding(into, e.byNode)
}

// eipState is what one term knows of the EgressIP assignment beyond the
// caches. Every field is guarded by mu; no method makes an API call.
type eipState struct {
	mu sync.Mutex

	records map[string]*eipRecord
	// load is how many addresses each node holds per family (reserved:
	// decided, written or about to be): the spread's measure, and what a
	// capacity bounds.
	load map[string]assign.EgressLoad
	// byNode indexes EgressIPs by the nodes that hold their addresses.
	byNode map[string]sets.Set[string]
	// waiting are EgressIPs with an address no node holds for a reason
	// the nodes may change: any node change syncs them again.
	waiting sets.Set[string]
	// waitingForRoom are those of waiting that some node's capacity may
	// be keeping out: an address given up anywhere syncs them again.
	waitingForRoom sets.Set[string]
	// claims are, per address, the EgressIPs that list it; the oldest
	// owns it (see owner).
	claims map[netip.Addr]sets.Set[string]
	// held and unheld count addresses over every EgressIP, for the gauge.
	held, unheld int

	// gen counts node changes; view is the node view built at viewGen.
	gen     uint64
	view    *assign.EgressNodes
	viewGen uint64

	// written are status writes the cache has not caught up with yet.
	written map[string]*esv1.EgressIP
	// eventTime is when the oldest unprocessed event of an EgressIP
	// arrived: the start of its assign and unassign latencies.
	eventTime map[string]time.Time
}

type eipRecord struct {
	created metav1.Time
	// addrs are the spec's addresses, canonical, each once.
	addrs []netip.Addr
	// holders are the reserved nodes of its addresses.
	holders map[netip.Addr]string
	// unheld counts its addresses without a node (any reason).
	unheld int
}

func newEIPState() *eipState {
	return &eipState{
		records:        map[string]*eipRecord{},
		load:           map[string]assign.EgressLoad{},
		byNode:         map[string]sets.Set[string]{},
		waiting:        sets.New[string](),
		waitingForRoom: sets.New[string](),
		claims:         map[netip.Addr]sets.Set[string]{},
		written:        map[string]*esv1.EgressIP{},
		eventTime:      map[string]time.Time{},
	}
}

func (s *eipState) loadOf(node string) assign.EgressLoad { return s.load[node] }

// setSpec records the addresses name lists and its creation time. It
// returns the other EgressIPs whose ownership of an address may have
// changed (they list an address name took up or gave up).
func (s *eipState) setSpec(name string, created metav1.Time, addrs []netip.Addr) (affected []string) {
	r := s.records[name]
	if r == nil {
		r = &eipRecord{holders: map[netip.Addr]string{}}
		s.records[name] = r
	}
	r.created = created
	before := sets.New(r.addrs...)
	after := sets.New(addrs...)
	r.addrs = addrs
	others := sets.New[string]()
	for a := range before.Difference(after) {
		moveClaim(s.claims, a, name, false)
		others = others.Union(s.claims[a])
	}
	for a := range after.Difference(before) {
		moveClaim(s.claims, a, name, true)
		others = others.Union(s.claims[a])
	}
	others.Delete(name)
	return sets.List(others)
}

func moveClaim(claims map[netip.Addr]sets.Set[string], a netip.Addr, name string, add bool) {
	if add {
		if claims[a] == nil {
			claims[a] = sets.New[string]()
		}
		claims[a].Insert(name)
		return
	}
	if c := claims[a]; c != nil {
		c.Delete(name)
		if c.Len() == 0 {
			delete(claims, a)
		}
	}
}

// owner is the EgressIP that may hold a: the oldest of those that list
// it, by creationTimestamp, then name.
func (s *eipState) owner(a netip.Addr) string {
	best := ""
	for name := range s.claims[a] {
		if best == "" || olderEIP(s.records[name], name, s.records[best], best) {
			best = name
		}
	}
	return best
}

func olderEIP(a *eipRecord, aName string, b *eipRecord, bName string) bool {
	if c := a.created.Compare(b.created.Time); c != 0 {
		return c < 0
	}
	return strings.Compare(aName, bName) < 0
}

// conflicts are name's addresses that an older EgressIP owns.
func (s *eipState) conflicts(name string) map[netip.Addr]string {
	var out map[netip.Addr]string
	for _, a := range s.records[name].addrs {
		if s.claims[a].Len() < 2 {
			continue
		}
		if o := s.owner(a); o != name {
			if out == nil {
				out = map[netip.Addr]string{}
			}
			out[a] = o
		}
	}
	return out
}

// reserve makes held the nodes of name's addresses, and records how many
// of its addresses are not held and whether it waits for nodes, or for
// room on them. It returns the EgressIPs that wait for room when it gave
// up an address (that room may be theirs), name among them when it still
// does: its decision counted the address it gave up.
func (s *eipState) reserve(name string, held map[netip.Addr]string, unheld int, waiting, waitingForRoom bool) []string {
	r := s.records[name]
	gaveUp := false
	for a, n := range r.holders {
		if held[a] != n {
			s.unhold(name, r, a, n)
			gaveUp = true
		}
	}
	for a, n := range held {
		if r.holders[a] != n {
			r.holders[a] = n
			s.held++
			l := s.load[n]
			l.Add(a, 1)
			s.load[n] = l
			if s.byNode[n] == nil {
				s.byNode[n] = sets.New[string]()
			}
			s.byNode[n].Insert(name)
		}
	}
	s.unheld += unheld - r.unheld
	r.unheld = unheld
	if waiting {
		s.waiting.Insert(name)
	} else {
		s.waiting.Delete(name)
	}
	if waitingForRoom {
		s.waitingForRoom.Insert(name)
	} else {
		s.waitingForRoom.Delete(name)
	}
	if gaveUp {
		return s.waitingForRoom.UnsortedList()
	}
	return nil
}

func (s *eipState) unhold(name string, r *eipRecord, a netip.Addr, n string) {
	delete(r.holders, a)
	s.held--
	l := s.load[n]
	if l.Add(a, -1); l.Total() <= 0 {
		delete(s.load, n)
	} else {
		s.load[n] = l
	}
	for _, other := range r.holders {
		if other == n {
			return // a status another writer made: two addresses on n
		}
	}
	if set := s.byNode[n]; set != nil {
		set.Delete(name)
		if set.Len() == 0 {
			delete(s.byNode, n)
		}
	}
}

// release forgets name (deleted). It returns what it held and the
// EgressIPs whose ownership of an address may have changed.
func (s *eipState) release(name string) (held map[netip.Addr]string, affected []string) {
	r := s.records[name]
	if r == nil {
		return nil, nil
	}
	held = make(map[netip.Addr]string, len(r.holders))
	for a, n := range r.holders {
		held[a] = n
		s.unhold(name, r, a, n)
	}
	affected = s.setSpec(name, r.created, nil)
	s.unheld -= r.unheld
	delete(s.records, name)
	s.waiting.Delete(name)
	s.waitingForRoom.Delete(name)
	if len(held) > 0 {
		affected = append(affected, s.waitingForRoom.UnsortedList()...)
	}
	delete(s.written, name)
	delete(s.eventTime, name)
	return held, affected
}

// nodeChanged notes that node's candidacy may have changed (its label,
// readiness, agent or subnets): the node view is stale, and it returns the
// EgressIPs to sync again: those that hold an address on node, and, when
// the node is or was an egress node (relevant), those waiting for one.
func (s *eipState) nodeChanged(node string, relevant bool, now time.Time) []string {
	s.gen++
	keys := s.byNode[node].Clone()
	if relevant {
		keys = keys.Union(s.waiting)
	}
	for k := range keys {
		s.noteEvent(k, now)
	}
	return keys.UnsortedList()
}

// totals are the addresses held and not held, over every EgressIP.
func (s *eipState) totals() (held, unheld int) { return s.held, s.unheld }

func (s *eipState) freshest(name string, eip *esv1.EgressIP) *esv1.EgressIP {
	return fresherOfWritten(s.written, name, eip)
}

func (s *eipState) noteEvent(name string, t time.Time) {
	if _, ok := s.eventTime[name]; !ok {
		s.eventTime[name] = t
	}
}

func (s *eipState) takeEvent(name string) (time.Time, bool) {
	t, ok := s.eventTime[name]
	delete(s.eventTime, name)
	return t, ok
}

// egressNodes is the node view of the EgressIP decisions: the nodes
// labelled egress-assignable with their readiness, agent liveness and
// subnets, rebuilt when a node change made it stale.
func (m *egressIPs) egressNodes(t *term) assign.EgressNodes {
	c := m.c
	e := m.state(t)
	e.mu.Lock()
	if e.view != nil && e.viewGen == e.gen {
		v := *e.view
		e.mu.Unlock()
		return v
	}
	gen := e.gen
	e.mu.Unlock()

	nodes, _ := c.nodeLister.List(labels.Everything())
	alive := make(map[string]bool, len(nodes))
	unreachable := make(map[string]bool)
	t.agents.mu.Lock()
	for _, n := range nodes {
		alive[n.Name], unreachable[n.Name] = t.agents.alive[n.Name], t.agents.unreachable[n.Name]
	}
	t.agents.mu.Unlock()
	view := assign.EgressNodes{Assignable: map[string]*assign.EgressNode{}, Exists: c.nodeExists, Addresses: map[netip.Addr]string{}}
	for _, n := range nodes {
		for _, a := range endpoints.NodeAddresses(n) {
			view.Addresses[a] = n.Name
		}
		if !assign.EgressAssignable(n) {
			continue
		}
		// An unreadable limit is a capacity of 0 (NodeEgressLimits), its
		// Event emitted when the annotation changed (nodeEvent).
		limits, _ := assign.NodeEgressLimits(n, c.opts.maxEgressIPsPerNode())
		en := &assign.EgressNode{Name: n.Name, Ready: assign.NodeServes(n, alive[n.Name]), AgentAlive: alive[n.Name], AgentUnreachable: unreachable[n.Name],
			AgentRestarting: c.leaseFacts.restarting(n.Name), Capacity: limits.Capacity, Subnets: limits.CloudSubnets}
		if l, err := c.leaseLister.Leases(c.opts.Namespace).Get(n.Name); err == nil && en.Subnets == nil {
			en.Subnets = heartbeat.ReadFacts(l).EgressSubnets
		}
		view.Assignable[n.Name] = en
	}

	e.mu.Lock()
	if e.gen == gen {
		e.view, e.viewGen = &view, gen
	}
	e.mu.Unlock()
	return view
}

func (c *Controller) nodeExists(name string) bool {
	_, err := c.nodeLister.Get(name)
	return err == nil
}

// Event handlers: they record and enqueue; syncEgressIP decides.

func (m *egressIPs) enqueueEgressIP(t *term, name string) {
	e := m.state(t)
	e.mu.Lock()
	e.noteEvent(name, m.c.opts.Clock.Now())
	e.mu.Unlock()
	m.queue(t).Add(name)
}

func (m *egressIPs) onEgressIP(obj any) { m.c.onObject(obj, m.enqueueEgressIP) }

func (m *egressIPs) onEgressIPUpdate(oldObj, newObj any) {
	c := m.c
	t := c.term.Load()
	if t == nil {
		return
	}
	o, n := oldObj.(*esv1.EgressIP), newObj.(*esv1.EgressIP)
	e := m.state(t)
	e.mu.Lock()
	w, ours := e.written[n.Name]
	ours = ours && w.ResourceVersion == n.ResourceVersion
	e.freshest(n.Name, n) // drops our write once the cache has it
	e.mu.Unlock()
	if ours || o.Generation == n.Generation {
		// Our own write coming back (what it says is on record), or
		// metadata only: spec and status bump the generation (no status
		// subresource).
		return
	}
	m.enqueueEgressIP(t, n.Name)
}

// egressNodeChanged syncs again the EgressIPs a change of node may
// concern; relevant says whether the node is or was an egress node.
func (m *egressIPs) egressNodeChanged(t *term, node string, relevant bool) {
	c := m.c
	m.state(t).mu.Lock()
	keys := m.state(t).nodeChanged(node, relevant, c.opts.Clock.Now())
	m.state(t).mu.Unlock()
	for _, k := range keys {
		m.queue(t).Add(k)
	}
}

// nodeEvent feeds a Node add, update or delete (nil for none) to the
// EgressIP assignment: a change of the label, of readiness or of the
// annotations that limit the node's egress addresses matters; a node that
// stops being Ready while it holds addresses counts as unreachable.
func (m *egressIPs) nodeEvent(t *term, old, cur *corev1.Node) {
	var was, is bool
	var wasReady, isReady corev1.ConditionStatus
	name := ""
	if old != nil {
		was, wasReady, name = assign.EgressAssignable(old), assign.ReadyCondition(old), old.Name
	}
	if cur != nil {
		is, isReady, name = assign.EgressAssignable(cur), assign.ReadyCondition(cur), cur.Name
	}
	// The EgressIPs that list an address a node gained or lost: an
	// address that is a node's is never held.
	var oldAddrs, curAddrs []netip.Addr
	if old != nil {
		oldAddrs = endpoints.NodeAddresses(old)
	}
	if cur != nil {
		curAddrs = endpoints.NodeAddresses(cur)
	}
	if !slices.Equal(oldAddrs, curAddrs) {
		m.egressNodeAddressesChanged(t, oldAddrs, curAddrs)
	}
	limitsChanged := cur != nil && (old == nil || !egressLimitsEqual(old, cur))
	if limitsChanged && is {
		m.reportEgressLimits(cur)
	}
	if old != nil && cur != nil && was == is && wasReady == isReady && !limitsChanged {
		return
	}
	// Unknown is the agent's liveness to judge (assign.NodeServes).
	if was && wasReady == corev1.ConditionTrue && cur != nil && isReady != corev1.ConditionTrue && isReady != corev1.ConditionUnknown {
		m.noteUnreachable(t, name, assign.NodeNotReady)
	}
	m.egressNodeChanged(t, name, was || is)
}

// egressLimitsEqual says whether a and b carry the same annotations that
// limit their egress addresses (assign.NodeEgressLimits).
func egressLimitsEqual(a, b *corev1.Node) bool {
	for _, k := range []string{assign.MaxEgressIPsAnnotation, cloudv1.EgressIPConfigAnnotation} {
		va, oka := a.Annotations[k]
		vb, okb := b.Annotations[k]
		if va != vb || oka != okb {
			return false
		}
	}
	return true
}

// reportEgressLimits emits a Warning Event on an egress node whose limits
// cannot be read: it takes no new address until they can.
func (m *egressIPs) reportEgressLimits(n *corev1.Node) {
	if _, err := assign.NodeEgressLimits(n, m.c.opts.maxEgressIPsPerNode()); err != nil {
		m.c.events.Event(n, corev1.EventTypeWarning, string(reasons.InvalidEgressCapacity), err.Error()+"; the node takes no new egress IP until it is fixed, and keeps those it holds")
	}
}

// egressNodeAddressesChanged re-syncs the EgressIPs that list an address a
// node gained or lost, with a fresh node view.
func (m *egressIPs) egressNodeAddressesChanged(t *term, old, cur []netip.Addr) {
	c := m.c
	m.state(t).mu.Lock()
	m.state(t).gen++
	keys := sets.New[string]()
	for _, a := range slices.Concat(old, cur) {
		if slices.Contains(old, a) != slices.Contains(cur, a) {
			keys = keys.Union(m.state(t).claims[a])
		}
	}
	now := c.opts.Clock.Now()
	for k := range keys {
		m.state(t).noteEvent(k, now)
	}
	m.state(t).mu.Unlock()
	for k := range keys {
		m.queue(t).Add(k)
	}
}

// noteUnreachable counts an egress node that holds addresses becoming
// unreachable (cause NodeNotReady, AgentLeaseExpired or AgentUnreachable).
func (m *egressIPs) noteUnreachable(t *term, node string, cause assign.NodeProblem) {
	c := m.c
	m.state(t).mu.Lock()
	holds := m.state(t).load[node].Total() > 0
	m.state(t).mu.Unlock()
	if holds {
		c.metrics.eipNodeUnreachable.WithLabelValues(string(cause)).Inc()
	}
}

// agentChanged feeds a change of node's agent, its liveness (judged in
// judgeLiveness) or what it publishes of its candidacy, to the EgressIP
// assignment.
func (m *egressIPs) agentChanged(t *term, node string) {
	m.egressNodeChanged(t, node, m.c.isEgressNode(node))
}

// isEgressNode says whether node is labelled egress-assignable in the
// cache; a node that is not there counts, as it may just have gone.
func (c *Controller) isEgressNode(node string) bool {
	n, err := c.nodeLister.Get(node)
	return err != nil || assign.EgressAssignable(n)
}

// candidacyFacts remembers, in every replica, what each agent last
// published on its Lease that bears on its node's candidacy: its uplink
// subnets (which egress IPs it may hold) and its restart mark (a node
// whose agent is restarting is chosen last: its silence is not judged
// until the successor renews, so a fault of it meanwhile would fail over
// only when the handover runs out). A renewal that changes neither costs
// nothing.
type candidacyFacts struct {
	mu   sync.Mutex
	last map[string]leaseCandidacy
	// restartingCount is how many of last are restarting.
	restartingCount int
}

type leaseCandidacy struct {
	subnets    string // the raw annotation
	restarting bool
}

// observe records l's candidacy facts (deleted: forgets them). It says
// whether the subnets changed (or were first seen, or went), whether the
// restart mark did (a first sight without it is no change), and how many
// agents are restarting now.
func (f *candidacyFacts) observe(l *coordinationv1.Lease, deleted bool) (subnets, restart bool, restarting int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]leaseCandidacy{}
	}
	prev, known := f.last[l.Name]
	now := leaseCandidacy{subnets: l.Annotations[heartbeat.AnnotationEgressSubnets], restarting: heartbeat.Restarting(l)}
	if deleted {
		delete(f.last, l.Name)
		subnets, now = known, leaseCandidacy{}
	} else {
		f.last[l.Name] = now
		subnets = !known || prev.subnets != now.subnets
	}
	switch {
	case now.restarting && !prev.restarting:
		f.restartingCount++
	case prev.restarting && !now.restarting:
		f.restartingCount--
	}
	return subnets, prev.restarting != now.restarting, f.restartingCount
}

// restarting says whether node's agent last published the restart mark.
func (f *candidacyFacts) restarting(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[node].restarting
}

// leaseCandidacyObserved refreshes the candidacy of an agent's node when
// what its Lease publishes of it changed (or its Lease went): for the
// EgressIPs on a change of either, for the services on a change of the
// restart mark only (a Lease's first sight, at every start, changes no
// service's candidates but through the liveness judgement).
func (c *Controller) leaseCandidacyObserved(l *coordinationv1.Lease, deleted bool) {
	subnets, restart, restarting := c.leaseFacts.observe(l, deleted)
	if !subnets && !restart {
		return
	}
	c.metrics.agentsRestarting.Set(float64(restarting))
	t := c.term.Load()
	if t == nil {
		return
	}
	for _, m := range c.members {
		m.agentCandidacyChanged(t, l.Name, subnets, restart)
	}
}

// sortEIPs orders EgressIPs oldest first (creationTimestamp, then name).
func sortEIPs(a, b *esv1.EgressIP) int {
	return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
}
