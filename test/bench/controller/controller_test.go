// Package controller benchmarks the cluster component against a real API
// server (test/kubetest): by default 1,000 Ready nodes with heartbeating
// agents and 5,000 LoadBalancer Services with ingress IPs, EndpointSlices and
// EgressServices. It measures, in one run:
//
//   - time from controller start (and from leading) until every service has a
//     host, and until every host carries its label;
//   - API writes per assignment (status, node patches, and Events apart),
//     counted by a transport wrapped around the controller's client;
//   - spread: max minus min services per node;
//   - Events: how many the controller emitted, wrote, superseded (a Normal
//     replaced by a newer one of the same service before it was written)
//     or abandoned, and how many are on the API server, by type;
//   - writes during a no-op resync;
//   - failover: one node holding 5 services loses its agent; time from its
//     Lease's expiry until all 5 have a new host (seen by a watch);
//   - throughput against a plain loop doing the same status updates and node
//     patches with the same concurrency, on the same API server, in the same
//     run.
//
// Run it with test/bench/controller.sh (make bench-controller).
package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

var (
	nodeCount    = flag.Int("nodes", 1000, "Node objects, each with a heartbeating agent")
	serviceCount = flag.Int("services", 5000, "LoadBalancer Services, each with an EndpointSlice and an EgressService")
	// The agents' renewals load the API server for the whole run: 1,000
	// nodes at the production default (1 s) are 1,000 writes/s. The bench
	// renews less often so that two cores measure the controller, and prints
	// what it used; failover is measured from the Lease's expiry, so it does
	// not depend on these.
	agentRenew  = flag.Duration("agent-renew", 5*time.Second, "agent Lease renew interval")
	agentExpire = flag.Duration("agent-expire", 15*time.Second, "agent Lease duration")
	// setupWorkers create the objects in parallel.
	setupWorkers = flag.Int("setup-workers", 32, "parallel object creation")
	// servicesPerNamespace spreads the services over namespaces.
	servicesPerNamespace = 500
	// waitLimit bounds each wait of the bench.
	waitLimit = 5 * time.Minute
)

func BenchmarkController(b *testing.B) {
	ctx := context.Background()
	start := time.Now()
	env := clustertest.Start(b)
	admin := env.Kube
	out := func(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
	out("controller bench: %d nodes, %d services; agents renew every %v, expire after %v", *nodeCount, *serviceCount, *agentRenew, *agentExpire)

	// Nodes, Ready, and their agents.
	nodes := make([]string, *nodeCount)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("bench-node-%04d", i)
	}
	wait.Parallel(b, len(nodes), *setupWorkers, func(i int) error {
		return createReadyNode(ctx, admin, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i]}})
	})
	agents := startAgents(b, env, nodes, *agentRenew, *agentExpire, heartbeat.Facts{SyncState: heartbeat.SyncStateSynced})
	out("setup: %d nodes with agents in %v", len(nodes), time.Since(start).Round(time.Millisecond))

	// Services with ingress IPs and endpoints, and their EgressServices.
	t0 := time.Now()
	keys := make([]string, *serviceCount)
	for ns := 0; ns*servicesPerNamespace < len(keys); ns++ {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%02d", ns)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	wait.Parallel(b, len(keys), *setupWorkers, func(i int) error {
		ns, name := fmt.Sprintf("bench-%02d", i/servicesPerNamespace), fmt.Sprintf("svc-%04d", i)
		keys[i] = ns + "/" + name
		return createService(ctx, env, ns, name, i, nodes)
	})
	out("setup: %d services, slices and EgressServices in %v", len(keys), time.Since(t0).Round(time.Millisecond))

	w := watchHosts(b, env)
	labels := env.WatchLabels(b)

	// The controller, as in production (leader election, default workers),
	// through a transport that logs its writes.
	reg := prometheus.NewRegistry()
	opts := cluster.Options{Identity: "bench", LeaderElection: true, RetryPeriod: 500 * time.Millisecond, RenewDeadline: 5 * time.Second, LeaseDuration: 10 * time.Second,
		Registerer: reg}
	startAt := time.Now()
	r := env.RunController(b, opts)
	waitFor(b, "leading", func() bool { return r.Leading() })
	leadAt := time.Now()
	hostsAt := w.waitAll(b, len(keys))
	waitFor(b, "every label on its host", func() bool { return labelsDone(w, labels, len(keys)) })
	labelsAt := time.Now()
	waitIdle(b, r)
	out("assignment: all %d services have a host %v after controller start (%v after it led); all labelled %v after it led",
		len(keys), hostsAt.Sub(startAt).Round(time.Millisecond), hostsAt.Sub(leadAt).Round(time.Millisecond), labelsAt.Sub(leadAt).Round(time.Millisecond))

	initial := classify(r.Writes.All())
	perAssignment := float64(initial.status+initial.nodePatches) / float64(len(keys))
	out("writes: %d status, %d node patches, %d Events, %d leader Lease: %.2f writes per assignment (%.2f with Events)",
		initial.status, initial.nodePatches, initial.events, initial.leases, perAssignment,
		float64(initial.status+initial.nodePatches+initial.events)/float64(len(keys)))

	// waitIdle waited for the Events too: they trail the statuses.
	var eventsAt time.Time
	for _, req := range r.Writes.All() {
		if strings.Contains(req.Path, "/events") && req.At.After(eventsAt) {
			eventsAt = req.At
		}
	}
	ev := eventCounts(b, reg)
	onAPI := eventsOnAPI(b, env, (len(keys)+servicesPerNamespace-1)/servicesPerNamespace)
	out("events: %v emitted, %v written, %v superseded, %v abandoned (%v failed writes, retried), the last written %v after the controller led; on the API server: %d Normal, %d Warning occurrences about EgressServices",
		ev["emitted"], ev["written"], ev["superseded"], ev["abandoned"], ev["error"], eventsAt.Sub(leadAt).Round(time.Millisecond),
		onAPI[corev1.EventTypeNormal], onAPI[corev1.EventTypeWarning])

	load := w.load(nodes)
	lo, hi := slices.Min(load), slices.Max(load)
	out("spread: %d..%d services per node (max-min %d)", lo, hi, hi-lo)

	// No-op resync.
	before := r.Writes.Len()
	t0 = time.Now()
	r.Resync()
	waitIdle(b, r)
	resync, _ := r.Writes.Since(before)
	noop := classify(resync)
	out("no-op resync: %d writes (%d status, %d node patches, %d Events) in %v",
		noop.status+noop.nodePatches+noop.events, noop.status, noop.nodePatches, noop.events, time.Since(t0).Round(time.Millisecond))

	// Failover of one node holding 5 services (with spread 0 every node
	// does; otherwise the first node with the most services up to 5).
	victim, moved := w.nodeWith(5)
	agents.stop(victim)
	lease, err := admin.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	expiry, _ := heartbeat.Expiry(lease)
	waitFor(b, "failover", func() bool { return w.movedAway(moved, victim) })
	seen := w.lastChange(moved)
	writtenAt := lastStatusWrite(r.Writes.All(), moved, expiry)
	waitFor(b, "labels moved", func() bool { return labelsDone(w, labels, len(keys)) })
	labelsMoved := time.Now()
	out("failover: %d services of %s: status written %v after Lease expiry (last of them), seen by a watch %v after; labels moved within %v",
		len(moved), victim, writtenAt.Sub(expiry).Round(time.Millisecond), seen.Sub(expiry).Round(time.Millisecond), labelsMoved.Sub(expiry).Round(time.Millisecond))
	if v := labels.Violations(); len(v) > 0 {
		out("VIOLATION: a label was on two nodes: %v", v[:min(len(v), 5)])
	} else {
		out("invariant: no service label was ever on two nodes (watched %d nodes)", len(nodes))
	}
	waitIdle(b, r)
	if err := r.Stop(); err != nil {
		b.Fatal(err)
	}

	// The API server's own rate for the same writes: the same number of
	// status updates and node patches, same concurrency, same client limits,
	// as the controller's identity.
	plain := plainLoop(b, env, nodes, initial.nodePatches)
	controllerTime := labelsAt.Sub(leadAt)
	out("throughput: controller %v for %d assignments (%.0f/s) vs plain loop %v for the same %d status updates and %d node patches: %.2fx",
		controllerTime.Round(time.Millisecond), len(keys), float64(len(keys))/controllerTime.Seconds(),
		plain.Round(time.Millisecond), len(keys), initial.nodePatches, plain.Seconds()/controllerTime.Seconds())
	out("total bench time %v", time.Since(start).Round(time.Second))

	b.ReportMetric(hostsAt.Sub(leadAt).Seconds(), "s-to-all-hosts")
	b.ReportMetric(perAssignment, "writes/assignment")
	b.ReportMetric(float64(hi-lo), "spread")
	b.ReportMetric(float64(noop.status+noop.nodePatches+noop.events), "resync-writes")
	b.ReportMetric(float64(writtenAt.Sub(expiry).Milliseconds()), "failover-ms")
	b.ReportMetric(plain.Seconds()/controllerTime.Seconds(), "x-plain")
}

// eventCounts sums egressflow_controller_events_total by result.
func eventCounts(b *testing.B, reg *prometheus.Registry) map[string]float64 {
	return counterSums(b, reg, "egressflow_controller_events_total", nil, "result")
}

// counterSums sums the counter name over its series whose labels have the
// values of want, by the value of label by ("" with by "").
func counterSums(b *testing.B, reg *prometheus.Registry, name string, want map[string]string, by string) map[string]float64 {
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			group := ""
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
				if l.GetName() == by {
					group = l.GetValue()
				}
			}
			out[group] += m.GetCounter().GetValue()
		}
	}
	return out
}

// eventsOnAPI sums, by type, the counts of the Events about EgressServices
// in the bench's namespaces.
func eventsOnAPI(b *testing.B, env *clustertest.Env, namespaces int) map[string]int {
	out := map[string]int{}
	for ns := range namespaces {
		list, err := env.Kube.CoreV1().Events(fmt.Sprintf("bench-%02d", ns)).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "EgressService" {
				out[e.Type] += int(e.Count)
			}
		}
	}
	return out
}

func createService(ctx context.Context, env *clustertest.Env, ns, name string, i int, nodes []string) error {
	kube := env.Kube
	svc, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			// 5,000 LoadBalancers do not fit the 2,768 node ports.
			AllocateLoadBalancerNodePorts: ptr(false),
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)}}
	if _, err := kube.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		// The EndpointSlice controller's, as in a cluster: the controller
		// labels the Service alone for the agents (which no controller
		// manager here copies onto the slice).
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: endpoints.ManagerEndpointSlice}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for e := range 2 {
		node := nodes[(i*2+e)%len(nodes)]
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.128.%d.%d", (i*2+e)/250, 1+(i*2+e)%250)}, NodeName: &node,
		})
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = env.ES.K8sV1().EgressServices(ns).Create(ctx, &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
	return err
}

// agentSet runs one heartbeat.Renewer per node, as the agent identity,
// renewing every renew for expire and publishing facts.
type agentSet struct {
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func startAgents(b *testing.B, env *clustertest.Env, nodes []string, renew, expire time.Duration, facts heartbeat.Facts) *agentSet {
	return startLivenessAgents(b, env, nodes, livenessProtocol{renew: renew, expire: expire}, func(int) heartbeat.Facts { return facts }).agentSet
}

// stopAll stops every agent and waits for them.
func (a *agentSet) stopAll() {
	a.mu.Lock()
	for _, c := range a.cancels {
		c()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *agentSet) stop(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancels[node]()
}

// holderWatch follows, through a watch, which node holds each object (an
// EgressService's status.host, an EgressIP's one address's node), and when
// that last changed.
type holderWatch struct {
	mu      sync.Mutex
	holder  map[string]string
	changed map[string]time.Time
	// waiting is, for each object without a holder, its Ready
	// condition's reason and message ("" before the controller wrote one).
	waiting map[string]metav1.Condition
}

// holding is what a holderWatch reads off one object.
type holding struct {
	key, holder string
	// conditions are the object's status conditions: their Ready says why
	// an object has no holder.
	conditions []metav1.Condition
}

// newHolderWatch starts following the objects of inf, whose key, holder and
// conditions of reads; factory is inf's, started here and shut down with
// the bench.
func newHolderWatch(b *testing.B, f esinformers.SharedInformerFactory, inf cache.SharedIndexInformer, of func(obj any) (holding, bool)) *holderWatch {
	w := &holderWatch{holder: map[string]string{}, changed: map[string]time.Time{}, waiting: map[string]metav1.Condition{}}
	record := func(obj any) {
		h, ok := of(obj)
		if !ok {
			return
		}
		w.mu.Lock()
		if w.holder[h.key] != h.holder {
			w.changed[h.key] = time.Now()
		}
		w.holder[h.key] = h.holder
		delete(w.waiting, h.key)
		if h.holder == "" {
			ready := meta.FindStatusCondition(h.conditions, cluster.ConditionReady)
			if ready == nil {
				ready = &metav1.Condition{}
			}
			w.waiting[h.key] = *ready
		}
		w.mu.Unlock()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, n any) { record(n) }})
	stop := make(chan struct{})
	f.Start(stop)
	f.WaitForCacheSync(stop)
	b.Cleanup(func() { close(stop); f.Shutdown() })
	return w
}

// watchHosts follows every EgressService's status.host.
func watchHosts(b *testing.B, env *clustertest.Env) *holderWatch {
	f := esinformers.NewSharedInformerFactory(env.ES, 0)
	return newHolderWatch(b, f, f.K8s().V1().EgressServices().Informer(), func(obj any) (holding, bool) {
		es, ok := obj.(*esv1.EgressService)
		if !ok {
			return holding{}, false
		}
		return holding{es.Namespace + "/" + es.Name, es.Status.Host, es.Status.Conditions}, true
	})
}

// waitingReasons says why the objects without a holder wait: how many
// have each Ready reason, most first, and one message of each.
func (w *holderWatch) waitingReasons() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	type reason struct {
		name, message string
		count         int
	}
	byName := map[string]*reason{}
	for _, c := range w.waiting {
		name := cmp.Or(c.Reason, "(no Ready condition yet)")
		r := byName[name]
		if r == nil {
			r = &reason{name: name, message: c.Message}
			byName[name] = r
		}
		r.count++
	}
	reasons := slices.SortedFunc(maps.Values(byName), func(a, b *reason) int { return cmp.Compare(b.count, a.count) })
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s (%q)", r.count, r.name, r.message))
	}
	return strings.Join(parts, "; ")
}

// waitAll waits until n services have a host and returns when the last got it.
func (w *holderWatch) waitAll(b *testing.B, n int) time.Time {
	waitFor(b, "every service has a host", func() bool { return w.held() == n })
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, t := range w.changed {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// held counts the objects that have a holder.
func (w *holderWatch) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	count := 0
	for _, h := range w.holder {
		if h != "" {
			count++
		}
	}
	return count
}

func (w *holderWatch) load(nodes []string) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	per := map[string]int{}
	for _, h := range w.holder {
		per[h]++
	}
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = per[n]
	}
	return out
}

// nodeWith returns the first node (by name) with want services, or else the
// one with the most below want, and those services.
func (w *holderWatch) nodeWith(want int) (string, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	by := map[string][]string{}
	for k, h := range w.holder {
		by[h] = append(by[h], k)
	}
	best := ""
	for n, ks := range by {
		if n == "" || len(ks) > want {
			continue
		}
		if best == "" || len(ks) > len(by[best]) || (len(ks) == len(by[best]) && n < best) {
			best = n
		}
	}
	return best, by[best]
}

func (w *holderWatch) movedAway(keys []string, from string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		if h := w.holder[k]; h == from || h == "" {
			return false
		}
	}
	return true
}

func (w *holderWatch) lastChange(keys []string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, k := range keys {
		if t := w.changed[k]; t.After(last) {
			last = t
		}
	}
	return last
}

// labelsDone says whether every service's host carries its label and no
// other node carries any service label (as the node watch sees them).
func labelsDone(w *holderWatch, labels *clustertest.LabelWatcher, n int) bool {
	w.mu.Lock()
	want := map[string]string{}
	for k, h := range w.holder {
		ns, name, _ := strings.Cut(k, "/")
		want[assign.LabelKey(ns, name)] = h
	}
	w.mu.Unlock()
	if len(want) != n {
		return false
	}
	have := labels.Carriers()
	if len(have) != len(want) {
		return false
	}
	for k, h := range want {
		if c := have[k]; len(c) != 1 || c[0] != h {
			return false
		}
	}
	return true
}

// writes are the controller's API writes by kind: EgressService status,
// EgressIP updates (their status, written with the object), node label
// patches, Events, Leases, the rest.
type writes struct{ status, eipStatus, nodePatches, events, leases, other int }

func classify(reqs []clustertest.Request) writes {
	var w writes
	for _, r := range reqs {
		switch {
		case strings.Contains(r.Path, "/egressservices/") && strings.HasSuffix(r.Path, "/status"):
			w.status++
		case strings.Contains(r.Path, "/egressips/") && r.Method == "PUT":
			w.eipStatus++
		case strings.Contains(r.Path, "/nodes/"):
			w.nodePatches++
		case strings.Contains(r.Path, "/events"):
			w.events++
		case strings.Contains(r.Path, "/leases"):
			w.leases++
		default:
			w.other++
		}
	}
	return w
}

// lastStatusWrite is when the controller last wrote one of keys' status
// after t.
func lastStatusWrite(reqs []clustertest.Request, keys []string, after time.Time) time.Time {
	var last time.Time
	for _, r := range reqs {
		if r.At.Before(after) {
			continue
		}
		for _, k := range keys {
			ns, name, _ := strings.Cut(k, "/")
			if strings.HasSuffix(r.Path, "/namespaces/"+ns+"/egressservices/"+name+"/status") && r.At.After(last) {
				last = r.At
			}
		}
	}
	return last
}

// createReadyNode creates n and sets its Ready condition, as a kubelet
// would.
func createReadyNode(ctx context.Context, kube kubernetes.Interface, n *corev1.Node) error {
	n, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	return setReady(ctx, kube, n)
}

// setReady sets n's Ready condition True.
func setReady(ctx context.Context, kube kubernetes.Interface, n *corev1.Node) error {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Bench", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

func waitFor(b *testing.B, what string, cond func() bool) {
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %v", what, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quietPeriod is how long waitIdle wants the controller idle.
const quietPeriod = 500 * time.Millisecond

// waitIdle waits until the controller has had nothing to do, and has
// written nothing but its leader Lease (Events are sent asynchronously and
// trail the syncs), for quietPeriod.
func waitIdle(b *testing.B, r *clustertest.Replica) {
	quiet, seen := time.Time{}, -1
	waitFor(b, "controller idle", func() bool {
		n := len(clustertest.NotLeases(r.Writes.All()))
		if !r.Idle() || n != seen {
			quiet, seen = time.Time{}, n
			return false
		}
		if quiet.IsZero() {
			quiet = time.Now()
		}
		return time.Since(quiet) > quietPeriod
	})
}

// plainLoop does, as the controller's identity and without any controller,
// one status update per EgressService (a new host) and patches node labels
// patches times, with the controller's default concurrency, and returns how
// long that took.
func plainLoop(b *testing.B, env *clustertest.Env, nodes []string, patches int) time.Duration {
	ctx := context.Background()
	cfg := env.Cluster.Config(kubetest.Controller)
	es := versioned.NewForConfigOrDie(cfg)
	kube := kubernetes.NewForConfigOrDie(cfg)
	list, err := env.ES.K8sV1().EgressServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		wait.Parallel(b, len(list.Items), cluster.DefaultServiceWorkers, func(i int) error {
			obj := list.Items[i].DeepCopy()
			obj.Status.Host = nodes[(i+1)%len(nodes)]
			_, err := es.K8sV1().EgressServices(obj.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
			return err
		})
	})
	wg.Go(func() {
		wait.Parallel(b, patches, cluster.DefaultNodeWorkers, func(i int) error {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{fmt.Sprintf("plain.example/svc-%d", i): ""}}})
			_, err := kube.CoreV1().Nodes().Patch(ctx, nodes[i%len(nodes)], types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	})
	wg.Wait()
	return time.Since(start)
}

func ptr[T any](v T) *T { return &v }
