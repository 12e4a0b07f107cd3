package dataplane

import (
	"net/netip"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// What a selected dual-stack pod of n1 does under each EGRESSIP_UNHELD
// choice, when its EgressIP holds an address of one family (IPv6, on n2)
// and none of the other (IPv4): the held family always leaves with its
// egress IP (steered to n2); the unheld one is dropped (never admitted) by
// default, and admitted as the node's other pods are under node-ip. The
// option covers only "no address of the family is held": a held address
// whose holder's MAC is unknown, or that this node holds while fenced,
// still drops the pod's egress.
func TestEgressIPUnheld(t *testing.T) {
	const pod4, pod6 = "10.244.1.5", "fd00:10:244:1::5"
	const holderMAC = "02:00:00:00:00:02"
	cluster := func(holder string, leases map[string]*coordinationv1.Lease) Cluster {
		eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "billing"},
			Spec: esv1.EgressIPSpec{EgressIPs: []string{"172.18.0.100", "2001:db8::100"},
				NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}}},
			Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: "2001:db8::100", Node: holder}}}}
		return Cluster{
			Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "billing"}}}},
			Pods:       []*corev1.Pod{pod("shop", "n1", nil, pod4, pod6)},
			EgressIPs:  []*esv1.EgressIP{eip},
			Leases:     leases,
		}
	}
	withMAC := map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease(holderMAC)}
	withoutMAC := map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease("")}
	noLB := func(netip.Addr) (string, bool) { return "", false }

	for _, tc := range []struct {
		name     string
		unheld   EgressIPUnheld
		fenced   bool
		holder   string
		leases   map[string]*coordinationv1.Lease
		admitted []netip.Addr // by the pod guard, as any pod of the node
		steered  []netip.Addr // to the holder, with its egress IP
		problem  reasons.Reason
	}{
		{name: "default: the unheld family is dropped", unheld: "", holder: "n2", leases: withMAC,
			steered: addrs(pod6)},
		{name: "drop, written out", unheld: EgressIPUnheldDrop, holder: "n2", leases: withMAC,
			steered: addrs(pod6)},
		{name: "node-ip: the unheld family leaves through the node", unheld: EgressIPUnheldNodeIP, holder: "n2", leases: withMAC,
			admitted: addrs(pod4), steered: addrs(pod6)},
		{name: "node-ip, the holder's MAC unknown: still dropped", unheld: EgressIPUnheldNodeIP, holder: "n2", leases: withoutMAC,
			admitted: addrs(pod4), problem: reasons.HostUnknown},
		{name: "node-ip, this node holds the address while fenced: still dropped", unheld: EgressIPUnheldNodeIP, fenced: true, holder: "n1", leases: withMAC,
			admitted: addrs(pod4)},
		{name: "node-ip, nothing held: both families leave through the node", unheld: EgressIPUnheldNodeIP, holder: "", leases: withMAC,
			admitted: addrs(pod4, pod6)},
		{name: "drop, nothing held: nothing leaves", unheld: EgressIPUnheldDrop, holder: "", leases: withMAC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := n1Config
			node.EgressIPUnheld, node.Fenced = tc.unheld, tc.fenced
			c := cluster(tc.holder, tc.leases)
			if got := AdmittedPods(node, c); !slices.Equal(got, tc.admitted) {
				t.Errorf("admitted %v, want %v", got, tc.admitted)
			}
			eips := ComputeEgressIP(node, c, noLB)
			var steered []netip.Addr
			for _, part := range eips.Parts {
				for _, p := range part.Pods {
					if p.HolderMAC.String() != holderMAC || p.Via != netip.MustParseAddr("2001:db8::100") {
						t.Errorf("pod %s leaves via %s steered to %s, want 2001:db8::100 through %s", p.Pod, p.Via, p.HolderMAC, holderMAC)
					}
					steered = append(steered, p.Pod)
				}
			}
			if !slices.Equal(steered, tc.steered) {
				t.Errorf("steered %v, want %v", steered, tc.steered)
			}
			// Every address of the pod is either admitted or selected
			// (left with an egress IP, or dropped): never both, never neither.
			for _, a := range addrs(pod4, pod6) {
				if slices.Contains(tc.admitted, a) == slices.Contains(eips.Selected, a) {
					t.Errorf("%s: admitted %v, selected %v", a, tc.admitted, eips.Selected)
				}
			}
			var problems []reasons.Reason
			for _, p := range eips.Problems {
				problems = append(problems, p.Reason)
			}
			if want := []reasons.Reason{tc.problem}; tc.problem == "" && len(problems) > 0 || tc.problem != "" && !slices.Equal(problems, want) {
				t.Errorf("problems %v, want %v", eips.Problems, tc.problem)
			}
			// The Planner, kept from its indexes, agrees.
			p := NewPlanner(node, tables)
			p.SetLeases(tc.leases)
			p.SetNamespaces(c.Namespaces)
			p.SetLocalPods(c.Pods)
			p.SetClusterPods(c.Pods)
			p.SetEgressIPs(c.EgressIPs)
			if got, want := normalize(p.State()), normalize(Compute(node, c, tables)); got != want {
				t.Errorf("planner and Compute differ:\n%s\n%s", got, want)
			}
		})
	}
}
