package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressIP is a CRD allowing the user to define a fixed source IP for all
// egress traffic originating from any pods which match the EgressIP
// resource according to its spec definition.
//
// Cluster-scoped. As in the reference, there is no status subresource:
// status is written through the object itself, with every PUT and PATCH.
//
// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressips,singular=egressip,shortName=eip,scope=Cluster
// +kubebuilder:printcolumn:name="EgressIPs",type=string,JSONPath=".spec.egressIPs[*]"
// +kubebuilder:printcolumn:name="Assigned Node",type=string,JSONPath=".status.items[*].node"
// +kubebuilder:printcolumn:name="Assigned EgressIPs",type=string,JSONPath=".status.items[*].egressIP"
type EgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Specification of the desired behavior of EgressIP.
	// +required
	Spec EgressIPSpec `json:"spec"`
	// Observed status of EgressIP. Read-only.
	// +optional
	Status EgressIPStatus `json:"status,omitempty"`
}

// MaxEgressIPAddresses bounds spec.egressIPs and status.items. The
// reference has no bound. Two addresses of one EgressIP never share a node,
// so a list longer than the cluster's egress nodes can never be held in
// full: 64 addresses need 64 egress nodes, more than a cluster usually
// dedicates to egress. The bound also keeps the CRD's duplicate check,
// which compares every address with every other (64² comparisons), within
// the API server's CEL cost budget; a larger bound costs quadratically more
// per write. The MaxItems markers on EgressIPSpec.EgressIPs and
// EgressIPStatus.Items repeat it (markers cannot name a constant);
// TestEgressIPCRDBoundsMatchConstant keeps them equal.
const MaxEgressIPAddresses = 64

// EgressIPSpec is a desired state description of EgressIP.
type EgressIPSpec struct {
	// EgressIPs is the list of egress IP addresses requested. Can be IPv4 and/or IPv6.
	// This field is mandatory.
	// At least one and at most 64 addresses (egressflow's bound, see
	// MaxEgressIPAddresses), each an address, not a CIDR, and no address
	// twice (compared as addresses: 2001:db8::1 and 2001:DB8:0::1 are the
	// same).
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="each egressIPs entry must be an IPv4 or IPv6 address such as 192.0.2.10 or 2001:db8::10, not a CIDR"
	// +kubebuilder:validation:XValidation:rule="self.all(x, !isIP(x) || self.exists_one(y, isIP(y) && ip(y) == ip(x)))",message="egressIPs must not list an address twice"
	EgressIPs []string `json:"egressIPs"`
	// NamespaceSelector applies the egress IP only to the namespace(s) whose label
	// matches this definition. This field is mandatory.
	// An empty selector ({}) selects every namespace.
	// +required
	NamespaceSelector LabelSelector `json:"namespaceSelector"`
	// PodSelector applies the egress IP only to the pods whose label
	// matches this definition. This field is optional, and in case it is not set:
	// results in the egress IP being applied to all pods in the namespace(s)
	// matched by the NamespaceSelector. In case it is set: is intersected with
	// the NamespaceSelector, thus applying the egress IP to the pods
	// (in the namespace(s) already matched by the NamespaceSelector) which
	// match this pod selector.
	// +optional
	PodSelector LabelSelector `json:"podSelector,omitempty"`
}

// EgressIPStatus is the observed state of EgressIP: which node holds each
// address.
type EgressIPStatus struct {
	// The list of assigned egress IPs and their corresponding node assignment.
	// Always sent (the field has no omitempty, as in the reference), but
	// the CRD does not require it, unlike the reference: a Go client sends an
	// empty list as null, which the API server prunes, so a required items
	// would refuse every object created with an empty status.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Items []EgressIPStatusItem `json:"items"`

	// Conditions say why the EgressIP's addresses are, or are not, all
	// held by a node. Not part of the reference API; clients that do not
	// know it can ignore it. The CRD has no status subresource, so
	// metadata.generation also counts status writes: a condition's
	// observedGeneration is the generation its writer read.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressIPStatusItem is the per node status, for those egress IPs who have
// been assigned.
type EgressIPStatusItem struct {
	// Assigned node name
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Assigned egress IP
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="status.items[].egressIP must be an IPv4 or IPv6 address"
	EgressIP string `json:"egressIP"`
}

// EgressIPList contains a list of EgressIP
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// List of EgressIP.
	Items []EgressIP `json:"items"`
}
