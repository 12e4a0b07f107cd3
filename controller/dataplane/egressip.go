package dataplane

import (
	"bytes"
	"cmp"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
)

// EgressIP's part of a node's desired state (docs/egressip.md,
// "Dataplane"). The cluster component gives each address of an EgressIP a
// node (status.items); every agent reads the same objects. On a node that
// holds an address, every pod the object selects of that address's family
// is SNATed to it and committed in conntrack.SNATZone, wherever the pod
// runs; the pod's own node decides, per connection, which of the object's
// held addresses of the pod's family it leaves with, and steers it there
// (to the holder's bridge MAC), as an EgressService's endpoint is steered
// to its host. With one such address held, that is the pod's address;
// with several, the pod's connections are spread over them (an OpenFlow
// select group), and each keeps the address it was given while that
// address is held (conntrack.EgressIPZone, TableEgressIPSpread), as the
// reference spreads them with ECMP routes. The holder answers ARP and
// neighbour solicitations for the address from the uplink with flows of
// its own (no address on any interface), so that the answer comes and
// goes in the same bundle as the SNAT.
//
// ComputeEgressIP is the specification; the Planner keeps the same parts
// incrementally (planner_egressip.go).

// Flow kinds of EgressIP.
var (
	// KindEgressIPSNAT, in TableEgress, SNATs a selected pod's packet to
	// the address of the object that this node holds, and sends it on to
	// TableUplink. The object's hash.
	KindEgressIPSNAT = APIEgressIP.Kind(1)
	// KindEgressIPSteer, in TableEgress, sends a local selected pod's
	// packet to the bridge MAC of the node holding its address.
	KindEgressIPSteer = APIEgressIP.Kind(2)
	// KindEgressIPReply, in TableClassify, un-NATs the packets from the
	// uplink to a held address and delivers them (TableReply).
	KindEgressIPReply = APIEgressIP.Kind(3)
	// KindEgressIPARP, in TableClassify, answers an ARP request for a held
	// IPv4 address from the uplink with the bridge's MAC.
	KindEgressIPARP = APIEgressIP.Kind(4)
	// KindEgressIPND answers a neighbour solicitation for a held IPv6
	// address from the uplink with the bridge's MAC: in TableClassify the
	// solicitation becomes an advertisement, in TableNeighbour it gets its
	// target link-layer address and goes back out. Duplicate address
	// detection's solicitations (from ::) are passed on instead.
	KindEgressIPND = APIEgressIP.Kind(5)
	// KindEgressIPSpread, in TableEgress, loads the number of a local
	// selected pod's spread into reg6 (EgressIPSpread.reg6) and sends its
	// packet through conntrack.EgressIPZone to TableEgressIPSpread.
	KindEgressIPSpread = APIEgressIP.Kind(6)
	// KindEgressIPSticky, in TableEgressIPSpread, sends a connection that
	// was given one of the group's addresses (ct_label) on to it.
	KindEgressIPSticky = APIEgressIP.Kind(7)
	// KindEgressIPPick, in TableEgressIPSpread, gives any other connection
	// of the group's pods an address: the group's.
	KindEgressIPPick = APIEgressIP.Kind(8)
	// KindEgressIPCommit, in TableEgressIPSpread, records the address the
	// group gave a connection in its ct_label and sends it on to it.
	KindEgressIPCommit = APIEgressIP.Kind(9)
)

// RoleEgressIP is no EgressService's: the role an EgressIP part's flows
// are counted under (DiffOutput.Count).
const RoleEgressIP Role = "EgressIP"

// ndAdvertFlags are the reserved word of the advertisements the responder
// sends: Solicited and Override (RFC 4861 §4.4), as a router's neighbour
// would answer for an address it owns.
const ndAdvertFlags = 0x60000000

// ndOptionTargetLinkAddr is the type of the advertisement's option
// (RFC 4861 §4.6.1).
const ndOptionTargetLinkAddr = 2

// EgressIPUnheld is the cluster's choice for a selected pod whose
// EgressIP holds no address of its family (esv1.EgressIPUnheld).
type EgressIPUnheld = esv1.EgressIPUnheld

// The choices of EgressIPUnheld.
const (
	EgressIPUnheldDrop   = esv1.EgressIPUnheldDrop
	EgressIPUnheldNodeIP = esv1.EgressIPUnheldNodeIP
)

// EgressIPHop is one held address that a node's pods leave with.
type EgressIPHop struct {
	// Via is the egress IP.
	Via netip.Addr
	// HolderMAC is the bridge MAC of the node that holds Via, when another
	// node does (steer); nil when this node does (SNAT).
	HolderMAC net.HardwareAddr
}

func (h EgressIPHop) equal(o EgressIPHop) bool {
	return h.Via == o.Via && bytes.Equal(h.HolderMAC, o.HolderMAC)
}

// EgressIPPod is what a node does with one selected pod address.
type EgressIPPod struct {
	Pod netip.Addr
	// EgressIPHop is the address the pod leaves with, unless Spread.
	EgressIPHop
	// Local: the pod runs on this node. Each of its connections is
	// recorded in conntrack.EgressIPZone with the address it leaves
	// with, so that it keeps that address when others come (Spread).
	Local bool
	// Spread: a local pod whose object holds several addresses of its
	// family; its connections are spread over the part's
	// Spread[family] (Via and HolderMAC are unset).
	Spread bool
}

// EgressIPSpread is how a node spreads its pods' connections over the
// addresses their EgressIP holds of one family.
type EgressIPSpread struct {
	// Group is the ID of the OpenFlow select group that gives a
	// connection one of Hops (APIEgressIP.GroupID); 0 when the node
	// spreads no pod of this family.
	Group uint32
	// Hops are the held addresses, sorted, one per holder.
	Hops []EgressIPHop
}

func (s EgressIPSpread) equal(o EgressIPSpread) bool {
	return s.Group == o.Group && slices.EqualFunc(s.Hops, o.Hops, EgressIPHop.equal)
}

// EgressIPPart is one EgressIP's part of a node's dataplane.
type EgressIPPart struct {
	// Key is ObjectKey(APIEgressIP, "", name).
	Key string
	// Held are the object's addresses this node holds, sorted: it answers
	// for them on the uplink and un-NATs their replies.
	Held []netip.Addr
	// Pods are the selected pod addresses the node acts on, sorted: every
	// pod of a family of which this node holds an address, wherever it
	// runs (SNAT), and each local pod whose connections another node's
	// address takes (steer) or several addresses share (spread). A local
	// selected pod without a held address it can reach has no flow here,
	// and the pod guard drops its egress.
	Pods []EgressIPPod
	// Spread are, by family (IPv4 first), the addresses the spread pods
	// of Pods leave through.
	Spread [2]EgressIPSpread
}

// FlowRole is RoleEgressIP.
func (p EgressIPPart) FlowRole() Role { return RoleEgressIP }

// Announced are the held addresses (Announcer).
func (p EgressIPPart) Announced() []netip.Addr { return p.Held }

// Equal reports whether two parts render the same flows and groups.
func (p EgressIPPart) Equal(o EgressIPPart) bool {
	return p.Key == o.Key && slices.Equal(p.Held, o.Held) &&
		slices.EqualFunc(p.Pods, o.Pods, func(a, b EgressIPPod) bool {
			return a.Pod == b.Pod && a.Local == b.Local && a.Spread == b.Spread && a.EgressIPHop.equal(b.EgressIPHop)
		}) &&
		p.Spread[0].equal(o.Spread[0]) && p.Spread[1].equal(o.Spread[1])
}

// AddTranslations adds the SNAT the part's flows make on this node to out,
// a spread pod's to this node's address (those of its connections that
// take it).
func (p EgressIPPart) AddTranslations(out conntrack.Translations) {
	for _, pod := range p.Pods {
		if !pod.Spread {
			if pod.HolderMAC == nil {
				out[pod.Pod] = pod.Via
			}
			continue
		}
		for _, h := range p.Spread[family(pod.Pod)].Hops {
			if h.HolderMAC == nil {
				out[pod.Pod] = h.Via
			}
		}
	}
}

// AppendFlows renders the part into b and appends its flows to dst. The
// responders need the bridge's MAC: without it the node does not answer
// for its addresses (their traffic cannot reach it anyway).
func (p EgressIPPart) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, ports Ports) []*openflow.FlowMod {
	add := func(kind FlowKind, table uint8, priority uint16, insts []openflow.Instruction) *openflow.Match {
		fm := b.Add(Cookie(kind, p.Key), table, priority, insts)
		dst = append(dst, fm)
		return &fm.Match
	}
	for _, addr := range p.Held {
		m := add(KindEgressIPReply, TableClassify, priorityEgressIP, replyThroughCT)
		setIP(m, addr, dstField(addr))
		m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
		if ports.BridgeMAC != nil {
			appendResponders(add, addr, ports.BridgeMAC, KindEgressIPARP, KindEgressIPND, priorityEgressIP, ports.Uplink)
		}
	}
	// The pods of one hop, or of one family's spread, share instructions.
	type hopKey struct {
		via   netip.Addr
		mac   string
		local bool
	}
	hops := map[hopKey][]openflow.Instruction{}
	var spread [2][]openflow.Instruction
	for _, pod := range p.Pods {
		var insts []openflow.Instruction
		kind := KindEgressIPSNAT
		switch f := family(pod.Pod); {
		case pod.Spread:
			kind = KindEgressIPSpread
			if insts = spread[f]; insts == nil {
				insts = []openflow.Instruction{openflow.Apply(
					openflow.SetFieldUint(reg6EgressIP, uint64(p.Spread[f].reg6(-1))),
					openflow.CT{Zone: conntrack.EgressIPZone, Recirculate: true, Table: TableEgressIPSpread})}
				spread[f] = insts
			}
		default:
			if pod.HolderMAC != nil {
				kind = KindEgressIPSteer
			}
			hop := hopKey{pod.Via, string(pod.HolderMAC), pod.Local}
			if insts = hops[hop]; insts == nil {
				actions := pod.EgressIPHop.actions(ports)
				if pod.Local {
					actions = append([]openflow.Action{recordHop(pod.Via)}, actions...)
				}
				insts = []openflow.Instruction{openflow.Apply(actions...)}
				hops[hop] = insts
			}
		}
		setIP(add(kind, TableEgress, priorityEgressIP, insts), pod.Pod, srcField(pod.Pod))
	}
	for f, s := range p.Spread {
		if s.Group == 0 {
			continue
		}
		// A SNAT's nat needs the match to name the family.
		ethType := uint64(0x0800)
		if f == 1 {
			ethType = 0x86dd
		}
		spread := func(kind FlowKind, priority uint16, reg6 uint32, insts []openflow.Instruction) *openflow.Match {
			m := add(kind, TableEgressIPSpread, priority, insts)
			m.SetUint(openflow.FieldEthType, ethType)
			m.SetUint(reg6EgressIP, uint64(reg6))
			return m
		}
		for i, h := range s.Hops {
			m := spread(KindEgressIPSticky, priorityEgressIPSticky, s.reg6(-1), []openflow.Instruction{openflow.Apply(h.actions(ports)...)})
			m.SetUintMasked(openflow.FieldCTState, uint64(openflow.CTStateTrk), uint64(openflow.CTStateTrk))
			m.Set(openflow.FieldCTLabel, addressLabel(h.Via))
			spread(KindEgressIPCommit, priorityEgressIPSticky, s.reg6(i), []openflow.Instruction{openflow.Apply(append([]openflow.Action{recordHop(h.Via)}, h.actions(ports)...)...)})
		}
		spread(KindEgressIPPick, priorityEgressIPPick, s.reg6(-1), []openflow.Instruction{openflow.Apply(openflow.Group{ID: s.Group})})
	}
	return dst
}

// reg6 is reg6's value for the spread's packets (hop -1): the group's
// low 20 bits; and for its hop i, once the group gave a connection that
// hop (KindEgressIPCommit): i+1 in the top eight bits above them.
func (s EgressIPSpread) reg6(hop int) uint32 {
	return uint32(hop+1)<<24 | s.Group&groupIDsPerAPI
}

// AppendGroups appends the select group of each family the node spreads
// pods of: it picks a bucket by a hash of the connection's addresses,
// protocol and ports (spreadSelection), one bucket per hop, which takes
// the packet to that hop's KindEgressIPCommit flow. Open vSwitch commits
// nothing to conntrack from a select group's bucket itself, so the
// commit is in that flow.
func (p EgressIPPart) AppendGroups(dst []*openflow.GroupMod, _ Ports) []*openflow.GroupMod {
	for _, s := range p.Spread {
		if s.Group == 0 {
			continue
		}
		g := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeSelect, GroupID: s.Group, Properties: spreadSelection}
		for i := range s.Hops {
			g.Buckets = append(g.Buckets, openflow.Bucket{ID: uint32(i), Weight: selectBucketWeight, Actions: []openflow.Action{
				openflow.SetFieldUint(reg6EgressIP, uint64(s.reg6(i))), openflow.ResubmitTable(TableEgressIPSpread)}})
		}
		dst = append(dst, g)
	}
	return dst
}

// spreadSelection has a spread's group (an EgressIP's, an external
// route's) pick a connection's bucket by a hash of its 5-tuple: every
// field either family and TCP, UDP and SCTP have (a packet's hash leaves
// out the fields it lacks). Without it, Open vSwitch picks by its
// datapath's hash, which on the userspace datapath sent every UDP flow of
// a pod to one bucket.
var spreadSelection = openflow.HashSelection(
	openflow.FieldIPv4Src, openflow.FieldIPv4Dst, openflow.FieldIPv6Src, openflow.FieldIPv6Dst, openflow.FieldIPProto,
	openflow.FieldTCPSrc, openflow.FieldTCPDst, openflow.FieldUDPSrc, openflow.FieldUDPDst, openflow.FieldSCTPSrc, openflow.FieldSCTPDst)

// reg6EgressIP is EgressIP's register (docs/dataplane.md, "Conntrack
// zones, marks and registers"): a spread's packets carry its ID from
// TableEgress across the recirculation into TableEgressIPSpread, and its
// group's bucket adds the hop it gave them (EgressIPSpread.reg6).
var reg6EgressIP = openflow.FieldReg(6)

// selectBucketWeight is every spread bucket's weight: each held address
// (or gateway) takes an equal share of new connections. It is Open
// vSwitch's default, which the switch describes back.
const selectBucketWeight = 100

// recordHop commits a local pod's connection to conntrack.EgressIPZone
// with the address it leaves with (addressLabel): a connection of a pod
// whose object holds one address of its family is recorded too, so that
// it keeps that address when a second comes and the pod's connections are
// spread.
func recordHop(via netip.Addr) openflow.CT {
	return openflow.CT{Flags: openflow.CTCommit, Zone: conntrack.EgressIPZone,
		Actions: []openflow.Action{openflow.SetField{Field: openflow.FieldCTLabel, Value: addressLabel(via)}}}
}

// addressLabel is the ct_label of a connection given address via (an
// EgressIP's spread, an external route's gateway): the address, 16 bytes
// (an IPv4 one IPv4-mapped), never 0.
func addressLabel(via netip.Addr) []byte {
	b := via.As16()
	return b[:]
}

// actions sends a packet through the hop: SNATed to Via here, or steered
// to its holder.
func (h EgressIPHop) actions(ports Ports) []openflow.Action {
	if h.HolderMAC == nil {
		return []openflow.Action{snatAction(h.Via)}
	}
	return []openflow.Action{openflow.SetField{Field: openflow.FieldEthDst, Value: []byte(h.HolderMAC)}, openflow.Output{Port: ports.Uplink}}
}

// appendResponders adds, through add, the flows that answer for addr with
// mac: an ARP request (arpKind) for an IPv4 address; for an IPv6 one a
// neighbour solicitation (ndKind), turned into an advertisement in
// TableClassify and completed in TableNeighbour, while duplicate address
// detection's solicitations (from ::) pass on one priority above. The
// requests come from inPort only, unless it is 0.
func appendResponders(add func(kind FlowKind, table uint8, priority uint16, insts []openflow.Instruction) *openflow.Match,
	addr netip.Addr, mac net.HardwareAddr, arpKind, ndKind FlowKind, priority uint16, inPort uint32) {
	fromPort := func(m *openflow.Match) {
		if inPort != 0 {
			m.SetUint(openflow.FieldInPort, uint64(inPort))
		}
	}
	if addr.Is4() {
		request := func(priority uint16, insts []openflow.Instruction) *openflow.Match {
			m := add(arpKind, TableClassify, priority, insts)
			m.SetUint(openflow.FieldEthType, 0x0806)
			fromPort(m)
			m.SetUint(openflow.FieldARPOp, 1)
			m.SetAddr(openflow.FieldARPTPA, addr)
			return m
		}
		// A gratuitous ARP for addr (another node's announcement of it, or
		// a hand-back to this node) asks nothing: it goes on to the host
		// stack and the pods, whose entries it sets.
		request(priority+1, normal).SetAddr(openflow.FieldARPSPA, addr)
		request(priority, arpResponder(addr, mac))
		return
	}
	solicitation := func(priority uint16, insts []openflow.Instruction) *openflow.Match {
		m := add(ndKind, TableClassify, priority, insts)
		setNeighbourDiscovery(m, 135, addr)
		fromPort(m)
		return m
	}
	solicitation(priority+1, normal).SetAddr(openflow.FieldIPv6Src, netip.IPv6Unspecified())
	solicitation(priority, ndSolicitationToAdvert(addr, mac))
	setNeighbourDiscovery(add(ndKind, TableNeighbour, priority, ndAdvertTarget(mac)), 136, addr)
}

// arpResponder turns an ARP request for addr into the reply that mac has
// it, back out of the port it came in on.
func arpResponder(addr netip.Addr, mac net.HardwareAddr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		copyField(openflow.FieldEthSrc, openflow.FieldEthDst, 48),
		openflow.SetField{Field: openflow.FieldEthSrc, Value: []byte(mac)},
		openflow.SetFieldUint(openflow.FieldARPOp, 2),
		copyField(openflow.FieldARPSHA, openflow.FieldARPTHA, 48),
		openflow.SetField{Field: openflow.FieldARPSHA, Value: []byte(mac)},
		copyField(openflow.FieldARPSPA, openflow.FieldARPTPA, 32),
		openflow.SetField{Field: openflow.FieldARPSPA, Value: addr.AsSlice()},
		openflow.Output{Port: openflow.PortInPort})}
}

// ndSolicitationToAdvert turns a neighbour solicitation for addr into an
// advertisement from addr and mac to the solicitor, and looks it up again
// in TableNeighbour (ndAdvertTarget).
func ndSolicitationToAdvert(addr netip.Addr, mac net.HardwareAddr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		copyField(openflow.FieldEthSrc, openflow.FieldEthDst, 48),
		openflow.SetField{Field: openflow.FieldEthSrc, Value: []byte(mac)},
		copyField(openflow.FieldIPv6Src, openflow.FieldIPv6Dst, 128),
		openflow.SetField{Field: openflow.FieldIPv6Src, Value: addr.AsSlice()},
		openflow.SetFieldUint(openflow.FieldIPTTL, 255),
		openflow.SetFieldUint(openflow.FieldICMPv6Type, 136),
		openflow.SetFieldUint(openflow.FieldNDReserved, ndAdvertFlags),
		openflow.SetFieldUint(openflow.FieldNDOptionsType, ndOptionTargetLinkAddr),
		openflow.ResubmitTable(TableNeighbour))}
}

// ndAdvertTarget gives the advertisement mac as its target link-layer
// address and sends it back out of the port the solicitation came in on.
func ndAdvertTarget(mac net.HardwareAddr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		openflow.SetField{Field: openflow.FieldNDTLL, Value: []byte(mac)},
		openflow.Output{Port: openflow.PortInPort})}
}

// setNeighbourDiscovery matches an ICMPv6 neighbour discovery message of
// icmpType (135 solicitation, 136 advertisement) for target.
func setNeighbourDiscovery(m *openflow.Match, icmpType uint64, target netip.Addr) {
	setIP(m, target, openflow.FieldNone)
	m.SetUint(openflow.FieldIPProto, 58)
	m.SetUint(openflow.FieldICMPv6Type, icmpType)
	m.SetUint(openflow.FieldICMPv6Code, 0)
	m.SetAddr(openflow.FieldNDTarget, target)
}

func copyField(src, dst openflow.Field, bits uint16) openflow.CopyField {
	return openflow.CopyField{Src: openflow.Subfield{Field: src, Bits: bits}, Dst: openflow.Subfield{Field: dst, Bits: bits}}
}

// EgressIPs is the node's EgressIP dataplane.
type EgressIPs struct {
	// Parts, sorted by key, only those with flows on this node.
	Parts []EgressIPPart
	// Selected are the addresses of this node's pods that an EgressIP
	// selects, sorted: they are never admitted (they leave with an egress
	// IP, or not at all). Under EgressIPUnheldNodeIP an address whose
	// EgressIP holds none of its family is not among them.
	Selected []netip.Addr
	// Problems, sorted by object, then as found.
	Problems []Problem
}

// egressIPHolder is one held address of an EgressIP: status.items' entry.
type egressIPHolder struct {
	addr netip.Addr
	node string
}

// egressIPHolders are the held addresses of eip, by family (IPv4 first),
// each sorted: the status items whose address is one of spec.egressIPs
// (compared as addresses) and names a node. An address listed twice keeps
// its first item.
func egressIPHolders(eip *esv1.EgressIP) [2][]egressIPHolder {
	spec := eip.Spec.Addresses()
	var out [2][]egressIPHolder
	seen := map[netip.Addr]bool{}
	for _, item := range eip.Status.Items {
		a, ok := esv1.ParseEgressIP(item.EgressIP)
		if !ok || item.Node == "" || !slices.Contains(spec, a) || seen[a] {
			continue
		}
		seen[a] = true
		out[family(a)] = append(out[family(a)], egressIPHolder{a, item.Node})
	}
	for i := range out {
		slices.SortFunc(out[i], func(x, y egressIPHolder) int { return x.addr.Compare(y.addr) })
	}
	return out
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// planEgressIPPod adds to part what node does with addr, an address of
// pod that the EgressIP name selects (and no object or service before it
// takes), given the object's held addresses (egressIPHolders) and the
// holders' bridge MACs (mac, nil while unknown), and returns the problems
// it finds, for a pod of this node only:
//
//   - a node that holds an address of addr's family SNATs a pod of
//     another node to it (the pod's node chose it for the connection);
//   - a local pod leaves through the hops of its family (egressIPHops):
//     pinned to the one there is, or spread over several; with none, it
//     has no flow, and the pod guard drops its egress.
func planEgressIPPod(part *EgressIPPart, node NodeConfig, name string, holders [2][]egressIPHolder, pod *corev1.Pod, addr netip.Addr, mac func(node string) net.HardwareAddr) []Problem {
	f := family(addr)
	if pod.Spec.NodeName != node.Name {
		if node.Fenced {
			return nil
		}
		if i := slices.IndexFunc(holders[f], func(h egressIPHolder) bool { return h.node == node.Name }); i >= 0 {
			part.Pods = append(part.Pods, EgressIPPod{Pod: addr, EgressIPHop: EgressIPHop{Via: holders[f][i].addr}})
		}
		return nil
	}
	hops, unknown := egressIPHops(holders[f], node, mac)
	var problems []Problem
	for _, h := range unknown {
		then := "dropping pod %s/%s's egress until it does"
		if len(hops) > 0 {
			then = "pod %s/%s's connections leave with the other held addresses until it does"
		}
		problems = append(problems, egressIPProblem(name, reasons.HostUnknown,
			"node %s, holding %s, has not published its bridge MAC; "+then, h.node, h.addr, pod.Namespace, pod.Name))
	}
	switch len(hops) {
	case 0:
	case 1:
		part.Pods = append(part.Pods, EgressIPPod{Pod: addr, EgressIPHop: hops[0], Local: true})
	default:
		part.Pods = append(part.Pods, EgressIPPod{Pod: addr, Local: true, Spread: true})
		part.Spread[f].Hops = hops
	}
	return problems
}

// egressIPHops are the hops a local pod of one family may leave through,
// from its object's holders of that family (sorted by address): one per
// holding node, its lowest address (the cluster component gives a node
// one address of an object; a node's bridge MAC cannot tell two apart),
// this node's own unless it is fenced, another's once its bridge MAC is
// known. unknown are the holders whose MAC is not.
func egressIPHops(holders []egressIPHolder, node NodeConfig, mac func(node string) net.HardwareAddr) (hops []EgressIPHop, unknown []egressIPHolder) {
	seen := map[string]bool{}
	for _, h := range holders {
		if seen[h.node] {
			continue
		}
		seen[h.node] = true
		switch m := mac(h.node); {
		case h.node == node.Name:
			if !node.Fenced {
				hops = append(hops, EgressIPHop{Via: h.addr})
			}
		case m == nil:
			unknown = append(unknown, h)
		default:
			hops = append(hops, EgressIPHop{Via: h.addr, HolderMAC: m})
		}
	}
	return hops, unknown
}

// sortEgressIPPods sorts pods by address and keeps one entry an address:
// a local pod's, when a pod of another node still reports the address
// too (the kubelet has not yet reported a finished pod whose address a
// new pod here took), since one flow per address is all the table holds.
func sortEgressIPPods(pods []EgressIPPod) []EgressIPPod {
	slices.SortFunc(pods, func(a, b EgressIPPod) int {
		if c := a.Pod.Compare(b.Pod); c != 0 {
			return c
		}
		switch {
		case a.Local == b.Local:
			return 0
		case a.Local:
			return -1
		}
		return 1
	})
	return slices.CompactFunc(pods, func(a, b EgressIPPod) bool { return a.Pod == b.Pod })
}

// allotSpreadGroups gives each family a part spreads pods of a group ID
// (APIEgressIP.GroupID), from a hash of the part's key and the family,
// the next free one on a collision; parts in key order, so that the IDs
// stay put while other objects come and go, collisions aside.
func allotSpreadGroups(parts []*EgressIPPart) {
	taken := map[uint32]bool{}
	for _, part := range parts {
		for f := range part.Spread {
			s := &part.Spread[f]
			if len(s.Hops) == 0 {
				s.Group = 0
				continue
			}
			h := fnv.New32a()
			h.Write([]byte(part.Key))
			h.Write([]byte{byte(f)})
			id := h.Sum32() & groupIDsPerAPI
			for taken[id] {
				id = (id + 1) & groupIDsPerAPI
			}
			taken[id] = true
			s.Group = APIEgressIP.GroupID(id)
		}
	}
}

// egressIPFamilies says which families eip lists an address of (IPv4,
// IPv6): an EgressIP takes a pod's address only in those, so that an
// IPv4-only object leaves the pod's IPv6 traffic alone.
func egressIPFamilies(eip *esv1.EgressIP) [2]bool {
	var out [2]bool
	for _, a := range eip.Spec.Addresses() {
		out[family(a)] = true
	}
	return out
}

// egressIPSelectors are an EgressIP's namespace and pod selectors; err
// when either does not parse (an object stored before the CRD validated
// them), and then the object selects nothing.
func egressIPSelectors(eip *esv1.EgressIP) (namespaces, pods labels.Selector, err error) {
	if namespaces, err = metav1.LabelSelectorAsSelector(eip.Spec.NamespaceSelector.AsMeta()); err != nil {
		return nil, nil, fmt.Errorf("namespaceSelector: %w", err)
	}
	if pods, err = metav1.LabelSelectorAsSelector(eip.Spec.PodSelector.AsMeta()); err != nil {
		return nil, nil, fmt.Errorf("podSelector: %w", err)
	}
	return namespaces, pods, nil
}

// compareEgressIPs orders EgressIPs by precedence: a pod that several
// select leaves with the oldest (creationTimestamp), then the first by
// name. An object created later never takes pods from one already there.
func compareEgressIPs(a, b *esv1.EgressIP) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// egressIPProblem is a problem of the EgressIP name.
func egressIPProblem(name string, reason reasons.Reason, format string, args ...any) Problem {
	return Problem{Key: ObjectKey(APIEgressIP, "", name), Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// outrankedProblem is the problem of the EgressIP name, which selects
// addr of pod, when the older EgressIP owner takes it.
func outrankedProblem(name string, pod *corev1.Pod, addr netip.Addr, owner string) Problem {
	return egressIPProblem(name, reasons.PodClaimed, "pod %s/%s (%s) also selected by EgressIP %s, which takes precedence (older)",
		pod.Namespace, pod.Name, addr, owner)
}

// claimedProblem is the problem of the EgressIP name, which takes addr of
// pod, when the LoadBalancerIP-mode EgressService svc claims it.
func claimedProblem(name string, pod *corev1.Pod, addr netip.Addr, svc string) Problem {
	return egressIPProblem(name, reasons.PodClaimed, "pod %s/%s (%s) is an endpoint of EgressService %s, whose LB IP it leaves with",
		pod.Namespace, pod.Name, addr, svc)
}

// ComputeEgressIP is the specification of node's EgressIP dataplane, from
// the EgressIPs, namespaces and pods of the cluster, the agents' Leases,
// and lbClaimed: whether a pod address is an endpoint that an
// EgressService with sourceIPBy LoadBalancerIP claims (that service's SNAT
// wins, docs/dataplane.md "Precedence"). It keeps no index: each pod
// address is matched against every EgressIP in precedence order.
//
// Problems are reported for this node's pods only, so that each is
// reported once in the cluster: a pod another EgressIP or an EgressService
// takes, a local pod whose holder has not published its bridge MAC.
func ComputeEgressIP(node NodeConfig, cluster Cluster, lbClaimed func(netip.Addr) (string, bool)) EgressIPs {
	nsLabels := map[string]labels.Set{}
	for _, ns := range cluster.Namespaces {
		nsLabels[ns.Name] = labels.Set(ns.Labels)
	}
	eips := slices.Clone(cluster.EgressIPs)
	slices.SortFunc(eips, compareEgressIPs)

	var out EgressIPs
	parts := map[string]*EgressIPPart{}
	for _, eip := range eips {
		k := ObjectKey(APIEgressIP, "", eip.Name)
		part := &EgressIPPart{Key: k}
		parts[k] = part
		if node.Fenced {
			continue
		}
		for _, hs := range egressIPHolders(eip) {
			for _, h := range hs {
				if h.node == node.Name {
					part.Held = append(part.Held, h.addr)
				}
			}
		}
	}
	for _, pod := range cluster.Pods {
		local := pod.Spec.NodeName == node.Name
		podNS, ok := nsLabels[pod.Namespace]
		if !ok {
			continue // a namespace not seen yet selects nothing
		}
		for _, addr := range podAddresses(pod, node.ClusterPodCIDRs) {
			var owner *esv1.EgressIP
			for _, eip := range eips {
				nsSel, podSel, err := egressIPSelectors(eip)
				if err != nil || !egressIPFamilies(eip)[family(addr)] || !nsSel.Matches(podNS) || !podSel.Matches(labels.Set(pod.Labels)) {
					continue
				}
				if owner != nil {
					if local {
						out.Problems = append(out.Problems, outrankedProblem(eip.Name, pod, addr, owner.Name))
					}
					continue
				}
				owner = eip
			}
			if owner == nil {
				continue
			}
			holders := egressIPHolders(owner)
			held := len(holders[family(addr)]) > 0
			if !held && node.EgressIPUnheld.LeavesThroughNode() {
				continue // as if not selected: the pod guard admits it
			}
			if local {
				out.Selected = append(out.Selected, addr)
			}
			if svc, claimed := lbClaimed(addr); claimed {
				if local {
					out.Problems = append(out.Problems, claimedProblem(owner.Name, pod, addr, svc))
				}
				continue
			}
			part := parts[ObjectKey(APIEgressIP, "", owner.Name)]
			out.Problems = append(out.Problems, planEgressIPPod(part, node, owner.Name, holders, pod, addr,
				func(n string) net.HardwareAddr { return hostMAC(cluster.Leases[n]) })...)
		}
	}
	var kept []*EgressIPPart
	for _, eip := range eips {
		part := parts[ObjectKey(APIEgressIP, "", eip.Name)]
		if len(part.Held)+len(part.Pods) == 0 {
			continue
		}
		slices.SortFunc(part.Held, netip.Addr.Compare)
		part.Pods = sortEgressIPPods(part.Pods)
		kept = append(kept, part)
	}
	slices.SortFunc(kept, func(a, b *EgressIPPart) int { return cmp.Compare(a.Key, b.Key) })
	allotSpreadGroups(kept)
	for _, part := range kept {
		out.Parts = append(out.Parts, *part)
	}
	slices.SortFunc(out.Problems, compareProblems)
	slices.SortFunc(out.Selected, netip.Addr.Compare)
	out.Selected = slices.Compact(out.Selected)
	return out
}
