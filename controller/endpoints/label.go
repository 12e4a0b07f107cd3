package endpoints

import discoveryv1 "k8s.io/api/discovery/v1"

// EgressServiceLabel marks a Service that has an EgressService, and its
// EndpointSlices: the node agents watch only the Services and slices
// that carry it, so that the endpoint churn of every other Service in the
// cluster reaches none of them. The cluster component sets it on the
// Service, which the EndpointSlice controller copies onto the slices it
// manages; on the Endpoints object, which the EndpointSlice mirroring
// controller copies onto the slices it mirrors; and on any other
// manager's slices directly. It removes it when the EgressService goes.
const (
	EgressServiceLabel      = "egressflow.io/egress-service"
	EgressServiceLabelValue = "true"
)

// EgressServiceSelector selects what carries EgressServiceLabel.
func EgressServiceSelector() string { return EgressServiceLabel + "=" + EgressServiceLabelValue }

// The managers of EndpointSlices that copy labels from another object,
// and would remove a label set on the slice itself.
const (
	// ManagerEndpointSlice copies the Service's labels.
	ManagerEndpointSlice = "endpointslice-controller.k8s.io"
	// ManagerEndpointSliceMirroring copies the Endpoints object's labels.
	ManagerEndpointSliceMirroring = "endpointslicemirroring-controller.k8s.io"
)

// SliceManager is the manager of slice s (its managed-by label).
func SliceManager(s *discoveryv1.EndpointSlice) string { return s.Labels[discoveryv1.LabelManagedBy] }
