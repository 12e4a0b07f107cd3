package controller

// BenchmarkScale is the cluster at Kubernetes' scalability envelope against
// a real API server and etcd (test/kubetest), once per liveness protocol,
// each on a control plane of its own, and prints one table with the two
// side by side. The workload, by default: 5,000 nodes (100 of them
// egress-assignable), 150,000 pods, 10,000 EgressServices (with their
// LoadBalancer Services and EndpointSlices) and 1,000 EgressIPs, each
// selecting the pods of one namespace. kwok (-kwok) plays the kubelets: it
// keeps the nodes Ready, renews their node Leases and runs the pods. Every
// node has an agent's liveness: a heartbeat.Renewer, and under the probes
// protocol a heartbeat.Responder on loopback and a peer-facts Lease. The
// real controller binary assigns everything. Measured:
//
//   - the agents' API writes per node per 10 s, over the steady window;
//   - the API server's requests and writes per second and etcd's puts per
//     second, from their /metrics, over the steady window: every client's,
//     kwok's kubelet work included;
//   - the events one agent's watches receive per second, stream by stream
//     (its Leases, all Nodes, Services, EndpointSlices and Namespaces, its
//     node's pods), from watches made as the agent makes them, and, by
//     multiplication, what the nodes' agents receive together;
//   - time from the controller's start to every EgressService hosted and
//     every EgressIP held, and the controller's writes per assignment
//     (from the API server's request counts by resource);
//   - the controller's CPU time for the assignment and its CPU use over the
//     steady window, and its peak resident memory;
//   - one host's agent stopped (renewals and probe answers at once, as at a
//     power loss): time until every service it hosted has another host.
//
// Run it with make bench-scale (test/bench/scale.sh builds kwok and the
// controller).

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/nodeview"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	scaleNodes       = flag.Int("scale-nodes", 5000, "nodes, each with an agent's liveness (BenchmarkScale)")
	scaleEgressNodes = flag.Int("scale-egress-nodes", 100, "of them, egress-assignable nodes, which hold the EgressIPs (BenchmarkScale)")
	scalePods        = flag.Int("scale-pods", 150000, "pods, spread over the nodes and over one namespace per EgressIP (BenchmarkScale)")
	scaleServices    = flag.Int("scale-services", 10000, "EgressServices, each with a LoadBalancer Service and an EndpointSlice (BenchmarkScale)")
	scaleEgressIPs   = flag.Int("scale-egressips", 1000, "EgressIPs of one address, each selecting one namespace's pods (BenchmarkScale)")
	// The steady window: longer averages more renewals (10 s apart under
	// the probes protocol) at the cost of the bench's time.
	scaleWindow    = flag.Duration("scale-window", 60*time.Second, "steady state over which rates are measured (BenchmarkScale)")
	scaleProtocols = flag.String("scale-protocols", "lease-only,probes", "liveness protocols measured, in order (BenchmarkScale)")
	kwokBin        = flag.String("kwok", "", "kwok binary playing the kubelets (empty: nodes are marked Ready once, pods stay Pending, no node Leases)")
	// kwok renews each node Lease every quarter of this, as a kubelet
	// does: the default is the kubelet's (10 s renewals, 500 writes/s at
	// 5,000 nodes). A real control plane takes them on cores of its own;
	// here they share the machine with everything else, and a longer
	// duration leaves that capacity to egressflow's writes. Nothing in the
	// bench reads node Leases (no node lifecycle controller runs).
	kubeletLeaseDuration = flag.Duration("kubelet-lease-duration", 40*time.Second, "node Lease duration kwok keeps, renewing every quarter of it (BenchmarkScale)")
	controllerBin        = flag.String("controller-bin", "", "egressflow-controller binary (empty: built by the bench)")
	// At 150,000 pods, kwok runs them minutes after they are created.
	scaleWait = flag.Duration("scale-wait", 30*time.Minute, "bound of each wait of BenchmarkScale")
	// An assignment that has not finished in this long is reported as
	// it stands.
	scaleAssignLimit = flag.Duration("scale-assign-limit", 5*time.Minute, "bound of the assignment (BenchmarkScale)")
	// Profiling costs the controller a few percent of CPU while it runs.
	controllerCPUProfile = flag.String("controller-cpu-profile", "", "write CPU profiles of the controller binary's assignment here, one per protocol and per "+controllerProfileSlice.String()+" (PATH.PROTOCOL.N; `go tool pprof` merges them)")
)

// controllerProfileSlice is the length of each CPU profile of the
// assignment: within kubetest.Scrape's client timeout.
const controllerProfileSlice = 10 * time.Second

// scalePoll is how often a wait that lists every node or pod lists them
// again: each list of 150,000 pods is itself a load on the API server.
const scalePoll = 5 * time.Second

// kwokNodeAnnotation marks the nodes kwok manages.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// livenessProtocol is how the agents show they are alive.
type livenessProtocol struct {
	name          string
	renew, expire time.Duration
	// peerFacts: the agents write peer-facts Leases, which their peers
	// watch instead of the heartbeat Leases.
	peerFacts bool
	// probes: the agents answer the controller's probes.
	probes bool
}

var livenessProtocols = []livenessProtocol{
	// Before probes: 1 s renewals and 3 s Leases, which every agent watched.
	{name: "lease-only", renew: time.Second, expire: 3 * time.Second},
	{name: "probes", renew: heartbeat.DefaultRenewInterval, expire: heartbeat.DefaultLeaseDuration, peerFacts: true, probes: true},
}

// scaleResult is one protocol's column.
type scaleResult struct {
	protocol                         string
	agentWritesPerNode10s            float64
	agentRefusedPerNode10s           float64 // of those writes
	apiRequests, apiWrites, etcdPuts float64 // per second
	eventsPerAgent                   []streamRate
	assigned                         bool
	hosted, held                     int
	assignServices, assignEgressIPs  time.Duration
	writesPerAssignment              float64
	// labelWritesPerService are the controller's writes of the agents'
	// label (endpoints.EgressServiceLabel), once per EgressService.
	labelWritesPerService                    float64
	assignCPU                                time.Duration
	steadyCPU                                float64 // cores
	peakRSS                                  int64   // bytes
	failover                                 time.Duration
	failoverServices                         int
	setupNodes, setupPods, setupServicesEIPs time.Duration
}

func BenchmarkScale(b *testing.B) {
	waitLimit = *scaleWait
	bin := *controllerBin
	if bin == "" {
		bin = proc.Build(b, "cmd/egressflow-controller")
	}
	fmt.Printf("scale bench: %d nodes (%d egress-assignable), %d pods, %d EgressServices, %d EgressIPs; kwok: %v (node Leases for %v, renewed every %v); steady window %v\n",
		*scaleNodes, *scaleEgressNodes, *scalePods, *scaleServices, *scaleEgressIPs, *kwokBin != "", *kubeletLeaseDuration, *kubeletLeaseDuration/4, *scaleWindow)
	var results []scaleResult
	for _, p := range livenessProtocols {
		if !slices.Contains(strings.Split(*scaleProtocols, ","), p.name) {
			continue
		}
		b.Run(p.name, func(b *testing.B) { results = append(results, runScale(b, bin, p)) })
	}
	printScaleTable(results)
}

func runScale(b *testing.B, bin string, p livenessProtocol) scaleResult {
	ctx := context.Background()
	res := scaleResult{protocol: p.name}
	out := func(format string, args ...any) { fmt.Printf("[%s] "+format+"\n", append([]any{p.name}, args...)...) }
	env := clustertest.Start(b)
	dir := b.TempDir()
	if *kwokBin != "" {
		kubeconfig := filepath.Join(dir, "kwok.kubeconfig")
		if err := env.Cluster.WriteKubeconfig(kubeconfig, kubetest.Admin); err != nil {
			b.Fatal(err)
		}
		// Which nodes it plays, their node Leases and the pods' addresses
		// are set in the file, beside the stages.
		proc.Start(b, *kwokBin, "--kubeconfig="+kubeconfig, "--config="+kwokConfig(b, dir))
	}

	// Nodes, Ready (kwok's, or once here).
	t0 := time.Now()
	nodes := make([]string, *scaleNodes)
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		nodes[i] = fmt.Sprintf("node-%05d", i)
		labels := map[string]string{}
		if i < *scaleEgressNodes {
			labels[assign.EgressAssignableLabel] = ""
		}
		n, err := env.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodes[i], Labels: labels, Annotations: map[string]string{kwokNodeAnnotation: "fake"}},
			Spec:       corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)},
		}, metav1.CreateOptions{})
		if err != nil || *kwokBin != "" {
			return err
		}
		return setReady(ctx, env.Kube, n)
	})
	if *kwokBin != "" {
		waitFor(b, "kwok made every node Ready", func() bool { return readyNodes(b, env) == len(nodes) })
	}
	res.setupNodes = time.Since(t0)
	out("setup: %d nodes Ready in %v", len(nodes), res.setupNodes.Round(time.Second))

	// Pods, over one namespace per EgressIP.
	t0 = time.Now()
	podNamespaces := max(*scaleEgressIPs, 1)
	wait.Parallel(b, podNamespaces, *setupWorkers, func(i int) error {
		_, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("pods-%04d", i), Labels: map[string]string{"bench.egressflow.io/egressip": strconv.Itoa(i)}}}, metav1.CreateOptions{})
		return err
	})
	wait.Parallel(b, *scalePods, *setupWorkers, func(i int) error {
		ns := fmt.Sprintf("pods-%04d", i%podNamespaces)
		_, err := env.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%06d", i), Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{NodeName: nodes[i%len(nodes)], Containers: []corev1.Container{{Name: "app", Image: "bench"}},
				Tolerations: []corev1.Toleration{{Key: kwokNodeAnnotation, Operator: corev1.TolerationOpExists}}},
		}, metav1.CreateOptions{})
		return err
	})
	if *kwokBin != "" {
		waitFor(b, "kwok ran every pod", func() bool { return runningPods(b, env) == *scalePods })
	}
	res.setupPods = time.Since(t0)
	out("setup: %d pods created and Running (kwok: %v) in %v", *scalePods, *kwokBin != "", res.setupPods.Round(time.Second))

	// EgressServices and EgressIPs.
	t0 = time.Now()
	for ns := 0; ns*servicesPerNamespace < *scaleServices; ns++ {
		if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%02d", ns)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]string, *scaleServices)
	wait.Parallel(b, len(keys), *setupWorkers, func(i int) error {
		ns, name := fmt.Sprintf("bench-%02d", i/servicesPerNamespace), fmt.Sprintf("svc-%05d", i)
		keys[i] = ns + "/" + name
		return createService(ctx, env, ns, name, i, nodes)
	})
	eips := make([]string, *scaleEgressIPs)
	wait.Parallel(b, len(eips), *setupWorkers, func(i int) error {
		eips[i] = fmt.Sprintf("eip-%04d", i)
		_, err := env.ES.K8sV1().EgressIPs().Create(ctx, &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: eips[i]},
			Spec: esv1.EgressIPSpec{EgressIPs: []string{fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250)},
				NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"bench.egressflow.io/egressip": strconv.Itoa(i)}}}},
			metav1.CreateOptions{})
		return err
	})
	res.setupServicesEIPs = time.Since(t0)
	out("setup: %d EgressServices (Services, slices) and %d EgressIPs in %v", len(keys), len(eips), res.setupServicesEIPs.Round(time.Second))
	hosts := watchHosts(b, env)
	held := watchEgressIPs(b, env)

	// One agent's watches, made as a starting agent makes them: their
	// initial lists come before the liveness load, which at 5,000 nodes
	// can leave the API server no room for them.
	watchLabel := heartbeat.LeaseLabelValue
	if p.peerFacts {
		watchLabel = heartbeat.PeerFactsLabelValue
	}
	streams := watchAsAnAgent(b, env, nodes[0], watchLabel)

	// The agents' liveness starts once the cluster is set up: at 5,000
	// nodes, 1 s renewals leave the API server little room for anything
	// else, and the setup is the same for both protocols.
	subnets := heartbeat.ParseEgressSubnets(benchSubnet)
	agents := startLivenessAgents(b, env, nodes, p, func(i int) heartbeat.Facts {
		f := heartbeat.Facts{SyncState: heartbeat.SyncStateSynced}
		if i < *scaleEgressNodes {
			f.EgressSubnets = subnets
		}
		return f
	})
	out("setup: %d agents' liveness started", len(nodes))

	// The controller binary, as in production but for its probe address.
	kubeconfig := filepath.Join(dir, "controller.kubeconfig")
	if err := env.Cluster.WriteKubeconfig(kubeconfig, kubetest.Controller); err != nil {
		b.Fatal(err)
	}
	probeAddr := "none"
	if p.probes {
		probeAddr = "127.0.0.1:0"
	}
	metricsFlags := []string{"--metrics-bind-address="}
	metricsAddr := ""
	if *controllerCPUProfile != "" {
		metricsAddr = freeLoopbackAddr(b)
		metricsFlags = []string{"--metrics-bind-address=" + metricsAddr, "--profiling"}
	}
	before := apiRequestCounts(b, env)
	benchCPUBefore, agentDropsBefore := processCPU(b, os.Getpid()), udpDrops(b, os.Getpid())
	startAt := time.Now()
	controller := proc.Start(b, bin, append([]string{"--kubeconfig=" + kubeconfig, "--namespace=" + kubetest.SystemNamespace, "--identity=scale",
		"--pod-cidrs=" + clustertest.PodCIDR, "--probe-bind-address=" + probeAddr, "--health-bind-address="}, metricsFlags...)...)
	pid := controller.Cmd.Process.Pid
	profiling := make(chan struct{})
	profiled := make(chan struct{})
	if metricsAddr != "" {
		go func() {
			defer close(profiled)
			profileController(b, metricsAddr, fmt.Sprintf("%s.%s", *controllerCPUProfile, p.name), profiling)
		}()
	} else {
		close(profiled)
	}
	// The API server may refuse so many renewals that the controller
	// never sees every node alive: the assignment is given a bound, and
	// what it reached by then is the result.
	for time.Since(startAt) < *scaleAssignLimit && (hosts.held() < len(keys) || held.held() < len(eips)) {
		time.Sleep(100 * time.Millisecond)
	}
	close(profiling)
	<-profiled
	res.hosted, res.held = hosts.held(), held.held()
	res.assigned = res.hosted == len(keys) && res.held == len(eips)
	// Each kind's time is known once all of that kind are assigned.
	if res.hosted == len(keys) {
		res.assignServices = hosts.lastChange(keys).Sub(startAt)
	}
	if res.held == len(eips) {
		res.assignEgressIPs = held.lastChange(eips).Sub(startAt)
	}
	if res.assigned {
		waitFor(b, "the controller's writes settle", settled(b, env))
	}
	res.assignCPU = processCPU(b, pid)
	after := apiRequestCounts(b, env)
	controllerWrites := after.delta(before, "egressservices", "status") + after.delta(before, "egressips", "") + after.delta(before, "nodes", "")
	res.writesPerAssignment = controllerWrites / float64(max(res.hosted+res.held, 1))
	res.labelWritesPerService = after.delta(before, "services", "") / float64(len(keys))
	out("assignment: %d of %d services hosted (the last %v after the controller started), %d of %d EgressIPs held (%v); %.0f writes, %.2f per assignment; %.2f label writes per EgressService for the agents; %d node views published",
		res.hosted, len(keys), res.assignServices.Round(time.Millisecond), res.held, len(eips), res.assignEgressIPs.Round(time.Millisecond),
		controllerWrites, res.writesPerAssignment, res.labelWritesPerService, countNodeViews(b, env))
	if !res.assigned {
		out("assignment: why the rest waits: services: %s; EgressIPs: %s", hosts.waitingReasons(), held.waitingReasons())
	}
	if metricsAddr != "" {
		out("assignment: the controller's syncs (workqueue adds) %s", controllerQueueAdds(b, metricsAddr))
	}
	// Whether the probes' verdicts were the agents' or the observer's: a
	// datagram dropped at a full receive buffer is a lost answer (the
	// controller's socket) or a lost ping (the simulated agents').
	if p.probes {
		out("assignment: %v of CPU in the controller, %v in this process (the simulated agents and the bench's clients) over %v; UDP datagrams dropped at full receive buffers: %d at the controller's sockets, %d at the simulated agents'",
			res.assignCPU.Round(time.Second), (processCPU(b, os.Getpid()) - benchCPUBefore).Round(time.Second), time.Since(startAt).Round(time.Second),
			udpDrops(b, pid), udpDrops(b, os.Getpid())-agentDropsBefore)
	}

	// The steady state.
	startAgentWrites, startRefused := agents.writes.Load(), agents.refused.Load()
	for _, w := range streams {
		w.events.Store(0)
	}
	startAPI, startEtcd, startCPU, startRejected := apiRequestCounts(b, env), etcdPuts(b, env), processCPU(b, pid), apfRejections(b, env)
	windowStart := time.Now()
	time.Sleep(*scaleWindow)
	window := time.Since(windowStart).Seconds()
	endAPI := apiRequestCounts(b, env)
	res.apiRequests = endAPI.total(startAPI, false) / window
	res.apiWrites = endAPI.total(startAPI, true) / window
	res.etcdPuts = (etcdPuts(b, env) - startEtcd) / window
	for _, w := range streams {
		res.eventsPerAgent = append(res.eventsPerAgent, streamRate{w.name, float64(w.events.Load()) / window})
	}
	res.agentWritesPerNode10s = float64(agents.writes.Load()-startAgentWrites) / float64(len(nodes)) / window * 10
	res.agentRefusedPerNode10s = float64(agents.refused.Load()-startRefused) / float64(len(nodes)) / window * 10
	res.steadyCPU = (processCPU(b, pid) - startCPU).Seconds() / window
	for k, v := range apfRejections(b, env) {
		if n := v - startRejected[k]; n > 0 {
			out("steady: API Priority and Fairness refused %.1f requests/s at %s", n/window, k)
		}
	}
	out("steady: %.0f API requests/s, %.0f writes/s, %.0f etcd puts/s; agents %.2f writes per node per 10 s (%.2f refused); one agent's watches, events/s: %v",
		res.apiRequests, res.apiWrites, res.etcdPuts, res.agentWritesPerNode10s, res.agentRefusedPerNode10s, res.eventsPerAgent)

	res.peakRSS = processPeakRSS(b, pid)
	if !res.assigned {
		out("failover: not measured, the assignment did not finish")
		return res
	}
	// One host's agent stops.
	victim, moved := hosts.nodeWith(5)
	stoppedAt := time.Now()
	agents.stop(victim)
	waitFor(b, "the victim's services moved", func() bool { return hosts.movedAway(moved, victim) })
	res.failover, res.failoverServices = hosts.lastChange(moved).Sub(stoppedAt), len(moved)
	out("failover: the %d services of %s have new hosts %v after its agent stopped", len(moved), victim, res.failover.Round(time.Millisecond))
	return res
}

// kwokConfig writes kwok-stages.yaml into dir with the node Lease duration
// of -kubelet-lease-duration and returns the copy's path.
func kwokConfig(b *testing.B, dir string) string {
	const leaseOption = "nodeLeaseDurationSeconds: 40\n"
	stages, err := os.ReadFile("kwok-stages.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if !strings.Contains(string(stages), leaseOption) {
		b.Fatalf("kwok-stages.yaml has no %q to set", strings.TrimSpace(leaseOption))
	}
	seconds := int(kubeletLeaseDuration.Seconds())
	config := strings.Replace(string(stages), leaseOption, fmt.Sprintf("nodeLeaseDurationSeconds: %d\n", seconds), 1)
	path := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// freeLoopbackAddr is a loopback address whose port was free a moment ago.
func freeLoopbackAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// profileController writes CPU profiles of the controller, one per
// controllerProfileSlice, to path.1, path.2, ... until done is closed.
func profileController(b *testing.B, addr, path string, done <-chan struct{}) {
	for i := 1; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		code, profile, err := kubetest.Scrape(nil, addr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(controllerProfileSlice.Seconds())), kubetest.Admin.Token)
		switch {
		case err != nil || code != http.StatusOK:
			// The metrics server is not up yet.
			i--
			time.Sleep(100 * time.Millisecond)
		default:
			if err := os.WriteFile(fmt.Sprintf("%s.%d", path, i), []byte(profile), 0o644); err != nil {
				b.Errorf("CPU profile: %v", err)
				return
			}
		}
	}
}

// controllerQueueAdds are the items added to each of the controller's
// work queues so far, from its metrics: how many syncs the assignment took.
func controllerQueueAdds(b *testing.B, addr string) string {
	code, metrics, err := kubetest.Scrape(nil, addr, "/metrics", kubetest.Admin.Token)
	if err != nil || code != http.StatusOK {
		b.Errorf("the controller's metrics: %d %v", code, err)
		return "unknown"
	}
	var adds []string
	for line := range strings.Lines(metrics) {
		if rest, ok := strings.CutPrefix(line, "workqueue_adds_total{name=\""); ok {
			name, value, _ := strings.Cut(rest, "\"} ")
			adds = append(adds, name+"="+strings.TrimSpace(value))
		}
		// What re-syncs services: reachability changes, and services
		// waiting for a candidate.
		for _, prefix := range []string{"egressflow_controller_probe_verdicts_total", "egressflow_controller_services_no_matching_node ",
			"egressflow_controller_failovers_total", "egressflow_controller_agents_unseen "} {
			if strings.HasPrefix(line, prefix) {
				adds = append(adds, strings.TrimSpace(strings.TrimPrefix(line, "egressflow_controller_")))
			}
		}
	}
	return strings.Join(adds, " ")
}

func printScaleTable(results []scaleResult) {
	if len(results) == 0 {
		return
	}
	row := func(name string, cell func(r scaleResult) string) {
		fmt.Printf("| %s |", name)
		for _, r := range results {
			fmt.Printf(" %s |", cell(r))
		}
		fmt.Println()
	}
	fmt.Printf("\n| %d nodes, %d pods, %d EgressServices, %d EgressIPs |", *scaleNodes, *scalePods, *scaleServices, *scaleEgressIPs)
	for _, r := range results {
		fmt.Printf(" %s |", r.protocol)
	}
	fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(results)))
	f := func(format string, v func(r scaleResult) float64) func(r scaleResult) string {
		return func(r scaleResult) string { return fmt.Sprintf(format, v(r)) }
	}
	d := func(v func(r scaleResult) time.Duration) func(r scaleResult) string {
		return func(r scaleResult) string { return v(r).Round(time.Millisecond).String() }
	}
	row("agents' API writes per node per 10 s", f("%.2f", func(r scaleResult) float64 { return r.agentWritesPerNode10s }))
	row("of which refused or failed (429 when overloaded)", f("%.2f", func(r scaleResult) float64 { return r.agentRefusedPerNode10s }))
	row("API server requests/s, every client (steady)", f("%.0f", func(r scaleResult) float64 { return r.apiRequests }))
	row("API server writes/s, every client (steady)", f("%.0f", func(r scaleResult) float64 { return r.apiWrites }))
	row("etcd puts/s (steady)", f("%.0f", func(r scaleResult) float64 { return r.etcdPuts }))
	for i, stream := range results[0].eventsPerAgent {
		rate := func(r scaleResult) float64 { return r.eventsPerAgent[i].perSecond }
		row(stream.name+": events/s one agent receives", f("%.1f", rate))
		row(stream.name+": × nodes, events/s to all agents", f("%.0f", func(r scaleResult) float64 { return rate(r) * float64(*scaleNodes) }))
	}
	assignedIn := func(at func(r scaleResult) time.Duration, done func(r scaleResult) int, of int) func(r scaleResult) string {
		return func(r scaleResult) string {
			if done(r) < of {
				return fmt.Sprintf("%d of %d after %v", done(r), of, *scaleAssignLimit)
			}
			return at(r).Round(time.Millisecond).String()
		}
	}
	row("controller start → every EgressService hosted", assignedIn(func(r scaleResult) time.Duration { return r.assignServices },
		func(r scaleResult) int { return r.hosted }, *scaleServices))
	row("controller start → every EgressIP held", assignedIn(func(r scaleResult) time.Duration { return r.assignEgressIPs },
		func(r scaleResult) int { return r.held }, *scaleEgressIPs))
	row("controller writes per assignment", f("%.2f", func(r scaleResult) float64 { return r.writesPerAssignment }))
	row("controller writes of the agents' Service label, per EgressService (once)", f("%.2f", func(r scaleResult) float64 { return r.labelWritesPerService }))
	row("controller CPU time for the assignment", d(func(r scaleResult) time.Duration { return r.assignCPU }))
	row("controller CPU, steady (cores)", f("%.3f", func(r scaleResult) float64 { return r.steadyCPU }))
	row("controller peak RSS (MiB)", f("%.0f", func(r scaleResult) float64 { return float64(r.peakRSS) / (1 << 20) }))
	row("a host's agent stops → its services hosted elsewhere", func(r scaleResult) string {
		if !r.assigned {
			return "not measured (assignment unfinished)"
		}
		return fmt.Sprintf("%v (%d services)", r.failover.Round(time.Millisecond), r.failoverServices)
	})
}

// agentLiveness runs each node's liveness as its agent would: a Renewer,
// and under the probes protocol a Responder on loopback; writes counts
// their API writes.
type agentLiveness struct {
	*agentSet
	// writes are their API writes; refused, those the API server
	// refused (429 when overloaded) or that failed.
	writes, refused atomic.Int64
}

// startLivenessAgents starts the liveness of nodes' agents under p, the
// agent of nodes[i] publishing facts(i) (and its probe address).
func startLivenessAgents(b *testing.B, env *clustertest.Env, nodes []string, p livenessProtocol, facts func(i int) heartbeat.Facts) *agentLiveness {
	a := &agentLiveness{agentSet: &agentSet{cancels: map[string]context.CancelFunc{}}}
	cfg := env.Cluster.Config(kubetest.Agent)
	// Each real agent has a client of its own; one shared rate limit would
	// cap their renewals together.
	cfg.QPS = -1
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return kubetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if req.Method != http.MethodGet {
				a.writes.Add(1)
				if err != nil || resp.StatusCode >= 400 {
					a.refused.Add(1)
				}
			}
			return resp, err
		})
	})
	client := kubernetes.NewForConfigOrDie(cfg)
	renewers := make([]*heartbeat.Renewer, len(nodes))
	responders := make([]*heartbeat.Responder, len(nodes))
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		f := facts(i)
		if p.probes {
			r, err := heartbeat.ListenResponder("127.0.0.1:0", heartbeat.ResponderConfig{})
			if err != nil {
				return err
			}
			responders[i] = r
			f.ProbeAddress = r.Addr()
		}
		r, err := heartbeat.NewRenewer(client.CoordinationV1(), heartbeat.RenewerConfig{
			Namespace: kubetest.SystemNamespace, NodeName: nodes[i], RenewInterval: p.renew, LeaseDuration: p.expire,
			PeerFacts: p.peerFacts, Facts: func() heartbeat.Facts {
				// Asked again at each check: a bench's facts may change (a
				// watermark).
				g := facts(i)
				g.ProbeAddress = f.ProbeAddress
				return g
			},
		})
		if err != nil {
			return err
		}
		renewers[i] = r
		return r.RenewOnce(context.Background())
	})
	for i, r := range renewers {
		ctx, cancel := context.WithCancel(context.Background())
		responder := responders[i]
		a.cancels[nodes[i]] = func() {
			cancel()
			if responder != nil {
				_ = responder.Close()
			}
		}
		if responder != nil {
			go func() { _ = responder.Serve() }()
		}
		// Spread the renewals over the interval, as independent agents are.
		delay := time.Duration(rand.Int64N(int64(p.renew)))
		a.wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			_ = r.Run(ctx)
		})
	}
	b.Cleanup(a.stopAll)
	return a
}

// streamRate is the events per second one of an agent's watches received
// over the steady window.
type streamRate struct {
	name      string
	perSecond float64
}

func (r streamRate) String() string { return fmt.Sprintf("%s %.1f", r.name, r.perSecond) }

// agentStream is one of an agent's watches and the events it received
// since its initial list.
type agentStream struct {
	name   string
	events atomic.Int64
}

// watchAsAnAgent watches what the agent of node watches, with the
// selectors the agent uses (controller/agent): the Leases labelled
// heartbeat.LeaseLabel=leaseLabel, the node views (nodeview), every
// Service, EndpointSlice and Namespace, and the pods bound to node (the pods of the EgressIPs an
// agent holds are left out: a holder's share). Each stream counts its
// events after the initial list. The list is every stream the agent has
// whose events can grow with the cluster; its EgressService, EgressIP,
// EgressQoS and EgressFirewall watches only change with those objects.
func watchAsAnAgent(b *testing.B, env *clustertest.Env, node, leaseLabel string) []*agentStream {
	// The Leases as the agent's identity; the rest as the admin, since the
	// test control plane grants the agent's identity only its Leases (the
	// events a watch receives do not depend on who watches).
	agentClient := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	cluster := informers.NewSharedInformerFactory(env.Kube, 0)
	leases := informers.NewSharedInformerFactoryWithOptions(agentClient, 0, informers.WithNamespace(kubetest.SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = heartbeat.LeaseLabel + "=" + leaseLabel }))
	views := informers.NewSharedInformerFactoryWithOptions(env.Kube, 0, informers.WithNamespace(kubetest.SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = nodeview.Selector() }))
	egressServices := informers.NewSharedInformerFactoryWithOptions(env.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = endpoints.EgressServiceSelector() }))
	ownPods := informers.NewSharedInformerFactoryWithOptions(env.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + node }))
	watched := []struct {
		name     string
		informer cache.SharedIndexInformer
	}{
		{"Leases", leases.Coordination().V1().Leases().Informer()},
		{"node views", views.Core().V1().ConfigMaps().Informer()},
		// Not an agent's: what it would receive if it watched the Nodes
		// instead of their views.
		{"(Nodes, no longer watched)", cluster.Core().V1().Nodes().Informer()},
		{"Services of EgressServices", egressServices.Core().V1().Services().Informer()},
		{"their EndpointSlices", egressServices.Discovery().V1().EndpointSlices().Informer()},
		{"Namespaces", cluster.Core().V1().Namespaces().Informer()},
		{"its node's Pods", ownPods.Core().V1().Pods().Informer()},
	}
	stop := make(chan struct{})
	var streams []*agentStream
	var synced []cache.InformerSynced
	for _, w := range watched {
		stream := &agentStream{name: w.name}
		count := func(any) { stream.events.Add(1) }
		registration, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: count, UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count})
		if err != nil {
			b.Fatal(err)
		}
		streams, synced = append(streams, stream), append(synced, registration.HasSynced)
	}
	for _, f := range []informers.SharedInformerFactory{cluster, leases, views, egressServices, ownPods} {
		f.Start(stop)
	}
	b.Cleanup(func() {
		close(stop)
		for _, f := range []informers.SharedInformerFactory{cluster, leases, views, egressServices, ownPods} {
			f.Shutdown()
		}
	})
	waitFor(b, "one agent's watches listed", func() bool {
		for _, hasSynced := range synced {
			if !hasSynced() {
				return false
			}
		}
		return true
	})
	return streams
}

// countNodeViews counts the node views the controller published.
func countNodeViews(b *testing.B, env *clustertest.Env) int {
	n := 0
	listPaged(b, func(o metav1.ListOptions) (string, error) {
		o.LabelSelector = nodeview.Selector()
		list, err := env.Kube.CoreV1().ConfigMaps(kubetest.SystemNamespace).List(context.Background(), o)
		if err != nil {
			return "", err
		}
		n += len(list.Items)
		return list.Continue, nil
	})
	return n
}

// readyNodes counts the Ready nodes, scalePoll after it was last called.
func readyNodes(b *testing.B, env *clustertest.Env) int {
	time.Sleep(scalePoll)
	n := 0
	listPaged(b, func(o metav1.ListOptions) (string, error) {
		list, err := env.Kube.CoreV1().Nodes().List(context.Background(), o)
		if err != nil {
			return "", err
		}
		for _, node := range list.Items {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					n++
				}
			}
		}
		return list.Continue, nil
	})
	return n
}

// runningPods counts the Running pods with an address, scalePoll after it
// was last called.
func runningPods(b *testing.B, env *clustertest.Env) int {
	time.Sleep(scalePoll)
	n := 0
	listPaged(b, func(o metav1.ListOptions) (string, error) {
		o.FieldSelector = "status.phase=Running"
		list, err := env.Kube.CoreV1().Pods("").List(context.Background(), o)
		if err != nil {
			return "", err
		}
		for _, pod := range list.Items {
			if pod.Status.PodIP != "" {
				n++
			}
		}
		return list.Continue, nil
	})
	return n
}

// listPaged calls page with 5,000-object pages until it returns no
// continue token.
func listPaged(b *testing.B, page func(metav1.ListOptions) (string, error)) {
	o := metav1.ListOptions{Limit: 5000}
	for {
		next, err := page(o)
		if err != nil {
			b.Fatal(err)
		}
		if next == "" {
			return
		}
		o.Continue = next
	}
}

// settled returns a condition that holds once no egressservices, egressips
// or nodes write has reached the API server for quietPeriod.
func settled(b *testing.B, env *clustertest.Env) func() bool {
	last, since := -1.0, time.Now()
	return func() bool {
		c := apiRequestCounts(b, env)
		n := c.delta(nil, "egressservices", "status") + c.delta(nil, "egressips", "") + c.delta(nil, "nodes", "")
		if n != last {
			last, since = n, time.Now()
			return false
		}
		time.Sleep(100 * time.Millisecond)
		return time.Since(since) > 2*quietPeriod
	}
}

// requestCounts is apiserver_request_total summed by verb, resource and
// subresource.
type requestCounts map[[3]string]float64

// writeVerbs are the verbs apiserver_request_total gives writes.
var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}

// delta is the writes to resource/subresource since before (nil: ever).
func (c requestCounts) delta(before requestCounts, resource, subresource string) float64 {
	sum := 0.0
	for k, v := range c {
		if k[1] == resource && k[2] == subresource && slices.Contains(writeVerbs, k[0]) {
			sum += v - before[k]
		}
	}
	return sum
}

// total is every request (writes only: writes) since before.
func (c requestCounts) total(before requestCounts, writes bool) float64 {
	sum := 0.0
	for k, v := range c {
		if !writes || slices.Contains(writeVerbs, k[0]) {
			sum += v - before[k]
		}
	}
	return sum
}

// apiRequestCounts reads the API server's request counters.
func apiRequestCounts(b *testing.B, env *clustertest.Env) requestCounts {
	out := requestCounts{}
	for labels, v := range apiMetric(b, env, "apiserver_request_total") {
		out[[3]string{labels["verb"], labels["resource"], labels["subresource"]}] += v
	}
	return out
}

// apfRejections reads the requests API Priority and Fairness refused, by
// priority level and reason ("queue-full", "time-out", ...).
func apfRejections(b *testing.B, env *clustertest.Env) map[string]float64 {
	out := map[string]float64{}
	for labels, v := range apiMetric(b, env, "apiserver_flowcontrol_rejected_requests_total") {
		out[labels["priority_level"]+" "+labels["reason"]] += v
	}
	return out
}

// apiMetric yields the samples of one counter of the API server's
// /metrics with their labels.
func apiMetric(b *testing.B, env *clustertest.Env, name string) iter.Seq2[map[string]string, float64] {
	body, err := env.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return func(yield func(map[string]string, float64) bool) {
		for _, line := range strings.Split(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, name+"{")
			if !ok {
				continue
			}
			labelText, value, ok := strings.Cut(rest, "} ")
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				continue
			}
			labels := map[string]string{}
			for _, kv := range strings.Split(labelText, ",") {
				k, val, _ := strings.Cut(kv, "=")
				labels[k] = strings.Trim(val, `"`)
			}
			if !yield(labels, v) {
				return
			}
		}
	}
}

// etcdPuts reads etcd's count of key puts.
func etcdPuts(b *testing.B, env *clustertest.Env) float64 {
	resp, err := http.Get(env.Cluster.EtcdURL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	v, ok := proc.Sample(string(body), "etcd_mvcc_put_total")
	if !ok {
		b.Fatal("etcd serves no etcd_mvcc_put_total")
	}
	return v
}

// processCPU is the user and system CPU time pid used so far.
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command (in parentheses, which may hold spaces):
	// utime and stime are the 12th and 13th, in clock ticks (100 per s).
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// udpDrops is how many datagrams pid's UDP sockets dropped, each at a
// full receive buffer (the drops column of /proc/PID/net/udp, for the
// sockets among pid's file descriptors).
func udpDrops(b *testing.B, pid int) uint64 {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var drops uint64
	for _, table := range []string{"udp", "udp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
			fields := strings.Fields(line)
			if len(fields) >= 13 && inodes[fields[9]] {
				n, _ := strconv.ParseUint(fields[12], 10, 64)
				drops += n
			}
		}
	}
	return drops
}

// processPeakRSS is pid's peak resident memory (VmHWM).
func processPeakRSS(b *testing.B, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
