package cluster_test

import (
	"context"
	"errors"
	"fmt"
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

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// The scale of TestEventsAtBenchScale: make bench-controller's 5,000
// assigned services, and Warnings besides.
const (
	scaleAssigned       = 5000
	scaleInvalid        = 200 // InvalidSelector
	scaleNoService      = 200 // ServiceNotFound
	scaleNoMatchingNode = 100 // NoMatchingNode: a Service, but no node in its zone
	scaleNodes          = 10  // node-0 .. node-9, in zones z0 .. z9
	// scaleMoved services are moved three times in a row once assigned.
	scaleMoved = 200
	// perNamespace spreads the services over namespaces, as the bench does.
	perNamespace = 500
	// scaleSettle bounds each wait for the controller and its Events: at
	// the emitter's 100 writes/s, 5,500 Events take about a minute.
	scaleSettle = 4 * time.Minute
	// setupWorkers create the objects in parallel.
	setupWorkers = 32
)

// TestEventsAtBenchScale: 5,500 EgressServices exist when the controller
// starts, so it assigns 5,000 and finds 500 without a host in one burst.
// Every Warning it emitted reaches the API server (by reason, the counts
// of the Warning Events equal the Warnings the controller emitted), and
// every service has on the API server the Event of its latest change (the
// reason and message of its Ready condition). Then 200 services are moved
// three times in quick succession: each ends with the Event of its last
// move, the HostLost Warnings all arrive, and Normals superseded on the way
// are the only Events not written.
func TestEventsAtBenchScale(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	for i := range scaleNodes {
		name := fmt.Sprintf("node-%d", i)
		env.CreateNode(t, name, map[string]string{"zone": fmt.Sprintf("z%d", i)}, true)
		env.StartAgentEvery(t, name, slowAgentRenew, slowAgentExpire)
	}

	start := time.Now()
	total := scaleAssigned + scaleInvalid + scaleNoService + scaleNoMatchingNode
	var namespaces []string
	for range (total + perNamespace - 1) / perNamespace {
		namespaces = append(namespaces, env.Namespace(t))
	}
	keys := make([]types.NamespacedName, total)
	wait.Parallel(t, total, setupWorkers, func(i int) error {
		keys[i] = types.NamespacedName{Namespace: namespaces[i/perNamespace], Name: fmt.Sprintf("svc-%04d", i)}
		var spec esv1.EgressServiceSpec
		withService := true
		switch {
		case i < scaleAssigned:
		case i < scaleAssigned+scaleInvalid:
			// Passes the CRD's schema, fails to parse.
			spec.NodeSelector.MatchLabels = map[string]string{"zone": "not valid"}
			withService = false
		case i < scaleAssigned+scaleInvalid+scaleNoService:
			withService = false
		default:
			spec.NodeSelector.MatchLabels = map[string]string{"zone": "nowhere"}
		}
		if withService {
			if err := createService(ctx, env, keys[i], i); err != nil {
				return err
			}
		}
		_, err := env.ES.K8sV1().EgressServices(keys[i].Namespace).Create(ctx, &esv1.EgressService{
			ObjectMeta: metav1.ObjectMeta{Namespace: keys[i].Namespace, Name: keys[i].Name}, Spec: spec}, metav1.CreateOptions{})
		return err
	})
	t.Logf("setup: %d nodes, %d EgressServices in %v", scaleNodes, total, time.Since(start).Round(time.Millisecond))

	// The controller as in production (default workers, default Event
	// rate), with long leader-election timings.
	reg := prometheus.NewRegistry()
	opts := options("replica-a")
	opts.ServiceWorkers, opts.NodeWorkers = 0, 0
	// The burst loads a 2-core machine's API server past the tests' 1.5 s
	// renew deadline at times; a change of leader in the middle of a status
	// write can lose that write's Event (docs/events.md), which is not what
	// this test measures. Production's timings are checked elsewhere.
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 30*time.Second, 20*time.Second, 2*time.Second
	opts.Registerer = reg
	started := time.Now()
	r := env.RunController(t, opts)
	wait.Until(t, scaleSettle, func() error {
		if emitted := eventsEmitted(t, reg); !r.Idle() || emitted < float64(total) {
			return fmt.Errorf("controller busy, %v of %d Events emitted", emitted, total)
		}
		return nil
	})
	synced := time.Now()
	settled := waitEventsWritten(t, r, reg, float64(total))
	t.Logf("burst: every status written %v after the controller started; %v Events emitted (%v Warnings), all written or superseded %v after it started",
		synced.Sub(started).Round(time.Millisecond), eventsEmitted(t, reg), eventsOf(t, reg, "emitted", warning), settled.Sub(started).Round(time.Millisecond))
	checkLatestEvents(t, env, namespaces, nil)
	checkWarnings(t, env, reg, namespaces)

	// Moves: three nodeSelector changes in a row per service, applied as
	// fast as the API server takes them, while the controller follows.
	emitted := eventsEmitted(t, reg)
	supersededBefore := eventsCounted(t, reg, "superseded")
	moved := keys[:scaleMoved]
	// A service not on its final node yet moves at least once: a HostLost
	// Warning and an Assigned Event.
	before := hosts(t, env, namespaces[0])
	changing := 0
	for i, k := range moved {
		if before[k.Name] != fmt.Sprintf("node-%d", (i+3)%scaleNodes) {
			changing++
		}
	}
	patched := time.Now()
	wait.Parallel(t, len(moved), setupWorkers, func(i int) error {
		for step := 1; step <= 3; step++ {
			zone := fmt.Sprintf("z%d", (i+step)%scaleNodes)
			patch := fmt.Sprintf(`{"spec":{"nodeSelector":{"matchLabels":{"zone":%q}}}}`, zone)
			if _, err := env.ES.K8sV1().EgressServices(moved[i].Namespace).Patch(ctx, moved[i].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	// Each move ends on the node of its last zone.
	wait.UntilEvery(t, scaleSettle, time.Second, func() error {
		host := hosts(t, env, namespaces[0])
		for i, k := range moved {
			if want := fmt.Sprintf("node-%d", (i+3)%scaleNodes); host[k.Name] != want {
				return fmt.Errorf("%s: on %q, not on %s yet", k, host[k.Name], want)
			}
		}
		return nil
	})
	settled = waitEventsWritten(t, r, reg, emitted+float64(changing*2))
	t.Logf("moves: %d of %d services moved, %v more Events emitted, %v Normals superseded; all written or superseded %v after the first patch",
		changing, len(moved), eventsEmitted(t, reg)-emitted, eventsCounted(t, reg, "superseded")-supersededBefore, settled.Sub(patched).Round(time.Millisecond))
	checkLatestEvents(t, env, namespaces, moved)
	checkWarnings(t, env, reg, namespaces)
	if n := eventsOf(t, reg, "emitted", warning) - eventsOf(t, reg, "emitted", warning, string(reasons.HostLost)); n != scaleInvalid+scaleNoService+scaleNoMatchingNode {
		t.Errorf("%v Warnings besides HostLost, want %d", n, scaleInvalid+scaleNoService+scaleNoMatchingNode)
	}
	if n := eventsOf(t, reg, "emitted", warning, string(reasons.HostLost)); n < float64(changing) {
		t.Errorf("%v HostLost Warnings for %d moved services", n, changing)
	}
	t.Logf("total %v", time.Since(start).Round(time.Second))
}

var noNodePorts = false

// Agents of the scale test renew as the bench's do: the tests' 600 ms
// Leases could expire while two cores take the burst, and a failover would
// change what the test expects.
const (
	slowAgentRenew  = 2 * time.Second
	slowAgentExpire = 30 * time.Second
)

// hosts maps the EgressServices of a namespace to their status.host.
func hosts(t *testing.T, env *clustertest.Env, namespace string) map[string]string {
	t.Helper()
	list, err := env.ES.K8sV1().EgressServices(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, es := range list.Items {
		out[es.Name] = es.Status.Host
	}
	return out
}

// createService creates a LoadBalancer Service with an ingress IP and an
// EndpointSlice with two pod endpoints on two nodes.
func createService(ctx context.Context, env *clustertest.Env, k types.NamespacedName, i int) error {
	svc, err := env.Kube.CoreV1().Services(k.Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			// Thousands of LoadBalancers do not fit the node-port range.
			AllocateLoadBalancerNodePorts: &noNodePorts,
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)}}
	if _, err := env.Kube.CoreV1().Services(k.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, Labels: map[string]string{discoveryv1.LabelServiceName: k.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for e := range 2 {
		node := fmt.Sprintf("node-%d", (i*2+e)%scaleNodes)
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.128.%d.%d", (i*2+e)/250, 1+(i*2+e)%250)}, NodeName: &node,
		})
	}
	_, err = env.Kube.DiscoveryV1().EndpointSlices(k.Namespace).Create(ctx, slice, metav1.CreateOptions{})
	return err
}

// waitEventsWritten waits until the controller is idle, has emitted at
// least min Events, and every emitted Event was written or superseded
// (none abandoned, none pending), and returns when that was first seen.
func waitEventsWritten(t *testing.T, r *clustertest.Replica, reg *prometheus.Registry, atLeast float64) time.Time {
	t.Helper()
	wait.Until(t, scaleSettle, func() error {
		emitted, written, superseded, abandoned := eventsEmitted(t, reg), eventsCounted(t, reg, "written"), eventsCounted(t, reg, "superseded"), eventsCounted(t, reg, "abandoned")
		switch {
		case abandoned != 0:
			return fmt.Errorf("%v Events abandoned", abandoned)
		case !r.Idle() || emitted < atLeast:
			return fmt.Errorf("controller busy, %v of at least %v Events emitted", emitted, atLeast)
		case written+superseded != emitted:
			return fmt.Errorf("%v emitted, %v written, %v superseded", emitted, written, superseded)
		}
		return nil
	})
	return time.Now()
}

// eventsOf sums egressflow_controller_events_total of a result and type,
// and of a reason if given.
func eventsOf(t *testing.T, reg *prometheus.Registry, result, eventType string, reason ...string) float64 {
	t.Helper()
	labels := map[string]string{"result": result, "type": eventType}
	if len(reason) > 0 {
		labels["reason"] = reason[0]
	}
	return eventsWhere(t, reg, labels)
}

// listAll lists the EgressServices and the Events of the namespaces.
func listAll(t *testing.T, env *clustertest.Env, namespaces []string) ([]esv1.EgressService, []corev1.Event) {
	t.Helper()
	ctx := context.Background()
	var ess []esv1.EgressService
	var evs []corev1.Event
	var mu sync.Mutex
	wait.Parallel(t, len(namespaces), len(namespaces), func(i int) error {
		es, err := env.ES.K8sV1().EgressServices(namespaces[i]).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ev, err := env.Kube.CoreV1().Events(namespaces[i]).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		ess = append(ess, es.Items...)
		evs = append(evs, ev.Items...)
		return nil
	})
	return ess, evs
}

// checkLatestEvents checks that every EgressService (of only, if not nil)
// has on the API server the Event of its latest change: of its Ready
// condition's reason and message, Normal if Ready, else Warning, from the
// controller.
func checkLatestEvents(t *testing.T, env *clustertest.Env, namespaces []string, only []types.NamespacedName) {
	t.Helper()
	ess, evs := listAll(t, env, namespaces)
	type key struct {
		uid                        types.UID
		eventType, reason, message string
	}
	have := map[key]bool{}
	for _, e := range evs {
		o := e.InvolvedObject
		if o.Kind != "EgressService" {
			continue // the API server's own, about Services
		}
		if o.APIVersion != esv1.SchemeGroupVersion.String() || e.Source.Component != "egressflow-controller" ||
			e.ReportingController != "egressflow-controller" || e.Count < 1 || e.LastTimestamp.Before(&e.FirstTimestamp) {
			t.Errorf("Event %s/%s: involvedObject %+v, source %+v, reportingController %q, count %d, first %v, last %v",
				e.Namespace, e.Name, o, e.Source, e.ReportingController, e.Count, e.FirstTimestamp, e.LastTimestamp)
		}
		have[key{o.UID, e.Type, e.Reason, e.Message}] = true
	}
	var missing []string
	checked := 0
	for _, es := range ess {
		if only != nil && !slices.Contains(only, types.NamespacedName{Namespace: es.Namespace, Name: es.Name}) {
			continue
		}
		checked++
		cond := meta.FindStatusCondition(es.Status.Conditions, cluster.ConditionReady)
		if cond == nil {
			missing = append(missing, es.Namespace+"/"+es.Name+": no Ready condition")
			continue
		}
		eventType := warning
		if cond.Status == metav1.ConditionTrue {
			eventType = normal
		}
		if !have[key{es.UID, eventType, cond.Reason, cond.Message}] {
			missing = append(missing, fmt.Sprintf("%s/%s: %s %s %q", es.Namespace, es.Name, eventType, cond.Reason, cond.Message))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d services lack the Event of their latest change, e.g. %q", len(missing), checked, missing[:min(len(missing), 5)])
	}
	t.Logf("%d services checked against %d Events", checked, len(evs))
}

// checkWarnings checks that, by reason, the counts of the Warning Events
// on the API server add up to the Warnings the controller emitted.
func checkWarnings(t *testing.T, env *clustertest.Env, reg *prometheus.Registry, namespaces []string) {
	t.Helper()
	_, evs := listAll(t, env, namespaces)
	onAPI := map[string]float64{}
	for _, e := range evs {
		if e.Type == warning && e.InvolvedObject.Kind == "EgressService" {
			onAPI[e.Reason] += float64(e.Count)
		}
	}
	reasons := []reasons.Reason{reasons.InvalidSelector, reasons.ServiceNotFound, reasons.NotLoadBalancer,
		reasons.NoIngressIP, reasons.NoEndpoints, reasons.NoMatchingNode, reasons.HostLost}
	var errs []error
	for _, r := range reasons {
		if emitted := eventsOf(t, reg, "emitted", warning, string(r)); onAPI[string(r)] != emitted {
			errs = append(errs, fmt.Errorf("%s: %v emitted, %v on the API server", r, emitted, onAPI[string(r)]))
		}
		delete(onAPI, string(r))
	}
	if len(onAPI) > 0 {
		errs = append(errs, fmt.Errorf("Warnings of other reasons: %v", onAPI))
	}
	if err := errors.Join(errs...); err != nil {
		t.Error(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}
