package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/hostfirewall"
	"github.com/egressflow/egressflow/test/topology"
)

// expectOwnNode waits until pod's packets over network to dst, a server in
// its own node's namespace, are answered (ok) or get no answer (!ok).
func (e *env) expectOwnNode(pod *topology.Pod, network string, dst netip.AddrPort, ok bool) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("%s from %s to its node's %s answered: %v", network, pod.Name, dst, ok), func() error {
		src, err := pod.Dial(network, dst)
		switch {
		case ok && err != nil:
			return err
		case !ok && err == nil:
			return fmt.Errorf("answered, seen as %s", src)
		}
		return nil
	})
}

// TestAgentFirewallOwnNode judges, with the node's nftables table, the
// packets a pod sends to its own node's addresses, which the node's kernel
// takes without their crossing br-ex. app (namespace shop) and open
// (namespace open, no EgressFirewall) run on n1, which serves TCP and UDP
// on its addresses and is labelled role=self; shop/default says
//
//	0: Allow TCP to nodes labelled role=self, on the server's port
//	1: Deny nodes labelled role=self
//
// It checks app's UDP to n1 denied and its TCP allowed, in both families;
// open unaffected; a connection n1 opens to app answered (the firewall
// judges what pods open); the denied packets counted in the table; the
// object deleted, which allows everything again; and the table removed
// (Uninstall's part).
func TestAgentFirewallOwnNode(t *testing.T) {
	e := newEnv(t, 1)
	n1 := e.topo.Nodes[0]
	app := e.addPod(n1, "app")
	ctx := context.Background()
	if _, err := e.admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	open := n1.AddPod(t, "open")
	e.admin.CreatePod(t, "open", open, nil)
	nodeHost := &topology.Host{Name: n1.Name, Netns: n1.Netns, IP: n1.IP, IP6: n1.IP6}
	server := nodeHost.Serve(t)
	e.labelNode(n1, map[string]string{"role": "self"})
	e.startAgent(n1).waitHealthy(t)

	// Before: everything reaches the node.
	e.expectOwnNode(app, "udp", server.Addr, true)
	e.expectOwnNode(app, "udp", server.Addr6, true)

	self := esv1.LabelSelector{MatchLabels: map[string]string{"role": "self"}}
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{NodeSelector: &self},
				Ports: []esv1.EgressFirewallPort{{Protocol: "TCP", Port: int32(server.Addr.Port())}}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{NodeSelector: &self}},
		}},
	}
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(ctx, fw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectOwnNode(app, "udp", server.Addr, false)  // rule 1
	e.expectOwnNode(app, "udp", server.Addr6, false) // in IPv6 too
	e.expectOwnNode(app, "tcp", server.Addr, true)   // rule 0 first
	e.expectOwnNode(app, "tcp", server.Addr6, true)
	e.expectOwnNode(open, "udp", server.Addr, true) // open has no firewall
	e.expectOwnNode(open, "udp", server.Addr6, true)
	// A connection the node opens to app is answered, though rule 1
	// denies app's packets to the node.
	expectServes(t, app, nodeHost)

	listing := n1.Exec(t, "nft", "list", "table", string(hostfirewall.Family), hostfirewall.TableName)
	if !strings.Contains(listing, `comment "EgressFirewall/shop/default"`) || strings.Contains(listing, "counter packets 0 ") {
		t.Errorf("the table names no chain for shop, or its Deny counted no packet:\n%s", listing)
	}

	// The object deleted: everything reaches the node again.
	if err := e.admin.ES.K8sV1().EgressFirewalls("shop").Delete(ctx, esv1.EgressFirewallName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectOwnNode(app, "udp", server.Addr, true)
	e.expectOwnNode(app, "udp", server.Addr6, true)

	// Uninstall's part: the table removed, and removing it again is no
	// error (an agent that died halfway through may run it twice).
	e.agents[n1.Name].stop()
	nft := n1.NFTables(t, hostfirewall.Family, hostfirewall.TableName)
	for range 2 {
		if err := hostfirewall.Remove(ctx, nft); err != nil {
			t.Fatal(err)
		}
	}
	if tables := n1.Exec(t, "nft", "list", "tables"); slices.Contains(strings.Split(tables, "\n"), "table "+string(hostfirewall.Family)+" "+hostfirewall.TableName) {
		t.Errorf("after Remove, the node still has egressflow's table:\n%s", tables)
	}
}
