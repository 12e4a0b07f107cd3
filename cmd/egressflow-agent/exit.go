package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// What a stopping agent does with the node's dataplane. An agent removes
// egressflow from its node only on a positive sign that egressflow is
// being removed: its namespace being deleted, or the DaemonSet that owns
// its Pod being deleted, as the API server says or said. An error is never
// such a sign. A refusal (Forbidden, Unauthorized), an unreachable API
// server or a timeout keeps the dataplane: a rolling update, a liveness
// restart or a drain must never turn into an uninstall because a
// permission, a name or the network was not what the agent expected.
//
// The signs are followed by watches from the agent's start (removalSigns),
// not only asked for on exit: `kubectl delete -k deploy/` deletes the
// namespace first and the agent's ServiceAccount and RBAC right after, so
// by the time the kubelet stops the agent its reads on exit may be refused.
// The watches saw the namespace's deletion before that.

// exitTimeout bounds what the agent does on exit (a few API reads, then a
// handover or the removal of its flows and rules), well within the pod's
// termination grace period.
const exitTimeout = 5 * time.Second

// ownerRetryInterval is how often an agent that could not read its own
// Pod at start (the API server away, its permissions not yet bound) asks
// again, to learn which DaemonSet owns it. One GET per agent per interval
// until it succeeds, once; shorter learns sooner after an outage.
const ownerRetryInterval = 5 * time.Second

// exitAction is what a stopping agent does with the node's dataplane.
type exitAction int

const (
	// keepDataplane: the flows stay, fail-closed, and the heartbeat Lease
	// runs out as usual (the kubelet stops pods so when the node shuts
	// down; also when the API server cannot be asked).
	keepDataplane exitAction = iota
	// handOverDataplane: the Pod is deleted but its DaemonSet stays (a
	// rolling update): the flows stay and the Lease is extended for the
	// successor, so the node's services do not fail over.
	handOverDataplane
	// removeDataplane: egressflow itself is being removed (kubectl delete
	// -k deploy/, helm uninstall): the node is left as it was before
	// egressflow.
	removeDataplane
)

// removalSigns follows the signs that egressflow is being removed, from
// the agent's start: its namespace (a watch of that one namespace) and the
// DaemonSets of its namespace (the owner of its Pod is read once, at
// start). Safe for concurrent use.
type removalSigns struct {
	namespace string

	mu sync.Mutex
	// namespaceGone says why the namespace is going, once seen.
	namespaceGone string
	// daemonSetsGone are the DaemonSets seen deleted or being deleted.
	daemonSetsGone map[types.UID]string
	// owner is this Pod's DaemonSet, once read.
	owner *metav1.OwnerReference
}

// watchRemoval starts following the removal signs until ctx ends. podName
// may be empty (an agent run outside a Pod): then only the namespace
// counts.
func watchRemoval(ctx context.Context, kube kubernetes.Interface, namespace, podName string) *removalSigns {
	r := &removalSigns{namespace: namespace, daemonSetsGone: map[types.UID]string{}}
	own := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + namespace }))
	_, _ = own.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onNamespace(obj, false) },
		UpdateFunc: func(_, obj any) { r.onNamespace(obj, false) },
		DeleteFunc: func(obj any) { r.onNamespace(obj, true) },
	})
	local := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace))
	_, _ = local.Apps().V1().DaemonSets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onDaemonSet(obj, false) },
		UpdateFunc: func(_, obj any) { r.onDaemonSet(obj, false) },
		DeleteFunc: func(obj any) { r.onDaemonSet(obj, true) },
	})
	own.Start(ctx.Done())
	local.Start(ctx.Done())
	if podName != "" {
		go r.readOwner(ctx, kube, podName)
	}
	return r
}

func (r *removalSigns) onNamespace(obj any, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok || (!deleted && ns.DeletionTimestamp == nil) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.namespaceGone == "" {
		r.namespaceGone = fmt.Sprintf("namespace %s is being deleted", ns.Name)
		klog.InfoS("egressflow's namespace is being deleted: this agent removes egressflow from the node when it stops", "namespace", ns.Name)
	}
}

func (r *removalSigns) onDaemonSet(obj any, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	ds, ok := obj.(*appsv1.DaemonSet)
	if !ok || (!deleted && ds.DeletionTimestamp == nil) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.daemonSetsGone[ds.UID]; seen {
		return
	}
	r.daemonSetsGone[ds.UID] = fmt.Sprintf("DaemonSet %s is being deleted", ds.Name)
	if r.owner != nil && r.owner.UID == ds.UID {
		klog.InfoS("This agent's DaemonSet is being deleted: the agent removes egressflow from the node when it stops", "daemonSet", ds.Name)
	}
}

// readOwner reads which DaemonSet owns this Pod, retrying until it can.
func (r *removalSigns) readOwner(ctx context.Context, kube kubernetes.Interface, podName string) {
	for {
		pod, err := kube.CoreV1().Pods(r.namespace).Get(ctx, podName, metav1.GetOptions{})
		if err == nil {
			if owner := daemonSetOwner(pod); owner != nil {
				r.mu.Lock()
				r.owner = owner
				r.mu.Unlock()
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(ownerRetryInterval):
		}
	}
}

// seen is why egressflow is being removed, as the watches saw it; "" when
// they saw no sign (or could not watch).
func (r *removalSigns) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.namespaceGone != "" {
		return r.namespaceGone
	}
	if r.owner != nil {
		return r.daemonSetsGone[r.owner.UID]
	}
	return ""
}

// daemonSetGone is why DaemonSet uid is going, as the watch saw it.
func (r *removalSigns) daemonSetGone(uid types.UID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.daemonSetsGone[uid]
}

func daemonSetOwner(pod *corev1.Pod) *metav1.OwnerReference {
	for _, owner := range pod.OwnerReferences {
		if owner.Kind == "DaemonSet" {
			return &owner
		}
	}
	return nil
}

// decideExit tells a rolling update from an uninstall, from what the
// watches saw and what the API server answers now. egressflow is being
// removed when its namespace is being deleted or is gone, or when the
// DaemonSet that owns this Pod is being deleted, is gone or was replaced
// (another UID). A deleted Pod whose DaemonSet stays is a rolling update.
// Anything else, an error above all, keeps the dataplane.
func decideExit(ctx context.Context, kube kubernetes.Interface, namespace, podName string, watched *removalSigns) (exitAction, string) {
	if reason := watched.seen(); reason != "" {
		return removeDataplane, reason
	}
	ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return removeDataplane, fmt.Sprintf("namespace %s is gone", namespace)
	case err == nil && ns.DeletionTimestamp != nil:
		return removeDataplane, fmt.Sprintf("namespace %s is being deleted", namespace)
	}
	if podName == "" {
		return keepDataplane, "no POD_NAME"
	}
	pod, err := kube.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	switch {
	case err != nil:
		return keepDataplane, fmt.Sprintf("pod %s cannot be read (%v): no sign of a removal", podName, err)
	case pod.DeletionTimestamp == nil:
		return keepDataplane, "pod not deleted"
	}
	owner := daemonSetOwner(pod)
	if owner == nil {
		return keepDataplane, "pod deleted, owned by no DaemonSet"
	}
	if reason := watched.daemonSetGone(owner.UID); reason != "" {
		return removeDataplane, reason
	}
	ds, err := kube.AppsV1().DaemonSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return removeDataplane, fmt.Sprintf("DaemonSet %s is gone", owner.Name)
	case err != nil:
		return keepDataplane, fmt.Sprintf("DaemonSet %s cannot be read (%v): no sign of a removal", owner.Name, err)
	case ds.DeletionTimestamp != nil || ds.UID != owner.UID:
		return removeDataplane, fmt.Sprintf("DaemonSet %s is being deleted", owner.Name)
	}
	return handOverDataplane, "pod deleted, its DaemonSet stays"
}

// --dns-replies-while-away's values.
const (
	dnsRepliesHold = "hold"
	dnsRepliesPass = "pass"
)

// passDNSReplies, with --dns-replies-while-away=pass, turns the snoop
// flows of a stopping agent that leaves its dataplane in place to copying:
// the DNS replies to pods go on at once while no agent is there to resume
// them. The successor's first sync, which reads the bridge, holds them
// again. With hold it does nothing: the flows keep pausing replies, and
// with no agent to resume them they go no further.
func passDNSReplies(ctx context.Context, client *ofconn.Client, whileAway string) {
	if whileAway != dnsRepliesPass {
		return
	}
	if err := client.SendFlowMods(ctx, dataplane.SnoopCopyingFlowMods()...); err != nil {
		klog.ErrorS(err, "Could not let DNS replies pass while the agent is away: replies to pods of namespaces with a dnsName rule wait for the next agent")
		return
	}
	klog.InfoS("DNS replies to pods of namespaces with a dnsName rule pass unheld until the next agent syncs (--dns-replies-while-away=pass)")
}
