package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cloud"
	cloudinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions/cloudnetwork/v1"
	cloudlisters "github.com/egressflow/egressflow/controller/generated/listers/cloudnetwork/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// The cloud controller: a member under the one leader (not a Deployment of
// its own, as OpenShift's cloud-network-config-controller is) so that it
// needs no second leader election, whose hand-over is the reference's
// slowest part, and shares the Node caches, and so that the EgressIP
// assignment that asks it to move an address is the same process as the
// one that moves it.
//
// It reconciles each CloudPrivateIPConfig with the cloud through a
// cloud.Provider, level-triggered: it asks the cloud where the address is
// (the truth; the object's status is only its report), releases it from any
// interface but spec.node's, then assigns it there (cloud.Next). A move
// half done when a leader stops is finished by the next from the cloud's
// own answer, never from memory, so no address is lost or held twice. A
// finalizer keeps a deleted object until its address is released.
//
// On a cloud it also publishes each egress node's primary interface,
// subnets and capacity as cloudv1.EgressIPConfigAnnotation, which the
// EgressIP assignment reads (assign.NodeEgressLimits). Only nodes labelled
// k8s.ovn.org/egress-assignable: they are the ones that may hold egress
// addresses, and a leader's first pass costs a few cloud calls per node.

// CloudReleaseFinalizer keeps a CloudPrivateIPConfig until its address is
// released from the cloud.
const CloudReleaseFinalizer = "egressflow.io/cloud-release"

// cloudIPs is the cloud controller, a member.
type cloudIPs struct {
	c        *Controller
	provider cloud.Provider
	informer cache.SharedIndexInformer
	lister   cloudlisters.CloudPrivateIPConfigLister
	slot     slot[*cloudTerm]
	memberHooks
}

// cloudTerm is the cloud controller's part of a term: its queues of
// CloudPrivateIPConfig names and of node names (capacity to publish), and
// the interfaces it has found, by node.
type cloudTerm struct {
	queue, nodes workqueue.TypedRateLimitingInterface[string]
	mu           sync.Mutex
	interfaces   map[string]cloudInterface
}

// cloudInterface is a node's interface, found for the instance it had.
type cloudInterface struct {
	instance [2]string // instanceOf
	iface    cloud.Interface
}

func newCloudIPs(c *Controller, provider cloud.Provider, inf cloudinformers.CloudPrivateIPConfigInformer, s slot[*cloudTerm]) *cloudIPs {
	return &cloudIPs{c: c, provider: provider, informer: inf.Informer(), lister: inf.Lister(), slot: s}
}

func (m *cloudIPs) term(t *term) *cloudTerm { return m.slot.of(t) }

// watches syncs an object when it is added or deleted, and when an update
// changes what is asked of it (the spec, the finalizers, a deletion); the
// status writes that only report, its own, would each cost a call to the
// cloud for nothing.
func (m *cloudIPs) watches() []watch {
	enqueue := func(obj any) { m.c.onObject(obj, func(t *term, key string) { m.term(t).queue.Add(key) }) }
	update := func(old, cur any) {
		o, ok1 := old.(*cloudv1.CloudPrivateIPConfig)
		c, ok2 := cur.(*cloudv1.CloudPrivateIPConfig)
		if ok1 && ok2 && o.Generation == c.Generation && slices.Equal(o.Finalizers, c.Finalizers) && o.DeletionTimestamp.Equal(c.DeletionTimestamp) {
			return
		}
		enqueue(cur)
	}
	return []watch{{m.informer, cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: update, DeleteFunc: enqueue}}}
}

func (m *cloudIPs) newTerm(limiter func() workqueue.TypedRateLimiter[string]) any {
	return &cloudTerm{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cloudprivateipconfigs", Clock: m.c.opts.Clock}),
		nodes: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cloudnodes", Clock: m.c.opts.Clock}),
		interfaces: map[string]cloudInterface{},
	}
}

func (m *cloudIPs) pools() []workerPool {
	return []workerPool{
		{m.c.opts.CloudWorkers, func(ctx context.Context, t *term) bool {
			return process(ctx, m.c, m.term(t).queue, queueCloudIP, func(ctx context.Context, name string) error { return m.syncConfig(ctx, t, name) })
		}},
		{m.c.opts.CloudWorkers, func(ctx context.Context, t *term) bool {
			return process(ctx, m.c, m.term(t).nodes, queueCloudNode, func(ctx context.Context, name string) error { return m.publishNode(ctx, t, name) })
		}},
	}
}

func (m *cloudIPs) queueLen(t *term) int { return m.term(t).queue.Len() + m.term(t).nodes.Len() }
func (m *cloudIPs) shutDown(t *term) {
	m.term(t).queue.ShutDown()
	m.term(t).nodes.ShutDown()
}

func (m *cloudIPs) enqueueAll(t *term) {
	objs, _ := m.lister.List(labels.Everything())
	for _, o := range objs {
		m.term(t).queue.Add(o.Name)
	}
	if !m.provider.Cloud() {
		return
	}
	nodes, _ := m.c.nodeLister.List(labels.Everything())
	for _, n := range nodes {
		if assign.EgressAssignable(n) {
			m.term(t).nodes.Add(n.Name)
		}
	}
}

// nodeEvent forgets the interface of a node whose instance may have
// changed, and syncs again the objects that name the node (a node added
// may be one they wait for; one deleted releases theirs), and publishes
// the capacity of an egress node that is new or whose instance changed.
func (m *cloudIPs) nodeEvent(t *term, old, cur *corev1.Node) {
	ct := m.term(t)
	name := ""
	if cur != nil {
		name = cur.Name
	} else {
		name = old.Name
	}
	if old != nil && cur != nil && instanceOf(old) == instanceOf(cur) && assign.EgressAssignable(old) == assign.EgressAssignable(cur) {
		return
	}
	ct.mu.Lock()
	delete(ct.interfaces, name)
	ct.mu.Unlock()
	objs, _ := m.lister.List(labels.Everything())
	for _, o := range objs {
		if o.Spec.Node == name || o.Status.Node == name {
			ct.queue.Add(o.Name)
		}
	}
	if m.provider.Cloud() && cur != nil && assign.EgressAssignable(cur) {
		ct.nodes.Add(name)
	}
}

// instanceOf is what names a node's instance for the providers.
func instanceOf(n *corev1.Node) [2]string {
	return [2]string{n.Spec.ProviderID, n.Labels[corev1.LabelInstanceTypeStable]}
}

// nodeInterface is node's interface, found once per instance and term
// (fresh: asked of the provider whatever is known).
func (m *cloudIPs) nodeInterface(ctx context.Context, t *term, node *corev1.Node, fresh bool) (cloud.Interface, error) {
	ct := m.term(t)
	ct.mu.Lock()
	known, ok := ct.interfaces[node.Name]
	ct.mu.Unlock()
	if ok && !fresh && known.instance == instanceOf(node) {
		return known.iface, nil
	}
	iface, err := m.provider.NodeInterface(ctx, node)
	if err != nil {
		return cloud.Interface{}, err
	}
	ct.mu.Lock()
	ct.interfaces[node.Name] = cloudInterface{instanceOf(node), iface}
	ct.mu.Unlock()
	return iface, nil
}

// syncConfig brings one CloudPrivateIPConfig's address to its node, or off
// every node when it is being deleted, and reports where it is.
func (m *cloudIPs) syncConfig(ctx context.Context, t *term, name string) error {
	obj, err := m.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil // the finalizer saw its address released
	}
	if err != nil {
		return err
	}
	deleting := obj.DeletionTimestamp != nil
	addr, err := cloudv1.AddressOf(name)
	if err != nil {
		if deleting {
			return m.setFinalizer(ctx, obj, false)
		}
		return m.report(ctx, obj, "", reasons.InvalidObjectName, err.Error())
	}
	if !deleting && !slices.Contains(obj.Finalizers, CloudReleaseFinalizer) {
		return m.setFinalizer(ctx, obj, true) // its update syncs again
	}

	// Where it should be: "" when the object is being deleted or names
	// no Node. A node the cloud cannot tell about now (its calls failed)
	// stops here: nothing moves on a guess.
	desired, nodeProblem := "", ""
	if !deleting {
		node, err := m.c.nodeLister.Get(obj.Spec.Node)
		switch {
		case apierrors.IsNotFound(err):
			nodeProblem = "no node " + obj.Spec.Node
		case err != nil:
			return err
		default:
			iface, err := m.nodeInterface(ctx, t, node, false)
			if err != nil {
				return m.reportFailure(ctx, obj, err)
			}
			desired = iface.ID
		}
	}
	holder, err := m.provider.Holder(ctx, addr, m.recordedInterface(ctx, t, obj))
	if err != nil {
		return m.reportFailure(ctx, obj, err)
	}
	for {
		action, iface := cloud.Next(desired, holder)
		switch action {
		case cloud.Release:
			if err := m.provider.Release(ctx, iface, addr); err != nil {
				return m.reportFailure(ctx, obj, err)
			}
			klog.FromContext(ctx).Info("Cloud address released", "address", addr, "interface", iface, "for", obj.Spec.Node, "deleting", deleting)
			holder = ""
			continue
		case cloud.Assign:
			if err := m.provider.Assign(ctx, iface, addr); err != nil {
				// Released, or never held: the report says no node.
				return m.reportFailureOn(ctx, obj, "", err)
			}
			klog.FromContext(ctx).Info("Cloud address assigned", "address", addr, "interface", iface, "node", obj.Spec.Node)
			holder = iface
			continue
		}
		break
	}
	switch {
	case deleting:
		return m.setFinalizer(ctx, obj, false)
	case nodeProblem != "":
		// Released from wherever it was; a Node of that name syncs it
		// again (nodeEvent).
		return m.report(ctx, obj, "", reasons.CloudNodeNotFound, nodeProblem)
	}
	return m.report(ctx, obj, obj.Spec.Node, reasons.Assigned, fmt.Sprintf("the cloud has %s on %s, the primary interface of node %s", addr, holder, obj.Spec.Node))
}

// recordedInterface is the interface of the node status.node names, for
// a provider without a cloud (metal), whose record is the truth; "" when
// there is none. A cloud asks its API instead, so nothing is looked up.
func (m *cloudIPs) recordedInterface(ctx context.Context, t *term, obj *cloudv1.CloudPrivateIPConfig) string {
	if m.provider.Cloud() || obj.Status.Node == "" || !isAssigned(obj) {
		return ""
	}
	node, err := m.c.nodeLister.Get(obj.Status.Node)
	if err != nil {
		return ""
	}
	iface, err := m.nodeInterface(ctx, t, node, false)
	if err != nil {
		return ""
	}
	return iface.ID
}

func isAssigned(obj *cloudv1.CloudPrivateIPConfig) bool {
	return meta.IsStatusConditionTrue(obj.Status.Conditions, cloudv1.AssignedCondition)
}

// reportFailure reports a provider's error with the address where the
// status last said, and returns it for a retry with backoff.
func (m *cloudIPs) reportFailure(ctx context.Context, obj *cloudv1.CloudPrivateIPConfig, err error) error {
	node := ""
	if isAssigned(obj) {
		node = obj.Status.Node
	}
	return m.reportFailureOn(ctx, obj, node, err)
}

func (m *cloudIPs) reportFailureOn(ctx context.Context, obj *cloudv1.CloudPrivateIPConfig, node string, err error) error {
	if werr := m.report(ctx, obj, node, cloud.ReasonOf(err), err.Error()); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// report writes status.node and the Assigned condition (True only with
// reasons.Assigned) when they change, with an Event of the reason.
func (m *cloudIPs) report(ctx context.Context, obj *cloudv1.CloudPrivateIPConfig, node string, reason reasons.Reason, message string) error {
	status := metav1.ConditionFalse
	if reason == reasons.Assigned {
		status = metav1.ConditionTrue
	}
	cond := metav1.Condition{Type: cloudv1.AssignedCondition, Status: status, Reason: string(reason), Message: message, ObservedGeneration: obj.Generation}
	old := meta.FindStatusCondition(obj.Status.Conditions, cloudv1.AssignedCondition)
	if obj.Status.Node == node && old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	next := obj.DeepCopy()
	next.Status.Node = node
	meta.SetStatusCondition(&next.Status.Conditions, cond)
	_, err := m.c.es.CloudNetworkV1().CloudPrivateIPConfigs().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	m.c.metrics.apiWritesByResult.WithLabelValues("cloudip_status", writeResult(err)).Inc()
	if err != nil {
		return err
	}
	if old == nil || old.Reason != cond.Reason || old.Status != cond.Status {
		eventType := corev1.EventTypeWarning
		if status == metav1.ConditionTrue {
			eventType = corev1.EventTypeNormal
		}
		m.c.events.Event(next, eventType, string(reason), message)
	}
	return nil
}

// setFinalizer adds or removes CloudReleaseFinalizer.
func (m *cloudIPs) setFinalizer(ctx context.Context, obj *cloudv1.CloudPrivateIPConfig, on bool) error {
	if slices.Contains(obj.Finalizers, CloudReleaseFinalizer) == on {
		return nil
	}
	next := obj.DeepCopy()
	if on {
		next.Finalizers = append(next.Finalizers, CloudReleaseFinalizer)
	} else {
		next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == CloudReleaseFinalizer })
	}
	_, err := m.c.es.CloudNetworkV1().CloudPrivateIPConfigs().Update(ctx, next, metav1.UpdateOptions{})
	m.c.metrics.apiWritesByResult.WithLabelValues("cloudip_finalizer", writeResult(err)).Inc()
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// publishNode writes an egress node's cloudv1.EgressIPConfigAnnotation from
// its interface as the cloud describes it now, when it changed.
func (m *cloudIPs) publishNode(ctx context.Context, t *term, name string) error {
	node, err := m.c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !assign.EgressAssignable(node)) {
		return nil
	}
	if err != nil {
		return err
	}
	iface, err := m.nodeInterface(ctx, t, node, true)
	if err != nil {
		return err
	}
	managed := func(a netip.Addr) bool {
		_, err := m.lister.Get(cloudv1.ObjectName(a))
		return err == nil
	}
	value := cloudv1.FormatEgressIPConfig(cloud.NodeConfig(iface, managed))
	if node.Annotations[cloudv1.EgressIPConfigAnnotation] == value {
		return nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cloudv1.EgressIPConfigAnnotation, value)
	_, err = m.c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	m.c.metrics.apiWritesByResult.WithLabelValues("node_annotations", writeResult(err)).Inc()
	return err
}
