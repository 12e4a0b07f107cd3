package nodeview_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressflow/egressflow/controller/nodeview"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

const waitTimeout = 30 * time.Second

// TestPublisher, on a real API server, with the cluster component's
// identity and permissions (deploy/controller/rbac.yaml): each Node gets
// a view of its addresses and labels, owned by it; a status report
// rewrites nothing; a changed address or label is published; a view
// edited or deleted by hand is restored; a deleted Node's view is
// deleted; withdrawn, the views go.
func TestPublisher(t *testing.T) {
	api := kubetest.Start(t)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(api.Config(kubetest.Admin))
	for _, m := range []string{"deploy/controller/namespace.yaml", "deploy/controller/rbac.yaml"} {
		kubetest.Apply(t, api.Config(kubetest.Admin), filepath.Join(root, m))
	}
	var withdrawn atomic.Bool
	kubetest.PublishNodeViews(t, api.Config(kubetest.Controller), withdrawn.Load)
	ctx := context.Background()
	views := admin.CoreV1().ConfigMaps(kubetest.SystemNamespace)

	a := createNode(t, admin, "worker-a", map[string]string{"zone": "a"}, "172.18.0.3")
	// The view of the Node as created, then of its first status (the
	// address): wait for the second.
	view := waitView(t, admin, "worker-a", func(n *corev1.Node) bool { return n.Labels["zone"] == "a" && len(n.Status.Addresses) == 1 })
	if view.OwnerReferences[0].UID != a.UID {
		t.Errorf("worker-a's view is owned by %+v, want the Node", view.OwnerReferences)
	}

	// A status report (the kubelet's conditions), then a new node: the
	// publisher's one worker takes nodes in the order of their events, so once
	// worker-b's view is there, worker-a's report has been handled.
	a, err = admin.CoreV1().Nodes().Get(ctx, "worker-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	createNode(t, admin, "worker-b", nil, "172.18.0.4")
	waitView(t, admin, "worker-b", func(*corev1.Node) bool { return true })
	if now := getView(t, admin, "worker-a"); now.ResourceVersion != view.ResourceVersion {
		t.Errorf("a status report rewrote worker-a's view (resourceVersion %s, then %s)", view.ResourceVersion, now.ResourceVersion)
	}

	// A new address, and a new label.
	a, err = admin.CoreV1().Nodes().Get(ctx, "worker-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Status.Addresses = append(a.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fc00::3"})
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitView(t, admin, "worker-a", func(n *corev1.Node) bool { return len(n.Status.Addresses) == 2 })
	patch := []byte(`{"metadata":{"labels":{"role":"infra"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "worker-a", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitView(t, admin, "worker-a", func(n *corev1.Node) bool { return n.Labels["role"] == "infra" })

	// Edited by hand (data, and the label that selects it), then deleted.
	edited := getView(t, admin, "worker-a")
	edited.Data["addresses"] = "InternalIP 198.51.100.1"
	edited.Data["node"] = "worker-z"
	delete(edited.Labels, nodeview.Label)
	if _, err := views.Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitView(t, admin, "worker-a", func(n *corev1.Node) bool { return n.Status.Addresses[0].Address == "172.18.0.3" })
	if err := views.Delete(ctx, "worker-a.view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitView(t, admin, "worker-a", func(n *corev1.Node) bool { return len(n.Status.Addresses) == 2 })

	// The Node deleted.
	if err := admin.CoreV1().Nodes().Delete(ctx, "worker-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, admin, "worker-b.view")

	// Withdrawn: the publisher deletes what it published, and the
	// uninstall's last step finds nothing left.
	withdrawn.Store(true)
	patch = []byte(`{"metadata":{"labels":{"role":"edge"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "worker-a", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, admin, "worker-a.view")
	if err := nodeview.Withdraw(ctx, admin, kubetest.SystemNamespace); err != nil {
		t.Fatal(err)
	}
}

func createNode(t *testing.T, kube kubernetes.Interface, name string, labels map[string]string, ip string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	if n, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n
}

func getView(t *testing.T, kube kubernetes.Interface, node string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(kubetest.SystemNamespace).Get(context.Background(), node+".view", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// waitView waits until node's view decodes to a node that ok accepts, and
// returns the view.
func waitView(t *testing.T, kube kubernetes.Interface, node string, ok func(*corev1.Node) bool) *corev1.ConfigMap {
	t.Helper()
	var view *corev1.ConfigMap
	wait.Until(t, waitTimeout, func() error {
		cm, err := kube.CoreV1().ConfigMaps(kubetest.SystemNamespace).Get(context.Background(), node+".view", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n, err := nodeview.Decode(cm)
		if err != nil || cm.Labels[nodeview.Label] != nodeview.LabelValue || !ok(n) {
			return fmt.Errorf("%s's view: labels %v, data %v (%v)", node, cm.Labels, cm.Data, err)
		}
		view = cm
		return nil
	})
	return view
}

func waitGone(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	wait.Until(t, waitTimeout, func() error {
		_, err := kube.CoreV1().ConfigMaps(kubetest.SystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s is still there (%v)", name, err)
	})
}
