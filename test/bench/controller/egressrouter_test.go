package controller

// BenchmarkEgressRouterAssign is the controller's EgressRouter member
// against a real API server (test/kubetest): by default 10 nodes with
// heartbeating agents and 1,000 EgressRouters of 10 rules each, created at
// once. The agents publish as their EgressRouter watermark the newest
// revision of a router they have seen, as a real agent does once its sync
// applied it (without the sync's own time, which BenchmarkAgentEgressRouter
// measures). It measures, in one run:
//
//   - time from the first create to every router holding a node, and to
//     every router Available, and the spread over the nodes;
//   - the API writes per router (status, Service, EndpointSlices);
//   - a holder's agent stopped: from its Lease's expiry to every router it
//     held naming another node, and Available there (p50, p99 per router).
//
// Run it with make bench-egressrouter.

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	routerNodeCount = flag.Int("router-nodes", 10, "nodes with agents, all in the routers' subnets (BenchmarkEgressRouterAssign)")
	routerCount     = flag.Int("routers", 1000, "EgressRouters, each with an IPv4 and an IPv6 address (BenchmarkEgressRouterAssign)")
	routerRuleCount = flag.Int("router-rules", 10, "redirect rules of each router (BenchmarkEgressRouterAssign)")
)

// routerBenchNamespace holds the benchmark's routers.
const routerBenchNamespace = "routers"

// routerAvailability follows each router's holder and Available
// condition, and the newest router revision seen (the agents' watermark).
type routerAvailability struct {
	mu        sync.Mutex
	holder    map[string]string
	moved     map[string]time.Time // when each router's holder last changed
	available map[string]time.Time // since when, by router; absent: not
	newest    atomic.Int64
}

func watchRouters(b *testing.B, env *clustertest.Env) *routerAvailability {
	w := &routerAvailability{holder: map[string]string{}, moved: map[string]time.Time{}, available: map[string]time.Time{}}
	f := esinformers.NewSharedInformerFactory(env.ES, 0)
	record := func(obj any) {
		r, ok := obj.(*nov1.EgressRouter)
		if !ok {
			return
		}
		if rv, err := strconv.ParseInt(r.ResourceVersion, 10, 64); err == nil {
			for {
				old := w.newest.Load()
				if rv <= old || w.newest.CompareAndSwap(old, rv) {
					break
				}
			}
		}
		available := slices.ContainsFunc(r.Status.Conditions, func(c nov1.EgressRouterStatusCondition) bool {
			return c.Type == nov1.EgressRouterAvailable && c.Status == nov1.ConditionTrue
		})
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.holder[r.Name] != r.Status.Holder {
			w.moved[r.Name] = time.Now()
		}
		w.holder[r.Name] = r.Status.Holder
		_, was := w.available[r.Name]
		switch {
		case available && !was:
			w.available[r.Name] = time.Now()
		case !available:
			delete(w.available, r.Name)
		}
	}
	inf := f.NetworkOperator().V1().EgressRouters().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, n any) { record(n) }}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	b.Cleanup(func() { cancel(); f.Shutdown() })
	f.WaitForCacheSync(ctx.Done())
	return w
}

// waitAvailable waits until every router of names is Available on a node
// that accept takes, and returns when the last became so.
func (w *routerAvailability) waitAvailable(b *testing.B, names []string, accept func(string) bool) time.Time {
	var last time.Time
	wait.UntilEvery(b, 10*time.Minute, 20*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		last = time.Time{}
		for _, n := range names {
			at, ok := w.available[n]
			if !ok || !accept(w.holder[n]) {
				return fmt.Errorf("%s not Available (holder %q)", n, w.holder[n])
			}
			if at.After(last) {
				last = at
			}
		}
		return nil
	})
	return last
}

// benchRouterObject is router i, its addresses in the nodes' subnets.
func benchRouterObject(i int) *nov1.EgressRouter {
	r := &nov1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Namespace: routerBenchNamespace, Name: fmt.Sprintf("router-%04d", i)},
		Spec: nov1.EgressRouterSpec{
			Mode:             nov1.EgressRouterModeRedirect,
			NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
			Addresses: []nov1.EgressRouterAddress{
				{IP: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)}), 10).String()},
				{IP: fmt.Sprintf("fd00:64::%x/64", i+1)},
			},
			Redirect: &nov1.RedirectConfig{FallbackIP: "203.0.113.1"},
		},
	}
	for k := range *routerRuleCount {
		r.Spec.Redirect.RedirectRules = append(r.Spec.Redirect.RedirectRules,
			nov1.L4RedirectRule{DestinationIP: fmt.Sprintf("198.51.100.%d", k+1), Port: int32(1000 + k), Protocol: nov1.ProtocolTypeTCP})
	}
	return r
}

func BenchmarkEgressRouterAssign(b *testing.B) {
	ctx := context.Background()
	start := time.Now()
	env := clustertest.Start(b)
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	out("egressrouter bench: %d nodes, %d EgressRouters x %d rules; agents renew every %v, expire after %v",
		*routerNodeCount, *routerCount, *routerRuleCount, *eipAgentRenew, *eipAgentExpire)
	if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: routerBenchNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	nodes := make([]string, *routerNodeCount)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("router-node-%02d", i)
	}
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		return createReadyNode(ctx, env.Kube, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i]}})
	})
	w := watchRouters(b, env)
	subnets := heartbeat.ParseEgressSubnets("100.64.0.0/10,fd00:64::/64")
	agents := startLivenessAgents(b, env, nodes, livenessProtocol{renew: *eipAgentRenew, expire: *eipAgentExpire}, func(int) heartbeat.Facts {
		return heartbeat.Facts{SyncState: heartbeat.SyncStateSynced, EgressSubnets: subnets, RouterRevision: strconv.FormatInt(w.newest.Load(), 10)}
	}).agentSet
	out("setup: %d nodes with agents in %v", len(nodes), time.Since(start).Round(time.Millisecond))

	opts := cluster.Options{Identity: "bench-a", LeaderElection: true, RetryPeriod: 500 * time.Millisecond, RenewDeadline: 5 * time.Second,
		LeaseDuration: 10 * time.Second, Registerer: prometheus.NewRegistry()}
	r := env.RunController(b, opts)
	waitFor(b, "leading", func() bool { return r.Leading() })
	waitIdle(b, r)

	names := make([]string, *routerCount)
	firstCreate := time.Now()
	writesBefore := r.Writes.Len()
	wait.Parallel(b, len(names), *setupWorkers, func(i int) error {
		obj := benchRouterObject(i)
		names[i] = obj.Name
		_, err := env.ES.NetworkOperatorV1().EgressRouters(routerBenchNamespace).Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	anyNode := func(n string) bool { return n != "" }
	allAvailable := w.waitAvailable(b, names, anyNode)
	waitIdle(b, r)
	writes, _ := r.Writes.Since(writesBefore)
	load := map[string]int{}
	w.mu.Lock()
	for _, n := range names {
		load[w.holder[n]]++
	}
	w.mu.Unlock()
	var loads []int
	for _, n := range nodes {
		loads = append(loads, load[n])
	}

	// The fullest node's agent stops: its routers move once its Lease
	// expires (the probes, which would find it sooner, are not run here).
	victim := nodes[0]
	for _, n := range nodes {
		if load[n] > load[victim] {
			victim = n
		}
	}
	var moved []string
	w.mu.Lock()
	for _, n := range names {
		if w.holder[n] == victim {
			moved = append(moved, n)
		}
	}
	w.mu.Unlock()
	agents.stop(victim)
	lease, err := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	expiry := lease.Spec.RenewTime.Add(*eipAgentExpire)
	w.waitAvailable(b, moved, func(n string) bool { return n != "" && n != victim })
	var lat, holderLat []time.Duration
	w.mu.Lock()
	for _, n := range moved {
		lat = append(lat, w.available[n].Sub(expiry))
		holderLat = append(holderLat, w.moved[n].Sub(expiry))
	}
	w.mu.Unlock()
	slices.Sort(lat)
	slices.Sort(holderLat)

	total := allAvailable.Sub(firstCreate)
	out("")
	out("| measure | value |")
	out("| --- | --- |")
	out("| routers x rules, nodes | %d x %d, %d |", len(names), *routerRuleCount, len(nodes))
	out("| first create to all Available | %v (%.1f routers/s) |", total.Round(time.Millisecond), float64(len(names))/total.Seconds())
	out("| routers per node, min / max | %d / %d |", slices.Min(loads), slices.Max(loads))
	out("| API writes per router (status, Service, EndpointSlices) | %.2f (%d) |", float64(len(writes))/float64(len(names)), len(writes))
	out("| a holder's agent stopped: %d routers, Lease expiry to status.holder naming another node | p50 %v, p99 %v |", len(moved), pct(holderLat, 50), pct(holderLat, 99))
	out("| the same, to Available there (its agent's watermark published) | p50 %v, p99 %v |", pct(lat, 50), pct(lat, 99))
	out("")
	out("total bench time %v", time.Since(start).Round(time.Second))
	b.ReportMetric(total.Seconds(), "s-to-all-available")
	b.ReportMetric(float64(len(writes))/float64(len(names)), "writes/router")
	b.ReportMetric(float64(pct(lat, 99).Milliseconds()), "move-p99-ms")
}
