package trace

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/egressflow/egressflow/openflow"
)

// EtherTypes the tracer knows the headers of.
const (
	EthTypeIPv4 uint16 = 0x0800
	EthTypeIPv6 uint16 = 0x86dd
)

// IP protocols whose headers the tracer knows.
const (
	ProtoICMP   uint8 = 1
	ProtoTCP    uint8 = 6
	ProtoUDP    uint8 = 17
	ProtoICMPv6 uint8 = 58
	ProtoSCTP   uint8 = 132
	// ProtoIPv6Fragment is IPv6's Fragment header: the protocol Open
	// vSwitch reads for an IPv6 fragment after the first (Packet.Frag).
	ProtoIPv6Fragment uint8 = 44
)

// MAC is an Ethernet address (a value, so that a Packet compares with ==).
type MAC [6]byte

// MACFrom converts a net.HardwareAddr of 6 bytes (anything else gives the
// zero MAC).
func MACFrom(hw net.HardwareAddr) MAC {
	var m MAC
	if len(hw) == len(m) {
		copy(m[:], hw)
	}
	return m
}

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// Packet is what the tracer knows of a packet: its headers, as far as the
// fields it models go, and its metadata. The zero value of a field is the
// header's zero (an untracked packet has CTState 0).
type Packet struct {
	// InPort is the OpenFlow port the packet entered the bridge from
	// (openflow.PortLocal for LOCAL).
	InPort         uint32
	EthSrc, EthDst MAC
	// EthType is the Ethernet type; 0 means the family of Src (IPv4 or
	// IPv6).
	EthType uint16
	// Src and Dst are the IPv4 or IPv6 addresses (of one family).
	Src, Dst netip.Addr
	// Proto is the IP protocol.
	Proto uint8
	// SrcPort and DstPort are the TCP, UDP or SCTP ports.
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode are ICMP's or ICMPv6's.
	ICMPType, ICMPCode uint8
	// Frag are the packet's IP fragment bits (ip_frag): 0 for a whole
	// datagram, openflow.IPFragAny for its first fragment, IPFragAny |
	// IPFragLater for a later one. Flows read a fragment's ports and ICMP
	// type and code as 0, the first fragment's too, as a bridge whose
	// fragment handling is "normal" (the default) does; and the protocol
	// of an IPv6 fragment after the first as ProtoIPv6Fragment (44), as
	// Open vSwitch's flow extraction does, which stops at the Fragment
	// header of a fragment without the upper-layer header. Proto and the
	// fields above keep what the datagram carries.
	Frag uint8
	// DSCP is the IP header's DSCP (6 bits, the TOS byte's upper part).
	DSCP uint8
	// PktMark is the packet's mark (pkt_mark, skb_mark in the datapath).
	PktMark uint32
	// CTState, CTZone, CTMark and CTLabel are the packet's conntrack
	// fields: as it arrives (untracked: all 0), or as the connection
	// tracker left them when a ct action recirculated it.
	CTState uint32
	CTZone  uint16
	CTMark  uint32
	CTLabel [16]byte
	// Regs are the registers reg0..reg15.
	Regs [16]uint32
}

// ethType is the packet's Ethernet type, defaulted from Src's family.
func (p *Packet) ethType() uint16 {
	switch {
	case p.EthType != 0:
		return p.EthType
	case p.Src.Is4():
		return EthTypeIPv4
	case p.Src.Is6():
		return EthTypeIPv6
	}
	return 0
}

func (p *Packet) isIP() bool {
	t := p.ethType()
	return t == EthTypeIPv4 || t == EthTypeIPv6
}

// hasPorts reports whether the packet has a transport header of proto
// with ports.
func (p *Packet) hasPorts(proto uint8) bool { return p.isIP() && p.proto() == proto }

// proto is the IP protocol as flows read it: ProtoIPv6Fragment for an
// IPv6 fragment after the first, else Proto.
func (p *Packet) proto() uint8 {
	if p.ethType() == EthTypeIPv6 && p.Frag&openflow.IPFragLater != 0 {
		return ProtoIPv6Fragment
	}
	return p.Proto
}

// isFragment reports whether the packet is an IP fragment, first or later.
func (p *Packet) isFragment() bool { return p.isIP() && p.Frag&openflow.IPFragAny != 0 }

// transport is a transport field's value as flows read it: v, or 0 for a
// fragment (Frag).
func (p *Packet) transport(v uint64) uint64 {
	if p.isFragment() {
		return 0
	}
	return v
}

// hasICMP reports whether the packet is ICMP of its family (v6: ICMPv6).
func (p *Packet) hasICMP(v6 bool) bool {
	if v6 {
		return p.ethType() == EthTypeIPv6 && p.proto() == ProtoICMPv6
	}
	return p.ethType() == EthTypeIPv4 && p.proto() == ProtoICMP
}

// errUnmodelled marks a field the tracer does not model.
type errUnmodelled struct{ field openflow.Field }

func (e errUnmodelled) Error() string {
	return fmt.Sprintf("field %v is not modelled", e.field)
}

// get returns the value of f in the packet, big-endian in f's width, and
// whether the packet has f at all (a packet without an IPv4 header has no
// ipv4_src: a match on it fails). An error names a field the tracer does
// not model.
func (p *Packet) get(f openflow.Field) (value []byte, present bool, err error) {
	w := f.Width()
	num := func(v uint64, ok bool) ([]byte, bool, error) {
		b := make([]byte, w)
		for i := 0; i < w && i < 8; i++ {
			b[w-1-i] = byte(v >> (8 * i))
		}
		return b, ok, nil
	}
	addr := func(a netip.Addr, family uint16) ([]byte, bool, error) {
		if p.ethType() != family || !a.IsValid() {
			return nil, false, nil
		}
		return a.AsSlice(), true, nil
	}
	switch {
	case f == openflow.FieldInPort:
		return num(uint64(p.InPort), true)
	case f == openflow.FieldEthSrc:
		return p.EthSrc[:], true, nil
	case f == openflow.FieldEthDst:
		return p.EthDst[:], true, nil
	case f == openflow.FieldEthType:
		return num(uint64(p.ethType()), true)
	case f == openflow.FieldIPv4Src:
		return addr(p.Src, EthTypeIPv4)
	case f == openflow.FieldIPv4Dst:
		return addr(p.Dst, EthTypeIPv4)
	case f == openflow.FieldIPv6Src:
		return addr(p.Src, EthTypeIPv6)
	case f == openflow.FieldIPv6Dst:
		return addr(p.Dst, EthTypeIPv6)
	case f == openflow.FieldIPProto:
		return num(uint64(p.proto()), p.isIP())
	case f == openflow.FieldIPFrag:
		return num(uint64(p.Frag&(openflow.IPFragAny|openflow.IPFragLater)), p.isIP())
	case f == openflow.FieldIPDSCP:
		return num(uint64(p.DSCP), p.isIP())
	case f == openflow.FieldTCPSrc:
		return num(p.transport(uint64(p.SrcPort)), p.hasPorts(ProtoTCP))
	case f == openflow.FieldTCPDst:
		return num(p.transport(uint64(p.DstPort)), p.hasPorts(ProtoTCP))
	case f == openflow.FieldUDPSrc:
		return num(p.transport(uint64(p.SrcPort)), p.hasPorts(ProtoUDP))
	case f == openflow.FieldUDPDst:
		return num(p.transport(uint64(p.DstPort)), p.hasPorts(ProtoUDP))
	case f == openflow.FieldSCTPSrc:
		return num(p.transport(uint64(p.SrcPort)), p.hasPorts(ProtoSCTP))
	case f == openflow.FieldSCTPDst:
		return num(p.transport(uint64(p.DstPort)), p.hasPorts(ProtoSCTP))
	case f == openflow.FieldICMPv4Type:
		return num(p.transport(uint64(p.ICMPType)), p.hasICMP(false))
	case f == openflow.FieldICMPv4Code:
		return num(p.transport(uint64(p.ICMPCode)), p.hasICMP(false))
	case f == openflow.FieldICMPv6Type:
		return num(p.transport(uint64(p.ICMPType)), p.hasICMP(true))
	case f == openflow.FieldICMPv6Code:
		return num(p.transport(uint64(p.ICMPCode)), p.hasICMP(true))
	case f == openflow.FieldPktMark:
		return num(uint64(p.PktMark), true)
	case f == openflow.FieldCTState:
		return num(uint64(p.CTState), true)
	case f == openflow.FieldCTZone:
		return num(uint64(p.CTZone), true)
	case f == openflow.FieldCTMark:
		return num(uint64(p.CTMark), true)
	case f == openflow.FieldCTLabel:
		return p.CTLabel[:], true, nil
	case f >= openflow.FieldReg(0) && f <= openflow.FieldReg(15):
		return num(uint64(p.Regs[f-openflow.FieldReg(0)]), true)
	}
	return nil, false, errUnmodelled{f}
}

// settable are the fields a set_field may write: the packet's addresses,
// DSCP, mark and registers. Ports, ct fields (written by ct only) and the
// rest are refused.
func settable(f openflow.Field) bool {
	switch f {
	case openflow.FieldEthSrc, openflow.FieldEthDst, openflow.FieldIPv4Src, openflow.FieldIPv4Dst,
		openflow.FieldIPv6Src, openflow.FieldIPv6Dst, openflow.FieldIPDSCP, openflow.FieldPktMark:
		return true
	}
	return f >= openflow.FieldReg(0) && f <= openflow.FieldReg(15)
}

// set writes the bits of value selected by mask (nil: all) into f. The
// packet must have f (a set_field of ipv4_src on an IPv6 packet is an
// error, as Open vSwitch refuses such a flow for its match).
func (p *Packet) set(f openflow.Field, value, mask []byte) error {
	if !settable(f) {
		return errUnmodelled{f}
	}
	old, present, err := p.get(f)
	if err != nil {
		return err
	}
	if !present {
		return fmt.Errorf("trace: set_field %v on a packet without that header (%v)", f, p)
	}
	b := make([]byte, len(old))
	for i := range b {
		m := byte(0xff)
		if mask != nil {
			m = mask[i]
		}
		b[i] = old[i]&^m | value[i]&m
	}
	var u uint64
	for _, x := range b {
		u = u<<8 | uint64(x)
	}
	switch {
	case f == openflow.FieldEthSrc:
		copy(p.EthSrc[:], b)
	case f == openflow.FieldEthDst:
		copy(p.EthDst[:], b)
	case f == openflow.FieldIPv4Src || f == openflow.FieldIPv6Src:
		p.Src, _ = netip.AddrFromSlice(b)
	case f == openflow.FieldIPv4Dst || f == openflow.FieldIPv6Dst:
		p.Dst, _ = netip.AddrFromSlice(b)
	case f == openflow.FieldIPDSCP:
		p.DSCP = uint8(u) & 0x3f
	case f == openflow.FieldPktMark:
		p.PktMark = uint32(u)
	default: // a register
		p.Regs[f-openflow.FieldReg(0)] = uint32(u)
	}
	return nil
}

// String writes the packet as the flow ofproto/trace takes
// (`ovs-appctl ofproto/trace br-ex <flow>`): metadata, protocol, addresses,
// fragment bits, ports (none for a later fragment). Registers and
// conntrack fields are written only when set.
func (p Packet) String() string {
	var f []string
	add := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }
	add("in_port=%s", openflow.PortName(p.InPort))
	if p.PktMark != 0 {
		add("pkt_mark=%#x", p.PktMark)
	}
	for i, r := range p.Regs {
		if r != 0 {
			add("reg%d=%#x", i, r)
		}
	}
	if p.CTState != 0 {
		add("ct_state=%s", CTStateString(p.CTState, "|"))
	}
	if p.CTZone != 0 {
		add("ct_zone=%d", p.CTZone)
	}
	if p.CTMark != 0 {
		add("ct_mark=%#x", p.CTMark)
	}
	if p.CTLabel != ([16]byte{}) {
		add("ct_label=0x%x", bytes.TrimLeft(p.CTLabel[:], "\x00"))
	}
	add("dl_src=%v,dl_dst=%v", p.EthSrc, p.EthDst)
	t := p.ethType()
	if t != EthTypeIPv4 && t != EthTypeIPv6 {
		add("dl_type=%#06x", t)
		return strings.Join(f, ",")
	}
	v6 := t == EthTypeIPv6
	suffix, src, dst := "", "nw_src", "nw_dst"
	if v6 {
		suffix, src, dst = "6", "ipv6_src", "ipv6_dst"
	}
	switch p.proto() {
	case ProtoTCP:
		add("tcp%s", suffix)
	case ProtoUDP:
		add("udp%s", suffix)
	case ProtoSCTP:
		add("sctp%s", suffix)
	case ProtoICMP, ProtoICMPv6:
		if p.hasICMP(v6) {
			add("icmp%s", suffix)
			break
		}
		fallthrough
	default:
		if v6 {
			add("ipv6,nw_proto=%d", p.proto())
		} else {
			add("ip,nw_proto=%d", p.proto())
		}
	}
	if p.Src.IsValid() {
		add("%s=%v", src, p.Src)
	}
	if p.Dst.IsValid() {
		add("%s=%v", dst, p.Dst)
	}
	add("nw_tos=%d", p.DSCP<<2)
	switch {
	case p.Frag&openflow.IPFragLater != 0:
		add("nw_frag=later")
	case p.Frag&openflow.IPFragAny != 0:
		add("nw_frag=first")
	}
	switch {
	case p.Frag&openflow.IPFragLater != 0:
		// A later fragment has no transport header (ofproto/trace refuses
		// one's ports); a first fragment's are written as it carries them.
	case p.hasPorts(ProtoTCP), p.hasPorts(ProtoUDP), p.hasPorts(ProtoSCTP):
		name := map[uint8]string{ProtoTCP: "tcp", ProtoUDP: "udp", ProtoSCTP: "sctp"}[p.Proto]
		add("%s_src=%d,%s_dst=%d", name, p.SrcPort, name, p.DstPort)
	case p.hasICMP(false):
		add("icmp_type=%d,icmp_code=%d", p.ICMPType, p.ICMPCode)
	case p.hasICMP(true):
		add("icmpv6_type=%d,icmpv6_code=%d", p.ICMPType, p.ICMPCode)
	}
	return strings.Join(f, ",")
}

// ctStateNames are the ct_state flags by bit, as Open vSwitch names them.
var ctStateNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

// CTStateString writes ct_state flags by name, joined by sep: "," as
// ofproto/trace's --ct-next takes them ("new,trk"), "|" as its flows
// write them ("new|trk"); 0 is "".
func CTStateString(state uint32, sep string) string {
	var names []string
	for i, n := range ctStateNames {
		if state&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := state &^ (1<<len(ctStateNames) - 1); rest != 0 {
		names = append(names, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	return strings.Join(names, sep)
}
