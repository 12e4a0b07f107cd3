package dataplane

import (
	"bytes"
	"hash/fnv"
	"maps"
	"net"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/openflow"
)

// AdminPolicyBasedExternalRoute's second stage: the flows and groups that
// send a node's selected pods through their namespace's live gateways.
//
// On its own node, a selected pod's packet that the stages let through
// (TableFirewall, TableQoS) is tracked in conntrack.ExternalRouteZone in
// TableEgress (priorityExternalRoute, below the source APIs) and
// recirculated to TableExternalRoute. There a connection that has a
// gateway recorded (ct_label) keeps it while the gateway is live; any
// other gets one from the route's select group, hashed on the 5-tuple,
// which records it. The packet leaves by the uplink to the gateway's MAC
// with its pod IP: the gateway routes the replies back. A packet that a
// gateway sends to a pod it serves records that gateway first
// (KindExternalRouteInbound), so that the pod's replies to a connection
// the outside opened go back through the gateway it came through (the
// reference's ecmp_symmetric_reply). A pod whose namespace has no live
// gateway of its family is dropped (its route's group has no bucket),
// whether the gateways it lists are down or it lists none of that
// family, or its dynamic hops select no pod: a selected pod never leaves
// by another path.
//
// Ownership, where several policies select one namespace: the first by
// name renders its pods, with the hops of all of them merged
// (ComputeExternalRouteHops); the others render nothing for it.

// Flow kinds of AdminPolicyBasedExternalRoute.
var (
	// KindExternalRouteSteer, in TableEgress, tracks a local selected
	// pod's packet with its route's group in reg7 and recirculates it to
	// TableExternalRoute.
	KindExternalRouteSteer = APIExternalRoute.Kind(1)
	// KindExternalRouteSticky, in TableExternalRoute, sends a connection
	// whose recorded gateway (ct_label) is one of the route's to it.
	KindExternalRouteSticky = APIExternalRoute.Kind(2)
	// KindExternalRoutePick gives any other connection of the route a
	// gateway: the select group's.
	KindExternalRoutePick = APIExternalRoute.Kind(3)
	// KindExternalRouteCommit records the gateway the group gave a
	// connection in its ct_label and sends the packet to it.
	KindExternalRouteCommit = APIExternalRoute.Kind(4)
	// KindExternalRouteInbound, in TableClassify, records the gateway a
	// packet to a selected pod came from, then looks the packet up again.
	KindExternalRouteInbound = APIExternalRoute.Kind(5)
)

// RoleExternalRoute is the role an external route part's flows are
// counted under (DiffOutput.Count).
const RoleExternalRoute Role = "AdminPolicyBasedExternalRoute"

// reg7ExternalRoute is AdminPolicyBasedExternalRoute's register
// (docs/dataplane.md, "Conntrack zones, marks and registers"): a route's
// packets carry its group's ID across the recirculation into
// TableExternalRoute, and the group's bucket adds the gateway it gave them
// (ExternalRoute.reg7); in TableClassify, reg7InboundRecorded marks a
// packet whose gateway is recorded.
var reg7ExternalRoute = openflow.FieldReg(7)

// reg7InboundRecorded is the bit above a route's group ID.
const reg7InboundRecorded = groupIDsPerAPI + 1

// Gateway is a live next hop as this node reaches it.
type Gateway struct {
	IP  netip.Addr
	MAC net.HardwareAddr
}

// ExternalRoute is the hops of one family that some of a part's pods
// use, and the select group over those of them that are live.
type ExternalRoute struct {
	// Group is the ID of the select group over Gateways
	// (APIExternalRoute.GroupID), given from Family and Hops: it stays put
	// while gateways die and come back.
	Group uint32
	// Family is the route's: 0 for IPv4, 1 for IPv6.
	Family int
	// Hops are the route's addresses of its family, live or not, sorted;
	// with Family, its identity.
	Hops []netip.Addr
	// Gateways are the live ones, sorted by address; none: the group has
	// no bucket, and the route's pods are dropped.
	Gateways []Gateway
}

func (r ExternalRoute) equal(o ExternalRoute) bool {
	return r.Group == o.Group && r.Family == o.Family && slices.Equal(r.Hops, o.Hops) && sameGateways(r.Gateways, o.Gateways)
}

func sameGateways(a, b []Gateway) bool {
	return slices.EqualFunc(a, b, func(a, b Gateway) bool { return a.IP == b.IP && bytes.Equal(a.MAC, b.MAC) })
}

// reg7 is reg7's value for the route's packets (gateway -1): the group's
// low 20 bits; and for its gateway i, once the group gave a connection
// that gateway: i+1 in the top eight bits.
func (r ExternalRoute) reg7(gateway int) uint32 {
	return uint32(gateway+1)<<24 | r.Group&groupIDsPerAPI
}

// ExternalRoutePod is a local pod address that a part routes.
type ExternalRoutePod struct {
	Pod netip.Addr
	// Route indexes the part's Routes.
	Route int
}

// ExternalRoutePart is one policy's part of a node's dataplane: the local
// pods of the namespaces it owns, each through its namespace's live
// gateways of its family.
type ExternalRoutePart struct {
	Key string
	// Pods are sorted by address.
	Pods []ExternalRoutePod
	// Routes are the distinct gateway sets the pods use, in the order the
	// pods first use them.
	Routes []ExternalRoute
}

// FlowRole is RoleExternalRoute.
func (p ExternalRoutePart) FlowRole() Role { return RoleExternalRoute }

// Equal reports whether two parts render the same flows and groups.
func (p ExternalRoutePart) Equal(o ExternalRoutePart) bool {
	return p.Key == o.Key && slices.Equal(p.Pods, o.Pods) && slices.EqualFunc(p.Routes, o.Routes, ExternalRoute.equal)
}

// AppendFlows renders the part into b and appends its flows to dst.
func (p ExternalRoutePart) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, ports Ports) []*openflow.FlowMod {
	add := func(kind FlowKind, table uint8, priority uint16, insts []openflow.Instruction) *openflow.Match {
		fm := b.Add(Cookie(kind, p.Key), table, priority, insts)
		dst = append(dst, fm)
		return &fm.Match
	}
	steer := make([][]openflow.Instruction, len(p.Routes)) // shared by a route's pods
	for i, r := range p.Routes {
		steer[i] = []openflow.Instruction{openflow.Apply(
			openflow.SetFieldUint(reg7ExternalRoute, uint64(r.reg7(-1))),
			openflow.CT{Zone: conntrack.ExternalRouteZone, Recirculate: true, Table: TableExternalRoute})}
	}
	for _, pod := range p.Pods {
		r := p.Routes[pod.Route]
		setIP(add(KindExternalRouteSteer, TableEgress, priorityExternalRoute, steer[pod.Route]), pod.Pod, srcField(pod.Pod))
		for _, gw := range r.Gateways {
			m := add(KindExternalRouteInbound, TableClassify, priorityExternalRouteInbound, recordInbound(gw))
			setIP(m, pod.Pod, dstField(pod.Pod))
			m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
			m.Set(openflow.FieldEthSrc, []byte(gw.MAC))
			m.SetUintMasked(reg7ExternalRoute, 0, reg7InboundRecorded)
		}
	}
	for _, r := range p.Routes {
		ethType := uint64(0x0800)
		if r.Family == 1 {
			ethType = 0x86dd
		}
		route := func(kind FlowKind, priority uint16, reg7 uint32, insts []openflow.Instruction) *openflow.Match {
			m := add(kind, TableExternalRoute, priority, insts)
			m.SetUint(openflow.FieldEthType, ethType)
			m.SetUint(reg7ExternalRoute, uint64(reg7))
			return m
		}
		for i, gw := range r.Gateways {
			toGateway := []openflow.Action{openflow.SetField{Field: openflow.FieldEthDst, Value: []byte(gw.MAC)}, openflow.Output{Port: ports.Uplink}}
			m := route(KindExternalRouteSticky, priorityExternalRouteSticky, r.reg7(-1), []openflow.Instruction{openflow.Apply(toGateway...)})
			m.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk), uint64(openflow.CTStateTrk))
			m.Set(openflow.FieldCTLabel, addressLabel(gw.IP))
			route(KindExternalRouteCommit, priorityExternalRouteSticky, r.reg7(i),
				[]openflow.Instruction{openflow.Apply(append([]openflow.Action{recordGateway(gw.IP)}, toGateway...)...)})
		}
		route(KindExternalRoutePick, priorityExternalRoutePick, r.reg7(-1), []openflow.Instruction{openflow.Apply(openflow.Group{ID: r.Group})})
	}
	return dst
}

// AppendGroups appends each route's select group: a bucket per live
// gateway, picked by a hash of the connection's 5-tuple
// (spreadSelection), which takes the packet to that gateway's
// KindExternalRouteCommit flow (Open vSwitch commits nothing from a
// bucket itself). A group without buckets drops what it is given.
func (p ExternalRoutePart) AppendGroups(dst []*openflow.GroupMod, _ Ports) []*openflow.GroupMod {
	for _, r := range p.Routes {
		g := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeSelect, GroupID: r.Group, Properties: spreadSelection}
		for i := range r.Gateways {
			g.Buckets = append(g.Buckets, openflow.Bucket{ID: uint32(i), Weight: selectBucketWeight, Actions: []openflow.Action{
				openflow.SetFieldUint(reg7ExternalRoute, uint64(r.reg7(i))), openflow.ResubmitTable(TableExternalRoute)}})
		}
		dst = append(dst, g)
	}
	return dst
}

// recordGateway commits a connection to conntrack.ExternalRouteZone with
// the gateway it goes through (addressLabel).
func recordGateway(gateway netip.Addr) openflow.CT {
	return openflow.CT{Flags: openflow.CTCommit, Zone: conntrack.ExternalRouteZone,
		Actions: []openflow.Action{openflow.SetField{Field: openflow.FieldCTLabel, Value: addressLabel(gateway)}}}
}

// recordInbound records gw as the gateway of the connection a packet from
// it belongs to, marks the packet, and looks it up in TableClassify again,
// where the flows for packets to the pod act on it as on any other.
func recordInbound(gw Gateway) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		recordGateway(gw.IP),
		openflow.SetFieldUintMasked(reg7ExternalRoute, reg7InboundRecorded, reg7InboundRecorded),
		openflow.ResubmitTable(TableClassify))}
}

// ExternalRoutes is a node's AdminPolicyBasedExternalRoute part.
type ExternalRoutes struct {
	// Parts, sorted by key, only those with flows on this node.
	Parts []ExternalRoutePart
	// Problems, sorted by object, then as found.
	Problems []Problem
}

// ExternalRouteNode is what the second stage reads of the node beside the
// policies: which of the hops it can use now.
type ExternalRouteNode struct {
	// MAC returns the MAC address of a hop on the uplink's segment; false
	// while it is unknown (not resolved yet, or gone). Nil: none known.
	MAC func(netip.Addr) (net.HardwareAddr, bool)
	// BFDUp reports whether the BFD session to a hop that asks for one is
	// up. Nil: none is.
	BFDUp func(netip.Addr) bool
}

// ComputeExternalRoutes is the specification of the second stage: the
// parts of the policies for node's pods (pods holds at least them, and
// every gateway pod), keyed by ObjectKey(APIExternalRoute, "", name),
// sorted by key and without the empty ones; and the policies' problems.
// Every address of those pods is in the part, whatever else acts on it:
// an EgressService's endpoint or an EgressIP's pod has its flows above
// the route's, and a pod the guard holds is dropped above it
// (State.Held), so a part never depends on the other APIs.
func ComputeExternalRoutes(node NodeConfig, routes []*esv1.AdminPolicyBasedExternalRoute, namespaces []*corev1.Namespace,
	pods []*corev1.Pod, hops ExternalRouteNode) ExternalRoutes {
	nsHops, problems := ComputeExternalRouteHops(routes, namespaces, pods)
	owner := map[string]string{} // namespace -> the first policy by name that selects it
	for _, ns := range namespaces {
		for _, route := range sortedByName(routes) {
			from, err := metav1.LabelSelectorAsSelector(route.Spec.From.NamespaceSelector.AsMeta())
			if err == nil && from.Matches(labels.Set(ns.Labels)) {
				owner[ns.Name] = ObjectKey(APIExternalRoute, "", route.Name)
				break
			}
		}
	}
	byOwner := map[string][]*corev1.Pod{}
	for _, pod := range pods {
		if key, owned := owner[pod.Namespace]; owned && pod.Spec.NodeName == node.Name {
			byOwner[key] = append(byOwner[key], pod)
		}
	}
	var parts []*ExternalRoutePart
	for _, key := range slices.Sorted(maps.Keys(byOwner)) {
		if part := assembleExternalRoutePart(key, byOwner[key], func(ns string) []ExternalHop { return nsHops[ns] }, hops, node.ClusterPodCIDRs); part != nil {
			parts = append(parts, part)
		}
	}
	allotRouteGroups(parts)
	out := ExternalRoutes{Problems: problems}
	for _, part := range parts {
		out.Parts = append(out.Parts, *part)
	}
	return out
}

// assembleExternalRoutePart builds key's part from the local pods of the
// namespaces it owns, their namespaces' hops and what the node knows of
// the hops: every address of theirs is routed; nil when there is none.
// The groups are unallotted (allotRouteGroups).
func assembleExternalRoutePart(key string, pods []*corev1.Pod, nsHops func(namespace string) []ExternalHop, view ExternalRouteNode, cidrs []netip.Prefix) *ExternalRoutePart {
	type routed struct {
		pod  netip.Addr
		hops []netip.Addr
		live []Gateway
	}
	var addrs []routed
	for _, pod := range pods {
		for _, addr := range podAddresses(pod, cidrs) {
			listed, live := familyHops(nsHops(pod.Namespace), family(addr), view)
			addrs = append(addrs, routed{addr, listed, live})
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	slices.SortFunc(addrs, func(a, b routed) int { return a.pod.Compare(b.pod) })
	addrs = slices.CompactFunc(addrs, func(a, b routed) bool { return a.pod == b.pod })
	part := &ExternalRoutePart{Key: key}
	for _, a := range addrs {
		f := family(a.pod)
		route := slices.IndexFunc(part.Routes, func(r ExternalRoute) bool { return r.Family == f && slices.Equal(r.Hops, a.hops) })
		if route < 0 {
			route = len(part.Routes)
			part.Routes = append(part.Routes, ExternalRoute{Family: f, Hops: a.hops, Gateways: a.live})
		}
		part.Pods = append(part.Pods, ExternalRoutePod{Pod: a.pod, Route: route})
	}
	return part
}

// externalRouteNamespaces are the namespaces that some policy selects (by
// a selector it can read): their pods pass the node-local stages before
// TableEgress, where the routed ones meet their route's flow.
func externalRouteNamespaces(routes []*esv1.AdminPolicyBasedExternalRoute, namespaces []*corev1.Namespace) map[string]bool {
	out := map[string]bool{}
	for _, route := range routes {
		from, err := metav1.LabelSelectorAsSelector(route.Spec.From.NamespaceSelector.AsMeta())
		if err != nil {
			continue
		}
		for _, ns := range namespaces {
			if from.Matches(labels.Set(ns.Labels)) {
				out[ns.Name] = true
			}
		}
	}
	return out
}

// familyHops returns the hops of family f, and those of them that the
// node can use now.
func familyHops(hops []ExternalHop, f int, node ExternalRouteNode) (listed []netip.Addr, live []Gateway) {
	for _, h := range hops {
		if family(h.IP) != f {
			continue
		}
		listed = append(listed, h.IP)
		if node.MAC == nil {
			continue
		}
		if mac, known := node.MAC(h.IP); known && (!h.BFD || (node.BFDUp != nil && node.BFDUp(h.IP))) {
			live = append(live, Gateway{IP: h.IP, MAC: mac})
		}
	}
	return listed, live
}

// naturalRouteGroup is the ID a route of the part of key gets but on a
// collision (allotRouteGroups): a hash of the key, the family and the
// hops, within the API's IDs.
func naturalRouteGroup(key string, r ExternalRoute) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	h.Write([]byte{byte(r.Family)})
	for _, hop := range r.Hops {
		h.Write(hop.AsSlice())
	}
	return h.Sum32() & groupIDsPerAPI
}

// allotRouteGroups gives each route a group ID (APIExternalRoute.GroupID)
// from a hash of its part's key, its family and its hops, the next free one on a
// collision; parts in key order, so that a route's ID stays put while
// others come and go, collisions aside.
func allotRouteGroups(parts []*ExternalRoutePart) {
	taken := map[uint32]bool{}
	for _, part := range parts {
		for i := range part.Routes {
			r := &part.Routes[i]
			id := naturalRouteGroup(part.Key, *r)
			for taken[id] {
				id = (id + 1) & groupIDsPerAPI
			}
			taken[id] = true
			r.Group = APIExternalRoute.GroupID(id)
		}
	}
}
