package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// TestBalanceAndNoOpResync: services spread evenly, a new node takes no
// existing service and costs one write (its node view), a resync writes
// nothing, and each assignment cost one status write and at most one
// label patch; each node's view was written once, and each service's
// agents' label once on the Service and once on its slice (which no
// EndpointSlice controller manages here).
//
// The Services and their slices exist before the controller starts: its
// caches hold them before it sees the first EgressService. (An
// EgressService whose slice has not reached the controller yet gets a
// NoEndpoints status, then its host: two writes, rightly, for what the
// controller saw in turn; the watches of two resources keep no order
// between them.)
func TestBalanceAndNoOpResync(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	f := newFixture(t, nodes...)
	const n = 12
	for i := range n {
		f.loadBalancer(fmt.Sprintf("svc-%02d", i), nodes...)
	}
	reg := prometheus.NewRegistry()
	opts := options("replica-a")
	opts.Registerer = reg
	r := f.RunController(t, opts)
	r.WaitLeading(t, settle)
	for i := range n {
		f.CreateEgressService(t, f.ns, fmt.Sprintf("svc-%02d", i), esv1.EgressServiceSpec{})
	}
	load := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("svc-%02d", i)
		wait.Until(t, settle, func() error {
			if f.GetEgressService(t, f.ns, name).Status.Host == "" {
				return errNoHost
			}
			return nil
		})
		host := f.GetEgressService(t, f.ns, name).Status.Host
		f.waitLabelOn(name, host)
		load[host]++
	}
	for _, node := range nodes {
		if load[node] != n/len(nodes) {
			t.Errorf("loads %v, want %d each", load, n/len(nodes))
		}
	}
	f.WaitNodeViews(t, nodes...)
	wait.Until(t, settle, func() error { return idle(r) })
	writes := clustertest.NotEvents(r.Writes.All())
	status, patches, views, inputLabels := 0, 0, 0, 0
	inputLabel := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, endpoints.EgressServiceLabel, endpoints.EgressServiceLabelValue)
	for _, w := range writes {
		switch {
		case strings.HasSuffix(w.Path, "/status"):
			status++
		case strings.Contains(w.Path, "/nodes/"):
			patches++
		case w.Method == "POST" && strings.HasSuffix(w.Path, "/namespaces/"+kubetest.SystemNamespace+"/configmaps"):
			views++
		case w.Method == "PATCH" && (strings.Contains(w.Path, "/services/") || strings.Contains(w.Path, "/endpointslices/")) && w.Body == inputLabel:
			inputLabels++
		}
	}
	t.Logf("%d assignments: %d status writes, %d node patches; %d node views; %d agents' labels", n, status, patches, views, inputLabels)
	if status != n || patches > n || views != len(nodes) || inputLabels != 2*n || status+patches+views+inputLabels != len(writes) {
		t.Errorf("%d assignments cost %d status writes and %d node patches, %d nodes %d view writes, %d agents' labels (%d writes in all)", n, status, patches, len(nodes), views, inputLabels, len(writes))
		for _, w := range writes {
			t.Logf("write at %s: %s %s %.300s", w.At.Format("15:04:05.000"), w.Method, w.Path, w.Body)
		}
	}

	// A new node: nothing moves to it; its view is published.
	before := r.Writes.Len()
	f.Node(t, "node-d", nil)
	f.WaitNodeViews(t, "node-d")
	wait.Until(t, settle, func() error { return idle(r) })
	if got, _ := r.Writes.Since(before); len(clustertest.NotLeases(got)) != 1 || !strings.HasSuffix(clustertest.NotLeases(got)[0].Path, "/configmaps") {
		t.Errorf("writes after a new node: %+v, want its view's creation alone", clustertest.NotLeases(got))
	}
	before, events := r.Writes.Len(), eventsEmitted(t, reg)
	r.Resync()
	wait.Until(t, settle, func() error { return idle(r) })
	if got, _ := r.Writes.Since(before); len(clustertest.NotLeases(got)) != 0 {
		t.Errorf("writes after a resync: %+v", clustertest.NotLeases(got))
	}
	if got := eventsEmitted(t, reg); got != events {
		t.Errorf("a resync emitted %v Events", got-events)
	}
	if got := f.NodeServiceLabels(t, "node-d"); len(got) != 0 {
		t.Errorf("node-d took %v", got)
	}

	if got := counter(t, reg, "egressflow_controller_assignments_total", nil); got != n {
		t.Errorf("assignments_total %v, want %d", got, n)
	}
	if got := gauge(t, reg, "egressflow_controller_services_without_host"); got != 0 {
		t.Errorf("services_without_host %v", got)
	}
	if got := histogramCount(t, reg, "egressflow_controller_event_to_status_seconds"); got < n {
		t.Errorf("event_to_status_seconds has %d samples, want >= %d", got, n)
	}
	if got := gauge(t, reg, "egressflow_controller_leader"); got != 1 {
		t.Errorf("leader gauge %v", got)
	}

	// One host goes NotReady: failovers by cause, and services without
	// host stay 0 (others take them).
	victim := f.GetEgressService(t, f.ns, "svc-00").Status.Host
	f.SetNodeReady(t, victim, false)
	wait.Until(t, settle, func() error {
		if got := counter(t, reg, "egressflow_controller_failovers_total", map[string]string{"cause": string(assign.NodeNotReady)}); got != float64(n/len(nodes)) {
			return fmt.Errorf("failovers_total{cause=NodeNotReady} = %v", got)
		}
		return nil
	})
	// A service without endpoints counts as without host.
	f.CreateService(t, clustertest.Service{Namespace: f.ns, Name: "dry", IngressIPs: []string{"192.0.2.99"}})
	f.CreateEgressService(t, f.ns, "dry", esv1.EgressServiceSpec{})
	f.waitStatus("dry", "", reasons.NoEndpoints)
	withoutHost := func(want, noMatchingNode float64) func() error {
		return func() error {
			if got, gotNoNode := gauge(t, reg, "egressflow_controller_services_without_host"), gauge(t, reg, "egressflow_controller_services_no_matching_node"); got != want || gotNoNode != noMatchingNode {
				return fmt.Errorf("services_without_host %v, services_no_matching_node %v; want %v, %v", got, gotNoNode, want, noMatchingNode)
			}
			return nil
		}
	}
	// It could not have a host, whatever the nodes: not a service without
	// a matching node.
	wait.Until(t, settle, withoutHost(1, 0))
	// A service whose selector matches no node is both, until it is gone.
	f.service("nowhere", esv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"zone": "nowhere"}}}, nodes...)
	f.waitStatus("nowhere", "", reasons.NoMatchingNode)
	wait.Until(t, settle, withoutHost(2, 1))
	if err := f.ES.K8sV1().EgressServices(f.ns).Delete(context.Background(), "nowhere", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, settle, withoutHost(1, 0))
}

// TestRBACIsNarrow: the deploy/ RBAC lets the controller do its job (every
// other test runs it as that identity) and not more.
func TestRBACIsNarrow(t *testing.T) {
	f := newFixture(t, "node-a")
	f.run("replica-a")
	f.assigned(esv1.EgressServiceSpec{}, "node-a")
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(f.Cluster.Config(kubetest.Controller))
	es := versioned.NewForConfigOrDie(f.Cluster.Config(kubetest.Controller))

	cur := f.GetEgressService(t, f.ns, "web")
	cur.Spec.Network = "7"
	_, err := es.K8sV1().EgressServices(f.ns).Update(ctx, cur, metav1.UpdateOptions{})
	forbidden(t, "update an EgressService's spec", err)
	lease, err := kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("controller cannot read agent Leases: %v", err)
	}
	_, err = kube.CoordinationV1().Leases(kubetest.SystemNamespace).Update(ctx, lease, metav1.UpdateOptions{})
	forbidden(t, "forge an agent heartbeat", err)
	err = kube.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{})
	forbidden(t, "delete a node", err)
	_, err = kube.CoreV1().Services(f.ns).UpdateStatus(ctx, mustService(t, f), metav1.UpdateOptions{})
	forbidden(t, "write a Service's status", err)
	_, err = kube.CoreV1().Secrets(f.ns).List(ctx, metav1.ListOptions{})
	forbidden(t, "list Secrets", err)
}

func mustService(t *testing.T, f *fixture) *corev1.Service {
	svc, err := f.Kube.CoreV1().Services(f.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("controller could %s: err %v", what, err)
	}
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	if m := metric(t, reg, name, labels); m != nil {
		return m.GetCounter().GetValue()
	}
	return 0
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	if m := metric(t, reg, name, nil); m != nil {
		return m.GetGauge().GetValue()
	}
	return -1
}

// waitGauge waits until gauge name of reg reads want.
func waitGauge(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	wait.Until(t, settle, func() error {
		if got := gauge(t, reg, name); got != want {
			return fmt.Errorf("%s %v, want %v", name, got, want)
		}
		return nil
	})
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	if m := metric(t, reg, name, nil); m != nil {
		return m.GetHistogram().GetSampleCount()
	}
	return 0
}

// TestFailingWritesBackOff: while the controller may not write statuses
// (its RBAC rule removed), the sync is retried with growing delays, not in a
// hot loop; once the rule is back, the status is written.
func TestFailingWritesBackOff(t *testing.T) {
	f := newFixture(t, "node-a")
	opts := options("replica-a")
	opts.RetryBaseDelay = 50 * time.Millisecond
	opts.RetryMaxDelay = 800 * time.Millisecond
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	r := f.RunController(t, opts)
	r.WaitLeading(t, settle)
	ctx := context.Background()
	roles := f.Kube.RbacV1().ClusterRoles()
	role, err := roles.Get(ctx, "egressflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := role.DeepCopy()
	role.Rules = slices.DeleteFunc(role.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Resources, "egressservices/status") })
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	attempts := func() []time.Time {
		var at []time.Time
		for _, w := range r.Writes.All() {
			if strings.HasSuffix(w.Path, "/egressservices/web/status") {
				at = append(at, w.At)
			}
		}
		return at
	}
	f.service("web", esv1.EgressServiceSpec{}, "node-a")
	wait.Until(t, settle, func() error {
		if n := len(attempts()); n < 6 {
			return fmt.Errorf("%d attempts so far", n)
		}
		return nil
	})
	at := attempts()
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	t.Logf("gaps between failing attempts: %v", gaps)
	// 50, 100, 200, 400, 800 ms: each gap at least the base delay doubled
	// per failure (less a little timer slack), capped at the maximum.
	for i, g := range gaps[:5] {
		want := min(opts.RetryBaseDelay<<i, opts.RetryMaxDelay)
		if g < want*9/10 {
			t.Errorf("gap %d is %v, want >= %v (hot loop?)", i, g, want)
		}
	}
	if got := f.GetEgressService(t, f.ns, "web").Status.Host; got != "" {
		t.Fatalf("status written without permission: %q", got)
	}
	// The metrics say a service fails to sync, and the alert on them
	// (deploy/monitoring) would fire.
	service := map[string]string{"queue": "service"}
	failing := func() float64 {
		return metric(t, reg, "egressflow_controller_failing_syncs", service).GetGauge().GetValue()
	}
	if got := failing(); got != 1 {
		t.Errorf("failing_syncs{queue=service} = %v while web's status cannot be written, want 1", got)
	}
	// The write log sees an attempt's refused write before its sync
	// returns and counts the error: the counter catches up a moment later.
	wait.Until(t, settle, func() error {
		if got := counter(t, reg, "egressflow_controller_syncs_total", map[string]string{"queue": "service", "result": "error"}); got < float64(len(at)) {
			return fmt.Errorf("syncs_total{queue=service,result=error} = %v after %d failed attempts", got, len(at))
		}
		return nil
	})
	restored := time.Now()

	full.ResourceVersion = ""
	cur, err := roles.Get(ctx, "egressflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full.ResourceVersion = cur.ResourceVersion
	if _, err := roles.Update(ctx, full, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "node-a", reasons.Assigned)
	f.waitLabelOn("web", "node-a")
	wait.Until(t, settle, func() error {
		if got := failing(); got != 0 {
			return fmt.Errorf("failing_syncs{queue=service} = %v once the status is written", got)
		}
		return nil
	})
	if got := metric(t, reg, "egressflow_controller_last_successful_sync_timestamp_seconds", service).GetGauge().GetValue(); got < float64(restored.Unix()) {
		t.Errorf("last_successful_sync_timestamp_seconds{queue=service} = %v, before the status could be written (%v)", got, restored.Unix())
	}
}
