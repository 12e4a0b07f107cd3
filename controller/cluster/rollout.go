package cluster

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// Rollouts: where the current generation of each object of a node-local
// API (EgressQoS, EgressFirewall) is applied. This file holds what the
// APIs share: revisions, the trackers and the handlers; rollout_status.go
// the verdict and the status writes; qos*.go and firewall*.go what differs.
//
// An object of a node-local API is applied by each agent on its own node.
// Each agent publishes, per API, a watermark on its heartbeat Lease
// (heartbeat.Facts.QoSRevision, annotation egressflow.io/qos-revision;
// FirewallRevision, egressflow.io/firewall-revision): the resourceVersion
// of the newest list or event of that API it had taken in when its last
// successful sync began. Every object written at that revision or before
// is applied on that node as it then was. The controller remembers, per
// object, the resourceVersion at which it first saw the object's current
// metadata.generation; the generation is applied on node N iff N's agent
// is alive (heartbeat.Judge) and N's watermark of that API has reached
// that revision.
//
// Status writes bump an object's resourceVersion but not its generation, so
// the controller's own writes never make an object Pending again (no write
// loop). A controller that starts (or a replica that first lists an object)
// takes the resourceVersion it first sees, which may be that of a later
// status write: conservative, since it can only ask agents for more.
//
// # Cost
//
// Agents renew every second; a renewal whose watermarks did not change
// costs a map lookup per API and nothing else. A watermark that moves
// forward re-evaluates only the objects not yet applied on every live agent
// (the term's pending set) whose applied-ness on that node it flips; one
// that moves back (an agent that restarted), or a change of an agent's
// liveness, checks every object's first-seen revision against that node's
// watermark (integer comparisons) and re-evaluates those it flips. A sync
// reads the live agents and their watermarks: O(nodes).

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

// seenGeneration is when this replica first saw an object's current
// generation.
type seenGeneration struct {
	generation int64
	rv         revision
	at         time.Time
}

// agentWatermark is an agent's published watermark of one API.
type agentWatermark struct {
	raw string
	rv  revision
}

// revisionTracker is what every replica, leading or not, observes of one
// node-local API: first sightings of generations and the agents'
// watermarks. A replica that takes over thereby knows the revisions its
// informer saw, not just the current ones.
type revisionTracker struct {
	mu         sync.Mutex
	seen       map[string]seenGeneration
	watermarks map[string]agentWatermark
}

func newRevisionTracker() *revisionTracker {
	return &revisionTracker{seen: map[string]seenGeneration{}, watermarks: map[string]agentWatermark{}}
}

// observe records obj's generation if it is new, and returns what is
// recorded.
func (k *revisionTracker) observe(obj metav1.Object, now time.Time) seenGeneration {
	key := objectKey(obj)
	k.mu.Lock()
	defer k.mu.Unlock()
	cur, ok := k.seen[key]
	if ok && cur.generation == obj.GetGeneration() {
		return cur
	}
	cur = seenGeneration{generation: obj.GetGeneration(), rv: etcdRevision(obj.GetResourceVersion()), at: now}
	k.seen[key] = cur
	return cur
}

func (k *revisionTracker) forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.seen, key)
}

// setWatermark records node's watermark; changed is false when it is the
// one already recorded (a plain renewal).
func (k *revisionTracker) setWatermark(node, raw string) (old, now revision, changed bool) {
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

func (k *revisionTracker) forgetWatermark(node string) (old revision) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old = k.watermarks[node].rv
	delete(k.watermarks, node)
	return old
}

// known says whether node has a watermark recorded (its Lease was seen
// and not deleted since).
func (k *revisionTracker) known(node string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.watermarks[node]
	return ok
}

// watermarksOf returns the watermarks of nodes (unknown for a node without).
func (k *revisionTracker) watermarksOf(nodes []string) map[string]revision {
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
func (k *revisionTracker) flipped(candidates sets.Set[string], a, b revision) []string {
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

// objectKey is obj's key in its informer's cache and a rollout's queue:
// namespace/name, or name for a cluster-scoped object.
func objectKey(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// rolloutObject is an object of a node-local API as its clientset and
// lister hand it out: a pointer (*esv1.EgressQoS, *esv1.EgressFirewall).
type rolloutObject interface {
	comparable
	metav1.Object
	runtime.Object
}

// rolloutKey is the queue key of obj (or of a tombstone's object), or ""
// when obj is not a T, or is not named name ("": any name counts) and
// misnamedCounts is false.
func rolloutKey[T rolloutObject](obj any, name string, misnamedCounts bool) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(T)
	var zero T
	if !ok || o == zero || (isMisnamed(o, name) && !misnamedCounts) {
		return ""
	}
	return objectKey(o)
}

// isMisnamed says whether obj is not named name, the only name that counts
// ("": any name counts).
func isMisnamed(obj metav1.Object, name string) bool { return name != "" && obj.GetName() != name }

// rollout reports where the objects of one node-local API are applied: its
// tracker (fed in every replica) and, through the term, its queue and
// status writes. api says what differs between the APIs.
type rollout[T rolloutObject] struct {
	c   *Controller
	api rolloutAPI[T]
	rolloutConfig
	// indexer is the API's informer cache; client, its clientset's client
	// of a namespace.
	indexer cache.Indexer
	client  func(namespace string) statusClient[T]
	tracker *revisionTracker
	// notes are the agents' nodeNotes, recorded in every replica.
	notes *agentNotes
	// informer watches the API's objects; slot is where a term holds this
	// API's part.
	informer cache.SharedIndexInformer
	slot     slot[*rolloutTerm[T]]
	memberHooks
}

// statusClient is what a rollout uses of a generated clientset's client.
type statusClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// newRollout is the rollout of one API, whose objects inf watches, a
// member whose part of a term is in s.
func newRollout[T rolloutObject](c *Controller, cfg rolloutConfig, api rolloutAPI[T], inf cache.SharedIndexInformer,
	client func(namespace string) statusClient[T], s slot[*rolloutTerm[T]]) *rollout[T] {
	return &rollout[T]{c: c, api: api, rolloutConfig: cfg, indexer: inf.GetIndexer(), informer: inf, client: client,
		tracker: newRevisionTracker(), notes: &agentNotes{byNode: map[string]map[string][]string{}}, slot: s}
}

// get reads the object of key from the informer cache.
func (r *rollout[T]) get(key string) (T, error) {
	var zero T
	obj, exists, err := r.indexer.GetByKey(key)
	if err != nil {
		return zero, err
	}
	o, ok := obj.(T)
	if !exists || !ok {
		return zero, apierrors.NewNotFound(schema.GroupResource{Group: esv1.GroupName, Resource: r.resource}, key)
	}
	return o, nil
}

// rolloutConfig names and tunes one API's rollout.
type rolloutConfig struct {
	// kind is the API's kind, in logs and messages ("EgressQoS").
	kind string
	// name is the only object name that counts (esv1.EgressQoSName,
	// EgressFirewallName); "" when any name does
	// (AdminPolicyBasedExternalRoute).
	name string
	// reportMisnamed: an object of another name is reported Invalid
	// (EgressFirewall); otherwise it is ignored (EgressQoS).
	reportMisnamed bool
	// resource is the API's plural resource name, which also names the
	// term's work queue; queueLabel is the queue's label in the sync
	// metrics, writeKind the kind label of api_writes_total.
	resource, queueLabel, writeKind string
	// watermark is the agent's watermark of the API among its facts.
	watermark func(heartbeat.Facts) string
	// nodeNotes, when set, reads what an agent says about single objects
	// beyond the watermark (EgressFirewall: the dnsNames it has no answer
	// for), by object key; known is false when the facts say nothing
	// (an agent before its first sync): the notes recorded stay.
	nodeNotes func(heartbeat.Facts) (notes map[string][]string, known bool)
	// workers sync the queue; pendingWarning: see DefaultQoSPendingWarning.
	workers        int
	pendingWarning time.Duration
	// states and applied are the API's metrics (egressflow_controller_<api>
	// and _<api>_apply_seconds).
	states  *prometheus.GaugeVec
	applied prometheus.Histogram
}

// termOf is this API's part of t.
func (r *rollout[T]) termOf(t *term) *rolloutTerm[T] { return r.slot.of(t) }

func (r *rollout[T]) key(obj any) string { return rolloutKey[T](obj, r.name, r.reportMisnamed) }

func (r *rollout[T]) watches() []watch {
	return []watch{{r.informer, cache.ResourceEventHandlerFuncs{AddFunc: r.onAdd, UpdateFunc: r.onUpdate, DeleteFunc: r.onDelete}}}
}

// observe records obj's generation in the tracker; a misnamed object is
// applied nowhere, so it has none to track.
func (r *rollout[T]) observe(obj T) {
	if !isMisnamed(obj, r.name) {
		r.tracker.observe(obj, r.c.opts.Clock.Now())
	}
}

func (r *rollout[T]) onAdd(obj any) {
	key := r.key(obj)
	if key == "" {
		return
	}
	r.observe(obj.(T))
	if t := r.c.term.Load(); t != nil {
		r.termOf(t).queue.Add(key)
	}
}

func (r *rollout[T]) onUpdate(oldObj, newObj any) {
	key := r.key(newObj)
	if key == "" {
		return
	}
	o, n := oldObj.(T), newObj.(T)
	r.observe(n)
	t := r.c.term.Load()
	if t == nil {
		return
	}
	s := r.termOf(t)
	if o.GetGeneration() == n.GetGeneration() {
		if apiequality.Semantic.DeepEqual(r.api.status(o), r.api.status(n)) {
			return // metadata only
		}
		s.mu.Lock()
		echo := s.isOwnWrite(key, n)
		s.mu.Unlock()
		if echo {
			return // this term's own status write coming back
		}
	}
	s.queue.Add(key)
}

func (r *rollout[T]) onDelete(obj any) {
	key := r.key(obj)
	if key == "" {
		return
	}
	r.tracker.forget(key)
	if t := r.c.term.Load(); t != nil {
		r.termOf(t).queue.Add(key)
	}
}

// observeAgent records an agent Lease's watermark of this API and its
// notes and, when the watermark moved and the agent counts, re-queues the
// objects whose applied-ness on that node it flips, and those whose notes
// from that node changed. Every replica calls it; t is nil while not
// leading. A renewal that changes neither queues nothing.
func (r *rollout[T]) observeAgent(t *term, node string, facts heartbeat.Facts) {
	var noted []string
	if r.nodeNotes != nil {
		if notes, known := r.nodeNotes(facts); known {
			noted = r.notes.set(node, notes)
		}
	}
	old, now, changed := r.tracker.setWatermark(node, r.watermark(facts))
	if (!changed && len(noted) == 0) || t == nil {
		return
	}
	if alive, _ := t.agents.of(node); !alive {
		return // a change of liveness re-queues what it flips
	}
	s := r.termOf(t)
	for _, key := range noted {
		s.queue.Add(key)
	}
	if !changed {
		return
	}
	var candidates sets.Set[string]
	if now.reached(old) {
		// Forward: only objects not applied everywhere can flip. A sync
		// inserts its key in pending before it reads the watermarks, so
		// a sync that read the old watermark is found here.
		s.mu.Lock()
		candidates = s.pending.Clone()
		s.mu.Unlock()
	}
	for _, key := range r.tracker.flipped(candidates, old, now) {
		s.queue.Add(key)
	}
}

// forgetAgent drops a deleted Lease's watermark; its liveness change
// re-queues the objects concerned (and drops its notes, which only a live
// agent's count).
func (r *rollout[T]) forgetAgent(node string) {
	r.tracker.forgetWatermark(node)
}

// agentsLivenessChanged re-queues the objects whose applied-ness on a node
// differs from "applied": those that node's agent, coming to life, has not
// applied, or, dying, no longer holds back.
func (r *rollout[T]) agentsLivenessChanged(t *term, nodes []string) {
	s := r.termOf(t)
	watermarks := r.tracker.watermarksOf(nodes)
	for _, node := range nodes {
		w := watermarks[node]
		for _, key := range r.tracker.flipped(nil, w, revision{n: ^uint64(0), ok: true}) {
			s.queue.Add(key)
		}
		for _, key := range r.notes.keysOf(node) {
			s.queue.Add(key)
		}
		if !r.tracker.known(node) {
			r.notes.set(node, nil) // its Lease is gone
		}
	}
}

// agentNotes are the agents' notes about single objects (rolloutConfig.
// nodeNotes), by node and then object key: the per-node part of an
// object's status beside where it is applied.
type agentNotes struct {
	mu     sync.Mutex
	byNode map[string]map[string][]string
}

// set records node's notes (nil: none) and returns the keys whose notes
// from node changed.
func (n *agentNotes) set(node string, notes map[string][]string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.byNode[node]
	var changed []string
	for key, v := range notes {
		if !slices.Equal(old[key], v) {
			changed = append(changed, key)
		}
	}
	for key := range old {
		if _, ok := notes[key]; !ok {
			changed = append(changed, key)
		}
	}
	if len(notes) == 0 {
		delete(n.byNode, node)
	} else {
		n.byNode[node] = notes
	}
	return changed
}

// keysOf are the keys node has notes about.
func (n *agentNotes) keysOf(node string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Collect(maps.Keys(n.byNode[node]))
}

// of returns the notes about key from each of nodes that has some: O(nodes).
func (n *agentNotes) of(key string, nodes []string) map[string][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out map[string][]string
	for _, node := range nodes {
		if v := n.byNode[node][key]; len(v) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[node] = v
		}
	}
	return out
}

// enqueueAll queues every object that counts.
func (r *rollout[T]) enqueueAll(t *term) {
	s := r.termOf(t)
	for _, o := range r.indexer.List() {
		if key := r.key(o); key != "" {
			s.queue.Add(key)
		}
	}
}

func (r *rollout[T]) pools() []workerPool { return []workerPool{{r.workers, r.process}} }

func (r *rollout[T]) queueLen(t *term) int { return r.termOf(t).queue.Len() }

func (r *rollout[T]) process(ctx context.Context, t *term) bool {
	return process(ctx, r.c, r.termOf(t).queue, r.queueLabel, func(ctx context.Context, key string) error { return r.sync(ctx, t, key) })
}
