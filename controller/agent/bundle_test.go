package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
)

// recordingSwitch records the bundles a bundleStream sends.
type recordingSwitch struct {
	Switch  // only BeginBundle is called
	bundles []*recordedBundle
	failAdd error // returned by every Add
}

func (s *recordingSwitch) BeginBundle(context.Context) (Bundle, error) {
	b := &recordedBundle{failAdd: s.failAdd}
	s.bundles = append(s.bundles, b)
	return b, nil
}

type recordedBundle struct {
	parts     [][]string // each part's messages as text
	failAdd   error
	committed bool
	discarded bool
}

func (b *recordedBundle) Add(_ context.Context, msgs openflow.Sequence) error {
	var part []string
	for i := range msgs.Len() {
		part = append(part, describe(msgs.At(i)))
	}
	b.parts = append(b.parts, part)
	return b.failAdd
}

func (b *recordedBundle) Commit(context.Context) error { b.committed = true; return nil }
func (b *recordedBundle) Discard()                     { b.discarded = true }

// describe is a flow mod's text, whether sent as itself or encoded ahead.
func describe(m openflow.Message) string {
	if raw, ok := m.(*openflow.RawMessage); ok {
		decoded, err := raw.Decode()
		if err != nil {
			return "undecodable: " + err.Error()
		}
		m = decoded
	}
	return m.(*openflow.FlowMod).String()
}

// TestBundleStream: a sync's changes reach the switch as one bundle, in
// parts of about bundlePartBytes, each group's deletes before its adds and
// the groups in the order given; a sync that changes nothing opens no
// bundle; a failed part is reported and the bundle discarded.
func TestBundleStream(t *testing.T) {
	ctx := context.Background()
	flow := func(group, i int, cmd openflow.FlowModCommand) *openflow.FlowMod {
		fm, err := flowtext.ParseFlow(fmt.Sprintf("cookie=0x%x, table=3, priority=100,ip,nw_src=10.%d.%d.%d actions=drop", group<<8, group/256, group%256, i))
		if err != nil {
			t.Fatal(err)
		}
		fm.Command = cmd
		return fm
	}

	sw := &recordingSwitch{}
	stream := bundleStream{sw: sw}
	var c dataplane.Changes
	if err := stream.add(ctx, &c); err != nil {
		t.Fatal(err)
	}
	if err := stream.commit(ctx); stream.sent != 0 || err != nil || len(sw.bundles) != 0 || stream.opened() {
		t.Fatalf("no changes: sent %d (%v), %d bundles opened", stream.sent, err, len(sw.bundles))
	}

	// Enough groups for several parts.
	sw = &recordingSwitch{}
	stream = bundleStream{sw: sw}
	var want []string
	const groups, perGroup = 6000, 4
	for g := 1; g <= groups; g++ {
		for i := range perGroup {
			c.Add = append(c.Add, flow(g, i, openflow.FlowAdd))
		}
		c.Delete = append(c.Delete, flow(g, 99, openflow.FlowDeleteStrict))
		want = append(want, c.Delete[0].String())
		for _, fm := range c.Add {
			want = append(want, fm.String())
		}
		if err := stream.add(ctx, &c); err != nil {
			t.Fatal(err)
		}
		if !c.Empty() {
			t.Fatalf("group %d: add left %d adds %d deletes in the changes", g, len(c.Add), len(c.Delete))
		}
	}
	if err := stream.commit(ctx); err != nil || stream.sent != len(want) {
		t.Fatalf("commit: %d sent (%v), want %d", stream.sent, err, len(want))
	}
	if len(sw.bundles) != 1 || !sw.bundles[0].committed || sw.bundles[0].discarded {
		t.Fatalf("%d bundles, want one, committed", len(sw.bundles))
	}
	parts := sw.bundles[0].parts
	if len(parts) < 2 {
		t.Fatalf("%d messages in %d part(s): want parts of about %d bytes", len(want), len(parts), bundlePartBytes)
	}
	var got []string
	for _, p := range parts {
		got = append(got, p...)
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages sent, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("message %d is %s, want %s", i, got[i], want[i])
		}
	}

	// A part the switch refuses: the error comes back, the bundle goes.
	refused := errors.New("connection lost")
	sw = &recordingSwitch{failAdd: refused}
	stream = bundleStream{sw: sw}
	c.Add = append(c.Add, flow(1, 1, openflow.FlowAdd))
	if err := stream.add(ctx, &c); err != nil {
		t.Fatal(err) // below a part's worth: not sent yet
	}
	if err := stream.commit(ctx); !errors.Is(err, refused) {
		t.Fatalf("commit after a refused part: %v", err)
	}
	stream.discard()
	if !stream.opened() || !sw.bundles[0].discarded || sw.bundles[0].committed {
		t.Fatalf("after a refused part: opened %v, discarded %v, committed %v", stream.opened(), sw.bundles[0].discarded, sw.bundles[0].committed)
	}
}
