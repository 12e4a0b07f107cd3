package v1

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// EgressIPConfigAnnotation is the Node annotation in which the cloud
// controller publishes where egress addresses may go on the node and how
// many it may take, as OpenShift's cloud-network-config-controller does:
// a JSON list with one entry for the node's primary interface, such as
//
//	[{"interface":"eni-0a1b","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":14,"ipv6":15}}]
//	[{"interface":"nic0","ifaddr":{"ipv4":"10.0.128.0/17"},"capacity":{"ip":10}}]
//
// The EgressIP assignment reads it (NodeEgressIPConfig); anyone may write
// it on a node whose capacity no cloud controller publishes.
const EgressIPConfigAnnotation = "cloud.network.openshift.io/egress-ipconfig"

// NodeEgressIPConfig is one entry of EgressIPConfigAnnotation: an
// interface, the subnets egress addresses may be taken from, and how many
// it may hold.
//
// +k8s:deepcopy-gen=false
type NodeEgressIPConfig struct {
	// Interface is the cloud's name of the interface (an ENI's ID, a NIC's
	// name); informative.
	Interface string `json:"interface"`
	// IfAddr are the interface's subnets, one per family, as prefixes.
	IfAddr EgressIPConfigIfAddr `json:"ifaddr"`
	// Capacity is how many egress addresses the interface may hold.
	Capacity EgressIPConfigCapacity `json:"capacity"`
}

// EgressIPConfigIfAddr are an interface's subnets; "" for a family it has
// none of.
//
// +k8s:deepcopy-gen=false
type EgressIPConfigIfAddr struct {
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
}

// EgressIPConfigCapacity is how many egress addresses an interface may
// hold: IP of both families together (GCP's and Azure's form), or IPv4 and
// IPv6 apiece (AWS's form). With IP set the families have no limit of
// their own; without it, a family not given may hold none.
//
// +k8s:deepcopy-gen=false
type EgressIPConfigCapacity struct {
	IPv4 *int `json:"ipv4,omitempty"`
	IPv6 *int `json:"ipv6,omitempty"`
	IP   *int `json:"ip,omitempty"`
}

// ParseEgressIPConfig reads an EgressIPConfigAnnotation value: exactly one
// entry, its subnets prefixes of their families, its capacities not
// negative. The error says what is wrong, for the Node's Event.
func ParseEgressIPConfig(value string) (NodeEgressIPConfig, []netip.Prefix, error) {
	var entries []NodeEgressIPConfig
	if err := json.Unmarshal([]byte(value), &entries); err != nil {
		return NodeEgressIPConfig{}, nil, fmt.Errorf("%s is not a JSON list of interfaces: %v", EgressIPConfigAnnotation, err)
	}
	if len(entries) != 1 {
		return NodeEgressIPConfig{}, nil, fmt.Errorf("%s lists %d interfaces; one, the primary, is read", EgressIPConfigAnnotation, len(entries))
	}
	cfg := entries[0]
	var subnets []netip.Prefix
	for _, f := range []struct {
		name, value string
		is4         bool
	}{{"ipv4", cfg.IfAddr.IPv4, true}, {"ipv6", cfg.IfAddr.IPv6, false}} {
		if f.value == "" {
			continue
		}
		p, err := netip.ParsePrefix(f.value)
		if err != nil || p.Addr().Is4() != f.is4 || p.Addr().Zone() != "" {
			return NodeEgressIPConfig{}, nil, fmt.Errorf("%s: ifaddr.%s %q is not an %s prefix", EgressIPConfigAnnotation, f.name, f.value, f.name)
		}
		subnets = append(subnets, p.Masked())
	}
	for _, c := range []struct {
		name string
		n    *int
	}{{"ipv4", cfg.Capacity.IPv4}, {"ipv6", cfg.Capacity.IPv6}, {"ip", cfg.Capacity.IP}} {
		if c.n != nil && *c.n < 0 {
			return NodeEgressIPConfig{}, nil, fmt.Errorf("%s: capacity.%s is %d, below zero", EgressIPConfigAnnotation, c.name, *c.n)
		}
	}
	return cfg, subnets, nil
}

// FormatEgressIPConfig is the EgressIPConfigAnnotation value for one
// interface.
func FormatEgressIPConfig(cfg NodeEgressIPConfig) string {
	b, err := json.Marshal([]NodeEgressIPConfig{cfg})
	if err != nil {
		panic(err) // strings and ints only
	}
	return string(b)
}
