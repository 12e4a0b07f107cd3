package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressRouter is a feature allowing the user to define an egress router
// that acts as a bridge between pods and external systems. The egress router runs
// a service that redirects egress traffic originating from a pod or a group of
// pods to a remote external system or multiple destinations as per configuration.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressrouters,singular=egressrouter,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=".status.holder"
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=".status.conditions[?(@.type==\"Available\")].status"
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=".status.conditions[?(@.type==\"Degraded\")].status"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type EgressRouter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Specification of the desired egress router.
	// +required
	Spec EgressRouterSpec `json:"spec"`
	// Observed status of EgressRouter.
	// +optional
	Status EgressRouterStatus `json:"status,omitempty"`
}

// MaxEgressRouterRules bounds spec.redirect.redirectRules: far more ports
// than one router's Service carries in practice, and few enough that the
// CEL rule relating each rule's destination to the reserved addresses
// stays within the API server's cost budget. The MaxItems marker on
// RedirectConfig repeats it (markers cannot name a constant);
// TestCRDBoundsMatchConstants keeps them equal.
const MaxEgressRouterRules = 256

// EgressRouterSpec is the desired egress router: its mode, interface and
// reserved addresses, and the configuration of its mode (redirect).
//
// +kubebuilder:validation:XValidation:rule="has(self.redirect)",message="mode Redirect needs redirect: a fallbackIP, redirectRules, or both"
// +kubebuilder:validation:XValidation:rule="!has(self.redirect) || !has(self.redirect.redirectRules) || self.redirect.redirectRules.all(r, !isIP(r.destinationIP) || self.addresses.exists(a, isCIDR(a.ip) && cidr(a.ip).ip().family() == ip(r.destinationIP).family()))",message="each redirect rule's destinationIP needs an address of its family in addresses"
// +kubebuilder:validation:XValidation:rule="!has(self.redirect) || !has(self.redirect.fallbackIP) || !isIP(self.redirect.fallbackIP) || self.addresses.exists(a, isCIDR(a.ip) && cidr(a.ip).ip().family() == ip(self.redirect.fallbackIP).family())",message="fallbackIP needs an address of its family in addresses"
type EgressRouterSpec struct {
	// Mode depicts the mode that is used for the egress router. The default mode is "Redirect" and is the only supported mode currently.
	// +required
	// +kubebuilder:default=Redirect
	Mode EgressRouterMode `json:"mode"`
	// Redirect represents the configuration parameters specific to redirect mode.
	// +optional
	Redirect *RedirectConfig `json:"redirect,omitempty"`
	// Specification of interface to create/use. The default is macvlan.
	// Currently only macvlan is supported.
	// +required
	// +kubebuilder:default={"macvlan": {"mode": "Bridge"}}
	NetworkInterface EgressRouterInterface `json:"networkInterface"`
	// List of IP addresses to configure on the pod's secondary interface.
	// egressflow serves them from the holder node: at most one per family.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:rule="self.all(a, !isCIDR(a.ip) || self.exists_one(b, isCIDR(b.ip) && cidr(b.ip).ip().family() == cidr(a.ip).ip().family()))",message="addresses may hold one address of each family, not two of one"
	Addresses []EgressRouterAddress `json:"addresses"`
}

// EgressRouterMode defines the different types of modes that are supported for the egress router interface.
// The default mode is "Redirect" and is the only supported mode currently.
//
// +kubebuilder:validation:Enum=Redirect
type EgressRouterMode string

// EgressRouterModeRedirect: connections to the router are redirected
// (DNAT) to the destinations its rules name, from its reserved address.
const EgressRouterModeRedirect EgressRouterMode = "Redirect"

// RedirectConfig represents the configuration parameters specific to redirect mode.
//
// +kubebuilder:validation:XValidation:rule="(has(self.fallbackIP) && size(self.fallbackIP) > 0) || (has(self.redirectRules) && size(self.redirectRules) > 0)",message="redirect needs a fallbackIP or at least one redirect rule"
type RedirectConfig struct {
	// List of L4RedirectRules that define the DNAT redirection from the pod to the destination in redirect mode.
	// A port and protocol may appear in one rule only.
	// +optional
	// +listType=map
	// +listMapKey=port
	// +listMapKey=protocol
	// +kubebuilder:validation:MaxItems=256
	RedirectRules []L4RedirectRule `json:"redirectRules,omitempty"`
	// FallbackIP specifies the remote destination's IP address. Can be IPv4 or IPv6.
	// If no redirect rules are specified, all traffic from the router are redirected to this IP.
	// If redirect rules are specified, then any connections on any other port (undefined in the rules) on the router will be redirected to this IP.
	// If redirect rules are specified and no fallback IP is provided, connections on other ports will simply be rejected.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || isIP(self)",message="fallbackIP must be an IPv4 or IPv6 address such as 203.0.113.5 or 2001:db8::5"
	FallbackIP string `json:"fallbackIP,omitempty"`
}

// L4RedirectRule defines a DNAT redirection from a given port to a destination IP and port.
type L4RedirectRule struct {
	// IP specifies the remote destination's IP address. Can be IPv4 or IPv6.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="destinationIP must be an IPv4 or IPv6 address such as 203.0.113.5 or 2001:db8::5"
	DestinationIP string `json:"destinationIP"`
	// Port is the port number to which clients should send traffic to be redirected.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Protocol can be TCP, SCTP or UDP.
	// +required
	Protocol ProtocolType `json:"protocol"`
	// TargetPort allows specifying the port number on the remote destination to which the traffic gets redirected to.
	// If unspecified, the value from "Port" is used.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort int32 `json:"targetPort,omitempty"`
}

// ProtocolType defines the protocol types that are supported.
//
// +kubebuilder:validation:Enum=TCP;UDP;SCTP
type ProtocolType string

// The protocols a redirect rule may name.
const (
	ProtocolTypeTCP  ProtocolType = "TCP"
	ProtocolTypeUDP  ProtocolType = "UDP"
	ProtocolTypeSCTP ProtocolType = "SCTP"
)

// EgressRouterInterface contains the configuration of interface to create/use.
type EgressRouterInterface struct {
	// Arguments specific to the interfaceType macvlan
	// +kubebuilder:default={"mode": "Bridge"}
	Macvlan MacvlanConfig `json:"macvlan"`
}

// MacvlanConfig consists of arguments specific to the macvlan EgressRouterInterfaceType.
type MacvlanConfig struct {
	// Mode depicts the mode that is used for the macvlan interface; one of Bridge|Private|VEPA|Passthru. The default mode is "Bridge".
	// +required
	// +kubebuilder:default=Bridge
	Mode MacvlanMode `json:"mode"`
	// Name of the master interface. Need not be specified if it can be inferred from the IP address.
	// When given, only a node whose uplink is this interface may serve the router.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/:\s]+$`
	Master string `json:"master,omitempty"`
}

// MacvlanMode defines the different types of modes that are supported for the macvlan interface.
// source: https://man7.org/linux/man-pages/man8/ip-link.8.html
//
// +kubebuilder:validation:Enum=Bridge;Private;VEPA;Passthru
type MacvlanMode string

// The macvlan modes. egressflow serves every one the same way, from
// OpenFlow on the holder's bridge: the mode chose how the reference's pod
// shared the uplink with its node.
const (
	MacvlanModeBridge   MacvlanMode = "Bridge"
	MacvlanModePrivate  MacvlanMode = "Private"
	MacvlanModeVEPA     MacvlanMode = "VEPA"
	MacvlanModePassthru MacvlanMode = "Passthru"
)

// EgressRouterAddress contains a pair of IP CIDR and gateway to be configured on the router's interface
//
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !isCIDR(self.ip) || ip(self.gateway).family() == cidr(self.ip).ip().family()",message="gateway must be of the family of ip"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !isCIDR(self.ip) || ip(self.gateway).family() != cidr(self.ip).ip().family() || (ip(self.gateway).family() == 6 && ip(self.gateway).isLinkLocalUnicast()) || cidr(self.ip).containsIP(self.gateway)",message="gateway must be an address of ip's subnet (or, in IPv6, a link-local address): the router reaches it directly"
type EgressRouterAddress struct {
	// IP is the address to configure on the router's interface. Can be IPv4 or IPv6.
	// An address with its prefix length, such as 192.0.2.10/24.
	// +required
	// +kubebuilder:validation:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="ip must be an address with its prefix length, such as 192.0.2.10/24 or 2001:db8::10/64"
	IP string `json:"ip"`
	// IP address of the next-hop gateway, if it cannot be automatically determined. Can be IPv4 or IPv6.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || isIP(self)",message="gateway must be an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1"
	Gateway string `json:"gateway,omitempty"`
}

// EgressRouterStatus contains the observed status of EgressRouter. Read-only.
type EgressRouterStatus struct {
	// Observed status of the egress router
	// +required
	// +listType=map
	// +listMapKey=type
	Conditions []EgressRouterStatusCondition `json:"conditions"`
	// Holder is the node that serves the router: it answers for the
	// addresses and redirects the connections. Empty while none can.
	// +optional
	Holder string `json:"holder,omitempty"`
}

// EgressRouterStatusConditionType is an aspect of the router's state.
//
// +kubebuilder:validation:Enum=Available;Progressing;Degraded
type EgressRouterStatusConditionType string

// The conditions an EgressRouter's status holds.
const (
	// EgressRouterAvailable: the router redirects: a holder serves it.
	EgressRouterAvailable EgressRouterStatusConditionType = "Available"
	// EgressRouterProgressing: a holder is being chosen or is taking over.
	EgressRouterProgressing EgressRouterStatusConditionType = "Progressing"
	// EgressRouterDegraded: the router cannot be served as asked; the
	// reason and message say why.
	EgressRouterDegraded EgressRouterStatusConditionType = "Degraded"
)

// ConditionStatus is the status of a condition: True, False or Unknown.
//
// +kubebuilder:validation:Enum=True;False;Unknown
type ConditionStatus string

// The statuses of a condition.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// EgressRouterStatusCondition represents the state of the egress router's
// managed and monitored components.
type EgressRouterStatusCondition struct {
	// Type specifies the aspect reported by this condition; one of Available, Progressing, Degraded
	// +required
	Type EgressRouterStatusConditionType `json:"type"`
	// Status of the condition, one of True, False, Unknown.
	// +required
	Status ConditionStatus `json:"status"`
	// LastTransitionTime is the time of the last update to the current status property.
	// +optional
	// +nullable
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// Reason is the CamelCase reason for the condition's current status.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message provides additional information about the current condition.
	// This is only to be consumed by humans. It may contain Line Feed characters (U+000A), which should be rendered as new lines.
	// +optional
	Message string `json:"message,omitempty"`
}

// EgressRouterList is the list of egress router pods requested.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressRouterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressRouter `json:"items"`
}
