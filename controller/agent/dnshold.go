package agent

import (
	"context"
	"sync"
)

// generationGate lets goroutines wait until a counter that only grows
// reaches a value: the resolver's generation whose flows the bridge took.
// The zero value is ready (at generation 0).
type generationGate struct {
	mu      sync.Mutex
	reached uint64
	// wake is closed and replaced whenever reached grows.
	wake chan struct{}
}

// advance raises the gate to generation g (never lowers it).
func (g *generationGate) advance(generation uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if generation <= g.reached {
		return
	}
	g.reached = generation
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

// wait returns nil once the gate has reached generation, or ctx's error.
func (g *generationGate) wait(ctx context.Context, generation uint64) error {
	for {
		g.mu.Lock()
		if g.reached >= generation {
			g.mu.Unlock()
			return nil
		}
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// WaitDNSApplied returns once the bridge holds the flows of the DNS
// answers up to the resolver's generation (Config.DNS's Generation), or
// with ctx's error.
func (a *Agent) WaitDNSApplied(ctx context.Context, generation uint64) error {
	return a.dnsApplied.wait(ctx, generation)
}

// DNSNamesSet is closed once the agent has given its resolver the names
// its firewalls need, in its first sync: until then the resolver learns
// nothing from a DNS reply, so a reply held before it must be learned
// again after it (DNSHold.NamesSet).
func (a *Agent) DNSNamesSet() <-chan struct{} { return a.dnsNamed }
