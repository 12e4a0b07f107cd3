package cluster

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// EgressQoS status: where each object's current generation is applied.
//
// An EgressQoS is node-local: each agent programs it on its own node, and
// publishes on its heartbeat Lease a watermark (heartbeat.Facts.QoSRevision,
// annotation egressflow.io/qos-revision): the resourceVersion of the newest
// EgressQoS list or event it had taken in when its last successful sync
// began. Every EgressQoS written at that revision or before is applied on
// that node as it then was. The controller remembers, per object, the
// resourceVersion at which it first saw the object's current
// metadata.generation; the generation is applied on node N iff N's agent is
// alive (heartbeat.Judge) and N's watermark has reached that revision.
//
// Status writes bump an object's resourceVersion but not its generation, so
// the controller's own writes never make an object Pending again (no write
// loop). A controller that starts (or a replica that first lists an object)
// takes the resourceVersion it first sees, which may be that of a later
// status write: conservative, since it can only ask agents for more.
//
// # Cost
//
// Agents renew every second; a renewal whose watermark did not change costs
// a map lookup and nothing else. A watermark that moves forward re-evaluates
// only the objects not yet applied on every live agent (the term's pending
// set) whose applied-ness on that node it flips; one that moves back (an
// agent that restarted), or a change of an agent's liveness, checks every
// object's first-seen revision against that node's watermark (integer
// comparisons) and re-evaluates those it flips. A sync reads the live agents
// and their watermarks: O(nodes).

// revision is a resourceVersion read as an etcd revision; ok is false when
// it is not one ("unknown": an object of unknown revision is never reported
// applied, and an agent of unknown watermark has applied nothing).
type revision struct {
	n  uint64
	ok bool
}

// etcdRevision reads a resourceVersion as heartbeat.ParseRevision does.
func etcdRevision(rv string) revision {
	n, ok := heartbeat.ParseRevision(rv)
	return revision{n: n, ok: ok}
}

// reached says whether a watermark r covers a write at revision need: both
// known, and r at or past need.
func (r revision) reached(need revision) bool {
	return r.ok && need.ok && r.n >= need.n
}

// qosSeen is when this replica first saw an EgressQoS's current generation.
type qosSeen struct {
	generation int64
	rv         revision
	at         time.Time
}

// agentWatermark is an agent's published EgressQoS watermark.
type agentWatermark struct {
	raw string
	rv  revision
}

// qosTracker is what every replica, leading or not, observes for EgressQoS
// status: first sightings of generations and the agents' watermarks. A
// replica that takes over thereby knows the revisions its informer saw,
// not just the current ones.
type qosTracker struct {
	mu         sync.Mutex
	seen       map[string]qosSeen
	watermarks map[string]agentWatermark
}

func newQoSTracker() *qosTracker {
	return &qosTracker{seen: map[string]qosSeen{}, watermarks: map[string]agentWatermark{}}
}

// observe records q's generation if it is new, and returns what is recorded.
func (k *qosTracker) observe(q *esv1.EgressQoS, now time.Time) qosSeen {
	key := q.Namespace + "/" + q.Name
	k.mu.Lock()
	defer k.mu.Unlock()
	cur, ok := k.seen[key]
	if ok && cur.generation == q.Generation {
		return cur
	}
	cur = qosSeen{generation: q.Generation, rv: etcdRevision(q.ResourceVersion), at: now}
	k.seen[key] = cur
	return cur
}

func (k *qosTracker) forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.seen, key)
}

// setWatermark records node's watermark; changed is false when it is the
// one already recorded (a plain renewal).
func (k *qosTracker) setWatermark(node, raw string) (old, now revision, changed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	prev, known := k.watermarks[node]
	if known && prev.raw == raw {
		return prev.rv, prev.rv, false
	}
	w := agentWatermark{raw: raw, rv: etcdRevision(raw)}
	k.watermarks[node] = w
	return prev.rv, w.rv, true
}

func (k *qosTracker) forgetWatermark(node string) (old revision) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old = k.watermarks[node].rv
	delete(k.watermarks, node)
	return old
}

// watermarksOf returns the watermarks of nodes (unknown for a node without).
func (k *qosTracker) watermarksOf(nodes []string) map[string]revision {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]revision, len(nodes))
	for _, n := range nodes {
		out[n] = k.watermarks[n].rv
	}
	return out
}

// flipped returns the keys among candidates (every object if nil) whose
// first-seen revision one watermark reaches and the other does not.
func (k *qosTracker) flipped(candidates sets.Set[string], a, b revision) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	check := func(key string) {
		if s, ok := k.seen[key]; ok && a.reached(s.rv) != b.reached(s.rv) {
			out = append(out, key)
		}
	}
	if candidates == nil {
		for key := range k.seen {
			check(key)
		}
	} else {
		for key := range candidates {
			check(key)
		}
	}
	return out
}

// qosKey is the queue key of an EgressQoS that counts (named default), or
// "" for one that does not (the CRD refuses other names; one stored before
// it did is ignored).
func qosKey(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	q, ok := obj.(*esv1.EgressQoS)
	if !ok || q.Name != esv1.EgressQoSName {
		return ""
	}
	return q.Namespace + "/" + q.Name
}

func (c *Controller) onEgressQoS(obj any) {
	key := qosKey(obj)
	if key == "" {
		return
	}
	c.qos.observe(obj.(*esv1.EgressQoS), c.opts.Clock.Now())
	if t := c.term.Load(); t != nil {
		t.qoses.Add(key)
	}
}

func (c *Controller) onEgressQoSUpdate(oldObj, newObj any) {
	key := qosKey(newObj)
	if key == "" {
		return
	}
	o, n := oldObj.(*esv1.EgressQoS), newObj.(*esv1.EgressQoS)
	c.qos.observe(n, c.opts.Clock.Now())
	t := c.term.Load()
	if t == nil {
		return
	}
	if o.Generation == n.Generation {
		if qosStatusEqual(o.Status, n.Status) {
			return // metadata only
		}
		t.qos.mu.Lock()
		echo := t.qos.isOwnWrite(key, n)
		t.qos.mu.Unlock()
		if echo {
			return // this term's own status write coming back
		}
	}
	t.qoses.Add(key)
}

func (c *Controller) onEgressQoSDelete(obj any) {
	key := qosKey(obj)
	if key == "" {
		return
	}
	c.qos.forget(key)
	if t := c.term.Load(); t != nil {
		t.qoses.Add(key)
	}
}

// observeAgentQoS records an agent Lease's EgressQoS watermark and, when it
// moved and the agent counts, re-queues the objects whose applied-ness on
// that node it flips.
func (c *Controller) observeAgentQoS(l *coordinationv1.Lease) {
	old, now, changed := c.qos.setWatermark(l.Name, heartbeat.ReadFacts(l).QoSRevision)
	if !changed {
		return
	}
	t := c.term.Load()
	if t == nil {
		return
	}
	t.state.mu.Lock()
	alive := t.state.alive[l.Name]
	t.state.mu.Unlock()
	if !alive {
		return // a change of liveness re-queues what it flips
	}
	var candidates sets.Set[string]
	if now.reached(old) {
		// Forward: only objects not applied everywhere can flip. A sync
		// inserts its key in pending before it reads the watermarks, so
		// a sync that read the old watermark is found here.
		t.qos.mu.Lock()
		candidates = t.qos.pending.Clone()
		t.qos.mu.Unlock()
	}
	for _, key := range c.qos.flipped(candidates, old, now) {
		t.qoses.Add(key)
	}
}

// forgetAgentQoS drops a deleted Lease's watermark; its liveness change
// re-queues the objects concerned.
func (c *Controller) forgetAgentQoS(node string) {
	c.qos.forgetWatermark(node)
}

// qosAgentLivenessChanged re-queues the objects whose applied-ness on node
// differs from "applied": those that node's agent, coming to life, has not
// applied, or, dying, no longer holds back.
func (c *Controller) qosAgentLivenessChanged(t *term, node string) {
	w := c.qos.watermarksOf([]string{node})[node]
	for _, key := range c.qos.flipped(nil, w, revision{n: ^uint64(0), ok: true}) {
		t.qoses.Add(key)
	}
}

// enqueueAllQoS queues every EgressQoS that counts.
func (c *Controller) enqueueAllQoS(t *term) {
	qs, _ := c.qosLister.List(labels.Everything())
	for _, q := range qs {
		if q.Name == esv1.EgressQoSName {
			t.qoses.Add(q.Namespace + "/" + q.Name)
		}
	}
}
