package v1

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/controller/reasons"
)

// AdminPolicyBasedExternalRoute is a CRD allowing the cluster
// administrators to configure policies for external gateway IPs to be
// applied to all the pods contained in selected namespaces. Egress traffic
// from the pods that belong to the selected namespaces to outside the
// cluster is routed through these external gateway IPs.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=adminpolicybasedexternalroutes,singular=adminpolicybasedexternalroute,scope=Cluster,shortName=apbexternalroute
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.status"
// +kubebuilder:printcolumn:name="Last Update",type=date,JSONPath=".status.lastTransitionTime"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type AdminPolicyBasedExternalRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   AdminPolicyBasedExternalRouteSpec `json:"spec"`
	Status AdminPolicyBasedRouteStatus       `json:"status,omitempty"`
}

// MaxExternalRouteHops bounds each of spec.nextHops.static and .dynamic:
// as many equal-cost next hops as Linux routes take, far beyond what an
// administrator lists. The bound also keeps the CEL rules on the hops'
// selectors within the API server's cost budget (see LabelSelector). The
// MaxItems markers on ExternalNextHops repeat it (markers cannot name a
// constant); TestCRDBoundsMatchConstants keeps them equal.
const MaxExternalRouteHops = 64

// AdminPolicyBasedExternalRouteSpec defines the desired state of AdminPolicyBasedExternalRoute
type AdminPolicyBasedExternalRouteSpec struct {
	// From defines the selectors that will determine the target namespaces to this CR.
	// +required
	From ExternalNetworkSource `json:"from"`
	// NextHops defines two types of hops: Static and Dynamic. Each hop defines at least one external gateway IP.
	// +required
	NextHops ExternalNextHops `json:"nextHops"`
}

// ExternalNetworkSource contains the selectors used to determine the namespaces where the policy will be applied to
type ExternalNetworkSource struct {
	// NamespaceSelector defines a selector to be used to determine which namespaces will be targeted by this CR
	// +required
	NamespaceSelector LabelSelector `json:"namespaceSelector"`
}

// ExternalNextHops contains slices of StaticHops and DynamicHops structures. Minimum is one StaticHop or one DynamicHop.
//
// +kubebuilder:validation:XValidation:rule="(has(self.static) && size(self.static) > 0) || (has(self.dynamic) && size(self.dynamic) > 0)",message="nextHops needs at least one static or dynamic hop"
type ExternalNextHops struct {
	// StaticHops defines a slice of StaticHop. This field is optional.
	// An address may appear once, however it is spelled.
	// +optional
	// +listType=map
	// +listMapKey=ip
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(x, !isIP(x.ip) || self.exists_one(y, isIP(y.ip) && ip(y.ip) == ip(x.ip)))",message="static must not list an address twice"
	StaticHops []StaticHop `json:"static,omitempty"`
	// DynamicHops defines a slices of DynamicHop. This field is optional.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	DynamicHops []DynamicHop `json:"dynamic,omitempty"`
}

// StaticHop defines the configuration of a static IP that acts as an external Gateway Interface. IP field is mandatory.
type StaticHop struct {
	// IP defines the static IP to be used for egress traffic. The IP can be either IPv4 or IPv6.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="ip must be an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1"
	IP string `json:"ip"`
	// BFDEnabled determines if the interface implements the Bidirectional Forward Detection protocol. Defaults to false.
	// +optional
	BFDEnabled bool `json:"bfdEnabled,omitempty"`
}

// DynamicHop defines the configuration for a dynamic external gateway interface.
// These interfaces are wrapped around a pod object that resides inside the cluster.
// The field NetworkAttachmentName captures the name of the multus network name to use when retrieving the gateway IP to use.
// The PodSelector and the NamespaceSelector are mandatory fields.
type DynamicHop struct {
	// PodSelector defines the selector to filter the pods that are external gateways.
	// +required
	PodSelector LabelSelector `json:"podSelector"`
	// NamespaceSelector defines a selector to filter the namespaces where the pod gateways are located.
	// +required
	NamespaceSelector LabelSelector `json:"namespaceSelector"`
	// NetworkAttachmentName determines the multus network name to use when retrieving the pod IPs that will be used as the gateway IP.
	// When this field is empty, the logic assumes that the pod is configured with HostNetwork and is using the node's IP as gateway.
	// A name, or namespace/name, as in the pod's k8s.v1.cni.cncf.io/network-status annotation.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="networkAttachmentName must be a name or namespace/name"
	NetworkAttachmentName string `json:"networkAttachmentName,omitempty"`
	// BFDEnabled determines if the interface implements the Bidirectional Forward Detection protocol. Defaults to false.
	// +optional
	BFDEnabled bool `json:"bfdEnabled,omitempty"`
}

// The values of AdminPolicyBasedRouteStatus.Status, as the reference
// writes them.
const (
	// ExternalRouteApplied: the policy's hops are in place on every node
	// that runs a selected pod.
	ExternalRouteApplied = "Success"
	// ExternalRouteNotApplied: a node could not apply the policy; the
	// messages say which and why.
	ExternalRouteNotApplied = "Fail"
)

// AdminPolicyBasedRouteStatus contains the observed status of the AdminPolicyBased route types.
type AdminPolicyBasedRouteStatus struct {
	// Captures the time when the last change was applied.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// An array of Human-readable messages indicating details about the status of the object.
	// +optional
	// +listType=atomic
	Messages []string `json:"messages,omitempty"`
	// A concise indication of whether the AdminPolicyBasedRoute resource is applied with success
	// (Success), or not (Fail).
	// +optional
	Status string `json:"status,omitempty"`
}

// AdminPolicyBasedExternalRouteList contains a list of AdminPolicyBasedExternalRoutes
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type AdminPolicyBasedExternalRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdminPolicyBasedExternalRoute `json:"items"`
}

// The one reading of an AdminPolicyBasedExternalRoute's spec: the node
// agents route what it gives, and the cluster component reports what it
// refuses, in the same words.

// StaticNextHop is a static next hop as read: its address and whether BFD
// follows it.
//
// +k8s:deepcopy-gen=false
type StaticNextHop struct {
	Addr netip.Addr
	BFD  bool
}

// DynamicNextHop is a dynamic next hop as read: its position in
// spec.nextHops.dynamic, its selectors, or the problem that keeps it from
// selecting anything.
//
// +k8s:deepcopy-gen=false
type DynamicNextHop struct {
	Index                 int
	Namespaces, Pods      labels.Selector
	NetworkAttachmentName string
	BFD                   bool
	// Problem, if not nil, is why the hop selects nothing (a selector
	// that does not parse); its selectors are then nil.
	Problem *RuleProblem
}

// Read reads the spec: the namespace selector, the static hops that are
// addresses with a problem for each that is not, and the dynamic hops in
// order, each with its selectors or its problem. A namespace selector that
// does not parse makes the policy select nothing: from is then nil, and
// its problem the only one (the rest is not read). Problems lists them
// all.
func (s AdminPolicyBasedExternalRouteSpec) Read() (from labels.Selector, static []StaticNextHop, dynamic []DynamicNextHop, problems []RuleProblem) {
	from, err := metav1.LabelSelectorAsSelector(s.From.NamespaceSelector.AsMeta())
	if err != nil {
		return nil, nil, nil, []RuleProblem{{Reason: reasons.InvalidSelector, Message: "spec.from.namespaceSelector: " + err.Error()}}
	}
	for i, h := range s.NextHops.StaticHops {
		addr, err := netip.ParseAddr(h.IP)
		if err != nil || addr.Zone() != "" || addr.Is4In6() {
			problems = append(problems, RuleProblem{Rule: i, Reason: reasons.InvalidRule,
				Message: fmt.Sprintf("spec.nextHops.static[%d]: %q is not an address; the hop is skipped", i, h.IP)})
			continue
		}
		static = append(static, StaticNextHop{Addr: addr, BFD: h.BFDEnabled})
	}
	for i, h := range s.NextHops.DynamicHops {
		d := DynamicNextHop{Index: i, NetworkAttachmentName: h.NetworkAttachmentName, BFD: h.BFDEnabled}
		where := fmt.Sprintf("spec.nextHops.dynamic[%d]", i)
		var err error
		if d.Namespaces, err = metav1.LabelSelectorAsSelector(h.NamespaceSelector.AsMeta()); err != nil {
			d.Problem = &RuleProblem{Rule: i, Reason: reasons.InvalidSelector, Message: where + ".namespaceSelector: " + err.Error()}
		} else if d.Pods, err = metav1.LabelSelectorAsSelector(h.PodSelector.AsMeta()); err != nil {
			d.Problem = &RuleProblem{Rule: i, Reason: reasons.InvalidSelector, Message: where + ".podSelector: " + err.Error()}
		}
		if d.Problem != nil {
			d.Namespaces, d.Pods = nil, nil
		}
		dynamic = append(dynamic, d)
	}
	return from, static, dynamic, problems
}

// Problems are what keeps parts of the spec from applying, in spec
// order (Read): the namespace selector's, or else the static hops' and
// then the dynamic hops' selectors'. The gateway pods' problems are each
// node's to tell.
func (s AdminPolicyBasedExternalRouteSpec) Problems() []RuleProblem {
	_, _, dynamic, problems := s.Read()
	for _, d := range dynamic {
		if d.Problem != nil {
			problems = append(problems, *d.Problem)
		}
	}
	return problems
}
