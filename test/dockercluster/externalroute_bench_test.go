//go:build e2e

package dockercluster

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkExternalRouteFailover (make bench-externalroute): an external
// gateway of an AdminPolicyBasedExternalRoute killed (docker kill) while
// the routed pods on every node send to the external host in both
// families, each datagram a new flow, so that about half pick each
// gateway. Until a node takes the dead gateway out of its groups, the
// flows that pick it go to its MAC, which the network's bridge, having
// forgotten it with the container's port, floods past the external host.
// The last such frame after the kill is when the last node stopped using
// the dead gateway: the failover time, BFD's detection (100 ms x 3) and
// the agent's reaction together. It reports p50, p99 and max over the
// rounds (-benchtime Nx: N rounds); the gateway is started again between
// rounds and every node's session to it brought up.
func BenchmarkExternalRouteFailover(b *testing.B) {
	rounds := 0
	for b.Loop() { // the rounds are counted here and run below
		rounds++
	}
	c := Start(b, Config{Nodes: 3})
	c.Install()
	s := newRouteScenario(c)
	var took []time.Duration
	for round := range rounds {
		g := s.gateways[0]
		mac := g.MAC(b)
		// Both gateways in use: the flows that pick the victim reach the
		// outside through it.
		deadline := time.Now().Add(convergeTimeout)
		for !slices.Contains(s.watch.look(routeWindow).gatewaysUsed(false), g.Name) {
			if time.Now().After(deadline) {
				b.Fatalf("round %d: %s carries nothing", round, g.Name)
			}
		}
		capture := c.External.Capture(b)
		killed := time.Now()
		g.Kill()
		time.Sleep(2 * time.Second)
		var last time.Time
		for _, p := range capture.Stop() {
			if s.watch.routedPods[p.Src] != "" && p.DstMAC == mac && p.Time.After(last) {
				last = p.Time
			}
		}
		if last.IsZero() {
			b.Fatalf("round %d: no routed frame to %s after the kill: nothing measured", round, g.Name)
		}
		took = append(took, last.Sub(killed))
		b.Logf("round %d: the last routed frame to %s %v after the kill", round+1, g.Name, last.Sub(killed).Round(time.Millisecond))
		g.Remove()
		s.gateways[0] = c.StartGateway(1)
		s.watch.gwByMAC[s.gateways[0].MAC(b)] = s.gateways[0].Name
		s.gateways[0].PeersUp()
	}
	slices.Sort(took)
	pct := func(p int) time.Duration { return took[min(len(took)-1, len(took)*p/100)] }
	b.Logf("gateway killed -> the last node stops using it (%d rounds): p50 %v, p99 %v, max %v",
		len(took), pct(50).Round(time.Millisecond), pct(99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	b.ReportMetric(float64(pct(50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
