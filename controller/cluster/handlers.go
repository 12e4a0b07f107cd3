package cluster

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// Event handlers only record what changed in the term's state and enqueue
// keys; every decision is made by a sync. Without a term (not leading) they
// do nothing: a new term starts from the caches.

func (c *Controller) onNodeAdd(obj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	c.membersNodeEvent(t, nil, obj.(*corev1.Node))
}

func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	t := c.term.Load()
	if t == nil {
		return
	}
	c.membersNodeEvent(t, oldObj.(*corev1.Node), newObj.(*corev1.Node))
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
	c.membersNodeEvent(t, n, nil)
}

// membersNodeEvent gives the members a Node added, updated or deleted.
func (c *Controller) membersNodeEvent(t *term, old, cur *corev1.Node) {
	for _, m := range c.members {
		m.nodeEvent(t, old, cur)
	}
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
	for _, m := range c.members {
		m.observeAgent(t, l.Name, facts)
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
		for _, m := range c.members {
			m.forgetAgent(l.Name)
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

	a := &t.agents
	a.mu.Lock()
	// died are the nodes whose agent was alive and is not; changed those
	// whose liveness or its cause changed.
	changed := sets.New[string]()
	var died []string
	for node := range a.alive {
		if !alive[node] {
			changed.Insert(node)
			died = append(died, node)
			delete(a.alive, node)
		}
	}
	for node := range alive {
		if !a.alive[node] {
			changed.Insert(node)
			a.alive[node] = true
		}
	}
	for node := range a.unreachable {
		if !unreachable[node] {
			changed.Insert(node)
		}
	}
	for node := range unreachable {
		if !a.unreachable[node] {
			changed.Insert(node)
		}
	}
	a.unreachable = unreachable
	a.mu.Unlock()
	for _, node := range died {
		cause := assign.NodeAgentLeaseExpired
		if unreachable[node] {
			cause = assign.NodeAgentUnreachable
		}
		for _, m := range c.members {
			m.agentUnreachable(t, node, cause)
		}
	}
	if changed.Len() > 0 {
		nodes := changed.UnsortedList()
		for _, m := range c.members {
			m.agentsLivenessChanged(t, nodes)
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
