package ofconn_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// TestReconnectAfterVswitchdRestart kills ovs-vswitchd in the middle of a
// large bundle: the bundle must fail promptly and say nothing changed,
// calls made while the switch is down must fail fast, and once the switch
// is back the client must reconnect by itself, notify, and work again.
func TestReconnectAfterVswitchdRestart(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw, ofconn.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		ofconn.WithEchoInterval(time.Second), ofconn.WithEchoTimeout(3*time.Second))
	ctx := oftest.TestCtx(t, 60*time.Second)
	if err := c.SendFlowMods(ctx, oftest.MustParseFlow(t, "cookie=0x1, table=1, priority=1 actions=drop")); err != nil {
		t.Fatal(err)
	}

	const n = 100000
	msgs := make([]openflow.Message, n)
	for i := range msgs {
		msgs[i] = oftest.SNATFlow(i, 0x2)
	}
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		err := c.Bundle(ctx, msgs...)
		done <- result{err, time.Now()}
	}()
	time.Sleep(150 * time.Millisecond)
	killed := time.Now()
	sw.StopVswitchd(t)

	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("bundle in flight hangs after ovs-vswitchd died")
	}
	var be *ofconn.BundleError
	if !errors.As(r.err, &be) || !errors.Is(r.err, ofconn.ErrConnectionLost) {
		t.Fatalf("bundle in flight returned %v, want a *BundleError wrapping ErrConnectionLost", r.err)
	}
	if be.Phase == "commit" {
		t.Logf("the bundle reached COMMIT before the kill; uncertain=%v", be.Uncertain)
	} else if !be.Discarded {
		t.Errorf("bundle error %v does not say nothing changed", be)
	}
	if d := r.at.Sub(killed); d > 2*time.Second {
		t.Errorf("bundle failed %v after the switch died", d)
	}
	t.Logf("bundle in flight: %v (after %v)", r.err, r.at.Sub(killed).Round(time.Millisecond))

	start := time.Now()
	if err := c.Barrier(ctx); !errors.Is(err, ofconn.ErrNotConnected) && !errors.Is(err, ofconn.ErrConnectionLost) {
		t.Errorf("Barrier with the switch down: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Barrier with the switch down took %v", d)
	}

	select {
	case <-c.Disconnected():
	default:
		t.Error("no disconnection notification once the switch died")
	}
	select {
	case <-c.Reconnected():
		t.Fatal("reconnection notified while the switch is down")
	default:
	}

	sw.StartVswitchd(t)
	select {
	case <-c.Reconnected():
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnection notification after ovs-vswitchd came back")
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("Barrier after reconnecting: %v", err)
	}
	if g := c.Generation(); g != 2 {
		t.Errorf("Generation = %d, want 2", g)
	}
	// The restarted switch lost the flows: the owner replays them.
	flows, err := c.DumpFlows(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: 0x1, CookieMask: ^uint64(0)})
	if err != nil || len(flows) != 0 {
		t.Fatalf("after restart: %d flows, %v", len(flows), err)
	}
	if err := c.SendFlowMods(ctx, oftest.MustParseFlow(t, "cookie=0x1, table=1, priority=1 actions=drop")); err != nil {
		t.Fatal(err)
	}
	if got := oftest.OfctlFlows(t, sw, "--no-stats", "table=1"); len(got) != 1 || got[0] != "cookie=0x1, table=1, priority=1 actions=drop" {
		t.Errorf("after replay: %q", got)
	}
}

// TestSwitchWithoutOpenFlow15 checks the error for a bridge that does not
// enable OpenFlow 1.5.
func TestSwitchWithoutOpenFlow15(t *testing.T) {
	sw := ovstest.Start(t, ovstest.WithProtocols("OpenFlow10,OpenFlow13"))
	_, err := ofconn.Dial(oftest.TestCtx(t, 10*time.Second), "unix:"+sw.MgmtSocket)
	var ve *ofconn.VersionError
	if !errors.As(err, &ve) {
		t.Fatalf("Dial returned %v, want a *VersionError", err)
	}
	for _, want := range []string{"does not offer OpenFlow 1.5", "OpenFlow1.0, OpenFlow1.3", "protocols="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestConcurrentCalls runs flow mods, bundles, dumps and barriers from
// many goroutines at once on one client.
func TestConcurrentCalls(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				fm := oftest.MustParseFlow(t, fmt.Sprintf("cookie=0x%x, table=%d, priority=%d,ip,nw_src=10.%d.0.%d actions=drop", g+1, g+1, i+1, g, i))
				var err error
				switch i % 4 {
				case 0:
					err = c.SendFlowMods(ctx, fm)
				case 1:
					err = c.Bundle(ctx, fm)
				case 2:
					_, err = c.DumpFlows(ctx, &openflow.FlowDescRequest{Table: uint8(g + 1)})
				case 3:
					err = c.Barrier(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	flows, err := c.DumpFlows(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 8*10+1 { // 10 adds per goroutine, plus the default NORMAL flow
		t.Errorf("%d flows, want %d", len(flows), 8*10+1)
	}
}
