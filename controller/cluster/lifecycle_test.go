package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/nodeview"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// Each lifecycle row of the contract: the service gets a host and its
// label, then one thing happens, and the host, label, Ready condition and
// Events follow.

// assigned creates service web with endpoints on every given node and waits
// for its host; it returns the host.
func (f *fixture) assigned(spec esv1.EgressServiceSpec, nodes ...string) string {
	f.t.Helper()
	f.service("web", spec, nodes...)
	wait.Until(f.t, settle, func() error {
		if h := f.GetEgressService(f.t, f.ns, "web").Status.Host; h == "" {
			return errNoHost
		}
		return nil
	})
	host := f.GetEgressService(f.t, f.ns, "web").Status.Host
	f.waitStatus("web", host, reasons.Assigned)
	f.waitLabelOn("web", host)
	f.waitEvent("web", normal, reasons.Assigned, "node "+host)
	return host
}

func TestAssigned(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	es := f.waitStatus("web", host, reasons.Assigned)
	if msg := es.Status.Conditions[0].Message; msg == "" || !contains(msg, f.label("web")) {
		t.Errorf("Ready message %q does not name the label %s", msg, f.label("web"))
	}
	if got := f.NodeServiceLabels(t, otherThan(host, "node-a", "node-b")); len(got) != 0 {
		t.Errorf("the other node carries %v", got)
	}
}

func TestServiceDeleted(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	f.assigned(esv1.EgressServiceSpec{}, "node-a")
	if err := f.Kube.CoreV1().Services(f.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "", reasons.ServiceNotFound)
	f.waitLabelOn("web")
	f.waitEvent("web", warning, reasons.ServiceNotFound, "no Service")
}

func TestEgressServiceDeleted(t *testing.T) {
	f := newFixture(t, "node-a")
	f.run("replica-a")
	f.assigned(esv1.EgressServiceSpec{}, "node-a")
	if err := f.ES.K8sV1().EgressServices(f.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitLabelOn("web")
}

func TestServiceLosesIngress(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a")
	f.SetIngress(t, f.ns, "web")
	f.waitStatus("web", "", reasons.NoIngressIP)
	f.waitLabelOn("web")
	f.waitEvent("web", warning, reasons.NoIngressIP, "no IP in status.loadBalancer.ingress")

	// Back with an IP: assigned again, to the same node (nothing else has
	// services, and the tie-break is deterministic).
	f.SetIngress(t, f.ns, "web", "192.0.2.20", "192.0.2.21", "2001:db8::20")
	f.waitStatus("web", host, reasons.Assigned)
	f.waitLabelOn("web", host)
}

func TestServiceStopsBeingLoadBalancer(t *testing.T) {
	f := newFixture(t, "node-a")
	f.run("replica-a")
	f.assigned(esv1.EgressServiceSpec{}, "node-a")
	svc, err := f.Kube.CoreV1().Services(f.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.ExternalTrafficPolicy = ""
	if _, err := f.Kube.CoreV1().Services(f.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "", reasons.NotLoadBalancer)
	f.waitLabelOn("web")
	f.waitEvent("web", warning, reasons.NotLoadBalancer, "ClusterIP")
}

func TestEndpointsGone(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	f.SetEndpoints(t, f.ns, "web", nil)
	f.waitStatus("web", "", reasons.NoEndpoints)
	f.waitLabelOn("web")
	f.waitEvent("web", warning, reasons.NoEndpoints, "no endpoint on the cluster network")

	// A host-networked endpoint (outside the pod CIDR) does not count.
	f.SetEndpoints(t, f.ns, "web", []clustertest.Endpoint{{IP: "172.18.0.5", Node: "node-a"}})
	f.waitStatus("web", "", reasons.NoEndpoints)
	f.SetEndpoints(t, f.ns, "web", []clustertest.Endpoint{{IP: "10.128.3.3", Node: "node-b"}})
	f.waitStatus("web", host, reasons.Assigned)
	f.waitLabelOn("web", host)
}

func TestSelectorChanged(t *testing.T) {
	f := newFixture(t, "node-a=zone:east", "node-b=zone:west")
	f.run("replica-a")
	f.assigned(esv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"zone": "east"}}}, "node-a", "node-b")
	f.waitStatus("web", "node-a", reasons.Assigned)

	f.UpdateEgressService(t, f.ns, "web", func(es *esv1.EgressService) {
		es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"zone": "west"}}
	})
	f.waitStatus("web", "node-b", reasons.Assigned)
	f.waitLabelOn("web", "node-b")
	f.waitEvent("web", warning, reasons.HostLost, "host node-a lost (NotSelected); new host: node-b")

	// A selector that matches nothing.
	f.UpdateEgressService(t, f.ns, "web", func(es *esv1.EgressService) {
		es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"zone": "north"}}
	})
	f.waitStatus("web", "", reasons.NoMatchingNode)
	f.waitLabelOn("web")
	f.waitEvent("web", warning, reasons.NoMatchingNode, "do not match nodeSelector")

	// The node's labels change instead: it becomes a candidate.
	north := "north"
	f.PatchNodeLabels(t, "node-a", map[string]*string{"zone": &north})
	f.waitStatus("web", "node-a", reasons.Assigned)
	f.waitLabelOn("web", "node-a")
}

func TestInvalidSelector(t *testing.T) {
	f := newFixture(t, "node-a")
	r := f.run("replica-a")
	// The CRD's CEL rules reject bad operators; a label value with a space
	// passes the schema and fails to parse.
	f.service("web", esv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"zone": "not valid"}}}, "node-a")
	f.waitStatus("web", "", reasons.InvalidSelector)
	f.waitEvent("web", warning, reasons.InvalidSelector, "spec.nodeSelector is invalid")
	f.waitLabelOn("web")

	// Nothing is written again: no hot loop, no retry storm.
	wait.Until(t, settle, func() error { return idle(r) })
	before, events := r.Writes.Len(), eventsEmitted(t, f.reg)
	r.Resync()
	wait.Until(t, settle, func() error { return idle(r) })
	if got, _ := r.Writes.Since(before); len(clustertest.NotEvents(got)) != 0 {
		t.Errorf("writes after a resync of an invalid service: %+v", got)
	}
	if got := eventsEmitted(t, f.reg); got != events {
		t.Errorf("a resync emitted %v Events", got-events)
	}
}

func TestNodeNotReady(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	other := otherThan(host, "node-a", "node-b")
	f.SetNodeReady(t, host, false)
	f.waitStatus("web", other, reasons.Assigned)
	f.waitLabelOn("web", other)
	f.waitEvent("web", warning, reasons.HostLost, "host "+host+" lost (NodeNotReady); new host: "+other)

	// No candidate left.
	f.SetNodeReady(t, other, false)
	f.waitStatus("web", "", reasons.NoMatchingNode)
	f.waitLabelOn("web")
	f.waitEvent("web", warning, reasons.HostLost, "host "+other+" lost (NodeNotReady); new host: none (NoMatchingNode)")
	es := f.waitStatus("web", "", reasons.NoMatchingNode)
	if msg := es.Status.Conditions[0].Message; !contains(msg, "are not Ready") {
		t.Errorf("Ready message %q does not say why", msg)
	}
}

func TestNodeDeleted(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	other := otherThan(host, "node-a", "node-b")
	if err := f.Kube.CoreV1().Nodes().Delete(context.Background(), host, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", other, reasons.Assigned)
	f.waitLabelOn("web", other)
	f.waitEvent("web", warning, reasons.HostLost, "host "+host+" lost (NodeDeleted)")
}

func TestLocalTrafficPolicyWithoutLocalEndpoint(t *testing.T) {
	f := newFixture(t, "node-a", "node-b", "node-c")
	f.run("replica-a")
	f.CreateService(t, clustertest.Service{Namespace: f.ns, Name: "web", IngressIPs: []string{"192.0.2.10"},
		TrafficPol: corev1.ServiceExternalTrafficPolicyLocal,
		Endpoints:  []clustertest.Endpoint{{IP: "10.128.0.10", Node: "node-c"}}})
	f.CreateEgressService(t, f.ns, "web", esv1.EgressServiceSpec{})
	f.waitStatus("web", "node-c", reasons.Assigned)
	f.waitLabelOn("web", "node-c")

	// The endpoint moves to node-b: node-c no longer runs one.
	f.SetEndpoints(t, f.ns, "web", []clustertest.Endpoint{{IP: "10.128.0.11", Node: "node-b"}})
	f.waitStatus("web", "node-b", reasons.Assigned)
	f.waitLabelOn("web", "node-b")
	f.waitEvent("web", warning, reasons.HostLost, "host node-c lost (NoLocalEndpoint); new host: node-b")

	// Its only local node is not Ready: no candidate, though others are.
	f.SetNodeReady(t, "node-b", false)
	es := f.waitStatus("web", "", reasons.NoMatchingNode)
	if msg := es.Status.Conditions[0].Message; !contains(msg, "externalTrafficPolicy Local") {
		t.Errorf("Ready message %q does not mention the local endpoint rule", msg)
	}
	f.waitLabelOn("web")
}

func TestSourceIPByNetworkAndBack(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")

	f.UpdateEgressService(t, f.ns, "web", func(es *esv1.EgressService) {
		es.Spec.SourceIPBy = esv1.SourceIPByNetwork
		es.Spec.Network = "100"
	})
	f.waitStatus("web", esv1.HostAll, reasons.AllNodes)
	f.waitLabelOn("web")
	f.waitEvent("web", normal, reasons.AllNodes, "sourceIPBy is Network")

	f.UpdateEgressService(t, f.ns, "web", func(es *esv1.EgressService) {
		es.Spec.SourceIPBy = esv1.SourceIPByLoadBalancerIP
	})
	f.waitStatus("web", host, reasons.Assigned)
	f.waitLabelOn("web", host)
}

// TestReadyUnknownWithLiveAgent: a host whose Node's Ready condition turns
// Unknown (the node lifecycle controller heard nothing from its kubelet,
// as after an API server outage) keeps its service while its agent is
// alive; once the agent stops too, the service moves.
func TestReadyUnknownWithLiveAgent(t *testing.T) {
	env := clustertest.Start(t)
	f := &fixture{Env: env, t: t, ns: env.Namespace(t)}
	agents := map[string]*clustertest.Agent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = env.Node(t, n, nil)
	}
	f.labels = env.WatchLabels(t)
	r := f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b", "node-c")
	writes := r.Writes.Len()
	f.SetNodeReadyStatus(t, host, corev1.ConditionUnknown)

	// A later event of the same Node informer, with an effect to wait for:
	// once "marker" has a host, the controller has taken in the Unknown
	// before it, and once it is idle, synced what that queued.
	marker := otherThan(host, "node-a", "node-b", "node-c")
	f.service("marker", esv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"marker": "yes"}}}, marker)
	f.waitStatus("marker", "", reasons.NoMatchingNode)
	yes := "yes"
	f.PatchNodeLabels(t, marker, map[string]*string{"marker": &yes})
	f.waitStatus("marker", marker, reasons.Assigned)
	wait.Until(t, settle, func() error { return idle(r) })
	f.waitStatus("web", host, reasons.Assigned)
	got, _ := r.Writes.Since(writes)
	for _, w := range clustertest.NotEvents(clustertest.NotLeases(got)) {
		if strings.Contains(w.Path, "/egressservices/web/") {
			t.Errorf("web was written while its host was Unknown with a live agent: %s %s", w.Method, w.Path)
		}
	}

	agents[host].Stop()
	f.waitEvent("web", warning, reasons.HostLost, "host "+host+" lost")
	if now := f.GetEgressService(t, f.ns, "web").Status.Host; now == host || now == "" {
		t.Errorf("web's host after its agent stopped: %q", now)
	}
}

func TestAgentLeaseExpired(t *testing.T) {
	f, agents := newFixtureWithAgents(t, "node-a", "node-b")
	r := f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	other := otherThan(host, "node-a", "node-b")

	agents[host].Stop()
	lease, err := f.Kube.CoordinationV1().Leases("egressflow-system").Get(context.Background(), host, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expiry := lease.Spec.RenewTime.Add(clustertest.AgentExpire)
	f.waitStatus("web", other, reasons.Assigned)
	f.waitLabelOn("web", other)
	took := statusWriteAt(t, r, "web", other).Sub(expiry)
	t.Logf("reassigned %v after the Lease expired", took)
	if took > settle/3 {
		t.Errorf("failover took %v after Lease expiry", took)
	}
	f.waitEvent("web", warning, reasons.HostLost, "host "+host+" lost (AgentLeaseExpired); new host: "+other)

	// The agent comes back: nothing moves back (the valid host is kept),
	// not even on a resync.
	f.StartAgent(t, host)
	wait.Until(t, settle, func() error { return idle(r) })
	before := r.Writes.Len()
	r.Resync()
	wait.Until(t, settle, func() error { return idle(r) })
	if got, _ := r.Writes.Since(before); len(clustertest.NotLeases(got)) != 0 {
		t.Errorf("writes after the agent came back: %+v", clustertest.NotLeases(got))
	}
	f.waitStatus("web", other, reasons.Assigned)
}

// TestUninstallRemovesLabels: egressflow's namespace being deleted (the
// first object `kubectl delete -k deploy/` deletes) makes the controller
// remove every egress-service label at once, and add none again: the
// service below still gets a new host when its node goes NotReady, but no
// node is labelled for it.
func TestUninstallRemovesLabels(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	r := f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	ctx := context.Background()
	// This API server runs no namespace controller: the namespace stays
	// Terminating, and the controller's permissions stay.
	if err := f.Kube.CoreV1().Namespaces().Delete(ctx, kubetest.SystemNamespace, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitLabelOn("web")
	_, mark := r.Writes.Since(0)
	other := otherThan(host, "node-a", "node-b")
	f.SetNodeReady(t, host, false)
	f.waitStatus("web", other, reasons.Assigned)
	wait.Until(t, settle, func() error { return idle(r) })
	writes, _ := r.Writes.Since(mark)
	for _, w := range writes {
		if strings.Contains(w.Path, "/nodes/") && strings.Contains(w.Body, `"`+f.label("web")+`":""`) {
			t.Errorf("labelled a node during the uninstall: %s %s", w.Path, w.Body)
		}
	}
	f.waitLabelOn("web")
}

// TestUninstallOnDeploymentDeleted: the controller's own Deployment being
// deleted (`helm uninstall` deletes it and keeps the namespace) makes the
// controller remove every egress-service label at once, as the
// namespace's deletion does; another Deployment of the namespace deleted
// first is no sign. The controller runs as the deploy/ ServiceAccount, so
// its Role must grant the watch.
func TestUninstallOnDeploymentDeleted(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	opts := options("replica-a")
	opts.Deployment = "egressflow-controller"
	r := f.runWith(opts)
	f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	ctx := context.Background()
	deployments := f.Kube.AppsV1().Deployments(kubetest.SystemNamespace)
	ours, err := deployments.Get(ctx, opts.Deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy/controller/deployment.yaml's Deployment: %v", err)
	}

	// Another Deployment of the namespace, deleted: nothing moves.
	other := ours.DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Name: "something-else", Namespace: kubetest.SystemNamespace}
	if _, err := deployments.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := deployments.Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.Resync()
	wait.Until(t, settle, func() error { return idle(r) })
	if got := f.NodesWithLabel(t, f.label("web")); len(got) != 1 {
		t.Fatalf("another Deployment's deletion changed the labels: %v carry %s", got, f.label("web"))
	}

	// Its own, deleted as Helm deletes it (background propagation: the
	// object goes at once; this API server runs no garbage collector).
	background := metav1.DeletePropagationBackground
	start := time.Now()
	if err := deployments.Delete(ctx, opts.Deployment, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	f.waitLabelOn("web")
	t.Logf("every label removed %v after the Deployment's deletion", time.Since(start).Round(time.Millisecond))
	// And none added again.
	r.Resync()
	wait.Until(t, settle, func() error { return idle(r) })
	if got := f.NodesWithLabel(t, f.label("web")); len(got) != 0 {
		t.Errorf("labelled again after the uninstall: %v", got)
	}
}

// TestUninstallStep: `egressflow-controller --uninstall` (cluster.Uninstall,
// the Helm chart's pre-delete hook), run as the deploy/ ServiceAccount,
// deletes the controller's Deployment and removes every egress-service
// label and every node view, also those of a controller that is no longer
// running (a crashed one, which saw no sign): nothing is left for the
// RBAC's deletion to strand, in the namespace Helm keeps.
func TestUninstallStep(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	r := f.run("replica-a")
	f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	f.WaitNodeViews(t, "node-a", "node-b")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := f.NodesWithLabel(t, f.label("web")); len(got) != 1 {
		t.Fatalf("before the uninstall: %v carry %s, want one node", got, f.label("web"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	start := time.Now()
	if err := cluster.Uninstall(ctx, f.Cluster.Config(kubetest.Controller), kubetest.SystemNamespace, "egressflow-controller"); err != nil {
		t.Fatalf("Uninstall: %v", err)
	}
	t.Logf("Uninstall returned after %v", time.Since(start).Round(time.Millisecond))
	if got := f.NodesWithLabel(t, f.label("web")); len(got) != 0 {
		t.Errorf("after the uninstall: %v carry %s", got, f.label("web"))
	}
	if _, err := f.Kube.AppsV1().Deployments(kubetest.SystemNamespace).Get(context.Background(), "egressflow-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller's Deployment after the uninstall: %v, want NotFound", err)
	}
	views, err := f.Kube.CoreV1().ConfigMaps(kubetest.SystemNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: nodeview.Selector()})
	if err != nil || len(views.Items) != 0 {
		t.Errorf("node views after the uninstall: %d (%v), want none", len(views.Items), err)
	}
}

// TestRestartingAgentChosenLast: while a node's agent has handed its Lease
// over for a restart (a rolling update), the services it hosts stay, and
// new services go to other nodes, whatever the loads: a fault of that node
// meanwhile would fail over only when the handover runs out. Once the
// successor renews, the node is a candidate like any other again.
func TestRestartingAgentChosenLast(t *testing.T) {
	f, agents := newFixtureWithAgents(t, "node-a", "node-b")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	other := otherThan(host, "node-a", "node-b")

	agents[host].HandOver(t, time.Minute)
	waitGauge(t, f.reg, "egressflow_controller_agents_restarting", 1)
	// By load alone these would alternate between the two nodes.
	for i := range 3 {
		name := fmt.Sprintf("svc-%d", i)
		f.service(name, esv1.EgressServiceSpec{}, "node-a", "node-b")
		f.waitStatus(name, other, reasons.Assigned)
	}
	f.waitStatus("web", host, reasons.Assigned)

	f.StartAgent(t, host) // the successor
	waitGauge(t, f.reg, "egressflow_controller_agents_restarting", 0)
	f.service("svc-after", esv1.EgressServiceSpec{}, "node-a", "node-b")
	f.waitStatus("svc-after", host, reasons.Assigned) // the least loaded again
}
