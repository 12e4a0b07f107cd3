package controller

// BenchmarkEgressIPAssign is the cluster component's EgressIP assignment
// against a real API server (test/kubetest): by default 100 Ready nodes labelled
// k8s.ovn.org/egress-assignable whose heartbeating agents publish one
// subnet, and 1,000 EgressIPs of one address each, created while the
// controller leads. It measures, in one run:
//
//   - time from the first create to every address held (seen by a watch),
//     and from the last create; per EgressIP, create to held (p50, p99,
//     max);
//   - API writes per assignment: the controller's EgressIP updates,
//     counted by a transport wrapped around its client, with conflicts;
//   - spread: min and max addresses per node;
//   - a no-op resync's writes;
//   - failover: one node's agent stops; from its Lease's expiry to every
//     address it held being held elsewhere (watch), and the writes;
//   - a new leader (the first replica stopped, another started): its
//     writes (adoption should make none) and the time until it is idle;
//   - the API server's own pace for the same writes: a plain loop that
//     updates every EgressIP once (clearing its status), with the
//     controller's concurrency, as its identity; then a new leader that
//     assigns every address again, with no client competing, against it.
//
// Run it with make bench-egressip-assign.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	eipNodeCount = flag.Int("eip-nodes", 100, "egress nodes, each with a heartbeating agent (BenchmarkEgressIPAssign)")
	eipCount     = flag.Int("egressips", 1000, "EgressIPs of one address each (BenchmarkEgressIPAssign)")
	// The agents' renewals load the API server for the whole run; at the
	// production 1 s, 100 nodes are 100 writes/s beside the controller's.
	// Failover is measured from the Lease's expiry, so it does not depend
	// on these.
	eipAgentRenew  = flag.Duration("eip-agent-renew", 2*time.Second, "agent Lease renew interval (BenchmarkEgressIPAssign)")
	eipAgentExpire = flag.Duration("eip-agent-expire", 6*time.Second, "agent Lease duration (BenchmarkEgressIPAssign)")
)

// benchSubnet holds every address: each node publishes it.
const benchSubnet = "198.18.0.0/15"

func BenchmarkEgressIPAssign(b *testing.B) {
	ctx := context.Background()
	start := time.Now()
	env := clustertest.Start(b)
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	out("egressip assign bench: %d egress nodes, %d EgressIPs of one address; agents renew every %v, expire after %v",
		*eipNodeCount, *eipCount, *eipAgentRenew, *eipAgentExpire)

	nodes := make([]string, *eipNodeCount)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("egress-%03d", i)
	}
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		return createReadyNode(ctx, env.Kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i],
			Labels: map[string]string{assign.EgressAssignableLabel: ""}}})
	})
	subnets := heartbeat.ParseEgressSubnets(benchSubnet)
	agents := startAgents(b, env, nodes, *eipAgentRenew, *eipAgentExpire,
		heartbeat.Facts{SyncState: heartbeat.SyncStateSynced, EgressSubnets: subnets})
	out("setup: %d nodes with agents in %v", len(nodes), time.Since(start).Round(time.Millisecond))

	w := watchEgressIPs(b, env)
	reg := prometheus.NewRegistry()
	opts := cluster.Options{Identity: "bench-a", LeaderElection: true, RetryPeriod: 500 * time.Millisecond, RenewDeadline: 5 * time.Second,
		LeaseDuration: 10 * time.Second, Registerer: reg}
	r := env.RunController(b, opts)
	waitFor(b, "leading", func() bool { return r.Leading() })
	waitIdle(b, r)

	// Create every EgressIP at once, as clients would.
	names := make([]string, *eipCount)
	created := make([]time.Time, *eipCount)
	firstCreate := time.Now()
	wait.Parallel(b, len(names), *setupWorkers, func(i int) error {
		names[i] = fmt.Sprintf("eip-%04d", i)
		_, err := env.ES.K8sV1().EgressIPs().Create(ctx, &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			Spec: esv1.EgressIPSpec{EgressIPs: []string{fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)}}}, metav1.CreateOptions{})
		created[i] = time.Now()
		return err
	})
	lastCreate := slices.MaxFunc(created, func(a, b time.Time) int { return a.Compare(b) })
	heldAt := w.waitAllHeld(b, names)
	waitIdle(b, r)
	initial := classify(r.Writes.All())
	lat := make([]time.Duration, len(names))
	for i, n := range names {
		lat[i] = w.heldSince(n).Sub(created[i])
	}
	slices.Sort(lat)
	load := w.load(nodes)
	lo, hi := slices.Min(load), slices.Max(load)

	// No-op resync.
	before := r.Writes.Len()
	t0 := time.Now()
	r.Resync()
	waitIdle(b, r)
	resyncWrites, _ := r.Writes.Since(before)
	resync := classify(resyncWrites)
	resyncTime := time.Since(t0) - quietPeriod

	// Failover: the first node (by name) among the fullest stops renewing.
	victim, moved := w.fullest(nodes)
	agents.stop(victim)
	lease, err := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	expiry, _ := heartbeat.Expiry(lease)
	before = r.Writes.Len()
	waitFor(b, "failover", func() bool { return w.movedAway(moved, victim) })
	failoverSeen := w.lastChange(moved)
	waitIdle(b, r)
	failoverWrites, _ := r.Writes.Since(before)
	failover := classify(failoverWrites)

	// A new leader adopts.
	if err := r.Stop(); err != nil {
		b.Fatal(err)
	}
	opts.Identity, opts.Registerer = "bench-b", prometheus.NewRegistry()
	t0 = time.Now()
	r2 := env.RunController(b, opts)
	waitFor(b, "the second replica leads", func() bool { return r2.Leading() })
	ledAt := time.Now()
	waitIdle(b, r2)
	adoptTime := time.Since(ledAt) - quietPeriod
	adopt := classify(r2.Writes.All())

	if err := r2.Stop(); err != nil {
		b.Fatal(err)
	}
	// The API server's pace: the same number of updates by a plain loop,
	// which clears every status; then a third replica assigns them all
	// again, with no client competing.
	plain := egressIPPlainLoop(b, env)
	waitFor(b, "every status cleared (watch)", func() bool { return w.noneHeld(names) })
	opts.Identity, opts.Registerer = "bench-c", prometheus.NewRegistry()
	r3 := env.RunController(b, opts)
	waitFor(b, "the third replica leads", func() bool { return r3.Leading() })
	coldLed := time.Now()
	coldHeld := w.waitAllHeld(b, names)
	waitIdle(b, r3)
	cold := classify(r3.Writes.All())

	total := heldAt.Sub(firstCreate)
	out("")
	out("| measure | value |")
	out("| --- | --- |")
	out("| EgressIPs x addresses, egress nodes | %d x 1, %d |", len(names), len(nodes))
	out("| creating them all (%d clients) | %v |", *setupWorkers, lastCreate.Sub(firstCreate).Round(time.Millisecond))
	out("| first create to all held | %v (%.0f addresses/s) |", total.Round(time.Millisecond), float64(len(names))/total.Seconds())
	out("| last create to all held | %v |", heldAt.Sub(lastCreate).Round(time.Millisecond))
	out("| create to held, per EgressIP: p50 / p99 / max | %v / %v / %v |", pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	out("| API writes per assignment (EgressIP updates; conflicts) | %.2f (%d updates, %d conflicts, %d other writes besides Events and the leader Lease) |",
		float64(initial.eipStatus)/float64(len(names)), initial.eipStatus, int(counterSums(b, reg, "egressflow_controller_api_writes_total", map[string]string{"kind": "egressip_status", "result": "conflict"}, "")[""]), initial.other)
	out("| spread: addresses per node, min..max | %d..%d |", lo, hi)
	out("| no-op resync of every EgressIP: writes, time to idle | %d, %v |", resync.eipStatus+resync.other+resync.events, resyncTime.Round(time.Millisecond))
	out("| failover of %s (%d addresses): Lease expiry to all held elsewhere (watch) | %v, %d writes |", victim, len(moved), failoverSeen.Sub(expiry).Round(time.Millisecond), failover.eipStatus)
	out("| new leader: EgressIP writes, leading to idle | %d, %v |", adopt.eipStatus, adoptTime.Round(time.Millisecond))
	out("| Events written (first assignment) | %d |", initial.events)
	out("| statuses cleared, a new leader: leading to all held again (watch); writes | %v (%.0f addresses/s); %d |",
		coldHeld.Sub(coldLed).Round(time.Millisecond), float64(len(names))/coldHeld.Sub(coldLed).Seconds(), cold.eipStatus)
	out("| the API server's pace: %d updates by a plain loop (%d workers, the controller's identity) | %v (%.0f/s): the controller at %.2fx |",
		len(names), cluster.DefaultEgressIPWorkers, plain.Round(time.Millisecond), float64(len(names))/plain.Seconds(), plain.Seconds()/coldHeld.Sub(coldLed).Seconds())
	out("")
	out("total bench time %v (start to the second leader %v)", time.Since(start).Round(time.Second), t0.Sub(start).Round(time.Second))

	b.ReportMetric(total.Seconds(), "s-to-all-held")
	b.ReportMetric(float64(initial.eipStatus)/float64(len(names)), "writes/assignment")
	b.ReportMetric(float64(hi-lo), "spread")
	b.ReportMetric(float64(resync.eipStatus+resync.other), "resync-writes")
	b.ReportMetric(float64(failoverSeen.Sub(expiry).Milliseconds()), "failover-ms")
	b.ReportMetric(float64(adopt.eipStatus), "adopt-writes")
	b.ReportMetric(plain.Seconds()/coldHeld.Sub(coldLed).Seconds(), "x-plain")
}

// plainLoop clears every EgressIP's status with one update each, with the
// controller's default concurrency and identity, and returns how long
// that took.
func egressIPPlainLoop(b *testing.B, env *clustertest.Env) time.Duration {
	ctx := context.Background()
	client := versioned.NewForConfigOrDie(env.Cluster.Config(kubetest.Controller)).K8sV1().EgressIPs()
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	wait.Parallel(b, len(list.Items), cluster.DefaultEgressIPWorkers, func(i int) error {
		obj := list.Items[i].DeepCopy()
		obj.Status = esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{}}
		_, err := client.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
	return time.Since(start)
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)].Round(time.Millisecond)
}

// watchEgressIPs follows every EgressIP's status.items: the node of its
// (one) address.
func watchEgressIPs(b *testing.B, env *clustertest.Env) *holderWatch {
	f := esinformers.NewSharedInformerFactory(env.ES, 0)
	return newHolderWatch(b, f, f.K8s().V1().EgressIPs().Informer(), func(obj any) (holding, bool) {
		eip, ok := obj.(*esv1.EgressIP)
		if !ok {
			return holding{}, false
		}
		node := ""
		if len(eip.Status.Items) > 0 {
			node = eip.Status.Items[0].Node
		}
		return holding{eip.Name, node, eip.Status.Conditions}, true
	})
}

// waitAllHeld waits until every EgressIP of names has a node and returns
// when the last got it.
func (w *holderWatch) waitAllHeld(b *testing.B, names []string) time.Time {
	waitFor(b, "every address held", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, n := range names {
			if w.holder[n] == "" {
				return false
			}
		}
		return true
	})
	return w.lastChange(names)
}

func (w *holderWatch) noneHeld(names []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range names {
		if w.holder[n] != "" {
			return false
		}
	}
	return true
}

func (w *holderWatch) heldSince(name string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed[name]
}

// fullest returns the first node (by name) among those holding the most
// addresses, and the EgressIPs it holds.
func (w *holderWatch) fullest(nodes []string) (string, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	by := map[string][]string{}
	for name, n := range w.holder {
		by[n] = append(by[n], name)
	}
	best := ""
	for _, n := range nodes {
		if best == "" || len(by[n]) > len(by[best]) {
			best = n
		}
	}
	return best, by[best]
}
