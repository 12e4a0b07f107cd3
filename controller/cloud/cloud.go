// Package cloud is the cloud side of egress IPs. It owns the Provider
// interface that a cloud implements (find a node's primary interface, find
// which interface holds an address, assign one, release one), the errors a
// provider returns with their reasons, the metal provider, and the pure
// decisions the cloud controller takes from what a provider reports: the
// next step for a CloudPrivateIPConfig (Next) and the
// cloud.network.openshift.io/egress-ipconfig value of a node (NodeConfig).
// It makes no Kubernetes API call: controller/cluster's cloud member calls
// a Provider and writes what these functions say. The AWS provider is in
// controller/cloud/aws.
package cloud

import (
	"context"
	"errors"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// Interface is a node's primary network interface as its cloud sees it.
type Interface struct {
	// ID is the cloud's name of it (an ENI's ID on AWS).
	ID string
	// Subnets are its subnets, at most one per family.
	Subnets []netip.Prefix
	// PerInterfaceIPv4 and PerInterfaceIPv6 are how many addresses of
	// each family the interface may have, its primary address included.
	PerInterfaceIPv4, PerInterfaceIPv6 int
	// Addresses are every address it has, the primary included.
	Addresses []netip.Addr
}

// Provider is a cloud's API as the cloud controller needs it. Every method
// is idempotent: a controller that lost its leadership halfway, or its
// memory, calls again and the cloud ends where it would have.
type Provider interface {
	// Name is the provider's name, for logs and the
	// --cloud-provider flag.
	Name() string
	// Cloud says whether a cloud decides where an address goes. False
	// (metal): the CloudPrivateIPConfig's own record is the truth, and no
	// capacity is published.
	Cloud() bool
	// NodeInterface finds node's primary interface.
	NodeInterface(ctx context.Context, node *corev1.Node) (Interface, error)
	// Holder is the ID of the interface that has addr as a secondary
	// address, "" for none. recorded is the interface the object's status
	// names ("" for none): metal answers with it; a cloud asks its API.
	// An address that is an interface's primary is an error
	// (CloudAddressInUse): it is never released.
	Holder(ctx context.Context, addr netip.Addr, recorded string) (string, error)
	// Assign gives addr to the interface, and returns once the cloud
	// lists it there, or with CloudAssignPending when it does not yet.
	Assign(ctx context.Context, iface string, addr netip.Addr) error
	// Release takes addr from the interface; an interface without it, or
	// gone, counts as released.
	Release(ctx context.Context, iface string, addr netip.Addr) error
}

// Error is a provider's error with its reason.
type Error struct {
	Reason reasons.Reason
	Err    error
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ReasonOf is err's reason: that of an Error in its chain, else
// CloudRequestFailed.
func ReasonOf(err error) reasons.Reason {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return reasons.CloudRequestFailed
}

// Action is what the controller does next for an address.
type Action int

const (
	// Settled: the address is where it should be (or nowhere, and should
	// be nowhere); nothing to call.
	Settled Action = iota
	// Release the address from the interface that holds it: a move's
	// first step, or a deletion's only one.
	Release
	// Assign the address to the desired interface.
	Assign
)

// Next is the next step for an address held by holder ("" none) that
// should be on desired ("" nowhere: the object is being deleted, or its
// node cannot be served), and the interface it acts on. A move releases
// before it assigns: the address is never on two interfaces.
func Next(desired, holder string) (Action, string) {
	switch {
	case holder != "" && holder != desired:
		return Release, holder
	case holder == "" && desired != "":
		return Assign, desired
	}
	return Settled, ""
}

// NodeConfig is the cloudv1.EgressIPConfigAnnotation entry for a node
// whose primary interface is iface: its subnets, and as capacity the slots
// left once the addresses egressflow does not manage (managed says which
// it does; the primary never is) are counted out, so that the addresses it
// holds for CloudPrivateIPConfigs still count as room for egress IPs, as
// in the reference.
func NodeConfig(iface Interface, managed func(netip.Addr) bool) cloudv1.NodeEgressIPConfig {
	cfg := cloudv1.NodeEgressIPConfig{Interface: iface.ID}
	for _, p := range iface.Subnets {
		if p.Addr().Is4() {
			cfg.IfAddr.IPv4 = p.String()
		} else {
			cfg.IfAddr.IPv6 = p.String()
		}
	}
	v4, v6 := iface.PerInterfaceIPv4, iface.PerInterfaceIPv6
	for _, a := range iface.Addresses {
		if managed(a) {
			continue
		}
		if a.Is4() {
			v4--
		} else {
			v6--
		}
	}
	v4, v6 = max(v4, 0), max(v6, 0)
	cfg.Capacity.IPv4, cfg.Capacity.IPv6 = &v4, &v6
	return cfg
}

// Metal is the provider of clusters without a cloud API, the Docker
// cluster's among them: the nodes' own uplinks answer for the addresses
// (the agents' responder flows), so an assignment is only recorded. It
// publishes no capacity: a node's is its egressflow.io/max-egress-ips
// annotation or the controller's --max-egress-ips-per-node.
type Metal struct{}

func (Metal) Name() string { return "metal" }
func (Metal) Cloud() bool  { return false }

// NodeInterface is the node itself, by name.
func (Metal) NodeInterface(_ context.Context, node *corev1.Node) (Interface, error) {
	return Interface{ID: node.Name}, nil
}

// Holder is the recorded interface: nothing else can hold it.
func (Metal) Holder(_ context.Context, _ netip.Addr, recorded string) (string, error) {
	return recorded, nil
}

func (Metal) Assign(context.Context, string, netip.Addr) error  { return nil }
func (Metal) Release(context.Context, string, netip.Addr) error { return nil }
