package dataplane

import (
	"cmp"
	"iter"
	"maps"
	"net/netip"
	"slices"

	"github.com/egressflow/egressflow/conntrack"
	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
)

// EgressRouter's part of a node's desired state (docs/egressrouter.md,
// "Dataplane"). The cluster component gives each router a holder
// (status.holder); every agent reads the same objects, and only the
// holder renders a part. The holder answers ARP and neighbour
// solicitations for the reserved addresses with the bridge's MAC, from
// any port: the segment's hosts and the holder's own host stack alike
// send it the clients' packets.
//
// A client's packet reaches the holder's host stack, which forwards it
// back to the reserved address through br-ex (LOCAL). From LOCAL it takes
// the pipeline like any packet (TableClassify, the node-local stages),
// and in TableEgress the redirect takes it, above every exemption and
// source decision: it is looked up in conntrack.RouterSNATZone (undoing
// the source NAT of a reply), in conntrack.RouterZone (a new connection
// is committed with its rule's destination and port, or the fallback's
// address), committed in conntrack.RouterSNATZone with the reserved
// address as its source, and sent back to the host stack, which routes it
// to the destination. A reply arrives from the uplink, passes the host
// stack to the reserved address the same way, and leaves un-NATed to the
// client, through the host stack again. The host stack therefore sees
// each leg of the connection whole, client to reserved address and
// reserved address to destination, whatever its own conntrack and
// firewall make of them; and it resolves each next hop itself.
//
// RouterPartOf is the specification of one router's part; the member
// keeps the parts of every router and gives each its ID.

// Flow kinds of EgressRouter.
var (
	// KindRouterEntry, in TableClassify, takes a packet from the host
	// stack to a reserved address through the pipeline (TableOrigin).
	KindRouterEntry = APIEgressRouter.Kind(1)
	// KindRouterARP answers an ARP request for a reserved IPv4 address.
	KindRouterARP = APIEgressRouter.Kind(2)
	// KindRouterND answers a neighbour solicitation for a reserved IPv6
	// address (in TableClassify and TableNeighbour), and passes duplicate
	// address detection's.
	KindRouterND = APIEgressRouter.Kind(3)
	// KindRouterQuiet, in TableClassify, drops the ICMP redirects the host
	// stack sends towards a reserved address.
	KindRouterQuiet = APIEgressRouter.Kind(4)
	// KindRouterTrack, in TableEgress, loads the router's ID into reg8
	// and looks the packet up in conntrack.RouterSNATZone.
	KindRouterTrack = APIEgressRouter.Kind(5)
	// KindRouterReply, in TableRouter, un-DNATs a reply in
	// conntrack.RouterZone; KindRouterForward looks a client's packet up
	// there.
	KindRouterReply   = APIEgressRouter.Kind(6)
	KindRouterForward = APIEgressRouter.Kind(7)
	// KindRouterRule, in TableRouterDNAT, commits a new connection to a
	// rule's port with its destination; KindRouterFallback one to any
	// other port with the fallback (or drops it when there is none).
	KindRouterRule     = APIEgressRouter.Kind(8)
	KindRouterFallback = APIEgressRouter.Kind(9)
	// KindRouterEstablished, in TableRouterDNAT, looks an established
	// connection's packet up in conntrack.RouterSNATZone, which SNATs it.
	KindRouterEstablished = APIEgressRouter.Kind(10)
	// KindRouterSNAT, in TableRouterSNAT, commits a new connection with the
	// reserved address as its source.
	KindRouterSNAT = APIEgressRouter.Kind(11)
	// KindRouterOut, in TableRouterOut, sends a translated packet back to
	// the host stack.
	KindRouterOut = APIEgressRouter.Kind(12)
)

// RoleEgressRouter is the role a router part's flows are counted under
// (DiffOutput.Count).
const RoleEgressRouter Role = "EgressRouter"

// reg8Router is EgressRouter's register (docs/dataplane.md, "Conntrack
// zones, marks and registers"): a redirected packet carries its router's
// ID across the recirculations through the router's tables.
var reg8Router = openflow.FieldReg(8)

// RouterRule is one redirect rule as the holder renders it.
type RouterRule struct {
	// Protocol is the IP protocol number: 6 TCP, 17 UDP, 132 SCTP.
	Protocol         uint8
	Port, TargetPort uint16
	Destination      netip.Addr
}

// RouterPart is one EgressRouter's part of its holder's dataplane.
type RouterPart struct {
	// Key is ObjectKey(APIEgressRouter, namespace, name).
	Key string
	// ID is the router's value of reg8, never 0, unique on the node.
	ID uint32
	// Addresses are the reserved addresses, one per family, IPv4 first.
	Addresses []netip.Addr
	// Rules are the redirect rules, in the spec's order.
	Rules []RouterRule
	// Fallback takes every other connection; invalid: they are dropped.
	Fallback netip.Addr
	// Gateways are the addresses whose spec names a gateway, which the
	// host stack routes their redirected connections through
	// (RouterRouting). They render no flow.
	Gateways []RouterGateway
}

// FlowRole is RoleEgressRouter.
func (p RouterPart) FlowRole() Role { return RoleEgressRouter }

// Announced are the addresses the part answers for, to announce when the
// node takes them over (Announcer).
func (p RouterPart) Announced() []netip.Addr { return p.Addresses }

// Redirected are the addresses whose connections the part redirects
// (Redirector): the same.
func (p RouterPart) Redirected() []netip.Addr { return p.Addresses }

// Equal reports whether two parts render the same flows.
func (p RouterPart) Equal(o RouterPart) bool {
	return p.Key == o.Key && p.ID == o.ID && slices.Equal(p.Addresses, o.Addresses) && slices.Equal(p.Rules, o.Rules) && p.Fallback == o.Fallback
}

// protocolNumbers are the IP protocol numbers of a rule's protocol.
var protocolNumbers = map[nov1.ProtocolType]uint8{nov1.ProtocolTypeTCP: 6, nov1.ProtocolTypeUDP: 17, nov1.ProtocolTypeSCTP: 132}

// ICMP redirect types: ICMPv4's Redirect (RFC 792), ICMPv6's Redirect
// (RFC 4861 §4.5).
const (
	icmpRedirect   = 5
	icmpv6Redirect = 137
)

// AppendFlows renders the part into b and appends its flows to dst. The
// responders need the bridge's MAC: without it the node answers for no
// address, and no client reaches it.
func (p RouterPart) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, ports Ports) []*openflow.FlowMod {
	add := func(kind FlowKind, table uint8, priority uint16, insts []openflow.Instruction) *openflow.Match {
		fm := b.Add(Cookie(kind, p.Key), table, priority, insts)
		dst = append(dst, fm)
		return &fm.Match
	}
	// inRouter adds a flow of the router's tables, for the family of addr.
	// No actions: a drop.
	inRouter := func(kind FlowKind, table uint8, priority uint16, addr netip.Addr, ctState, ctMask uint32, actions ...openflow.Action) *openflow.Match {
		var insts []openflow.Instruction
		if len(actions) > 0 {
			insts = []openflow.Instruction{openflow.Apply(actions...)}
		}
		m := add(kind, table, priority, insts)
		setIP(m, addr, openflow.FieldNone)
		m.SetUint(reg8Router, uint64(p.ID))
		if ctMask != 0 {
			m.SetUintMasked(openflow.FieldCTState, uint64(ctState), uint64(ctMask))
		}
		return m
	}
	trk, isNew, rpl, snat := openflow.CTStateTrk, openflow.CTStateNew, openflow.CTStateRpl, openflow.CTStateSNAT
	for _, addr := range p.Addresses {
		entry := add(KindRouterEntry, TableClassify, priorityRouterEntry, gotoOrigin)
		setIP(entry, addr, dstField(addr))
		entry.SetUint(openflow.FieldInPort, uint64(openflow.PortLocal))
		quiet := add(KindRouterQuiet, TableClassify, priorityRouterNeighbour, nil)
		setIP(quiet, addr, dstField(addr))
		quiet.SetUint(openflow.FieldInPort, uint64(openflow.PortLocal))
		if addr.Is4() {
			quiet.SetUint(openflow.FieldIPProto, 1)
			quiet.SetUint(openflow.FieldICMPv4Type, icmpRedirect)
		} else {
			quiet.SetUint(openflow.FieldIPProto, 58)
			quiet.SetUint(openflow.FieldICMPv6Type, icmpv6Redirect)
		}
		if ports.BridgeMAC != nil {
			appendResponders(add, addr, ports.BridgeMAC, KindRouterARP, KindRouterND, priorityRouterNeighbour, 0)
		}

		track := add(KindRouterTrack, TableEgress, priorityRouter, []openflow.Instruction{openflow.Apply(
			openflow.SetFieldUint(reg8Router, uint64(p.ID)),
			openflow.CT{Zone: conntrack.RouterSNATZone, Recirculate: true, Table: TableRouter, Actions: []openflow.Action{openflow.NAT{}}})})
		setIP(track, addr, dstField(addr))

		inRouter(KindRouterReply, TableRouter, priorityService, addr, trk|rpl, trk|rpl,
			openflow.CT{Zone: conntrack.RouterZone, Recirculate: true, Table: TableRouterOut, Actions: []openflow.Action{openflow.NAT{}}})
		inRouter(KindRouterForward, TableRouter, priorityService, addr, trk, trk|rpl,
			openflow.CT{Zone: conntrack.RouterZone, Recirculate: true, Table: TableRouterDNAT, Actions: []openflow.Action{openflow.NAT{}}})

		for _, r := range p.Rules {
			if r.Destination.Is4() != addr.Is4() {
				continue
			}
			m := inRouter(KindRouterRule, TableRouterDNAT, priorityRouterRule, addr, trk|isNew, trk|isNew, redirectTo(r.Destination, r.TargetPort))
			m.SetUint(openflow.FieldIPProto, uint64(r.Protocol))
			m.SetUint(portField(r.Protocol), uint64(r.Port))
		}
		var fallback []openflow.Action // none: a new connection is dropped
		if p.Fallback.IsValid() && p.Fallback.Is4() == addr.Is4() {
			fallback = []openflow.Action{redirectTo(p.Fallback, 0)}
		}
		inRouter(KindRouterFallback, TableRouterDNAT, priorityRouterFallback, addr, trk|isNew, trk|isNew, fallback...)
		inRouter(KindRouterEstablished, TableRouterDNAT, priorityRouterFallback, addr, trk, trk|isNew,
			openflow.CT{Zone: conntrack.RouterSNATZone, Recirculate: true, Table: TableRouterOut, Actions: []openflow.Action{openflow.NAT{}}})

		inRouter(KindRouterSNAT, TableRouterSNAT, priorityService, addr, trk, trk,
			openflow.CT{Flags: openflow.CTCommit, Zone: conntrack.RouterSNATZone, Recirculate: true, Table: TableRouterOut,
				Actions: []openflow.Action{openflow.NAT{Flags: openflow.NATSrc, MinAddr: addr}}})

		// Every packet here entered from LOCAL: back out of it. A
		// client's packet whose source conntrack did not translate is
		// dropped (a table-miss), never sent with the client's address.
		toHost := openflow.Output{Port: openflow.PortInPort}
		inRouter(KindRouterOut, TableRouterOut, priorityService, addr, trk|rpl, trk|rpl, toHost)
		inRouter(KindRouterOut, TableRouterOut, priorityService, addr, trk|snat, trk|snat|rpl, toHost)
	}
	return dst
}

// RouterRefusal is a reserved address that this node serves without a
// fallback of its family. A new connection to it on a port that no rule of
// its protocol names is refused, as the API says ("connections on other
// ports will simply be rejected"): TCP with a reset, UDP and SCTP with
// ICMP port unreachable. The node's host stack refuses it (hostfirewall),
// as it forwards the connection to the address; Open vSwitch cannot
// answer a connection itself, and its flows only drop it.
type RouterRefusal struct {
	Address netip.Addr
	// Ports are the ports of the rules of the address's family, by
	// protocol number (6 TCP, 17 UDP, 132 SCTP), each sorted. Every
	// connection of a protocol without rules is refused.
	Ports map[uint8][]uint16
}

// Refusals are the part's refusals (RouterRefusal): one for each address
// of a family without a fallback, in the part's order.
func (p RouterPart) Refusals() []RouterRefusal {
	var out []RouterRefusal
	for _, addr := range p.Addresses {
		if p.Fallback.IsValid() && p.Fallback.Is4() == addr.Is4() {
			continue
		}
		r := RouterRefusal{Address: addr, Ports: map[uint8][]uint16{}}
		for _, rule := range p.Rules {
			if rule.Destination.Is4() == addr.Is4() {
				r.Ports[rule.Protocol] = append(r.Ports[rule.Protocol], rule.Port)
			}
		}
		for proto, ports := range r.Ports {
			slices.Sort(ports)
			r.Ports[proto] = slices.Compact(ports)
		}
		out = append(out, r)
	}
	return out
}

// RouterGateway is a reserved address whose redirected connections leave
// through a gateway, as a router pod's would through the default route of
// its interface: Address is the reserved address with its subnet's prefix
// length, and Gateway on that subnet (or IPv6 link-local).
type RouterGateway struct {
	Address netip.Prefix
	Gateway netip.Addr
}

// RouterRouting is the policy routing of the reserved addresses that name
// a gateway. The holder's host stack forwards a redirected connection from
// the reserved address, so a rule `from <address> lookup <table>` at
// RulePriority takes it (the exemption rules keep the replies to clients
// inside the cluster on the node's other rules). Each distinct subnet and
// gateway has a table of egressflow's (RouterTableBase, the slot a hash of
// the two, or the next free one), which holds what a router pod's
// interface would: the subnet on the link, and a default route through the
// gateway. The rules and routes come sorted.
func RouterRouting(gateways []RouterGateway) (rules []Rule, routes []Route) {
	type key struct {
		subnet  netip.Prefix
		gateway netip.Addr
	}
	keys := map[key][]netip.Addr{}
	for _, g := range gateways {
		k := key{g.Address.Masked(), g.Gateway}
		keys[k] = append(keys[k], g.Address.Addr())
	}
	sorted := slices.SortedFunc(maps.Keys(keys), func(a, b key) int {
		return cmp.Or(a.subnet.Addr().Compare(b.subnet.Addr()), a.subnet.Bits()-b.subnet.Bits(), a.gateway.Compare(b.gateway))
	})
	taken := map[uint32]bool{}
	for _, k := range sorted {
		slot := ServiceHash(k.subnet.String()+" via "+k.gateway.String()) % RouterTables
		for taken[slot] {
			slot = (slot + 1) % RouterTables
		}
		taken[slot] = true
		table := RouterTableBase + int(slot)
		zero := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if k.gateway.Is6() {
			zero = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		routes = append(routes, Route{Table: table, Destination: k.subnet}, Route{Table: table, Destination: zero, Gateway: k.gateway})
		for _, addr := range keys[k] {
			rules = append(rules, RouteFrom(addr, table))
		}
	}
	slices.SortFunc(rules, Rule.Compare)
	slices.SortFunc(routes, Route.Compare)
	return rules, routes
}

// redirectTo commits a new connection in conntrack.RouterZone with
// destination addr (and port, unless 0), and looks it up again in
// TableRouterSNAT.
func redirectTo(addr netip.Addr, port uint16) openflow.CT {
	return openflow.CT{Flags: openflow.CTCommit, Zone: conntrack.RouterZone, Recirculate: true, Table: TableRouterSNAT,
		Actions: []openflow.Action{openflow.NAT{Flags: openflow.NATDst, MinAddr: addr, MinPort: port}}}
}

// RouterPartOf is the specification of a router's part on node: it has
// one when the router names node its holder, node is not fenced, and the
// router can be served (its spec reads without a problem). Problems are
// the holder's only: why it does not serve the router it was given. The
// part's ID is left 0: the member gives it.
func RouterPartOf(node string, fenced bool, key string, router *nov1.EgressRouter) (RouterPart, bool, []Problem) {
	if router == nil || router.Status.Holder != node {
		return RouterPart{}, false, nil
	}
	redirect, problems := router.Spec.Read()
	if len(problems) > 0 {
		out := make([]Problem, 0, len(problems))
		for _, pr := range problems {
			out = append(out, Problem{Key: key, Reason: pr.Reason, Message: pr.Message})
		}
		return RouterPart{}, false, out
	}
	if fenced {
		return RouterPart{}, false, []Problem{{Key: key, Reason: reasons.Fenced,
			Message: "node " + node + " could not renew its heartbeat: it does not serve the router until it can"}}
	}
	part := RouterPart{Key: key, Fallback: redirect.Fallback}
	for _, a := range redirect.Addresses {
		part.Addresses = append(part.Addresses, a.Prefix.Addr())
	}
	slices.SortFunc(part.Addresses, func(a, b netip.Addr) int { return family(a) - family(b) })
	for _, a := range redirect.Addresses {
		if a.Gateway.IsValid() {
			part.Gateways = append(part.Gateways, RouterGateway{Address: a.Prefix, Gateway: a.Gateway})
		}
	}
	for _, r := range redirect.Rules {
		part.Rules = append(part.Rules, RouterRule{Protocol: protocolNumbers[r.Protocol], Port: r.Port, TargetPort: r.TargetPort, Destination: r.Destination})
	}
	return part, true, nil
}

// routerMember keeps the EgressRouter parts of a node: each router's part
// depends on the router alone (and on whether the node is fenced), so a
// change touches its own key only; IDs are given once and kept while the
// router has a part, so that a change never renumbers another router's
// flows.
type routerMember struct {
	node    string
	fenced  bool
	routers map[string]*nov1.EgressRouter
	parts   map[string]RouterPart
	// problems are the holder's, by key.
	problems map[string][]Problem
	// ids are the IDs the parts hold.
	ids map[uint32]bool
}

// NewRouterMember returns node's EgressRouter member
// (Planner.RegisterMember).
func NewRouterMember(node string) Member {
	return &routerMember{node: node, routers: map[string]*nov1.EgressRouter{}, parts: map[string]RouterPart{},
		problems: map[string][]Problem{}, ids: map[uint32]bool{0: true}}
}

func (*routerMember) API() API { return APIEgressRouter }

// Update takes key's router (*nov1.EgressRouter; nil when it is gone).
func (m *routerMember) Update(key string, obj any) []string {
	router, _ := obj.(*nov1.EgressRouter)
	if router == nil {
		delete(m.routers, key)
	} else {
		m.routers[key] = router
	}
	m.replan(key)
	return []string{key}
}

// replan recomputes key's part, keeping its ID while it has one.
func (m *routerMember) replan(key string) {
	part, ok, problems := RouterPartOf(m.node, m.fenced, key, m.routers[key])
	old, had := m.parts[key]
	switch {
	case ok && had:
		part.ID = old.ID
	case ok:
		part.ID = takeID(m.ids, ServiceHash(key))
	case had:
		delete(m.ids, old.ID)
	}
	if ok {
		m.parts[key] = part
	} else {
		delete(m.parts, key)
	}
	if len(problems) > 0 {
		m.problems[key] = problems
	} else {
		delete(m.problems, key)
	}
}

// SetFenced fences or unfences the node (FenceFollower): a fenced node
// serves no router.
func (m *routerMember) SetFenced(fenced bool) []string {
	if m.fenced == fenced {
		return nil
	}
	m.fenced = fenced
	var changed []string
	for key, r := range m.routers {
		if r.Status.Holder == m.node {
			m.replan(key)
			changed = append(changed, key)
		}
	}
	return changed
}

// Refusals are the refusals of every router the node serves, sorted by
// address (RouterPart.Refusals).
func (m *routerMember) Refusals() []RouterRefusal {
	var out []RouterRefusal
	for _, part := range m.parts {
		out = append(out, part.Refusals()...)
	}
	slices.SortFunc(out, func(a, b RouterRefusal) int { return a.Address.Compare(b.Address) })
	return out
}

// Gateways are the gateways of every router the node serves
// (RouterPart.Gateways), in no order.
func (m *routerMember) Gateways() []RouterGateway {
	var out []RouterGateway
	for _, part := range m.parts {
		out = append(out, part.Gateways...)
	}
	return out
}

func (m *routerMember) Part(key string) (Part, bool) {
	part, ok := m.parts[key]
	return asPart(part, ok)
}

func (m *routerMember) Problems(key string) []Problem { return m.problems[key] }

func (m *routerMember) Keys() iter.Seq[string] { return maps.Keys(m.routers) }
