package agent

import (
	"net/netip"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

func TestStaleTranslations(t *testing.T) {
	a := netip.MustParseAddr
	host := func(lb string, eps ...string) dataplane.Service {
		s := dataplane.Service{Key: "ns/" + lb, Role: dataplane.RoleHost, LoadBalancerIPs: []netip.Addr{a(lb)}}
		for _, ep := range eps {
			s.Endpoints = append(s.Endpoints, a(ep))
		}
		return s
	}
	before := dataplane.State{Services: []dataplane.Service{
		host("192.0.2.1", "10.0.0.1", "10.0.0.2", "10.0.0.3"),
		host("192.0.2.2", "10.0.0.9"),
		{Key: "ns/steered", Role: dataplane.RoleSteer, Endpoints: []netip.Addr{a("10.0.0.7")}},
	}}
	after := dataplane.State{Services: []dataplane.Service{
		host("192.0.2.1", "10.0.0.1"), // 10.0.0.2 gone, 10.0.0.3 moves below
		host("192.0.2.5", "10.0.0.3"), // new LB IP for it
		host("192.0.2.2", "10.0.0.9"), // unchanged
	}}
	want := []netip.Addr{a("10.0.0.2"), a("10.0.0.3")}
	if got := StaleTranslations(before, after); !slices.Equal(got, want) {
		t.Fatalf("StaleTranslations = %v, want %v (steered endpoints have no translation here)", got, want)
	}
	if got := StaleTranslations(after, after); len(got) != 0 {
		t.Fatalf("no change, yet %v", got)
	}
}

func TestRelevantUpdates(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{heartbeat.AnnotationBridgeMAC: "02:00:00:00:00:01"}}}
	renewed := lease.DeepCopy()
	now := metav1.NowMicro()
	renewed.Spec.RenewTime = &now
	if leaseFactsChanged(lease, renewed) {
		t.Error("a renewal alone must not trigger a sync")
	}
	moved := lease.DeepCopy()
	moved.Annotations[heartbeat.AnnotationBridgeMAC] = "02:00:00:00:00:02"
	if !leaseFactsChanged(lease, moved) {
		t.Error("a new bridge MAC must trigger a sync")
	}

	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.11"}}}}
	heartbeatOnly := node.DeepCopy()
	heartbeatOnly.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if nodeAddressesChanged(node, heartbeatOnly) {
		t.Error("a kubelet status heartbeat must not trigger a sync")
	}
	readdressed := node.DeepCopy()
	readdressed.Status.Addresses[0].Address = "172.18.0.99"
	if !nodeAddressesChanged(node, readdressed) {
		t.Error("a changed node address must trigger a sync")
	}
}
