package dataplane

import (
	"hash/fnv"
	"net"
	"net/netip"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/openflow"
)

// Cookies mark egressflow's flows: bits 63..48 are CookiePrefix, 47..40 the
// flow's kind, 39..8 a hash of the service's namespace/name (0 for flows
// shared by all services), 7..0 CookieLayout. `ovs-ofctl dump-flows br-ex
// cookie=0xef10000000000000/0xffff000000000000` lists them all.
const (
	CookiePrefix     uint64 = 0xef10 << 48
	CookiePrefixMask uint64 = 0xffff << 48
	// CookieLayout is bumped when the pipeline changes shape, so that an
	// upgraded agent can find flows of an older layout by mask.
	// Layout 2: the classifying flows match an endpoint on every port, and
	// TableOrigin sorts by port (layout 1 matched in_port=LOCAL only).
	// Layout 3: the pod guard stays after the first sync, below flows that
	// admit each known pod.
	// Layout 4: TableOrigin sends a packet from the host stack through the
	// node-local stages (TableQoS today) before TableEgress, and a pod a
	// stage concerns is admitted in TableEgress (priorityAdmittedLate).
	// Layout 5: TableFirewall is the first stage: TableOrigin's LOCAL flow
	// goes to it, and a firewalled namespace's pods are admitted late.
	// Layout 6: the SNAT flows recirculate to TableUplink, which lets out
	// only what conntrack translated.
	CookieLayout uint64 = 6
)

// FlowKind is the role of a flow in the pipeline, bits 47..40 of its cookie.
type FlowKind uint8

const (
	KindRedirect FlowKind = 1  // TableClassify: an endpoint's packet, from any port, to TableOrigin
	KindExempt   FlowKind = 2  // TableOrigin, TableEgress: a destination inside the cluster
	KindSNAT     FlowKind = 3  // TableEgress: SNAT to the LB IP, then TableUplink
	KindSteer    FlowKind = 4  // TableEgress: to the host node's bridge MAC
	KindDrop     FlowKind = 5  // TableEgress: fail closed (shared), or an endpoint with no host to steer to
	KindReplyCT  FlowKind = 6  // TableClassify: traffic to an LB IP through conntrack
	KindDeliver  FlowKind = 7  // TableReply: un-SNATed replies to LOCAL, the rest NORMAL
	KindOrigin   FlowKind = 8  // TableOrigin: by in_port; other ports' packets through the host stack
	KindMarker   FlowKind = 9  // TableMarker: this vswitchd has egressflow's flows
	KindPodGuard FlowKind = 10 // TableClassify: every pod's packet, to TableOrigin
	KindAdmit    FlowKind = 11 // TableClassify, or TableEgress after the stages: an admitted pod's packet, as it is
	KindUplink   FlowKind = 12 // TableUplink: a SNATed packet out the uplink if conntrack translated it, else drop
	KindHold     FlowKind = 13 // TableEgress: a pod the guard holds, dropped above an external route
)

// Cookie is the cookie of a flow of kind for service key ("" for shared).
func Cookie(kind FlowKind, service string) uint64 {
	return CookiePrefix | uint64(kind)<<40 | uint64(ServiceHash(service))<<8 | CookieLayout
}

// ServiceCookieMask selects every flow of one service (prefix, hash, layout).
const ServiceCookieMask uint64 = CookiePrefixMask | 0xffffffff<<8 | 0xff

// ServiceHash is the 32-bit FNV-1a hash of a service's namespace/name that
// its flows' cookies carry; 0 for "" (the shared flows), and never 0 for a
// service (a name hashing to 0 gets 1).
func ServiceHash(service string) uint32 {
	if service == "" {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(service))
	return max(h.Sum32(), 1)
}

// Ports are the facts of the bridge Flows needs.
type Ports struct {
	// Uplink is the port of the node's uplink interface on br-ex.
	Uplink uint32
	// BridgeMAC is the MAC of br-ex's LOCAL port, the pods' gateway: a
	// pod's packet that tries to pass the host stack is readdressed to it.
	// Nil while unknown: such packets are dropped instead.
	BridgeMAC net.HardwareAddr
}

// Flows renders the desired state of node into flow additions, in a
// stable order: each service's flows (ServiceFlows), each EgressIP's
// (EgressIPPart.AppendFlows), each EgressFirewall
// namespace's (AppendFirewallNamespace), each EgressQoS namespace's
// (AppendQoSNamespace), each external route's
// (ExternalRoutePart.AppendFlows), then the shared ones (SharedFlows). Two flows
// never share a table, priority and match: Compute gives each endpoint and
// each reply LB IP to one service only.
func Flows(node NodeConfig, state State, ports Ports) []*openflow.FlowMod {
	var out []*openflow.FlowMod
	var buf FlowBuffer // never reset: the flows are the caller's
	for _, s := range state.Services {
		out = buf.AppendService(out, s, ports)
	}
	for _, part := range state.EgressIP.Parts {
		out = part.AppendFlows(&buf, out, ports)
	}
	for _, ns := range state.Firewall.Namespaces {
		out = ns.AppendFlows(&buf, out, ports)
	}
	for _, ns := range state.QoS.Namespaces {
		out = ns.AppendFlows(&buf, out, ports)
	}
	for _, part := range state.ExternalRoute.Parts {
		out = part.AppendFlows(&buf, out, ports)
	}
	return append(out, SharedFlows(sharedOf(node, state), ports)...)
}

// sharedOf is what node's shared flows depend on in state.
func sharedOf(node NodeConfig, state State) Shared {
	shared := Shared{Exempt: state.Exempt, Guarded: node.ClusterPodCIDRs, Admitted: state.Admitted, AdmittedLate: state.AdmittedLate, Held: state.Held,
		FirewallExempt: state.Firewall.Exempt, FirewallResolvers: state.Firewall.Resolvers}
	for _, part := range state.EgressIP.Parts {
		if len(part.Held) > 0 {
			shared.HoldingEgressIPs++
		}
	}
	for _, s := range state.Services {
		switch s.Role {
		case RoleHost:
			shared.Hosting++
		case RoleSteer:
			shared.Steering++
		}
	}
	return shared
}

// ServiceFlows renders one service's flows, all carrying its hash in their
// cookie.
func ServiceFlows(s Service, ports Ports) []*openflow.FlowMod {
	var buf FlowBuffer
	return buf.AppendService(nil, s, ports)
}

// FlowBuffer is storage for rendered flows that is used again after Reset:
// the agent renders each group of services into one, diffs the group and
// encodes its changes, then resets it for the next group, so that
// rendering a node's 200,000 flows to compare them with the bridge
// allocates for one group's flows, not for all of them. Flows rendered
// into it stay valid (and unchanged) until Reset, however it grows; flows
// of one service share their instructions, which must not be modified.
type FlowBuffer struct {
	chunks [][]openflow.FlowMod // never moved once made, so handed-out flows stay put
	chunk  int                  // the chunk the next flow goes in
	used   int                  // flows used of that chunk
}

// Chunk sizes of a FlowBuffer: it grows by chunks as large as what it
// holds so far, between these bounds. Small first chunks keep a buffer for
// one service small; the cap bounds what a buffer holds beyond its need.
const (
	flowBufferMinChunk = 8
	flowBufferMaxChunk = 1024
)

// Reset makes b's storage free for reuse: every flow rendered into it
// before becomes invalid.
func (b *FlowBuffer) Reset() { b.chunk, b.used = 0, 0 }

// Add renders one flow mod into the buffer: an ADD with cookie, table,
// priority and instructions, and an empty match for the caller to fill.
func (b *FlowBuffer) Add(cookie uint64, table uint8, priority uint16, insts []openflow.Instruction) *openflow.FlowMod {
	if b.chunk < len(b.chunks) && b.used == len(b.chunks[b.chunk]) {
		b.chunk, b.used = b.chunk+1, 0
	}
	if b.chunk == len(b.chunks) {
		held := 0
		for _, c := range b.chunks {
			held += len(c)
		}
		b.chunks = append(b.chunks, make([]openflow.FlowMod, min(max(held, flowBufferMinChunk), flowBufferMaxChunk)))
	}
	fm := &b.chunks[b.chunk][b.used]
	b.used++
	m := fm.Match
	m.Reset() // its fields' storage serves the new flow
	*fm = openflow.FlowMod{
		Command: openflow.FlowAdd, Cookie: cookie, Table: table, Priority: priority,
		Match: m, Instructions: insts,
	}
	return fm
}

// Instructions that are the same in every flow of their kind, shared by
// them all (and never modified).
var (
	gotoOrigin = []openflow.Instruction{openflow.GotoTable{Table: TableOrigin}}
	// gotoFirstStage is where TableOrigin sends a packet from the host
	// stack: the first node-local stage, TableFirewall. Every path through
	// it that lets the packet go on resubmits to TableQoS, whose end
	// resubmits to TableEgress.
	gotoFirstStage = []openflow.Instruction{openflow.GotoTable{Table: TableFirewall}}
	normal         = []openflow.Instruction{openflow.Apply(openflow.Output{Port: openflow.PortNormal})}
	// replyThroughCT un-NATs a packet to an LB IP (a reply to a SNATed
	// connection) and continues in TableReply.
	replyThroughCT = []openflow.Instruction{openflow.Apply(
		openflow.CT{Zone: conntrack.SNATZone, Recirculate: true, Table: TableReply, Actions: []openflow.Action{openflow.NAT{}}})}
)

// snatTo commits a packet to conntrack with its source translated to
// addr, and sends it on to TableUplink, which lets it out only if the
// translation happened.
func snatTo(addr netip.Addr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(snatAction(addr))}
}

// snatAction is snatTo's action.
func snatAction(addr netip.Addr) openflow.CT {
	return openflow.CT{
		Flags: openflow.CTCommit, Zone: conntrack.SNATZone, Recirculate: true, Table: TableUplink,
		Actions: []openflow.Action{openflow.NAT{Flags: openflow.NATSrc, MinAddr: addr}},
	}
}

// AppendService renders s's flows (ServiceFlows) into b and appends them to
// dst. The flows of one kind share their instructions.
func (b *FlowBuffer) AppendService(dst []*openflow.FlowMod, s Service, ports Ports) []*openflow.FlowMod {
	add := func(kind FlowKind, table uint8, insts []openflow.Instruction) *openflow.Match {
		fm := b.Add(Cookie(kind, s.Key), table, priorityService, insts)
		dst = append(dst, fm)
		return &fm.Match
	}
	switch s.Role {
	case RoleHost:
		var snat [2][]openflow.Instruction // by family, IPv4 first
		for _, ep := range s.Endpoints {
			family := 0
			if ep.Is6() {
				family = 1
			}
			if snat[family] == nil {
				lb, _ := s.LoadBalancerIP(ep)
				snat[family] = snatTo(lb)
			}
			setIP(add(KindRedirect, TableClassify, gotoOrigin), ep, srcField(ep))
			setIP(add(KindSNAT, TableEgress, snat[family]), ep, srcField(ep))
		}
		for _, lb := range s.ReplyLBIPs {
			m := add(KindReplyCT, TableClassify, replyThroughCT)
			setIP(m, lb, dstField(lb))
			m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
		}
	case RoleSteer:
		// With no host to steer to (its MAC unknown, or this node fenced),
		// each endpoint gets a drop of its own at the service's priority:
		// the shared fail-closed drop is not enough, since a namespace
		// whose pods pass the node-local stages admits its known pods
		// below the services in TableEgress (priorityAdmittedLate), an
		// endpoint among them.
		kind, steer := KindDrop, []openflow.Instruction(nil)
		if s.HostMAC != nil {
			kind, steer = KindSteer, []openflow.Instruction{openflow.Apply(
				openflow.SetField{Field: openflow.FieldEthDst, Value: []byte(s.HostMAC)},
				openflow.Output{Port: ports.Uplink})}
		}
		for _, ep := range s.Endpoints {
			setIP(add(KindRedirect, TableClassify, gotoOrigin), ep, srcField(ep))
			setIP(add(kind, TableEgress, steer), ep, srcField(ep))
		}
	}
	return dst
}

// Shared is what the flows no one service owns depend on.
type Shared struct {
	// Exempt are the destinations never rewritten (State.Exempt).
	Exempt []netip.Prefix
	// Guarded are the pod CIDRs of the pod guard: a packet from any of
	// them goes through TableOrigin and, on its way out, is dropped unless
	// its source is admitted or a service's flows act on it. None: no
	// guard.
	Guarded []netip.Prefix
	// Admitted are the pod addresses that pass the guard (State.Admitted).
	Admitted []netip.Addr
	// Held are the pod addresses the guard holds (State.Held).
	Held []netip.Addr
	// AdmittedLate are the pod addresses admitted in TableEgress, after
	// the node-local stages (State.AdmittedLate).
	AdmittedLate []netip.Addr
	// FirewallExempt are the destinations TableFirewall never judges
	// (Firewall.Exempt): the pod and service CIDRs, not the node
	// addresses.
	FirewallExempt []netip.Prefix
	// FirewallResolvers are the local resolver pods whose DNS replies are
	// snooped by no namespace's flows (Firewall.Resolvers).
	FirewallResolvers []netip.Addr
	// Hosting and Steering count the services the node acts on by role.
	Hosting, Steering int
	// HoldingEgressIPs counts the EgressIPs of which the node holds an
	// address: their replies are delivered like a hosted service's.
	HoldingEgressIPs int
}

// SharedFlows renders the flows no one service owns: always the marker;
// the pod guard, and a flow admitting each admitted address; with the
// guard or any service to divert (hosting or steering), TableOrigin, the
// node-local stages' flows that no object owns (FirewallSharedFlows,
// QoSSharedFlows), the
// exemptions, the late admissions and the fail-closed drop; with any
// service hosted or EgressIP address held, the delivery of un-SNATed
// replies and TableUplink.
func SharedFlows(shared Shared, ports Ports) []*openflow.FlowMod {
	var buf FlowBuffer
	out := []*openflow.FlowMod{buf.Add(Cookie(KindMarker, ""), TableMarker, 0, nil)}
	if len(shared.Guarded)+shared.Hosting+shared.Steering == 0 {
		return out
	}
	add := func(kind FlowKind, table uint8, priority uint16, insts []openflow.Instruction) *openflow.Match {
		fm := buf.Add(Cookie(kind, ""), table, priority, insts)
		out = append(out, fm)
		return &fm.Match
	}
	for _, p := range shared.Guarded {
		m := add(KindPodGuard, TableClassify, priorityPodGuard, gotoOrigin)
		setIP(m, p.Addr(), openflow.FieldNone)
		m.SetPrefix(srcField(p.Addr()), p.Masked())
	}
	for _, a := range shared.Admitted {
		setIP(add(KindAdmit, TableClassify, priorityAdmitted, normal), a, srcField(a))
	}
	// TableOrigin, by where the packet entered the bridge.
	add(KindOrigin, TableOrigin, priorityExempt, gotoFirstStage).SetUint(openflow.FieldInPort, uint64(openflow.PortLocal))
	add(KindOrigin, TableOrigin, priorityExempt, normal).SetUint(openflow.FieldInPort, uint64(ports.Uplink))
	for _, p := range multicastDestinations {
		m := add(KindOrigin, TableOrigin, priorityMulticast, normal)
		setIP(m, p.Addr(), openflow.FieldNone)
		m.SetPrefix(dstField(p.Addr()), p)
	}
	// The stages: a stage table without its default would drop what
	// misses it (OpenFlow's table-miss), so they come with TableOrigin.
	out = append(out, FirewallSharedFlows(shared.FirewallExempt, shared.FirewallResolvers)...)
	out = append(out, QoSSharedFlows(shared.Exempt)...)
	// In TableOrigin the exemptions come below the in_port flows: a
	// packet from LOCAL goes on through the stages to TableEgress, which
	// exempts them too.
	for _, at := range []struct {
		table    uint8
		priority uint16
	}{{TableOrigin, priorityService}, {TableEgress, priorityExempt}} {
		for _, p := range shared.Exempt {
			m := add(KindExempt, at.table, at.priority, normal)
			setIP(m, p.Addr(), openflow.FieldNone)
			m.SetPrefix(dstField(p.Addr()), p)
		}
	}
	// A pod's packet to the outside that did not come through the host
	// stack goes to it, so that it comes back through LOCAL like any
	// routed packet (and is SNATed, steered or dropped in TableEgress).
	var throughHost []openflow.Instruction // nil: drop
	if ports.BridgeMAC != nil {
		throughHost = []openflow.Instruction{openflow.Apply(
			openflow.SetField{Field: openflow.FieldEthDst, Value: []byte(ports.BridgeMAC)},
			openflow.Output{Port: openflow.PortLocal})}
	}
	add(KindOrigin, TableOrigin, priorityFallback, throughHost)
	for _, a := range shared.Held {
		setIP(add(KindHold, TableEgress, priorityHeld, nil), a, srcField(a))
	}
	// A pod a stage concerns has passed the stages by now.
	for _, a := range shared.AdmittedLate {
		setIP(add(KindAdmit, TableEgress, priorityAdmittedLate, normal), a, srcField(a))
	}
	add(KindDrop, TableEgress, priorityFallback, nil) // no instructions: drop
	if shared.Hosting+shared.HoldingEgressIPs == 0 {
		return out
	}
	for _, family := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		m := add(KindDeliver, TableReply, priorityService, []openflow.Instruction{openflow.Apply(openflow.Output{Port: openflow.PortLocal})})
		setIP(m, family, openflow.FieldNone)
		m.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk), uint64(openflow.CTStateTrk|openflow.CTStateNew))
	}
	add(KindDeliver, TableReply, priorityFallback, normal)
	// TableUplink: what conntrack translated leaves; the rest (still
	// from a pod's address) is dropped by the table's miss, which a
	// flow without instructions makes visible in a dump.
	for _, family := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		m := add(KindUplink, TableUplink, priorityService, []openflow.Instruction{openflow.Apply(openflow.Output{Port: ports.Uplink})})
		setIP(m, family, openflow.FieldNone)
		translated := uint64(openflow.CTStateTrk | openflow.CTStateSNAT)
		m.SetUintMasked(openflow.FieldCTState, translated, translated|uint64(openflow.CTStateInv))
	}
	add(KindUplink, TableUplink, priorityFallback, nil) // no instructions: drop
	return out
}

// multicastDestinations are the destinations of a pod's traffic that
// TableOrigin passes as it is: all IPv4 multicast and the limited
// broadcast, all IPv6 multicast (neighbour discovery among it). Only the
// link-scope part of it (224.0.0.0/24, ff02::/16) stays on the segment;
// routed multicast from a pod attached to the bridge passes too.
var multicastDestinations = []netip.Prefix{
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("ff00::/8"),
}

// ColdGuardFlows are what an agent installs on an ovs-vswitchd that holds
// none of egressflow's flows (it has just started) before it can compute
// the desired ones: the pod guard with no pod admitted. Without the
// cluster's objects the agent cannot tell endpoints from other pods, so
// every pod of the cluster CIDRs is held to the fail-closed pipeline, with
// only cluster-internal destinations exempt. Pods cannot reach the outside
// until the first sync admits them; none leaves with its pod IP.
func ColdGuardFlows(node NodeConfig, ports Ports) []*openflow.FlowMod {
	return SharedFlows(Shared{Exempt: exemptions(node, nil), Guarded: node.ClusterPodCIDRs}, ports)
}

// MarkerCookie is the cookie of the marker flow: a dump for it alone tells
// whether the switch holds egressflow's flows.
var MarkerCookie = Cookie(KindMarker, "")

// FlowID identifies a flow on a switch: OpenFlow allows one flow per table,
// priority and match.
func FlowID(fm *openflow.FlowMod) string {
	return string(appendFlowID(nil, fm.Table, fm.Priority, &fm.Match))
}

// appendFlowID appends a flow's FlowID bytes: table, priority, then the
// match's wire form.
func appendFlowID(b []byte, table uint8, priority uint16, m *openflow.Match) []byte {
	prefix := flowIDPrefix(table, priority)
	b = append(b, prefix[:]...)
	b, _ = m.AppendBinary(b) // only unencodable values fail; ours encode
	return b
}

// flowIDPrefix is what a FlowID holds before the match: table, then
// priority, big-endian.
func flowIDPrefix(table uint8, priority uint16) [3]byte {
	return [3]byte{table, byte(priority >> 8), byte(priority)}
}

// setIP matches the family of addr (eth_type) and, unless field is
// FieldNone, addr itself in field.
func setIP(m *openflow.Match, addr netip.Addr, field openflow.Field) {
	ethType := uint64(0x0800)
	if addr.Is6() {
		ethType = 0x86dd
	}
	m.SetUint(openflow.FieldEthType, ethType)
	if field != openflow.FieldNone {
		m.SetAddr(field, addr)
	}
}

func srcField(a netip.Addr) openflow.Field {
	if a.Is6() {
		return openflow.FieldIPv6Src
	}
	return openflow.FieldIPv4Src
}

func dstField(a netip.Addr) openflow.Field {
	if a.Is6() {
		return openflow.FieldIPv6Dst
	}
	return openflow.FieldIPv4Dst
}
