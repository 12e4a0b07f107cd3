package agent

// BenchmarkAgentEgressIP: the node agent's EgressIP part at the issue's
// scale (10,000 selected pods), on the same harness as BenchmarkAgent (a
// real kube-apiserver, a real Open vSwitch, the agent in-process, ovs-ofctl
// --bundle of the same flow set into the same emptied switch).

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/wait"
)

// The scale; the defaults are the (10,000 selected pods).
var (
	eipPods    = flag.Int("eip-pods", 10000, "selected pods, dual-stack, spread over the EgressIPs' namespaces (BenchmarkAgentEgressIP)")
	eipObjects = flag.Int("eip-objects", 100, "EgressIPs, each selecting one namespace's pods, with an IPv4 and an IPv6 address (BenchmarkAgentEgressIP)")
	// 50 samples make p99 the worst one; each is one object's sync.
	eipChanges = flag.Int("eip-changes", 50, "takeovers and pod relabels timed for p50/p99 (BenchmarkAgentEgressIP)")
)

// The shape of the EgressIP cluster.
const (
	// eipPodNodes are the nodes the selected pods run on, none of them the
	// benchmarked node: the holder SNATs pods wherever they run, and a
	// remote pod costs the holder exactly its SNAT flows.
	eipPodNodes = 9
	// eipOtherHolder is where a takeover sample moves an address from.
	eipOtherHolder = "other-node-1"
	// eipUnselected is the app label that takes a pod out of its
	// EgressIP (podSelector app NotIn [eipUnselected]).
	eipUnselected = "off"
	// eipSettle is how long a sample waits after the untimed half of its
	// change (the address moved away, the pod relabelled out) once its
	// flows are gone: that sync still flushes the old translations from
	// conntrack, one message per protocol per pod address, and a timed
	// change must not queue behind it.
	eipSettle = 500 * time.Millisecond
)

// eipNamespace is object i's namespace (and name), eipPodName pod j's.
func eipNamespace(i int) string { return fmt.Sprintf("eip-%03d", i) }

// eipAddrs are object i's egress IPs, IPv4 and IPv6.
func eipAddrs(i int) [2]netip.Addr {
	v6 := netip.MustParseAddr("2001:db8:e1::").As16()
	v6[14], v6[15] = byte((i+1)>>8), byte(i+1)
	return [2]netip.Addr{nth(netip.MustParsePrefix("198.51.100.0/22"), i+1), netip.AddrFrom16(v6)}
}

// eipObject is EgressIP i, its addresses held by holder.
func eipObject(i int, holder string) *esv1.EgressIP {
	addrs := eipAddrs(i)
	eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: eipNamespace(i)},
		Spec: esv1.EgressIPSpec{
			EgressIPs:         []string{addrs[0].String(), addrs[1].String()},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"eip": eipNamespace(i)}},
			PodSelector: esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{eipUnselected}}}},
		}}
	setHolder(eip, holder)
	return eip
}

func setHolder(eip *esv1.EgressIP, holder string) {
	eip.Status.Items = nil
	for _, a := range eip.Spec.EgressIPs {
		eip.Status.Items = append(eip.Status.Items, esv1.EgressIPStatusItem{EgressIP: a, Node: holder})
	}
}

// eipExpectedFlows is the benchmark's own count of the holder's flows,
// from docs/egressip.md's flow table, not from controller/dataplane: the
// shared flows (no stage object, no admitted pod), TableReply's three
// (delivery per family, the rest NORMAL), TableUplink's three (per family
// out of the uplink what conntrack translated, and the drop of the rest),
// per object an IPv4 address's reply flow, ARP request flow and gratuitous
// ARP's pass and an IPv6 one's reply, two solicitation flows and the
// advertisement's, and an SNAT flow per selected pod address.
func eipExpectedFlows(e *env, objects, pods int) int {
	return stageSharedFlows(len(e.podCIDRs), len(e.serviceCIDRs), 1) + 3 + 3 + objects*(3+4) + 2*pods
}

func BenchmarkAgentEgressIP(b *testing.B) {
	ovstest.RequireRoot(b)
	logs := captureKlog()
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	if *eipObjects < 1 || *eipPods < *eipObjects || *rounds < 1 || *eipChanges < 1 {
		b.Fatal("-eip-objects, -rounds and -eip-changes must be positive, -eip-pods at least -eip-objects")
	}
	benchStart := time.Now()
	e := newEnv(b)
	e.podCIDRs = []netip.Prefix{clusterPodCIDR, qosClusterPodCIDR6}
	e.serviceCIDRs = []netip.Prefix{serviceCIDR, qosServiceCIDR6}
	out("EgressIP bench: %d EgressIPs (an IPv4 and an IPv6 address each, all held by %s) selecting %d dual-stack pods on %d other nodes",
		*eipObjects, benchNode, *eipPods, eipPodNodes)
	bin := proc.Build(b, "cmd/egressflow-agent")

	t0 := time.Now()
	e.createEgressIPCluster(b)
	out("setup: %d namespaces, EgressIPs and %d Pods (created and their status written, %d workers) in %v",
		*eipObjects, *eipPods, *setupWorkers, time.Since(t0).Round(time.Millisecond))

	wantFlows := eipExpectedFlows(e, *eipObjects, *eipPods)
	wantMods := wantFlows - 1 // the marker stays on a cleared bridge
	e.clearFlows(b)
	warm := e.startAgent(b, logs, true)
	warm.waitHealthy(b)
	flowSet := warm.sw.firstBundle()
	warm.stop()
	if len(flowSet) != wantMods {
		b.Fatalf("the agent's first bundle has %d flows, the benchmark counts %d besides the marker", len(flowSet), wantMods)
	}
	byKind := map[dataplane.FlowKind]int{}
	for _, fm := range flowSet {
		c, _ := dataplane.DecodeCookie(fm.Cookie)
		byKind[c.Kind]++
	}
	for kind, want := range map[dataplane.FlowKind]int{dataplane.KindEgressIPSNAT: 2 * *eipPods, dataplane.KindEgressIPReply: 2 * *eipObjects,
		dataplane.KindEgressIPARP: 2 * *eipObjects, dataplane.KindEgressIPND: 3 * *eipObjects} {
		if byKind[kind] != want {
			b.Fatalf("%d flows of kind %#x in the agent's first bundle, the benchmark counts %d", byKind[kind], kind, want)
		}
	}
	flowFile := ovstest.WriteFlowFile(b, flowSet)
	out("flow set: %d flows: %d SNAT (a flow per selected pod address) + %d per held address (reply; ARP request and gratuitous ARP, or two solicitation and one advertisement flows) + %d shared; written to %s for ovs-ofctl",
		wantFlows, 2**eipPods, 7**eipObjects, wantFlows-2**eipPods-7**eipObjects, flowFile)

	full := e.compareFullSync(b, logs, fullSyncRounds{
		flowMods: wantMods, checkMods: true,
		install: func() time.Duration { return e.sw.BundleAddFlows(b, flowFile) },
		check:   func(string) { e.expectFlowCount(b, wantFlows) },
	})
	syncMed, ofctlMed, ratio, last := full.sync, full.ofctl, full.ratio, full.last

	// Restart with everything in place.
	before := e.sw.Ofctl(b, "dump-flows", e.sw.Bridge, cookieFilter, "--no-stats", "--sort")
	last.stop()
	restarted := e.startAgent(b, logs, false)
	restartHealthy := restarted.waitHealthy(b)
	time.Sleep(restartSettle)
	restartMods := restarted.sw.mods.Load()
	if after := e.sw.Ofctl(b, "dump-flows", e.sw.Bridge, cookieFilter, "--no-stats", "--sort"); after != before {
		b.Errorf("the flows changed across the restart")
	}
	out("restart with everything in place: %d flow mods; healthy %v after start", restartMods, restartHealthy.Sub(restarted.started).Round(time.Millisecond))

	// Takeover: an object's addresses move to another node (untimed), then
	// back to this one: from the Update to the bundle with its SNAT flows.
	takeover, takeoverSync := changeLatency(b, restarted, *eipObjects, *eipChanges, e.takeOver)
	e.expectFlowCount(b, wantFlows)
	out("takeover (status.items names this node) -> its SNAT and responder flows in OVS (%d samples): p50 %v, p99 %v, max %v; mean agent node sync meanwhile %v",
		len(takeover), percentile(takeover, 50).Round(100*time.Microsecond), percentile(takeover, 99).Round(100*time.Microsecond),
		slices.Max(takeover).Round(100*time.Microsecond), takeoverSync.Round(100*time.Microsecond))
	relabel, relabelSync := changeLatency(b, restarted, *eipObjects, *eipChanges, e.reselectPod)
	e.expectFlowCount(b, wantFlows)
	out("pod relabelled into its EgressIP -> its SNAT flows in OVS (%d samples): p50 %v, p99 %v, max %v; mean agent node sync meanwhile %v",
		len(relabel), percentile(relabel, 50).Round(100*time.Microsecond), percentile(relabel, 99).Round(100*time.Microsecond),
		slices.Max(relabel).Round(100*time.Microsecond), relabelSync.Round(100*time.Microsecond))
	restarted.stop()

	e.clearFlows(b)
	mem := e.runBinary(b, bin, wantMods, wantFlows, "")
	out("agent binary: healthy %v after start (informers synced %v); VmRSS %.1f MB when healthy, %.1f MB after %v; peak VmHWM %.1f MB; then Go heap in use %.1f MB",
		mem.healthy.Round(time.Millisecond), mem.synced.Round(time.Millisecond), mb(mem.rssHealthy), mb(mem.rssSettled), binarySettle, mb(mem.peak), mb(mem.heapInuse))
	out("total bench time %v", time.Since(benchStart).Round(time.Second))

	out("")
	out("%-66s %14s", fmt.Sprintf("EgressIP agent bench, %d selected pods, %d EgressIPs held here", *eipPods, *eipObjects), "value")
	out("%s", strings.Repeat("-", 81))
	row := func(name, value string) { out("%-66s %14s", name, value) }
	row("flows in the full set", strconv.Itoa(wantFlows))
	row("  SNAT flows (selected pod addresses)", strconv.Itoa(2**eipPods))
	row("informer sync of the agent, median (s)", secs(full.informers))
	row("full sync, agent: sync start to Healthy, median (s)", secs(syncMed))
	row("same flows, ovs-ofctl --bundle add-flows, median (s)", secs(ofctlMed))
	row("ratio agent / ovs-ofctl (flows/s)", fmt.Sprintf("%.2f", ratio))
	row("restart, everything in place: flow mods", strconv.FormatInt(restartMods, 10))
	row("takeover: Update to bundle acked, p50 (ms)", ms(percentile(takeover, 50)))
	row("takeover: Update to bundle acked, p99 (ms)", ms(percentile(takeover, 99)))
	row("pod relabelled in: Update to bundle acked, p50 (ms)", ms(percentile(relabel, 50)))
	row("pod relabelled in: Update to bundle acked, p99 (ms)", ms(percentile(relabel, 99)))
	row("agent binary peak RSS, VmHWM (MB)", fmt.Sprintf("%.1f", mb(mem.peak)))

	b.ReportMetric(float64(wantFlows), "flows")
	b.ReportMetric(ratio, "ratio-vs-ofctl")
	b.ReportMetric(float64(restartMods), "restart-mods")
	b.ReportMetric(float64(percentile(takeover, 99).Microseconds())/1000, "takeover-p99-ms")
	b.ReportMetric(float64(percentile(relabel, 99).Microseconds())/1000, "relabel-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// createEgressIPCluster creates benchNode, a namespace and an EgressIP per
// object (held by benchNode), and the pods, spread over the namespaces and
// bound to the other nodes, with their status written.
func (e *env) createEgressIPCluster(b *testing.B) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode}}
	n, err := e.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nth(nodeIPs, 10).String()}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	wait.Parallel(b, *eipObjects, *setupWorkers, func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: eipNamespace(i), Labels: map[string]string{"eip": eipNamespace(i)}}}
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := e.adminES.K8sV1().EgressIPs().Create(ctx, eipObject(i, benchNode), metav1.CreateOptions{})
		return err
	})
	wait.Parallel(b, *eipPods, *setupWorkers, func(k int) error {
		pod := eipPod(k)
		status := pod.Status
		created, err := e.admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		_, err = e.admin.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

// eipPod is the k-th selected pod: in namespace k mod objects, on another
// node, dual-stack.
func eipPod(k int) *corev1.Pod {
	ips := dualStackPodIPs(k)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: eipNamespace(k % *eipObjects), Name: fmt.Sprintf("pod-%05d", k), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: nodeName(1 + k%eipPodNodes), Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0].String(),
			PodIPs: []corev1.PodIP{{IP: ips[0].String()}, {IP: ips[1].String()}}},
	}
}

// takeOver moves object i's addresses to eipOtherHolder and waits for its
// flows to leave, then back to benchNode, and returns the time from that
// Update to the bundle adding its SNAT flows.
func (e *env) takeOver(b *testing.B, r *runningAgent, i int) time.Duration {
	ctx := context.Background()
	client := e.adminES.K8sV1().EgressIPs()
	move := func(holder string) *esv1.EgressIP {
		eip, err := client.Get(ctx, eipNamespace(i), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		setHolder(eip, holder)
		return eip
	}
	key := dataplane.ObjectKey(dataplane.APIEgressIP, "", eipNamespace(i))
	filter := fmt.Sprintf("cookie=%#x/%#x", dataplane.Cookie(dataplane.KindEgressIPReply, key), dataplane.ServiceCookieMask|0xff<<40)
	if _, err := client.Update(ctx, move(eipOtherHolder), metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	wait.Until(b, waitLimit, func() error {
		if n := e.sw.FlowCount(b, filter); n != 0 {
			return fmt.Errorf("%d reply flows of %s left", n, key)
		}
		return nil
	})
	time.Sleep(eipSettle)
	snat := dataplane.Cookie(dataplane.KindEgressIPSNAT, key)
	back := move(benchNode)
	return newFlowWatch(func(m *openflow.FlowMod) bool {
		return m.Command == openflow.FlowAdd && m.Cookie == snat
	}).await(b, r.sw, key+"'s SNAT flows", func() error {
		_, err := client.Update(ctx, back, metav1.UpdateOptions{})
		return err
	})
}

// reselectPod relabels object i's first pod out of its EgressIP (untimed,
// waiting for the flows' removal), then back in, and returns the time
// from that Update to the bundle adding its SNAT flow.
func (e *env) reselectPod(b *testing.B, r *runningAgent, i int) time.Duration {
	ctx := context.Background()
	pods := e.admin.CoreV1().Pods(eipNamespace(i))
	name := eipPod(i).Name
	ip := dualStackPodIPs(i)[0]
	relabel := func(app string) *corev1.Pod {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pod.Labels = map[string]string{"app": app}
		return pod
	}
	if _, err := pods.Update(ctx, relabel(eipUnselected), metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	filter := fmt.Sprintf("%s,ip,nw_src=%s", cookieFilter, ip)
	wait.Until(b, waitLimit, func() error {
		if n := e.sw.FlowCount(b, filter); n != 0 {
			return fmt.Errorf("%d flows of %s left", n, ip)
		}
		return nil
	})
	time.Sleep(eipSettle)
	back := relabel("web")
	return newFlowWatch(addsSource(ip)).await(b, r.sw, "pod "+ip.String()+"'s SNAT flow", func() error {
		_, err := pods.Update(ctx, back, metav1.UpdateOptions{})
		return err
	})
}
