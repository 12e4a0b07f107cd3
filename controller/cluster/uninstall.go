package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/nodeview"
)

// Uninstall. `kubectl delete -k deploy/` deletes egressflow's namespace
// first (kustomize puts Namespaces first) and the controller's
// ServiceAccount and RBAC some tens of milliseconds later, after which the
// controller can write nothing. So every replica watches the namespace
// and, the moment it is being deleted, stops labelling (a leader's node
// syncs then want no service label at all) and removes every
// egress-service label from every node at once, one patch per node, in
// parallel. The node agents remove their flows and rules themselves, on
// their way out, without the API (cmd/egressflow-agent).
//
// `helm uninstall` deletes the workloads but not the namespace (Helm
// never deletes the namespace it installs into). So every replica also
// watches its own Deployment (Options.Deployment, by name in its own
// namespace) and starts the same uninstall the moment it is being deleted
// (a deletion timestamp: foreground deletion) or gone (a delete event:
// background deletion, Helm's). A Deployment that was never seen is no
// sign: a replica run outside one, or given a wrong name, never uninstalls
// on that account. A rollout, a scale or a `helm upgrade` changes the
// Deployment and deletes nothing.

// Helm deletes the Deployment and, some tens of milliseconds later, the
// controller's RBAC, which can be too soon for the replicas' label removal.
// So the chart runs Uninstall first, as a pre-delete hook, while every
// permission is still there: it deletes the Deployment itself (the sign
// the replicas follow) and removes whatever label is left, until none has
// come back for uninstallSettle.

const (
	// uninstallSettle is how long no node may carry an egress-service
	// label before Uninstall is done: longer than a replica's label patch
	// that was in flight when it saw the Deployment's deletion. Longer
	// only slows helm uninstall down.
	uninstallSettle = 2 * time.Second
	// uninstallPoll is how often Uninstall lists the nodes meanwhile.
	uninstallPoll = 250 * time.Millisecond
)

// Uninstall prepares egressflow's removal while its permissions last (the
// Helm chart's pre-delete hook, `egressflow-controller --uninstall`): it
// deletes the controller's Deployment in namespace, so that every replica
// stops labelling, and removes every egress-service label from every node
// and the agents' label (endpoints.EgressServiceLabel) from every Service
// and endpoints object, again whenever one comes back, until none has for
// uninstallSettle; then
// it deletes the node views (nodeview), which Helm's kept namespace would
// otherwise keep. ctx bounds it.
func Uninstall(ctx context.Context, cfg *rest.Config, namespace, deployment string) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	background := metav1.DeletePropagationBackground
	err = kube.AppsV1().Deployments(namespace).Delete(ctx, deployment, metav1.DeleteOptions{PropagationPolicy: &background})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Deployment %s/%s: %w", namespace, deployment, err)
	}
	klog.InfoS("Deleted the controller's Deployment; removing every egress-service label", "namespace", namespace, "deployment", deployment)
	clean := time.Now()
	for {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		for _, n := range nodes.Items {
			remove := map[string]any{}
			for k := range n.Labels {
				if assign.IsLabelKey(k) {
					remove[k] = nil
				}
			}
			if len(remove) == 0 {
				continue
			}
			clean = time.Now()
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": remove}})
			if err != nil {
				return err
			}
			if _, err := kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("remove egress-service labels of node %s: %w", n.Name, err)
			}
			klog.InfoS("Removed egress-service labels", "node", n.Name, "labels", len(remove))
		}
		unmarked, err := unmarkAllInputs(ctx, kube)
		if err != nil {
			return fmt.Errorf("remove the agents' label from Services and their endpoints: %w", err)
		}
		if unmarked > 0 {
			clean = time.Now()
			klog.InfoS("Removed the agents' label", "label", endpoints.EgressServiceLabel, "objects", unmarked)
		}
		if time.Since(clean) >= uninstallSettle {
			// The replicas stopped publishing when they saw the
			// Deployment go; the namespace stays.
			if err := nodeview.Withdraw(ctx, kube, namespace); err != nil {
				return fmt.Errorf("delete the node views: %w", err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("egress-service labels kept coming back: %w", ctx.Err())
		case <-time.After(uninstallPoll):
		}
	}
}

// uninstallPatchTimeout bounds each label removal on uninstall: the
// controller's permissions go within a second, so a slower patch would
// fail anyway.
const uninstallPatchTimeout = 2 * time.Second

// uninstallInformers watches the controller's own namespace.
func uninstallInformers(c *Controller) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(c.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.name=" + c.opts.Namespace
		}))
}

// deploymentInformers watches the controller's own Deployment; nil when
// no Deployment is named.
func deploymentInformers(c *Controller) informers.SharedInformerFactory {
	if c.opts.Deployment == "" {
		return nil
	}
	return informers.NewSharedInformerFactoryWithOptions(c.kube, 0,
		informers.WithNamespace(c.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.name=" + c.opts.Deployment
		}))
}

// onDeployment starts the uninstall once the Deployment is being deleted.
func (c *Controller) onDeployment(obj any) {
	if d, ok := obj.(*appsv1.Deployment); ok && d.DeletionTimestamp == nil {
		return
	}
	c.uninstall("its Deployment " + c.opts.Deployment + " is being deleted")
}

// deploymentHandler is the Deployment watch's event handler.
func (c *Controller) deploymentHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onDeployment,
		UpdateFunc: func(_, n any) { c.onDeployment(n) },
		DeleteFunc: func(any) { c.uninstall("its Deployment " + c.opts.Deployment + " was deleted") },
	}
}

// onNamespace starts the uninstall once the namespace is being deleted.
func (c *Controller) onNamespace(obj any) {
	if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp == nil {
		return
	}
	c.uninstall("its namespace " + c.opts.Namespace + " is being deleted")
}

// uninstall stops labelling and removes every service label, once.
func (c *Controller) uninstall(why string) {
	if c.uninstalling.Swap(true) {
		return
	}
	klog.InfoS("egressflow is being removed: removing every egress-service label from the nodes", "reason", why, "namespace", c.opts.Namespace)
	c.views.Resync() // the leader deletes the node views
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Could not list the nodes to remove their egress-service labels")
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), uninstallPatchTimeout)
		defer cancel()
		if _, err := unmarkAllInputs(ctx, c.kube); err != nil {
			klog.ErrorS(err, "Could not remove the agents' label on uninstall", "label", endpoints.EgressServiceLabel)
		}
	})
	for _, n := range nodes {
		ours := sets.New[string]()
		for k := range n.Labels {
			if assign.IsLabelKey(k) {
				ours.Insert(k)
			}
		}
		if ours.Len() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), uninstallPatchTimeout)
			defer cancel()
			if _, err := c.patchLabels(ctx, n.Name, nil, ours); err != nil {
				klog.ErrorS(err, "Could not remove egress-service labels on uninstall", "node", n.Name)
			}
		}()
	}
	wg.Wait()
}

// namespaceHandler is the uninstall watch's event handler.
func (c *Controller) namespaceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNamespace,
		UpdateFunc: func(_, n any) { c.onNamespace(n) },
		DeleteFunc: func(any) { c.uninstall("its namespace " + c.opts.Namespace + " was deleted") },
	}
}
