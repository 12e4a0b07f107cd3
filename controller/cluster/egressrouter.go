package cluster

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressflow/egressflow/controller/assign"
	noinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions/networkoperator/v1"
	nolisters "github.com/egressflow/egressflow/controller/generated/listers/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// EgressRouter's cluster-side work (docs/egressrouter.md), a member: for
// each router it chooses the node that serves it (its holder), writes its
// status, and keeps the Service of its name and that Service's
// EndpointSlices (egressrouter_service.go).
//
// A holder is a node that is Ready, whose agent is live and not judged
// unreachable, whose agent publishes a subnet holding each reserved
// address, and, when macvlan.master names an interface, whose uplink is
// that interface. A holder that stays eligible keeps the router; a new one
// is the eligible node holding the fewest routers, ties broken by a hash
// of the router and the node, so that routers spread and a router's choice
// does not depend on the order of events. The holder's agent is probed at
// the holders' rate, so a dead holder is replaced within the failover
// bound of every holder.
//
// A router is Available once its holder's agent has applied (its EgressRouter
// watermark, heartbeat.Facts.RouterRevision) the revision that made it the
// holder; Progressing while it has not; Degraded, with the reason, while
// no node can serve it or its spec cannot be served.

// routers is EgressRouter's member.
type routers struct {
	c        *Controller
	informer cache.SharedIndexInformer
	lister   nolisters.EgressRouterLister
	slot     slot[*routerTerm]
	memberHooks
}

// routerTerm is the member's part of a term.
type routerTerm struct {
	queue workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	// holders are the routers' holders as last written, by key; byNode the
	// same by node.
	holders map[string]string
	byNode  map[string]sets.Set[string]
	// since is the resourceVersion of the write that made a router's holder
	// its holder: Available once that node's watermark reaches it. 0 for a
	// holder found Available when the term began.
	since map[string]uint64
	// applied are the agents' watermarks, uplinks their uplinks, by node.
	applied map[string]uint64
	uplinks map[string]string
	// states are the routers' states as last written (routerState).
	states map[string]string
	// conflicted are the routers whose Service name another Service holds,
	// reported once (ServiceConflict) until that changes.
	conflicted sets.Set[string]
}

func newRouters(c *Controller, inf noinformers.EgressRouterInformer, s slot[*routerTerm]) *routers {
	return &routers{c: c, informer: inf.Informer(), lister: inf.Lister(), slot: s}
}

func (m *routers) term(t *term) *routerTerm { return m.slot.of(t) }

// routerKey is the queue's key of a router.
func routerKey(r *nov1.EgressRouter) string { return r.Namespace + "/" + r.Name }

// watches syncs a router on every event of its own (its status writes
// included: a sync that finds nothing to change writes nothing), the
// router that owns a Service or EndpointSlice that changed (someone edited
// or deleted it), and the router a Service is named after (one that is not
// the router's was deleted: the router's own can take its place).
func (m *routers) watches() []watch {
	enqueue := func(obj any) { m.c.onObject(obj, func(t *term, key string) { m.term(t).queue.Add(key) }) }
	add := func(namespace, name string) {
		if t := m.c.term.Load(); t != nil {
			m.term(t).queue.Add(namespace + "/" + name)
		}
	}
	object := func(obj any) (metav1.Object, bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		o, ok := obj.(metav1.Object)
		return o, ok
	}
	owned := func(obj any) {
		if o, ok := object(obj); ok && o.GetLabels()[routerLabel] != "" {
			add(o.GetNamespace(), o.GetLabels()[routerLabel])
		}
	}
	service := func(obj any) {
		owned(obj)
		if o, ok := object(obj); ok && o.GetLabels()[routerLabel] == "" {
			if _, err := m.lister.EgressRouters(o.GetNamespace()).Get(o.GetName()); err == nil {
				add(o.GetNamespace(), o.GetName())
			}
		}
	}
	ownedHandler := cache.ResourceEventHandlerFuncs{AddFunc: owned, UpdateFunc: func(_, cur any) { owned(cur) }, DeleteFunc: owned}
	return []watch{
		{m.informer, cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue}},
		{m.c.kubeInformers.Core().V1().Services().Informer(), cache.ResourceEventHandlerFuncs{AddFunc: service, UpdateFunc: func(_, cur any) { service(cur) }, DeleteFunc: service}},
		{m.c.kubeInformers.Discovery().V1().EndpointSlices().Informer(), ownedHandler},
	}
}

func (m *routers) newTerm(limiter func() workqueue.TypedRateLimiter[string]) any {
	return &routerTerm{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressrouters", Clock: m.c.opts.Clock}),
		holders: map[string]string{}, byNode: map[string]sets.Set[string]{}, since: map[string]uint64{},
		applied: map[string]uint64{}, uplinks: map[string]string{}, states: map[string]string{}, conflicted: sets.New[string](),
	}
}

// prepare takes the holders the routers' status names: one found
// Available stays so (its holder serves it) unless it moves.
func (m *routers) prepare(_ context.Context, t *term) {
	rt := m.term(t)
	list, _ := m.lister.List(labels.Everything())
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, r := range list {
		if r.Status.Holder == "" {
			continue
		}
		key := routerKey(r)
		rt.setHolder(key, r.Status.Holder)
		rt.since[key] = 0
		if condition(r.Status.Conditions, nov1.EgressRouterAvailable).Status != nov1.ConditionTrue {
			rt.since[key] = resourceVersion(r.ResourceVersion)
		}
	}
}

func (m *routers) pools() []workerPool {
	return []workerPool{{m.c.opts.EgressRouterWorkers, func(ctx context.Context, t *term) bool {
		return process(ctx, m.c, m.term(t).queue, queueEgressRouter, func(ctx context.Context, key string) error { return m.sync(ctx, t, key) })
	}}}
}

func (m *routers) queueLen(t *term) int { return m.term(t).queue.Len() }

// clearStates zeroes the state gauge as a term ends.
func (m *routers) clearStates() { setRouterStates(m.c.metrics.routerStates, nil) }

// The states of egressflow_controller_egressrouters.
var routerStates = []string{"available", "pending", "degraded"}

// routerState is a router's state for its decision: degraded without a
// holder, available once it serves, pending meanwhile.
func routerState(holder string, available bool) string {
	switch {
	case holder == "":
		return "degraded"
	case available:
		return "available"
	}
	return "pending"
}

// stateCounts counts the routers by state. Callers hold mu.
func (rt *routerTerm) stateCounts() map[string]int {
	counts := map[string]int{}
	for _, st := range rt.states {
		counts[st]++
	}
	return counts
}

// setRouterStates sets the gauge to counts (nil: every state 0).
func setRouterStates(g *prometheus.GaugeVec, counts map[string]int) {
	for _, st := range routerStates {
		g.WithLabelValues(st).Set(float64(counts[st]))
	}
}
func (m *routers) shutDown(t *term) { m.term(t).queue.ShutDown() }

func (m *routers) enqueueAll(t *term) {
	list, _ := m.lister.List(labels.Everything())
	for _, r := range list {
		m.term(t).queue.Add(routerKey(r))
	}
}

// observeAgent records the agent's watermark and uplink, and syncs the
// routers it holds whose Available waits for the watermark, or every
// router when its uplink changed (a master may now match it).
func (m *routers) observeAgent(t *term, node string, facts heartbeat.Facts) {
	if t == nil {
		return
	}
	rt := m.term(t)
	rt.mu.Lock()
	applied := resourceVersion(facts.RouterRevision)
	before := rt.applied[node]
	rt.applied[node] = applied
	uplinkChanged := rt.uplinks[node] != facts.Uplink
	rt.uplinks[node] = facts.Uplink
	var waiting []string
	for key := range rt.byNode[node] {
		if since := rt.since[key]; since > before && since <= applied {
			waiting = append(waiting, key)
		}
	}
	rt.mu.Unlock()
	if uplinkChanged {
		m.enqueueAll(t)
		return
	}
	for _, key := range waiting {
		rt.queue.Add(key)
	}
}

// agentsLivenessChanged, agentCandidacyChanged and nodeEvent sync the
// routers the nodes hold and those without a holder: either may move.
func (m *routers) agentsLivenessChanged(t *term, nodes []string) { m.nodesChanged(t, nodes...) }
func (m *routers) agentCandidacyChanged(t *term, node string, _, _ bool) {
	m.nodesChanged(t, node)
}
func (m *routers) agentUnreachable(t *term, node string, _ assign.NodeProblem) {
	m.nodesChanged(t, node)
}
func (m *routers) nodeEvent(t *term, old, cur *corev1.Node) {
	if old != nil && cur != nil && assign.ReadyCondition(old) == assign.ReadyCondition(cur) {
		return
	}
	if cur != nil {
		m.nodesChanged(t, cur.Name)
	} else {
		m.nodesChanged(t, old.Name)
	}
}

// nodesChanged syncs the routers the nodes hold and every router without
// a holder (listed once for the batch).
func (m *routers) nodesChanged(t *term, nodes ...string) {
	rt := m.term(t)
	var keys []string
	rt.mu.Lock()
	for _, node := range nodes {
		keys = append(keys, rt.byNode[node].UnsortedList()...)
	}
	rt.mu.Unlock()
	for _, key := range keys {
		rt.queue.Add(key)
	}
	list, _ := m.lister.List(labels.Everything())
	for _, r := range list {
		if r.Status.Holder == "" {
			rt.queue.Add(routerKey(r))
		}
	}
}

// addHolders adds the routers' holders: probed at the holders' rate.
func (m *routers) addHolders(t *term, into map[string]bool) {
	rt := m.term(t)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	addHolding(into, rt.byNode)
}

// setHolder records node (none: "") as key's holder. Callers hold mu.
func (rt *routerTerm) setHolder(key, node string) {
	if old, ok := rt.holders[key]; ok {
		rt.byNode[old].Delete(key)
		delete(rt.holders, key)
	}
	if node == "" {
		delete(rt.since, key)
		return
	}
	rt.holders[key] = node
	if rt.byNode[node] == nil {
		rt.byNode[node] = sets.New[string]()
	}
	rt.byNode[node].Insert(key)
}

// resourceVersion reads a resourceVersion as heartbeat.ParseRevision
// does; 0 when it is not an etcd revision.
func resourceVersion(rv string) uint64 {
	n, _ := heartbeat.ParseRevision(rv)
	return n
}

// routerCandidate is a node as the holder choice reads it.
type routerCandidate struct {
	name    string
	subnets []netip.Prefix
	uplink  string
	serves  bool // Ready, live agent, not judged unreachable
}

// candidates are the nodes with what the choice reads of each.
func (m *routers) candidates(t *term) []routerCandidate {
	nodes, _ := m.c.nodeLister.List(labels.Everything())
	rt := m.term(t)
	out := make([]routerCandidate, 0, len(nodes))
	for _, n := range nodes {
		alive, unreachable := t.agents.of(n.Name)
		c := routerCandidate{name: n.Name, serves: assign.NodeServes(n, alive) && alive && !unreachable}
		if l, err := m.c.leaseLister.Leases(m.c.opts.Namespace).Get(n.Name); err == nil {
			c.subnets = heartbeat.ParseEgressSubnets(l.Annotations[heartbeat.AnnotationEgressSubnets])
		}
		out = append(out, c)
	}
	rt.mu.Lock()
	for i := range out {
		out[i].uplink = rt.uplinks[out[i].name]
	}
	rt.mu.Unlock()
	return out
}

// holds says whether c has a subnet holding each of addrs.
func (c routerCandidate) holds(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if !slices.ContainsFunc(c.subnets, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return false
		}
	}
	return true
}

// chooseHolder returns the router's holder: current while it stays
// eligible, else the eligible node holding the fewest routers (ties: the
// lowest hash of key and node); "" and the reason and message when none is.
func chooseHolder(key, current string, addrs []netip.Addr, master string, nodes []routerCandidate, load func(string) int) (string, reasons.Reason, string) {
	var inSubnet, withUplink, eligible []string
	for _, n := range nodes {
		if master != "" && n.uplink != master {
			continue
		}
		withUplink = append(withUplink, n.name)
		if !n.holds(addrs) {
			continue
		}
		inSubnet = append(inSubnet, n.name)
		if n.serves {
			eligible = append(eligible, n.name)
		}
	}
	switch {
	case master != "" && len(withUplink) == 0:
		return "", reasons.NoSuchInterface, fmt.Sprintf("no node's agent publishes %s as its uplink (spec.networkInterface.macvlan.master)", master)
	case len(inSubnet) == 0:
		return "", reasons.NoNodeInSubnet, fmt.Sprintf("no node's agent publishes a subnet holding %s", joinAddrs(addrs))
	case len(eligible) == 0:
		return "", reasons.NodesUnavailable, fmt.Sprintf("no node in the subnet of %s is Ready with a live agent (%s)", joinAddrs(addrs), strings.Join(inSubnet, ", "))
	}
	if slices.Contains(eligible, current) {
		return current, reasons.Assigned, ""
	}
	best := slices.MinFunc(eligible, func(a, b string) int {
		if la, lb := load(a), load(b); la != lb {
			return la - lb
		}
		ha, hb := routerNodeHash(key, a), routerNodeHash(key, b)
		switch {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return best, reasons.Assigned, ""
}

// routerNodeHash ranks node for the router key among equally loaded ones.
func routerNodeHash(key, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(node))
	return h.Sum64()
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, " and ")
}

// sync decides key's holder and status, and keeps its Service.
func (m *routers) sync(ctx context.Context, t *term, key string) error {
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	router, err := m.lister.EgressRouters(namespace).Get(name)
	rt := m.term(t)
	if apierrors.IsNotFound(err) {
		rt.mu.Lock()
		rt.setHolder(key, "")
		delete(rt.states, key)
		rt.conflicted.Delete(key)
		counts := rt.stateCounts()
		rt.mu.Unlock()
		setRouterStates(m.c.metrics.routerStates, counts)
		return nil // its Service and EndpointSlices are collected with it
	}
	if err != nil {
		return err
	}
	redirect, problems := router.Spec.Read()
	var addrs []netip.Addr
	for _, a := range redirect.Addresses {
		addrs = append(addrs, a.Prefix.Addr())
	}
	d := routerDecision{}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Message
		}
		d.reason, d.message = problems[0].Reason, strings.Join(msgs, "; ")
		rt.mu.Lock()
		rt.setHolder(key, "")
		rt.mu.Unlock()
	} else {
		nodes := m.candidates(t)
		// Chosen and recorded at once: routers synced together see each
		// other's choices, and spread.
		rt.mu.Lock()
		load := func(node string) int { return rt.byNode[node].Len() }
		d.holder, d.reason, d.message = chooseHolder(key, rt.holders[key], addrs, redirect.Master, nodes, load)
		rt.setHolder(key, d.holder)
		rt.mu.Unlock()
	}
	written, err := m.writeStatus(ctx, t, router, d)
	if err != nil {
		return err
	}
	conflict, err := m.keepService(ctx, written, redirect, written.Status.Holder != "")
	if err != nil {
		return err
	}
	rt.mu.Lock()
	reported := rt.conflicted.Has(key)
	if conflict {
		rt.conflicted.Insert(key)
	} else {
		rt.conflicted.Delete(key)
	}
	rt.mu.Unlock()
	if conflict && !reported {
		m.c.events.Event(router, corev1.EventTypeWarning, string(reasons.ServiceConflict),
			fmt.Sprintf("Service %s/%s exists and is not this router's: clients must use the reserved addresses themselves", router.Namespace, router.Name))
	}
	return nil
}

// routerDecision is what sync decided of a router: its holder ("": none)
// and, without one, why.
type routerDecision struct {
	holder  string
	reason  reasons.Reason
	message string
}
