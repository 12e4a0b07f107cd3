package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/egressflow/egressflow/controller/endpoints"
)

// The agents' inputs. The node agents watch only the Services and
// EndpointSlices that carry endpoints.EgressServiceLabel, so the leader
// keeps it on exactly those of the EgressServices (markInputs), from
// syncService: an EgressService's sync labels them, and a labelled
// Service or slice whose EgressService is gone is synced (onService,
// onSlice) and unlabelled. A label costs one patch per EgressService,
// plus one per slice of a manager that copies no Service labels.

// markInputs puts endpoints.EgressServiceLabel on what the agents read of
// the EgressService namespace/name (want), or takes it off (!want):
//   - the Service, whose labels the EndpointSlice controller copies onto
//     the slices it manages;
//   - the Endpoints object, when the EndpointSlice mirroring controller
//     made slices from it: it copies that object's labels, and would take
//     off one set on the slices;
//   - the slices of any other manager (or none) directly.
func (c *Controller) markInputs(ctx context.Context, namespace, name string, want bool) error {
	svc, err := c.serviceLister.Services(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case marked(svc.Labels) != want:
		if err := c.patchInputLabel(ctx, "services", namespace, name, want); err != nil {
			return err
		}
	}
	objs, err := c.slices.ByIndex(endpointSliceServiceIndex, namespace+"/"+name)
	if err != nil {
		return err
	}
	endpointsObject := false
	for _, o := range objs {
		s := o.(*discoveryv1.EndpointSlice)
		switch endpoints.SliceManager(s) {
		case endpoints.ManagerEndpointSlice:
			// The Service's label reaches it.
		case endpoints.ManagerEndpointSliceMirroring:
			// Its copy may lag the Endpoints object's label, or never
			// come (the mirroring controller off): taking the label off
			// reads the object whatever the copy says.
			endpointsObject = endpointsObject || !want || !marked(s.Labels)
		default:
			if marked(s.Labels) == want {
				continue
			}
			if err := c.patchInputLabel(ctx, "endpointslices", s.Namespace, s.Name, want); err != nil {
				return err
			}
		}
	}
	if !endpointsObject {
		return nil
	}
	// Not watched: read first, so that the syncs until the mirroring
	// controller has copied the label write it once.
	ep, err := c.kube.CoreV1().Endpoints(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read Endpoints %s/%s: %w", namespace, name, err)
	case marked(ep.Labels) == want:
		return nil
	}
	return c.patchInputLabel(ctx, "endpoints", namespace, name, want)
}

// marked says whether labels carry endpoints.EgressServiceLabel.
func marked(labels map[string]string) bool {
	return labels[endpoints.EgressServiceLabel] == endpoints.EgressServiceLabelValue
}

// patchInputLabel is setInputLabel, counted among the controller's writes.
func (c *Controller) patchInputLabel(ctx context.Context, resource, namespace, name string, want bool) error {
	err := setInputLabel(ctx, c.kube, resource, namespace, name, want)
	c.metrics.apiWritesByResult.WithLabelValues("input_labels", writeResult(err)).Inc()
	return err
}

// setInputLabel sets (want) or removes endpoints.EgressServiceLabel on one
// object of resource ("services", "endpoints" or "endpointslices") with a
// merge patch of that label alone. An object that is gone needs none.
func setInputLabel(ctx context.Context, kube kubernetes.Interface, resource, namespace, name string, want bool) error {
	var value any // null removes the label
	if want {
		value = endpoints.EgressServiceLabelValue
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{endpoints.EgressServiceLabel: value}}})
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{}
	switch resource {
	case "services":
		_, err = kube.CoreV1().Services(namespace).Patch(ctx, name, types.MergePatchType, patch, opts)
	case "endpoints":
		_, err = kube.CoreV1().Endpoints(namespace).Patch(ctx, name, types.MergePatchType, patch, opts)
	case "endpointslices":
		_, err = kube.DiscoveryV1().EndpointSlices(namespace).Patch(ctx, name, types.MergePatchType, patch, opts)
	default:
		return fmt.Errorf("no input label on %s", resource)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("label %s %s/%s for the agents: %w", resource, namespace, name, err)
	}
	return nil
}

// unmarkAllInputs removes endpoints.EgressServiceLabel from every Service,
// Endpoints object and EndpointSlice that carries it (on uninstall); it
// says how many it patched.
func unmarkAllInputs(ctx context.Context, kube kubernetes.Interface) (int, error) {
	selector := metav1.ListOptions{LabelSelector: endpoints.EgressServiceSelector()}
	type object struct{ resource, namespace, name string }
	var marked []object
	services, err := kube.CoreV1().Services("").List(ctx, selector)
	if err != nil {
		return 0, err
	}
	for _, o := range services.Items {
		marked = append(marked, object{"services", o.Namespace, o.Name})
	}
	eps, err := kube.CoreV1().Endpoints("").List(ctx, selector)
	if err != nil {
		return 0, err
	}
	for _, o := range eps.Items {
		marked = append(marked, object{"endpoints", o.Namespace, o.Name})
	}
	slices, err := kube.DiscoveryV1().EndpointSlices("").List(ctx, selector)
	if err != nil {
		return 0, err
	}
	for _, o := range slices.Items {
		// The managers' copies go with their sources' labels.
		if m := endpoints.SliceManager(&o); m != endpoints.ManagerEndpointSlice && m != endpoints.ManagerEndpointSliceMirroring {
			marked = append(marked, object{"endpointslices", o.Namespace, o.Name})
		}
	}
	for _, o := range marked {
		if err := setInputLabel(ctx, kube, o.resource, o.namespace, o.name, false); err != nil {
			return 0, err
		}
	}
	return len(marked), nil
}
