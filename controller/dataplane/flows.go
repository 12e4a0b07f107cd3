package dataplane

import (
	"hash/fnv"
	"net/netip"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/openflow"
)

// Tables egressflow owns on br-ex (table 0 is shared: egressflow adds only
// flows that carry its cookie, above OVS's own priority-0 NORMAL flow).
const (
	// TableClassify is OpenFlow's first table, where egressflow diverts the
	// packets it handles.
	TableClassify uint8 = 0
	// TableEgress decides what happens to an endpoint's packet on its way
	// from the host stack to the uplink: exempt, SNAT, steer or drop.
	TableEgress uint8 = 41
	// TableReply delivers un-SNATed replies to the host stack.
	TableReply uint8 = 42
)

// Priorities, highest first within a table.
const (
	// priorityExempt keeps destinations inside the cluster untouched.
	priorityExempt uint16 = 300
	// priorityService is every per-service flow.
	priorityService uint16 = 200
	// priorityFallback is the fail-closed drop in TableEgress and the
	// NORMAL of non-reply traffic in TableReply.
	priorityFallback uint16 = 100
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
	CookieLayout uint64 = 1
)

// FlowKind is the role of a flow in the pipeline, bits 47..40 of its cookie.
type FlowKind uint8

const (
	KindRedirect FlowKind = 1 // TableClassify: an endpoint's packet from LOCAL to TableEgress
	KindExempt   FlowKind = 2 // TableEgress: a destination inside the cluster
	KindSNAT     FlowKind = 3 // TableEgress: SNAT to the LB IP and out the uplink
	KindSteer    FlowKind = 4 // TableEgress: to the host node's bridge MAC
	KindDrop     FlowKind = 5 // TableEgress: fail closed
	KindReplyCT  FlowKind = 6 // TableClassify: traffic to an LB IP through conntrack
	KindDeliver  FlowKind = 7 // TableReply: un-SNATed replies to LOCAL, the rest NORMAL
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

// Ports are the OpenFlow port numbers Flows needs.
type Ports struct {
	// Uplink is the port of the node's uplink interface on br-ex.
	Uplink uint32
}

// Flows renders the desired state into flow additions, in a stable order:
// each service's flows (ServiceFlows), then the shared ones (SharedFlows).
// Two flows never share a table, priority and match: Compute gives each
// endpoint and each reply LB IP to one service only.
func Flows(state State, ports Ports) []*openflow.FlowMod {
	var out []*openflow.FlowMod
	var buf FlowBuffer // never reset: the flows are the caller's
	acting := map[Role]int{}
	for _, s := range state.Services {
		out = buf.AppendService(out, s, ports)
		acting[s.Role]++
	}
	return append(out, SharedFlows(state.Exempt, acting[RoleHost], acting[RoleSteer], ports)...)
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

// add renders one flow mod into the buffer.
func (b *FlowBuffer) add(cookie uint64, table uint8, priority uint16, insts []openflow.Instruction) *openflow.FlowMod {
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
	gotoEgress = []openflow.Instruction{openflow.GotoTable{Table: TableEgress}}
	// replyThroughCT un-NATs a packet to an LB IP (a reply to a SNATed
	// connection) and continues in TableReply.
	replyThroughCT = []openflow.Instruction{openflow.Apply(
		openflow.CT{Zone: conntrack.SNATZone, Recirculate: true, Table: TableReply, Actions: []openflow.Action{openflow.NAT{}}})}
)

// AppendService renders s's flows (ServiceFlows) into b and appends them to
// dst. The flows of one kind share their instructions.
func (b *FlowBuffer) AppendService(dst []*openflow.FlowMod, s Service, ports Ports) []*openflow.FlowMod {
	add := func(kind FlowKind, table uint8, insts []openflow.Instruction) *openflow.Match {
		fm := b.add(Cookie(kind, s.Key), table, priorityService, insts)
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
				snat[family] = []openflow.Instruction{openflow.Apply(
					openflow.CT{Flags: openflow.CTCommit, Zone: conntrack.SNATZone, Actions: []openflow.Action{
						openflow.NAT{Flags: openflow.NATSrc, MinAddr: lb},
					}},
					openflow.Output{Port: ports.Uplink})}
			}
			setRedirect(add(KindRedirect, TableClassify, gotoEgress), ep)
			setIP(add(KindSNAT, TableEgress, snat[family]), ep, srcField(ep))
		}
		for _, lb := range s.ReplyLBIPs {
			m := add(KindReplyCT, TableClassify, replyThroughCT)
			setIP(m, lb, dstField(lb))
			m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
		}
	case RoleSteer:
		var steer []openflow.Instruction
		if s.HostMAC != nil { // else the shared drop catches it: fail closed
			steer = []openflow.Instruction{openflow.Apply(
				openflow.SetField{Field: openflow.FieldEthDst, Value: []byte(s.HostMAC)},
				openflow.Output{Port: ports.Uplink})}
		}
		for _, ep := range s.Endpoints {
			setRedirect(add(KindRedirect, TableClassify, gotoEgress), ep)
			if steer != nil {
				setIP(add(KindSteer, TableEgress, steer), ep, srcField(ep))
			}
		}
	}
	return dst
}

// SharedFlows renders the flows no one service owns: with any service to
// divert (hosting or steering), the exemptions and the fail-closed drop;
// with any service hosted, the delivery of un-SNATed replies.
func SharedFlows(exempt []netip.Prefix, hosting, steering int, ports Ports) []*openflow.FlowMod {
	var out []*openflow.FlowMod
	if hosting+steering == 0 {
		return out
	}
	var buf FlowBuffer
	add := func(kind FlowKind, table uint8, priority uint16, insts ...openflow.Instruction) *openflow.Match {
		fm := buf.add(Cookie(kind, ""), table, priority, insts)
		out = append(out, fm)
		return &fm.Match
	}
	for _, p := range exempt {
		m := add(KindExempt, TableEgress, priorityExempt, openflow.Apply(openflow.Output{Port: openflow.PortNormal}))
		setIP(m, p.Addr(), openflow.FieldNone)
		m.SetPrefix(dstField(p.Addr()), p)
	}
	add(KindDrop, TableEgress, priorityFallback) // no instructions: drop
	if hosting == 0 {
		return out
	}
	for _, family := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		m := add(KindDeliver, TableReply, priorityService, openflow.Apply(openflow.Output{Port: openflow.PortLocal}))
		setIP(m, family, openflow.FieldNone)
		m.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk), uint64(openflow.CTStateTrk|openflow.CTStateNew))
	}
	add(KindDeliver, TableReply, priorityFallback, openflow.Apply(openflow.Output{Port: openflow.PortNormal}))
	return out
}

// setRedirect matches an endpoint's packets coming from the host stack.
func setRedirect(m *openflow.Match, ep netip.Addr) {
	setIP(m, ep, srcField(ep))
	m.SetUint(openflow.FieldInPort, uint64(openflow.PortLocal))
}

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
