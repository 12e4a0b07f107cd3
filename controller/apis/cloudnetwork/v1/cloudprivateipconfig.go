package v1

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CloudPrivateIPConfig performs an assignment of a private IP address to the
// primary NIC associated with cloud VMs. This is done by specifying the IP and
// Kubernetes node which the IP should be assigned to. The spec side
// represents the desired state requested by the network plugin, and the
// status side represents the current state that this CRD's controller has
// executed. The object's name must specify the requested private IP address
// (can be IPv4 or IPv6; an IPv6 address written out in full, with dots for
// its colons: see ObjectName).
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=cloudprivateipconfigs,singular=cloudprivateipconfig,scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Requested",type=string,JSONPath=".spec.node"
// +kubebuilder:printcolumn:name="Assigned",type=string,JSONPath=".status.node"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.conditions[?(@.type==\"Assigned\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Assigned\")].reason"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="(isIP(self.metadata.name) && ip(self.metadata.name).family() == 4 && string(ip(self.metadata.name)) == self.metadata.name) || (self.metadata.name.matches('^([0-9a-f]{4}[.]){7}[0-9a-f]{4}$') && !self.metadata.name.startsWith('0000.0000.0000.0000.0000.ffff.'))",message="the name must be the address assigned: an IPv4 address such as 192.0.2.10, or an IPv6 address as its eight groups of four lowercase hex digits joined by dots, such as 2001.0db8.0000.0000.0000.0000.0000.0010"
type CloudPrivateIPConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the definition of the desired private IP request.
	// +required
	Spec CloudPrivateIPConfigSpec `json:"spec"`
	// status is the observed status of the desired private IP request. Read-only.
	// +optional
	Status CloudPrivateIPConfigStatus `json:"status,omitempty"`
}

// CloudPrivateIPConfigSpec consists of a node name which the private IP
// should be assigned to.
type CloudPrivateIPConfigSpec struct {
	// node is the node name, as specified by the Kubernetes field: node.metadata.name
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
}

// CloudPrivateIPConfigStatus specifies the node assignment together with
// its assignment condition.
type CloudPrivateIPConfigStatus struct {
	// node is the node name, as specified by the Kubernetes field: node.metadata.name
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// condition is the assignment condition of the private IP and its status
	// +required
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions"`
}

// AssignedCondition is the condition whose status says whether the cloud
// has the address on status.node: True once it has, False while a move or
// an assignment is under way or has failed (its reason says which).
const AssignedCondition = "Assigned"

// CloudPrivateIPConfigList is the list of CloudPrivateIPConfigList.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type CloudPrivateIPConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// List of CloudPrivateIPConfig.
	Items []CloudPrivateIPConfig `json:"items"`
}

// ObjectName is the name of the CloudPrivateIPConfig that assigns addr:
// an IPv4 address as it is written, an IPv6 address as its eight groups of
// four hex digits joined by dots (an object's name is a DNS subdomain: no
// colons, and no empty label where "::" would be).
func ObjectName(addr netip.Addr) string {
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	b := addr.As16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(groups, ".")
}

// AddressOf reads the address a CloudPrivateIPConfig named name assigns. It
// refuses a name that ObjectName would not give (an address in another
// spelling, or none): one object per address.
func AddressOf(name string) (netip.Addr, error) {
	addr, err := netip.ParseAddr(name)
	if err != nil {
		addr, err = netip.ParseAddr(strings.ReplaceAll(name, ".", ":"))
	}
	if err != nil || addr.Zone() != "" || ObjectName(addr) != name {
		return netip.Addr{}, fmt.Errorf("%q is not an address as a CloudPrivateIPConfig is named: an IPv4 address, or an IPv6 address's eight groups of four hex digits joined by dots", name)
	}
	return addr, nil
}
