package assign

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
)

// Egress capacity: how many egress addresses a node may hold. Three
// sources, every one that is set applies (the smallest limit wins):
//
//   - the cloud's, cloudv1.EgressIPConfigAnnotation: per family or of
//     both together, as the cloud controller publishes it (a NIC takes so
//     many secondary addresses). Its subnets also replace those the
//     node's agent publishes, as in the reference: on some clouds a node's
//     own interface shows a /32, and only the cloud knows the subnet.
//   - the node's own, MaxEgressIPsAnnotation, of both families together;
//   - the cluster's, the controller's --max-egress-ips-per-node, for
//     nodes without MaxEgressIPsAnnotation.
//
// A capacity bounds new placements only: an address a node holds stays
// while the node is otherwise a valid holder, even when a lowered limit
// leaves the node above it. Moving it would cut its connections to honour
// a number; the node takes no more until it is below the limit again.

// MaxEgressIPsAnnotation is a Node annotation, a decimal number of egress
// addresses (both families together) the node may hold; it replaces the
// cluster's --max-egress-ips-per-node for that node. 0 lets the node
// hold none, as removing EgressAssignableLabel would, but says why.
const MaxEgressIPsAnnotation = "egressflow.io/max-egress-ips"

// NoLimit is an EgressCapacity field, or --max-egress-ips-per-node, that
// sets no limit.
const NoLimit = -1

// EgressCapacity is how many egress addresses a node may hold: IPv4,
// IPv6, and both together (Any); NoLimit in a field sets none.
type EgressCapacity struct{ IPv4, IPv6, Any int }

// EgressLoad is how many egress addresses a node holds, per family.
type EgressLoad struct{ IPv4, IPv6 int }

// Total is the addresses of both families.
func (l EgressLoad) Total() int { return l.IPv4 + l.IPv6 }

// Add counts delta more addresses of a's family.
func (l *EgressLoad) Add(a netip.Addr, delta int) {
	if a.Is4() {
		l.IPv4 += delta
	} else {
		l.IPv6 += delta
	}
}

// HasRoom says whether a node with capacity c that holds l may take a
// (nil c: no limit).
func (c *EgressCapacity) HasRoom(a netip.Addr, l EgressLoad) bool {
	if c == nil {
		return true
	}
	family, held := c.IPv4, l.IPv4
	if a.Is6() {
		family, held = c.IPv6, l.IPv6
	}
	return within(held, family) && within(l.Total(), c.Any)
}

func within(held, limit int) bool { return limit == NoLimit || held < limit }

// EgressLimits are what a Node's annotations, and the cluster's default,
// say of where and how many egress addresses it may hold.
type EgressLimits struct {
	// Capacity is nil when no limit applies.
	Capacity *EgressCapacity
	// CloudSubnets are the subnets of cloudv1.EgressIPConfigAnnotation,
	// which replace the agent's; nil without the annotation.
	CloudSubnets []netip.Prefix
}

// NodeEgressLimits reads n's limits, maxPerNode being the cluster's
// default (NoLimit for none). An annotation that cannot be read is an
// error, and the node gets a capacity of 0 until it is fixed: no new
// address goes where the limit is unknown. The cloud's subnets still
// apply when only the node's own limit is unreadable; with the cloud's
// annotation unreadable the node has its agent's subnets.
func NodeEgressLimits(n *corev1.Node, maxPerNode int) (EgressLimits, error) {
	var out EgressLimits
	c := EgressCapacity{NoLimit, NoLimit, maxPerNode}
	var errs []error
	if v, ok := n.Annotations[MaxEgressIPsAnnotation]; ok {
		m, err := strconv.Atoi(v)
		if err != nil || m < 0 {
			errs = append(errs, fmt.Errorf("%s %q is not a number of addresses (0 or more)", MaxEgressIPsAnnotation, v))
		}
		c.Any = m
	}
	if v, ok := n.Annotations[cloudv1.EgressIPConfigAnnotation]; ok {
		cfg, subnets, err := cloudv1.ParseEgressIPConfig(v)
		switch {
		case err != nil:
			errs = append(errs, err)
		case cfg.Capacity.IP != nil:
			c.Any = smallerLimit(c.Any, *cfg.Capacity.IP)
		default:
			c.IPv4, c.IPv6 = valueOr0(cfg.Capacity.IPv4), valueOr0(cfg.Capacity.IPv6)
		}
		out.CloudSubnets = subnets
	}
	if len(errs) > 0 {
		return EgressLimits{Capacity: &EgressCapacity{0, 0, 0}, CloudSubnets: out.CloudSubnets}, errors.Join(errs...)
	}
	if c != (EgressCapacity{NoLimit, NoLimit, NoLimit}) {
		out.Capacity = &c
	}
	return out, nil
}

// smallerLimit is the stricter of two limits.
func smallerLimit(a, b int) int {
	if a == NoLimit || (b != NoLimit && b < a) {
		return b
	}
	return a
}

func valueOr0(n *int) int {
	if n == nil {
		return 0
	}
	return *n
}
