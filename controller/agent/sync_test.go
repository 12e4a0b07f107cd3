package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/nodeview"
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

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.11"}}}}
	view, _ := nodeview.Desired("egressflow-system", node)
	view.ResourceVersion = "5"
	rewritten := view.DeepCopy()
	rewritten.ResourceVersion = "6"
	rewritten.Annotations = map[string]string{"note": "an operator's"}
	if viewDataChanged(view, rewritten) {
		t.Error("a node view written with the same data must not trigger a sync")
	}
	node.Labels = map[string]string{"role": "infra"}
	relabelled, _ := nodeview.Desired("egressflow-system", node)
	if !viewDataChanged(view, relabelled) {
		t.Error("a changed node label must trigger a sync (EgressFirewall's nodeSelector rules)")
	}
}

// TestSlimKeepsWhatTheAgentReads: the informer transform drops bulk but
// keeps every field the planner and the Event recorder read, and applying
// it twice changes nothing (client-go may).
func TestSlimKeepsWhatTheAgentReads(t *testing.T) {
	node, other := "n1", "n2"
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels:        map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations:   map[string]string{"big": strings.Repeat("x", 1000)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-abc"}},
			{Addresses: []string{"10.244.2.5"}, NodeName: &other},
			{Addresses: []string{"10.244.1.6"}, NodeName: &node},
			{Addresses: []string{"172.18.0.5"}}, // no node
		},
		Ports: []discoveryv1.EndpointPort{{Port: ptr(int32(80))}},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "3"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "web"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10", Hostname: "lb.example"}}}},
	}
	wantSlice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7", Labels: slice.Labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		// One endpoint per node, listing its addresses.
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5", "10.244.1.6"}, NodeName: &node},
			{Addresses: []string{"10.244.2.5"}, NodeName: &other},
			{Addresses: []string{"172.18.0.5"}},
		},
	}
	wantSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "3"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: svc.Spec.Selector,
			IPFamilies: svc.Spec.IPFamilies},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}}},
	}
	// A gateway pod of an external route, being deleted: its readiness,
	// host network, deletion and network-status annotation are kept.
	deleting := metav1.Now()
	networkStatus := `[{"name":"shop/ext","ips":["192.168.9.1"]}]`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "shop", UID: "u3", ResourceVersion: "11", DeletionTimestamp: &deleting,
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{"big": strings.Repeat("x", 1000), dataplane.NetworkStatusAnnotation: networkStatus},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5",
			PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "ready", LastTransitionTime: deleting}}},
	}
	wantPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "shop", UID: "u3", ResourceVersion: "11", Labels: pod.Labels,
			DeletionTimestamp: &deleting, Annotations: map[string]string{dataplane.NetworkStatusAnnotation: networkStatus}},
		Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: pod.Status.PodIPs,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	es := &esv1.EgressService{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u2", ResourceVersion: "9",
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)},
			Labels:      map[string]string{"team": "shop"}},
		Spec:   esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "100", NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}},
		Status: esv1.EgressServiceStatus{Host: esv1.HostAll},
	}
	wantES := &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u2", ResourceVersion: "9"}, Spec: es.Spec, Status: es.Status}
	view, _ := nodeview.Desired("egressflow-system", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u4"}})
	view.UID, view.ResourceVersion = "u5", "12"
	view.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "egressflow-controller"}}
	wantView := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "n1.view", Namespace: "egressflow-system", UID: "u5", ResourceVersion: "12"},
		Data: view.Data}
	// What the dataplane reads of it is the same.
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	slimmed, _ := slim(slice)
	if got, want := endpoints.OnClusterNetwork([]*discoveryv1.EndpointSlice{slimmed.(*discoveryv1.EndpointSlice)}, cidrs),
		endpoints.OnClusterNetwork([]*discoveryv1.EndpointSlice{slice}, cidrs); !slices.Equal(got, want) {
		t.Errorf("endpoints of the slimmed slice %v, of the slice %v", got, want)
	}
	for _, c := range []struct{ in, want any }{{slice, wantSlice}, {svc, wantSvc}, {es, wantES}, {pod, wantPod}, {view, wantView}} {
		once, _ := slim(c.in)
		twice, _ := slim(once)
		if !equality.Semantic.DeepEqual(once, c.want) || !equality.Semantic.DeepEqual(twice, c.want) {
			t.Errorf("slim(%T) = %+v, want %+v", c.in, once, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
