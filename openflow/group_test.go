package openflow_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// testGroups are one group of each type, with every bucket property this
// package models: what the ECMP next hops (select) and their fail-over
// (fast failover) need.
func testGroups() []openflow.GroupDesc {
	return []openflow.GroupDesc{
		{Type: openflow.GroupTypeSelect, GroupID: 7, Buckets: []openflow.Bucket{
			{ID: 0, Weight: 100, Actions: []openflow.Action{openflow.SetFieldUint(openflow.FieldEthDst, 0x0a0000000001), openflow.Output{Port: 1}}},
			{ID: 1, Weight: 50, Actions: []openflow.Action{openflow.SetFieldUint(openflow.FieldEthDst, 0x0a0000000002), openflow.Output{Port: 2}}},
		}},
		{Type: openflow.GroupTypeFastFailover, GroupID: 8, Buckets: []openflow.Bucket{
			{ID: 0, WatchPort: 1, Actions: []openflow.Action{openflow.Output{Port: 1}}},
			{ID: 1, WatchPort: 2, Actions: []openflow.Action{openflow.Output{Port: 2}}},
		}},
		{Type: openflow.GroupTypeIndirect, GroupID: 9, Buckets: []openflow.Bucket{{ID: 0, Actions: []openflow.Action{openflow.Output{Port: 3}}}}},
		{Type: openflow.GroupTypeAll, GroupID: 10, Buckets: []openflow.Bucket{
			{ID: 0, Actions: []openflow.Action{openflow.Output{Port: 1}}},
			{ID: 1, Actions: []openflow.Action{openflow.Output{Port: 2}}},
		}},
	}
}

// ofctlGroups returns the group lines of `ovs-ofctl dump-groups`, sorted.
func ofctlGroups(t testing.TB, sw *ovstest.Switch) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(sw.Ofctl(t, "--no-names", "dump-groups", sw.Bridge), "\n") {
		if strings.HasPrefix(l, " ") {
			lines = append(lines, strings.TrimPrefix(l, " "))
		}
	}
	slices.Sort(lines)
	return lines
}

func groupLines(groups []openflow.GroupDesc) []string {
	var lines []string
	for i := range groups {
		lines = append(lines, groups[i].String())
	}
	slices.Sort(lines)
	return lines
}

// TestGroupsRoundTrip installs groups, and a flow that uses one, in one
// bundle on a real switch, and checks that the switch holds what was sent:
// ovs-ofctl prints each as GroupDesc.String does, and Groups reads them
// back as they were sent, byte for byte. It then modifies, edits the
// buckets of, and deletes groups, the switch agreeing at each step.
func TestGroupsRoundTrip(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 30*time.Second)
	groups := testGroups()
	msgs := []openflow.Message{}
	for i := range groups {
		msgs = append(msgs, groups[i].GroupMod())
	}
	msgs = append(msgs, oftest.MustParseFlow(t, "table=0, priority=10,ip,nw_dst=192.0.2.0/24 actions=group:7"))
	if err := c.Bundle(ctx, msgs...); err != nil {
		t.Fatalf("Bundle of groups and a flow: %v", err)
	}
	check := func(step string, want []openflow.GroupDesc) {
		t.Helper()
		if got, want := ofctlGroups(t, sw), groupLines(want); !slices.Equal(got, want) {
			t.Fatalf("%s: ovs-ofctl dump-groups differs from String():\n%s", step, oftest.LineDiff(got, want))
		}
		dumped, err := c.Groups(ctx)
		if err != nil {
			t.Fatalf("%s: Groups: %v", step, err)
		}
		if len(dumped) != len(want) {
			t.Fatalf("%s: dumped %d groups, want %d", step, len(dumped), len(want))
		}
		for i := range want {
			j := slices.IndexFunc(dumped, func(g openflow.GroupDesc) bool { return g.GroupID == want[i].GroupID })
			if j < 0 {
				t.Fatalf("%s: group %d was not dumped", step, want[i].GroupID)
			}
			sent, _ := openflow.AppendGroupDesc(&want[i], nil)
			back, _ := openflow.AppendGroupDesc(&dumped[j], nil)
			if string(sent) != string(back) {
				t.Errorf("%s: group %d dumps back as different bytes:\n%s", step, want[i].GroupID, oftest.HexDiff(back, sent))
			}
		}
	}
	check("added", groups)

	// Modify replaces a group's type and buckets.
	groups[3] = openflow.GroupDesc{Type: openflow.GroupTypeSelect, GroupID: 10, Buckets: []openflow.Bucket{{ID: 4, Weight: 1, Actions: []openflow.Action{openflow.Output{Port: 3}}}}}
	modify := groups[3].GroupMod()
	modify.Command = openflow.GroupModify
	if err := c.Bundle(ctx, modify); err != nil {
		t.Fatalf("modify: %v", err)
	}
	check("modified", groups)

	// Buckets inserted at the end and removed by ID.
	extra := openflow.Bucket{ID: 2, Weight: 10, Actions: []openflow.Action{openflow.SetFieldUint(openflow.FieldEthDst, 0x0a0000000003), openflow.Output{Port: 3}}}
	insert := &openflow.GroupMod{Command: openflow.GroupInsertBucket, Type: openflow.GroupTypeSelect, GroupID: 7, CommandBucketID: openflow.BucketLast, Buckets: []openflow.Bucket{extra}}
	remove := &openflow.GroupMod{Command: openflow.GroupRemoveBucket, Type: openflow.GroupTypeSelect, GroupID: 7, CommandBucketID: 0}
	if err := c.Bundle(ctx, insert, remove); err != nil {
		t.Fatalf("insert and remove buckets: %v", err)
	}
	groups[0].Buckets = []openflow.Bucket{groups[0].Buckets[1], extra}
	check("buckets edited", groups)

	// A bundle whose group mod the switch refuses (group 8 exists) changes
	// nothing, groups or flows.
	flowsBefore := oftest.OfctlFlows(t, sw, "--no-stats")
	err := c.Bundle(ctx, &openflow.GroupMod{Command: openflow.GroupDelete, GroupID: 9}, groups[1].GroupMod())
	var be *ofconn.BundleError
	if !errors.As(err, &be) || !be.Discarded || len(be.Failed) != 1 || be.Failed[0].Index != 1 {
		t.Fatalf("a bundle adding an existing group: %v, want message 1 refused and the bundle discarded", err)
	}
	check("after a refused bundle", groups)
	if after := oftest.OfctlFlows(t, sw, "--no-stats"); !slices.Equal(after, flowsBefore) {
		t.Fatalf("a refused bundle changed the flows:\n%s", oftest.LineDiff(after, flowsBefore))
	}

	// Deleting a group deletes the flows that use it.
	if err := c.Bundle(ctx, &openflow.GroupMod{Command: openflow.GroupDelete, GroupID: 7}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	check("group 7 deleted", append(groups[1:2:2], groups[2:]...))
	if flows := oftest.OfctlFlows(t, sw, "--no-stats"); slices.ContainsFunc(flows, func(f string) bool { return strings.Contains(f, "group:7") }) {
		t.Errorf("the flow that used group 7 outlived it: %q", flows)
	}
}

// TestGroupModString checks the text of each command: the group as
// dump-groups prints it after the command, a bucket edit's bucket, a
// delete's ID alone.
func TestGroupModString(t *testing.T) {
	g := testGroups()[2]
	for _, tc := range []struct {
		m    *openflow.GroupMod
		want string
	}{
		{g.GroupMod(), "add group_id=9,type=indirect,bucket=bucket_id:0,actions=output:3"},
		{&openflow.GroupMod{Command: openflow.GroupModify, Type: openflow.GroupTypeIndirect, GroupID: 9, Buckets: g.Buckets}, "modify group_id=9,type=indirect,bucket=bucket_id:0,actions=output:3"},
		{&openflow.GroupMod{Command: openflow.GroupRemoveBucket, GroupID: 9, CommandBucketID: 0}, "remove_bucket group_id=9,command_bucket_id=0,type=all"},
		{&openflow.GroupMod{Command: openflow.GroupDelete, GroupID: 9, Type: openflow.GroupTypeSelect}, "delete group_id=9"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

// TestHashSelectionOnSwitch: a select group that ovs-ofctl adds with
// `selection_method=hash,fields(...)` dumps back with HashSelection's
// bytes as its property, and a group this package adds with HashSelection
// reads back in ovs-ofctl as that selection method over those fields.
func TestHashSelectionOnSwitch(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 30*time.Second)
	fields := []openflow.Field{openflow.FieldIPv4Src, openflow.FieldIPv4Dst, openflow.FieldIPv6Src, openflow.FieldIPv6Dst, openflow.FieldIPProto, openflow.FieldTCPSrc, openflow.FieldTCPDst, openflow.FieldUDPSrc, openflow.FieldUDPDst}
	const text = "selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst)"
	sw.Ofctl(t, "add-group", sw.Bridge, "group_id=1,type=select,"+text+",bucket=bucket_id:0,weight:100,actions=output:1")
	ours := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeSelect, GroupID: 2, Properties: openflow.HashSelection(fields...),
		Buckets: []openflow.Bucket{{ID: 0, Weight: 100, Actions: []openflow.Action{openflow.Output{Port: 1}}}}}
	if err := c.Bundle(ctx, ours); err != nil {
		t.Fatalf("a group with HashSelection: %v", err)
	}
	dumped, err := c.Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(dumped) != 2 {
		t.Fatalf("dumped %d groups, want 2", len(dumped))
	}
	for _, g := range dumped {
		if !bytes.Equal(g.Properties, ours.Properties) {
			t.Errorf("group %d's property:\n%s", g.GroupID, oftest.HexDiff(g.Properties, ours.Properties))
		}
	}
	lines := ofctlGroups(t, sw)
	for _, l := range lines {
		if !strings.Contains(l, ",type=select,"+text+",") {
			t.Errorf("ovs-ofctl reads %q, want %s", l, text)
		}
	}
	// This package prints the groups as ovs-ofctl does, selection method
	// included (both sorted: a switch dumps its groups in no set order).
	if got := groupLines(dumped); !slices.Equal(got, lines) {
		t.Errorf("this package prints\n%s\novs-ofctl prints\n%s", strings.Join(got, "\n"), strings.Join(lines, "\n"))
	}
}
