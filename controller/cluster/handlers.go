package cluster

import (
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// Event handlers only record what changed in the term's state and enqueue
// keys; every decision is made by a sync. Without a term (not leading) they
// do nothing: a new term starts from the caches.

func (c *Controller) enqueueService(t *term, key string) {
	t.state.mu.Lock()
	t.state.noteEvent(key, c.opts.Clock.Now())
	t.state.mu.Unlock()
	t.services.Add(key)
}

func (c *Controller) onEgressService(obj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.enqueueService(t, key)
	}
}

func (c *Controller) onEgressServiceUpdate(oldObj, newObj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	o, n := oldObj.(*esv1.EgressService), newObj.(*esv1.EgressService)
	key := n.Namespace + "/" + n.Name
	t.state.mu.Lock()
	t.state.freshest(key, n) // drops our write once the cache has it
	t.state.mu.Unlock()
	if o.Generation == n.Generation && statusEqual(o.Status, n.Status) {
		return // metadata only (labels, annotations, managedFields)
	}
	c.enqueueService(t, key)
}

// onService enqueues the EgressService of the same name, if there is one,
// or the Service's key if it carries the agents' label without one (to
// take it off).
func (c *Controller) onService(obj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	svc, _ := obj.(*corev1.Service)
	c.enqueueForInput(t, key, svc != nil && marked(svc.Labels))
}

// onServiceUpdate is onService, but for a change of the metadata alone
// (such as the controller's own label echoed back), which matters only
// when the Service's label is not what it should be.
func (c *Controller) onServiceUpdate(oldObj, newObj any) {
	o, n := oldObj.(*corev1.Service), newObj.(*corev1.Service)
	if apiequality.Semantic.DeepEqual(o.Spec, n.Spec) && apiequality.Semantic.DeepEqual(o.Status, n.Status) {
		c.enqueueIfMislabelled(n.Namespace+"/"+n.Name, marked(n.Labels))
		return
	}
	c.onService(n)
}

// enqueueForInput enqueues service key when it has an EgressService or
// when an input of it is marked for the agents.
func (c *Controller) enqueueForInput(t *term, key string, isMarked bool) {
	ns, name := splitKey(key)
	if _, err := c.esLister.EgressServices(ns).Get(name); err == nil || isMarked {
		c.enqueueService(t, key)
	}
}

// enqueueIfMislabelled enqueues service key when whether an input of it
// carries the agents' label (isMarked) is not whether it has an
// EgressService.
func (c *Controller) enqueueIfMislabelled(key string, isMarked bool) {
	t := c.term.Load()
	if t == nil {
		return
	}
	ns, name := splitKey(key)
	if _, err := c.esLister.EgressServices(ns).Get(name); (err == nil) != isMarked {
		c.enqueueService(t, key)
	}
}

func (c *Controller) onSlice(obj any) {
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
		c.enqueueForInput(t, key, marked(s.Labels))
	}
}

func (c *Controller) onSliceUpdate(oldObj, newObj any) {
	o, n := oldObj.(*discoveryv1.EndpointSlice), newObj.(*discoveryv1.EndpointSlice)
	if o.AddressType == n.AddressType && apiequality.Semantic.DeepEqual(o.Endpoints, n.Endpoints) && apiequality.Semantic.DeepEqual(o.Ports, n.Ports) &&
		o.Labels[discoveryv1.LabelServiceName] == n.Labels[discoveryv1.LabelServiceName] && endpoints.SliceManager(o) == endpoints.SliceManager(n) {
		// The agents' label, or other metadata, alone.
		if keys, _ := sliceServiceKeys(n); len(keys) > 0 {
			c.enqueueIfMislabelled(keys[0], marked(n.Labels))
		}
		return
	}
	c.onSlice(oldObj) // the service-name label may have changed
	if o.Labels[discoveryv1.LabelServiceName] != n.Labels[discoveryv1.LabelServiceName] {
		c.onSlice(newObj)
	}
}

func (c *Controller) onNodeAdd(obj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	n := obj.(*corev1.Node)
	c.nodeChanged(t, n.Name)
	c.nodeLabelsObserved(t, n)
	c.nodeCIDRsChanged(t, nil, n)
	c.egressNodeEvent(t, nil, n)
}

func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	o, n := oldObj.(*corev1.Node), newObj.(*corev1.Node)
	if assign.ReadyCondition(o) != assign.ReadyCondition(n) || !maps.Equal(plainLabels(o.Labels), plainLabels(n.Labels)) {
		c.nodeChanged(t, n.Name)
	}
	c.nodeLabelsObserved(t, n)
	c.nodeCIDRsChanged(t, o, n)
	c.egressNodeEvent(t, o, n)
}

func (c *Controller) onNodeDelete(obj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	t.state.mu.Lock()
	removed := t.state.forgetNode(n.Name)
	t.state.mu.Unlock()
	c.nodeChanged(t, n.Name)
	c.unblockHolders(t, removed)
	c.nodeCIDRsChanged(t, n, nil)
	c.egressNodeEvent(t, n, nil)
}

// nodeLabelsObserved records a node's service labels and queues the node
// when they changed (to revert manual edits), and the holders of labels it
// lost (which may have waited for it).
func (c *Controller) nodeLabelsObserved(t *term, n *corev1.Node) {
	t.state.mu.Lock()
	before := t.state.actualLabels(n.Name)
	removed := t.state.observeNode(n)
	changed := !before.Equal(t.state.actualLabels(n.Name))
	t.state.mu.Unlock()
	if changed {
		t.nodes.Add(n.Name)
	}
	c.unblockHolders(t, removed)
}

// unblockHolders queues the nodes that should carry the given labels.
func (c *Controller) unblockHolders(t *term, labelKeys []string) {
	if len(labelKeys) == 0 {
		return
	}
	t.state.mu.Lock()
	holders := sets.New[string]()
	for _, k := range labelKeys {
		if h := t.state.holder(k); h != "" {
			holders.Insert(h)
		}
	}
	t.state.mu.Unlock()
	for h := range holders {
		t.nodes.Add(h)
	}
}

// nodeChanged marks the candidacy of nodes as possibly changed: the
// services they host and those waiting for a candidate are synced again.
// A batch of nodes (a judgement) queues the waiting services once.
func (c *Controller) nodeChanged(t *term, nodes ...string) {
	t.state.mu.Lock()
	t.state.staleNodes.Insert(nodes...)
	keys := t.state.waiting.Clone()
	for _, node := range nodes {
		for k := range t.state.byHost[node] {
			keys.Insert(k)
		}
	}
	now := c.opts.Clock.Now()
	for k := range keys {
		t.state.noteEvent(k, now)
	}
	t.state.mu.Unlock()
	for k := range keys {
		t.services.Add(k)
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

// onLease feeds the judge and the rollouts' watermarks, in every replica;
// the leader judges again only when the observation may change a verdict at
// once (heartbeat.Judge.Observe), and re-evaluates EgressQoSes and
// EgressFirewalls only when a watermark moved (observeAgent), so that a
// renewal costs O(1), not a pass over every agent or object.
func (c *Controller) onLease(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	// The watermarks first: an agent coming to life is then judged with
	// them.
	facts, t := heartbeat.ReadFacts(l), c.term.Load()
	for _, r := range c.rollouts {
		r.observeAgent(t, l.Name, facts)
	}
	c.leaseCandidacyObserved(l, false)
	c.probes.observe(l, false)
	c.judgeMu.Lock()
	changed := c.judge.Observe(c.opts.Clock.Now(), l)
	c.judgeMu.Unlock()
	if t := c.term.Load(); t != nil && changed {
		c.judgeLiveness(t)
	}
}

func (c *Controller) onLeaseDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		c.judgeMu.Lock()
		c.judge.Forget(l.Name)
		c.judgeMu.Unlock()
		for _, r := range c.rollouts {
			r.forgetAgent(l.Name)
		}
		c.leaseCandidacyObserved(l, true)
		c.probes.observe(l, true)
	}
	if t := c.term.Load(); t != nil {
		c.judgeLiveness(t)
	}
}

// judgeLiveness judges every agent now (heartbeat.Judge), marks the nodes
// whose liveness changed, and schedules the next judgement when a Lease
// runs out or a held death is due.
func (c *Controller) judgeLiveness(t *term) {
	now := c.opts.Clock.Now()
	c.judgeMu.Lock()
	v := c.judge.Judge(now)
	alive, unreachable := c.judge.AliveAgents(), c.judge.UnreachableAgents()
	c.judgeMu.Unlock()
	c.noteJudgement(klog.Background(), v)
	if !v.Next.IsZero() {
		t.liveness.AddAfter(livenessKey, v.Next.Sub(now))
	}

	t.state.mu.Lock()
	// died are the nodes whose agent was alive and is not; changed those
	// whose liveness or its cause changed.
	changed := sets.New[string]()
	var died []string
	for node := range t.state.alive {
		if !alive[node] {
			changed.Insert(node)
			died = append(died, node)
			delete(t.state.alive, node)
		}
	}
	for node := range alive {
		if !t.state.alive[node] {
			changed.Insert(node)
			t.state.alive[node] = true
		}
	}
	for node := range t.state.unreachable {
		if !unreachable[node] {
			changed.Insert(node)
		}
	}
	for node := range unreachable {
		if !t.state.unreachable[node] {
			changed.Insert(node)
		}
	}
	t.state.unreachable = unreachable
	t.state.mu.Unlock()
	for _, node := range died {
		cause := assign.NodeAgentLeaseExpired
		if unreachable[node] {
			cause = assign.NodeAgentUnreachable
		}
		c.noteUnreachable(t, node, cause)
	}
	if changed.Len() > 0 {
		c.nodeChanged(t, changed.UnsortedList()...)
	}
	for node := range changed {
		c.egressLivenessChanged(t, node)
		for _, r := range c.rollouts {
			r.agentLivenessChanged(t, node)
		}
	}
}

// noteJudgement logs the transitions into and out of blindness and
// disruption, and sets their gauges. Called for every judgement.
func (c *Controller) noteJudgement(logger klog.Logger, v heartbeat.Verdict) {
	c.judgeMu.Lock()
	wasBlind, wasHeld := c.lastVerdict.Blind, c.lastVerdict.Held
	c.lastVerdict = v
	c.judgeMu.Unlock()
	if v.Blind != wasBlind {
		if v.Blind {
			logger.Info("No agent Lease renewal observed lately: the API server or this replica's watch is away; no agent is judged dead until renewals are seen again")
		} else {
			logger.Info("Agent Lease renewals observed again; every agent has a full Lease duration from now to renew")
		}
	}
	if v.Held != wasHeld {
		logger.Info("Disruption: agents whose Lease ran out together are failed over one at a time", "held", v.Held, "interval", heartbeat.DefaultDisruptedFailoverInterval)
	}
	if len(v.Died) > 0 {
		logger.Info("Agents judged dead", "nodes", v.Died)
	}
	c.metrics.agentsBlind.Set(boolGauge(v.Blind))
	c.metrics.deathsHeld.Set(float64(v.Held))
}

// livenessKey is the one item of a term's liveness queue: judge every
// agent again.
const livenessKey = "agents"
