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
	installed := NewInstalled(append(dumped, &foreign))
	if got := Diff(desired, installed); !got.Empty() {
		t.Fatalf("nothing changed, yet %d adds %d deletes", len(got.Add), len(got.Delete))
	}

	// The LB IP changes: exactly the SNAT flows and the reply flow change.
	c.Services["shop/web"] = lbService("shop", "web", "192.0.2.77", "2001:db8::10")
	next := Flows(Compute(n1Config, c, tables), Ports{Uplink: 1})
	got := Diff(next, installed)
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
	if want := NewInstalled(dumpedAs(next)); !reflect.DeepEqual(sent.groups, want.groups) {
		t.Fatalf("InstalledOf: %d flows indexed, want the %d of a dump", sent.Len(), want.Len())
	}
	if again := Diff(next, sent); !again.Empty() {
		t.Fatalf("against the flows as sent, the same flows differ: %d adds %d deletes", len(again.Add), len(again.Delete))
	}

	// The service goes away: all of its flows and the shared ones go.
	c.EgressServices = nil
	got = Diff(Flows(Compute(n1Config, c, tables), Ports{Uplink: 1}), installed)
	if len(got.Add) != 0 || len(got.Delete) != len(desired) {
		t.Fatalf("service removed: %d adds %d deletes, want %d deletes", len(got.Add), len(got.Delete), len(desired))
	}
}
