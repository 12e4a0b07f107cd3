package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// routerFixture is an API server with egress nodes, a namespace and a
// running controller, for the EgressRouter tests.
type routerFixture struct {
	*eipFixture
	ns string
}

func newRouterFixture(t *testing.T, nodes ...string) *routerFixture {
	f := &routerFixture{eipFixture: newEIPFixture(t, nodes...)}
	f.ns = f.Namespace(t)
	f.run("replica-a")
	return f
}

// create makes the router name with one reserved address and master
// ("" for none), a TCP rule on port 80 and a fallback.
func (f *routerFixture) create(name, address, master string) {
	f.t.Helper()
	r := &nov1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: nov1.EgressRouterSpec{
			Mode:             nov1.EgressRouterModeRedirect,
			NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge, Master: master}},
			Addresses:        []nov1.EgressRouterAddress{{IP: address}},
			Redirect: &nov1.RedirectConfig{
				RedirectRules: []nov1.L4RedirectRule{{DestinationIP: "203.0.113.10", Port: 80, Protocol: nov1.ProtocolTypeTCP, TargetPort: 8080}},
				FallbackIP:    "203.0.113.99",
			},
		},
	}
	if _, err := f.ES.NetworkOperatorV1().EgressRouters(f.ns).Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *routerFixture) get(name string) *nov1.EgressRouter {
	f.t.Helper()
	r, err := f.ES.NetworkOperatorV1().EgressRouters(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// waitRouter waits until the router's holder is one of holders ("" for
// none) and its conditions are available, progressing and degraded
// (True or False), Degraded's reason being reason; it returns the router.
func (f *routerFixture) waitRouter(name string, holders []string, available, progressing, degraded bool, reason reasons.Reason) *nov1.EgressRouter {
	f.t.Helper()
	var r *nov1.EgressRouter
	wait.Until(f.t, settle, func() error {
		r = f.get(name)
		want := map[nov1.EgressRouterStatusConditionType]bool{nov1.EgressRouterAvailable: available, nov1.EgressRouterProgressing: progressing, nov1.EgressRouterDegraded: degraded}
		if !slices.Contains(holders, r.Status.Holder) {
			return fmt.Errorf("holder %q, want one of %q", r.Status.Holder, holders)
		}
		if len(r.Status.Conditions) != 3 {
			return fmt.Errorf("conditions %+v", r.Status.Conditions)
		}
		for _, c := range r.Status.Conditions {
			if (c.Status == nov1.ConditionTrue) != want[c.Type] {
				return fmt.Errorf("%s is %s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
			}
			if c.Type == nov1.EgressRouterDegraded && c.Reason != string(reason) {
				return fmt.Errorf("Degraded's reason %s (%s), want %s", c.Reason, c.Message, reason)
			}
		}
		return nil
	})
	return r
}

// serve has the holder's agent report the router applied: its watermark
// at the router's current revision.
func (f *routerFixture) serve(r *nov1.EgressRouter) {
	f.agents[r.Status.Holder].SetRouterRevision(r.ResourceVersion)
}

// TestEgressRouterHolder runs the controller against a real API server
// with three egress nodes, two of them in the router's subnet: the router
// gets a holder in its subnet and is Progressing until the holder's agent
// reports it applied, then Available; its headless Service and
// EndpointSlice give clients the reserved address, ready once served. The
// holder's agent dies: another node of the subnet takes the router over
// (an Event says from which), and with no node left it is Degraded
// (NodesUnavailable), its endpoint not ready. A router outside every
// subnet is Degraded (NoNodeInSubnet); one whose master no node has as its
// uplink is Degraded (NoSuchInterface) until a node publishes that uplink,
// which then serves it. Routers spread over the eligible nodes.
func TestEgressRouterHolder(t *testing.T) {
	f := newRouterFixture(t, "node-a", "node-b", "node-c=198.51.100.0/24")
	inSubnet := []string{"node-a", "node-b"}
	f.create("billing", "192.0.2.60/24", "")
	r := f.waitRouter("billing", inSubnet, false, true, false, reasons.Assigned)
	first := r.Status.Holder
	waitEventOn(t, f.Env, f.ns, "EgressRouter", "billing", corev1.EventTypeNormal, reasons.HolderChanged, "served by node "+first+" (was no node)")
	f.serve(r)
	f.waitRouter("billing", []string{first}, true, false, false, reasons.Assigned)

	svc, err := f.Kube.CoreV1().Services(f.ns).Get(context.Background(), "billing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 ||
		svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP || !metav1.IsControlledBy(svc, r) {
		t.Errorf("Service: %+v, owners %+v", svc.Spec, svc.OwnerReferences)
	}
	f.waitEndpoint("billing", "192.0.2.60", true)

	// The holder's agent dies: the other node of the subnet takes over.
	second := otherThan(first, inSubnet...)
	f.agents[first].Stop()
	r = f.waitRouter("billing", []string{second}, false, true, false, reasons.Assigned)
	waitEventOn(t, f.Env, f.ns, "EgressRouter", "billing", corev1.EventTypeNormal, reasons.HolderChanged, "served by node "+second+" (was node "+first+")")
	f.serve(r)
	f.waitRouter("billing", []string{second}, true, false, false, reasons.Assigned)
	// And the last node of the subnet goes NotReady.
	f.SetNodeReady(t, second, false)
	f.waitRouter("billing", []string{""}, false, false, true, reasons.NodesUnavailable)
	waitEventOn(t, f.Env, f.ns, "EgressRouter", "billing", corev1.EventTypeWarning, reasons.NodesUnavailable, "192.0.2.60")
	f.waitEndpoint("billing", "192.0.2.60", false)
	f.SetNodeReady(t, second, true)
	f.waitRouter("billing", []string{second}, false, true, false, reasons.Assigned)

	f.create("elsewhere", "10.99.0.1/24", "")
	f.waitRouter("elsewhere", []string{""}, false, false, true, reasons.NoNodeInSubnet)

	f.create("on-eth7", "198.51.100.7/24", "eth7")
	f.waitRouter("on-eth7", []string{""}, false, false, true, reasons.NoSuchInterface)
	waitEventOn(t, f.Env, f.ns, "EgressRouter", "on-eth7", corev1.EventTypeWarning, reasons.NoSuchInterface, "eth7")
	f.agents["node-c"].SetUplink("eth7")
	f.waitRouter("on-eth7", []string{"node-c"}, false, true, false, reasons.Assigned)

	// The agent comes back: routers spread over both nodes of the subnet.
	f.agents[first] = f.StartAgentWith(t, first, clustertest.AgentRenew, clustertest.AgentExpire, subnet4)
	for i := range 4 {
		f.create(fmt.Sprintf("spread-%d", i), fmt.Sprintf("192.0.2.%d/24", 70+i), "")
	}
	load := map[string]int{}
	for i := range 4 {
		load[f.waitRouter(fmt.Sprintf("spread-%d", i), inSubnet, false, true, false, reasons.Assigned).Status.Holder]++
	}
	if load["node-a"] == 0 || load["node-b"] == 0 {
		t.Errorf("routers by holder %v: not spread over both nodes of the subnet", load)
	}
}

// waitEndpoint waits until the router's EndpointSlice holds addr, ready
// or not.
func (f *routerFixture) waitEndpoint(name, addr string, ready bool) {
	f.t.Helper()
	wait.Until(f.t, settle, func() error {
		s, err := f.Kube.DiscoveryV1().EndpointSlices(f.ns).Get(context.Background(), name+"-egressrouter-ipv4", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Labels[discoveryv1.LabelServiceName] != name || len(s.Endpoints) != 1 || !slices.Equal(s.Endpoints[0].Addresses, []string{addr}) ||
			s.Endpoints[0].Conditions.Ready == nil || *s.Endpoints[0].Conditions.Ready != ready {
			return fmt.Errorf("slice %+v", s)
		}
		return nil
	})
}

// TestEgressRouterServiceConflict: a router whose name another Service of
// its namespace already has is served all the same, leaves that Service
// alone, and says so with one ServiceConflict Event, not one per sync
// (its holder's moves sync it several times). Once that Service is
// deleted, the router's own takes its place.
func TestEgressRouterServiceConflict(t *testing.T) {
	f := newRouterFixture(t, "node-a", "node-b")
	ctx := context.Background()
	services := f.Kube.CoreV1().Services(f.ns)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: f.ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := services.Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.create("taken", "192.0.2.60/24", "")
	r := f.waitRouter("taken", []string{"node-a", "node-b"}, false, true, false, reasons.Assigned)
	waitEventOn(t, f.Env, f.ns, "EgressRouter", "taken", corev1.EventTypeWarning, reasons.ServiceConflict, "is not this router's")
	// Syncs: Available, the holder's agent gone, the other node's, Available.
	f.serve(r)
	first := f.waitRouter("taken", []string{r.Status.Holder}, true, false, false, reasons.Assigned).Status.Holder
	f.agents[first].Stop()
	r = f.waitRouter("taken", []string{otherThan(first, "node-a", "node-b")}, false, true, false, reasons.Assigned)
	f.serve(r)
	f.waitRouter("taken", []string{r.Status.Holder}, true, false, false, reasons.Assigned)
	conflicts := 0
	for _, e := range f.Events(t, f.ns, "taken") {
		if e.Reason == string(reasons.ServiceConflict) {
			conflicts += max(int(e.Count), 1)
		}
	}
	if conflicts != 1 {
		t.Errorf("%d ServiceConflict Events over four syncs of the router, want 1", conflicts)
	}
	svc, err := services.Get(ctx, "taken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if metav1.GetControllerOf(svc) != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 {
		t.Errorf("the router changed the Service it does not own: %+v, owners %+v", svc.Spec.Ports, svc.OwnerReferences)
	}
	if _, err := f.Kube.DiscoveryV1().EndpointSlices(f.ns).Get(ctx, "taken-egressrouter-ipv4", metav1.GetOptions{}); err == nil {
		t.Error("the router made an EndpointSlice for a Service that is not its own")
	}

	if err := services.Delete(ctx, "taken", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, settle, func() error {
		svc, err := services.Get(ctx, "taken", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !metav1.IsControlledBy(svc, f.get("taken")) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
			return fmt.Errorf("Service %+v, owners %+v: not the router's yet", svc.Spec.Ports, svc.OwnerReferences)
		}
		return nil
	})
	f.waitEndpoint("taken", "192.0.2.60", true)
}
