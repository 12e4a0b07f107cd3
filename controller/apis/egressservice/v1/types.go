package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SourceIPMode says which source IP the egress traffic of a service's
// endpoint pods gets.
// +kubebuilder:validation:Enum=LoadBalancerIP;Network
type SourceIPMode string

const (
	// SourceIPByLoadBalancerIP SNATs the endpoints' egress traffic to the
	// Service's load-balancer ingress IP, on one chosen host node. An empty
	// sourceIPBy means the same.
	SourceIPByLoadBalancerIP SourceIPMode = "LoadBalancerIP"
	// SourceIPByNetwork routes the endpoints' egress traffic through the
	// routing table named by spec.network on every node, with whatever
	// source IP that network's masquerade rules give.
	SourceIPByNetwork SourceIPMode = "Network"
)

// HostAll is the status.host of an EgressService with sourceIPBy=Network:
// every node handles its own endpoints' traffic.
const HostAll = "ALL"

// EgressService is a CRD that allows the user to request that the source
// IP of egress packets originating from all of the pods that are endpoints
// of the corresponding LoadBalancer Service would be its ingress IP.
// In addition, it allows the user to request that egress packets originating from
// all of the pods that are endpoints of the LoadBalancer service would use a different
// network than the main one.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressservices,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="SourceIPBy",type=string,JSONPath=".spec.sourceIPBy"
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=".status.host"
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=".spec.network"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type EgressService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EgressServiceSpec   `json:"spec,omitempty"`
	Status EgressServiceStatus `json:"status,omitempty"`
}

// EgressServiceSpec defines the desired state of EgressService
type EgressServiceSpec struct {
	// Determines the source IP of egress traffic originating from the pods backing the LoadBalancer Service.
	// When `LoadBalancerIP` the source IP is set to its LoadBalancer ingress IP.
	// When `Network` the source IP is set according to the interface of the Network,
	// leveraging the masquerade rules that are already in place.
	// Typically these rules specify SNAT to the IP of the outgoing interface,
	// which means the packet will typically leave with the IP of the node.
	// +optional
	SourceIPBy SourceIPMode `json:"sourceIPBy,omitempty"`

	// Allows limiting the nodes that can be selected to handle the service's traffic when sourceIPBy=LoadBalancerIP.
	// When present only a node whose labels match the specified selectors can be selected
	// for handling the service's traffic.
	// When it is not specified any node in the cluster can be chosen to manage the service's traffic.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="nodeSelector.matchExpressions: operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="nodeSelector.matchExpressions: operators In and NotIn need at least one value"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="nodeSelector.matchExpressions: operators Exists and DoesNotExist take no values"
	NodeSelector metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// The network which this service should send egress and corresponding ingress replies to.
	// This is typically implemented as VRF mapping, representing a numeric id or string name
	// of a routing table which by omission uses the default host routing.
	// +optional
	Network string `json:"network,omitempty"`
}

// EgressServiceStatus defines the observed state of EgressService
type EgressServiceStatus struct {
	// The name of the node selected to handle the service's traffic.
	// In case sourceIPBy=Network the field will be set to "ALL".
	// +required
	Host string `json:"host"`

	// Conditions say why the service has, or has not, a host. The Ready
	// condition's reason is a code such as Assigned, NoEndpoints or
	// NoMatchingNode. Not part of the reference API; clients that do not know
	// it can ignore it.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressServiceList contains a list of EgressService
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressService `json:"items"`
}
