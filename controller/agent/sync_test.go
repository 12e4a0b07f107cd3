package agent

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/controller/heartbeat"
)

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
