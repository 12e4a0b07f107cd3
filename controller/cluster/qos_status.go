package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/reasons"
)

// The conditions of an EgressQoS, besides ConditionReady (True when both
// of these are).
const (
	// ConditionApplied: the current generation is applied on the node of
	// every live agent (reason Applied), or not yet (Pending, naming the
	// nodes), or cannot be told (RevisionUnknown). Rules that cannot be
	// applied (see ConditionValid) do not hold it back: the others are
	// applied.
	ConditionApplied = "Applied"
	// ConditionValid: every rule can be applied as written (reason Valid),
	// or not (reason InvalidRule or WrongFamily, the message listing every
	// problem). Checked here as the agents check it (dataplane.ComputeQoS),
	// for what the CRD cannot check: a dstCIDR of a family the cluster has
	// no pod CIDR of, a podSelector that does not parse.
	ConditionValid = "Valid"
)

const (
	// qosStatusNodeNames is how many lagging nodes status.status names
	// (the printer column of kubectl get): enough to point at a stuck
	// node, short enough for a column. The Applied condition names more.
	qosStatusNodeNames = 3
	// qosConditionNodeNames is how many lagging nodes the Applied
	// condition's message names; past it the message says how many more.
	// A bound keeps the status small when thousands of nodes lag (a mass
	// restart of agents); the Events and metrics carry no names at all.
	qosConditionNodeNames = 20
	// qosConditionProblems is how many problems the Valid condition's
	// message lists (an object has up to esv1.MaxEgressQoSRules rules).
	qosConditionProblems = 10
)

// The states of egressflow_controller_egressqos, one per Ready reason.
const (
	qosStateApplied = "applied"
	qosStatePending = "pending"
	qosStateInvalid = "invalid"
	qosStateUnknown = "unknown"
)

var qosStates = []string{qosStateApplied, qosStatePending, qosStateInvalid, qosStateUnknown}

// anyFamily stands for the cluster's pod CIDRs when they are not known
// (no --pod-cidrs and no Node with spec.podCIDRs): every dstCIDR passes the
// family check, which cannot be made.
var anyFamily = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// qosVerdict is where an EgressQoS's current generation is applied and
// whether its rules can be: everything its status says.
type qosVerdict struct {
	generation int64
	// applied and lagging are the live agents that have and have not
	// applied the generation, sorted.
	applied, lagging []string
	// unknown: the object's revision is not an etcd revision.
	unknown  bool
	rv       string
	problems []dataplane.Problem
}

// evaluateQoS is the pure verdict on q, whose current generation this
// replica first saw at revision seen, given the live agents' watermarks
// and the cluster's pod CIDRs (nil: unknown).
func evaluateQoS(q *esv1.EgressQoS, seen revision, agents map[string]revision, podCIDRs []netip.Prefix) qosVerdict {
	v := qosVerdict{generation: q.Generation, unknown: !seen.ok, rv: q.ResourceVersion}
	for node, w := range agents {
		if w.reached(seen) {
			v.applied = append(v.applied, node)
		} else {
			v.lagging = append(v.lagging, node)
		}
	}
	slices.Sort(v.applied)
	slices.Sort(v.lagging)
	if len(podCIDRs) == 0 {
		podCIDRs = anyFamily
	}
	// The agents' own check, on no pod: only the object's problems.
	v.problems = dataplane.ComputeQoS(dataplane.NodeConfig{ClusterPodCIDRs: podCIDRs}, []*esv1.EgressQoS{q}, nil).Problems
	return v
}

// isApplied: the generation is applied on every live agent's node, and
// there is at least one.
func (v qosVerdict) isApplied() bool {
	return !v.unknown && len(v.lagging) == 0 && len(v.applied) > 0
}

// waiting: agents have yet to apply the generation (or none is alive).
func (v qosVerdict) waiting() bool { return !v.unknown && !v.isApplied() }

func (v qosVerdict) total() int { return len(v.applied) + len(v.lagging) }

// readyReason is the Ready condition's reason, the object's state.
func (v qosVerdict) readyReason() reasons.Reason {
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

func (v qosVerdict) state() string {
	switch v.readyReason() {
	case reasons.Invalid:
		return qosStateInvalid
	case reasons.RevisionUnknown:
		return qosStateUnknown
	case reasons.Pending:
		return qosStatePending
	}
	return qosStateApplied
}

// where says where the generation is applied, naming at most names lagging
// nodes.
func (v qosVerdict) where(names int) string {
	switch {
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

// problemList lists at most n problems.
func (v qosVerdict) problemList(n int) string {
	var parts []string
	for _, p := range v.problems[:min(n, len(v.problems))] {
		parts = append(parts, p.Message)
	}
	s := strings.Join(parts, "; ")
	if more := len(v.problems) - n; more > 0 {
		s += fmt.Sprintf("; and %d more", more)
	}
	return s
}

// statusText is status.status: short, for kubectl get's Status column.
func (v qosVerdict) statusText() string {
	switch v.readyReason() {
	case reasons.Invalid:
		return "Invalid: " + v.problemList(1)
	case reasons.RevisionUnknown:
		return "Unknown: " + v.where(0)
	case reasons.Pending:
		if v.total() == 0 {
			return "Pending: " + v.where(0)
		}
		return "Pending " + v.where(qosStatusNodeNames)
	}
	return "Applied " + v.where(0)
}

// conditions are the Ready, Applied and Valid conditions.
func (v qosVerdict) conditions() []metav1.Condition {
	applied := metav1.Condition{Type: ConditionApplied, Status: metav1.ConditionTrue, Reason: string(reasons.Applied),
		Message: fmt.Sprintf("generation %d applied %s", v.generation, v.where(0))}
	switch {
	case v.unknown:
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, string(reasons.RevisionUnknown), v.where(0)
	case v.waiting():
		applied.Status, applied.Reason = metav1.ConditionFalse, string(reasons.Pending)
		applied.Message = fmt.Sprintf("generation %d pending %s", v.generation, v.where(qosConditionNodeNames))
		if v.total() == 0 {
			applied.Message = fmt.Sprintf("generation %d pending: %s", v.generation, v.where(0))
		}
	}
	valid := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: string(reasons.Valid), Message: "every rule can be applied"}
	if len(v.problems) > 0 {
		valid.Status, valid.Reason, valid.Message = metav1.ConditionFalse, string(v.problems[0].Reason), v.problemList(qosConditionProblems)
	}
	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: string(v.readyReason())}
	switch v.readyReason() {
	case reasons.Invalid:
		ready.Message = valid.Message + " (the other rules apply; see condition Applied)"
	case reasons.Applied:
		ready.Status, ready.Message = metav1.ConditionTrue, applied.Message
	default:
		ready.Message = applied.Message
	}
	out := []metav1.Condition{ready, applied, valid}
	for i := range out {
		out[i].ObservedGeneration = v.generation
	}
	return out
}

// qosUpToDate says whether q's status already says text and conds (their
// transition times aside).
func qosUpToDate(q *esv1.EgressQoS, text string, conds []metav1.Condition) bool {
	if q.Status.Status != text {
		return false
	}
	for _, want := range conds {
		cur := meta.FindStatusCondition(q.Status.Conditions, want.Type)
		if cur == nil || cur.Status != want.Status || cur.Reason != want.Reason || cur.Message != want.Message || cur.ObservedGeneration != want.ObservedGeneration {
			return false
		}
	}
	return true
}

func qosStatusEqual(a, b esv1.EgressQoSStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }

// qosTerm is one leadership term's EgressQoS bookkeeping, guarded by mu.
type qosTerm struct {
	mu sync.Mutex
	// pending are the objects whose last evaluation found live agents
	// that had not applied them (or no live agent), and those being
	// evaluated: a watermark moving forward re-queues only these.
	pending sets.Set[string]
	records map[string]*qosRecord
	// written are status writes the cache has not caught up with.
	written map[string]*esv1.EgressQoS
	// states are the objects' states, counted by the metric.
	states map[string]string
	// podCIDRs are the cluster's pod CIDRs from the Nodes, recomputed
	// when dirty (only without Options.PodCIDRs).
	podCIDRs      []netip.Prefix
	podCIDRsDirty bool
}

// qosRecord is an object's current spell of waiting for agents.
type qosRecord struct {
	// generation is the generation the record is about; pendingSince is
	// when its wait began (zero while it is applied); warned: the Pending
	// Warning of this wait was sent.
	generation   int64
	pendingSince time.Time
	warned       bool
}

func newQoSTerm() *qosTerm {
	return &qosTerm{pending: sets.New[string](), records: map[string]*qosRecord{}, written: map[string]*esv1.EgressQoS{},
		states: map[string]string{}, podCIDRsDirty: true}
}

// isOwnWrite says whether n is this term's last status write of key.
func (s *qosTerm) isOwnWrite(key string, n *esv1.EgressQoS) bool {
	w := s.written[key]
	return w != nil && w.ResourceVersion == n.ResourceVersion
}

// freshest returns q or the newer object this term wrote for it.
func (s *qosTerm) freshest(key string, q *esv1.EgressQoS) *esv1.EgressQoS {
	return fresherOfWritten(s.written, key, q)
}

func (s *qosTerm) forget(key string) {
	s.pending.Delete(key)
	delete(s.records, key)
	delete(s.written, key)
	delete(s.states, key)
}

// counts are the objects per state, for the metric.
func (s *qosTerm) counts() map[string]int {
	out := map[string]int{}
	for _, st := range s.states {
		out[st]++
	}
	return out
}

// syncQoS makes one EgressQoS's status say where its current generation is
// applied and whether its rules can be; it writes nothing when the status
// already says so, and sends the Events of a change.
func (c *Controller) syncQoS(ctx context.Context, t *term, key string) error {
	ns, name := splitKey(key)
	s := t.qos
	q, err := c.qosLister.EgressQoSes(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.qos.forget(key) // also what a sync racing the delete recorded
		s.mu.Lock()
		s.forget(key)
		counts := s.counts()
		s.mu.Unlock()
		c.metrics.setQoSStates(counts)
		return nil
	}
	if err != nil {
		return err
	}
	if name != esv1.EgressQoSName {
		return nil // only the object named default counts
	}
	// Pending before the watermarks are read: see observeAgentQoS.
	s.mu.Lock()
	s.pending.Insert(key)
	q = s.freshest(key, q)
	s.mu.Unlock()
	seen := c.qos.observe(q, c.opts.Clock.Now())
	v := evaluateQoS(q, seen.rv, c.liveWatermarks(t), c.qosPodCIDRs(t))

	now := c.opts.Clock.Now()
	s.mu.Lock()
	rec := s.records[key]
	if rec == nil {
		rec = &qosRecord{}
		s.records[key] = rec
	}
	var warnIn time.Duration
	warn, appliedNow := false, false
	switch {
	case !v.waiting():
		s.pending.Delete(key)
		appliedNow = !rec.pendingSince.IsZero() && rec.generation == v.generation && v.isApplied()
		rec.generation, rec.pendingSince, rec.warned = v.generation, time.Time{}, false
	default:
		if rec.pendingSince.IsZero() || rec.generation != v.generation {
			rec.generation, rec.pendingSince, rec.warned = v.generation, now, false
		}
		if !rec.warned {
			if waited := now.Sub(rec.pendingSince); waited >= c.opts.QoSPendingWarning {
				warn, rec.warned = true, true
			} else {
				warnIn = c.opts.QoSPendingWarning - waited
			}
		}
	}
	pendingSince := rec.pendingSince
	s.mu.Unlock()
	if warnIn > 0 {
		t.qoses.AddAfter(key, warnIn)
	}

	text, conds := v.statusText(), v.conditions()
	written, err := c.writeQoSStatus(ctx, q, text, conds)
	if err != nil {
		if warn {
			s.mu.Lock()
			rec.warned = false // sent with the retry
			s.mu.Unlock()
		}
		return err
	}
	s.mu.Lock()
	if written != nil {
		s.written[key] = written
	}
	s.states[key] = v.state()
	counts := s.counts()
	s.mu.Unlock()
	c.metrics.setQoSStates(counts)
	if appliedNow && !seen.at.IsZero() && seen.generation == v.generation {
		c.metrics.qosApplied.Observe(now.Sub(seen.at).Seconds())
	}

	logger := klog.FromContext(ctx).WithValues("egressQoS", klog.KObj(q))
	if written != nil {
		c.reportQoS(logger, q, v, conds)
	}
	if warn {
		c.events.Event(q, corev1.EventTypeWarning, string(reasons.Pending),
			fmt.Sprintf("generation %d not applied after %s %s", v.generation, now.Sub(pendingSince).Round(time.Second), v.where(qosConditionNodeNames)))
		logger.Info("EgressQoS pending for long", "generation", v.generation, "since", pendingSince, "lagging", len(v.lagging))
	}
	return nil
}

// reportQoS sends the Events of a status change: from q's status (before
// the write) to conds.
func (c *Controller) reportQoS(logger klog.Logger, q *esv1.EgressQoS, v qosVerdict, conds []metav1.Condition) {
	prevReady, prevValid := "", ""
	if cur := meta.FindStatusCondition(q.Status.Conditions, ConditionReady); cur != nil {
		prevReady = cur.Reason
	}
	if cur := meta.FindStatusCondition(q.Status.Conditions, ConditionValid); cur != nil && cur.Status == metav1.ConditionFalse {
		prevValid = cur.Message
	}
	ready, valid := meta.FindStatusCondition(conds, ConditionReady), meta.FindStatusCondition(conds, ConditionValid)
	if valid.Status == metav1.ConditionFalse && valid.Message != prevValid {
		c.events.Event(q, corev1.EventTypeWarning, string(reasons.Invalid), valid.Message)
		logger.Info("EgressQoS invalid", "problems", len(v.problems))
	}
	if ready.Reason == prevReady {
		return
	}
	switch reasons.Reason(ready.Reason) {
	case reasons.Applied:
		c.events.Event(q, corev1.EventTypeNormal, string(reasons.Applied), ready.Message)
		logger.Info("EgressQoS applied", "generation", v.generation, "nodes", len(v.applied))
	case reasons.RevisionUnknown:
		c.events.Event(q, corev1.EventTypeWarning, string(reasons.RevisionUnknown), ready.Message)
	}
}

// writeQoSStatus makes q's status say text and conds, retrying on conflict
// with a fresh read. It returns the object as written, or nil if nothing
// was written (already up to date, or the object is gone).
func (c *Controller) writeQoSStatus(ctx context.Context, q *esv1.EgressQoS, text string, conds []metav1.Condition) (*esv1.EgressQoS, error) {
	client := c.es.K8sV1().EgressQoSes(q.Namespace)
	written, err := writeStatusRetrying(q,
		func() (*esv1.EgressQoS, error) { return client.Get(ctx, q.Name, metav1.GetOptions{}) },
		func(cur *esv1.EgressQoS) bool { return qosUpToDate(cur, text, conds) },
		func(cur *esv1.EgressQoS) (*esv1.EgressQoS, error) {
			next := cur.DeepCopy()
			next.Status.Status = text
			for _, cond := range conds {
				meta.SetStatusCondition(&next.Status.Conditions, cond)
			}
			updated, err := client.UpdateStatus(ctx, next, metav1.UpdateOptions{})
			c.metrics.apiWritesByResult.WithLabelValues("qos_status", writeResult(err)).Inc()
			return updated, err
		})
	if err != nil {
		return nil, fmt.Errorf("write status of EgressQoS %s/%s: %w", q.Namespace, q.Name, err)
	}
	return written, nil
}

// liveWatermarks are the watermarks of the live agents.
func (c *Controller) liveWatermarks(t *term) map[string]revision {
	t.state.mu.Lock()
	nodes := make([]string, 0, len(t.state.alive))
	for n := range t.state.alive {
		nodes = append(nodes, n)
	}
	t.state.mu.Unlock()
	return c.qos.watermarksOf(nodes)
}

// qosPodCIDRs are the cluster's pod CIDRs for the family check: the
// controller's --pod-cidrs (which the agents share, deploy/'s ConfigMap
// egressflow-cluster), or else the Nodes' spec.podCIDRs; nil if neither
// says.
func (c *Controller) qosPodCIDRs(t *term) []netip.Prefix {
	if len(c.opts.PodCIDRs) > 0 {
		return c.opts.PodCIDRs
	}
	t.qos.mu.Lock()
	defer t.qos.mu.Unlock()
	if t.qos.podCIDRsDirty {
		t.qos.podCIDRs, t.qos.podCIDRsDirty = nil, false
		nodes, _ := c.nodeLister.List(labels.Everything())
		for _, n := range nodes {
			for _, s := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(s); err == nil {
					t.qos.podCIDRs = append(t.qos.podCIDRs, p)
				}
			}
		}
	}
	return t.qos.podCIDRs
}

// qosNodeCIDRsChanged re-evaluates every EgressQoS when the Nodes' pod
// CIDRs, which stand for the cluster's without --pod-cidrs, changed.
func (c *Controller) qosNodeCIDRsChanged(t *term, before, after *corev1.Node) {
	if len(c.opts.PodCIDRs) > 0 {
		return
	}
	var a, b []string
	if before != nil {
		a = before.Spec.PodCIDRs
	}
	if after != nil {
		b = after.Spec.PodCIDRs
	}
	if slices.Equal(a, b) {
		return
	}
	t.qos.mu.Lock()
	t.qos.podCIDRsDirty = true
	t.qos.mu.Unlock()
	c.enqueueAllQoS(t)
}
