package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

var qosRule = esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 46, DstCIDR: "203.0.113.0/24"}}}

// waitQoS waits until the EgressQoS of ns has a Ready condition of reason
// for its current generation whose message (egressflow's words) is text,
// and status.status in the reference's words for reason, and returns it.
func (f *rolloutFixture) waitQoS(ns, text string, reason reasons.Reason) *esv1.EgressQoS {
	f.t.Helper()
	var q *esv1.EgressQoS
	wait.Until(f.t, settle, func() error {
		q = f.GetEgressQoS(f.t, ns)
		return qosSays(q, text, reason)
	})
	return q
}

// otherRulesApply ends the Ready condition's message of an EgressQoS whose
// other rules apply.
const otherRulesApply = " (the other rules apply; see condition Applied)"

func qosSays(q *esv1.EgressQoS, text string, reason reasons.Reason) error {
	ready := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionReady)
	switch {
	case q.Status.Status != wantReferenceStatus("EgressQoS", reason):
		return fmt.Errorf("%s: status %q, want %q", q.Namespace, q.Status.Status, wantReferenceStatus("EgressQoS", reason))
	case ready == nil || ready.Reason != string(reason) || ready.Message != text:
		return fmt.Errorf("%s: ready %+v, want reason %s, message %q", q.Namespace, ready, reason, text)
	}
	for _, c := range q.Status.Conditions {
		if c.ObservedGeneration != q.Generation {
			return fmt.Errorf("%s: condition %s observed generation %d, generation %d", q.Namespace, c.Type, c.ObservedGeneration, q.Generation)
		}
	}
	wantReady := metav1.ConditionFalse
	if reason == reasons.Applied {
		wantReady = metav1.ConditionTrue
	}
	if ready.Status != wantReady {
		return fmt.Errorf("%s: ready %s, want %s", q.Namespace, ready.Status, wantReady)
	}
	return nil
}

// qosStatusWrites are the replica's EgressQoS status writes.
func qosStatusWrites(reqs []clustertest.Request) []clustertest.Request {
	return statusWrites(reqs, "egressqoses", esv1.EgressQoSName)
}

// qosSyncs is egressflow_controller_syncs_total{queue="egressqos"}.
func qosSyncs(t *testing.T, reg *prometheus.Registry) float64 { return queueSyncs(t, reg, "egressqos") }

// qosEvent waits for an Event about the EgressQoS of ns.
func (f *rolloutFixture) qosEvent(ns, eventType string, reason reasons.Reason, text string) {
	f.t.Helper()
	f.eventOn(ns, "EgressQoS", esv1.EgressQoSName, eventType, reason, text)
}

// TestQoSStatusFollowsAgents: an EgressQoS is Pending on the nodes whose
// agents have not published a watermark at or past the revision of its
// current generation, and Applied once all have (with an Applied Event).
// The controller's own status writes, and another writer's status-only
// write, bump the resourceVersion but never make it Pending again; a spec
// change does, until the agents catch up. Watermarks that move while
// everything is applied cost no sync and no write.
func TestQoSStatusFollowsAgents(t *testing.T) {
	f := newRolloutFixture(t, false, nil, "node-a", "node-b", "node-c")
	ns := f.Namespace(t)
	created := f.CreateEgressQoS(t, ns, qosRule)
	rv1 := created.ResourceVersion

	q := f.waitQoS(ns, "generation 1 pending on 3 of 3 nodes: node-a, node-b, node-c", reasons.Pending)
	if c := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionValid); c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(reasons.Valid) {
		t.Errorf("valid condition %+v, want True/Valid", c)
	}
	if c := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionApplied); c == nil || c.Reason != string(reasons.Pending) || !strings.Contains(c.Message, "generation 1 pending on 3 of 3 nodes") {
		t.Errorf("applied condition %+v, want Pending on 3 nodes", c)
	}

	f.qosWatermark(rv1, "node-a", "node-b")
	f.waitQoS(ns, "generation 1 pending on 1 of 3 nodes: node-c", reasons.Pending)
	f.qosWatermark(rv1, "node-c")
	q = f.waitQoS(ns, "generation 1 applied on 3/3 nodes", reasons.Applied)
	f.qosEvent(ns, normal, reasons.Applied, "generation 1 applied on 3/3 nodes")
	if !newerRV(q.ResourceVersion, rv1) {
		t.Fatalf("resourceVersion %s after the status writes, want past %s", q.ResourceVersion, rv1)
	}

	// Another writer's status-only write: put right, never Pending.
	mark := f.r.Writes.Len()
	q.Status.Status = "tampered"
	if _, err := f.ES.K8sV1().EgressQoSes(ns).UpdateStatus(context.Background(), q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitQoS(ns, "generation 1 applied on 3/3 nodes", reasons.Applied)
	f.checkPutRightOnce(mark, qosStatusWrites)

	// Watermarks moving on, and renewals, with everything applied: no
	// sync, no write.
	now := f.GetEgressQoS(t, ns).ResourceVersion
	syncs, mark := qosSyncs(t, f.reg), f.r.Writes.Len()
	f.qosWatermark(now, "node-a", "node-b", "node-c")
	time.Sleep(4 * steadyAgentRenew)
	f.qosWatermark(rv1, "node-c") // even backwards, as long as it covers rv1
	time.Sleep(4 * steadyAgentRenew)
	wait.Until(t, settle, func() error { return idle(f.r) })
	writes, _ := f.r.Writes.Since(mark)
	if got := qosStatusWrites(writes); len(got) != 0 {
		t.Errorf("status written while nothing changed: %v", got)
	}
	if got := qosSyncs(t, f.reg) - syncs; got != 0 {
		t.Errorf("%v EgressQoS syncs while every watermark covered every object, want 0", got)
	}

	// A spec change: Pending until the agents have taken it in.
	updated := f.UpdateEgressQoS(t, ns, func(q *esv1.EgressQoS) { q.Spec.Egress[0].DSCP = 10 })
	if updated.Generation != 2 {
		t.Fatalf("generation %d after a spec change, want 2", updated.Generation)
	}
	q = f.waitQoS(ns, "generation 2 pending on 3 of 3 nodes: node-a, node-b, node-c", reasons.Pending)
	if c := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionApplied); c == nil || !strings.Contains(c.Message, "generation 2 pending") {
		t.Errorf("applied condition %+v, want generation 2 pending", c)
	}
	f.qosWatermark(updated.ResourceVersion, "node-a", "node-b", "node-c")
	f.waitQoS(ns, "generation 2 applied on 3/3 nodes", reasons.Applied)
	f.qosEvent(ns, normal, reasons.Applied, "generation 2 applied on 3/3 nodes")
	if got := qosState(t, f.reg, "applied"); got != 1 {
		t.Errorf("egressflow_controller_egressqos{state=applied} = %v, want 1", got)
	}
	if got := histogramCount(t, f.reg, "egressflow_controller_egressqos_apply_seconds"); got != 2 {
		t.Errorf("egressqos_apply_seconds has %d samples, want 2 (one per generation)", got)
	}
}

// TestQoSLivenessAndPendingWarning: a lagging agent is named, and past the
// threshold a Warning names it; a dead agent is not waited for; an agent
// that comes to life without the generation makes the object Pending on
// its node until it catches up.
func TestQoSLivenessAndPendingWarning(t *testing.T) {
	f := newRolloutFixture(t, true, func(o *cluster.Options) { o.QoSPendingWarning = 500 * time.Millisecond }, "node-a", "node-b", "node-c")
	ns := f.Namespace(t)
	rv := f.CreateEgressQoS(t, ns, qosRule).ResourceVersion
	f.qosWatermark(rv, "node-a", "node-b")
	f.waitQoS(ns, "generation 1 pending on 1 of 3 nodes: node-c", reasons.Pending)
	f.qosEvent(ns, warning, reasons.Pending, "generation 1 not applied after")
	f.qosEvent(ns, warning, reasons.Pending, "on 1 of 3 nodes: node-c")

	f.agents["node-c"].Stop()
	f.waitQoS(ns, "generation 1 applied on 2/2 nodes", reasons.Applied)
	f.qosEvent(ns, normal, reasons.Applied, "applied on 2/2 nodes")
	if got := qosState(t, f.reg, "pending"); got != 0 {
		t.Errorf("egressflow_controller_egressqos{state=pending} = %v, want 0", got)
	}

	f.agents["node-d"] = f.Node(t, "node-d", nil)
	f.waitQoS(ns, "generation 1 pending on 1 of 3 nodes: node-d", reasons.Pending)
	f.qosWatermark(rv, "node-d")
	f.waitQoS(ns, "generation 1 applied on 3/3 nodes", reasons.Applied)
}

// TestQoSInvalid: what the CRD cannot refuse and the agents cannot apply
// makes the object Invalid, with the specific reason in condition Valid and
// a Warning; the other rules' progress is still reported (Applied).
func TestQoSInvalid(t *testing.T) {
	f := newRolloutFixture(t, false, nil, "node-a")
	family := f.Namespace(t) // the test cluster's pod CIDR is IPv4 only
	rv := f.CreateEgressQoS(t, family, esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
		{DSCP: 46, DstCIDR: "203.0.113.0/24"},
		{DSCP: 10, DstCIDR: "2001:db8::/32"},
	}}).ResourceVersion
	selector := f.Namespace(t)
	f.CreateEgressQoS(t, selector, esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
		{DSCP: 46, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "not valid"}}},
	}})

	want := "rule 1: dstCIDR 2001:db8::/32 is IPv6, and the cluster has no pod of that family"
	q := f.waitQoS(family, want+otherRulesApply, reasons.Invalid)
	if c := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionValid); c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(reasons.WrongFamily) || c.Message != want {
		t.Errorf("valid condition %+v, want False/WrongFamily %q", c, want)
	}
	f.qosEvent(family, warning, reasons.Invalid, want)

	wait.Until(t, settle, func() error {
		q = f.GetEgressQoS(t, selector)
		if c := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionValid); c == nil || c.Reason != string(reasons.InvalidRule) || !strings.Contains(c.Message, "rule 0: podSelector") {
			return fmt.Errorf("valid condition %+v, want InvalidRule on rule 0's podSelector", c)
		}
		return qosSays(q, meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionValid).Message+otherRulesApply, reasons.Invalid)
	})
	f.qosEvent(selector, warning, reasons.Invalid, "rule 0: podSelector")

	// The valid rule's progress: Applied once the agent has the object.
	f.qosWatermark(rv, "node-a")
	wait.Until(t, settle, func() error {
		q := f.GetEgressQoS(t, family)
		if c := meta.FindStatusCondition(q.Status.Conditions, cluster.ConditionApplied); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("applied condition %+v, want True", c)
		}
		return qosSays(q, want+otherRulesApply, reasons.Invalid)
	})
	if got := qosState(t, f.reg, "invalid"); got != 2 {
		t.Errorf("egressflow_controller_egressqos{state=invalid} = %v, want 2", got)
	}
}

// TestQoSWatermarkCost: 20 objects, created one after another (so their
// revisions grow). A watermark that moves forward re-evaluates only the
// objects it flips on that node; one that moves back, those it flips back.
// After each step every object's status is what an independent reading of
// the revisions says.
func TestQoSWatermarkCost(t *testing.T) {
	const objects = 20
	f := newRolloutFixture(t, false, nil, "node-a", "node-b")
	var nss, rvs []string
	for range objects {
		ns := f.Namespace(t)
		nss = append(nss, ns)
		rvs = append(rvs, f.CreateEgressQoS(t, ns, qosRule).ResourceVersion)
	}
	nsIndex := map[string]int{}
	for i, ns := range nss {
		nsIndex[ns] = i
	}
	marks := map[string]string{}
	// expect is the Ready message of object i by the specification: applied
	// on a node iff its watermark, as an integer, is at least the revision
	// the object was created at.
	expect := func(i int) (string, reasons.Reason) {
		need, _ := strconv.ParseUint(rvs[i], 10, 64)
		var lagging []string
		for _, n := range []string{"node-a", "node-b"} {
			if w, err := strconv.ParseUint(marks[n], 10, 64); err != nil || w < need {
				lagging = append(lagging, n)
			}
		}
		if len(lagging) == 0 {
			return "generation 1 applied on 2/2 nodes", reasons.Applied
		}
		return fmt.Sprintf("generation 1 pending on %d of 2 nodes: %s", len(lagging), strings.Join(lagging, ", ")), reasons.Pending
	}
	set := func(node string, i int) {
		marks[node] = rvs[i]
		f.qosWatermark(rvs[i], node)
	}
	check := func() {
		t.Helper()
		wait.Until(t, settle, func() error {
			for i, ns := range nss {
				text, reason := expect(i)
				if err := qosSays(f.GetEgressQoS(t, ns), text, reason); err != nil {
					return fmt.Errorf("object %d: %w", i, err)
				}
			}
			return idle(f.r)
		})
	}
	// step moves node's watermark to object i's revision and checks that
	// only the objects in flips were synced and written.
	step := func(node string, i int, flips ...int) {
		t.Helper()
		syncs, mark := qosSyncs(t, f.reg), f.r.Writes.Len()
		set(node, i)
		check()
		time.Sleep(4 * steadyAgentRenew) // renewals of the same watermark
		check()
		writes, _ := f.r.Writes.Since(mark)
		var written []int
		for _, w := range qosStatusWrites(writes) {
			written = append(written, nsIndex[strings.Split(w.Path, "/")[5]])
		}
		slices.Sort(written)
		if !slices.Equal(written, flips) {
			t.Errorf("watermark of %s to object %d: status written for objects %v, want %v", node, i, written, flips)
		}
		// Each flipped object is synced once, and perhaps once more when
		// its own write's echo beats the bookkeeping of that write.
		if got := qosSyncs(t, f.reg) - syncs; got < float64(len(flips)) || got > float64(2*len(flips)) {
			t.Errorf("watermark of %s to object %d: %v syncs, want %d to %d", node, i, got, len(flips), 2*len(flips))
		}
	}
	span := func(from, to int) []int {
		var out []int
		for i := from; i <= to; i++ {
			out = append(out, i)
		}
		return out
	}

	set("node-a", 9)
	set("node-b", 9)
	check()
	step("node-a", 14, span(10, 14)...)
	step("node-b", 19, span(10, 19)...)
	// Backwards (an agent that restarted publishes an older watermark
	// until its first sync): objects 5 to 19 flip on node-b.
	step("node-b", 4, span(5, 19)...)
	step("node-a", 19, span(15, 19)...)
}

// qosState is egressflow_controller_egressqos{state}.
func qosState(t *testing.T, reg *prometheus.Registry, state string) float64 {
	t.Helper()
	return stateGauge(t, reg, "egressflow_controller_egressqos", state)
}
