package cluster

import (
	"context"
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
// stops labelling, removes every egress-service label until none has come
// back for uninstallSettle (removeLabelsUntilSettled), then deletes the
// node views (nodeview), which Helm's kept namespace would otherwise keep.
// ctx bounds it.
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
	if err := removeLabelsUntilSettled(ctx, kube); err != nil {
		return err
	}
	// The replicas stopped publishing when they saw the Deployment go; the
	// namespace stays.
	if err := nodeview.Withdraw(ctx, kube, namespace); err != nil {
		return fmt.Errorf("delete the node views: %w", err)
	}
	return nil
}

// removeLabelsUntilSettled removes every egress-service label from every
// node and the agents' label (endpoints.EgressServiceLabel) from every
// Service and endpoints object, read from the API server, again whenever
// one comes back (a replica's label patch that was in flight when it saw
// the sign), until none has for uninstallSettle. ctx bounds it.
func removeLabelsUntilSettled(ctx context.Context, kube kubernetes.Interface) error {
	clean := time.Now()
	for {
		removed, err := removeLabelsOnce(ctx, kube)
		if err != nil {
			return err
		}
		if removed > 0 {
			clean = time.Now()
		}
		if time.Since(clean) >= uninstallSettle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("egress-service labels kept coming back: %w", ctx.Err())
		case <-time.After(uninstallPoll):
		}
	}
}

// removeLabelsOnce lists the nodes and the labelled Services and endpoints
// objects and takes egressflow's labels off each that carries one; it
// returns how many objects it changed.
func removeLabelsOnce(ctx context.Context, kube kubernetes.Interface) (int, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	removed := 0
	for _, n := range nodes.Items {
		ours := serviceLabelsOf(&n)
		if ours.Len() == 0 {
			continue
		}
		if err := removeNodeLabels(ctx, kube, n.Name, ours); err != nil {
			return removed, err
		}
		removed++
		klog.InfoS("Removed egress-service labels", "node", n.Name, "labels", ours.Len())
	}
	unmarked, err := unmarkAllInputs(ctx, kube)
	if err != nil {
		return removed, fmt.Errorf("remove the agents' label from Services and their endpoints: %w", err)
	}
	if unmarked > 0 {
		klog.InfoS("Removed the agents' label", "label", endpoints.EgressServiceLabel, "objects", unmarked)
	}
	return removed + unmarked, nil
}

// serviceLabelsOf are node's egress-service labels.
func serviceLabelsOf(node *corev1.Node) sets.Set[string] {
	ours := sets.New[string]()
	for k := range node.Labels {
		if assign.IsLabelKey(k) {
			ours.Insert(k)
		}
	}
	return ours
}

// removeNodeLabels removes labels from node in one JSON merge patch, which
// touches no other label; a node that is gone has none left.
func removeNodeLabels(ctx context.Context, kube kubernetes.Interface, node string, labels sets.Set[string]) error {
	patch, err := labelsPatch(nil, labels)
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove egress-service labels of node %s: %w", node, err)
	}
	return nil
}

const (
	// uninstallPatchTimeout bounds each label removal of a replica's
	// first, parallel pass on uninstall: its permissions go within a
	// second, so a slower patch would fail anyway.
	uninstallPatchTimeout = 2 * time.Second
	// uninstallCheckTimeout bounds a replica's check, after that pass,
	// that no label is left or has come back (removeLabelsUntilSettled):
	// within the pod's termination grace period (30 s), which the
	// namespace's deletion starts. Longer could only wait on permissions
	// that are gone.
	uninstallCheckTimeout = 20 * time.Second
)

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

// uninstall stops labelling and removes every service label, once: first
// every node's that the informer knows, in parallel (the fastest way,
// while the permissions last), then again from the API server until none
// has come back for uninstallSettle, which also takes off a label that a
// node sync in flight at the sign added after the first pass.
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
		ours := serviceLabelsOf(n)
		if ours.Len() == 0 {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), uninstallPatchTimeout)
			defer cancel()
			if _, err := c.patchLabels(ctx, n.Name, nil, ours); err != nil {
				klog.ErrorS(err, "Could not remove egress-service labels on uninstall", "node", n.Name)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), uninstallCheckTimeout)
	defer cancel()
	switch err := removeLabelsUntilSettled(ctx, c.kube); {
	case err == nil:
		klog.InfoS("No egress-service label is left")
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		klog.ErrorS(err, "egressflow's permissions went before every egress-service label was checked; see docs/troubleshooting.md, \"Cleaning up by hand\"")
	default:
		klog.ErrorS(err, "Could not check that no egress-service label is left")
	}
}

// uninstallIfBeingRemoved asks the API server, on the replica's way out,
// whether egressflow is being removed, and if so removes the labels as
// the watches would have: a namespace being deleted has its pods deleted
// too, which can stop a replica before its watch delivered the sign
// (events not yet handled are dropped when the watches stop). Only a
// namespace or Deployment that the watches saw can be a sign.
func (c *Controller) uninstallIfBeingRemoved() {
	if c.uninstalling.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), uninstallPatchTimeout)
	defer cancel()
	if len(c.nsInformers.Core().V1().Namespaces().Informer().GetStore().ListKeys()) > 0 {
		ns, err := c.kube.CoreV1().Namespaces().Get(ctx, c.opts.Namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && ns.DeletionTimestamp != nil {
			c.uninstall("its namespace " + c.opts.Namespace + " is being deleted (asked on the way out)")
			return
		}
	}
	if c.deployInformer != nil && len(c.deployInformer.Apps().V1().Deployments().Informer().GetStore().ListKeys()) > 0 {
		d, err := c.kube.AppsV1().Deployments(c.opts.Namespace).Get(ctx, c.opts.Deployment, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && d.DeletionTimestamp != nil {
			c.uninstall("its Deployment " + c.opts.Deployment + " is being deleted (asked on the way out)")
		}
	}
}

// namespaceHandler is the uninstall watch's event handler.
func (c *Controller) namespaceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNamespace,
		UpdateFunc: func(_, n any) { c.onNamespace(n) },
		DeleteFunc: func(any) { c.uninstall("its namespace " + c.opts.Namespace + " was deleted") },
	}
}
