package ofconn_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// Client behaviour that needs no real switch: keepalive, dead-peer
// detection, reconnection and a slow consumer, against the fake switch.

func dialFake(t *testing.T, fs *oftest.FakeSwitch, opts ...ofconn.Option) *ofconn.Client {
	t.Helper()
	c, err := ofconn.Dial(oftest.TestCtx(t, 5*time.Second), "unix:"+fs.Path, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDeadPeerDetection: a switch that stops answering is declared dead
// after the echo interval plus timeout; a call waiting on it fails then
// (not when its own context ends), and the client reconnects by itself.
func TestDeadPeerDetection(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	// A reconnection attempt made while the switch is silent hangs in its
	// handshake until the handshake timeout: keep that short too, or the
	// recovery below waits out the 10 s default.
	c := dialFake(t, fs, ofconn.WithEchoInterval(100*time.Millisecond), ofconn.WithEchoTimeout(200*time.Millisecond),
		ofconn.WithReconnectBackoff(20*time.Millisecond, 100*time.Millisecond), ofconn.WithHandshakeTimeout(300*time.Millisecond))
	if err := c.Barrier(oftest.TestCtx(t, 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	fs.SetSilent(true)
	start := time.Now()
	err := c.Barrier(oftest.TestCtx(t, 30*time.Second))
	if !errors.Is(err, ofconn.ErrConnectionLost) {
		t.Fatalf("Barrier on a silent switch returned %v, want ErrConnectionLost", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("dead peer detected after %v, want about 300ms", d)
	}
	fs.SetSilent(false)
	select {
	case <-c.Reconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnection after the switch came back")
	}
	if err := c.Barrier(oftest.TestCtx(t, 2*time.Second)); err != nil {
		t.Fatalf("Barrier after reconnecting: %v", err)
	}
	if g := c.Generation(); g < 2 {
		t.Errorf("Generation = %d after a reconnection", g)
	}
}

// TestEcho measures a round trip.
func TestEcho(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	c := dialFake(t, fs)
	rtt, err := c.Echo(oftest.TestCtx(t, 2*time.Second))
	if err != nil || rtt <= 0 {
		t.Fatalf("Echo: %v, %v", rtt, err)
	}
	if f := c.Features(); f.MsgType() != openflow.TypeFeaturesReply {
		t.Fatal("no features")
	}
}

// TestCallsFailFastWhileDisconnected: with the switch gone, calls return
// ErrNotConnected at once instead of waiting for their contexts.
func TestCallsFailFastWhileDisconnected(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	c := dialFake(t, fs, ofconn.WithReconnectBackoff(time.Second, time.Second))
	fs.StopListening()
	fs.CloseConns()
	deadline := time.Now().Add(2 * time.Second)
	for c.Connected() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	err := c.Barrier(oftest.TestCtx(t, 10*time.Second))
	if !errors.Is(err, ofconn.ErrNotConnected) && !errors.Is(err, ofconn.ErrConnectionLost) {
		t.Fatalf("Barrier while disconnected: %v", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Errorf("call took %v to fail", time.Since(start))
	}
}

// TestSlowConsumerDoesNotBlockReplies: an unsolicited-message handler that
// never returns must not stop replies from reaching their callers.
func TestSlowConsumerDoesNotBlockReplies(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	var seen atomic.Int64
	c := dialFake(t, fs, ofconn.WithUnsolicited(func(openflow.Header, openflow.Message) {
		seen.Add(1)
		<-block
	}))
	status, _ := openflow.MarshalMessage(0, &openflow.RawMessage{Type: openflow.TypePortStatus, Body: make([]byte, 8)})
	for i := 0; i < 3*ofconn.UnsolicitedQueue; i++ {
		fs.Push(status)
	}
	for i := 0; i < 50; i++ {
		if err := c.Barrier(oftest.TestCtx(t, 2*time.Second)); err != nil {
			t.Fatalf("Barrier %d with a stuck consumer: %v", i, err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for c.DroppedUnsolicited() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c.DroppedUnsolicited() == 0 || seen.Load() != 1 {
		t.Errorf("dropped %d, delivered %d: want drops and one delivery in progress", c.DroppedUnsolicited(), seen.Load())
	}
}

// TestContextDeadline: every call honours its context.
func TestContextDeadline(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	c := dialFake(t, fs, ofconn.WithEchoInterval(0))
	fs.SetSilent(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.DumpFlows(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DumpFlows: %v", err)
	}
	if err := c.Bundle(ctx, oftest.MustParseFlow(t, "actions=drop")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Bundle: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("calls took %v past a 50ms deadline", time.Since(start))
	}
}

// TestVersionErrorText: a switch offering only older versions gets a
// clear error.
func TestVersionErrorText(t *testing.T) {
	e := &ofconn.VersionError{Offered: []uint8{1, 4}}
	want := "openflow: the switch does not offer OpenFlow 1.5 (it offers OpenFlow1.0, OpenFlow1.3); enable it on the bridge, e.g. ovs-vsctl set bridge br-ex protocols=OpenFlow13,OpenFlow15"
	if e.Error() != want {
		t.Errorf("got %q", e.Error())
	}
}
