package v1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressFirewallName is the only name an EgressFirewall may have: only the
// object named default in a namespace counts, as in the reference, and the
// CRD refuses any other name.
const EgressFirewallName = "default"

// EgressFirewall describes the current egress firewall for a Namespace.
// Traffic from a pod to an IP address outside the cluster will be checked
// against each EgressFirewallRule in the pod's namespace's EgressFirewall,
// in order. If no rule matches (or no EgressFirewall is present) then the
// traffic will be allowed by default.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressfirewalls,singular=egressfirewall,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="EgressFirewall must be named default: only the object named default in a namespace counts"
// +kubebuilder:printcolumn:name="EgressFirewall Status",type=string,JSONPath=".status.status"
// +kubebuilder:printcolumn:name="Details",type=string,JSONPath=".status.messages[0]"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type EgressFirewall struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Specification of the desired behavior of EgressFirewall.
	// +required
	Spec EgressFirewallSpec `json:"spec"`
	// Observed status of EgressFirewall
	// +optional
	Status EgressFirewallStatus `json:"status,omitempty"`
}

// MaxEgressFirewallRules bounds spec.egress: the reference gives rule i the
// priority 10000 − i and keeps the priorities down to 2000 for the
// firewall (ovn-kubernetes go-controller/pkg/types/const.go,
// EgressFirewallStartPriority and MinimumReservedEgressFirewallPriority),
// so it orders at most 8,000 rules per namespace. The bound also keeps the
// CEL rules inside each rule within the API server's cost budget, which
// multiplies a nested rule's cost by the most items its list may hold.
// EgressFirewallSpec.Egress's MaxItems marker repeats it (markers cannot
// name a constant); TestFirewallCRDBoundsMatchConstants keeps them equal.
const MaxEgressFirewallRules = 8000

// EgressFirewallSpec is a desired state description of EgressFirewall.
type EgressFirewallSpec struct {
	// a collection of egress firewall rule objects.
	// Rule order is precedence: the first rule whose destination and ports
	// match a packet decides whether it is allowed or denied.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8000
	Egress []EgressFirewallRule `json:"egress"`
}

// EgressFirewallRuleType says what a matching rule does with a packet.
// +kubebuilder:validation:Enum=Allow;Deny
type EgressFirewallRuleType string

const (
	// EgressFirewallRuleAllow lets the packet go on.
	EgressFirewallRuleAllow EgressFirewallRuleType = "Allow"
	// EgressFirewallRuleDeny drops the packet.
	EgressFirewallRuleDeny EgressFirewallRuleType = "Deny"
)

// EgressFirewallRule is a single egressfirewall rule object
type EgressFirewallRule struct {
	// type marks this as an "Allow" or "Deny" rule
	// +required
	Type EgressFirewallRuleType `json:"type"`
	// ports specify what ports and protocols the rule applies to
	// With no ports, the rule applies to every protocol and port.
	// +optional
	// +listType=atomic
	Ports []EgressFirewallPort `json:"ports,omitempty"`
	// to is the target that traffic is allowed/denied to
	// +required
	To EgressFirewallDestination `json:"to"`
}

// EgressFirewallPort specifies the port to allow or deny traffic to
type EgressFirewallPort struct {
	// protocol (tcp, udp, sctp) that the traffic must match.
	// Spelled in capitals, as the reference's CRD requires.
	// +required
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol string `json:"protocol"`
	// port that the traffic must match
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// dnsName's check is split into short rules: the API server charges a
// regular expression for the string's most bytes times the expression's
// length, times the 8,000 rules, and one expression for the whole grammar
// exceeded the budget 2.2 times (tried on the v1.36 API server).

// EgressFirewallDestination is the target that traffic is either allowed or
// denied to. Exactly one of its fields is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.cidrSelector), has(self.dnsName), has(self.nodeSelector)].filter(x, x).size() == 1",message="exactly one of cidrSelector, dnsName and nodeSelector must be set"
type EgressFirewallDestination struct {
	// cidrSelector is the CIDR range to allow/deny traffic to. If this is set, dnsName and nodeSelector must be unset.
	// An IPv4 or IPv6 CIDR; host bits may be set, and are ignored, as the
	// reference's net.ParseCIDR does.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidrSelector must be an IPv4 or IPv6 CIDR such as 10.0.0.0/8 or 2001:db8::/32"
	CIDRSelector string `json:"cidrSelector,omitempty"`
	// dnsName is the domain name to allow/deny traffic to. If this is set, cidrSelector and nodeSelector must be unset.
	// Labels of letters, digits and hyphens (not at either end of a label),
	// an optional final dot; "*." may stand as the first label only, for
	// every name one label below the rest.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^([*][.])?[-.0-9A-Za-z]+$')",message="dnsName must be a DNS name such as www.example.com: letters, digits, hyphens and dots, and a wildcard only as a whole first label (*.example.com)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-.]|[.][-.]|-[.]|-$')",message="dnsName must be a DNS name such as www.example.com: no empty label, and no label that begins or ends with a hyphen"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[^.]{64}')",message="dnsName must be a DNS name such as www.example.com: each label at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="!isIP(self)",message="dnsName must be a name, not an address: use cidrSelector for an address"
	DNSName string `json:"dnsName,omitempty"`
	// nodeSelector will allow/deny traffic to the Kubernetes node IP of selected nodes. If this is set, cidrSelector and DNSName must be unset.
	// The addresses are the selected nodes' InternalIP and ExternalIP.
	// +optional
	NodeSelector *LabelSelector `json:"nodeSelector,omitempty"`
}

// DNSNameKey is the form under which a dnsName's addresses are looked up,
// resolved and filed: lower case, without a final dot. DNS names compare
// without regard to case, and "example.com." is "example.com". A wildcard
// keeps its "*." ("*.example.com").
func DNSNameKey(dnsName string) string {
	return strings.ToLower(strings.TrimSuffix(dnsName, "."))
}

// EgressFirewallStatus is the observed state of EgressFirewall
type EgressFirewallStatus struct {
	// Whether the EgressFirewall is applied, in the words of
	// OVN-Kubernetes' clients: "EgressFirewall Rules applied" once its
	// current generation is applied on every node, "EgressFirewall Rules
	// not correctly applied" when a rule cannot be, empty while it is not
	// yet applied everywhere.
	// +optional
	Status string `json:"status,omitempty"`
	// Messages: first one line saying where the current generation is
	// applied (for example "Pending on 1 of 3 nodes: node-2"), then the
	// rules that cannot be applied, and why, then the dnsNames that some
	// nodes have no answer for (for example "node-2: dnsName
	// api.example.com is not resolved yet").
	// +optional
	// +listType=atomic
	Messages []string `json:"messages,omitempty"`
}

// EgressFirewallList contains a list of EgressFirewall
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressFirewallList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressFirewall `json:"items"`
}
