//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/test/wait"
)

// TestExternalRoute: an AdminPolicyBasedExternalRoute on the real cluster,
// with two external gateway containers that run FRR's bfdd. The routed
// namespace has a probe pod on every node, sending dual-stack datagrams to
// the external host, each of a new flow; a pod of another namespace sends
// the same. Read from the external host's capture (the source MAC says
// which gateway a packet came through):
//   - with static hops on both gateways (BFD on), every routed pod reaches
//     the outside through the gateways only, spread over both in each
//     family, and the other pod directly; the status says Success, applied
//     on every node;
//   - one gateway's BFD shut down in FRR: it carries nothing, the status
//     names it on every node as BFD session down; brought back, it carries
//     again and the status is clean;
//   - that gateway killed (docker kill): everything goes through the other;
//   - a dynamic hop instead, on a gateway pod (its address on a network
//     attachment, from its network-status annotation, the other
//     gateway's): used while the pod is Ready, the routed pods' egress
//     dropped (never leaving another way) while it is not Ready and once it
//     is deleted.
//
// No capture ever shows a routed pod's packet that came through no
// gateway and was not addressed to one (the network's bridge floods the
// frames sent to a killed gateway's MAC until the nodes' BFD sessions
// notice: those are on their way to the gateway, not out another way).
func TestExternalRoute(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	ctx := context.Background()
	s := newRouteScenario(c)
	gateways, w, routes, route := s.gateways, s.watch, s.routes, s.route
	const gatewayNS = "er-gateways"
	c.CreateNamespace(gatewayNS)
	c.labelNamespace(gatewayNS, map[string]string{"role": "gateways"})

	var leaks []string
	// expect waits for a window in which check finds nothing wrong,
	// noting the routed pods' packets that came through no gateway in
	// any window it looked at.
	expect := func(what string, check func(routeLook) error) {
		t.Helper()
		wait.Until(t, convergeTimeout, func() error {
			l := w.look(routeWindow)
			for _, p := range l.leaked {
				leaks = append(leaks, what+": "+p.Line+" from "+p.SrcMAC+" to "+p.DstMAC)
			}
			if err := check(l); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
	}
	// through checks that every routed pod address reached the outside
	// through the gateways named, and only those, in each family.
	through := func(names ...string) func(routeLook) error {
		return func(l routeLook) error {
			for addr, pod := range w.routedPods {
				if len(l.via[addr]) == 0 {
					return fmt.Errorf("nothing from %s (%s) through a gateway", pod, addr)
				}
			}
			for _, v6 := range []bool{false, true} {
				if got := l.gatewaysUsed(v6); !slices.Equal(got, names) {
					return fmt.Errorf("IPv6 %v: through %v, want %v", v6, got, names)
				}
			}
			return nil
		}
	}
	// dropped checks that no routed pod's packet reached the outside.
	dropped := func(l routeLook) error {
		if len(l.via) > 0 {
			return fmt.Errorf("routed pods still reach the outside: %v", l.via)
		}
		return nil
	}

	// expectStatus waits until the policy's status says status with the
	// summary and then exactly the notes given (each message's text after
	// "note: "), whatever nodes name them.
	expectStatus := func(status string, notes ...string) {
		t.Helper()
		summary := fmt.Sprintf("Applied on %d/%d nodes", len(c.Nodes), len(c.Nodes))
		wait.Until(t, convergeTimeout, func() error {
			got, err := routes.Get(ctx, route.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var gotNotes []string
			for _, m := range got.Status.Messages[min(1, len(got.Status.Messages)):] {
				if _, note, ok := strings.Cut(m, " note: "); ok {
					gotNotes = append(gotNotes, note)
				}
			}
			slices.Sort(gotNotes)
			slices.Sort(notes)
			if got.Status.Status != status || len(got.Status.Messages) == 0 || got.Status.Messages[0] != summary || !slices.Equal(gotNotes, notes) {
				return fmt.Errorf("status %q messages %q, want %q, %q and notes %q", got.Status.Status, got.Status.Messages, status, summary, notes)
			}
			return nil
		})
	}
	bfdDown := func(g *Gateway) []string {
		return []string{"next hop " + g.IP.String() + ": BFD session down", "next hop " + g.IP6.String() + ": BFD session down"}
	}

	expect("static hops, both gateways up", func(l routeLook) error {
		if err := through("gw1", "gw2")(l); err != nil {
			return err
		}
		if l.plainDirect == 0 || l.plainViaGateway > 0 {
			return fmt.Errorf("the plain pod's packets: %d direct, %d through a gateway; want some and none", l.plainDirect, l.plainViaGateway)
		}
		return nil
	})
	expectStatus(esv1.ExternalRouteApplied)

	c.Run(t, "BFD shut down in FRR", func(t *testing.T) {
		gateways[0].SetBFD(false)
		expect("gw1's BFD shut down", through("gw2"))
		expectStatus(esv1.ExternalRouteApplied, bfdDown(gateways[0])...)
		gateways[0].SetBFD(true)
		gateways[0].PeersUp()
		expect("gw1's BFD back", through("gw1", "gw2"))
		expectStatus(esv1.ExternalRouteApplied)
		c.expectEvent("default", "AdminPolicyBasedExternalRoute", route.Name, string(corev1.EventTypeWarning), "NextHopsDegraded")
		c.expectEvent("default", "AdminPolicyBasedExternalRoute", route.Name, string(corev1.EventTypeNormal), "NextHopsRecovered")
	})

	c.Run(t, "a gateway killed", func(t *testing.T) {
		gateways[0].Kill()
		expect("gw1 killed", through("gw2"))
		expectStatus(esv1.ExternalRouteApplied, bfdDown(gateways[0])...)
	})

	c.Run(t, "dynamic hop", func(t *testing.T) {
		const gate = "egressflow.io/gateway-ready"
		gw2 := gateways[1]
		status := fmt.Sprintf(`[{"name":"%s/ext","interface":"net1","ips":[%q,%q]}]`, gatewayNS, gw2.IP, gw2.IP6)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: gatewayNS, Name: "router", Labels: map[string]string{"app": "router"},
				Annotations: map[string]string{dataplane.NetworkStatusAnnotation: status}},
			Spec: corev1.PodSpec{
				NodeName: c.Nodes[1].Name, TerminationGracePeriodSeconds: new(int64),
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
				Containers:     []corev1.Container{{Name: "router", Image: TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"pause"}}},
			},
		}
		c.runPod(pod, 2, nil)
		setGate := func(ready bool) {
			t.Helper()
			c.setPodCondition(gatewayNS, pod.Name, gate, ready)
		}
		setGate(true)
		updated, err := routes.Get(ctx, route.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		updated.Spec.NextHops = esv1.ExternalNextHops{DynamicHops: []esv1.DynamicHop{{
			PodSelector:           esv1.LabelSelector{MatchLabels: map[string]string{"app": "router"}},
			NamespaceSelector:     esv1.LabelSelector{MatchLabels: map[string]string{"role": "gateways"}},
			NetworkAttachmentName: "ext",
		}}}
		if _, err := routes.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		expect("the gateway pod Ready", through("gw2"))
		expectStatus(esv1.ExternalRouteApplied)
		setGate(false)
		expect("the gateway pod not Ready", dropped)
		setGate(true)
		expect("the gateway pod Ready again", through("gw2"))
		if err := c.Kube.CoreV1().Pods(gatewayNS).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		expect("the gateway pod deleted", dropped)
	})

	if len(leaks) > 0 {
		t.Errorf("%d routed pods' packets reached the outside through no gateway, e.g. %q", len(leaks), leaks[:min(5, len(leaks))])
	}
}
