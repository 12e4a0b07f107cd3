package openflow

import "fmt"

// Field identifies a packet or metadata field that flows can match on, that
// set_field and copy_field actions can write, and that learn and ct actions
// can reference. The names follow Open vSwitch (ovs-fields(7)); Field's
// String method returns the name ovs-ofctl uses for it.
//
// A few fields are views of others, as in Open vSwitch: xreg<N> is the pair
// reg<2N>,reg<2N+1> and xxreg<N> the four registers reg<4N>..reg<4N+3>. A
// Match stores registers as reg0..reg15 whichever view set them.
type Field uint16

// Fields. The zero Field is "no field".
const (
	FieldNone Field = iota
	FieldInPort
	FieldInPort16
	FieldActsetOutput
	FieldPacketType
	FieldRecircID
	FieldConjID
	FieldMetadata
	FieldEthSrc
	FieldEthDst
	FieldEthType
	FieldVLANTCI
	FieldVLANVID
	FieldVLANPCP
	FieldMPLSLabel
	FieldMPLSTC
	FieldMPLSBOS
	FieldIPv4Src
	FieldIPv4Dst
	FieldIPv6Src
	FieldIPv6Dst
	FieldIPv6Label
	FieldIPFrag
	FieldNwTOS
	FieldIPDSCP
	FieldIPECN
	FieldIPTTL
	FieldIPProto
	FieldTCPSrc
	FieldTCPDst
	FieldTCPFlags
	FieldUDPSrc
	FieldUDPDst
	FieldSCTPSrc
	FieldSCTPDst
	FieldICMPv4Type
	FieldICMPv4Code
	FieldICMPv6Type
	FieldICMPv6Code
	FieldNDTarget
	FieldNDSLL
	FieldNDTLL
	FieldNDReserved
	FieldNDOptionsType
	FieldARPOp
	FieldARPSPA
	FieldARPTPA
	FieldARPSHA
	FieldARPTHA
	FieldTunnelID
	FieldTunSrc
	FieldTunDst
	FieldTunIPv6Src
	FieldTunIPv6Dst
	FieldPktMark
	FieldCTState
	FieldCTZone
	FieldCTMark
	FieldCTLabel
	FieldCTNwProto
	FieldCTNwSrc
	FieldCTNwDst
	FieldCTIPv6Src
	FieldCTIPv6Dst
	FieldCTTpSrc
	FieldCTTpDst
	FieldReg0                    // FieldReg0+n is reg<n>, n < 16; see FieldReg
	FieldXReg0  = FieldReg0 + 16 // FieldXReg0+n is xreg<n>, n < 8
	FieldXXReg0 = FieldXReg0 + 8 // FieldXXReg0+n is xxreg<n>, n < 4
	fieldCount  = FieldXXReg0 + 4
)

// FieldReg returns the field of register reg<n> (0..15).
func FieldReg(n int) Field { return FieldReg0 + Field(n) }

// FieldXReg returns the 64-bit register xreg<n> (0..7) = reg<2n>:reg<2n+1>.
func FieldXReg(n int) Field { return FieldXReg0 + Field(n) }

// FieldXXReg returns the 128-bit register xxreg<n> (0..3).
func FieldXXReg(n int) Field { return FieldXXReg0 + Field(n) }

// Connection tracking state bits, for matching FieldCTState.
const (
	CTStateNew  uint32 = 0x01
	CTStateEst  uint32 = 0x02
	CTStateRel  uint32 = 0x04
	CTStateRpl  uint32 = 0x08
	CTStateInv  uint32 = 0x10
	CTStateTrk  uint32 = 0x20
	CTStateSNAT uint32 = 0x40
	CTStateDNAT uint32 = 0x80
)

// IP fragment bits, for matching FieldIPFrag.
const (
	IPFragAny   uint8 = 0x01 // the packet is a fragment
	IPFragLater uint8 = 0x02 // ... and not the first one
)

// valueFormat says how a field's value is written in ovs-ofctl syntax.
type valueFormat uint8

const (
	fmtDecimal valueFormat = iota
	fmtHex
	fmtMAC
	fmtIPv4
	fmtIPv6
	fmtPort16
	fmtPort32
	fmtCTState
	fmtFrag
	fmtTCPFlags
	fmtPacketType
)

// OXM/NXM classes.
const (
	oxmClassNXM0    = 0x0000
	oxmClassNXM1    = 0x0001
	oxmClassBasic   = 0x8000
	oxmClassPktRegs = 0x8001
	oxmClassExperim = 0xffff
	// oxmClassEricsson is Open vSwitch's ERICOXM_OF class.
	oxmClassEricsson = 0x1000
	oxmHeaderHasMask = 0x100
)

func oxmHeader(class, field, length int) uint32 {
	return uint32(class)<<16 | uint32(field)<<9 | uint32(length)
}

type fieldInfo struct {
	name     string      // Open vSwitch's name, as set_field prints it
	alias    string      // other name accepted when parsing
	nxmName  string      // name in subfield syntax: the NXM name (NXM_OF_ETH_SRC[]), else the OXM name (OXM_OF_METADATA[])
	header   uint32      // OpenFlow 1.5 header Open vSwitch uses, unmasked
	alt      []uint32    // other headers that decode to this field (NXM variants)
	width    int         // value bytes
	bits     int         // significant bits
	maskable bool        // the switch accepts arbitrary bitwise masks
	format   valueFormat // text form of values
	order    int         // position in a canonical (Open vSwitch) match; 0 = not in matches
	// tracked, when set, is the part of the field Open vSwitch keeps; other
	// bits are dropped from values and masks, and a mask equal to tracked is
	// an exact match.
	tracked uint64
	// maskedExact: Open vSwitch sends even an exact match with a mask (its
	// NXM field is wider than what it tracks, as for ct_state).
	maskedExact bool
	// prereq is what a match must hold for the field to mean anything
	// (Open vSwitch's MFP_*, ovs-fields(7)'s "Prerequisites").
	prereq prerequisite
}

// prerequisite is what a match must hold for Open vSwitch to keep a field
// in it. Without it ovs-ofctl leaves the field out of the FLOW_MOD it
// sends (or sends it as another field that shares its storage), and the
// switch refuses a match that holds it.
type prerequisite uint8

const (
	preNone      prerequisite = iota
	preEthernet               // an Ethernet packet (the default packet_type)
	preVLAN                   // a VLAN header: vlan_pcp
	preMPLS                   // eth_type 0x8847 or 0x8848
	preIPv4                   // eth_type 0x0800
	preIPv6                   // eth_type 0x86dd
	preIP                     // either
	preTCP                    // IPv4 or IPv6 and ip_proto 6
	preUDP                    // ... 17
	preSCTP                   // ... 132
	preICMPv4                 // IPv4 and ip_proto 1
	preICMPv6                 // IPv6 and ip_proto 58
	preND                     // ICMPv6 neighbor solicitation or advertisement (type 135 or 136, code 0)
	preNDSolicit              // ... solicitation only
	preNDAdvert               // ... advertisement only
	preARP                    // eth_type 0x0806 or 0x8035
	preCT                     // a tracked, valid connection (ct_state)
)

var fields [fieldCount]fieldInfo

// fieldByHeader maps unmasked headers (with length) to fields, for decoding.
var fieldByHeader = map[uint32]Field{}

// fieldByName maps names, aliases and NXM names to fields, for parsing.
var fieldByName = map[string]Field{}

func init() {
	def := func(f Field, name, alias, nxm string, header uint32, width, bits int, maskable bool, format valueFormat, order int, alt ...uint32) {
		fields[f] = fieldInfo{name: name, alias: alias, nxmName: nxm, header: header, alt: alt,
			width: width, bits: bits, maskable: maskable, format: format, order: order}
	}
	basic := func(field, length int) uint32 { return oxmHeader(oxmClassBasic, field, length) }
	nx0 := func(field, length int) uint32 { return oxmHeader(oxmClassNXM0, field, length) }
	nx1 := func(field, length int) uint32 { return oxmHeader(oxmClassNXM1, field, length) }

	def(FieldPacketType, "packet_type", "", "OXM_OF_PACKET_TYPE", basic(44, 4), 4, 32, false, fmtPacketType, 1)
	def(FieldRecircID, "recirc_id", "", "NXM_NX_RECIRC_ID", nx1(36, 4), 4, 32, false, fmtDecimal, 3)
	def(FieldConjID, "conj_id", "", "NXM_NX_CONJ_ID", nx1(37, 4), 4, 32, false, fmtDecimal, 4)
	def(FieldInPort, "in_port_oxm", "", "OXM_OF_IN_PORT", basic(0, 4), 4, 32, false, fmtPort32, 5)
	def(FieldInPort16, "in_port", "", "NXM_OF_IN_PORT", nx0(0, 2), 2, 16, false, fmtPort16, 0)
	def(FieldActsetOutput, "actset_output", "", "OXM_OF_ACTSET_OUTPUT", basic(43, 4), 4, 32, false, fmtPort32, 6)
	def(FieldEthSrc, "eth_src", "dl_src", "NXM_OF_ETH_SRC", basic(4, 6), 6, 48, true, fmtMAC, 7, nx0(2, 6))
	def(FieldEthDst, "eth_dst", "dl_dst", "NXM_OF_ETH_DST", basic(3, 6), 6, 48, true, fmtMAC, 8, nx0(1, 6))
	def(FieldEthType, "eth_type", "dl_type", "NXM_OF_ETH_TYPE", basic(5, 2), 2, 16, false, fmtHex, 9, nx0(3, 2))
	def(FieldVLANTCI, "vlan_tci", "", "NXM_OF_VLAN_TCI", nx0(4, 2), 2, 16, true, fmtHex, 10)
	def(FieldVLANVID, "vlan_vid", "", "OXM_OF_VLAN_VID", basic(6, 2), 2, 12, true, fmtDecimal, 10)
	def(FieldVLANPCP, "vlan_pcp", "", "OXM_OF_VLAN_PCP", basic(7, 1), 1, 3, false, fmtDecimal, 11)
	def(FieldMPLSTC, "mpls_tc", "", "OXM_OF_MPLS_TC", basic(35, 1), 1, 3, false, fmtDecimal, 12)
	def(FieldMPLSBOS, "mpls_bos", "", "OXM_OF_MPLS_BOS", basic(36, 1), 1, 1, false, fmtDecimal, 13)
	def(FieldMPLSLabel, "mpls_label", "", "OXM_OF_MPLS_LABEL", basic(34, 4), 4, 20, false, fmtDecimal, 15)
	def(FieldIPv4Src, "ip_src", "nw_src", "NXM_OF_IP_SRC", basic(11, 4), 4, 32, true, fmtIPv4, 16, nx0(7, 4))
	def(FieldIPv4Dst, "ip_dst", "nw_dst", "NXM_OF_IP_DST", basic(12, 4), 4, 32, true, fmtIPv4, 17, nx0(8, 4))
	def(FieldIPv6Src, "ipv6_src", "", "NXM_NX_IPV6_SRC", basic(26, 16), 16, 128, true, fmtIPv6, 18, nx1(19, 16))
	def(FieldIPv6Dst, "ipv6_dst", "", "NXM_NX_IPV6_DST", basic(27, 16), 16, 128, true, fmtIPv6, 19, nx1(20, 16))
	def(FieldIPFrag, "ip_frag", "nw_frag", "NXM_NX_IP_FRAG", nx1(26, 1), 1, 2, true, fmtFrag, 20)
	fields[FieldIPFrag].tracked = 0x03
	def(FieldNwTOS, "nw_tos", "", "NXM_OF_IP_TOS", nx0(5, 1), 1, 8, false, fmtDecimal, 21)
	def(FieldIPDSCP, "ip_dscp", "", "OXM_OF_IP_DSCP", basic(8, 1), 1, 6, false, fmtDecimal, 21)
	def(FieldIPECN, "nw_ecn", "ip_ecn", "NXM_NX_IP_ECN", basic(9, 1), 1, 2, false, fmtDecimal, 22, nx1(28, 1))
	def(FieldIPTTL, "nw_ttl", "", "NXM_NX_IP_TTL", nx1(29, 1), 1, 8, false, fmtDecimal, 23)
	def(FieldIPv6Label, "ipv6_label", "", "NXM_NX_IPV6_LABEL", basic(28, 4), 4, 20, true, fmtHex, 24, nx1(27, 4))
	def(FieldIPProto, "nw_proto", "ip_proto", "NXM_OF_IP_PROTO", basic(10, 1), 1, 8, false, fmtDecimal, 25, nx0(6, 1))
	def(FieldTCPSrc, "tcp_src", "", "NXM_OF_TCP_SRC", basic(13, 2), 2, 16, true, fmtDecimal, 26, nx0(9, 2))
	def(FieldTCPDst, "tcp_dst", "", "NXM_OF_TCP_DST", basic(14, 2), 2, 16, true, fmtDecimal, 27, nx0(10, 2))
	def(FieldTCPFlags, "tcp_flags", "", "NXM_NX_TCP_FLAGS", basic(42, 2), 2, 12, true, fmtTCPFlags, 28, nx1(34, 2))
	def(FieldUDPSrc, "udp_src", "", "NXM_OF_UDP_SRC", basic(15, 2), 2, 16, true, fmtDecimal, 29, nx0(11, 2))
	def(FieldUDPDst, "udp_dst", "", "NXM_OF_UDP_DST", basic(16, 2), 2, 16, true, fmtDecimal, 30, nx0(12, 2))
	def(FieldSCTPSrc, "sctp_src", "", "OXM_OF_SCTP_SRC", basic(17, 2), 2, 16, true, fmtDecimal, 31)
	def(FieldSCTPDst, "sctp_dst", "", "OXM_OF_SCTP_DST", basic(18, 2), 2, 16, true, fmtDecimal, 32)
	def(FieldICMPv4Type, "icmp_type", "icmpv4_type", "NXM_OF_ICMP_TYPE", basic(19, 1), 1, 8, false, fmtDecimal, 33, nx0(13, 1))
	def(FieldICMPv4Code, "icmp_code", "icmpv4_code", "NXM_OF_ICMP_CODE", basic(20, 1), 1, 8, false, fmtDecimal, 34, nx0(14, 1))
	def(FieldICMPv6Type, "icmpv6_type", "", "NXM_NX_ICMPV6_TYPE", basic(29, 1), 1, 8, false, fmtDecimal, 35, nx1(21, 1))
	def(FieldICMPv6Code, "icmpv6_code", "", "NXM_NX_ICMPV6_CODE", basic(30, 1), 1, 8, false, fmtDecimal, 36, nx1(22, 1))
	def(FieldNDTarget, "nd_target", "", "NXM_NX_ND_TARGET", basic(31, 16), 16, 128, true, fmtIPv6, 37, nx1(23, 16))
	def(FieldNDSLL, "nd_sll", "", "NXM_NX_ND_SLL", basic(32, 6), 6, 48, true, fmtMAC, 38, nx1(24, 6))
	def(FieldNDTLL, "nd_tll", "", "NXM_NX_ND_TLL", basic(33, 6), 6, 48, true, fmtMAC, 39, nx1(25, 6))
	// The reserved word (an advertisement's R, S and O flags) and the type
	// of the first option of a neighbour discovery message, in Open
	// vSwitch's ERICOXM_OF class (since 2.11): a neighbour responder turns
	// a solicitation into an advertisement with them.
	def(FieldNDReserved, "nd_reserved", "", "ERICOXM_OF_ICMPV6_ND_RESERVED", oxmHeader(oxmClassEricsson, 1, 4), 4, 32, false, fmtDecimal, 39)
	def(FieldNDOptionsType, "nd_options_type", "", "ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE", oxmHeader(oxmClassEricsson, 2, 1), 1, 8, false, fmtDecimal, 39)
	def(FieldARPOp, "arp_op", "", "NXM_OF_ARP_OP", basic(21, 2), 2, 16, false, fmtDecimal, 40, nx0(15, 2))
	def(FieldARPSPA, "arp_spa", "", "NXM_OF_ARP_SPA", basic(22, 4), 4, 32, true, fmtIPv4, 41, nx0(16, 4))
	def(FieldARPTPA, "arp_tpa", "", "NXM_OF_ARP_TPA", basic(23, 4), 4, 32, true, fmtIPv4, 42, nx0(17, 4))
	def(FieldARPSHA, "arp_sha", "", "NXM_NX_ARP_SHA", basic(24, 6), 6, 48, true, fmtMAC, 43, nx1(17, 6))
	def(FieldARPTHA, "arp_tha", "", "NXM_NX_ARP_THA", basic(25, 6), 6, 48, true, fmtMAC, 44, nx1(18, 6))
	def(FieldTunnelID, "tun_id", "tunnel_id", "NXM_NX_TUN_ID", basic(38, 8), 8, 64, true, fmtHex, 45, nx1(16, 8))
	def(FieldTunSrc, "tun_src", "", "NXM_NX_TUN_IPV4_SRC", nx1(31, 4), 4, 32, true, fmtIPv4, 47)
	def(FieldTunDst, "tun_dst", "", "NXM_NX_TUN_IPV4_DST", nx1(32, 4), 4, 32, true, fmtIPv4, 48)
	def(FieldTunIPv6Src, "tun_ipv6_src", "", "NXM_NX_TUN_IPV6_SRC", nx1(109, 16), 16, 128, true, fmtIPv6, 49)
	def(FieldTunIPv6Dst, "tun_ipv6_dst", "", "NXM_NX_TUN_IPV6_DST", nx1(110, 16), 16, 128, true, fmtIPv6, 50)
	for n := 0; n < 16; n++ {
		def(FieldReg(n), fmt.Sprintf("reg%d", n), "", fmt.Sprintf("NXM_NX_REG%d", n), nx1(n, 4), 4, 32, true, fmtHex, 60+n)
	}
	for n := 0; n < 8; n++ {
		def(FieldXReg(n), fmt.Sprintf("xreg%d", n), "", fmt.Sprintf("OXM_OF_PKT_REG%d", n), oxmHeader(oxmClassPktRegs, n, 8), 8, 64, true, fmtHex, 0)
	}
	for n := 0; n < 4; n++ {
		def(FieldXXReg(n), fmt.Sprintf("xxreg%d", n), "", fmt.Sprintf("NXM_NX_XXREG%d", n), nx1(111+n, 16), 16, 128, true, fmtHex, 0)
	}
	def(FieldPktMark, "pkt_mark", "", "NXM_NX_PKT_MARK", nx1(33, 4), 4, 32, true, fmtHex, 80)
	def(FieldCTState, "ct_state", "", "NXM_NX_CT_STATE", nx1(105, 4), 4, 32, true, fmtCTState, 81)
	fields[FieldCTState].tracked, fields[FieldCTState].maskedExact = 0xff, true
	// Fields narrower than their bytes: Open vSwitch keeps only these bits.
	fields[FieldVLANVID].tracked = 0x1fff
	fields[FieldVLANPCP].tracked = 0x07
	fields[FieldIPDSCP].tracked = 0x3f
	fields[FieldIPECN].tracked = 0x03
	fields[FieldMPLSLabel].tracked = 0xfffff
	fields[FieldMPLSTC].tracked = 0x07
	fields[FieldMPLSBOS].tracked = 0x01
	def(FieldCTZone, "ct_zone", "", "NXM_NX_CT_ZONE", nx1(106, 2), 2, 16, false, fmtHex, 82)
	def(FieldCTMark, "ct_mark", "", "NXM_NX_CT_MARK", nx1(107, 4), 4, 32, true, fmtHex, 83)
	def(FieldCTLabel, "ct_label", "", "NXM_NX_CT_LABEL", nx1(108, 16), 16, 128, true, fmtHex, 84)
	def(FieldCTNwSrc, "ct_nw_src", "", "NXM_NX_CT_NW_SRC", nx1(120, 4), 4, 32, true, fmtIPv4, 85)
	def(FieldCTIPv6Src, "ct_ipv6_src", "", "NXM_NX_CT_IPV6_SRC", nx1(122, 16), 16, 128, true, fmtIPv6, 86)
	def(FieldCTNwDst, "ct_nw_dst", "", "NXM_NX_CT_NW_DST", nx1(121, 4), 4, 32, true, fmtIPv4, 87)
	def(FieldCTIPv6Dst, "ct_ipv6_dst", "", "NXM_NX_CT_IPV6_DST", nx1(123, 16), 16, 128, true, fmtIPv6, 88)
	def(FieldCTNwProto, "ct_nw_proto", "", "NXM_NX_CT_NW_PROTO", nx1(119, 1), 1, 8, false, fmtDecimal, 89)
	def(FieldCTTpSrc, "ct_tp_src", "", "NXM_NX_CT_TP_SRC", nx1(124, 2), 2, 16, true, fmtDecimal, 90)
	def(FieldCTTpDst, "ct_tp_dst", "", "NXM_NX_CT_TP_DST", nx1(125, 2), 2, 16, true, fmtDecimal, 91)
	def(FieldMetadata, "metadata", "", "OXM_OF_METADATA", basic(2, 8), 8, 64, true, fmtHex, 92)

	for pre, fs := range map[prerequisite][]Field{
		preEthernet:  {FieldEthSrc, FieldEthDst, FieldEthType, FieldVLANTCI, FieldVLANVID},
		preVLAN:      {FieldVLANPCP},
		preMPLS:      {FieldMPLSLabel, FieldMPLSTC, FieldMPLSBOS},
		preIPv4:      {FieldIPv4Src, FieldIPv4Dst},
		preIPv6:      {FieldIPv6Src, FieldIPv6Dst, FieldIPv6Label},
		preIP:        {FieldIPFrag, FieldNwTOS, FieldIPDSCP, FieldIPECN, FieldIPTTL, FieldIPProto},
		preTCP:       {FieldTCPSrc, FieldTCPDst, FieldTCPFlags},
		preUDP:       {FieldUDPSrc, FieldUDPDst},
		preSCTP:      {FieldSCTPSrc, FieldSCTPDst},
		preICMPv4:    {FieldICMPv4Type, FieldICMPv4Code},
		preICMPv6:    {FieldICMPv6Type, FieldICMPv6Code},
		preND:        {FieldNDTarget, FieldNDReserved, FieldNDOptionsType},
		preNDSolicit: {FieldNDSLL},
		preNDAdvert:  {FieldNDTLL},
		preARP:       {FieldARPOp, FieldARPSPA, FieldARPTPA, FieldARPSHA, FieldARPTHA},
		preCT:        {FieldCTNwProto, FieldCTNwSrc, FieldCTNwDst, FieldCTIPv6Src, FieldCTIPv6Dst, FieldCTTpSrc, FieldCTTpDst},
	} {
		for _, f := range fs {
			fields[f].prereq = pre
		}
	}

	for f := Field(1); f < fieldCount; f++ {
		fi := &fields[f]
		if fi.name == "" {
			panic(fmt.Sprintf("openflow: field %d undefined", f))
		}
		fieldByHeader[fi.header] = f
		for _, h := range fi.alt {
			fieldByHeader[h] = f
		}
		fieldByName[fi.name] = f
		if fi.alias != "" {
			fieldByName[fi.alias] = f
		}
		if fi.nxmName != "" {
			fieldByName[fi.nxmName] = f
		}
	}
}

func (f Field) valid() bool { return f > FieldNone && f < fieldCount }

func (f Field) info() *fieldInfo {
	if !f.valid() {
		return &fields[0]
	}
	return &fields[f]
}

// String returns Open vSwitch's name for the field, e.g. "ip_src" or "reg3".
func (f Field) String() string {
	if !f.valid() {
		return fmt.Sprintf("field(%d)", uint16(f))
	}
	return fields[f].name
}

// Width is the field's size in bytes on the wire.
func (f Field) Width() int { return f.info().width }

// Bits is the number of significant bits in the field.
func (f Field) Bits() int { return f.info().bits }

// Maskable reports whether the switch matches the field under a mask.
func (f Field) Maskable() bool { return f.info().maskable }

// HasName reports whether key is the field's name or alias in
// ovs-fields(7) (reg0, nw_src); its NXM name (NXM_NX_REG0) is not one.
func (f Field) HasName(key string) bool {
	fi := f.info()
	return f.valid() && (fi.name == key || fi.alias != "" && fi.alias == key)
}

// HasPrerequisites reports whether a match on the field means anything
// only with other fields matched too (see Match.MissingPrerequisite).
func (f Field) HasPrerequisites() bool { return f.info().prereq != preNone }

// Header is the OXM/NXM header Open vSwitch uses for the field in OpenFlow
// 1.5, without mask.
func (f Field) Header() uint32 { return f.info().header }

// nxmHeader is the field's NXM header when it has one, else its OXM
// header. Learn specs use it, as Open vSwitch does.
func (f Field) nxmHeader() uint32 {
	fi := f.info()
	if len(fi.alt) > 0 {
		return fi.alt[0]
	}
	return fi.header
}

// nxm returns the name used in subfield syntax: the NXM name when there is
// one, as Open vSwitch prints it.
func (f Field) nxm() string {
	fi := f.info()
	if fi.nxmName != "" {
		return fi.nxmName
	}
	return fi.name
}

// ParseField looks a field up by any of the names ovs-ofctl accepts:
// "ip_src", "nw_src", "NXM_OF_IP_SRC", "reg0", "xxreg1", ...
func ParseField(name string) (Field, error) {
	if f, ok := fieldByName[name]; ok {
		return f, nil
	}
	return FieldNone, fmt.Errorf("openflow: unknown field %q", name)
}

// fieldFromHeader decodes an OXM/NXM header (hasmask bit cleared, length of
// the value only).
func fieldFromHeader(h uint32) (Field, bool) {
	f, ok := fieldByHeader[h]
	return f, ok
}
