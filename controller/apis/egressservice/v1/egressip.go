package v1

import (
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressIPUnheld is what a selected pod's egress of one family does while
// its EgressIP has no held address of that family (no node can hold one):
// one choice for the whole cluster, every agent's and the cluster
// component's (EGRESSIP_UNHELD in deploy/cluster.env): not a field of the
// API, but what its Assigned condition tells users. It covers only that
// case: a held address whose holder's bridge MAC is unknown, or whose
// holder is this node while it is fenced, still drops the pod's egress,
// as the address will be usable again soon and another node may be
// sending with it meanwhile.
type EgressIPUnheld string

const (
	// EgressIPUnheldDrop, the default, fails closed: the pod guard does
	// not admit the pod, so its egress of that family is dropped on its
	// node until an address is held. An egress IP is a promise to the
	// allow-lists outside the cluster that the selected pods' traffic
	// comes from it and from nowhere else; dropping keeps the promise at
	// the cost of an outage while no node can hold the address.
	EgressIPUnheldDrop EgressIPUnheld = "drop"
	// EgressIPUnheldNodeIP is the reference's behaviour: the pod's
	// egress of that family leaves as the egress of its node's other
	// pods does (the pod guard admits it): with its own pod IP on a node
	// that routes pod traffic without masquerading, as egressflow's node
	// layout does, or with the node's IP where the node masquerades it.
	// It trades the promise for availability: an allow-list that admits
	// only the egress IP drops the traffic anyway, and one that admits
	// the nodes' or pods' addresses lets it through.
	EgressIPUnheldNodeIP EgressIPUnheld = "node-ip"
)

// ParseEgressIPUnheld reads an EGRESSIP_UNHELD value; "" is the default,
// drop.
func ParseEgressIPUnheld(s string) (EgressIPUnheld, error) {
	switch u := EgressIPUnheld(s); u {
	case "", EgressIPUnheldDrop:
		return EgressIPUnheldDrop, nil
	case EgressIPUnheldNodeIP:
		return u, nil
	}
	return "", fmt.Errorf("%q is neither %q (the default: a selected pod's egress is dropped while no node holds an address of its family) nor %q (it leaves through the pod's node meanwhile)",
		s, EgressIPUnheldDrop, EgressIPUnheldNodeIP)
}

// LeavesThroughNode: a selected pod whose EgressIP has no held address of
// its family leaves as its node's other pods do.
func (u EgressIPUnheld) LeavesThroughNode() bool { return u == EgressIPUnheldNodeIP }

// ParseEgressIP reads an address as spec.egressIPs and status.items[].egressIP
// hold it: an IPv4 or IPv6 address with no zone and not IPv4-mapped, which
// is what the CRD admits (isIP); false for anything else, which an object
// stored before the CRD validated may hold. The one reader of both fields.
func ParseEgressIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, false
	}
	return a, true
}

// Addresses returns the entries of spec.egressIPs that are addresses
// (ParseEgressIP), each once, in spec order.
func (s *EgressIPSpec) Addresses() []netip.Addr {
	out := make([]netip.Addr, 0, len(s.EgressIPs))
	for _, e := range s.EgressIPs {
		if a, ok := ParseEgressIP(e); ok && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

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
// TestCRDBoundsMatchConstants (test/codegen) keeps them equal.
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
