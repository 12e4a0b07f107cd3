package dataplane

import (
	"reflect"
	"testing"

	"github.com/egressflow/egressflow/openflow"
)

// dumpedAs turns flow mods into what a dump of the bridge would return.
func dumpedAs(fms []*openflow.FlowMod) []*openflow.Flow {
	var out []*openflow.Flow
	for _, fm := range fms {
		out = append(out, &openflow.Flow{Table: fm.Table, Priority: fm.Priority, Cookie: fm.Cookie, Match: fm.Match, Instructions: fm.Instructions})
	}
	return out
}

// resolveStale turns the stale flows of a diff against a dump into their
// deletes, as the agent does with a second dump, and checks that every one
// was found there.
func resolveStale(t *testing.T, c *Changes, dump []*openflow.Flow) {
	t.Helper()
	for _, f := range dump {
		if del := c.DeleteStale(f); del != nil {
			c.Delete = append(c.Delete, del)
		}
	}
	if len(c.Stale) != 0 {
		t.Fatalf("%d stale flows not found in the dump", len(c.Stale))
	}
}

// states is an index's flows without how they were given.
func states(in *Installed) map[uint32]map[uint64]flowState {
	out := map[uint32]map[uint64]flowState{}
	for g, flows := range in.groups {
		out[g] = map[uint64]flowState{}
		for id, f := range flows {
			out[g][id] = f.state
		}
	}
	return out
}

func TestDiff(t *testing.T) {
	c := baseCluster()
	desired := Flows(Compute(n1Config, c, tables), Ports{Uplink: 1})
	if got := Diff(desired, NewInstalled(nil)); len(got.Add) != len(desired) || len(got.Delete) != 0 {
		t.Fatalf("into an empty bridge: %d adds %d deletes, want %d adds", len(got.Add), len(got.Delete), len(desired))
	}
	dumped := dumpedAs(desired)
	// Someone else's flow with the same match as one of ours is not ours.
	foreign := *dumped[0]
	foreign.Cookie = 0x1234
	dump := append(dumped, &foreign)
	installed := NewInstalled(dump)
	if got := Diff(desired, installed); !got.Empty() {
		t.Fatalf("nothing changed, yet %d adds %d deletes", len(got.Add), len(got.Delete))
	}

	// The LB IP changes: exactly the SNAT flows and the reply flow change.
	c.Services["shop/web"] = lbService("shop", "web", "192.0.2.77", "2001:db8::10")
	next := Flows(Compute(n1Config, c, tables), Ports{Uplink: 1})
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
	if want := NewInstalled(dumpedAs(next)); !reflect.DeepEqual(states(sent), states(want)) {
		t.Fatalf("InstalledOf: %d flows indexed, want the %d of a dump", sent.Len(), want.Len())
	}
	if again := Diff(next, sent); !again.Empty() {
		t.Fatalf("against the flows as sent, the same flows differ: %d adds %d deletes", len(again.Add), len(again.Delete))
	}

	// The service goes away: all of its flows and the shared ones go, the
	// foreign flow stays. Against flows as sent, the deletes come at once;
	// against a dump, from the second dump; they are the same.
	c.EgressServices = nil
	none := Flows(Compute(n1Config, c, tables), Ports{Uplink: 1})
	got = Diff(none, installed)
	if len(got.Add) != 0 || len(got.Delete) != 0 || len(got.Stale) != len(desired) {
		t.Fatalf("service removed: %d adds %d deletes %d stale, want %d stale", len(got.Add), len(got.Delete), len(got.Stale), len(desired))
	}
	resolveStale(t, &got, dump)
	direct := Diff(none, InstalledOf(desired))
	if len(got.Delete) != len(desired) || len(direct.Delete) != len(desired) || len(direct.Stale) != 0 {
		t.Fatalf("service removed: %d deletes from the dump, %d from flows as sent, want %d", len(got.Delete), len(direct.Delete), len(desired))
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
