package dataplane

import (
	"maps"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/egressflow/egressflow/openflow"
)

// dumpedAs turns flow mods into what a dump of the bridge would return.
func dumpedAs(t *testing.T, fms []*openflow.FlowMod) []openflow.FlowEntry {
	t.Helper()
	var out []openflow.FlowEntry
	for _, fm := range fms {
		e, err := (&openflow.Flow{Table: fm.Table, Priority: fm.Priority, Cookie: fm.Cookie, Match: fm.Match, Instructions: fm.Instructions}).Entry()
		if err != nil {
			t.Fatalf("%v: %v", fm, err)
		}
		out = append(out, e)
	}
	return out
}

// resolveStale turns the stale flows of a diff against a dump into their
// deletes, as the agent does with a second dump, and checks that every one
// was found there.
func resolveStale(t *testing.T, c *Changes, dump []openflow.FlowEntry) {
	t.Helper()
	for _, e := range dump {
		del, err := c.DeleteStale(e)
		if err != nil {
			t.Fatal(err)
		}
		if del != nil {
			c.Delete = append(c.Delete, del)
		}
	}
	if len(c.Stale) != 0 {
		t.Fatalf("%d stale flows not found in the dump", len(c.Stale))
	}
}

func TestDiff(t *testing.T) {
	c := baseCluster()
	desired := Flows(n1Config, Compute(n1Config, c, tables), Ports{Uplink: 1})
	if got := Diff(desired, NewInstalled(nil)); len(got.Add) != len(desired) || len(got.Delete) != 0 {
		t.Fatalf("into an empty bridge: %d adds %d deletes, want %d adds", len(got.Add), len(got.Delete), len(desired))
	}
	// Someone else's flow with the same match as one of ours is not ours.
	foreign := *desired[0]
	foreign.Cookie = 0x1234
	dump := dumpedAs(t, append(slices.Clone(desired), &foreign))
	installed := NewInstalled(dump)
	if got := Diff(desired, installed); !got.Empty() {
		t.Fatalf("nothing changed, yet %d adds %d deletes", len(got.Add), len(got.Delete))
	}

	// The LB IP changes: exactly the SNAT flows and the reply flow change.
	c.Services["shop/web"] = lbService("shop", "web", "192.0.2.77", "2001:db8::10")
	next := Flows(n1Config, Compute(n1Config, c, tables), Ports{Uplink: 1})
	got := Diff(next, installed)
	if len(got.Delete) != 0 || len(got.Stale) != 1 {
		t.Fatalf("LB IP change against a dump: %d deletes, %d stale; want the dump's one stale flow", len(got.Delete), len(got.Stale))
	}
	resolveStale(t, &got, dump)
	var kinds []FlowKind
	for _, fm := range got.Add {
		kinds = append(kinds, FlowKind(fm.Cookie>>40&0xff))
	}
	if len(got.Add) != 3 || len(got.Delete) != 1 {
		t.Fatalf("LB IP change: adds %v (kinds %v), %d deletes; want 2 SNAT + 1 reply added, the old reply flow deleted", got.Add, kinds, len(got.Delete))
	}
	if d := got.Delete[0]; d.Command != openflow.FlowDeleteStrict || d.CookieMask != ^uint64(0) || FlowKind(d.Cookie>>40&0xff) != KindReplyCT {
		t.Fatalf("delete %v: want a strict, cookie-exact delete of the old reply flow", d)
	}

	// The index of flows as sent is the index of their dump, so diffing
	// against flows as last applied is diffing against the bridge.
	sent := InstalledOf(next)
	if want := NewInstalled(dumpedAs(t, next)); !maps.Equal(sent.flows, want.flows) {
		t.Fatalf("InstalledOf: %d flows indexed, want the %d of a dump", sent.Len(), want.Len())
	}
	if again := Diff(next, sent); !again.Empty() {
		t.Fatalf("against the flows as sent, the same flows differ: %d adds %d deletes", len(again.Add), len(again.Delete))
	}

	// The service goes away: all of its flows and the shared flows of
	// hosting (the reply table) go; the pod guard's stay, and so does the
	// foreign flow. Against flows as sent, the
	// deletes come at once; against a dump, from the second dump; they are
	// the same.
	c.EgressServices = nil
	none := Flows(n1Config, Compute(n1Config, c, tables), Ports{Uplink: 1})
	for _, f := range none {
		if f.Cookie>>8&0xffffffff != 0 || f.Table == TableReply {
			t.Fatalf("no service: %v remains", f)
		}
	}
	if none[0].Cookie != MarkerCookie {
		t.Fatalf("no service: %v, want the marker first", none)
	}
	gone := len(desired) - len(none)
	got = Diff(none, installed)
	if len(got.Add) != 0 || len(got.Delete) != 0 || len(got.Stale) != gone {
		t.Fatalf("service removed: %d adds %d deletes %d stale, want %d stale", len(got.Add), len(got.Delete), len(got.Stale), gone)
	}
	resolveStale(t, &got, dump)
	direct := Diff(none, InstalledOf(desired))
	if len(got.Delete) != gone || len(direct.Delete) != gone || len(direct.Stale) != 0 {
		t.Fatalf("service removed: %d deletes from the dump, %d from flows as sent, want %d", len(got.Delete), len(direct.Delete), gone)
	}
	deletes := map[string]bool{}
	for _, d := range direct.Delete {
		deletes[d.String()] = true
	}
	for _, d := range got.Delete {
		if !deletes[d.String()] || d.Command != openflow.FlowDeleteStrict || d.CookieMask != ^uint64(0) {
			t.Errorf("delete from the dump %v: want a strict, cookie-exact delete, as from the flows as sent", d)
		}
	}
}

// The agent diffs a full sync group by group against one index of the
// bridge: the same changes as one Diff of every flow. A flow that moved to
// another group (same FlowID, new cookie) is replaced by its add alone.
func TestDiffInParts(t *testing.T) {
	c := baseCluster()
	c.EgressServices = append(c.EgressServices, egressService("shop", "db", "", "", "n1"))
	c.Services["shop/db"] = lbService("shop", "db", "192.0.2.20")
	c.EndpointSlices["shop/db"] = []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1.9")}
	before := Flows(n1Config, Compute(n1Config, c, tables), Ports{Uplink: 1})
	dump := dumpedAs(t, before)

	// One service's flows go, and one flow changes group.
	c.EgressServices = c.EgressServices[:1]
	desired := Flows(n1Config, Compute(n1Config, c, tables), Ports{Uplink: 1})
	moved := *desired[0]
	moved.Cookie = Cookie(FlowKind(moved.Cookie>>40&0xff), "other/service")
	desired[0] = &moved
	whole := Diff(desired, NewInstalled(dump))

	bridge := NewInstalled(dump)
	var parts Changes
	byGroup := map[uint64][]*openflow.FlowMod{}
	for _, fm := range desired {
		g := fm.Cookie & ServiceCookieMask
		byGroup[g] = append(byGroup[g], fm)
	}
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		parts.DiffFlows(byGroup[g], bridge)
	}
	parts.DeleteRest(bridge)
	if bridge.Len() != 0 {
		t.Fatalf("DeleteRest left %d flows in the index", bridge.Len())
	}
	if len(whole.Add) != 1 || whole.Add[0] != &moved || len(whole.Delete) != 0 {
		t.Fatalf("Diff: %d adds %d deletes, want the moved flow's add alone", len(whole.Add), len(whole.Delete))
	}
	if len(whole.Stale) == 0 || !maps.Equal(parts.Stale, whole.Stale) || !slices.Equal(parts.Add, whole.Add) || len(parts.Delete) != 0 {
		t.Fatalf("in parts: %d adds %d stale, at once: %d adds %d stale; want the same, some stale", len(parts.Add), len(parts.Stale), len(whole.Add), len(whole.Stale))
	}
}
