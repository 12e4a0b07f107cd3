package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/ovsdb"
)

// ForwardingGate holds back a restarting ovs-vswitchd's forwarding until
// egressflow's flows are back (controller/ovsdb's Database, through
// other_config:flow-restore-wait).
type ForwardingGate interface {
	// HoldForwarding makes an ovs-vswitchd that starts from now on forward
	// nothing until ReleaseForwarding; a running one is not affected.
	HoldForwarding(ctx context.Context) error
	// ReleaseForwarding lets a waiting ovs-vswitchd forward.
	ReleaseForwarding(ctx context.Context) error
	// GuardSuccession stands in line for ovs-vswitchd's database lock and
	// runs successor.Hold each time a vswitchd gives it up, before any
	// successor reads the database; it returns when ctx ends or the
	// database connection is lost.
	GuardSuccession(ctx context.Context, successor ovsdb.Successor) error
}

// holdTimeout bounds one write to the Open vSwitch database. It is a local
// socket that answers in milliseconds; the bound only keeps a wedged
// ovsdb-server from stalling the agent.
const holdTimeout = 5 * time.Second

// successionRedial is how long the agent waits before standing in line
// for ovs-vswitchd's lock again after losing its database connection
// (ovsdb-server restarting). Shorter is back in line sooner; each attempt
// is one connect(2) to a local socket.
const successionRedial = 100 * time.Millisecond

// forwardingHolds is the bookkeeping between holding a restarting
// ovs-vswitchd's forwarding and releasing it. A hold and a release are
// serialized, so that a release decided before a hold never lands after
// it.
type forwardingHolds struct {
	mu sync.Mutex
	// holds counts the holds so far. A sync releases only if none came
	// since it began: a hold means the vswitchd it read may be gone, and
	// its flows with it.
	holds uint64
	// released is the connection generation on which forwarding was last
	// released; 0 after a hold, so that the next sync releases again.
	released uint64
}

// syncEpoch is what a sync (or the cold guard) saw as it began: the
// OpenFlow connection's generation and the forwarding holds so far.
// Forwarding is released only for an epoch still current when the flows
// are in.
type syncEpoch struct {
	generation, holds uint64
}

// epoch reads the current syncEpoch, the generation first: a hold that
// races the read makes the epoch stale, never current for a newer
// connection.
func (a *Agent) epoch() syncEpoch {
	generation := a.cfg.Switch.Generation()
	a.forwarding.mu.Lock()
	defer a.forwarding.mu.Unlock()
	return syncEpoch{generation: generation, holds: a.forwarding.holds}
}

// hold sets the hold for a restarting ovs-vswitchd and has the worker
// sync, which releases it once the bridge is back and replayed.
func (a *Agent) hold(ctx context.Context, why string) error {
	a.forwarding.mu.Lock()
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	err := a.cfg.Forwarding.HoldForwarding(ctx)
	cancel()
	a.forwarding.holds++
	a.forwarding.released = 0
	a.forwarding.mu.Unlock()
	a.queue.Add(syncKey)
	if err != nil {
		return fmt.Errorf("hold a restarting ovs-vswitchd's forwarding (%s): %w", why, err)
	}
	klog.InfoS("A restarting ovs-vswitchd will forward nothing until egressflow's flows are replayed", "node", a.cfg.Node.Name, "reason", why)
	return nil
}

// release lets a waiting ovs-vswitchd forward, once per connection, and
// only for a sync whose epoch is still current: no hold came since it
// began, and it synced the connection that is up now.
func (a *Agent) release(ctx context.Context, at syncEpoch) error {
	if a.cfg.Forwarding == nil {
		return nil
	}
	a.forwarding.mu.Lock()
	defer a.forwarding.mu.Unlock()
	if a.forwarding.released == at.generation || a.forwarding.holds != at.holds ||
		a.cfg.Switch.Generation() != at.generation || !a.cfg.Switch.Connected() {
		// Released already, or a hold (or a reconnection) came since the
		// sync began; the sync it queued releases.
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	if err := a.cfg.Forwarding.ReleaseForwarding(ctx); err != nil {
		return fmt.Errorf("release ovs-vswitchd's forwarding: %w", err)
	}
	a.forwarding.released = at.generation
	return nil
}

// guardSuccession holds forwarding each time the bridge's ovs-vswitchd
// dies, before its successor reads the database (ovsdb's
// GuardSuccession), for as long as ctx lasts.
func (a *Agent) guardSuccession(ctx context.Context) {
	if a.cfg.Forwarding == nil {
		return
	}
	successor := ovsdb.Successor{Hold: func(ctx context.Context) error {
		return a.hold(ctx, "ovs-vswitchd gave up its database lock")
	}}
	lastLogged := "" // the same error again, as while ovsdb-server is down, is logged once
	for {
		err := a.cfg.Forwarding.GuardSuccession(ctx, successor)
		if ctx.Err() != nil {
			return
		}
		if err.Error() != lastLogged {
			lastLogged = err.Error()
			klog.ErrorS(err, "Lost the place in line for ovs-vswitchd's database lock; standing in line again", "node", a.cfg.Node.Name, "after", successionRedial)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(successionRedial):
		}
	}
}

// holdOnDisconnect logs each loss of the bridge and holds forwarding too,
// for a vswitchd that died while the agent was not in line for its lock
// (the database restarting at the same time). Held only while the bridge
// is away, never across a node's reboot (see docs/dataplane.md).
func (a *Agent) holdOnDisconnect(ctx context.Context) {
	if a.cfg.Disconnected == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-a.cfg.Disconnected:
			if !ok {
				return
			}
		}
		if a.cfg.Forwarding == nil {
			klog.InfoS("Lost the OpenFlow connection to the bridge; reconnecting (no hold of a restarting ovs-vswitchd: --ovsdb=none)", "node", a.cfg.Node.Name)
			continue
		}
		klog.InfoS("Lost the OpenFlow connection to the bridge; reconnecting", "node", a.cfg.Node.Name)
		if err := a.hold(ctx, "the OpenFlow connection was lost"); err != nil {
			klog.ErrorS(err, "Could not hold a restarting ovs-vswitchd's forwarding", "node", a.cfg.Node.Name)
		}
	}
}
