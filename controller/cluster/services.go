package cluster

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/endpoints"
	esinformersv1 "github.com/egressflow/egressflow/controller/generated/informers/externalversions/egressservice/v1"
	eslisters "github.com/egressflow/egressflow/controller/generated/listers/egressservice/v1"
)

// egressServices is the EgressService hosts, a member (member.go): it
// gives every EgressService a host (status.host, sync_service.go) and
// keeps the nodes' service labels to match (sync_node.go), from a queue of
// services (namespace/name) and one of nodes. It reads the Services and
// EndpointSlices of the services it follows, and the Nodes.
type egressServices struct {
	c        *Controller
	informer cache.SharedIndexInformer
	lister   eslisters.EgressServiceLister
	// serviceInformer and sliceInformer follow the Services and
	// EndpointSlices, whose changes concern the EgressService of the same
	// name.
	serviceInformer, sliceInformer cache.SharedIndexInformer
	slot                           slot[*svcTerm]
	memberHooks
}

// svcTerm is the EgressService hosts' part of a term.
type svcTerm struct {
	state    *state
	services workqueue.TypedRateLimitingInterface[string]
	nodes    workqueue.TypedRateLimitingInterface[string]
	// labelLocks serialize label additions per label key (see syncNode).
	labelLocks stripedLocks
}

func newEgressServices(c *Controller, inf esinformersv1.EgressServiceInformer, services, slices cache.SharedIndexInformer, s slot[*svcTerm]) *egressServices {
	return &egressServices{c: c, informer: inf.Informer(), lister: inf.Lister(), serviceInformer: services, sliceInformer: slices, slot: s}
}

func (m *egressServices) state(t *term) *state { return m.slot.of(t).state }
func (m *egressServices) services(t *term) workqueue.TypedRateLimitingInterface[string] {
	return m.slot.of(t).services
}
func (m *egressServices) nodes(t *term) workqueue.TypedRateLimitingInterface[string] {
	return m.slot.of(t).nodes
}
func (m *egressServices) labelLocks(t *term) *stripedLocks { return &m.slot.of(t).labelLocks }

func (m *egressServices) watches() []watch {
	return []watch{
		{m.informer, cache.ResourceEventHandlerFuncs{AddFunc: m.onEgressService, UpdateFunc: m.onEgressServiceUpdate, DeleteFunc: m.onEgressService}},
		{m.serviceInformer, cache.ResourceEventHandlerFuncs{AddFunc: m.onService, UpdateFunc: m.onServiceUpdate, DeleteFunc: m.onService}},
		{m.sliceInformer, cache.ResourceEventHandlerFuncs{AddFunc: m.onSlice, UpdateFunc: m.onSliceUpdate, DeleteFunc: m.onSlice}},
	}
}

func (m *egressServices) newTerm(limiter func() workqueue.TypedRateLimiter[string]) any {
	clock := m.c.opts.Clock
	return &svcTerm{
		state:    newState(),
		services: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressservices", Clock: clock}),
		nodes:    workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes", Clock: clock}),
	}
}

// prepare records every node's service labels, then repairs what a
// previous run left behind (repair).
func (m *egressServices) prepare(ctx context.Context, t *term) {
	nodes, _ := m.c.nodeLister.List(labels.Everything())
	s := m.state(t)
	s.mu.Lock()
	for _, n := range nodes {
		s.observeNode(n)
	}
	s.mu.Unlock()
	m.repair(ctx, t)
}

func (m *egressServices) pools() []workerPool {
	c := m.c
	return []workerPool{
		{c.opts.ServiceWorkers, func(ctx context.Context, t *term) bool {
			return process(ctx, c, m.services(t), queueService, func(ctx context.Context, key string) error { return m.syncService(ctx, t, key) })
		}},
		{c.opts.NodeWorkers, func(ctx context.Context, t *term) bool {
			return process(ctx, c, m.nodes(t), queueNode, func(ctx context.Context, name string) error { return m.syncNode(ctx, t, name) })
		}},
	}
}

func (m *egressServices) queueLen(t *term) int { return m.services(t).Len() + m.nodes(t).Len() }

func (m *egressServices) shutDown(t *term) {
	m.services(t).ShutDown()
	m.nodes(t).ShutDown()
}

// enqueueAll queues every EgressService, what carries the agents' label
// (in case its EgressService went while no replica led: the sync takes
// the label off), and every node.
func (m *egressServices) enqueueAll(t *term) {
	c := m.c
	ess, _ := m.lister.List(labels.Everything())
	for _, es := range ess {
		m.services(t).Add(es.Namespace + "/" + es.Name)
	}
	svcs, _ := c.serviceLister.List(labels.SelectorFromSet(labels.Set{endpoints.EgressServiceLabel: endpoints.EgressServiceLabelValue}))
	for _, s := range svcs {
		m.services(t).Add(s.Namespace + "/" + s.Name)
	}
	for _, o := range c.slices.List() {
		if s := o.(*discoveryv1.EndpointSlice); marked(s.Labels) {
			keys, _ := sliceServiceKeys(s)
			for _, k := range keys {
				m.services(t).Add(k)
			}
		}
	}
	nodes, _ := c.nodeLister.List(labels.Everything())
	for _, n := range nodes {
		m.nodes(t).Add(n.Name)
	}
}

// nodeEvent: a node's readiness or candidacy labels may change its
// candidacy; its service labels are recorded; a node deleted is
// forgotten, and the holders of the labels it carried may go on.
func (m *egressServices) nodeEvent(t *term, old, cur *corev1.Node) {
	switch {
	case cur == nil:
		s := m.state(t)
		s.mu.Lock()
		removed := s.forgetNode(old.Name)
		s.mu.Unlock()
		m.nodeChanged(t, old.Name)
		m.unblockHolders(t, removed)
		return
	case old == nil, assign.ReadyCondition(old) != assign.ReadyCondition(cur), !maps.Equal(plainLabels(old.Labels), plainLabels(cur.Labels)):
		m.nodeChanged(t, cur.Name)
	}
	m.nodeLabelsObserved(t, cur)
}

// agentsLivenessChanged and agentCandidacyChanged (its restart mark only:
// a Lease's first sight, at every start, changes no service's candidates
// but through the liveness judgement) mark the nodes' candidacy.
func (m *egressServices) agentsLivenessChanged(t *term, nodes []string) { m.nodeChanged(t, nodes...) }
func (m *egressServices) agentCandidacyChanged(t *term, node string, _, restart bool) {
	if restart {
		m.nodeChanged(t, node)
	}
}

// addHolders adds the nodes that host a service or whose status names one.
func (m *egressServices) addHolders(t *term, into map[string]bool) {
	s := m.state(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	addHolding(into, s.byHost)
	addHolding(into, s.byConfirmed)
}

// Event handlers: they record and enqueue; syncService and syncNode
// decide.

func (m *egressServices) enqueueService(t *term, key string) {
	s := m.state(t)
	s.mu.Lock()
	s.noteEvent(key, m.c.opts.Clock.Now())
	s.mu.Unlock()
	m.services(t).Add(key)
}

func (m *egressServices) onEgressService(obj any) { m.c.onObject(obj, m.enqueueService) }

func (m *egressServices) onEgressServiceUpdate(oldObj, newObj any) {
	c := m.c
	t := c.term.Load()
	if t == nil {
		return
	}
	o, n := oldObj.(*esv1.EgressService), newObj.(*esv1.EgressService)
	key := n.Namespace + "/" + n.Name
	s := m.state(t)
	s.mu.Lock()
	s.freshest(key, n) // drops our write once the cache has it
	s.mu.Unlock()
	if o.Generation == n.Generation && statusEqual(o.Status, n.Status) {
		return // metadata only (labels, annotations, managedFields)
	}
	m.enqueueService(t, key)
}

// onService enqueues the EgressService of the same name, if there is one,
// or the Service's key if it carries the agents' label without one (to
// take it off).
func (m *egressServices) onService(obj any) {
	c := m.c
	t := c.term.Load()
	if t == nil {
		return
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	svc, _ := obj.(*corev1.Service)
	m.enqueueForInput(t, key, svc != nil && marked(svc.Labels))
}

// onServiceUpdate is onService, but for a change of the metadata alone
// (such as the controller's own label echoed back), which matters only
// when the Service's label is not what it should be.
func (m *egressServices) onServiceUpdate(oldObj, newObj any) {
	o, n := oldObj.(*corev1.Service), newObj.(*corev1.Service)
	if apiequality.Semantic.DeepEqual(o.Spec, n.Spec) && apiequality.Semantic.DeepEqual(o.Status, n.Status) {
		m.enqueueIfMislabelled(n.Namespace+"/"+n.Name, marked(n.Labels))
		return
	}
	m.onService(n)
}

// enqueueForInput enqueues service key when it has an EgressService or
// when an input of it is marked for the agents.
func (m *egressServices) enqueueForInput(t *term, key string, isMarked bool) {
	ns, name := splitKey(key)
	if _, err := m.lister.EgressServices(ns).Get(name); err == nil || isMarked {
		m.enqueueService(t, key)
	}
}

// enqueueIfMislabelled enqueues service key when whether an input of it
// carries the agents' label (isMarked) is not whether it has an
// EgressService.
func (m *egressServices) enqueueIfMislabelled(key string, isMarked bool) {
	c := m.c
	t := c.term.Load()
	if t == nil {
		return
	}
	ns, name := splitKey(key)
	if _, err := m.lister.EgressServices(ns).Get(name); (err == nil) != isMarked {
		m.enqueueService(t, key)
	}
}

func (m *egressServices) onSlice(obj any) {
	c := m.c
	t := c.term.Load()
	if t == nil {
		return
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	keys, _ := sliceServiceKeys(s)
	for _, key := range keys {
		m.enqueueForInput(t, key, marked(s.Labels))
	}
}

func (m *egressServices) onSliceUpdate(oldObj, newObj any) {
	o, n := oldObj.(*discoveryv1.EndpointSlice), newObj.(*discoveryv1.EndpointSlice)
	if o.AddressType == n.AddressType && apiequality.Semantic.DeepEqual(o.Endpoints, n.Endpoints) && apiequality.Semantic.DeepEqual(o.Ports, n.Ports) &&
		o.Labels[discoveryv1.LabelServiceName] == n.Labels[discoveryv1.LabelServiceName] && endpoints.SliceManager(o) == endpoints.SliceManager(n) {
		// The agents' label, or other metadata, alone.
		if keys, _ := sliceServiceKeys(n); len(keys) > 0 {
			m.enqueueIfMislabelled(keys[0], marked(n.Labels))
		}
		return
	}
	m.onSlice(oldObj) // the service-name label may have changed
	if o.Labels[discoveryv1.LabelServiceName] != n.Labels[discoveryv1.LabelServiceName] {
		m.onSlice(newObj)
	}
}

// nodeLabelsObserved records a node's service labels and queues the node
// when they changed (to revert manual edits), and the holders of labels it
// lost (which may have waited for it).
func (m *egressServices) nodeLabelsObserved(t *term, n *corev1.Node) {
	m.state(t).mu.Lock()
	before := m.state(t).actualLabels(n.Name)
	removed := m.state(t).observeNode(n)
	changed := !before.Equal(m.state(t).actualLabels(n.Name))
	m.state(t).mu.Unlock()
	if changed {
		m.nodes(t).Add(n.Name)
	}
	m.unblockHolders(t, removed)
}

// unblockHolders queues the nodes that should carry the given labels.
func (m *egressServices) unblockHolders(t *term, labelKeys []string) {
	if len(labelKeys) == 0 {
		return
	}
	m.state(t).mu.Lock()
	holders := sets.New[string]()
	for _, k := range labelKeys {
		if h := m.state(t).holder(k); h != "" {
			holders.Insert(h)
		}
	}
	m.state(t).mu.Unlock()
	for h := range holders {
		m.nodes(t).Add(h)
	}
}

// nodeChanged marks the candidacy of nodes as possibly changed: the
// services they host and those waiting for a candidate are synced again.
// A batch of nodes (a judgement) queues the waiting services once.
func (m *egressServices) nodeChanged(t *term, nodes ...string) {
	c := m.c
	m.state(t).mu.Lock()
	m.state(t).staleNodes.Insert(nodes...)
	keys := m.state(t).waiting.Clone()
	for _, node := range nodes {
		for k := range m.state(t).byHost[node] {
			keys.Insert(k)
		}
	}
	now := c.opts.Clock.Now()
	for k := range keys {
		m.state(t).noteEvent(k, now)
	}
	m.state(t).mu.Unlock()
	for k := range keys {
		m.services(t).Add(k)
	}
}

// plainLabels are a node's labels without this project's service labels,
// whose changes do not affect candidacy.
func plainLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if !assign.IsLabelKey(k) {
			out[k] = v
		}
	}
	return out
}
