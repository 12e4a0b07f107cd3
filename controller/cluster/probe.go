package cluster

import (
	"context"
	"net/netip"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/heartbeat"
)

// The leader probes the agents directly (heartbeat.Prober): those whose
// nodes hold something every heartbeat.DefaultHolderProbeInterval, the
// others every heartbeat.DefaultIdleProbeInterval. An agent the probes and
// a witness cannot reach is dead to the judge at once, whatever its Lease
// says; the disruption rule still holds mass deaths back.

// probeTargetsRefresh is how often the leader recomputes whom it probes
// and how fast: a node that becomes a holder is probed at the holders'
// rate within this, and a node is a holder before its agent could take
// over (its flows follow the same assignment). A pass walks every agent.
const probeTargetsRefresh = 100 * time.Millisecond

// probeAgents is what the replica knows of the agents' probe addresses,
// from their Leases; every replica keeps it, so that a new leader probes at
// once.
type probeAgents struct {
	mu     sync.Mutex
	agents map[string]probeAgent
}

type probeAgent struct {
	addr       netip.AddrPort
	restarting bool
}

func (p *probeAgents) observe(l *coordinationv1.Lease, deleted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agents == nil {
		p.agents = map[string]probeAgent{}
	}
	addr := heartbeat.ProbeAddress(l)
	if deleted || !addr.IsValid() {
		delete(p.agents, l.Name)
		return
	}
	p.agents[l.Name] = probeAgent{addr: addr, restarting: heartbeat.Restarting(l)}
}

// snapshot copies the agents.
func (p *probeAgents) snapshot() map[string]probeAgent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]probeAgent, len(p.agents))
	for name, a := range p.agents {
		out[name] = a
	}
	return out
}

// runProber probes the agents for the term until ctx ends. Without a probe
// address (Options.ProbeBindAddress NoProbes) the Leases alone judge.
func (c *Controller) runProber(ctx context.Context, t *term) {
	if c.opts.ProbeBindAddress == NoProbes {
		return
	}
	logger := klog.FromContext(ctx)
	prober, err := heartbeat.ListenProber(c.opts.ProbeBindAddress, heartbeat.ProberConfig{}, func(node string, reachable bool) {
		c.probeReport(t, node, reachable)
	})
	if err != nil {
		logger.Error(err, "No probes: agents are judged by their Leases alone")
		return
	}
	defer func() {
		c.judgeMu.Lock()
		c.judge.ForgetProbes()
		c.judgeMu.Unlock()
	}()
	go prober.Run(ctx)
	ticker := c.opts.Clock.NewTicker(probeTargetsRefresh)
	defer ticker.Stop()
	for {
		prober.SetTargets(c.probeTargets(t))
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// probeReport feeds a change of an agent's reachability to the judge.
func (c *Controller) probeReport(t *term, node string, reachable bool) {
	now := c.opts.Clock.Now()
	c.judgeMu.Lock()
	if reachable {
		c.judge.Reachable(node, now)
	} else {
		c.judge.Unreachable(node, now)
	}
	c.judgeMu.Unlock()
	klog.InfoS("Agent probes", "node", node, "reachable", reachable)
	c.metrics.observeProbe(reachable)
	c.judgeLiveness(t)
}

// probeTargets are the agents to probe, at the holders' rate for those
// whose nodes host an EgressService or hold an egress IP.
func (c *Controller) probeTargets(t *term) []heartbeat.ProbeTarget {
	agents := c.probes.snapshot()
	holders := make(map[string]bool)
	for _, m := range c.members {
		m.addHolders(t, holders)
	}
	out := make([]heartbeat.ProbeTarget, 0, len(agents))
	for node, a := range agents {
		interval := heartbeat.DefaultIdleProbeInterval
		if holders[node] {
			interval = heartbeat.DefaultHolderProbeInterval
		}
		out = append(out, heartbeat.ProbeTarget{Node: node, Addr: a.addr, Interval: interval, Held: a.restarting})
	}
	return out
}
