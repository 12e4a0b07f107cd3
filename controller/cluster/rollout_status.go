package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/controller/reasons"
)

const (
	// statusNodeNames is how many lagging nodes the one-line summary names
	// (EgressFirewall's first status message, its Details column in
	// kubectl get): enough to point at a stuck node, short enough for a
	// column. The longer messages name more.
	statusNodeNames = 3
	// messageNodeNames is how many lagging nodes the longer messages
	// (EgressQoS's Applied condition, the Pending Warning) name; past it
	// they say how many more. A bound keeps the status small when
	// thousands of nodes lag (a mass restart of agents); the metrics carry
	// no names at all.
	messageNodeNames = 20
)

// The states of egressflow_controller_egressqos and _egressfirewall, one
// per Ready reason.
const (
	rolloutStateApplied = "applied"
	rolloutStatePending = "pending"
	rolloutStateInvalid = "invalid"
	rolloutStateUnknown = "unknown"
)

var rolloutStates = []string{rolloutStateApplied, rolloutStatePending, rolloutStateInvalid, rolloutStateUnknown}

// anyFamily stands for the cluster's pod CIDRs when they are not known
// (no --pod-cidrs and no Node with spec.podCIDRs): every destination
// passes the family check, which cannot be made.
var anyFamily = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// familyCheckCIDRs are the pod CIDRs the agents' family check is run
// with here: the cluster's, or anyFamily when they are unknown (nil).
func familyCheckCIDRs(podCIDRs []netip.Prefix) []netip.Prefix {
	if len(podCIDRs) == 0 {
		return anyFamily
	}
	return podCIDRs
}

// rolloutVerdict is where an object's current generation is applied and
// whether its rules can be: everything its status says.
type rolloutVerdict struct {
	generation int64
	// applied and lagging are the live agents that have and have not
	// applied the generation, sorted.
	applied, lagging []string
	// unknown: the object's revision is not an etcd revision.
	unknown bool
	rv      string
	// problems are what the object's rules cannot do, as the agents find
	// them from the object alone.
	problems []esv1.RuleProblem
	// misnamed: the object is not named default, so no agent applies it;
	// its one problem says so.
	misnamed bool
	// nodeNotes are what live agents note about the object
	// (rolloutConfig.nodeNotes), by node; nil when none.
	nodeNotes map[string][]string
}

// evaluateRollout is the pure verdict on obj, whose current generation
// this replica first saw at revision seen, given the live agents'
// watermarks and the rules' problems.
func evaluateRollout(obj metav1.Object, seen revision, agents map[string]revision, problems []esv1.RuleProblem) rolloutVerdict {
	v := rolloutVerdict{generation: obj.GetGeneration(), unknown: !seen.ok, rv: obj.GetResourceVersion(), problems: problems}
	for node, w := range agents {
		if w.reached(seen) {
			v.applied = append(v.applied, node)
		} else {
			v.lagging = append(v.lagging, node)
		}
	}
	slices.Sort(v.applied)
	slices.Sort(v.lagging)
	return v
}

// misnamedVerdict is the verdict on an object of kind that is not named
// name: Invalid, applied nowhere.
func misnamedVerdict(obj metav1.Object, kind, name string) rolloutVerdict {
	return rolloutVerdict{generation: obj.GetGeneration(), rv: obj.GetResourceVersion(), misnamed: true,
		problems: []esv1.RuleProblem{{Reason: reasons.Invalid,
			Message: fmt.Sprintf("%s must be named %s", kind, name)}}}
}

// isApplied: the generation is applied on every live agent's node, and
// there is at least one.
func (v rolloutVerdict) isApplied() bool {
	return !v.unknown && !v.misnamed && len(v.lagging) == 0 && len(v.applied) > 0
}

// waiting: agents have yet to apply the generation (or none is alive).
func (v rolloutVerdict) waiting() bool { return !v.unknown && !v.misnamed && !v.isApplied() }

func (v rolloutVerdict) total() int { return len(v.applied) + len(v.lagging) }

// readyReason is the object's state as a reason (EgressQoS's Ready
// condition's).
func (v rolloutVerdict) readyReason() reasons.Reason {
	switch {
	case len(v.problems) > 0:
		return reasons.Invalid
	case v.unknown:
		return reasons.RevisionUnknown
	case v.waiting():
		return reasons.Pending
	}
	return reasons.Applied
}

func (v rolloutVerdict) state() string {
	switch v.readyReason() {
	case reasons.Invalid:
		return rolloutStateInvalid
	case reasons.RevisionUnknown:
		return rolloutStateUnknown
	case reasons.Pending:
		return rolloutStatePending
	}
	return rolloutStateApplied
}

// where says where the generation is applied, naming at most names lagging
// nodes.
func (v rolloutVerdict) where(names int) string {
	switch {
	case v.misnamed:
		return "nowhere: no agent applies an object of another name than default"
	case v.unknown:
		return fmt.Sprintf("resourceVersion %q is not an etcd revision: where it is applied cannot be told", v.rv)
	case v.total() == 0:
		return "no node agent is alive"
	case v.isApplied():
		return fmt.Sprintf("on %d/%d nodes", len(v.applied), v.total())
	}
	listed := v.lagging[:min(names, len(v.lagging))]
	s := fmt.Sprintf("on %d of %d nodes: %s", len(v.lagging), v.total(), strings.Join(listed, ", "))
	if more := len(v.lagging) - len(listed); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// appliedMessage says that the generation is applied, and where.
func (v rolloutVerdict) appliedMessage() string {
	return fmt.Sprintf("generation %d applied %s", v.generation, v.where(0))
}

// problemMessages are the messages of at most n problems, and then one
// that says how many more there are.
func (v rolloutVerdict) problemMessages(n int) []string {
	var out []string
	for _, p := range v.problems[:min(n, len(v.problems))] {
		out = append(out, p.Message)
	}
	if more := len(v.problems) - n; more > 0 {
		out = append(out, fmt.Sprintf("and %d more", more))
	}
	return out
}

// problemList lists at most n problems in one line.
func (v rolloutVerdict) problemList(n int) string {
	return strings.Join(v.problemMessages(n), "; ")
}

// The reference's status.status values, which its clients (scripts,
// consoles, its own tests) compare: ovn-kubernetes' status manager writes
// "<kind> Rules applied" once every zone has reported success, "<kind>
// Rules not correctly applied" as soon as one has reported a failure, and
// clears the field while some zone has yet to report.
const (
	referenceAppliedSuffix    = " Rules applied"
	referenceNotAppliedSuffix = " Rules not correctly applied"
)

// referenceStatus is status.status in the reference's words for kind
// ("EgressFirewall", "EgressQoS") and the object's state (a Ready reason):
// applied, not correctly applied (rules that cannot be applied, or an
// object no agent applies), or "" while the generation is not yet applied
// on every live agent's node or where it is applied cannot be told, as the
// reference leaves it empty until every zone has reported. egressflow's
// own wording (summary) goes in the conditions or messages beside it.
func referenceStatus(kind string, state reasons.Reason) string {
	switch state {
	case reasons.Applied:
		return kind + referenceAppliedSuffix
	case reasons.Invalid:
		return kind + referenceNotAppliedSuffix
	}
	return ""
}

// referenceStatus is v's status.status for kind.
func (v rolloutVerdict) referenceStatus(kind string) string {
	return referenceStatus(kind, v.readyReason())
}

// summary is egressflow's one line on the object's state: where its
// generation is applied, or its first problem.
func (v rolloutVerdict) summary() string {
	switch v.readyReason() {
	case reasons.Invalid:
		return "Invalid: " + v.problemList(1)
	case reasons.RevisionUnknown:
		return "Unknown: " + v.where(0)
	case reasons.Pending:
		if v.total() == 0 {
			return "Pending: " + v.where(0)
		}
		return "Pending " + v.where(statusNodeNames)
	}
	return "Applied " + v.where(0)
}

// summaryStates read the summary's first word (rolloutVerdict.summary) back
// as the state.
var summaryStates = []struct {
	prefix string
	state  reasons.Reason
}{
	{"Applied ", reasons.Applied},
	{"Pending", reasons.Pending},
	{"Invalid:", reasons.Invalid},
	{"Unknown:", reasons.RevisionUnknown},
}

// readSummary reads back a status written as status.status (the
// reference's word for the state, as reference gives it) and messages
// (the summary, then problems and notes; isNote tells the notes): the
// state from the summary's first word, and the problems in one line.
// ok is false for a status of another wording, or whose status.status is
// not the reference's word for its state: another writer's (or an
// earlier version's). A status never written reads as no state.
func readSummary(status string, messages []string, isNote func(string) bool, reference func(reasons.Reason) string) (state reasons.Reason, problems string, ok bool) {
	if len(messages) == 0 {
		return "", "", status == "" // never written, or another writer's
	}
	problems = strings.Join(slices.DeleteFunc(slices.Clone(messages[1:]), isNote), "; ")
	for _, s := range summaryStates {
		if strings.HasPrefix(messages[0], s.prefix) {
			return s.state, problems, status == reference(s.state)
		}
	}
	return "", problems, false
}

// rolloutAPI is what differs between the node-local APIs: how their
// objects are judged, and how their status says it.
type rolloutAPI[T rolloutObject] interface {
	// problems are what obj's rules cannot do, from the object alone
	// (the agents' own check), given the cluster's pod CIDRs (nil:
	// unknown, no family check).
	problems(obj T, podCIDRs []netip.Prefix) []esv1.RuleProblem
	// says whether obj's status already says what v does.
	says(obj T, v rolloutVerdict) bool
	// withStatus is a copy of obj whose status says v.
	withStatus(obj T, v rolloutVerdict) T
	// status is obj's status, compared to tell a status change.
	status(obj T) any
	// reported is what obj's status says: its state as a Ready reason
	// ("" when it says none), and its problems as problemsText renders
	// them ("" when none). ok is false when the status is not one this
	// controller writes (another writer's): it tells no change.
	reported(obj T) (state reasons.Reason, problems string, ok bool)
	// problemsText is v's problems as the Invalid Event says them; ""
	// when there are none.
	problemsText(v rolloutVerdict) string
}

// notesReporter is a rolloutAPI that sends Events when the agents' notes
// about an object change (AdminPolicyBasedExternalRoute's next hops).
type notesReporter[T rolloutObject] interface {
	// reportNotes sends the Events of the change from obj's status (before
	// the write) to v.
	reportNotes(e *events.Emitter, obj T, v rolloutVerdict)
}

// rolloutTerm is one leadership term's part of one API: its queue
// (namespace/name keys) and bookkeeping, guarded by mu.
type rolloutTerm[T rolloutObject] struct {
	queue workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	// pending are the objects whose last evaluation found live agents
	// that had not applied them (or no live agent), and those being
	// evaluated: a watermark moving forward re-queues only these.
	pending sets.Set[string]
	records map[string]*rolloutRecord
	// written are status writes the cache has not caught up with.
	written map[string]T
	// refused are misnamed objects whose status the API server refused
	// to write (the CRD refuses every write of an object of another
	// name), by the resourceVersion refused: not tried again until the
	// object changes.
	refused map[string]string
	// states are the objects' states, counted by the metric.
	states map[string]string
}

// rolloutRecord is an object's current spell of waiting for agents.
type rolloutRecord struct {
	// generation is the generation the record is about; pendingSince is
	// when its wait began (zero while it is applied); warned: the Pending
	// Warning of this wait was sent.
	generation   int64
	pendingSince time.Time
	warned       bool
}

// track follows the object's verdict v at now: it reports whether the
// Pending Warning is due (the current generation has waited warning), or
// else in how long it will be (0: not), and whether v ends a wait with
// the generation applied.
func (rec *rolloutRecord) track(v rolloutVerdict, now time.Time, warning time.Duration) (warn, appliedNow bool, warnIn time.Duration) {
	if !v.waiting() {
		appliedNow = !rec.pendingSince.IsZero() && rec.generation == v.generation && v.isApplied()
		rec.generation, rec.pendingSince, rec.warned = v.generation, time.Time{}, false
		return false, appliedNow, 0
	}
	if rec.pendingSince.IsZero() || rec.generation != v.generation {
		rec.generation, rec.pendingSince, rec.warned = v.generation, now, false
	}
	if rec.warned {
		return false, false, 0
	}
	waited := now.Sub(rec.pendingSince)
	if waited >= warning {
		rec.warned = true
		return true, false, 0
	}
	return false, false, warning - waited
}

func newRolloutTerm[T rolloutObject](queue workqueue.TypedRateLimitingInterface[string]) *rolloutTerm[T] {
	return &rolloutTerm[T]{queue: queue, pending: sets.New[string](), records: map[string]*rolloutRecord{},
		written: map[string]T{}, refused: map[string]string{}, states: map[string]string{}}
}

// isOwnWrite says whether n is this term's last status write of key.
func (s *rolloutTerm[T]) isOwnWrite(key string, n T) bool {
	w, ok := s.written[key]
	return ok && w.GetResourceVersion() == n.GetResourceVersion()
}

// freshest returns obj or the newer object this term wrote for it.
func (s *rolloutTerm[T]) freshest(key string, obj T) T {
	return fresherOfWritten(s.written, key, obj)
}

func (s *rolloutTerm[T]) forget(key string) {
	s.pending.Delete(key)
	delete(s.records, key)
	delete(s.written, key)
	delete(s.refused, key)
	delete(s.states, key)
}

// counts are the objects per state, for the metric.
func (s *rolloutTerm[T]) counts() map[string]int {
	out := map[string]int{}
	for _, st := range s.states {
		out[st]++
	}
	return out
}

func (r *rollout[T]) newTerm(limiter func() workqueue.TypedRateLimiter[string]) any {
	return newRolloutTerm[T](workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: r.resource, Clock: r.c.opts.Clock}))
}

func (r *rollout[T]) shutDown(t *term) { r.termOf(t).queue.ShutDown() }

func (r *rollout[T]) clearStates() { setStates(r.states, nil) }

// setStates sets a state gauge from counts by state (nil: all 0).
func setStates(g *prometheus.GaugeVec, counts map[string]int) {
	for _, st := range rolloutStates {
		g.WithLabelValues(st).Set(float64(counts[st]))
	}
}

// sync makes one object's status say where its current generation is
// applied and whether its rules can be; it writes nothing when the status
// already says so, and sends the Events of a change.
func (r *rollout[T]) sync(ctx context.Context, t *term, key string) error {
	s := r.termOf(t)
	obj, err := r.get(key)
	if apierrors.IsNotFound(err) {
		r.tracker.forget(key) // also what a sync racing the delete recorded
		s.mu.Lock()
		s.forget(key)
		counts := s.counts()
		s.mu.Unlock()
		setStates(r.states, counts)
		return nil
	}
	if err != nil {
		return err
	}
	misnamed := isMisnamed(obj, r.name)
	if misnamed && !r.reportMisnamed {
		return nil // only the object named default counts
	}
	s.mu.Lock()
	if !misnamed {
		// Pending before the watermarks are read: see observeAgent.
		s.pending.Insert(key)
	}
	obj = s.freshest(key, obj)
	refused := misnamed && s.refused[key] == obj.GetResourceVersion()
	s.mu.Unlock()
	if refused {
		return nil // the API server refuses this object's status as it is
	}
	v, seen := r.verdict(t, key, obj, misnamed)

	now := r.c.opts.Clock.Now()
	s.mu.Lock()
	rec := s.records[key]
	if rec == nil {
		rec = &rolloutRecord{}
		s.records[key] = rec
	}
	if !v.waiting() {
		s.pending.Delete(key)
	}
	warn, appliedNow, warnIn := rec.track(v, now, r.pendingWarning)
	pendingSince := rec.pendingSince
	s.mu.Unlock()
	if warnIn > 0 {
		s.queue.AddAfter(key, warnIn)
	}

	logger := klog.FromContext(ctx).WithValues(r.kind, klog.KObj(obj))
	written, err := r.writeStatus(ctx, obj, v)
	if err != nil && misnamed && apierrors.IsInvalid(err) {
		// The CRD refuses any write of an object of another name (one
		// stored before it did): the Event and the metric report it.
		logger.Info(r.kind+" not named "+r.name+": its status cannot be written", "err", err)
		s.mu.Lock()
		s.refused[key] = obj.GetResourceVersion()
		s.mu.Unlock()
		r.report(logger, obj, v)
		err = nil
	}
	if err != nil {
		if warn {
			s.mu.Lock()
			rec.warned = false // sent with the retry
			s.mu.Unlock()
		}
		return err
	}
	var zero T
	s.mu.Lock()
	if written != zero {
		s.written[key] = written
	}
	s.states[key] = v.state()
	counts := s.counts()
	s.mu.Unlock()
	setStates(r.states, counts)
	if appliedNow && !seen.at.IsZero() && seen.generation == v.generation {
		r.applied.Observe(now.Sub(seen.at).Seconds())
	}

	if written != zero {
		r.report(logger, obj, v)
	}
	if warn {
		r.c.events.Event(obj, corev1.EventTypeWarning, string(reasons.Pending),
			fmt.Sprintf("generation %d not applied after %s %s", v.generation, now.Sub(pendingSince).Round(time.Second), v.where(messageNodeNames)))
		logger.Info(r.kind+" pending for long", "generation", v.generation, "since", pendingSince, "lagging", len(v.lagging))
	}
	return nil
}

// verdict is what obj's status must say: for an object of another name,
// that it is refused; otherwise where its generation (seen, as the
// tracker observed it) is applied among the live nodes, with its rules'
// problems and the nodes' notes.
func (r *rollout[T]) verdict(t *term, key string, obj T, misnamed bool) (rolloutVerdict, seenGeneration) {
	if misnamed {
		return misnamedVerdict(obj, r.kind, r.name), seenGeneration{}
	}
	seen := r.tracker.observe(obj, r.c.opts.Clock.Now())
	live := r.liveNodes(t)
	v := evaluateRollout(obj, seen.rv, r.tracker.watermarksOf(live), r.api.problems(obj, r.c.clusterPodCIDRs(t)))
	if r.nodeNotes != nil {
		v.nodeNotes = r.notes.of(key, live)
	}
	return v, seen
}

// report sends the Events of a status change: from obj's status (before
// the write) to v. A status another writer made up says nothing of what
// changed: the write that puts it right sends no Event.
func (r *rollout[T]) report(logger klog.Logger, obj T, v rolloutVerdict) {
	prevState, prevProblems, ok := r.api.reported(obj)
	if !ok {
		return
	}
	if problems := r.api.problemsText(v); problems != "" && problems != prevProblems {
		r.c.events.Event(obj, corev1.EventTypeWarning, string(reasons.Invalid), problems)
		logger.Info(r.kind+" invalid", "problems", len(v.problems))
	}
	if n, ok := any(r.api).(notesReporter[T]); ok {
		n.reportNotes(r.c.events, obj, v)
	}
	if v.readyReason() == prevState {
		return
	}
	switch v.readyReason() {
	case reasons.Applied:
		r.c.events.Event(obj, corev1.EventTypeNormal, string(reasons.Applied), v.appliedMessage())
		logger.Info(r.kind+" applied", "generation", v.generation, "nodes", len(v.applied))
	case reasons.RevisionUnknown:
		r.c.events.Event(obj, corev1.EventTypeWarning, string(reasons.RevisionUnknown), v.where(0))
	}
}

// writeStatus makes obj's status say v, retrying on conflict with a fresh
// read. It returns the object as written, or the zero T if nothing was
// written (already up to date, or the object is gone).
func (r *rollout[T]) writeStatus(ctx context.Context, obj T, v rolloutVerdict) (T, error) {
	client := r.client(obj.GetNamespace())
	written, err := writeStatusRetrying(obj,
		func() (T, error) { return client.Get(ctx, obj.GetName(), metav1.GetOptions{}) },
		func(cur T) bool { return r.api.says(cur, v) },
		func(cur T) (T, error) {
			updated, err := client.UpdateStatus(ctx, r.api.withStatus(cur, v), metav1.UpdateOptions{})
			r.c.metrics.apiWritesByResult.WithLabelValues(r.writeKind, writeResult(err)).Inc()
			return updated, err
		})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("write status of %s %s/%s: %w", r.kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return written, nil
}

// liveNodes are the nodes whose agents are alive.
func (r *rollout[T]) liveNodes(t *term) []string {
	t.agents.mu.Lock()
	defer t.agents.mu.Unlock()
	nodes := make([]string, 0, len(t.agents.alive))
	for n := range t.agents.alive {
		nodes = append(nodes, n)
	}
	return nodes
}

// podCIDRCache is a term's reading of the cluster's pod CIDRs from the
// Nodes, recomputed when stale (only without Options.PodCIDRs).
type podCIDRCache struct {
	mu       sync.Mutex
	prefixes []netip.Prefix
	fresh    bool
}

// clusterPodCIDRs are the cluster's pod CIDRs for the family check: the
// controller's --pod-cidrs (which the agents share, deploy/'s ConfigMap
// egressflow-cluster), or else the Nodes' spec.podCIDRs; nil if neither
// says.
func (c *Controller) clusterPodCIDRs(t *term) []netip.Prefix {
	if len(c.opts.PodCIDRs) > 0 {
		return c.opts.PodCIDRs
	}
	p := &t.podCIDRs
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.fresh {
		p.prefixes, p.fresh = nil, true
		nodes, _ := c.nodeLister.List(labels.Everything())
		for _, n := range nodes {
			for _, s := range n.Spec.PodCIDRs {
				if prefix, err := netip.ParsePrefix(s); err == nil {
					p.prefixes = append(p.prefixes, prefix)
				}
			}
		}
	}
	return p.prefixes
}

// nodeCIDRsChanged reports whether a Node's pod CIDRs, which stand for
// the cluster's without --pod-cidrs, changed; if so, it marks the term's
// cache of them stale.
func (c *Controller) nodeCIDRsChanged(t *term, before, after *corev1.Node) bool {
	if len(c.opts.PodCIDRs) > 0 {
		return false
	}
	var a, b []string
	if before != nil {
		a = before.Spec.PodCIDRs
	}
	if after != nil {
		b = after.Spec.PodCIDRs
	}
	if slices.Equal(a, b) {
		return false
	}
	t.podCIDRs.mu.Lock()
	t.podCIDRs.fresh = false
	t.podCIDRs.mu.Unlock()
	return true
}

// nodeEvent re-evaluates every object when the Nodes' pod CIDRs changed
// (the rules' families are checked against them).
func (r *rollout[T]) nodeEvent(t *term, old, cur *corev1.Node) {
	if r.c.nodeCIDRsChanged(t, old, cur) {
		r.enqueueAll(t)
	}
}
