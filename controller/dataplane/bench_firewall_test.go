package dataplane

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// BenchmarkFirewallFirstSync is the pure part of an agent's first sync at
// make bench-firewall's scale of CIDR rules: 100 namespaces, each with an
// EgressFirewall of 1,000 rules (allow and deny, some with ports) and 50
// pods on this node; the planner fed every object, and the Ledger's diff
// of every part against an empty bridge.
func BenchmarkFirewallFirstSync(b *testing.B) {
	const namespaces, rules, podsEach = 100, 1000, 50
	var firewalls []*esv1.EgressFirewall
	var pods []*corev1.Pod
	for i := range namespaces {
		ns := fmt.Sprintf("fw-%03d", i)
		fw := &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: esv1.EgressFirewallName}}
		for k := range rules {
			r := esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleAllow,
				To: esv1.EgressFirewallDestination{CIDRSelector: fmt.Sprintf("203.%d.%d.0/24", k/250, k%250)}}
			if k%3 == 0 {
				r.Type = esv1.EgressFirewallRuleDeny
			}
			if k%5 == 0 {
				r.Ports = []esv1.EgressFirewallPort{{Protocol: "TCP", Port: 443}}
			}
			fw.Spec.Egress = append(fw.Spec.Egress, r)
		}
		firewalls = append(firewalls, fw)
		for j := range podsEach {
			p := pod(ns, "n1", nil, fmt.Sprintf("10.%d.%d.%d", 1+i/200, i%200, j+1))
			p.Name = fmt.Sprintf("p%02d", j)
			pods = append(pods, p)
		}
	}
	cfg := NodeConfig{Name: "n1", ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ServiceCIDRs: n1Config.ServiceCIDRs}
	var sent int
	out := countingOutput(&sent)
	b.ReportAllocs()
	for b.Loop() {
		p := NewPlanner(cfg, tables)
		changed := p.SetLocalPods(pods)
		for _, fw := range firewalls {
			changed = append(changed, p.UpdateFirewall(ObjectKey(APIEgressFirewall, fw.Namespace, fw.Name), fw)...)
		}
		l := NewLedger()
		l.Changed(p, changed)
		sent = 0
		if _, err := l.Diff(p, Ports{Uplink: 1}, NewInstalled(nil), out); err != nil {
			b.Fatal(err)
		}
		if sent < namespaces*rules {
			b.Fatalf("%d flows sent, want at least %d (a flow per rule)", sent, namespaces*rules)
		}
	}
}
