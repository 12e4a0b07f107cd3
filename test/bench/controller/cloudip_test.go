package controller

// BenchmarkCloudIP is the cloud controller against a real API server
// (test/kubetest) and test/fakeec2 through the AWS SDK: by default 100
// nodes with an instance each, 1,000 CloudPrivateIPConfigs spread over
// them, every EC2 call answered after 200 ms. It measures, in one run:
//
//   - time from the first create to every address Assigned (a watch of
//     the objects), and the addresses per second;
//   - EC2 calls per assignment (counted by the fake, publishing the
//     nodes' capacity apart);
//   - a node's death: its instance terminated and its objects' spec.node
//     moved to the other nodes, as the EgressIP assignment would; from the
//     moves to all of them Assigned on their new nodes (p50, p99 per
//     object), and the calls.
//
// Run it with make bench-cloudip.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cloud/aws"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/test/fakeec2"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	cloudNodeCount = flag.Int("cloud-nodes", 100, "nodes, an instance each (BenchmarkCloudIP)")
	cloudAddrCount = flag.Int("cloud-addresses", 1000, "CloudPrivateIPConfigs (BenchmarkCloudIP)")
	cloudLatency   = flag.Duration("cloud-latency", 200*time.Millisecond, "latency of every EC2 call (BenchmarkCloudIP)")
	cloudListDelay = flag.Duration("cloud-list-delay", 0, "how long EC2 takes to list an assigned address (BenchmarkCloudIP)")
)

func BenchmarkCloudIP(b *testing.B) {
	ctx := context.Background()
	start := time.Now()
	env := clustertest.Start(b)
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	out("cloud IP bench: %d nodes, %d CloudPrivateIPConfigs, EC2 calls answered after %v, listed after %v, %d workers",
		*cloudNodeCount, *cloudAddrCount, *cloudLatency, *cloudListDelay, cluster.DefaultCloudWorkers)

	// One /16 subnet: 10.0.0.x are the nodes' primaries, 10.0.4.0 on the
	// egress addresses.
	ec2 := fakeec2.New(b)
	ec2.AddSubnet("subnet-bench", "10.0.0.0/16", "")
	perNode := (*cloudAddrCount + *cloudNodeCount - 1) / *cloudNodeCount
	ec2.AddInstanceType("bench.large", 2*perNode+2, 0)
	nodes := make([]string, *cloudNodeCount)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("cloud-%03d", i)
		ec2.AddInstance("i-"+nodes[i], "bench.large", "subnet-bench", netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(1 + i%250)}))
	}
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		return createReadyNode(ctx, env.Kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i],
			Labels: map[string]string{assign.EgressAssignableLabel: "", corev1.LabelInstanceTypeStable: "bench.large"}},
			Spec: corev1.NodeSpec{ProviderID: "aws:///bench-1a/i-" + nodes[i]}})
	})
	ec2.SetLatency(*cloudLatency)
	ec2.SetListDelay(*cloudListDelay)

	w := watchCloudIPs(b, env)
	opts := cluster.Options{Identity: "bench-a", LeaderElection: true, RetryPeriod: 500 * time.Millisecond, RenewDeadline: 5 * time.Second,
		LeaseDuration: 10 * time.Second, Registerer: prometheus.NewRegistry(),
		CloudProvider: aws.New(ec2.Config(), aws.Options{})}
	r := env.RunController(b, opts)
	waitFor(b, "leading", func() bool { return r.Leading() })
	published := time.Now()
	waitIdle(b, r)
	publishTime := time.Since(published) - quietPeriod
	publishCalls := ec2.Calls("")
	out("setup in %v; capacity of %d nodes published in %v with %d EC2 calls", published.Sub(start).Round(time.Millisecond),
		len(nodes), publishTime.Round(time.Millisecond), publishCalls)

	names := make([]string, *cloudAddrCount)
	nodeOf := map[string]string{}
	firstCreate := time.Now()
	wait.Parallel(b, len(names), *setupWorkers, func(i int) error {
		addr := netip.AddrFrom4([4]byte{10, 0, byte(4 + i/250), byte(1 + i%250)})
		names[i] = cloudv1.ObjectName(addr)
		_, err := env.ES.CloudNetworkV1().CloudPrivateIPConfigs().Create(ctx, &cloudv1.CloudPrivateIPConfig{
			ObjectMeta: metav1.ObjectMeta{Name: names[i]}, Spec: cloudv1.CloudPrivateIPConfigSpec{Node: nodes[i%len(nodes)]}}, metav1.CreateOptions{})
		return err
	})
	for i, n := range names {
		nodeOf[n] = nodes[i%len(nodes)]
	}
	allAt := w.waitHeldOn(b, nodeOf)
	waitIdle(b, r)
	assignCalls := ec2.Calls("") - publishCalls

	// A node dies: its instance goes, and its objects move to the others.
	victim := nodes[0]
	ec2.TerminateInstance("i-" + victim)
	moved := map[string]string{}
	for i, n := range names {
		if nodeOf[n] == victim {
			moved[n] = nodes[1+i%(len(nodes)-1)]
		}
	}
	movedNames := slices.Sorted(maps.Keys(moved))
	before := ec2.Calls("")
	moveStart := time.Now()
	wait.Parallel(b, len(movedNames), *setupWorkers, func(i int) error {
		name := movedNames[i]
		obj, err := env.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		obj.Spec.Node = moved[name]
		_, err = env.ES.CloudNetworkV1().CloudPrivateIPConfigs().Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
	movedAt := w.waitHeldOn(b, moved)
	waitIdle(b, r)
	moveCalls := ec2.Calls("") - before
	var moveLat []time.Duration
	for n := range moved {
		moveLat = append(moveLat, w.heldSince(n).Sub(moveStart))
	}
	slices.Sort(moveLat)

	total := allAt.Sub(firstCreate)
	out("")
	out("| measure | value |")
	out("| --- | --- |")
	out("| addresses, nodes, EC2 call latency | %d, %d, %v |", len(names), len(nodes), *cloudLatency)
	out("| first create to all Assigned | %v (%.1f addresses/s) |", total.Round(time.Millisecond), float64(len(names))/total.Seconds())
	out("| EC2 calls per assignment | %.2f (%d calls) |", float64(assignCalls)/float64(len(names)), assignCalls)
	out("| a node's death: %d objects moved, to all Assigned on their new nodes | %v (p50 %v, p99 %v per object), %.2f calls per move |",
		len(moved), movedAt.Sub(moveStart).Round(time.Millisecond), pct(moveLat, 50), pct(moveLat, 99), float64(moveCalls)/float64(len(moved)))
	out("")
	out("total bench time %v", time.Since(start).Round(time.Second))
	b.ReportMetric(total.Seconds(), "s-to-all-assigned")
	b.ReportMetric(float64(assignCalls)/float64(len(names)), "calls/assignment")
	b.ReportMetric(float64(movedAt.Sub(moveStart).Milliseconds()), "move-ms")
}

// watchCloudIPs follows where each CloudPrivateIPConfig is Assigned.
func watchCloudIPs(b *testing.B, env *clustertest.Env) *holderWatch {
	f := esinformers.NewSharedInformerFactory(env.ES, 0)
	return newHolderWatch(b, f, f.CloudNetwork().V1().CloudPrivateIPConfigs().Informer(), func(obj any) (holding, bool) {
		c, ok := obj.(*cloudv1.CloudPrivateIPConfig)
		if !ok {
			return holding{}, false
		}
		node := ""
		if meta.IsStatusConditionTrue(c.Status.Conditions, cloudv1.AssignedCondition) {
			node = c.Status.Node
		}
		return holding{c.Name, node, c.Status.Conditions}, true
	})
}

// waitHeldOn waits until each object of want is Assigned on its node, and
// returns when the last got there.
func (w *holderWatch) waitHeldOn(b *testing.B, want map[string]string) time.Time {
	waitFor(b, "every address Assigned on its node", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for n, node := range want {
			if w.holder[n] != node {
				return false
			}
		}
		return true
	})
	return w.lastChange(slices.Collect(maps.Keys(want)))
}
