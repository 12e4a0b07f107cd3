package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
)

// TestAgentFirewallUnresolvedDNS: what an agent publishes on its heartbeat
// about the dnsNames of its pods' EgressFirewalls
// (heartbeat.Facts.FirewallUnresolvedDNS, FirewallUnresolvedDNS) and
// counts in egressflow_agent_firewall_dns_unresolved: an exact name whose
// lookups fail (SERVFAIL) is listed, by namespace, until it is answered;
// an answered name and a wildcard (which fills only from the pods' own
// lookups) are not; a namespace without a pod on the node is not, on the
// node that has none; nothing once the object is gone. Against a real
// DNS server, API server and OVS.
func TestAgentFirewallUnresolvedDNS(t *testing.T) {
	e := newEnv(t, 2)
	dns, err := dnstest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	dns.Set("up.test", dnstest.A(internet[0].String(), 30))
	dns.Set("down.test", dnstest.ServFail())
	e.dnsServers = []netip.AddrPort{dns.Addr()}
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	e.addPod(n1, "app") // shop has a pod on n1 only
	for _, n := range e.topo.Nodes {
		e.startAgent(n).waitHealthy(t)
	}
	ctx := context.Background()
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "up.test"}},
			{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "Down.Test."}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "*.wild.test"}},
		}},
	}
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(ctx, fw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// expect waits until node's agent publishes want and its metric says
	// count for shop (0: no series).
	expect := func(node string, want []string, count float64) {
		t.Helper()
		eventually(t, node+" publishes its unresolved names", func() error {
			a := e.agents[node]
			if got := a.FirewallUnresolvedDNS(); got == nil || !slices.Equal(got, want) {
				return fmt.Errorf("published %#v, want %q", got, want)
			}
			s := samples(t, a.metrics, "egressflow_agent_firewall_dns_unresolved")
			if got := s[`egressflow_agent_firewall_dns_unresolved{namespace="shop"}`]; got != count {
				return fmt.Errorf("egressflow_agent_firewall_dns_unresolved{namespace=\"shop\"} = %v, want %v", got, count)
			}
			return nil
		})
	}
	expect(n1.Name, []string{"shop/down.test"}, 1)
	expect(n2.Name, []string{}, 0) // no pod of shop: it resolves none of its names

	// Answered at last: no longer listed, and the series goes.
	dns.Set("down.test", dnstest.AAAA(internet[1].String(), 30))
	expect(n1.Name, []string{}, 0)

	// A name added that fails is listed, and goes with the object.
	current, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Get(ctx, esv1.EgressFirewallName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dns.Set("new.test", dnstest.ServFail())
	current.Spec.Egress = append(current.Spec.Egress, esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "new.test"}})
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(n1.Name, []string{"shop/new.test"}, 1)
	if err := e.admin.ES.K8sV1().EgressFirewalls("shop").Delete(ctx, esv1.EgressFirewallName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(n1.Name, []string{}, 0)
}
