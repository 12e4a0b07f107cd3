package cluster

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// EgressQoS status: status.status in the reference's words
// (referenceStatus), and the Ready, Applied and Valid conditions in
// egressflow's, which say where each object's current generation is
// applied (rollout.go says how) and what its rules cannot do.

// qosKind is the kind, as events, logs and the reference's status.status
// name it.
const qosKind = "EgressQoS"

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
	// problem). Checked here as the agents check it (esv1.EgressQoSSpec.Rules),
	// for what the CRD cannot check: a dstCIDR of a family the cluster has
	// no pod CIDR of, a podSelector that does not parse.
	ConditionValid = "Valid"
)

// qosConditionProblems is how many problems the Valid condition's message
// lists (an object has up to esv1.MaxEgressQoSRules rules).
const qosConditionProblems = 10

// newQoSRollout is the EgressQoS rollout, of the objects inf watches:
// objects not named default are ignored (the CRD refuses them; one stored
// before it did is not applied by any agent either).
func newQoSRollout(c *Controller, inf cache.SharedIndexInformer, s slot[*rolloutTerm[*esv1.EgressQoS]]) *rollout[*esv1.EgressQoS] {
	return newRollout(c, rolloutConfig{
		kind: qosKind, name: esv1.EgressQoSName,
		resource: "egressqoses", queueLabel: queueQoS, writeKind: "qos_status",
		watermark: func(f heartbeat.Facts) string { return f.QoSRevision },
		workers:   c.opts.QoSWorkers, pendingWarning: c.opts.QoSPendingWarning,
		states: c.metrics.qosStates, applied: c.metrics.qosApplied,
	}, qosAPI{}, inf,
		func(ns string) statusClient[*esv1.EgressQoS] { return c.es.K8sV1().EgressQoSes(ns) },
		s)
}

// qosKey is the queue key of an EgressQoS that counts (named default), or
// "" for one that does not (the CRD refuses other names; one stored before
// it did is ignored).
func qosKey(obj any) string { return rolloutKey[*esv1.EgressQoS](obj, esv1.EgressQoSName, false) }

// qosAPI judges EgressQoSes and writes their status.
type qosAPI struct{}

func (qosAPI) problems(q *esv1.EgressQoS, podCIDRs []netip.Prefix) []esv1.RuleProblem {
	return qosProblems(q, podCIDRs)
}

// qosProblems are the problems of q's rules as the agents read them
// (esv1.EgressQoSSpec.Rules).
func qosProblems(q *esv1.EgressQoS, podCIDRs []netip.Prefix) []esv1.RuleProblem {
	_, problems := q.Spec.Rules(familyCheckCIDRs(podCIDRs))
	return problems
}

func (qosAPI) says(q *esv1.EgressQoS, v rolloutVerdict) bool {
	return qosUpToDate(q, v.referenceStatus(qosKind), v.conditions())
}

func (qosAPI) withStatus(q *esv1.EgressQoS, v rolloutVerdict) *esv1.EgressQoS {
	next := q.DeepCopy()
	next.Status.Status = v.referenceStatus(qosKind)
	for _, cond := range v.conditions() {
		meta.SetStatusCondition(&next.Status.Conditions, cond)
	}
	return next
}

func (qosAPI) status(q *esv1.EgressQoS) any { return q.Status }

// reported reads the Ready condition's reason and, when the Valid
// condition is False, its message.
func (qosAPI) reported(q *esv1.EgressQoS) (reasons.Reason, string, bool) {
	var state reasons.Reason
	problems := ""
	if cur := meta.FindStatusCondition(q.Status.Conditions, ConditionReady); cur != nil {
		state = reasons.Reason(cur.Reason)
	}
	if cur := meta.FindStatusCondition(q.Status.Conditions, ConditionValid); cur != nil && cur.Status == metav1.ConditionFalse {
		problems = cur.Message
	}
	return state, problems, true
}

// problemsText is the Valid condition's message when it is False.
func (qosAPI) problemsText(v rolloutVerdict) string {
	if len(v.problems) == 0 {
		return ""
	}
	return v.problemList(qosConditionProblems)
}

// conditions are an EgressQoS's Ready, Applied and Valid conditions.
func (v rolloutVerdict) conditions() []metav1.Condition {
	applied := metav1.Condition{Type: ConditionApplied, Status: metav1.ConditionTrue, Reason: string(reasons.Applied),
		Message: v.appliedMessage()}
	switch {
	case v.unknown:
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, string(reasons.RevisionUnknown), v.where(0)
	case v.waiting():
		applied.Status, applied.Reason = metav1.ConditionFalse, string(reasons.Pending)
		applied.Message = fmt.Sprintf("generation %d pending %s", v.generation, v.where(messageNodeNames))
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
