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
// gateway. The last routed frame sent towards the dead gateway
// (routeScenario.killGateway) is when the last node stopped using it: the
// failover time, BFD's detection (100 ms x 3) and the agent's reaction
// together. It reports p50, p99 and max over the
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
		// Both gateways in use: the flows that pick the victim reach the
		// outside through it.
		deadline := time.Now().Add(convergeTimeout)
		for !slices.Contains(s.watch.look(routeWindow).gatewaysUsed(false), g.Name) {
			if time.Now().After(deadline) {
				b.Fatalf("round %d: %s carries nothing", round, g.Name)
			}
		}
		d := s.killGateway(c, 0)
		if d == 0 {
			b.Fatalf("round %d: no routed frame to %s after the kill: nothing measured", round, g.Name)
		}
		took = append(took, d)
		b.Logf("round %d: the last routed frame to %s %v after the kill", round+1, g.Name, d.Round(time.Millisecond))
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
