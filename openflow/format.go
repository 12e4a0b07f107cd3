package openflow

import (
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Text forms of matches and flows in ovs-ofctl's syntax: what
// `ovs-ofctl -O OpenFlow15 dump-flows` prints, field for field and in the
// same order, so that logs, tests and operators read the same text.

func (m *Match) entry(f Field) *matchEntry {
	for i := range m.entries {
		if m.entries[i].field == f {
			return &m.entries[i]
		}
	}
	return nil
}

func (e *matchEntry) uint() uint64 { return ofnum.BytesUint(e.value[:e.field.Width()]) }

func (e *matchEntry) maskUint() uint64 { return ofnum.BytesUint(e.mask[:e.field.Width()]) }

func (e *matchEntry) isFullMask() bool { return ofnum.IsOnes(e.mask[:e.field.Width()]) }

// String formats the match as ovs-ofctl does (without priority), e.g.
// "ip,nw_src=10.1.0.5". The empty match formats as "".
func (m Match) String() string { return string(m.appendText(nil, DefaultPriority)) }

func appendSep(b []byte, name string) []byte {
	b = append(b, name...)
	return append(b, '=')
}

// appendHexC formats like C's %#x: "0" for zero, else 0x-prefixed.
func appendHexC(b []byte, v uint64) []byte {
	if v == 0 {
		return append(b, '0')
	}
	b = append(b, "0x"...)
	return strconv.AppendUint(b, v, 16)
}

// appendUintMasked is format_uint32_masked / format_be64_masked: %#x and
// "/%#x" unless the mask is full.
func (m *Match) appendUintMasked(b []byte, name string, f Field) []byte {
	e := m.entry(f)
	if e == nil {
		return b
	}
	b = appendSep(b, name)
	b = appendHexC(b, e.uint())
	if !e.isFullMask() {
		b = append(b, '/')
		b = appendHexC(b, e.maskUint())
	}
	return append(b, ',')
}

// appendBE16Masked is format_be16_masked: decimal if exact, else hex/hex.
func (m *Match) appendBE16Masked(b []byte, name string, f Field) []byte {
	e := m.entry(f)
	if e == nil {
		return b
	}
	b = appendSep(b, name)
	if e.isFullMask() {
		b = strconv.AppendUint(b, e.uint(), 10)
	} else {
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, e.uint(), 16)
		b = append(b, "/0x"...)
		b = strconv.AppendUint(b, e.maskUint(), 16)
	}
	return append(b, ',')
}

func (m *Match) appendDecimal(b []byte, name string, f Field) []byte {
	if e := m.entry(f); e != nil {
		b = appendSep(b, name)
		b = strconv.AppendUint(b, e.uint(), 10)
		b = append(b, ',')
	}
	return b
}

func (m *Match) appendIPField(b []byte, name string, f Field) []byte {
	if e := m.entry(f); e != nil {
		w := f.Width()
		b = appendSep(b, name)
		b = appendIPMasked(b, e.value[:w], e.mask[:w])
		b = append(b, ',')
	}
	return b
}

func (m *Match) appendMACField(b []byte, name string, f Field) []byte {
	if e := m.entry(f); e != nil {
		b = appendSep(b, name)
		b = appendValue(b, f, e.value[:6], e.mask[:6])
		b = append(b, ',')
	}
	return b
}

// appendText is Open vSwitch's match_format: the fields in its order, in
// groups a reader can hold (each part below prints its fields in that
// order), with the protocol shortcut (ip, tcp6, arp, ...) in place of
// dl_type and nw_proto where one applies.
func (m *Match) appendText(b []byte, priority uint16) []byte {
	start := len(b)
	if priority != DefaultPriority {
		b = append(b, "priority="...)
		b = strconv.AppendUint(b, uint64(priority), 10)
		b = append(b, ',')
	}
	b = m.appendPipelineText(b)
	proto := m.protocol()
	if proto.shortcut != "" {
		b = append(b, proto.shortcut...)
		b = append(b, ',')
	}
	b = m.appendRegistersText(b)
	b = m.appendL2Text(b, proto)
	b = m.appendL3Text(b, proto)
	b = m.appendL4Text(b, proto)
	b = m.appendUnknownText(b)
	if len(b) > start && b[len(b)-1] == ',' {
		b = b[:len(b)-1]
	}
	return b
}

// appendPipelineText prints what the pipeline and conntrack say of the
// packet: pkt_mark, recirc_id, conj_id, actset_output, the ct_ fields and
// packet_type.
func (m *Match) appendPipelineText(b []byte) []byte {
	b = m.appendUintMasked(b, "pkt_mark", FieldPktMark)
	b = m.appendUintMasked(b, "recirc_id", FieldRecircID)
	b = m.appendDecimal(b, "conj_id", FieldConjID)
	if e := m.entry(FieldActsetOutput); e != nil {
		b = appendSep(b, "actset_output")
		b = append(b, PortName(uint32(e.uint()))...)
		b = append(b, ',')
	}
	if e := m.entry(FieldCTState); e != nil {
		b = appendSep(b, "ct_state")
		b = appendFlagsMasked(b, ctStateNames, uint32(e.uint()), uint32(e.maskUint()), 0xff)
		b = append(b, ',')
	}
	b = m.appendBE16Masked(b, "ct_zone", FieldCTZone)
	b = m.appendUintMasked(b, "ct_mark", FieldCTMark)
	if e := m.entry(FieldCTLabel); e != nil {
		b = appendSep(b, "ct_label")
		b = appendHex(b, e.value[:16])
		if !e.isFullMask() {
			b = append(b, '/')
			b = appendHex(b, e.mask[:16])
		}
		b = append(b, ',')
	}
	b = m.appendIPField(b, "ct_nw_src", FieldCTNwSrc)
	b = m.appendIPField(b, "ct_ipv6_src", FieldCTIPv6Src)
	b = m.appendIPField(b, "ct_nw_dst", FieldCTNwDst)
	b = m.appendIPField(b, "ct_ipv6_dst", FieldCTIPv6Dst)
	// Open vSwitch prints (and sends) ct_tp_* only with ct_nw_proto; a
	// match without it is invalid, but is printed rather than hidden.
	b = m.appendDecimal(b, "ct_nw_proto", FieldCTNwProto)
	b = m.appendBE16Masked(b, "ct_tp_src", FieldCTTpSrc)
	b = m.appendBE16Masked(b, "ct_tp_dst", FieldCTTpDst)
	if e := m.entry(FieldPacketType); e != nil && !(e.uint() == 0 && e.isFullMask()) {
		b = appendSep(b, "packet_type")
		if e.isFullMask() {
			b = appendValue(b, FieldPacketType, e.value[:4], nil)
		} else {
			b = appendHexC(b, e.uint())
			b = append(b, '/')
			b = appendHexC(b, e.maskUint())
		}
		b = append(b, ',')
	}
	return b
}

// matchProtocol is what a match says of the packet's protocols, as the
// text needs it.
type matchProtocol struct {
	// dlType is dl_type, when hasDLType.
	dlType    uint64
	hasDLType bool
	// proto is nw_proto, when hasProto.
	proto    uint64
	hasProto bool
	// shortcut stands for dl_type (and nw_proto, when protoSaid): "ip",
	// "tcp6", "arp", ...; "" when none does, and dl_type is printed.
	shortcut  string
	protoSaid bool
}

// protocolShortcuts are the keywords that stand for an eth_type and an IP
// protocol (0: none), as in ovs-fields(7).
var protocolShortcuts = map[string][2]uint64{
	"ip": {0x0800, 0}, "ipv4": {0x0800, 0}, "icmp": {0x0800, 1}, "tcp": {0x0800, 6},
	"udp": {0x0800, 17}, "sctp": {0x0800, 132}, "ipv6": {0x86dd, 0}, "ip6": {0x86dd, 0}, "icmp6": {0x86dd, 58},
	"tcp6": {0x86dd, 6}, "udp6": {0x86dd, 17}, "sctp6": {0x86dd, 132}, "arp": {0x0806, 0},
	"rarp": {0x8035, 0}, "mpls": {0x8847, 0}, "mplsm": {0x8848, 0},
}

// ProtocolShortcut returns the eth_type and IP protocol (0: none) that a
// protocol keyword of ovs-ofctl's match syntax (tcp, ipv6, arp, ...)
// stands for.
func ProtocolShortcut(name string) (ethType, ipProto uint64, ok bool) {
	pt, ok := protocolShortcuts[name]
	return pt[0], pt[1], ok
}

// shortcutNames are the names Open vSwitch prints for an eth_type and an
// IP protocol (0: the eth_type alone): protocolShortcuts', but for the
// aliases it reads and never prints.
var shortcutNames = func() map[[2]uint64]string {
	aliases := map[string]bool{"ipv4": true, "ip6": true}
	out := map[[2]uint64]string{}
	for name, key := range protocolShortcuts {
		if !aliases[name] {
			out[key] = name
		}
	}
	return out
}()

func (m *Match) protocol() matchProtocol {
	var p matchProtocol
	if e := m.entry(FieldIPProto); e != nil {
		p.proto, p.hasProto = e.uint(), true
	}
	if e := m.entry(FieldEthType); e != nil {
		p.dlType, p.hasDLType = e.uint(), true
		p.shortcut = shortcutNames[[2]uint64{p.dlType, 0}]
		if name, ok := shortcutNames[[2]uint64{p.dlType, p.proto}]; ok && p.hasProto && p.proto != 0 {
			p.shortcut, p.protoSaid = name, true
		}
	}
	return p
}

// isARP: dl_type is ARP or RARP.
func (p matchProtocol) isARP() bool {
	return p.hasDLType && (p.dlType == 0x0806 || p.dlType == 0x8035)
}

// appendRegistersText prints the registers, the tunnel's fields and the
// metadata.
func (m *Match) appendRegistersText(b []byte) []byte {
	for n := 0; n < 16; n++ {
		b = m.appendUintMasked(b, fields[FieldReg(n)].name, FieldReg(n))
	}
	b = m.appendUintMasked(b, "tun_id", FieldTunnelID)
	b = m.appendIPField(b, "tun_src", FieldTunSrc)
	b = m.appendIPField(b, "tun_dst", FieldTunDst)
	b = m.appendIPField(b, "tun_ipv6_src", FieldTunIPv6Src)
	b = m.appendIPField(b, "tun_ipv6_dst", FieldTunIPv6Dst)
	return m.appendUintMasked(b, "metadata", FieldMetadata)
}

// appendL2Text prints in_port, the VLAN, the Ethernet addresses and
// dl_type where no shortcut said it.
func (m *Match) appendL2Text(b []byte, proto matchProtocol) []byte {
	if e := m.entry(FieldInPort); e != nil {
		b = appendSep(b, "in_port")
		b = append(b, PortName(uint32(e.uint()))...)
		b = append(b, ',')
	}
	b = m.appendVLAN(b)
	b = m.appendMACField(b, "dl_src", FieldEthSrc)
	b = m.appendMACField(b, "dl_dst", FieldEthDst)
	if proto.hasDLType && proto.shortcut == "" {
		b = append(b, "dl_type=0x"...)
		b = appendPadHex(b, proto.dlType, 4)
		b = append(b, ',')
	}
	return b
}

// appendL3Text prints the network layer: addresses (IPv6, ARP, IPv4),
// nw_proto where no shortcut said it, arp_op, the ARP hardware addresses,
// TOS, ECN, TTL, MPLS and fragments.
func (m *Match) appendL3Text(b []byte, proto matchProtocol) []byte {
	b = m.appendIPField(b, "ipv6_src", FieldIPv6Src)
	b = m.appendIPField(b, "ipv6_dst", FieldIPv6Dst)
	if e := m.entry(FieldIPv6Label); e != nil {
		b = append(b, "ipv6_label=0x"...)
		b = appendPadHex(b, e.uint(), 5)
		if !e.isFullMask() {
			b = append(b, "/0x"...)
			b = appendPadHex(b, e.maskUint(), 5)
		}
		b = append(b, ',')
	}
	b = m.appendIPField(b, "arp_spa", FieldARPSPA)
	b = m.appendIPField(b, "arp_tpa", FieldARPTPA)
	b = m.appendIPField(b, "nw_src", FieldIPv4Src)
	b = m.appendIPField(b, "nw_dst", FieldIPv4Dst)
	// Open vSwitch prints arp_op before nw_proto in an ARP match, after it
	// otherwise.
	if proto.isARP() {
		b = m.appendDecimal(b, "arp_op", FieldARPOp)
	}
	if proto.hasProto && !proto.protoSaid {
		b = m.appendDecimal(b, "nw_proto", FieldIPProto)
	}
	if !proto.isARP() {
		b = m.appendDecimal(b, "arp_op", FieldARPOp)
	}
	b = m.appendMACField(b, "arp_sha", FieldARPSHA)
	b = m.appendMACField(b, "arp_tha", FieldARPTHA)
	if e := m.entry(FieldIPDSCP); e != nil {
		b = append(b, "nw_tos="...)
		b = strconv.AppendUint(b, e.uint()<<2, 10)
		b = append(b, ',')
	} else if e := m.entry(FieldNwTOS); e != nil {
		b = append(b, "nw_tos="...)
		b = strconv.AppendUint(b, e.uint()&0xfc, 10)
		b = append(b, ',')
	}
	b = m.appendDecimal(b, "nw_ecn", FieldIPECN)
	b = m.appendDecimal(b, "nw_ttl", FieldIPTTL)
	b = m.appendDecimal(b, "mpls_label", FieldMPLSLabel)
	b = m.appendDecimal(b, "mpls_tc", FieldMPLSTC)
	b = m.appendDecimal(b, "mpls_bos", FieldMPLSBOS)
	if e := m.entry(FieldIPFrag); e != nil {
		b = append(b, "nw_frag="...)
		b = appendFrag(b, e.value[0], e.mask[0])
		b = append(b, ',')
	}
	return b
}

// appendL4Text prints the transport layer: ICMP types and codes, neighbour
// discovery, ports and TCP flags.
func (m *Match) appendL4Text(b []byte, proto matchProtocol) []byte {
	// Open vSwitch calls both ICMP types icmp_type; the explicit names are
	// used only for combinations no valid flow has, so that the text still
	// parses back to the same fields.
	icmp4, icmp6 := "icmp_", "icmpv6_"
	if proto.hasDLType && proto.dlType == 0x86dd {
		icmp4, icmp6 = "icmpv4_", "icmp_"
	}
	b = m.appendDecimal(b, icmp4+"type", FieldICMPv4Type)
	b = m.appendDecimal(b, icmp4+"code", FieldICMPv4Code)
	b = m.appendDecimal(b, icmp6+"type", FieldICMPv6Type)
	b = m.appendDecimal(b, icmp6+"code", FieldICMPv6Code)
	b = m.appendIPField(b, "nd_target", FieldNDTarget)
	b = m.appendMACField(b, "nd_sll", FieldNDSLL)
	b = m.appendMACField(b, "nd_tll", FieldNDTLL)
	b = m.appendDecimal(b, "nd_reserved", FieldNDReserved)
	b = m.appendDecimal(b, "nd_options_type", FieldNDOptionsType)
	// tp_src/tp_dst are the ports of the flow's own protocol; ports of
	// another protocol (an invalid flow) keep their explicit names.
	l4 := [2]Field{FieldTCPSrc, FieldTCPDst}
	switch proto.proto {
	case 17:
		l4 = [2]Field{FieldUDPSrc, FieldUDPDst}
	case 132:
		l4 = [2]Field{FieldSCTPSrc, FieldSCTPDst}
	}
	for i, fs := range [2][3]Field{{FieldTCPSrc, FieldUDPSrc, FieldSCTPSrc}, {FieldTCPDst, FieldUDPDst, FieldSCTPDst}} {
		for _, f := range fs {
			name := f.String()
			if f == l4[i] {
				name = [2]string{"tp_src", "tp_dst"}[i]
			}
			b = m.appendBE16Masked(b, name, f)
		}
	}
	if e := m.entry(FieldTCPFlags); e != nil {
		b = append(b, "tcp_flags="...)
		v, mk := e.uint(), e.maskUint()
		if mk != 0xffff && (v|mk)&0xf000 != 0 {
			// Reserved bits, which Open vSwitch ignores: keep them as numbers.
			b = appendHexC(b, v)
			b = append(b, '/')
			b = appendHexC(b, mk)
		} else {
			b = appendFlagsMasked(b, tcpFlagNames, uint32(v), uint32(mk)&0x0fff, 0x0fff)
		}
		b = append(b, ',')
	}
	return b
}

// appendUnknownText prints the fields this package does not model as
// oxm=HEX.
func (m *Match) appendUnknownText(b []byte) []byte {
	for off := 0; off < len(m.unknown); {
		_, _, n, err := oxmTLV(m.unknown[off:])
		if err != nil {
			break
		}
		b = append(b, "oxm="...)
		b = appendHexBytes(b, m.unknown[off:off+n])
		b = append(b, ',')
		off += n
	}
	return b
}

func appendPadHex(b []byte, v uint64, width int) []byte {
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendVLAN formats the 802.1Q match from the OXM VLAN fields the way
// Open vSwitch formats its TCI view: dl_vlan/dl_vlan_pcp when it can,
// vlan_tci otherwise.
func (m *Match) appendVLAN(b []byte) []byte {
	var tci, mask uint16
	if e := m.entry(FieldVLANTCI); e != nil {
		tci, mask = uint16(e.uint()), uint16(e.maskUint())
	}
	if e := m.entry(FieldVLANVID); e != nil {
		tci |= uint16(e.uint()) & 0x1fff
		mask |= uint16(e.maskUint()) & 0x1fff
	}
	if e := m.entry(FieldVLANPCP); e != nil {
		tci |= uint16(e.uint()&7) << 13
		mask |= 0xe000
	}
	if mask == 0 {
		return b
	}
	if m.entry(FieldVLANVID) == nil && m.entry(FieldVLANTCI) == nil {
		// A PCP without a VLAN ID, which no switch accepts, cannot be
		// written as a TCI.
		b = append(b, "vlan_pcp="...)
		b = strconv.AppendUint(b, uint64(tci>>13), 10)
		return append(b, ',')
	}
	vidMask, pcpMask, cfi := mask&0x0fff, mask&0xe000, mask&0x1000
	switch {
	case cfi != 0 && tci&0x1000 != 0 && (vidMask == 0 || vidMask == 0x0fff) &&
		(pcpMask == 0 || pcpMask == 0xe000) && (vidMask != 0 || pcpMask != 0):
		if vidMask != 0 {
			b = append(b, "dl_vlan="...)
			b = strconv.AppendUint(b, uint64(tci&0x0fff), 10)
			b = append(b, ',')
		}
		if pcpMask != 0 {
			b = append(b, "dl_vlan_pcp="...)
			b = strconv.AppendUint(b, uint64(tci>>13), 10)
			b = append(b, ',')
		}
	case mask == 0xffff:
		b = append(b, "vlan_tci=0x"...)
		b = appendPadHex(b, uint64(tci), 4)
		b = append(b, ',')
	default:
		b = append(b, "vlan_tci=0x"...)
		b = appendPadHex(b, uint64(tci), 4)
		b = append(b, "/0x"...)
		b = appendPadHex(b, uint64(mask), 4)
		b = append(b, ',')
	}
	return b
}

// appendDuration is ofp_print_duration: seconds, then milliseconds if the
// fraction is a whole number of them, else up to 9 digits without trailing
// zeros.
func appendDuration(b []byte, sec, nsec uint32) []byte {
	b = strconv.AppendUint(b, uint64(sec), 10)
	if nsec > 0 {
		if ms := nsec / 1000000; ms*1000000 == nsec {
			b = append(b, '.')
			b = appendPadDec(b, uint64(ms), 3)
		} else {
			b = append(b, '.')
			n := len(b)
			b = appendPadDec(b, uint64(nsec), 9)
			for len(b) > n && b[len(b)-1] == '0' {
				b = b[:len(b)-1]
			}
		}
	}
	return append(b, 's')
}

func appendPadDec(b []byte, v uint64, width int) []byte {
	s := strconv.FormatUint(v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

func appendFlowFlags(b []byte, f FlowModFlags) []byte {
	for _, x := range []struct {
		bit  FlowModFlags
		name string
	}{{FlowSendFlowRem, "send_flow_rem "}, {FlowCheckOverlap, "check_overlap "},
		{FlowResetCounts, "reset_counts "}, {FlowNoPktCounts, "no_packet_counts "},
		{FlowNoBytCounts, "no_byte_counts "}} {
		if f&x.bit != 0 {
			b = append(b, x.name...)
		}
	}
	return b
}

// String formats the flow mod in ovs-ofctl's flow syntax, as
// `ovs-ofctl --no-stats dump-flows` prints an installed flow:
//
//	cookie=0x5, table=1, priority=100,ip,nw_src=10.1.0.5 actions=ct(commit,zone=5,nat(src=192.0.2.10)),output:2
//
// Commands other than add are prefixed with their name ("delete ..."), as
// in ovs-ofctl's flow files; deletes carry no actions. ParseFlow reads
// this syntax back.
func (m *FlowMod) String() string {
	var b []byte
	if m.Command != FlowAdd {
		b = append(b, m.Command.String()...)
		b = append(b, ' ')
	}
	if m.CookieMask != 0 {
		b = append(b, "cookie=0x"...)
		b = strconv.AppendUint(b, m.Cookie, 16)
		b = append(b, "/0x"...)
		b = strconv.AppendUint(b, m.CookieMask, 16)
		b = append(b, ", "...)
	} else if m.Cookie != 0 {
		b = append(b, "cookie=0x"...)
		b = strconv.AppendUint(b, m.Cookie, 16)
		b = append(b, ", "...)
	}
	isDelete := m.Command == FlowDelete || m.Command == FlowDeleteStrict
	if (isDelete && m.Table != TableAll) || (!isDelete && m.Table != 0) {
		b = append(b, "table="...)
		b = strconv.AppendUint(b, uint64(m.Table), 10)
		b = append(b, ", "...)
	}
	b = appendFlowFields(b, m.IdleTimeout, m.HardTimeout, m.Flags, m.Importance)
	if m.OutPort != 0 && m.OutPort != PortAny {
		b = append(b, "out_port="...)
		b = append(b, PortName(m.OutPort)...)
		b = append(b, ", "...)
	}
	if m.OutGroup != 0 && m.OutGroup != GroupAny {
		b = append(b, "out_group="...)
		b = strconv.AppendUint(b, uint64(m.OutGroup), 10)
		b = append(b, ", "...)
	}
	n := len(b)
	b = m.Match.appendText(b, m.Priority)
	if isDelete {
		return string(trimSpaceComma(b))
	}
	if len(b) != n {
		b = append(b, ' ')
	}
	b = append(b, "actions="...)
	return string(appendInstructionsText(b, m.Instructions))
}

func trimSpaceComma(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == ',') {
		b = b[:len(b)-1]
	}
	return b
}

func appendFlowFields(b []byte, idle, hard uint16, flags FlowModFlags, importance uint16) []byte {
	if idle != 0 {
		b = append(b, "idle_timeout="...)
		b = strconv.AppendUint(b, uint64(idle), 10)
		b = append(b, ", "...)
	}
	if hard != 0 {
		b = append(b, "hard_timeout="...)
		b = strconv.AppendUint(b, uint64(hard), 10)
		b = append(b, ", "...)
	}
	b = appendFlowFlags(b, flags)
	if importance != 0 {
		b = append(b, "importance="...)
		b = strconv.AppendUint(b, uint64(importance), 10)
		b = append(b, ", "...)
	}
	return b
}

// String formats the flow exactly as a line of
// `ovs-ofctl -O OpenFlow15 dump-flows` (without the leading space):
//
//	cookie=0x0, duration=1.5s, table=0, n_packets=0, n_bytes=0, idle_age=1, priority=100,ip actions=drop
func (f *Flow) String() string {
	b := append([]byte(nil), "cookie=0x"...)
	b = strconv.AppendUint(b, f.Cookie, 16)
	b = append(b, ", duration="...)
	b = appendDuration(b, f.Stats.DurationSec, f.Stats.DurationNsec)
	b = append(b, ", table="...)
	b = strconv.AppendUint(b, uint64(f.Table), 10)
	b = append(b, ", n_packets="...)
	b = strconv.AppendUint(b, f.Stats.PacketCount, 10)
	b = append(b, ", n_bytes="...)
	b = strconv.AppendUint(b, f.Stats.ByteCount, 10)
	b = append(b, ", "...)
	b = appendFlowFields(b, f.IdleTimeout, f.HardTimeout, f.Flags, f.Importance)
	if f.Stats.Present&StatIdleTime != 0 {
		b = append(b, "idle_age="...)
		b = strconv.AppendUint(b, uint64(f.Stats.IdleSec), 10)
		b = append(b, ", "...)
	}
	n := len(b)
	b = f.Match.appendText(b, f.Priority)
	if len(b) != n {
		b = append(b, ' ')
	}
	b = append(b, "actions="...)
	return string(appendInstructionsText(b, f.Instructions))
}
