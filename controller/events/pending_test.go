package events

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// emissions builds occurrences in emission order, one second apart.
type emissions struct {
	seq uint64
	at  time.Time
}

func (e *emissions) next(eventType, reason, message string) *occurrence {
	e.seq++
	e.at = e.at.Add(time.Second)
	return &occurrence{eventKey: eventKey{eventType, reason, message}, count: 1, first: e.at, last: e.at, seq: e.seq}
}

func normal(e *emissions, reason, message string) *occurrence {
	return e.next(corev1.EventTypeNormal, reason, message)
}

func warning(e *emissions, reason, message string) *occurrence {
	return e.next(corev1.EventTypeWarning, reason, message)
}

// drain takes every pending occurrence, in write order.
func drain(o *object) []*occurrence {
	var out []*occurrence
	for occ := o.take(); occ != nil; occ = o.take() {
		out = append(out, occ)
	}
	return out
}

func describe(occs []*occurrence) []string {
	var out []string
	for _, o := range occs {
		out = append(out, fmt.Sprintf("%s %s %q x%d", o.eventType, o.reason, o.message, o.count))
	}
	return out
}

func TestNewerNormalSupersedesOlder(t *testing.T) {
	var e emissions
	o := &object{}
	first := normal(&e, "Assigned", "node a")
	if s := o.add(first); s != nil {
		t.Fatalf("first Normal superseded %v", s)
	}
	if s := o.add(normal(&e, "Assigned", "node b")); s != first {
		t.Fatalf("second Normal superseded %v, want the first", s)
	}
	last := normal(&e, "AllNodes", "every node")
	if s := o.add(last); s == nil || s.message != "node b" {
		t.Fatalf("third Normal superseded %v, want the second", s)
	}
	got := drain(o)
	if len(got) != 1 || got[0] != last {
		t.Fatalf("pending %v, want only the latest Normal", describe(got))
	}
}

func TestIdenticalNormalsFoldIntoCount(t *testing.T) {
	var e emissions
	o := &object{}
	a := normal(&e, "Assigned", "node a")
	o.add(a)
	b := normal(&e, "Assigned", "node a")
	if s := o.add(b); s != nil {
		t.Fatalf("an identical Normal superseded %v", s)
	}
	got := drain(o)
	if len(got) != 1 || got[0].count != 2 || !got[0].first.Equal(a.first) || !got[0].last.Equal(b.last) {
		t.Fatalf("pending %v (first %v last %v), want one x2 from %v to %v", describe(got), got[0].first, got[0].last, a.first, b.last)
	}
}

func TestEveryDistinctWarningIsKeptAndRepeatsCount(t *testing.T) {
	var e emissions
	o := &object{}
	for _, w := range []*occurrence{
		warning(&e, "NoEndpoints", "no endpoint"),
		normal(&e, "Assigned", "node a"),
		warning(&e, "HostLost", "host a lost"),
		warning(&e, "NoEndpoints", "no endpoint"),
		warning(&e, "HostLost", "host b lost"),
		normal(&e, "Assigned", "node c"),
	} {
		o.add(w)
	}
	if n := o.pending(); n != 5 {
		t.Errorf("pending %d emissions, want 5 (the first Normal was superseded)", n)
	}
	got := describe(drain(o))
	want := []string{
		`Warning NoEndpoints "no endpoint" x2`,
		`Warning HostLost "host a lost" x1`,
		`Warning HostLost "host b lost" x1`,
		`Normal Assigned "node c" x1`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("written in order %q, want %q", got, want)
	}
}

func TestWarningsWrittenInEmissionOrder(t *testing.T) {
	var e emissions
	o := &object{}
	n := normal(&e, "Assigned", "node a")
	w1 := warning(&e, "HostLost", "host a lost")
	w2 := warning(&e, "NoMatchingNode", "none")
	o.add(w2) // added out of order, as a put-back may be
	o.add(n)
	o.add(w1)
	got := drain(o)
	if len(got) != 3 || got[0] != n || got[1] != w1 || got[2] != w2 {
		t.Fatalf("order %q, want by emission", describe(got))
	}
}

// A write that failed puts its occurrence back: a newer Normal wins over
// it, identical ones merge, Warnings stay.
func TestPutBackAfterFailedWrite(t *testing.T) {
	var e emissions
	o := &object{}
	o.add(normal(&e, "Assigned", "node a"))
	o.add(warning(&e, "HostLost", "host a lost"))
	inflightNormal := o.take()
	inflightWarning := o.take()
	// Meanwhile: a newer Normal and the same Warning again.
	newer := normal(&e, "Assigned", "node b")
	o.add(newer)
	o.add(warning(&e, "HostLost", "host a lost"))
	if s := o.add(inflightNormal); s != inflightNormal {
		t.Errorf("a failed older Normal put back superseded %v, want itself", s)
	}
	if s := o.add(inflightWarning); s != nil {
		t.Errorf("a failed Warning put back superseded %v", s)
	}
	got := drain(o)
	if len(got) != 2 || got[0].message != "host a lost" || got[0].count != 2 || got[0].seq != inflightWarning.seq || got[1] != newer {
		t.Fatalf("after put-back %q, want the Warning x2 (first emitted first) then the newer Normal", describe(got))
	}

	// A failed Normal with nothing newer goes back as it was.
	o.add(normal(&e, "Assigned", "node c"))
	n := o.take()
	if s := o.add(n); s != nil || o.normal != n {
		t.Fatalf("put back %v superseded %v; pending Normal %v", n, s, o.normal)
	}
}

// However many distinct Warnings an object gets while nothing is written,
// its pending state stays bounded and no emission is lost: past the bound,
// a Warning is folded into the pending one of its reason.
func TestPendingWarningsAreBounded(t *testing.T) {
	var e emissions
	o := &object{}
	const lost = 3 * MaxDistinctWarnings
	for i := range lost {
		o.add(warning(&e, "HostLost", fmt.Sprintf("host node-%d lost", i)))
	}
	o.add(warning(&e, "NoEndpoints", "no endpoint")) // a reason never seen: its own slot
	if len(o.warnings) != MaxDistinctWarnings+1 {
		t.Errorf("%d pending Warnings, want %d", len(o.warnings), MaxDistinctWarnings+1)
	}
	if n := o.pending(); n != lost+1 {
		t.Errorf("pending emissions %d, want %d: none lost", n, lost+1)
	}
	got := drain(o)
	messages := map[string]int32{}
	for _, w := range got {
		messages[w.message] += w.count
	}
	// The newest message of the folded reason survives, with the count of
	// everything folded into it.
	newest := fmt.Sprintf("host node-%d lost", lost-1)
	if c := messages[newest]; c != lost-MaxDistinctWarnings+1 {
		t.Errorf("%q has count %d, want %d: %q", newest, c, lost-MaxDistinctWarnings+1, describe(got))
	}
	if messages["no endpoint"] != 1 {
		t.Errorf("the other reason's Warning: %q", describe(got))
	}
}

func TestWrittenRecordsAreBoundedAndExpire(t *testing.T) {
	o := &object{}
	start := time.Unix(1_000_000, 0)
	for i := range MaxWrittenPerObject + 5 {
		o.wrote(eventKey{corev1.EventTypeWarning, "HostLost", fmt.Sprint(i)}, written{name: fmt.Sprint("ev", i), count: 1, at: start.Add(time.Duration(i) * time.Second)})
	}
	if len(o.written) != MaxWrittenPerObject {
		t.Fatalf("%d records, want %d", len(o.written), MaxWrittenPerObject)
	}
	for i := range 5 {
		if o.previous(eventKey{corev1.EventTypeWarning, "HostLost", fmt.Sprint(i)}) != nil {
			t.Errorf("record %d kept, want the oldest forgotten", i)
		}
	}
	if p := o.previous(eventKey{corev1.EventTypeWarning, "HostLost", fmt.Sprint(MaxWrittenPerObject + 4)}); p == nil || p.name != fmt.Sprint("ev", MaxWrittenPerObject+4) {
		t.Errorf("newest record %+v", p)
	}
	if o.idle() {
		t.Error("idle with records")
	}
	o.expire(start.Add(EventTTL + 10*time.Second))
	if len(o.written) != MaxWrittenPerObject-(10-4) {
		t.Errorf("%d records after the TTL of the first ones, want %d", len(o.written), MaxWrittenPerObject-6)
	}
	o.expire(start.Add(2 * EventTTL))
	if !o.idle() {
		t.Errorf("not idle once every record expired: %+v", o)
	}
	o.busy = true
	if o.idle() {
		t.Error("idle while a write is in flight")
	}
}
