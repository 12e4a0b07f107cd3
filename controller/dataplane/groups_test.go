package dataplane

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/openflow"
)

// hopsPart is a toy part that uses a group, as next hops do: one flow per
// source address sends the source's packets through the part's group,
// whose buckets output to ports.
type hopsPart struct {
	key     string
	group   uint32
	typ     openflow.GroupType
	sources []netip.Addr
	ports   []uint32
}

func (p hopsPart) FlowRole() Role { return "Hops" }

func (p hopsPart) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, _ Ports) []*openflow.FlowMod {
	insts := []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Group{ID: p.group}}}}
	for _, src := range p.sources {
		fm := b.Add(Cookie(APIExternalRoute.Kind(1), p.key), TableEgress, 7, insts)
		fm.Match.SetUint(openflow.FieldEthType, 0x0800)
		setIP(&fm.Match, src, srcField(src))
		dst = append(dst, fm)
	}
	return dst
}

func (p hopsPart) AppendGroups(dst []*openflow.GroupMod, _ Ports) []*openflow.GroupMod {
	g := &openflow.GroupMod{Command: openflow.GroupAdd, Type: p.typ, GroupID: p.group}
	for i, port := range p.ports {
		bucket := openflow.Bucket{ID: uint32(i), Actions: []openflow.Action{openflow.Output{Port: port}}}
		switch p.typ {
		case openflow.GroupTypeSelect:
			bucket.Weight = 100
		case openflow.GroupTypeFastFailover:
			bucket.WatchPort = port
		}
		g.Buckets = append(g.Buckets, bucket)
	}
	return append(dst, g)
}

// partsDesired is a Desired that is a map of parts.
type partsDesired map[string]Part

func (d partsDesired) Part(key string) (Part, bool) {
	part, ok := d[key]
	return part, ok
}
func (d partsDesired) Keys() []string { return slices.Sorted(maps.Keys(d)) }
func (d partsDesired) Shared() Shared { return Shared{} }

// groupSwitch is a switch's flow and group tables as these tests see
// them, and what OVS checks of the order of a bundle's messages: a flow
// may only name a group that exists, a group is added only if it does not
// exist and modified only if it does, and deleting a group deletes the
// flows that use it.
type groupSwitch struct {
	flows  bridgeModel
	groups map[uint32]*openflow.GroupMod
}

// foreignGroup is another controller's group: no sync may touch it.
var foreignGroup = &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeIndirect, GroupID: 5,
	Buckets: []openflow.Bucket{{ID: 0, Actions: []openflow.Action{openflow.Output{Port: 9}}}}}

// apply applies a bundle's messages in order, or none of them: it
// returns the first a switch would refuse.
func (s *groupSwitch) apply(t *testing.T, msgs []openflow.Message) error {
	t.Helper()
	flows := maps.Clone(s.flows)
	groups := maps.Clone(s.groups)
	for i, m := range msgs {
		switch m := m.(type) {
		case *openflow.GroupMod:
			_, exists := groups[m.GroupID]
			switch m.Command {
			case openflow.GroupAdd, openflow.GroupModify:
				if exists != (m.Command == openflow.GroupModify) {
					return fmt.Errorf("message %d: %s: the group exists: %v", i, m, exists)
				}
				groups[m.GroupID] = m
			case openflow.GroupDelete:
				delete(groups, m.GroupID)
				for id, fm := range flows {
					if group, ok := groupOf(fm); ok && group == m.GroupID {
						delete(flows, id)
					}
				}
			}
		case *openflow.FlowMod:
			if group, ok := groupOf(m); ok && m.Command == openflow.FlowAdd && groups[group] == nil {
				return fmt.Errorf("message %d: %s names group %#x, which does not exist", i, m, group)
			}
			flows.apply(t, []*openflow.FlowMod{m})
		}
	}
	s.flows, s.groups = flows, groups
	return nil
}

// groupOf is the group a flow's actions name, if any.
func groupOf(fm *openflow.FlowMod) (uint32, bool) {
	for _, inst := range fm.Instructions {
		if apply, ok := inst.(openflow.ApplyActions); ok {
			for _, a := range apply.Actions {
				if g, ok := a.(openflow.Group); ok {
					return g.ID, true
				}
			}
		}
	}
	return 0, false
}

// groupLinesOf are groups as text, without their commands, sorted.
func groupLinesOf(groups map[uint32]*openflow.GroupMod) []string {
	var out []string
	for _, g := range groups {
		add := *g
		add.Command = openflow.GroupAdd
		out = append(out, add.String())
	}
	slices.Sort(out)
	return out
}

// TestLedgerGroupsConverge drives a ledger through random histories of
// parts that use groups (added, removed, moved to another group ID or
// type, their buckets changed), of failed and lost bundles, and of
// bridges that restart empty or with stale groups of egressflow's, and
// checks every bundle against the order a switch enforces (groupSwitch)
// and every successful sync against its specification: the bridge holds
// exactly each desired part's flows and groups, the shared flows, and the
// foreign flow and group.
func TestLedgerGroupsConverge(t *testing.T) {
	keys := []string{"Hops/a/x", "Hops/a/y", "Hops/b/x", "Hops/c/z"}
	types := []openflow.GroupType{openflow.GroupTypeSelect, openflow.GroupTypeFastFailover, openflow.GroupTypeIndirect}
	ports := Ports{Uplink: 1, BridgeMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 29))
		desired := partsDesired{}
		sw := &groupSwitch{flows: bridgeModel{FlowID(foreignFlow): foreignFlow}, groups: map[uint32]*openflow.GroupMod{foreignGroup.GroupID: foreignGroup}}
		l := NewLedger()
		for step := range 40 {
			var changed []string
			for range 1 + r.IntN(2) {
				k := keys[r.IntN(len(keys))]
				changed = append(changed, k)
				if r.IntN(4) == 0 {
					delete(desired, k)
					continue
				}
				// Two group IDs per key: a part may move between them.
				i := slices.Index(keys, k)
				part := hopsPart{key: k, group: GroupIDPrefix | uint32(2*i+r.IntN(2)), typ: types[r.IntN(len(types))]}
				for range 1 + r.IntN(3) {
					part.ports = append(part.ports, uint32(2+r.IntN(4)))
				}
				if part.typ == openflow.GroupTypeIndirect {
					part.ports = part.ports[:1]
				}
				for j := range 1 + r.IntN(2) {
					part.sources = append(part.sources, netip.AddrFrom4([4]byte{10, byte(i), byte(j), byte(r.IntN(3))}))
				}
				slices.SortFunc(part.sources, netip.Addr.Compare)
				part.sources = slices.Compact(part.sources)
				desired[k] = part
			}
			l.Changed(desired, changed)
			switch r.IntN(8) {
			case 0: // the bridge restarts empty
				sw.flows = bridgeModel{FlowID(foreignFlow): foreignFlow}
				sw.groups = map[uint32]*openflow.GroupMod{foreignGroup.GroupID: foreignGroup}
				l.Forget()
			case 1: // a stale group of egressflow's, left by a predecessor
				stale := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeIndirect, GroupID: GroupIDPrefix | 0x77,
					Buckets: []openflow.Bucket{{Actions: []openflow.Action{openflow.Output{Port: 3}}}}}
				sw.groups[stale.GroupID] = stale
				l.Forget()
			}
			fail := r.IntN(6) == 0
			ok := syncGroups(t, l, desired, ports, sw, fail)
			if fail || !ok {
				continue
			}
			want := SharedFlows(Shared{}, ports)
			wantGroups := map[uint32]*openflow.GroupMod{foreignGroup.GroupID: foreignGroup}
			var buf FlowBuffer
			for _, k := range desired.Keys() {
				want = desired[k].AppendFlows(&buf, want, ports)
				for _, g := range desired[k].(Grouper).AppendGroups(nil, ports) {
					wantGroups[g.GroupID] = g
				}
			}
			if err := sw.flows.holds(want, foreignFlow); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if got, want := groupLinesOf(sw.groups), groupLinesOf(wantGroups); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: the bridge's groups\n%s\nwant\n%s", seed, step, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
}

// syncGroups is the agent's apply step over a groupSwitch: it diffs
// (against the bridge as read when the ledger needs it), encodes each send
// in the order a bundle carries it (Changes), and applies the bundle, or,
// when fail, loses it, the outcome unknown. It reports whether the bundle
// was applied; a bundle the switch refuses fails the test.
func syncGroups(t *testing.T, l *Ledger, desired Desired, ports Ports, sw *groupSwitch, fail bool) bool {
	t.Helper()
	var read *Installed
	if l.NeedsRead(ports) {
		read = NewInstalled(sw.flows.dump(t))
		var groups []openflow.GroupDesc
		for _, g := range sw.groups {
			groups = append(groups, openflow.GroupDesc{Type: g.Type, GroupID: g.GroupID, Buckets: g.Buckets})
		}
		read.AddGroups(groups)
	}
	var msgs []openflow.Message
	d, err := l.Diff(desired, ports, read, DiffOutput{
		Send: func(c *Changes) error {
			for _, m := range c.AddGroups {
				msgs = append(msgs, m)
			}
			for _, fm := range slices.Concat(c.Delete, c.Add) {
				cp := *fm
				cp.Match = fm.Match.Clone()
				msgs = append(msgs, &cp)
			}
			for _, m := range c.DeleteGroups {
				msgs = append(msgs, m)
			}
			c.Delete, c.Add, c.AddGroups, c.DeleteGroups = c.Delete[:0], c.Add[:0], nil, nil
			return nil
		},
		Dump: func(fn func(openflow.FlowEntry) error) error {
			for _, e := range sw.flows.dump(t) {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	if fail {
		l.Forget()
		return false
	}
	if err := sw.apply(t, msgs); err != nil {
		t.Fatalf("the switch refuses the bundle: %v", err)
	}
	l.Commit(d)
	l.StaleSources()
	l.Flushed()
	return true
}

// TestLedgerGroupConflicts checks that a plan that gives one group ID to
// two parts, or an ID outside egressflow's range, is an error of Diff
// rather than a bundle the switch refuses over and over.
func TestLedgerGroupConflicts(t *testing.T) {
	ports := Ports{Uplink: 1}
	a := hopsPart{key: "Hops/a/x", group: GroupIDPrefix | 1, typ: openflow.GroupTypeIndirect, ports: []uint32{2}}
	b := a
	b.key = "Hops/a/y"
	foreign := a
	foreign.group = 1
	for name, tc := range map[string]struct {
		desired partsDesired
		want    string
	}{
		"shared ID":  {partsDesired{a.key: a, b.key: b}, "wanted by both Hops/a/x and Hops/a/y"},
		"foreign ID": {partsDesired{a.key: foreign}, "outside egressflow's"},
	} {
		l := NewLedger()
		l.Changed(tc.desired, tc.desired.Keys())
		_, err := l.Diff(tc.desired, ports, NewInstalled(nil), DiffOutput{Send: func(*Changes) error { return nil }})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Diff: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

// TestGroupDeletes checks that the uninstall's group deletes name every
// group of egressflow's range, and no other controller's.
func TestGroupDeletes(t *testing.T) {
	groups := []openflow.GroupDesc{{GroupID: 5}, {GroupID: GroupIDPrefix | 9}, {GroupID: GroupIDPrefix}, {GroupID: 0xee000001}, {GroupID: GroupIDPrefix | 0xffffff}}
	var got []string
	for _, g := range GroupDeletes(groups) {
		got = append(got, g.String())
	}
	want := []string{"delete group_id=4009754624", "delete group_id=4009754633", "delete group_id=4026531839"}
	if !slices.Equal(got, want) {
		t.Errorf("GroupDeletes = %q, want %q", got, want)
	}
}
