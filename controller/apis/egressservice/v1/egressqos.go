package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressQoSName is the only name an EgressQoS may have: only the object
// named default in a namespace counts, as in the reference, and the CRD
// refuses any other name.
const EgressQoSName = "default"

// EgressQoS is a CRD that allows the user to define a DSCP value for pods
// egress traffic on its namespace to specified CIDRs. Traffic from these
// pods will be checked against each EgressQoSRule in the namespace's
// EgressQoS, and if there is a match the traffic is marked with the
// relevant DSCP value.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressqoses,singular=egressqos,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="EgressQoS must be named default: only the object named default in a namespace counts"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.status"
// +kubebuilder:printcolumn:name="Details",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type EgressQoS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EgressQoSSpec   `json:"spec,omitempty"`
	Status EgressQoSStatus `json:"status,omitempty"`
}

// MaxEgressQoSRules bounds spec.egress. The reference gives rule i the
// priority 1000 − i, so it cannot order more than 1000 rules either. The
// bound also keeps the CEL rules on each rule's podSelector within the API
// server's cost budget, which multiplies a nested rule's cost by the most
// items its list may hold; with no bound the server refuses the CRD.
// EgressQoSSpec.Egress's MaxItems marker repeats it (markers cannot name a
// constant); TestCRDBoundsMatchConstants keeps the two equal.
const MaxEgressQoSRules = 1000

// EgressQoSSpec defines the desired state of EgressQoS
type EgressQoSSpec struct {
	// a collection of Egress QoS rule objects.
	// Rule order is precedence: a packet gets the DSCP value of the first
	// rule that selects its pod and whose dstCIDR contains its destination.
	// +required
	// +kubebuilder:validation:MaxItems=1000
	Egress []EgressQoSRule `json:"egress"`
}

// EgressQoSRule marks the egress of the pods it selects, to the
// destinations in its dstCIDR, with its DSCP value.
type EgressQoSRule struct {
	// DSCP marking value for matching pods' traffic.
	// The six bits of the DSCP field (RFC 2474): the top of IPv4's TOS byte
	// and of IPv6's traffic class.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	DSCP int32 `json:"dscp"`

	// DstCIDR specifies the destination's CIDR. Only traffic heading
	// to this CIDR will be marked with the DSCP value.
	// This field is optional, and in case it is not set the rule is applied
	// to all egress traffic regardless of the destination.
	// An IPv4 or IPv6 CIDR; host bits may be set, and are ignored, as the
	// reference's net.ParseCIDR does.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="dstCIDR must be an IPv4 or IPv6 CIDR such as 10.0.0.0/8 or 2001:db8::/32"
	DstCIDR string `json:"dstCIDR,omitempty"`

	// PodSelector applies the QoS rule only to the pods in the namespace whose label
	// matches this definition. This field is optional, and in case it is not set
	// results in the rule being applied to all pods in the namespace.
	// +optional
	PodSelector LabelSelector `json:"podSelector,omitempty"`
}

// EgressQoSStatus defines the observed state of EgressQoS
type EgressQoSStatus struct {
	// Whether the EgressQoS is applied, in the words of OVN-Kubernetes'
	// clients: "EgressQoS Rules applied" once its current generation is
	// applied on every node, "EgressQoS Rules not correctly applied" when
	// a rule cannot be, empty while it is not yet applied everywhere. The
	// conditions say more.
	// +optional
	Status string `json:"status,omitempty"`

	// Conditions say whether the rules are applied, and why not where
	// something cannot be (for example a dstCIDR of a family the cluster
	// does not have), with a reason code.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressQoSList contains a list of EgressQoS
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressQoSList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressQoS `json:"items"`
}
