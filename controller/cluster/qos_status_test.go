package cluster

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// etcdRevision orders resourceVersions as integers (not as strings), and
// anything that is not a positive uint64 is unknown, which reaches nothing
// and is reached by nothing.
func TestEtcdRevision(t *testing.T) {
	if !etcdRevision("10").reached(etcdRevision("9")) || etcdRevision("9").reached(etcdRevision("10")) {
		t.Error("10 and 9 compared as strings")
	}
	if !etcdRevision("42").reached(etcdRevision("42")) {
		t.Error("a watermark does not reach its own revision")
	}
	for _, bad := range []string{"", "0", "-1", "abc", "1.5", " 7", "18446744073709551616"} {
		r := etcdRevision(bad)
		if r.ok {
			t.Errorf("%q read as revision %d", bad, r.n)
		}
		if r.reached(etcdRevision("1")) || etcdRevision("18446744073709551615").reached(r) {
			t.Errorf("unknown revision %q compared as known", bad)
		}
	}
}

func qosObject(gen int64, rv string, rules ...esv1.EgressQoSRule) *esv1.EgressQoS {
	return &esv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressQoSName, Generation: gen, ResourceVersion: rv},
		Spec: esv1.EgressQoSSpec{Egress: rules}}
}

func watermarks(kv ...string) map[string]revision {
	out := map[string]revision{}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = etcdRevision(kv[i+1])
	}
	return out
}

var v4Only = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")}

// evaluateQoS is what the sync of q decides, whose current generation was
// first seen at revision seen, given the live agents' watermarks and the
// cluster's pod CIDRs (nil: unknown).
func evaluateQoS(q *esv1.EgressQoS, seen revision, agents map[string]revision, podCIDRs []netip.Prefix) rolloutVerdict {
	return evaluateRollout(q, seen, agents, qosProblems(q, podCIDRs))
}

// The status of every state, as operators read it: status.status in the
// reference's words, the conditions in egressflow's.
func TestQoSVerdict(t *testing.T) {
	rule := esv1.EgressQoSRule{DSCP: 46, DstCIDR: "203.0.113.0/24"}
	v6Rule := esv1.EgressQoSRule{DSCP: 10, DstCIDR: "2001:db8::/32"}
	badSelector := esv1.EgressQoSRule{DSCP: 1, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "not valid"}}}
	for _, tc := range []struct {
		name     string
		status   string // status.status, the reference's words
		q        *esv1.EgressQoS
		seen     string
		agents   map[string]revision
		podCIDRs []netip.Prefix
		text     string // the Ready condition's message, where egressflow's words are
		ready    reasons.Reason
		applied  reasons.Reason
		valid    reasons.Reason
	}{
		{"applied", "EgressQoS Rules applied", qosObject(2, "120", rule), "100", watermarks("a", "100", "b", "150"), v4Only,
			"generation 2 applied on 2/2 nodes", reasons.Applied, reasons.Applied, reasons.Valid},
		{"lagging names capped", "", qosObject(1, "100", rule), "100", watermarks("a", "99", "b", "", "c", "x", "d", "98", "e", "100"), v4Only,
			"generation 1 pending on 4 of 5 nodes: a, b, c, d", reasons.Pending, reasons.Pending, reasons.Valid},
		{"no agent", "", qosObject(1, "100", rule), "100", nil, v4Only,
			"generation 1 pending: no node agent is alive", reasons.Pending, reasons.Pending, reasons.Valid},
		{"unknown revision is never applied", "", qosObject(1, "abc", rule), "abc", watermarks("a", "18446744073709551615"), v4Only,
			`resourceVersion "abc" is not an etcd revision: where it is applied cannot be told`, reasons.RevisionUnknown, reasons.RevisionUnknown, reasons.Valid},
		{"wrong family, applied", "EgressQoS Rules not correctly applied", qosObject(1, "100", rule, v6Rule), "100", watermarks("a", "100"), v4Only,
			"rule 1: dstCIDR 2001:db8::/32 is IPv6, and the cluster has no pod of that family (the other rules apply; see condition Applied)", reasons.Invalid, reasons.Applied, reasons.WrongFamily},
		{"families unknown: no family check", "EgressQoS Rules applied", qosObject(1, "100", v6Rule), "100", watermarks("a", "100"), nil,
			"generation 1 applied on 1/1 nodes", reasons.Applied, reasons.Applied, reasons.Valid},
		{"selector, pending", "EgressQoS Rules not correctly applied", qosObject(1, "100", badSelector), "100", watermarks("a", "1"), v4Only,
			"", reasons.Invalid, reasons.Pending, reasons.InvalidRule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := evaluateQoS(tc.q, etcdRevision(tc.seen), tc.agents, tc.podCIDRs)
			if got := v.referenceStatus(qosKind); got != tc.status {
				t.Errorf("status %q, want %q", got, tc.status)
			}
			conds := v.conditions()
			if ready := meta.FindStatusCondition(conds, ConditionReady); tc.text != "" && (ready == nil || ready.Message != tc.text) {
				t.Errorf("Ready condition %+v, want the message %q", ready, tc.text)
			}
			for _, want := range []struct {
				typ    string
				reason reasons.Reason
			}{{ConditionReady, tc.ready}, {ConditionApplied, tc.applied}, {ConditionValid, tc.valid}} {
				c := meta.FindStatusCondition(conds, want.typ)
				if c == nil || c.Reason != string(want.reason) || c.ObservedGeneration != tc.q.Generation {
					t.Errorf("condition %s: %+v, want reason %s, observed generation %d", want.typ, c, want.reason, tc.q.Generation)
					continue
				}
				if wantTrue := want.reason == reasons.Applied || want.reason == reasons.Valid; (c.Status == metav1.ConditionTrue) != wantTrue {
					t.Errorf("condition %s is %s with reason %s", want.typ, c.Status, c.Reason)
				}
			}
			if !qosUpToDate(&esv1.EgressQoS{ObjectMeta: tc.q.ObjectMeta, Status: esv1.EgressQoSStatus{Status: v.referenceStatus(qosKind), Conditions: conds}}, v.referenceStatus(qosKind), conds) {
				t.Error("a status is not up to date with itself")
			}
		})
	}
}

// Only the object named default counts; a tombstone of one still does;
// anything else is ignored, never a crash.
func TestQoSKey(t *testing.T) {
	q := qosObject(1, "5")
	other := q.DeepCopy()
	other.Name = "other"
	for _, tc := range []struct {
		obj  any
		want string
	}{
		{q, "shop/default"},
		{cache.DeletedFinalStateUnknown{Key: "shop/default", Obj: q}, "shop/default"},
		{other, ""},
		{cache.DeletedFinalStateUnknown{Key: "shop/other", Obj: other}, ""},
		{"not an object", ""},
		{nil, ""},
	} {
		if got := qosKey(tc.obj); got != tc.want {
			t.Errorf("qosKey(%T) = %q, want %q", tc.obj, got, tc.want)
		}
	}
}

// The tracker keeps the revision at which a generation was first seen
// through status writes, takes a new one with a new generation, and flips
// exactly the objects one watermark reaches and the other does not.
func TestQoSTracker(t *testing.T) {
	k := newRevisionTracker()
	var zero time.Time
	for i, rv := range []string{"100", "200", "300", "400"} {
		q := qosObject(1, rv)
		q.Namespace = string(rune('a' + i))
		k.observe(q, zero)
	}
	status := qosObject(1, "250")
	status.Namespace = "a"
	if s := k.observe(status, zero); s.rv != etcdRevision("100") {
		t.Errorf("a status write moved the first-seen revision to %d", s.rv.n)
	}
	spec := qosObject(2, "500")
	spec.Namespace = "b"
	if s := k.observe(spec, zero); s.rv != etcdRevision("500") || s.generation != 2 {
		t.Errorf("a new generation seen as %+v, want revision 500", s)
	}
	// Revisions now: a 100, b 500, c 300, d 400.
	flipped := func(candidates sets.Set[string], a, b string) []string {
		out := k.flipped(candidates, etcdRevision(a), etcdRevision(b))
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		candidates sets.Set[string]
		a, b       string
		want       []string
	}{
		{nil, "100", "400", []string{"c/default", "d/default"}},
		{nil, "400", "100", []string{"c/default", "d/default"}},
		{sets.New("c/default"), "100", "400", []string{"c/default"}},
		{nil, "", "300", []string{"a/default", "c/default"}},
		{nil, "1000", "1000", nil},
	} {
		if got := flipped(tc.candidates, tc.a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("flipped(%v, %s, %s) = %v, want %v", tc.candidates, tc.a, tc.b, got, tc.want)
		}
	}
}
