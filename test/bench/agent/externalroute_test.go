package agent

// BenchmarkAgentExternalRoute: the node agent's AdminPolicyBasedExternalRoute
// part at 1,000 namespaces × 2 policies × 4 hops, every pod on the
// benchmarked node, against a real kube-apiserver and a real Open vSwitch,
// as BenchmarkAgentFirewall does for EgressFirewall: the flows and groups,
// a full sync against `ovs-ofctl bundle` of the same groups and flows, a
// restart, and a next hop's death (its BFD session going down) to the
// groups changed on the bridge.
//
// The hops' MACs and BFD sessions come from fixed tables here (every hop
// resolved; a session's state set by the benchmark): what is measured is
// the agent's reaction, from the session's change to the bundle that takes
// the hop out acknowledged. How long BFD takes to notice a dead gateway is
// controller/bfd's BenchmarkDetection, with our engine and FRR's bfdd.

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/controller/agent"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/bfd"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	erNamespaces = flag.Int("er-namespaces", 1000, "namespaces, each selected by two AdminPolicyBasedExternalRoutes (BenchmarkAgentExternalRoute)")
	erPodsPer    = flag.Int("er-pods", 10, "pods per namespace, all bound to the benchmarked node, dual-stack (BenchmarkAgentExternalRoute)")
	erHops       = flag.Int("er-hops", 4, "static next hops of each policy, half IPv4 and half IPv6, all with BFD (BenchmarkAgentExternalRoute)")
	erChanges    = flag.Int("er-changes", 20, "next hop deaths (and returns), timed for p50/p99 (BenchmarkAgentExternalRoute)")
)

// The gateways: every namespace's first policy lists the first half of
// each family's gateways, its second policy the other half, so each
// namespace's merged hops are every gateway, as a few routers serve
// every namespace in practice.
var (
	erGateways4 = netip.MustParsePrefix("192.0.2.0/24")
	erGateways6 = netip.MustParsePrefix("2001:db8:e::/64")
)

func erNamespace(i int) string { return fmt.Sprintf("er-%04d", i) }

// erGateway is gateway n of a family.
func erGateway(v6 bool, n int) netip.Addr {
	if v6 {
		a := erGateways6.Addr().As16()
		a[15] = byte(n + 1)
		return netip.AddrFrom16(a)
	}
	return nth(erGateways4, n+1)
}

// erPolicy is namespace i's policy half (0 or 1).
func erPolicy(i, half int) *esv1.AdminPolicyBasedExternalRoute {
	perFamily := *erHops / 2
	var hops []esv1.StaticHop
	for _, v6 := range []bool{false, true} {
		for k := range perFamily {
			hops = append(hops, esv1.StaticHop{IP: erGateway(v6, half*perFamily+k).String(), BFDEnabled: true})
		}
	}
	return &esv1.AdminPolicyBasedExternalRoute{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%c", erNamespace(i), 'a'+half)},
		Spec: esv1.AdminPolicyBasedExternalRouteSpec{
			From:     esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"route": erNamespace(i)}}},
			NextHops: esv1.ExternalNextHops{StaticHops: hops},
		},
	}
}

func erPod(i, j int) *corev1.Pod {
	ips := dualStackPodIPs(i*(*erPodsPer) + j)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: erNamespace(i), Name: fmt.Sprintf("pod-%02d", j)},
		Spec:       corev1.PodSpec{NodeName: benchNode, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0].String(),
			PodIPs: []corev1.PodIP{{IP: ips[0].String()}, {IP: ips[1].String()}}},
	}
}

func (e *env) createExternalRouteCluster(b *testing.B) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode},
		Spec: corev1.NodeSpec{PodCIDR: qosNodePodCIDRs[0].String(), PodCIDRs: []string{qosNodePodCIDRs[0].String(), qosNodePodCIDRs[1].String()}}}
	if _, err := e.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	wait.Parallel(b, *erNamespaces, *setupWorkers, func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: erNamespace(i), Labels: map[string]string{"route": erNamespace(i)}}}
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		for half := range 2 {
			if _, err := e.adminES.K8sV1().AdminPolicyBasedExternalRoutes().Create(ctx, erPolicy(i, half), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	e.createPods(b, *erNamespaces*(*erPodsPer), func(k int) *corev1.Pod { return erPod(k / *erPodsPer, k%*erPodsPer) })
}

// fixedHops plays the node's neighbour table and BFD sessions: every hop
// has a MAC, and a session Up unless the benchmark set it down; a change
// is signalled on changed, as the agent's main signals the engine's.
type fixedHops struct {
	changed chan struct{}
	mu      sync.Mutex
	peers   map[netip.Addr]bool
	down    map[netip.Addr]bool
}

func newFixedHops() *fixedHops {
	return &fixedHops{changed: make(chan struct{}, 1), peers: map[netip.Addr]bool{}, down: map[netip.Addr]bool{}}
}

func (h *fixedHops) Want([]netip.Addr) {}

func (h *fixedHops) MAC(addr netip.Addr) (net.HardwareAddr, bool) {
	a := addr.As16()
	return net.HardwareAddr{0x02, 0xe0, a[12], a[13], a[14], a[15]}, true
}

func (h *fixedHops) Add(peer netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peers[peer] = true
	return nil
}

func (h *fixedHops) Remove(peer netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.peers, peer)
}

func (h *fixedHops) Peers() []netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []netip.Addr
	for p := range h.peers {
		out = append(out, p)
	}
	return out
}

func (h *fixedHops) State(peer netip.Addr) (bfd.State, bfd.Diag, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.peers[peer] {
		return bfd.Down, 0, false
	}
	if h.down[peer] {
		return bfd.Down, bfd.DiagControlDetectionExpired, true
	}
	return bfd.Up, 0, true
}

// setDown sets peer's session down or up and signals the change.
func (h *fixedHops) setDown(peer netip.Addr, down bool) {
	h.mu.Lock()
	h.down[peer] = down
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (e *env) clearGroups(b *testing.B) {
	e.sw.Ofctl(b, "del-groups", e.sw.Bridge)
}

// groupCount is how many groups the bridge has, and their buckets.
func (e *env) groupCount(b *testing.B) (groups, buckets int) {
	out := e.sw.Ofctl(b, "dump-groups", e.sw.Bridge)
	return strings.Count(out, "group_id="), strings.Count(out, "bucket=")
}

func BenchmarkAgentExternalRoute(b *testing.B) {
	ovstest.RequireRoot(b)
	logs := captureKlog()
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	if *erNamespaces < 1 || *erPodsPer < 1 || *rounds < 1 || *erChanges < 1 || *erHops < 2 || *erHops%2 != 0 {
		b.Fatal("-er-namespaces, -er-pods, -rounds and -er-changes must be positive, -er-hops even and 2 or more")
	}
	benchStart := time.Now()
	e := newEnv(b)
	e.podCIDRs = []netip.Prefix{clusterPodCIDR, qosClusterPodCIDR6}
	e.serviceCIDRs = []netip.Prefix{serviceCIDR, qosServiceCIDR6}
	hops := newFixedHops()
	e.configure = func(cfg *agent.Config) {
		cfg.Neighbours, cfg.BFD, cfg.HopsChanged = hops, hops, hops.changed
	}
	pods := *erNamespaces * (*erPodsPer)
	out("AdminPolicyBasedExternalRoute bench: %d namespaces x 2 policies x %d hops (half IPv4, half IPv6, all with BFD), %d pods dual-stack, all on %s",
		*erNamespaces, *erHops, pods, benchNode)

	t0 := time.Now()
	e.createExternalRouteCluster(b)
	out("setup: %d namespaces, %d policies, %d Pods (created and their status written, %d workers) in %v",
		*erNamespaces, 2*(*erNamespaces), pods, *setupWorkers, time.Since(t0).Round(time.Millisecond))

	// Warm-up: one full sync, unmeasured, capturing the groups and flows.
	e.clearFlows(b)
	e.clearGroups(b)
	warm := e.startAgent(b, logs, true)
	warm.waitHealthy(b)
	flowSet, groupSet := warm.sw.firstBundle(), warm.sw.firstBundleGroups()
	warm.stop()
	wantFlows := len(flowSet) + 1 // the marker stays on a cleared bridge
	wantGroups, wantBuckets := 2*(*erNamespaces), 2*(*erNamespaces)*(*erHops)
	if len(groupSet) != wantGroups {
		b.Fatalf("the agent's first bundle has %d groups, want %d (one per namespace and family)", len(groupSet), wantGroups)
	}
	byKind := map[dataplane.FlowKind]int{}
	for _, fm := range flowSet {
		c, _ := dataplane.DecodeCookie(fm.Cookie)
		byKind[c.Kind]++
	}
	// The count, from docs/externalroute.md's flows: per pod address a
	// steering flow and an inbound record per gateway of its family; per
	// namespace and family (a route) a pick, and a sticky and a commit
	// flow per gateway. Each namespace's routes have -er-hops gateways of
	// each family: half from each policy.
	addresses, routes := 2*pods, 2*(*erNamespaces)
	wantByKind := map[dataplane.FlowKind]int{
		dataplane.KindExternalRouteSteer:   addresses,
		dataplane.KindExternalRouteInbound: addresses * (*erHops),
		dataplane.KindExternalRoutePick:    routes,
		dataplane.KindExternalRouteSticky:  routes * (*erHops),
		dataplane.KindExternalRouteCommit:  routes * (*erHops),
	}
	routeFlows := 0
	for kind, want := range wantByKind {
		if byKind[kind] != want {
			b.Fatalf("%d flows of kind %#x in the agent's first bundle, the count is %d", byKind[kind], kind, want)
		}
		routeFlows += want
	}
	bundleFile := ovstest.WriteBundleFile(b, groupSet, flowSet)
	out("flow set: %d flows and %d groups (%d buckets); the external routes' %d: steer %d + inbound %d (pod addresses x (1 + gateways of the family)) + pick %d + sticky %d + commit %d (routes x (1 + 2 x gateways)); %d others (pipeline, pod guard)",
		wantFlows, wantGroups, wantBuckets, routeFlows, byKind[dataplane.KindExternalRouteSteer], byKind[dataplane.KindExternalRouteInbound],
		byKind[dataplane.KindExternalRoutePick], byKind[dataplane.KindExternalRouteSticky], byKind[dataplane.KindExternalRouteCommit], wantFlows-routeFlows)
	checkBridge := func(what string) {
		e.expectFlowCount(b, wantFlows)
		if g, k := e.groupCount(b); g != wantGroups || k != wantBuckets {
			b.Fatalf("%s: %d groups with %d buckets on the bridge, want %d with %d", what, g, k, wantGroups, wantBuckets)
		}
	}

	full := e.compareFullSync(b, logs, fullSyncRounds{
		flowMods: len(flowSet),
		install:  func() time.Duration { return e.sw.Bundle(b, bundleFile) },
		check:    checkBridge,
	})
	syncMed, ofctlMed, ratio, last := full.sync, full.ofctl, full.ratio, full.last

	// Restart with everything in place.
	last.stop()
	restarted := e.startAgent(b, logs, false)
	restartHealthy := restarted.waitHealthy(b)
	time.Sleep(restartSettle)
	restartMods := restarted.sw.mods.Load()
	checkBridge("after the restart")
	restartTotal := restartHealthy.Sub(restarted.started)
	out("restart with everything in place: %d flow and group mods (%v after healthy); healthy %v after start",
		restartMods, restartSettle, restartTotal.Round(time.Millisecond))

	// A hop's session goes down, then up again: the time from the change
	// signalled to the bundle changing the groups acknowledged.
	dying := erGateway(false, 0)
	anyGroup := func(*openflow.GroupMod) bool { return true }
	noFlow := func(*openflow.FlowMod) bool { return false }
	var death, revival []time.Duration
	for s := range latencyWarmup + *erChanges {
		for _, down := range []bool{true, false} {
			w := &flowWatch{carries: noFlow, carriesGroup: anyGroup, done: make(chan time.Time, 1)}
			d := w.await(b, restarted.sw, "the groups changed", func() error { hops.setDown(dying, down); return nil })
			if s == 0 && down {
				if g, k := e.groupCount(b); g != wantGroups || k != wantBuckets-*erNamespaces {
					b.Fatalf("with %s down: %d groups with %d buckets, want %d with %d (one less in each IPv4 group)", dying, g, k, wantGroups, wantBuckets-*erNamespaces)
				}
			}
			if s < latencyWarmup {
				continue
			}
			if down {
				death = append(death, d)
			} else {
				revival = append(revival, d)
			}
		}
	}
	checkBridge("after the hop came back")
	out("hop %s's BFD session down -> the %d IPv4 groups without it, bundle acked (%d samples): p50 %v, p99 %v, max %v; back up -> p50 %v, p99 %v",
		dying, *erNamespaces, len(death), percentile(death, 50).Round(100*time.Microsecond), percentile(death, 99).Round(100*time.Microsecond),
		slices.Max(death).Round(100*time.Microsecond), percentile(revival, 50).Round(100*time.Microsecond), percentile(revival, 99).Round(100*time.Microsecond))
	restarted.stop()
	out("total bench time %v", time.Since(benchStart).Round(time.Second))

	out("")
	out("%-66s %14s", fmt.Sprintf("AdminPolicyBasedExternalRoute bench, %d namespaces x 2 policies x %d hops", *erNamespaces, *erHops), "value")
	out("%s", strings.Repeat("-", 81))
	row := func(name, value string) { out("%-66s %14s", name, value) }
	row("flows in the full set", strconv.Itoa(wantFlows))
	row("  of which the external routes' (= the count)", strconv.Itoa(routeFlows))
	row("groups (one per namespace and family)", strconv.Itoa(wantGroups))
	row("buckets", strconv.Itoa(wantBuckets))
	row("full sync, agent: sync start to Healthy, median (s)", secs(syncMed))
	row("same groups and flows, ovs-ofctl bundle, median (s)", secs(ofctlMed))
	row("ratio agent / ovs-ofctl", fmt.Sprintf("%.2f", ratio))
	row("restart, everything in place: mods", strconv.FormatInt(restartMods, 10))
	row("restart, everything in place: start to Healthy (s)", secs(restartTotal))
	row("hop's BFD down -> groups changed, bundle acked, p50 (ms)", ms(percentile(death, 50)))
	row("hop's BFD down -> groups changed, bundle acked, p99 (ms)", ms(percentile(death, 99)))
	row("hop's BFD up -> groups changed, bundle acked, p50 (ms)", ms(percentile(revival, 50)))
	row("hop's BFD up -> groups changed, bundle acked, p99 (ms)", ms(percentile(revival, 99)))

	b.ReportMetric(float64(wantFlows), "flows")
	b.ReportMetric(float64(wantGroups), "groups")
	b.ReportMetric(ratio, "ratio-vs-ofctl")
	b.ReportMetric(float64(percentile(death, 99).Microseconds())/1000, "hop-death-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// lineDiff lists the lines only in a (-) and only in b (+), at most 20,
// in any order (ovs-ofctl dump-groups does not sort); "" when a and b
// have the same lines.
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		switch {
		case n > 0:
			out = append(out, "- "+l)
		case n < 0:
			out = append(out, "+ "+l)
		}
	}
	slices.Sort(out)
	return strings.Join(out[:min(len(out), 20)], "\n")
}
