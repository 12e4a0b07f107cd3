package cluster

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
)

// EgressIP on a cloud (the cloud controller's provider is a cloud): the
// assignment asks the cloud for each address it places, with a
// CloudPrivateIPConfig named after the address whose spec.node is the
// chosen node, and puts an address in status.items only once that object
// says the cloud has it there (assign.EgressIPDecision.Confirmed). The
// agents act on status.items alone, so none uses an address the cloud has
// not attached to its node. A move takes the address out of status.items
// first (its old node stops using it: the pods' egress of that family is
// dropped, or leaves through their nodes with EGRESSIP_UNHELD=node-ip,
// never with the egress IP from the wrong node), then moves the object's
// spec.node; the cloud controller releases it before it assigns it, and
// the item comes back with the new node once the cloud confirms.
//
// The objects an EgressIP asked for carry CloudEgressIPLabel with its
// name; those of addresses it no longer holds, or of a deleted EgressIP,
// are deleted, and the cloud controller's finalizer releases their
// addresses. On metal none of this happens: an address is usable once
// status.items names its node.

// CloudEgressIPLabel is the label of a CloudPrivateIPConfig made for an
// EgressIP: its name.
const CloudEgressIPLabel = "egressflow.io/egressip"

func (m *egressIPs) onCloud() bool { return m.c.opts.CloudProvider.Cloud() }

// cloudConfigWatch syncs the EgressIP an object was made for when it
// changes. It notes no event: the EgressIP's own change is where its
// assign latency starts (syncEgressIP keeps it while the cloud is
// pending).
func (m *egressIPs) cloudConfigWatch() watch {
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		c, ok := obj.(*cloudv1.CloudPrivateIPConfig)
		if !ok || c.Labels[CloudEgressIPLabel] == "" {
			return
		}
		if t := m.c.term.Load(); t != nil {
			m.queue(t).Add(c.Labels[CloudEgressIPLabel])
		}
	}
	return watch{m.cloudInformer, cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue}}
}

// confirmedByCloud is d with the addresses the cloud has yet to confirm
// on their nodes not held: those whose CloudPrivateIPConfig is missing,
// asks for another node, or does not say Assigned there yet. It reads the
// cache only; askCloud, after the status is written, asks for the rest.
func (m *egressIPs) confirmedByCloud(d assign.EgressIPDecision) assign.EgressIPDecision {
	return d.Confirmed(func(a netip.Addr, node string) (bool, string) {
		name := cloudv1.ObjectName(a)
		cur, err := m.cloudLister.Get(name)
		if err != nil || cur.Spec.Node != node {
			return false, fmt.Sprintf("the cloud has yet to attach it to %s (CloudPrivateIPConfig %s asks for it)", node, name)
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, cloudv1.AssignedCondition)
		switch {
		case cond != nil && cond.Status == metav1.ConditionTrue && cur.Status.Node == node:
			return true, ""
		case cond != nil && cond.ObservedGeneration == cur.Generation:
			return false, fmt.Sprintf("the cloud has yet to attach it to %s (CloudPrivateIPConfig %s: %s)", node, cur.Name, cond.Reason)
		}
		return false, fmt.Sprintf("the cloud has yet to attach it to %s (CloudPrivateIPConfig %s)", node, cur.Name)
	})
}

// askCloud makes the CloudPrivateIPConfigs of eip's addresses ask for the
// nodes d holds them on, and deletes those of addresses it no longer
// holds. It runs once status.items no longer names a node for an address
// whose object it moves or deletes, so that no node uses an address the
// cloud is taking away from it.
func (m *egressIPs) askCloud(ctx context.Context, eip *esv1.EgressIP, d assign.EgressIPDecision) error {
	client := m.c.es.CloudNetworkV1().CloudPrivateIPConfigs()
	wanted := map[string]bool{}
	for _, it := range d.Items {
		if it.Node == "" {
			continue
		}
		name := cloudv1.ObjectName(it.Addr)
		wanted[name] = true
		cur, err := m.cloudLister.Get(name)
		switch {
		case apierrors.IsNotFound(err):
			_, err = client.Create(ctx, &cloudv1.CloudPrivateIPConfig{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{CloudEgressIPLabel: eip.Name}},
				Spec:       cloudv1.CloudPrivateIPConfigSpec{Node: it.Node},
			}, metav1.CreateOptions{})
			m.c.metrics.apiWritesByResult.WithLabelValues("cloudip_request", writeResult(err)).Inc()
		case err == nil && (cur.Spec.Node != it.Node || cur.Labels[CloudEgressIPLabel] != eip.Name):
			next := cur.DeepCopy()
			next.Spec.Node = it.Node
			if next.Labels == nil {
				next.Labels = map[string]string{}
			}
			next.Labels[CloudEgressIPLabel] = eip.Name
			_, err = client.Update(ctx, next, metav1.UpdateOptions{})
			m.c.metrics.apiWritesByResult.WithLabelValues("cloudip_request", writeResult(err)).Inc()
		}
		if err != nil {
			return fmt.Errorf("ask the cloud for %s on %s: %w", it.Address, it.Node, err)
		}
	}
	return m.dropCloudConfigs(ctx, eip.Name, wanted)
}

// dropCloudConfigs deletes the CloudPrivateIPConfigs made for the
// EgressIP name but those of keep; each deletion is conditional on the
// object being as read, so that one another EgressIP has just taken over
// stays.
func (m *egressIPs) dropCloudConfigs(ctx context.Context, name string, keep map[string]bool) error {
	objs, err := m.cloudLister.List(labels.SelectorFromSet(labels.Set{CloudEgressIPLabel: name}))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if keep[o.Name] || o.DeletionTimestamp != nil {
			continue
		}
		err := m.c.es.CloudNetworkV1().CloudPrivateIPConfigs().Delete(ctx, o.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &o.UID, ResourceVersion: &o.ResourceVersion}})
		m.c.metrics.apiWritesByResult.WithLabelValues("cloudip_request", writeResult(err)).Inc()
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("drop CloudPrivateIPConfig %s of EgressIP %s: %w", o.Name, name, err)
		}
	}
	return nil
}

// cloudHolders are, per EgressIP, the nodes its CloudPrivateIPConfigs ask
// for: a move under way when the term began, which a new leader adopts
// like status.items so that it finishes the move rather than choose again.
func (m *egressIPs) cloudHolders() map[string]map[netip.Addr]string {
	out := map[string]map[netip.Addr]string{}
	if !m.onCloud() {
		return out
	}
	objs, _ := m.cloudLister.List(labels.Everything())
	for _, o := range objs {
		owner := o.Labels[CloudEgressIPLabel]
		a, err := cloudv1.AddressOf(o.Name)
		if owner == "" || err != nil || o.DeletionTimestamp != nil {
			continue
		}
		if out[owner] == nil {
			out[owner] = map[netip.Addr]string{}
		}
		out[owner][a] = o.Spec.Node
	}
	return out
}
