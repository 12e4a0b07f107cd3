//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// failoverPoll is how often BenchmarkEgressIPFailover reads the status and
// the external host's neighbour table after a fault: the resolution of its
// figures, at the cost of an API read and an `ip neigh` per tick.
const failoverPoll = 10 * time.Millisecond

// BenchmarkEgressIPFailover (make bench-egressip): the two nodes that do
// not run the leading controller are egress nodes; the EgressIPs v4 and v6
// (one address each, on the cluster's segment) are held by them, and a
// probe pod on the leader's node sends in both families every 50 ms. Per
// iteration, the node holding v4's address loses power (docker kill; then
// started again, and rejoins). It reports, per address that moved, the
// time from the fault to status.items naming the new holder, to the
// external host's neighbour entry naming its bridge, and to the first
// packet with the address at the external host (through the new holder:
// the old one is dead), and from status.items to the neighbour entry (the
// agent's sync and its announcement).
func BenchmarkEgressIPFailover(b *testing.B) {
	c := Start(b, Config{Nodes: 3})
	c.Install()
	ctx := context.Background()
	server := c.External.Serve(b)
	targets := []string{server.Addr.String(), server.Addr6.String()}
	leader := c.LeaderNode()
	for _, n := range c.Nodes {
		if n != leader {
			c.labelEgressNode(b, n, true)
		}
	}
	addrs := c.egressIPs()
	eips := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressIPs()
	c.CreateNamespace("billing")
	probe := c.RunProbePod("billing", "probe", leader, map[string]string{"app": "web"}, targets...)
	for i, name := range []string{"v4", "v6"} {
		_, err := eips.Create(ctx, &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: esv1.EgressIPSpec{
			EgressIPs: []string{addrs[i].String()},
			// One object per family: the probe pod's address of each
			// family leaves with its object's address.
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "billing"}},
		}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
	}
	holder := func(name string) string {
		eip, err := eips.Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(eip.Status.Items) != 1 {
			return ""
		}
		return eip.Status.Items[0].Node
	}
	c.ExpectSources(probe, targets, []string{addrs[0].String(), addrs[1].String()})
	node := func(name string) *Node {
		for _, n := range c.Nodes {
			if n.Name == name {
				return n
			}
		}
		return nil
	}

	var toStatus, toNeighbour, toPacket, statusToNeighbour []time.Duration
	for b.Loop() {
		old := map[string]string{"v4": holder("v4"), "v6": holder("v6")}
		victim := node(old["v4"])
		if victim == nil {
			b.Fatalf("v4 held by %q", old["v4"])
		}
		// The bridges' MACs, read before the fault: a restarted node's
		// br-ex is made again, with a new one.
		macs := map[string]string{}
		for _, n := range c.Nodes {
			if n != victim {
				macs[n.Name] = c.bridgeMAC(n)
			}
		}
		c.docker("kill", victim.Container)
		at := time.Now()
		for i, name := range []string{"v4", "v6"} {
			if old[name] != victim.Name {
				continue
			}
			addr := addrs[i]
			var statusAt, neighbourAt time.Time
			var newHolder *Node
			var newMAC string
			wait.UntilEvery(b, convergeTimeout, failoverPoll, func() error {
				now := time.Now()
				if statusAt.IsZero() {
					if h := holder(name); h != "" && h != victim.Name {
						statusAt, newHolder = now, node(h)
						newMAC = macs[h]
					}
				}
				if newHolder != nil && neighbourAt.IsZero() && c.externalNeighbour(addr) == newMAC {
					neighbourAt = time.Now()
				}
				if neighbourAt.IsZero() {
					return fmt.Errorf("%s not moved yet", addr)
				}
				return nil
			})
			var first time.Time
			wait.Until(b, convergeTimeout, func() error {
				var ok bool
				if first, ok = server.FirstFrom(addr, at); !ok {
					return fmt.Errorf("no packet from %s since the fault", addr)
				}
				return nil
			})
			toStatus = append(toStatus, statusAt.Sub(at))
			toNeighbour = append(toNeighbour, neighbourAt.Sub(at))
			toPacket = append(toPacket, first.Sub(at))
			statusToNeighbour = append(statusToNeighbour, neighbourAt.Sub(statusAt))
			fmt.Printf("%s killed: %s on %s after %v (status), %v (external neighbour entry), %v (first packet)\n", victim.Name, addr, newHolder.Name,
				statusAt.Sub(at).Round(time.Millisecond), neighbourAt.Sub(at).Round(time.Millisecond), first.Sub(at).Round(time.Millisecond))
		}
		c.RestartNode(victim)
		c.waitAgentRenewing(victim)
	}
	b.StopTimer()
	fmt.Printf("\nEgressIP failover on the cluster in Docker: docker kill of the IPv4 address's holder, %d rounds, %d addresses moved\n", b.N, len(toPacket))
	report := func(what, unit string, d []time.Duration) {
		s := slices.Clone(d)
		slices.Sort(s)
		p50, p99 := s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
		fmt.Printf("%-62s p50 %8v  p99 %8v  max %8v  (%d moves)\n", what, p50.Round(time.Millisecond), p99.Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
		b.ReportMetric(float64(p50.Milliseconds()), unit+"-p50-ms")
		b.ReportMetric(float64(p99.Milliseconds()), unit+"-p99-ms")
	}
	report("fault -> status.items names the new holder", "status", toStatus)
	report("fault -> first packet with the egress IP (new holder)", "packet", toPacket)
	report("fault -> external host's neighbour entry names it", "neighbour", toNeighbour)
	report("status.items -> external host's neighbour entry (takeover)", "takeover-neighbour", statusToNeighbour)
}
