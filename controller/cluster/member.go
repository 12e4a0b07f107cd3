package cluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// member is one API's cluster-side work under the one leader: the
// EgressService hosts and their node labels (services.go), the EgressIP
// assignment (egressip.go), and the rollout status of each node-local API
// (rollout.go: EgressQoS, EgressFirewall). Each keeps its queues and state
// in each term (its part, found through its slot) and its own metrics; the
// shared parts call it through these hooks: leadership (lead), the agents'
// Leases and liveness (the term's agents), the Node handlers, the probes.
// Events and status writes are the Controller's, which every member uses.
//
// The next API's cluster-side work is a type that implements member
// (embedding memberHooks for the hooks it does not need) and one
// registration line in New.
type member interface {
	// watches are the informers the member follows and its handler of
	// each, registered in every replica; a handler feeds the current term,
	// if any (Controller.term).
	watches() []watch
	// newTerm makes the member's part of a new term: its queues (each
	// with a limiter of its own) and state.
	newTerm(limiter func() workqueue.TypedRateLimiter[string]) any
	// prepare brings the member's part up from the caches when a term
	// starts, before any worker runs.
	prepare(ctx context.Context, t *term)
	// pools are the member's workers: how many run each process, which
	// syncs one item of a queue (false once the queue is shut down).
	pools() []workerPool
	// queueLen is how many items its queues hold.
	queueLen(t *term) int
	// enqueueAll queues every object (a resync).
	enqueueAll(t *term)
	// shutDown stops t's queue (its workers return); clearStates zeroes the
	// member's gauges as a term ends.
	shutDown(t *term)
	clearStates()

	// observeAgent takes what an agent's Lease says (every replica; t is
	// nil while not leading); forgetAgent, that the Lease is gone.
	observeAgent(t *term, node string, facts heartbeat.Facts)
	forgetAgent(node string)
	// agentsLivenessChanged: the judgement of the nodes' agents changed
	// (one judgement's batch); agentUnreachable: node's agent was judged
	// dead or unreachable, for cause.
	agentsLivenessChanged(t *term, nodes []string)
	agentUnreachable(t *term, node string, cause assign.NodeProblem)
	// agentCandidacyChanged: what node's agent publishes of its node's
	// candidacy changed: its uplink subnets, its restart mark, or both.
	agentCandidacyChanged(t *term, node string, subnets, restart bool)
	// nodeEvent takes a Node added, updated or deleted (nil for none).
	nodeEvent(t *term, old, cur *corev1.Node)
	// addHolders adds to into the nodes that hold the member's work, which
	// are probed at the holders' rate.
	addHolders(t *term, into map[string]bool)
}

// watch is an informer and a member's handler of it.
type watch struct {
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandler
}

// workerPool is how many workers run process.
type workerPool struct {
	workers int
	process func(ctx context.Context, t *term) bool
}

// memberHooks are the hooks a member needs not implement, doing nothing.
type memberHooks struct{}

func (memberHooks) prepare(context.Context, *term)                     {}
func (memberHooks) clearStates()                                       {}
func (memberHooks) observeAgent(*term, string, heartbeat.Facts)        {}
func (memberHooks) forgetAgent(string)                                 {}
func (memberHooks) agentsLivenessChanged(*term, []string)              {}
func (memberHooks) agentUnreachable(*term, string, assign.NodeProblem) {}
func (memberHooks) agentCandidacyChanged(*term, string, bool, bool)    {}
func (memberHooks) nodeEvent(*term, *corev1.Node, *corev1.Node)        {}
func (memberHooks) addHolders(*term, map[string]bool)                  {}

// onObject is an add or delete handler's work: obj's key enqueued in the
// current term, if any.
func (c *Controller) onObject(obj any, enqueue func(t *term, key string)) {
	t := c.term.Load()
	if t == nil {
		return
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		enqueue(t, key)
	}
}

// addHolding adds to into the nodes that hold at least one item of byNode.
func addHolding(into map[string]bool, byNode map[string]sets.Set[string]) {
	for node, items := range byNode {
		if items.Len() > 0 {
			into[node] = true
		}
	}
}

// slot is where a term holds one member's part, of type P.
type slot[P any] int

// of is the member's part of t.
func (s slot[P]) of(t *term) P { return t.parts[s].(P) }

// register adds the member build makes for the next slot.
func register[P any](c *Controller, build func(slot[P]) member) {
	c.members = append(c.members, build(slot[P](len(c.members))))
}
