package openflow_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// TestPauseAndResume on a real switch: a flow whose controller(pause)
// comes before an output to the controller. The packet reaches a
// connection that asked for NXT_PACKET_IN2 paused, and goes no further until that connection resumes it; then
// the rest of the flow's actions run (the second packet-in, not paused).
func TestPauseAndResume(t *testing.T) {
	sw := ovstest.Start(t)
	got := make(chan *openflow.PacketIn2, 4)
	c := oftest.DialSwitch(t, sw, ofconn.WithUnsolicited(func(_ openflow.Header, m openflow.Message) {
		if pi, ok := m.(*openflow.PacketIn2); ok {
			got <- pi
		}
	}))
	ctx := oftest.TestCtx(t, 30*time.Second)
	if err := c.Send(ctx, &openflow.SetConfig{openflow.SwitchConfig{MissSendLen: 0xffff}}, &openflow.SetPacketInFormat{Format: openflow.PacketInNX2}); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	fm, err := flowtext.ParseFlow("cookie=0x77, table=3, priority=10, udp, actions=controller(pause),CONTROLLER:65535")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendFlowMods(ctx, fm); err != nil {
		t.Fatal(err)
	}
	if flows := oftest.OfctlFlows(t, sw, "table=3"); len(flows) != 1 || !strings.HasSuffix(flows[0], "udp actions=controller(pause),CONTROLLER:65535") {
		t.Fatalf("ovs-ofctl reads the flow as %q", flows)
	}
	packet := oftest.MustHex(t, "ffffffffffff0011223344550800450000140001000040117cca0a0000010a000002"+"0035c35500080000")
	var fromController openflow.Match
	fromController.SetUint(openflow.FieldInPort, uint64(openflow.PortController))
	if err := c.SendPacketOut(ctx, &openflow.PacketOut{BufferID: openflow.NoBuffer, Match: fromController, Actions: []openflow.Action{openflow.ResubmitTable(3)}, Data: packet}); err != nil {
		t.Fatal(err)
	}
	next := func(what string) *openflow.PacketIn2 {
		t.Helper()
		select {
		case pi := <-got:
			return pi
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
			return nil
		}
	}
	paused := next("paused packet-in")
	// (A packet injected by a packet-out is reported with the packet-out's
	// table and cookie, 0, not the flow's; the agent's tests see the
	// flow's cookie on packets that enter through a port.)
	if !paused.Paused || paused.Reason != openflow.PacketInApplyAction || !bytes.Equal(paused.Data, packet) {
		t.Fatalf("first packet-in: paused %v, reason %d, data %x", paused.Paused, paused.Reason, paused.Data)
	}
	select {
	case pi := <-got:
		t.Fatalf("the pipeline went on before the resume: packet-in paused %v", pi.Paused)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.Send(ctx, paused.Resume()); err != nil {
		t.Fatal(err)
	}
	resumed := next("packet-in after the resume")
	if resumed.Paused || !bytes.Equal(resumed.Data, packet) {
		t.Errorf("after the resume: paused %v, data %x", resumed.Paused, resumed.Data)
	}
}
