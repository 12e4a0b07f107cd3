//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// TestEgressIPUnheldNodeIP: egressflow installed through an overlay that
// sets EGRESSIP_UNHELD=node-ip, on the real cluster in Docker, and an
// EgressIP with an IPv4 and an IPv6 address selecting a probe pod on each
// node. With no egress node, no address can be held: the pods reach the
// external host anyway, with the source their nodes give any pod (on this
// layout, routed without masquerade: their own pod IPs), and the Assigned
// condition says so for both families. One node labelled egress-assignable
// holds one address (never two of one EgressIP): that family leaves with
// it, the other still through the nodes. The second node labelled: every
// family leaves with its egress IP. A holder's label removed: its family
// goes back to the pods' own addresses, not dropped (the default's
// behaviour, which TestEgressIP checks). Then, on the same cluster, an
// EgressFirewall's and an EgressQoS's status in the reference's words
// (status.status, kubectl get's columns) with egressflow's beside them.
func TestEgressIPUnheldNodeIP(t *testing.T) {
	c := Start(t, Config{Nodes: 2})
	c.InstallWithValues(map[string]string{"EGRESSIP_UNHELD": "node-ip"})
	ctx := context.Background()
	server := c.External.Serve(t)
	targets := []string{server.Addr.String(), server.Addr6.String()}
	eip4, eip6 := c.egressIPs()[0], c.egressIPs()[1]

	selected := c.createEgressIPNamespace(t, "billing", targets)
	c.createEgressIP(t)
	eips := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressIPs()
	// assigned waits until status.items hold the addresses of holding
	// (address → node) and no other, with the Assigned condition saying
	// that the families in leaving leave through the pods' nodes.
	assigned := func(holding map[netip.Addr]string, leaving ...string) {
		t.Helper()
		wait.Until(t, convergeTimeout, func() error {
			eip, err := eips.Get(ctx, "billing", metav1.GetOptions{})
			if err != nil {
				return err
			}
			got := map[netip.Addr]string{}
			for _, it := range eip.Status.Items {
				got[netip.MustParseAddr(it.EgressIP)] = it.Node
			}
			if fmt.Sprint(got) != fmt.Sprint(holding) {
				return fmt.Errorf("status.items %v, want %v", eip.Status.Items, holding)
			}
			cond := meta.FindStatusCondition(eip.Status.Conditions, "Assigned")
			if cond == nil {
				return fmt.Errorf("no Assigned condition")
			}
			for _, family := range []string{"IPv4", "IPv6"} {
				says := strings.Contains(cond.Message, "the selected pods' "+family+" egress leaves through their own nodes")
				if want := strings.Contains(strings.Join(leaving, " "), family); says != want {
					return fmt.Errorf("condition Assigned %q: says %s leaves through the nodes: %v, want %v", cond.Message, family, says, want)
				}
			}
			t.Logf("condition Assigned %s %s: %s", cond.Status, cond.Reason, cond.Message)
			return nil
		})
	}
	// sources are what the external host must see from p: the egress IP
	// of each family held, else p's own address of that family.
	sources := func(holding map[netip.Addr]string, p []string) []string {
		out := []string{p[0], p[1]}
		for i, eip := range []netip.Addr{eip4, eip6} {
			if _, ok := holding[eip]; ok {
				out[i] = eip.String()
			}
		}
		return out
	}
	expect := func(holding map[netip.Addr]string) {
		t.Helper()
		for _, p := range selected {
			c.ExpectSources(p, targets, sources(holding, podIPs(p)))
		}
	}

	// No egress node: nothing held, every pod reaches the external host.
	assigned(map[netip.Addr]string{}, "IPv4", "IPv6")
	expect(nil)
	t.Log("no address held: the selected pods reach the external host with their pod IPs")

	// One egress node: it holds one of the two addresses.
	first, second := c.Nodes[0], c.Nodes[1]
	c.labelEgressNode(t, first, true)
	var holding map[netip.Addr]string
	wait.Until(t, convergeTimeout, func() error {
		eip, err := eips.Get(ctx, "billing", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(eip.Status.Items) != 1 || eip.Status.Items[0].Node != first.Name {
			return fmt.Errorf("status.items %v, want one address on %s", eip.Status.Items, first.Name)
		}
		holding = map[netip.Addr]string{netip.MustParseAddr(eip.Status.Items[0].EgressIP): first.Name}
		return nil
	})
	unheldFamily := "IPv6"
	if _, ok := holding[eip6]; ok {
		unheldFamily = "IPv4"
	}
	assigned(holding, unheldFamily)
	expect(holding)
	t.Logf("%v held: that family leaves with it, %s with the pod IPs", holding, unheldFamily)

	// Both nodes: both addresses held, every family with its egress IP.
	c.labelEgressNode(t, second, true)
	both := map[netip.Addr]string{}
	for a := range holding {
		both[a] = first.Name
	}
	for _, a := range []netip.Addr{eip4, eip6} {
		if _, ok := both[a]; !ok {
			both[a] = second.Name
		}
	}
	assigned(both)
	expect(both)

	// The second node's label removed: its address has no node again, and
	// its family leaves through the pods' nodes, not dropped.
	c.labelEgressNode(t, second, false)
	assigned(holding, unheldFamily)
	expect(holding)
	t.Logf("%s unheld again: it leaves with the pod IPs", unheldFamily)

	// On the same cluster, the status the reference's clients read: an
	// EgressFirewall and an EgressQoS in the namespace, status.status in
	// the reference's words, egressflow's beside it. The firewall allows
	// everything, the QoS marks with DSCP 0: the pods' sources stay.
	es := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1()
	allowAll := []esv1.EgressFirewallRule{
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}},
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{CIDRSelector: "::/0"}},
	}
	if _, err := es.EgressFirewalls("billing").Create(ctx, &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: esv1.EgressFirewallSpec{Egress: allowAll}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := es.EgressQoSes("billing").Create(ctx, &esv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 0}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := fmt.Sprintf("on %d/%d nodes", len(c.Nodes), len(c.Nodes))
	wait.Until(t, convergeTimeout, func() error {
		fw, err := es.EgressFirewalls("billing").Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if fw.Status.Status != "EgressFirewall Rules applied" || len(fw.Status.Messages) != 1 || fw.Status.Messages[0] != "Applied "+nodes {
			return fmt.Errorf("EgressFirewall status %q messages %q, want %q and %q", fw.Status.Status, fw.Status.Messages, "EgressFirewall Rules applied", "Applied "+nodes)
		}
		q, err := es.EgressQoSes("billing").Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := meta.FindStatusCondition(q.Status.Conditions, "Ready")
		if q.Status.Status != "EgressQoS Rules applied" || ready == nil || ready.Message != "generation 1 applied "+nodes {
			return fmt.Errorf("EgressQoS status %q Ready %+v, want %q and %q", q.Status.Status, ready, "EgressQoS Rules applied", "generation 1 applied "+nodes)
		}
		return nil
	})
	out := c.Kubectl("get", "egressfirewall,egressqos", "-n", "billing")
	for _, want := range []string{"EgressFirewall Rules applied", "Applied " + nodes, "EgressQoS Rules applied", "generation 1 applied " + nodes} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get does not show %q:\n%s", want, out)
		}
	}
	t.Logf("kubectl get egressfirewall,egressqos:\n%s", out)
	expect(holding)
}
