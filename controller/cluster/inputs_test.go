package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// TestInputLabels: the leader puts the agents' label on the Service of
// every EgressService, on the Endpoints object whose slices the
// EndpointSlice mirroring controller made, and on the slices of any other
// manager, never on the slices the EndpointSlice controller manages (it
// copies the Service's labels); it takes the label off when the
// EgressService goes, and off a Service labelled by hand that has none.
// The admission policy lets its ServiceAccount change that label and
// nothing else of those objects.
func TestInputLabels(t *testing.T) {
	f := newFixture(t, "node-a")
	ctx := context.Background()
	kube := f.Kube
	// The objects first, so that the controller sees each slice's manager
	// from the start.

	// web: the test's own slices (no manager).
	f.service("web", esv1.EgressServiceSpec{}, "node-a")
	// managed: a slice of the EndpointSlice controller.
	f.service("managed", esv1.EgressServiceSpec{}, "node-a")
	setManager(t, kube, f.ns, "managed", endpoints.ManagerEndpointSlice)
	// mirrored: slices mirrored from an Endpoints object.
	f.service("mirrored", esv1.EgressServiceSpec{}, "node-a")
	setManager(t, kube, f.ns, "mirrored", endpoints.ManagerEndpointSliceMirroring)
	if _, err := kube.CoreV1().Endpoints(f.ns).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "mirrored"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// stale: a Service labelled by hand, with no EgressService.
	f.CreateService(t, clustertestService(f.ns, "stale", map[string]string{endpoints.EgressServiceLabel: endpoints.EgressServiceLabelValue}))
	f.run("replica-a")
	for _, name := range []string{"web", "managed", "mirrored"} {
		f.waitStatus(name, "node-a", reasons.Assigned)
	}

	want := map[string]bool{
		"services/web": true, "endpointslices/web": true,
		"services/managed": true, "endpointslices/managed": false,
		"services/mirrored": true, "endpoints/mirrored": true, "endpointslices/mirrored": false,
		"services/stale": false,
	}
	waitInputLabels(t, kube, f.ns, want)

	// The policy: the controller's identity may change the label alone.
	asController := kubernetes.NewForConfigOrDie(f.Cluster.Config(kubetest.Controller))
	for _, c := range []struct {
		what, patch, refusal string
	}{
		{"another label", `{"metadata":{"labels":{"team":"x"}}}`, "may change only the label " + endpoints.EgressServiceLabel},
		{"an annotation", `{"metadata":{"annotations":{"team":"x"}}}`, "may change nothing of services web but its label"},
		{"the spec", `{"spec":{"externalTrafficPolicy":"Local"}}`, "may change nothing of services web but its label"},
	} {
		_, err := asController.CoreV1().Services(f.ns).Patch(ctx, "web", types.MergePatchType, []byte(c.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), c.refusal) {
			t.Errorf("the controller changing %s of a Service: %v; want a refusal saying %q", c.what, err, c.refusal)
		}
	}
	_, err := asController.DiscoveryV1().EndpointSlices(f.ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"endpoints":[]}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "may change nothing of endpointslices web but its label") {
		t.Errorf("the controller emptying an EndpointSlice: %v; want a refusal", err)
	}

	// The EgressServices go: so does every label the controller put.
	for _, name := range []string{"web", "managed", "mirrored"} {
		if err := f.ES.K8sV1().EgressServices(f.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for k := range want {
		want[k] = false
	}
	waitInputLabels(t, kube, f.ns, want)
}

func clustertestService(ns, name string, labels map[string]string) clustertest.Service {
	return clustertest.Service{Namespace: ns, Name: name, IngressIPs: []string{"192.0.2.20"}, Labels: labels}
}

// setManager marks the Service's slices as made by manager.
func setManager(t *testing.T, kube kubernetes.Interface, ns, name, manager string) {
	t.Helper()
	slices, err := kube.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, discoveryv1.LabelManagedBy, manager)
	for _, s := range slices.Items {
		if _, err := kube.DiscoveryV1().EndpointSlices(ns).Patch(context.Background(), s.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitInputLabels waits until each "resource/name" carries the agents'
// label or not, as want says.
func waitInputLabels(t *testing.T, kube kubernetes.Interface, ns string, want map[string]bool) {
	t.Helper()
	ctx := context.Background()
	wait.Until(t, settle, func() error {
		for object, labelled := range want {
			resource, name, _ := strings.Cut(object, "/")
			var labels map[string]string
			var err error
			switch resource {
			case "services":
				var o *corev1.Service
				if o, err = kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					labels = o.Labels
				}
			case "endpoints":
				var o *corev1.Endpoints
				if o, err = kube.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					labels = o.Labels
				}
			case "endpointslices":
				var o *discoveryv1.EndpointSlice
				if o, err = kube.DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					labels = o.Labels
				}
			}
			if err != nil {
				return err
			}
			if got := labels[endpoints.EgressServiceLabel] == endpoints.EgressServiceLabelValue; got != labelled {
				return fmt.Errorf("%s labelled %s: %v, want %v (labels %v)", object, endpoints.EgressServiceLabel, got, labelled, labels)
			}
		}
		return nil
	})
}
