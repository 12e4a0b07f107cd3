package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Liveness (Live, the agent's /healthz) asks whether the agent still makes
// progress, so that the kubelet restarts one that is wedged. It is not
// readiness (Healthy, /readyz and the heartbeat): a sync that keeps failing
// or a bridge that is away make the agent unready at once, and its Lease
// lapses, but a restart mends neither; a restart mends an agent stuck in
// itself. Two things count as wedged, each past a bound:
//
//   - a sync attempt that does not end: the sync loop makes no progress.
//     An attempt that fails is progress (it is retried with backoff, and
//     reported by readiness, metrics and Events). The loop has one
//     worker, so work waits in the queue only while an attempt runs: an
//     attempt's age is how long queued work has waited.
//   - the OpenFlow connection to the bridge down. The client redials a
//     local bridge every 20 ms by itself, so a restart helps only if the
//     client itself is stuck, which the agent cannot tell from Open vSwitch
//     being away; past the bound it takes the restart. A restarted agent
//     waits for the bridge, live and not ready (cmd/egressflow-agent), so
//     a long outage of Open vSwitch costs one restart, not a crash loop.
//
// Waiting for the informers' first list (the API server unreachable at
// start) is not wedged: a restart would wait the same way.
const (
	// DefaultSyncTimeout is how long a sync attempt may run before the
	// agent counts as wedged. A sync takes milliseconds; the longest, the
	// first at 10,000 services x 10 endpoints (200,000 flows), a few
	// seconds (make bench-agent), and every call it makes goes to a local
	// socket or to netlink. Shorter risks restarting an agent that is only
	// slow on an overloaded node, and a restart costs a re-list of the
	// cluster and a full sync; longer leaves a stuck agent in place for
	// longer, and such an agent programs no change while its heartbeat
	// still says its last sync succeeded.
	DefaultSyncTimeout = 60 * time.Second
	// DefaultBridgeTimeout is how long the OpenFlow connection to the
	// bridge may stay down before the agent counts as wedged. An
	// ovs-vswitchd restart (an upgrade of Open vSwitch) takes a few
	// seconds, and the connected agent replays its flows within
	// milliseconds of its return, where a restarted one would first
	// re-list the cluster: the bound must outlast it. Longer leaves an
	// agent whose own client is stuck for longer. The kubelet acts after
	// its probe's failures on top (3 x 10 s by default).
	DefaultBridgeTimeout = 30 * time.Second
)

// bridgeCheckInterval is how often the agent looks at its OpenFlow
// connection for Live: a loss is timed from the first look that finds the
// connection down, so up to this late. A look reads a mutex-guarded field.
const bridgeCheckInterval = time.Second

// LivenessBounds say when the agent counts as wedged (Live). A zero field
// takes its default.
type LivenessBounds struct {
	// Sync bounds a sync attempt (DefaultSyncTimeout).
	Sync time.Duration
	// Bridge bounds a loss of the OpenFlow connection (DefaultBridgeTimeout).
	Bridge time.Duration
}

// withDefaults fills in the zero fields.
func (b LivenessBounds) withDefaults() LivenessBounds {
	if b.Sync <= 0 {
		b.Sync = DefaultSyncTimeout
	}
	if b.Bridge <= 0 {
		b.Bridge = DefaultBridgeTimeout
	}
	return b
}

// progress is what liveness is judged on, as the agent's clock read it.
type progress struct {
	// syncStarted is when the sync attempt under way began; zero while
	// none is.
	syncStarted time.Time
	// bridgeLost is when the OpenFlow connection was first seen down; zero
	// while it is up.
	bridgeLost time.Time
}

// wedged says why an agent whose progress is p is wedged at now, or nil if
// it is not: a sync attempt under way for longer than b.Sync, or the
// bridge lost for longer than b.Bridge.
func wedged(now time.Time, p progress, b LivenessBounds) error {
	if !p.syncStarted.IsZero() {
		if d := now.Sub(p.syncStarted); d > b.Sync {
			return fmt.Errorf("the sync loop is stuck: a sync has run for %v, more than %v", d.Round(100*time.Millisecond), b.Sync)
		}
	}
	if !p.bridgeLost.IsZero() {
		if d := now.Sub(p.bridgeLost); d > b.Bridge {
			return fmt.Errorf("the OpenFlow connection to the bridge has been down for %v, more than %v", d.Round(100*time.Millisecond), b.Bridge)
		}
	}
	return nil
}

// liveness records the agent's progress for Live.
type liveness struct {
	clock  clock.PassiveClock
	bounds LivenessBounds

	mu sync.Mutex
	p  progress
}

func newLiveness(c clock.PassiveClock, b LivenessBounds) *liveness {
	if c == nil {
		c = clock.RealClock{}
	}
	return &liveness{clock: c, bounds: b.withDefaults()}
}

// syncStarting records that a sync attempt begins.
func (l *liveness) syncStarting() {
	l.mu.Lock()
	l.p.syncStarted = l.clock.Now()
	l.mu.Unlock()
}

// syncEnded records that the attempt under way ended, whatever its result.
func (l *liveness) syncEnded() {
	l.mu.Lock()
	l.p.syncStarted = time.Time{}
	l.mu.Unlock()
}

// bridge records whether the OpenFlow connection is up: a loss counts from
// the first call that finds it down.
func (l *liveness) bridge(connected bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case connected:
		l.p.bridgeLost = time.Time{}
	case l.p.bridgeLost.IsZero():
		l.p.bridgeLost = l.clock.Now()
	}
}

// check is wedged at the clock's now.
func (l *liveness) check() error {
	l.mu.Lock()
	p := l.p
	l.mu.Unlock()
	return wedged(l.clock.Now(), p, l.bounds)
}

// watchBridge times the losses of the OpenFlow connection until ctx ends.
func (a *Agent) watchBridge(ctx context.Context) {
	ticker := time.NewTicker(bridgeCheckInterval)
	defer ticker.Stop()
	for {
		a.liveness.bridge(a.cfg.Switch.Connected())
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Live reports whether the agent still makes progress (the agent's
// /healthz): nil unless a sync attempt has run, or the OpenFlow connection
// to the bridge has been down, for longer than its bound (Config.Liveness).
// It is not Healthy: a failing sync or an absent bridge makes the agent
// unready at once, but wedged only past the bound.
func (a *Agent) Live(context.Context) error {
	a.liveness.bridge(a.cfg.Switch.Connected())
	return a.liveness.check()
}
