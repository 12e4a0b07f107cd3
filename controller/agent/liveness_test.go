package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestWedged: the agent is wedged only once a sync attempt or a loss of the
// bridge has lasted longer than its own bound; at the bound it is not yet.
func TestWedged(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	bounds := LivenessBounds{Sync: 60 * time.Second, Bridge: 30 * time.Second}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name string
		p    progress
		want string // in the error; "" for live
	}{
		{"idle, connected", progress{}, ""},
		{"sync under way, within its bound", progress{syncStarted: ago(59 * time.Second)}, ""},
		{"sync under way, at its bound", progress{syncStarted: ago(60 * time.Second)}, ""},
		{"sync under way, past its bound", progress{syncStarted: ago(61 * time.Second)}, "sync loop is stuck"},
		{"bridge down, within its bound", progress{bridgeLost: ago(29 * time.Second)}, ""},
		{"bridge down, at its bound", progress{bridgeLost: ago(30 * time.Second)}, ""},
		{"bridge down, past its bound", progress{bridgeLost: ago(31 * time.Second)}, "bridge has been down for 31s, more than 30s"},
		// Each bound is its own: a loss of the bridge is not judged by the
		// sync's bound, nor the other way round.
		{"bridge down past its bound, within the sync's", progress{bridgeLost: ago(45 * time.Second)}, "bridge"},
		{"sync under way past the bridge's bound, within its own", progress{syncStarted: ago(45 * time.Second)}, ""},
		{"both past their bounds", progress{syncStarted: ago(2 * time.Minute), bridgeLost: ago(2 * time.Minute)}, "sync loop is stuck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := wedged(now, tc.p, bounds)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("wedged: %v, want live", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("wedged: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestLivenessRecordsProgress: the tracker times a sync attempt from its
// start and a loss of the bridge from the first look that finds it down;
// an attempt's end, whatever its result, and the bridge's return clear
// them. Zero bounds take the defaults.
func TestLivenessRecordsProgress(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l := newLiveness(clock, LivenessBounds{})
	if l.bounds.Sync != DefaultSyncTimeout || l.bounds.Bridge != DefaultBridgeTimeout {
		t.Fatalf("bounds %+v, want the defaults", l.bounds)
	}
	step := func(d time.Duration) { clock.SetTime(clock.Now().Add(d)) }
	expect := func(what string, wedged bool) {
		t.Helper()
		if err := l.check(); (err != nil) != wedged {
			t.Errorf("%s: check() = %v, want wedged=%v", what, err, wedged)
		}
	}

	// Attempts that end within the bound, one after another for longer
	// than it: progress.
	for range 3 {
		l.syncStarting()
		step(DefaultSyncTimeout / 2)
		l.syncEnded()
	}
	expect("attempts that end", false)
	// An attempt that does not end.
	l.syncStarting()
	step(DefaultSyncTimeout)
	expect("an attempt at its bound", false)
	step(time.Second)
	expect("an attempt past its bound", true)
	l.syncEnded()
	expect("the attempt ended", false)

	// The bridge: looks that find it up change nothing; the loss counts
	// from the first look that finds it down, not from later ones.
	l.bridge(true)
	step(time.Hour)
	l.bridge(false)
	step(DefaultBridgeTimeout / 2)
	l.bridge(false)
	step(DefaultBridgeTimeout / 2)
	expect("down for its bound", false)
	step(time.Second)
	l.bridge(false)
	expect("down past its bound", true)
	l.bridge(true)
	expect("back", false)
	// A new loss starts a new count.
	l.bridge(false)
	step(DefaultBridgeTimeout)
	expect("down again, for its bound", false)
}

// stallingSwitch holds every bundle begun while it is stalled until
// release is closed (or the sync's context ends), as a switch, or a client,
// that stops answering mid-sync would.
type stallingSwitch struct {
	Switch
	stalled atomic.Bool
	release chan struct{}
}

func (s *stallingSwitch) BeginBundle(ctx context.Context) (Bundle, error) {
	if s.stalled.Load() {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Switch.BeginBundle(ctx)
}

// TestLiveUntilSyncStalls: an agent (real OVS, real API server) whose sync
// hangs in a bundle stays live until the attempt has run for its bound,
// then fails Live, the agent's /healthz; once the bundle goes through, it
// is live again and the change is programmed.
func TestLiveUntilSyncStalls(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	pod := e.addPod(n, "a")
	const bound = 2 * time.Second
	stall := &stallingSwitch{release: make(chan struct{})}
	a := e.startAgent(n, func(c *Config) {
		stall.Switch = c.Switch
		c.Switch = stall
		c.Liveness.Sync = bound
	})
	a.waitHealthy(t)
	ctx := context.Background()
	if err := a.Live(ctx); err != nil {
		t.Fatalf("a synced agent is not live: %v", err)
	}

	// The agent is idle (synced, nothing changed since): the next sync
	// is the one the new service starts, and it hangs in its bundle.
	stalled := time.Now()
	stall.stalled.Store(true)
	lb := netip.MustParseAddr("192.0.2.10")
	e.createService("web", lb, n.Name, pod)
	var err error
	eventually(t, "agent wedged", func() error {
		if err = a.Live(ctx); err == nil {
			return errors.New("live")
		}
		return nil
	})
	if since := time.Since(stalled); since < bound {
		t.Errorf("wedged %v after its sync stalled, before the bound (%v): %v", since, bound, err)
	}
	if !strings.Contains(err.Error(), "sync loop is stuck") {
		t.Errorf("Live: %v, want it to name the stuck sync", err)
	}
	t.Logf("Live while the sync hangs: %v", err)

	stall.stalled.Store(false)
	close(stall.release)
	eventually(t, "agent live again", func() error { return a.Live(ctx) })
	e.announce(lb, n)
	e.expectSource(pod, "udp", lb)
}

// TestLiveUntilBridgeLostPastBound: with ovs-vswitchd killed, the agent
// stays live until its OpenFlow connection has been down for its bound,
// then fails Live; once ovs-vswitchd is back, the agent reconnects and is
// live and healthy again.
func TestLiveUntilBridgeLostPastBound(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	const bound = 2 * time.Second
	a := e.startAgent(n, func(c *Config) { c.Liveness.Bridge = bound })
	a.waitHealthy(t)
	ctx := context.Background()
	if err := a.Live(ctx); err != nil {
		t.Fatalf("a synced agent is not live: %v", err)
	}

	stopped := time.Now()
	n.StopVswitchd(t)
	var err error
	eventually(t, "agent wedged", func() error {
		if err = a.Live(ctx); err == nil {
			return errors.New("live")
		}
		return nil
	})
	if since := time.Since(stopped); since < bound {
		t.Errorf("wedged %v after ovs-vswitchd was stopped, before the bound (%v): %v", since, bound, err)
	}
	if !strings.Contains(err.Error(), "connection to the bridge has been down") {
		t.Errorf("Live: %v, want it to name the bridge", err)
	}
	t.Logf("Live with ovs-vswitchd down: %v", err)

	n.StartVswitchd(t)
	eventually(t, "agent live again", func() error { return a.Live(ctx) })
	a.waitHealthy(t)
}
