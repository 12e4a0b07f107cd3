// Package v1 holds the kind of the API group cloud.network.openshift.io,
// version v1, that egressflow serves: CloudPrivateIPConfig
// (cloudprivateipconfig.go), cluster-scoped.
// It has the Go types, their registration in a scheme, and the kubebuilder
// markers from which `make manifests` generates the CRD in deploy/crds/. The
// deepcopy functions (zz_generated.deepcopy.go) and the typed client,
// informers, listers and apply configurations under controller/generated/
// are generated from these types by `make generate`; never edit them by hand.
// They share one clientset with the other groups: CloudNetworkV1().
//
// It also holds the Node annotation in which a cloud controller publishes
// each node's egress subnets and capacity, and its one reading
// (egressipconfig.go: EgressIPConfigAnnotation, ParseEgressIPConfig), and
// the one reading of an object's name, the address it
// assigns (ObjectName, AddressOf): an IPv4 address as it is written, an
// IPv6 address as its eight groups of four hex digits joined by dots (an
// object's name must be a DNS subdomain, so "::" cannot be kept). It is
// pure: no API call.
//
// The fields follow OpenShift's API exactly. Beyond them, the CRD refuses
// a name that is not an address in that convention, in its canonical form
// (one object per address), and an empty spec.node; status can only be
// written through the status subresource, and an admission policy
// (deploy/admission/cloudprivateipconfig-status-policy.yaml) lets no one
// but egressflow's controller write it.
//
// +k8s:deepcopy-gen=package
// +groupName=cloud.network.openshift.io
// +groupGoName=CloudNetwork
// +kubebuilder:object:generate=true
package v1
