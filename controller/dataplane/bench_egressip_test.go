package dataplane

import (
	"fmt"
	"net/netip"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// benchEgressIPCluster is make bench-egressip's agent workload without an
// API server: 100 EgressIPs, an IPv4 and an IPv6 address each, all held
// by n1, each selecting the pods of its own namespace, 10,000 dual-stack
// pods in all on 9 other nodes.
func benchEgressIPCluster() ([]*esv1.EgressIP, []*corev1.Namespace, []*corev1.Pod, map[string]*coordinationv1.Lease) {
	const objects, pods = 100, 10000
	var eips []*esv1.EgressIP
	var namespaces []*corev1.Namespace
	var list []*corev1.Pod
	leases := map[string]*coordinationv1.Lease{}
	for n := 1; n <= 10; n++ {
		leases[fmt.Sprintf("n%d", n)] = agentLease(fmt.Sprintf("02:00:00:00:00:%02x", n))
	}
	for i := range objects {
		ns := fmt.Sprintf("eip-%03d", i)
		namespaces = append(namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"eip": ns}}})
		v4, v6 := fmt.Sprintf("198.51.100.%d", i), fmt.Sprintf("2001:db8:e1::%x", i)
		eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: ns},
			Spec:   esv1.EgressIPSpec{EgressIPs: []string{v4, v6}},
			Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: v4, Node: "n1"}, {EgressIP: v6, Node: "n1"}}}}
		eip.Spec.NamespaceSelector.MatchLabels = map[string]string{"eip": ns}
		eips = append(eips, eip)
	}
	for k := range pods {
		v := uint32(k) + 2
		p := pod(fmt.Sprintf("eip-%03d", k%objects), fmt.Sprintf("n%d", 2+k%9), nil,
			netip.AddrFrom4([4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)}).String(), fmt.Sprintf("fd00:10:244::%x", v))
		p.Name = fmt.Sprintf("pod-%05d", k)
		list = append(list, p)
	}
	return eips, namespaces, list, leases
}

// BenchmarkEgressIPFirstSync is the pure part of a holder agent's first
// sync at make bench-egressip's scale: the planner fed every input, and
// the Ledger's diff of every part against an empty bridge.
func BenchmarkEgressIPFirstSync(b *testing.B) {
	eips, namespaces, pods, leases := benchEgressIPCluster()
	cfg := NodeConfig{Name: "n1", ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00:10:244::/48")},
		ServiceCIDRs: n1Config.ServiceCIDRs}
	var sent int
	out := countingOutput(&sent)
	b.ReportAllocs()
	for b.Loop() {
		p := NewPlanner(cfg, tables)
		changed := p.SetLeases(leases)
		p.SetEgressIPs(eips)
		p.SetNamespaces(namespaces)
		changed = append(changed, p.SetLocalPods(pods)...)
		p.SetClusterPods(pods)
		changed = append(changed, p.TakeEgressIPChanges()...)
		l := NewLedger()
		l.Changed(p, changed)
		sent = 0
		if _, err := l.Diff(p, Ports{Uplink: 1}, NewInstalled(nil), out); err != nil {
			b.Fatal(err)
		}
		if sent < 2*len(pods) {
			b.Fatalf("%d flows sent, want at least %d (an SNAT flow per pod address)", sent, 2*len(pods))
		}
	}
}
