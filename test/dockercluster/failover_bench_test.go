//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/test/wait"
)

// BenchmarkFailover (make bench-failover): per iteration, the host loses
// power (docker kill; the node is then started again and rejoins) and the
// next host freezes (docker pause, then unpause), while the endpoints on
// the other nodes send in both families every 50 ms. It reports the time
// from each fault to the first LB-IP packet through the new host (p50, p99,
// max) and the pod-IP packets the external host received (goal: none). The EgressService keeps off the leading
// controller's node, so that what is measured is the agents' Lease, not
// leader election.
func BenchmarkFailover(b *testing.B) {
	start := time.Now()
	c := Start(b, Config{Nodes: 3})
	c.Install()
	bringUp := time.Since(start)
	s := newEgressScenario(b, c, offLeader(c))
	s.expectLBIPs()
	capture := c.External.Capture(b)
	faults := map[string][]time.Duration{}
	for b.Loop() {
		killed, took := s.failHost(b, "kill")
		faults["kill"] = append(faults["kill"], took)
		c.RestartNode(killed)
		frozen, took := s.failHost(b, "pause")
		faults["pause"] = append(faults["pause"], took)
		c.docker("unpause", frozen.Container)
		c.waitAgentRenewing(frozen)
	}
	b.StopTimer()
	received, flooded := s.checkNoPodIP(b, capture.Stop())
	b.Logf("cluster bring-up before the rounds (cached; BenchmarkBringUp measures fresh and cached): %v", bringUp.Round(time.Second))
	for _, fault := range []string{"kill", "pause"} {
		d := faults[fault]
		slices.Sort(d)
		p50, p99, worst := d[len(d)/2], d[min(len(d)-1, len(d)*99/100)], d[len(d)-1]
		b.Logf("docker %s of the host, %d rounds: fault -> first LB-IP packet through the new host p50 %v, p99 %v, max %v",
			fault, len(d), p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
		b.ReportMetric(float64(p50.Milliseconds()), fault+"-p50-ms")
		b.ReportMetric(float64(p99.Milliseconds()), fault+"-p99-ms")
		b.ReportMetric(float64(worst.Milliseconds()), fault+"-max-ms")
	}
	b.Logf("%d packets from the LB IPs; pod-IP frames steered towards a dead host and flooded past the external host: %d (a pod-IP packet it received fails the benchmark above)", received, flooded)
	b.ReportMetric(float64(flooded), "flooded-past-frames")
}

// waitAgentRenewing waits until n's agent has renewed its Lease after now:
// a node back from a freeze is a candidate host again only then.
func (c *Cluster) waitAgentRenewing(n *Node) {
	since := time.Now()
	wait.Until(c.t, convergeTimeout, func() error {
		lease, err := c.Kube.CoordinationV1().Leases(Namespace).Get(context.Background(), n.Name, metav1.GetOptions{}) // named after its node
		if err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Time.Before(since) {
			return fmt.Errorf("agent Lease of %s not renewed since %v", n.Name, since)
		}
		return nil
	})
}
