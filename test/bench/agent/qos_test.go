package agent

// BenchmarkAgentQoS: the node agent's EgressQoS part (TableQoS) at the
// issue's scale, on the same harness as BenchmarkAgent (a real
// kube-apiserver, a real Open vSwitch, the agent in-process, ovs-ofctl
// --bundle of the same flow set into the same emptied switch).

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/wait"
)

// The scale. By default 1,000 namespaces × 10 rules × 10 pods: 10,000
// pods on the benchmarked node, some forty times what a kubelet admits
// (110 by default; managed clouds allow up to about 250), so a bound on
// any real node, which the agent binary must hold inside the DaemonSet's
// memory limit. -pods=100 is the stress case of 100,000 pods on one
// node, past that limit (docs/egressqos.md). -rounds, -setup-workers and
// the binary's profiling flags are BenchmarkAgent's.
var (
	qosNamespaces = flag.Int("namespaces", 1000, "namespaces, each with an EgressQoS default of 10 rules (BenchmarkAgentQoS)")
	qosPodsPer    = flag.Int("pods", 10, "pods per namespace, all bound to the benchmarked node, dual-stack (BenchmarkAgentQoS)")
	// 50 samples make p99 the worst one; each costs a sync that re-reads
	// every local pod (a relabel) or one namespace (a DSCP change).
	qosChanges = flag.Int("changes", 50, "pod relabels, and DSCP changes, timed for p50/p99 (BenchmarkAgentQoS)")
)

// The shape of the QoS cluster.
const (
	// qosSpreadNodes is the cluster size for which the flow count of a
	// node's share is computed (not installed): the pods spread over that
	// many nodes, as a real cluster's are.
	qosSpreadNodes = 100
	// qosRealPodsPerNode is what a real node runs (the kubelet's default
	// maxPods, 110), for the output's sake: every pod on one node is the
	// worst case for one agent, not a node's life.
	qosRealPodsPerNode = 110
	// qosSpreadSeed places the pods of the spread on random nodes,
	// reproducibly.
	qosSpreadSeed = 18
	// qosRelabelledPod is the pod of a namespace that the relabels move
	// between label sets qosRelabelFrom and qosRelabelTo (and back): it
	// changes class, and both classes keep pods (so the flow count stays).
	qosRelabelledPod = 1
	qosRelabelFrom   = 1 // app=api: the class of rules 2, 3, 4, 7, 8, 9
	qosRelabelTo     = 3 // app=cache: the class of rules 2, 3, 5, 7, 8, 9
	// qosChangedRule is the rule whose DSCP the DSCP changes toggle between
	// qosChangedDSCP and qosChangedDSCP+1 (values no other rule uses, so
	// that the awaited flows are told by their DSCP). It has no dstCIDR and
	// selects most pods: it has the most marking flows of any rule.
	qosChangedRule = 9
	qosChangedDSCP = 2
)

// Addresses of the QoS cluster: dual-stack. The node's pod CIDRs hold every
// pod (a /14 of IPv4, 262,142 addresses); the cluster's hold the node's.
var (
	qosClusterPodCIDR6 = netip.MustParsePrefix("fd00:10:128::/48")
	qosNodePodCIDRs    = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("fd00:10:128::/64")}
	// qosServiceCIDR6 is kubetest's IPv6 ClusterIP range.
	qosServiceCIDR6 = netip.MustParsePrefix("fd00:10:96::/112")
)

// qosLabelSets are the labels of a namespace's pods: pod j has set
// j % len(qosLabelSets). Rules tell apart four of the five (api and db are
// selected by the same rules), so a namespace has four classes.
var qosLabelSets = []map[string]string{
	{"app": "web", "tier": "frontend"},
	{"app": "api", "tier": "backend"},
	{"app": "db", "tier": "backend"},
	{"app": "cache", "tier": "backend"},
	{"app": "batch"},
}

// qosRules are every namespace's EgressQoS rules: with and without
// dstCIDR, both families, matchLabels and every matchExpressions operator,
// and rules with no podSelector (every pod).
func qosRules() []esv1.EgressQoSRule {
	app := func(op metav1.LabelSelectorOperator, values ...string) esv1.LabelSelector {
		return esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "app", Operator: op, Values: values}}}
	}
	backend := esv1.LabelSelector{MatchLabels: map[string]string{"tier": "backend"}}
	return []esv1.EgressQoSRule{
		{DSCP: 46, DstCIDR: "203.0.113.0/24", PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		{DSCP: 34, DstCIDR: "2001:db8:1::/48", PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		{DSCP: 26, DstCIDR: "198.51.100.0/24", PodSelector: backend},
		{DSCP: 28, DstCIDR: "2001:db8:2::/48", PodSelector: backend},
		{DSCP: 18, PodSelector: app(metav1.LabelSelectorOpIn, "api", "db")},
		{DSCP: 12, DstCIDR: "192.0.2.0/24", PodSelector: app(metav1.LabelSelectorOpIn, "cache")},
		{DSCP: 10, DstCIDR: "2001:db8:3::/48", PodSelector: esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
		{DSCP: 8, DstCIDR: "100.64.0.0/10"},
		{DSCP: 4, DstCIDR: "2001:db8::/32"},
		{DSCP: qosChangedDSCP, PodSelector: app(metav1.LabelSelectorOpNotIn, "batch")},
	}
}

// qosNamespace is namespace i's name; qosPodName pod j's.
func qosNamespace(i int) string { return fmt.Sprintf("qos-%04d", i) }
func qosPodName(j int) string   { return fmt.Sprintf("pod-%03d", j) }

// qosPodIPs are pod j of namespace i's addresses, IPv4 and IPv6, in the
// node's pod CIDRs.
func qosPodIPs(i, j int) [2]netip.Addr {
	return dualStackPodIPs(i*(*qosPodsPer) + j)
}

// dualStackPodIPs are the addresses of the node's k-th pod (from 0), IPv4
// and IPv6, in qosNodePodCIDRs.
func dualStackPodIPs(k int) [2]netip.Addr {
	k++ // the CIDRs' first address is not a pod's
	v6 := qosNodePodCIDRs[1].Addr().As16()
	v6[12], v6[13], v6[14], v6[15] = byte(k>>24), byte(k>>16), byte(k>>8), byte(k)
	return [2]netip.Addr{nth(qosNodePodCIDRs[0], k), netip.AddrFrom16(v6)}
}

// qosPod is pod j of namespace i, bound to node, Running, with its
// addresses (the status a kubelet would write).
func qosPod(i, j int, node string) *corev1.Pod {
	ips := qosPodIPs(i, j)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: qosNamespace(i), Name: qosPodName(j), Labels: qosLabelSets[j%len(qosLabelSets)]},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0].String(),
			PodIPs: []corev1.PodIP{{IP: ips[0].String()}, {IP: ips[1].String()}}},
	}
}

func qosObject(i int) *esv1.EgressQoS {
	return &esv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: qosNamespace(i), Name: esv1.EgressQoSName},
		Spec: esv1.EgressQoSSpec{Egress: qosRules()}}
}

// qosCount is the benchmark's own count of a node's EgressQoS flows,
// written from the API and docs/egressqos.md's TableQoS, not from
// controller/dataplane: which rules select each pod (by label set), the
// classes as the distinct sets of selected rules, and a marking flow per
// class, rule and family (both families for a rule without dstCIDR, since
// every pod is dual-stack).
type qosCount struct {
	addresses int // local pod addresses: one classifying flow each, and one late admission
	classes   int // Σ over namespaces of the distinct rule sets selecting some local pod
	marking   int // Σ over classes of (rules in the class × families)
	// naive is what one flow per pod address and rule that marks it would
	// take (the rule selects the pod and its dstCIDR, if any, is of the
	// address's family): pods × rules.
	naive int
}

// countQoS counts for namespaces of podsPer pods each (all bound to the
// counted node).
func countQoS(namespaces, podsPer int) qosCount {
	rules := qosRules()
	// For each label set: the rules selecting it, and the marking flows
	// of one pod address of each family.
	selected := make([][]int, len(qosLabelSets))
	for s, set := range qosLabelSets {
		for i, r := range rules {
			sel, err := metav1.LabelSelectorAsSelector(r.PodSelector.AsMeta())
			if err != nil {
				panic(err)
			}
			if sel.Matches(labels.Set(set)) {
				selected[s] = append(selected[s], i)
			}
		}
	}
	families := func(r esv1.EgressQoSRule) int {
		if r.DstCIDR == "" {
			return 2
		}
		return 1
	}
	var perNamespace qosCount
	classes := map[string]bool{}
	for j := range podsPer {
		s := j % len(qosLabelSets)
		if len(selected[s]) == 0 {
			continue // in no class: neither classified nor marked
		}
		perNamespace.addresses += 2
		sig := fmt.Sprint(selected[s])
		for _, i := range selected[s] {
			perNamespace.naive += families(rules[i])
			if !classes[sig] {
				perNamespace.marking += families(rules[i])
			}
		}
		classes[sig] = true
	}
	perNamespace.classes = len(classes)
	return qosCount{
		addresses: namespaces * perNamespace.addresses,
		classes:   namespaces * perNamespace.classes,
		marking:   namespaces * perNamespace.marking,
		naive:     namespaces * perNamespace.naive,
	}
}

// stageSharedFlows are benchNode's flows besides the stage objects'
// (EgressQoS, EgressFirewall) and the late admissions, with no
// EgressService: the marker, the pod guard of each cluster pod CIDR,
// TableOrigin's in_port (2), multicast (3) and fallback flows,
// TableFirewall's exemptions (the cluster pod and service CIDRs, not the
// node IPs) and default (since layout 5), the exemptions (the cluster pod
// and service CIDRs and every node address) in TableOrigin, TableEgress
// and TableQoS, TableQoS's default and TableEgress's drop.
func stageSharedFlows(podCIDRs, serviceCIDRs, nodeIPs int) int {
	exemptions := podCIDRs + serviceCIDRs + nodeIPs
	// TableFirewall's: the exemptions, per family a pass for replies to
	// connections opened from outside and a commit of what no rule judged,
	// and the default.
	firewall := podCIDRs + serviceCIDRs + 2*2 + 1
	return 1 + podCIDRs + 2 + 3 + 1 + firewall + 3*exemptions + 1 + 1
}

// expectedQoSFlows is benchNode's whole flow set: the shared flows, a
// classifying flow and a late admission per pod address, the marking
// flows.
func (c qosCount) expectedFlows(e *env) int {
	return stageSharedFlows(len(e.podCIDRs), len(e.serviceCIDRs), 1) + 2*c.addresses + c.marking
}

func BenchmarkAgentQoS(b *testing.B) {
	ovstest.RequireRoot(b)
	logs := captureKlog()
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	if *qosNamespaces < 1 || *qosPodsPer < len(qosLabelSets) || *rounds < 1 || *qosChanges < 1 {
		b.Fatalf("-namespaces, -rounds and -changes must be positive, -pods at least %d", len(qosLabelSets))
	}
	if *qosNamespaces*(*qosPodsPer) >= 1<<(32-qosNodePodCIDRs[0].Bits())-2 {
		b.Fatalf("more pods than the node's pod CIDR %s holds", qosNodePodCIDRs[0])
	}
	benchStart := time.Now()
	e := newEnv(b)
	e.podCIDRs = []netip.Prefix{clusterPodCIDR, qosClusterPodCIDR6}
	e.serviceCIDRs = []netip.Prefix{serviceCIDR, qosServiceCIDR6}
	pods := *qosNamespaces * (*qosPodsPer)
	out("EgressQoS bench: %d namespaces x %d rules x %d pods, dual-stack: all %d pods on %s, the WORST CASE for one agent (a real node runs ~%d pods; a %d-node spread is computed below)",
		*qosNamespaces, len(qosRules()), *qosPodsPer, pods, benchNode, qosRealPodsPerNode, qosSpreadNodes)

	bin := proc.Build(b, "cmd/egressflow-agent")

	t0 := time.Now()
	e.createQoSCluster(b)
	out("setup: %d namespaces with an EgressQoS, %d Pods (created and their status written, %d workers) in %v",
		*qosNamespaces, pods, *setupWorkers, time.Since(t0).Round(time.Millisecond))

	// Warm-up: one full sync, unmeasured, capturing the flow set.
	count := countQoS(*qosNamespaces, *qosPodsPer)
	wantFlows := count.expectedFlows(e)
	wantMods := wantFlows - 1 // the marker stays on a cleared bridge
	e.clearFlows(b)
	warm := e.startAgent(b, logs, true)
	warm.waitHealthy(b)
	flowSet := warm.sw.firstBundle()
	warm.stop()
	if len(flowSet) != wantMods {
		b.Fatalf("the agent's first bundle has %d flows, the benchmark counts %d besides the marker (%+v)", len(flowSet), wantMods, count)
	}
	byKind := map[dataplane.FlowKind]int{}
	tableQoS := 0
	for _, fm := range flowSet {
		if fm.Command != openflow.FlowAdd {
			b.Fatalf("the first bundle into an empty bridge holds a %v", fm.Command)
		}
		c, _ := dataplane.DecodeCookie(fm.Cookie)
		byKind[c.Kind]++
		if fm.Table == dataplane.TableQoS {
			tableQoS++
		}
	}
	exemptions := len(e.podCIDRs) + len(e.serviceCIDRs) + 1
	for kind, want := range map[dataplane.FlowKind]int{dataplane.KindQoSClassify: count.addresses, dataplane.KindQoSMark: count.marking,
		dataplane.KindQoSPass: exemptions + 1, dataplane.KindAdmit: count.addresses} {
		if byKind[kind] != want {
			b.Fatalf("%d flows of kind %#x in the agent's first bundle, the benchmark counts %d", byKind[kind], kind, want)
		}
	}
	flowFile := ovstest.WriteFlowFile(b, flowSet)
	out("flow set: %d flows, of which %d in TableQoS; written to %s for ovs-ofctl", wantFlows, tableQoS, flowFile)
	out("  TableQoS = pod addresses %d (classify) + Σ classes × rules × families %d (mark; %d classes, %d per namespace) + exemptions %d + default 1",
		count.addresses, count.marking, count.classes, count.classes / *qosNamespaces, exemptions)
	out("  naive (a flow per pod address and rule that marks it, pods x rules) would be %d marking flows instead of %d + %d = %d (%.1fx)",
		count.naive, count.addresses, count.marking, count.addresses+count.marking, float64(count.naive)/float64(count.addresses+count.marking))
	out("  outside TableQoS: a late admission per pod address %d (TableEgress) + %d shared", count.addresses, wantFlows-tableQoS-count.addresses)

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
	restartSynced := restarted.cachesSynced(b, logs)
	time.Sleep(restartSettle)
	restartMods := restarted.sw.mods.Load()
	if after := e.sw.Ofctl(b, "dump-flows", e.sw.Bridge, cookieFilter, "--no-stats", "--sort"); after != before {
		b.Errorf("the flows changed across the restart")
	}
	restartTotal := restartHealthy.Sub(restarted.started)
	out("restart with everything in place: %d flow mods (%v after healthy); healthy %v after start (informers %v, then sync %v)",
		restartMods, restartSettle, restartTotal.Round(time.Millisecond),
		restartSynced.Sub(restarted.started).Round(time.Millisecond), restartHealthy.Sub(restartSynced).Round(time.Millisecond))

	// Incremental: pods relabelled, then rules' DSCP changed.
	relabel, relabelSync := changeLatency(b, restarted, *qosNamespaces, *qosChanges, e.relabelPod)
	e.expectFlowCount(b, wantFlows)
	out("pod relabelled -> its classifying flows in OVS (%d samples): p50 %v, p99 %v, max %v; mean agent node sync meanwhile %v",
		len(relabel), percentile(relabel, 50).Round(100*time.Microsecond), percentile(relabel, 99).Round(100*time.Microsecond),
		slices.Max(relabel).Round(100*time.Microsecond), relabelSync.Round(100*time.Microsecond))
	dscp, dscpSync := changeLatency(b, restarted, *qosNamespaces, *qosChanges, e.changeDSCP)
	e.expectFlowCount(b, wantFlows)
	out("rule %d's DSCP changed -> its marking flows in OVS (%d samples): p50 %v, p99 %v, max %v; mean agent node sync meanwhile %v",
		qosChangedRule, len(dscp), percentile(dscp, 50).Round(100*time.Microsecond), percentile(dscp, 99).Round(100*time.Microsecond),
		slices.Max(dscp).Round(100*time.Microsecond), dscpSync.Round(100*time.Microsecond))
	restarted.stop()

	// The agent binary's memory: a full sync into the emptied bridge.
	e.clearFlows(b)
	mem := e.runBinary(b, bin, wantMods, wantFlows, "")
	out("agent binary (the DaemonSet's GOMEMLIMIT): healthy %v after start (informers synced %v); VmRSS %.1f MB when healthy, %.1f MB after %v; peak VmHWM %.1f MB; then Go heap in use %.1f MB",
		mem.healthy.Round(time.Millisecond), mem.synced.Round(time.Millisecond), mb(mem.rssHealthy), mb(mem.rssSettled), binarySettle, mb(mem.peak), mb(mem.heapInuse))
	if limit := deployedMemoryLimit(b); mem.peak > limit {
		b.Errorf("the agent binary's peak RSS, %.1f MB, passes the DaemonSet's memory limit, %.1f MB: the kubelet would kill it", mb(mem.peak), mb(limit))
	}

	// A real cluster's spread, computed.
	spread := qosSpread(e, qosSpreadNodes)
	out("%d-node spread (pods on random nodes, computed with dataplane.ComputeQoS, not installed): per node %s pods; TableQoS %s flows = pod addresses %s + marking %s (classes %s) + %d shared; naive marking %s",
		qosSpreadNodes, spread.pods, spread.tableQoS, spread.addresses, spread.marking, spread.classes, spread.shared, spread.naive)
	out("total bench time %v", time.Since(benchStart).Round(time.Second))

	out("")
	out("%-66s %14s", fmt.Sprintf("EgressQoS bench, %d namespaces x %d rules x %d pods, all on one node (worst case)", *qosNamespaces, len(qosRules()), *qosPodsPer), "value")
	out("%s", strings.Repeat("-", 81))
	row := func(name, value string) { out("%-66s %14s", name, value) }
	row("flows in the full set", strconv.Itoa(wantFlows))
	row("  of which in TableQoS", strconv.Itoa(tableQoS))
	row("    classifying: pod addresses", strconv.Itoa(count.addresses))
	row("    marking: Σ classes x rules x families", strconv.Itoa(count.marking))
	row("  naive marking, pods x rules (a flow per address and rule)", strconv.Itoa(count.naive))
	row("informer sync of the agent, median (s)", secs(full.informers))
	row("full sync, agent: sync start to Healthy, median (s)", secs(syncMed))
	row("same flows, ovs-ofctl --bundle add-flows, median (s)", secs(ofctlMed))
	row("ratio agent / ovs-ofctl (flows/s)", fmt.Sprintf("%.2f", ratio))
	row("restart, everything in place: flow mods", strconv.FormatInt(restartMods, 10))
	row("restart, everything in place: start to Healthy (s)", secs(restartTotal))
	row("pod relabelled: Update to bundle acked, p50 (ms)", ms(percentile(relabel, 50)))
	row("pod relabelled: Update to bundle acked, p99 (ms)", ms(percentile(relabel, 99)))
	row("rule's DSCP changed: Update to bundle acked, p50 (ms)", ms(percentile(dscp, 50)))
	row("rule's DSCP changed: Update to bundle acked, p99 (ms)", ms(percentile(dscp, 99)))
	row("agent binary peak RSS, VmHWM (MB)", fmt.Sprintf("%.1f", mb(mem.peak)))
	row("agent binary Go heap in use after sync (MB)", fmt.Sprintf("%.1f", mb(mem.heapInuse)))
	row(fmt.Sprintf("%d-node spread: TableQoS flows per node, median", qosSpreadNodes), spread.medianTableQoS)

	b.ReportMetric(float64(wantFlows), "flows")
	b.ReportMetric(float64(tableQoS), "tableqos-flows")
	b.ReportMetric(ratio, "ratio-vs-ofctl")
	b.ReportMetric(float64(restartMods), "restart-mods")
	b.ReportMetric(float64(percentile(relabel, 99).Microseconds())/1000, "relabel-p99-ms")
	b.ReportMetric(float64(percentile(dscp, 99).Microseconds())/1000, "dscp-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// createQoSCluster creates benchNode with pod CIDRs that hold every pod,
// the namespaces, their EgressQoS objects and their pods, all bound to
// benchNode, with their status written.
func (e *env) createQoSCluster(b *testing.B) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode},
		Spec: corev1.NodeSpec{PodCIDR: qosNodePodCIDRs[0].String(), PodCIDRs: []string{qosNodePodCIDRs[0].String(), qosNodePodCIDRs[1].String()}}}
	n, err := e.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nth(nodeIPs, 10).String()}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	wait.Parallel(b, *qosNamespaces, *setupWorkers, func(i int) error {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: qosNamespace(i)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := e.adminES.K8sV1().EgressQoSes(qosNamespace(i)).Create(ctx, qosObject(i), metav1.CreateOptions{})
		return err
	})
	e.createPods(b, *qosNamespaces*(*qosPodsPer), func(k int) *corev1.Pod { return qosPod(k / *qosPodsPer, k%*qosPodsPer, benchNode) })
}

// changeLatency makes latencyWarmup+changes changes through change, the
// s-th of them on target s × targets / total (a namespace, or whatever
// change numbers), so each in another one while targets allow, and
// returns what change timed for each (the warm-up's not counted) and the
// agent's mean sync duration over the counted ones.
func changeLatency(b *testing.B, r *runningAgent, targets, changes int, change func(b *testing.B, r *runningAgent, target int) time.Duration) ([]time.Duration, time.Duration) {
	total := latencyWarmup + changes
	var lat []time.Duration
	var sum0, count0 float64
	for s := range total {
		if s == latencyWarmup {
			sum0, count0 = syncHistogram(b, r.reg)
		}
		d := change(b, r, s*targets/total)
		if s >= latencyWarmup {
			lat = append(lat, d)
		}
		time.Sleep(latencyGap)
	}
	sum1, count1 := syncHistogram(b, r.reg)
	var mean time.Duration
	if count1 > count0 {
		mean = time.Duration((sum1 - sum0) / (count1 - count0) * float64(time.Second))
	}
	return lat, mean
}

// relabelPod moves namespace i's qosRelabelledPod between label sets
// qosRelabelFrom and qosRelabelTo, whichever it is not in: it changes
// class, so its classifying flows (one per address) are replaced.
func (e *env) relabelPod(b *testing.B, r *runningAgent, i int) time.Duration {
	ctx := context.Background()
	pods := e.admin.CoreV1().Pods(qosNamespace(i))
	pod, err := pods.Get(ctx, qosPodName(qosRelabelledPod), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	to := qosLabelSets[qosRelabelTo]
	if pod.Labels["app"] == to["app"] {
		to = qosLabelSets[qosRelabelFrom]
	}
	pod.Labels = to
	ip := qosPodIPs(i, qosRelabelledPod)[0]
	return newFlowWatch(addsSource(ip)).await(b, r.sw, "pod "+ip.String()+"'s classifying flow", func() error {
		_, err := pods.Update(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

// changeDSCP toggles the DSCP of namespace i's rule qosChangedRule between
// qosChangedDSCP and qosChangedDSCP+1: its marking flows are replaced.
func (e *env) changeDSCP(b *testing.B, r *runningAgent, i int) time.Duration {
	ctx := context.Background()
	client := e.adminES.K8sV1().EgressQoSes(qosNamespace(i))
	q, err := client.Get(ctx, esv1.EgressQoSName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	rule := &q.Spec.Egress[qosChangedRule]
	if rule.DSCP == qosChangedDSCP {
		rule.DSCP++
	} else {
		rule.DSCP = qosChangedDSCP
	}
	cookie := dataplane.Cookie(dataplane.KindQoSMark, dataplane.ObjectKey(dataplane.APIEgressQoS, q.Namespace, q.Name))
	action := fmt.Sprintf("set_field:%d->ip_dscp", rule.DSCP)
	marks := func(m *openflow.FlowMod) bool {
		return m.Command == openflow.FlowAdd && m.Cookie == cookie && strings.Contains(m.String(), action)
	}
	return newFlowWatch(marks).await(b, r.sw, fmt.Sprintf("%s's marking flows with DSCP %d", q.Namespace, rule.DSCP), func() error {
		_, err := client.Update(ctx, q, metav1.UpdateOptions{})
		return err
	})
}

// spreadFigures are the per-node figures of qosSpread, each "median
// (min–max)" over the nodes.
type spreadFigures struct {
	pods, tableQoS, addresses, marking, classes, naive string
	medianTableQoS                                     string
	shared                                             int
}

// qosSpread computes, without installing them, the TableQoS of each node of
// a cluster of nodes whose pods (the benchmark's, the same namespaces and
// labels) are placed at random: ComputeQoS on each node's share, rendered
// by QoSFlows, and the benchmark's naive count of the same share.
func qosSpread(e *env, nodes int) spreadFigures {
	rng := rand.New(rand.NewPCG(qosSpreadSeed, 0))
	nodeName := func(n int) string { return fmt.Sprintf("spread-%03d", n) }
	var pods []*corev1.Pod
	var qoses []*esv1.EgressQoS
	for i := range *qosNamespaces {
		qoses = append(qoses, qosObject(i))
		for j := range *qosPodsPer {
			pods = append(pods, qosPod(i, j, nodeName(rng.IntN(nodes))))
		}
	}
	exempt := slices.Concat(e.podCIDRs, e.serviceCIDRs)
	for n := range nodes {
		a := nth(nodeIPs, 10+n)
		exempt = append(exempt, netip.PrefixFrom(a, a.BitLen()))
	}
	rules := qosRules()
	selectors := make([]labels.Selector, len(rules))
	for i, r := range rules {
		selectors[i], _ = metav1.LabelSelectorAsSelector(r.PodSelector.AsMeta())
	}
	var podCounts, tableQoS, addresses, marking, classes, naive []int
	for n := range nodes {
		name := nodeName(n)
		qos := dataplane.ComputeQoS(dataplane.NodeConfig{Name: name, ClusterPodCIDRs: e.podCIDRs, ServiceCIDRs: e.serviceCIDRs}, qoses, pods)
		flows := dataplane.QoSFlows(qos, exempt)
		var local, addrs, marks, cls, nv int
		for _, ns := range qos.Namespaces {
			for _, c := range ns.Classes {
				cls++
				addrs += len(c.Sources)
			}
		}
		for _, fm := range flows {
			if c, _ := dataplane.DecodeCookie(fm.Cookie); c.Kind == dataplane.KindQoSMark {
				marks++
			}
		}
		for _, pod := range pods {
			if pod.Spec.NodeName != name {
				continue
			}
			local++
			for i, sel := range selectors {
				if !sel.Matches(labels.Set(pod.Labels)) {
					continue
				}
				nv++ // the pod's address of the rule's family
				if rules[i].DstCIDR == "" {
					nv++ // and the other family's
				}
			}
		}
		podCounts, tableQoS, addresses, marking, classes, naive = append(podCounts, local), append(tableQoS, len(flows)),
			append(addresses, addrs), append(marking, marks), append(classes, cls), append(naive, nv)
	}
	medianOf := func(v []int) int {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[(len(s)-1)/2]
	}
	figure := func(v []int) string {
		return fmt.Sprintf("%d (%d-%d)", medianOf(v), slices.Min(v), slices.Max(v))
	}
	return spreadFigures{
		pods: figure(podCounts), tableQoS: figure(tableQoS), addresses: figure(addresses), marking: figure(marking),
		classes: figure(classes), naive: figure(naive), medianTableQoS: strconv.Itoa(medianOf(tableQoS)),
		shared: len(exempt) + 1,
	}
}
