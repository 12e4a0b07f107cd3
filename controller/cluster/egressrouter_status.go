package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// routerLabel names, on a Service or EndpointSlice egressflow keeps for a
// router, the router (in the same namespace).
const routerLabel = "egressflow.io/egressrouter"

// routerSliceManager is the EndpointSlices' managed-by: the
// EndpointSlice controller leaves them alone (the Service has no selector
// anyway).
const routerSliceManager = "egressrouter.egressflow.io"

// routerConditions are the three conditions for decision d, keeping each
// one's transition time while its status stays.
func routerConditions(old []nov1.EgressRouterStatusCondition, d routerDecision, available bool, now metav1.Time) []nov1.EgressRouterStatusCondition {
	cond := func(typ nov1.EgressRouterStatusConditionType, status bool, reason reasons.Reason, message string) nov1.EgressRouterStatusCondition {
		c := nov1.EgressRouterStatusCondition{Type: typ, Status: nov1.ConditionFalse, Reason: string(reason), Message: message, LastTransitionTime: now}
		if status {
			c.Status = nov1.ConditionTrue
		}
		if i := slices.IndexFunc(old, func(o nov1.EgressRouterStatusCondition) bool { return o.Type == typ }); i >= 0 && old[i].Status == c.Status {
			c.LastTransitionTime = old[i].LastTransitionTime
		}
		return c
	}
	switch {
	case d.holder == "":
		return []nov1.EgressRouterStatusCondition{
			cond(nov1.EgressRouterAvailable, false, d.reason, "not served: "+d.message),
			cond(nov1.EgressRouterProgressing, false, d.reason, "no node to take the router over"),
			cond(nov1.EgressRouterDegraded, true, d.reason, d.message),
		}
	case available:
		return []nov1.EgressRouterStatusCondition{
			cond(nov1.EgressRouterAvailable, true, reasons.Applied, "served by node "+d.holder),
			cond(nov1.EgressRouterProgressing, false, reasons.Applied, "node "+d.holder+" serves the router"),
			cond(nov1.EgressRouterDegraded, false, reasons.Assigned, "held by node "+d.holder),
		}
	}
	return []nov1.EgressRouterStatusCondition{
		cond(nov1.EgressRouterAvailable, false, reasons.Pending, "node "+d.holder+" has not applied the router yet"),
		cond(nov1.EgressRouterProgressing, true, reasons.Pending, "node "+d.holder+" is taking the router over"),
		cond(nov1.EgressRouterDegraded, false, reasons.Assigned, "held by node "+d.holder),
	}
}

// writeStatus writes the router's holder and conditions for d (the holder
// sync recorded), if they changed, and records since when a new holder
// holds it; an Event tells a new holder, or a new reason it has none.
func (m *routers) writeStatus(ctx context.Context, t *term, router *nov1.EgressRouter, d routerDecision) (*nov1.EgressRouter, error) {
	rt := m.term(t)
	key := routerKey(router)
	moved := d.holder != router.Status.Holder
	rt.mu.Lock()
	since, known := rt.since[key]
	if !known && !moved && d.holder != "" {
		// A holder this term did not write nor find at its start.
		since = resourceVersion(router.ResourceVersion)
		rt.since[key] = since
	}
	available := d.holder != "" && !moved && since <= rt.applied[d.holder]
	rt.mu.Unlock()
	status := nov1.EgressRouterStatus{Holder: d.holder, Conditions: routerConditions(router.Status.Conditions, d, available, metav1.NewTime(m.c.opts.Clock.Now()))}
	out := router
	if !sameRouterStatus(router.Status, status) {
		next := router.DeepCopy()
		next.Status = status
		var err error
		out, err = m.c.es.NetworkOperatorV1().EgressRouters(router.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		m.c.metrics.apiWritesByResult.WithLabelValues("egressrouter_status", writeResult(err)).Inc()
		if err != nil {
			return nil, err
		}
	}
	rt.mu.Lock()
	if moved && d.holder != "" {
		rt.since[key] = resourceVersion(out.ResourceVersion)
	}
	rt.states[key] = routerState(d.holder, available)
	counts := rt.stateCounts()
	rt.mu.Unlock()
	setRouterStates(m.c.metrics.routerStates, counts)
	m.routerEvents(router, d, status)
	return out, nil
}

// routerEvents records a new holder (Normal) or a new reason for having
// none (Warning).
func (m *routers) routerEvents(router *nov1.EgressRouter, d routerDecision, status nov1.EgressRouterStatus) {
	before := condition(router.Status.Conditions, nov1.EgressRouterDegraded)
	switch {
	case d.holder != "" && d.holder != router.Status.Holder:
		from := "no node"
		if router.Status.Holder != "" {
			from = "node " + router.Status.Holder
		}
		m.c.events.Event(router, corev1.EventTypeNormal, string(reasons.HolderChanged), fmt.Sprintf("served by node %s (was %s)", d.holder, from))
	case d.holder == "" && (before.Status != nov1.ConditionTrue || before.Reason != string(d.reason)):
		m.c.events.Event(router, corev1.EventTypeWarning, string(d.reason), condition(status.Conditions, nov1.EgressRouterDegraded).Message)
	}
}

func condition(conds []nov1.EgressRouterStatusCondition, typ nov1.EgressRouterStatusConditionType) nov1.EgressRouterStatusCondition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return nov1.EgressRouterStatusCondition{}
}

func sameRouterStatus(a, b nov1.EgressRouterStatus) bool {
	return a.Holder == b.Holder && slices.EqualFunc(a.Conditions, b.Conditions, func(x, y nov1.EgressRouterStatusCondition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message && x.LastTransitionTime.Equal(&y.LastTransitionTime)
	})
}

// keepService keeps the router's Service (headless, without a selector,
// one port per rule) and its EndpointSlices (one per family, the reserved
// address its endpoint, ready while the router has a holder, so that a
// holder's move, which changes nothing the clients address, does not take
// the name out of the cluster's DNS for its second): clients reach
// the router as <name>.<namespace>.svc, on any port, as they reach
// OpenShift's. A Service of that name that is not the router's is left
// alone: keepService then reports the conflict, and touches no slice.
func (m *routers) keepService(ctx context.Context, router *nov1.EgressRouter, redirect nov1.Redirect, held bool) (conflict bool, err error) {
	want := routerService(router, redirect)
	services := m.c.kube.CoreV1().Services(router.Namespace)
	have, err := m.c.serviceLister.Services(router.Namespace).Get(router.Name)
	switch {
	case apierrors.IsNotFound(err):
		_, err := services.Create(ctx, want, metav1.CreateOptions{})
		m.c.metrics.apiWritesByResult.WithLabelValues("egressrouter_service", writeResult(err)).Inc()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	case err != nil:
		return false, err
	case !metav1.IsControlledBy(have, router):
		return true, nil
	case !slices.Equal(have.Spec.Ports, want.Spec.Ports):
		next := have.DeepCopy()
		next.Spec.Ports = want.Spec.Ports
		_, err := services.Update(ctx, next, metav1.UpdateOptions{})
		m.c.metrics.apiWritesByResult.WithLabelValues("egressrouter_service", writeResult(err)).Inc()
		if err != nil {
			return false, err
		}
	}
	return false, m.keepSlices(ctx, router, redirect, want.Spec.Ports, held)
}

// owner is the reference that makes router own an object (and the
// garbage collector delete it with the router).
func owner(router *nov1.EgressRouter) metav1.OwnerReference {
	return *metav1.NewControllerRef(router, nov1.SchemeGroupVersion.WithKind("EgressRouter"))
}

// routerService is the Service the router wants.
func routerService(router *nov1.EgressRouter, redirect nov1.Redirect) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: router.Name, Namespace: router.Namespace, Labels: map[string]string{routerLabel: router.Name},
			OwnerReferences: []metav1.OwnerReference{owner(router)}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Type: corev1.ServiceTypeClusterIP},
	}
	for _, r := range redirect.Rules {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: routerPortName(r), Protocol: corev1.Protocol(r.Protocol),
			Port: int32(r.Port), TargetPort: intstr.FromInt32(int32(r.Port))})
	}
	return svc
}

// routerPortName names a rule's port: its protocol and number.
func routerPortName(r nov1.RedirectRule) string {
	return fmt.Sprintf("%s-%d", strings.ToLower(string(r.Protocol)), r.Port)
}

// keepSlices keeps one EndpointSlice per reserved address, and deletes
// those of families the router no longer has.
func (m *routers) keepSlices(ctx context.Context, router *nov1.EgressRouter, redirect nov1.Redirect, ports []corev1.ServicePort, held bool) error {
	client := m.c.kube.DiscoveryV1().EndpointSlices(router.Namespace)
	want := map[string]*discoveryv1.EndpointSlice{}
	for _, a := range redirect.Addresses {
		s := routerSlice(router, a.Prefix.Addr().String(), a.Prefix.Addr().Is4(), ports, held)
		want[s.Name] = s
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	objs, _ := m.c.slices.ByIndex(endpointSliceServiceIndex, router.Namespace+"/"+router.Name)
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && s.Labels[discoveryv1.LabelManagedBy] == routerSliceManager {
			have[s.Name] = s
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w, h := want[name], have[name]
		var err error
		switch {
		case h == nil:
			_, err = client.Create(ctx, w, metav1.CreateOptions{})
			m.c.metrics.apiWritesByResult.WithLabelValues("egressrouter_service", writeResult(err)).Inc()
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		case !sameSlice(h, w):
			next := h.DeepCopy()
			next.Endpoints, next.Ports, next.Labels = w.Endpoints, w.Ports, w.Labels
			_, err = client.Update(ctx, next, metav1.UpdateOptions{})
			m.c.metrics.apiWritesByResult.WithLabelValues("egressrouter_service", writeResult(err)).Inc()
		}
		if err != nil {
			return err
		}
	}
	for name := range have {
		if want[name] == nil {
			err := client.Delete(ctx, name, metav1.DeleteOptions{})
			m.c.metrics.apiWritesByResult.WithLabelValues("egressrouter_service", writeResult(err)).Inc()
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// routerSlice is the EndpointSlice of one reserved address.
func routerSlice(router *nov1.EgressRouter, addr string, is4 bool, ports []corev1.ServicePort, ready bool) *discoveryv1.EndpointSlice {
	family, addressType := "ipv6", discoveryv1.AddressTypeIPv6
	if is4 {
		family, addressType = "ipv4", discoveryv1.AddressTypeIPv4
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: router.Name + "-egressrouter-" + family, Namespace: router.Namespace,
			Labels:          map[string]string{discoveryv1.LabelServiceName: router.Name, discoveryv1.LabelManagedBy: routerSliceManager, routerLabel: router.Name},
			OwnerReferences: []metav1.OwnerReference{owner(router)}},
		AddressType: addressType,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.Port)})
	}
	return s
}

// sameSlice says whether have already says what want does.
func sameSlice(have, want *discoveryv1.EndpointSlice) bool {
	if len(have.Endpoints) != 1 || !slices.Equal(have.Endpoints[0].Addresses, want.Endpoints[0].Addresses) ||
		ptr.Deref(have.Endpoints[0].Conditions.Ready, false) != ptr.Deref(want.Endpoints[0].Conditions.Ready, false) ||
		!maps.Equal(have.Labels, want.Labels) || len(have.Ports) != len(want.Ports) {
		return false
	}
	for i := range have.Ports {
		h, w := have.Ports[i], want.Ports[i]
		if ptr.Deref(h.Name, "") != ptr.Deref(w.Name, "") || ptr.Deref(h.Protocol, "") != ptr.Deref(w.Protocol, "") || ptr.Deref(h.Port, 0) != ptr.Deref(w.Port, 0) {
			return false
		}
	}
	return true
}
