package openflow

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Parsing of ovs-ofctl's flow syntax, the inverse of the String methods:
// the flow and its match here, actions and instructions in
// parse_actions.go. What it reads and refuses is listed in doc.go.

// ParseError reports where flow text could not be parsed.
type ParseError struct {
	Text string // the whole input
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("openflow: parse %q: %v", e.Text, e.Err) }

func (e *ParseError) Unwrap() error { return e.Err }

// UnsupportedError is how the parsers refuse text that ovs-ofctl reads but
// this package cannot encode the way ovs-ofctl does: an action, field or
// argument it does not model, or a field whose prerequisites the match
// lacks (which ovs-ofctl would silently leave out, or send as another
// field). Part names what was refused; Why says why when it is not simply
// unmodelled.
type UnsupportedError struct {
	Part string
	Why  string
}

func (e *UnsupportedError) Error() string {
	if e.Why == "" {
		return e.Part + " is not supported"
	}
	return e.Part + ": " + e.Why
}

// kv is one key[=value] element of flow text.
type kv struct {
	key, value string
	paren      bool // the value was given as key(value)
	hasValue   bool
}

func isDelim(c byte) bool { return c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// splitKV splits s into key/value elements as Open vSwitch's
// ofputil_parse_key_value does: keys end at '=', ':' or '('; values end at
// a delimiter outside parentheses.
func splitKV(s string) ([]kv, error) {
	var out []kv
	i := 0
	for {
		for i < len(s) && isDelim(s[i]) {
			i++
		}
		if i >= len(s) {
			return out, nil
		}
		k := i
		for i < len(s) && !isDelim(s[i]) && s[i] != '=' && s[i] != ':' && s[i] != '(' {
			i++
		}
		e := kv{key: s[k:i]}
		if i < len(s) && s[i] == '(' {
			depth := 1
			v := i + 1
			for i++; i < len(s) && depth > 0; i++ {
				switch s[i] {
				case '(':
					depth++
				case ')':
					depth--
				}
			}
			if depth != 0 {
				return nil, fmt.Errorf("unbalanced parentheses after %q", e.key)
			}
			e.value, e.paren, e.hasValue = s[v:i-1], true, true
		} else if i < len(s) && (s[i] == '=' || s[i] == ':') {
			i++
			v := i
			depth := 0
			for i < len(s) && (depth > 0 || !isDelim(s[i])) {
				switch s[i] {
				case '(':
					depth++
				case ')':
					depth--
					if depth < 0 {
						return nil, fmt.Errorf("unbalanced ) in %q", s[v:])
					}
				}
				i++
			}
			if depth != 0 {
				return nil, fmt.Errorf("unbalanced parentheses in %q", s[v:])
			}
			e.value, e.hasValue = s[v:i], true
		}
		if e.key == "" {
			return nil, fmt.Errorf("empty key at %q", s[k:])
		}
		out = append(out, e)
	}
}

// protocolShortcuts are the keywords that stand for an eth_type and an IP
// protocol (0: none), as in ovs-fields(7).
var protocolShortcuts = map[string][2]uint64{
	"ip": {0x0800, 0}, "ipv4": {0x0800, 0}, "icmp": {0x0800, 1}, "tcp": {0x0800, 6},
	"udp": {0x0800, 17}, "sctp": {0x0800, 132}, "ipv6": {0x86dd, 0}, "ip6": {0x86dd, 0}, "icmp6": {0x86dd, 58},
	"tcp6": {0x86dd, 6}, "udp6": {0x86dd, 17}, "sctp6": {0x86dd, 132}, "arp": {0x0806, 0},
	"rarp": {0x8035, 0}, "mpls": {0x8847, 0}, "mplsm": {0x8848, 0},
}

// commandKeys says which flow keys (beyond cookie, table and the match)
// each command takes, as in ovs-ofctl: a delete selects by out_port and
// out_group and takes no actions, a strict command selects by priority.
var commandKeys = [...]flowKeys{
	FlowAdd:          keyActions | keyTimeouts | keyPriority | keyFlags | keyImportance,
	FlowModify:       keyActions | keyTimeouts | keyPriority | keyFlags,
	FlowModifyStrict: keyActions | keyTimeouts | keyPriority | keyFlags,
	FlowDelete:       keyOutPort,
	FlowDeleteStrict: keyOutPort | keyPriority,
}

type flowKeys uint8

const (
	keyActions    flowKeys = 1 << iota // actions=
	keyTimeouts                        // idle_timeout, hard_timeout
	keyPriority                        // priority
	keyFlags                           // send_flow_rem, check_overlap, ...
	keyImportance                      // importance
	keyOutPort                         // out_port, out_group
)

var flowFlagKeys = map[string]FlowModFlags{
	"send_flow_rem": FlowSendFlowRem, "check_overlap": FlowCheckOverlap, "reset_counts": FlowResetCounts,
	"no_packet_counts": FlowNoPktCounts, "no_byte_counts": FlowNoBytCounts,
}

// ParseFlow parses a flow in ovs-ofctl syntax: a line of `ovs-ofctl
// dump-flows` output (statistics are ignored), an add-flow argument, or a
// line of an add-flows/bundle file with an optional leading command
// (add, modify, modify_strict, delete, delete_strict).
//
// It reads what ovs-ofctl -O OpenFlow15 reads and encodes it to the same
// bytes; what it cannot encode the way ovs-ofctl does it refuses with an
// *UnsupportedError naming the part (see the package documentation for
// both lists). As in ovs-ofctl, a flow without priority gets
// DefaultPriority, and a delete without table applies to every table.
func ParseFlow(s string) (*FlowMod, error) {
	fm, err := parseFlow(s)
	if err != nil {
		return nil, &ParseError{Text: s, Err: err}
	}
	return fm, nil
}

func parseFlow(s string) (*FlowMod, error) {
	fm := &FlowMod{Priority: DefaultPriority}
	rest := strings.TrimLeft(s, " \t")
	word := rest
	if i := strings.IndexAny(rest, ", \t"); i >= 0 {
		word = rest[:i]
	}
	for c, name := range flowModCommandNames {
		if word == name {
			fm.Command = FlowModCommand(c)
			rest = rest[len(word):]
			break
		}
	}
	if fm.Command == FlowDelete || fm.Command == FlowDeleteStrict {
		fm.Table = TableAll
	}
	allowed := commandKeys[fm.Command]
	matchText, actText, hasActions := cutActions(rest)
	switch {
	case !hasActions && allowed&keyActions != 0:
		return nil, fmt.Errorf("must specify actions")
	case hasActions && allowed&keyActions == 0:
		return nil, fmt.Errorf("%v takes no actions", fm.Command)
	}
	elems, err := splitKV(matchText)
	if err != nil {
		return nil, err
	}
	mp := newMatchParser(&fm.Match)
	need := func(k flowKeys, key string) error {
		if allowed&k == 0 {
			return fmt.Errorf("%v takes no %s", fm.Command, key)
		}
		return nil
	}
	for _, e := range elems {
		switch e.key {
		case "duration", "n_packets", "n_bytes", "idle_age", "hard_age", "no_readonly_table", "allow_hidden_fields":
			// Statistics of dump-flows lines, and flags ovs-ofctl reads
			// but does not send.
			continue
		}
		if flag, ok := flowFlagKeys[e.key]; ok && !e.hasValue {
			if err := need(keyFlags, e.key); err != nil {
				return nil, err
			}
			fm.Flags |= flag
			continue
		}
		var err error
		switch e.key {
		case "table":
			fm.Table, err = parseTable(e.value)
		case "priority":
			if err = need(keyPriority, e.key); err == nil {
				fm.Priority, err = parseC16(e.value)
			}
		case "idle_timeout", "hard_timeout":
			if err = need(keyTimeouts, e.key); err == nil {
				t := &fm.IdleTimeout
				if e.key == "hard_timeout" {
					t = &fm.HardTimeout
				}
				*t, err = parseC16(e.value)
			}
		case "importance":
			if err = need(keyImportance, e.key); err == nil {
				fm.Importance, err = parseC16(e.value)
			}
		case "cookie":
			err = parseCookie(fm, e.value)
		case "out_port":
			if err = need(keyOutPort, e.key); err == nil {
				fm.OutPort, err = ParsePort(e.value)
				fm.OutPort = sentinelAsZero(fm.OutPort, PortAny)
			}
		case "out_group":
			if err = need(keyOutPort, e.key); err == nil {
				fm.OutGroup, err = parseGroupFilter(e.value)
			}
		default:
			err = mp.key(e)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
	}
	if err := mp.finish(); err != nil {
		return nil, err
	}
	if hasActions {
		if fm.Instructions, err = parseInstructionsText(actText, &fm.Match); err != nil {
			return nil, err
		}
	}
	return fm, nil
}

// parseCookie reads cookie=V[/M]. An add sets the cookie; the other
// commands select flows by it, which takes a mask (the value is sent
// masked, as ovs-ofctl does). Without a mask ovs-ofctl refuses a delete,
// and for a modify it leaves the cookie out (OpenFlow 1.5 cannot change
// one), so both are refused.
func parseCookie(fm *FlowMod, s string) error {
	v, m, hasMask := strings.Cut(s, "/")
	var err error
	if fm.Cookie, err = parseUint64(v); err != nil {
		return err
	}
	switch {
	case hasMask && fm.Command == FlowAdd:
		return fmt.Errorf("flow additions cannot use a cookie mask")
	case hasMask:
		fm.CookieMask, err = parseUint64(m)
		fm.Cookie &= fm.CookieMask
		return err
	case fm.Command != FlowAdd:
		return &UnsupportedError{Part: "a cookie without a mask in " + fm.Command.String(), Why: "only an add sets a cookie; to select flows by cookie give a mask, e.g. cookie=0x5/-1"}
	}
	return nil
}

// parseGroupFilter reads out_group: a group number in base 10, or ANY or
// ALL.
func parseGroupFilter(s string) (uint32, error) {
	switch s {
	case "ANY", "any":
		return 0, nil
	case "ALL", "all":
		return GroupAll, nil
	}
	g, err := parseDecimal(s, 32)
	return sentinelAsZero(uint32(g), GroupAny), err
}

// cutActions splits flow text at "actions=" (or "action="): everything
// after it is the instruction list.
func cutActions(s string) (match, actions string, ok bool) {
	for i := 0; i+7 <= len(s); i++ {
		if i > 0 && !isDelim(s[i-1]) {
			continue
		}
		rest := s[i:]
		for _, kw := range []string{"actions=", "action=", "actions:", "action:"} {
			if strings.HasPrefix(rest, kw) {
				return s[:i], rest[len(kw):], true
			}
		}
	}
	return s, "", false
}

// parseUint64 parses a 64-bit number in C's base 0; "-1" is all ones, as
// in ovs-ofctl's cookie=0x5/-1.
func parseUint64(s string) (uint64, error) {
	if s == "-1" {
		return ^uint64(0), nil
	}
	return parseCUint(s, 64)
}

// parseC16 parses a 16-bit number in C's base 0 (priorities, timeouts).
func parseC16(s string) (uint16, error) {
	x, err := parseCUint(s, 16)
	return uint16(x), err
}

// parseTable parses a table number, which ovs-ofctl reads in base 10.
func parseTable(s string) (uint8, error) {
	x, err := parseDecimal(s, 8)
	return uint8(x), err
}

// parseAtoi16 parses what ovs-ofctl reads with C's atoi (learn's timeouts
// and priority, dec_ttl's controller ids): decimal digits only here, since
// atoi would read "0x10" as 0 and "5x" as 5, and no more than 16 bits,
// where ovs-ofctl would truncate.
func parseAtoi16(s string) (uint16, error) {
	x, err := parseDecimal(s, 16)
	return uint16(x), err
}

// ParseMatchText parses the match part of ovs-ofctl flow syntax, e.g.
// "ip,nw_src=10.0.0.0/8,reg0=0x5": match fields and protocol keywords
// only, as ParseFlow reads them.
func ParseMatchText(s string) (Match, error) {
	var m Match
	err := func() error {
		elems, err := splitKV(s)
		if err != nil {
			return err
		}
		mp := newMatchParser(&m)
		for _, e := range elems {
			if err := mp.key(e); err != nil {
				return fmt.Errorf("%s: %w", e.key, err)
			}
		}
		return mp.finish()
	}()
	if err != nil {
		return Match{}, &ParseError{Text: s, Err: err}
	}
	return m, nil
}

// matchParser builds a Match from ovs-ofctl's match keys the way
// ovs-ofctl builds and encodes its own: 802.1Q keys edit one TCI, L4 and
// ICMP keys are resolved against the flow's protocol, and fields that
// ovs-ofctl would leave out of the FLOW_MOD (no prerequisites) are
// refused.
type matchParser struct {
	m *Match
	// The 802.1Q keys (dl_vlan, dl_vlan_pcp, vlan_pcp, vlan_vid,
	// vlan_tci) edit one TCI value and mask, as in Open vSwitch.
	tci, tciMask uint16
	tciSet       bool
	l4           []kv // tp_src and friends, resolved once the protocol is known
	// keyOf is the key that set each field, for error messages.
	keyOf map[Field]string
	// ethernet: a field with prerequisites was given (zero mask or not),
	// which makes ovs-ofctl match on Ethernet packets (packet_type (0,0)).
	ethernet bool
	// packetType: packet_type was given.
	packetType bool
}

func newMatchParser(m *Match) *matchParser {
	return &matchParser{m: m, keyOf: map[Field]string{}}
}

// key parses one key or key=value of a match.
func (p *matchParser) key(e kv) error {
	if pt, ok := protocolShortcuts[e.key]; ok && !e.hasValue {
		p.m.SetUint(FieldEthType, pt[0])
		p.keyOf[FieldEthType] = e.key
		if pt[1] != 0 {
			p.m.SetUint(FieldIPProto, pt[1])
			p.keyOf[FieldIPProto] = e.key
		}
		return nil
	}
	if !e.hasValue {
		return fmt.Errorf("missing value")
	}
	switch e.key {
	case "dl_vlan", "dl_vlan_pcp", "vlan_pcp", "vlan_vid", "vlan_tci":
		p.ethernet = true
		return p.vlanKey(e.key, e.value)
	case "nw_tos":
		// The DSCP bits of the TOS byte, sent as ip_dscp.
		v, err := parseCUint(e.value, 8)
		if err != nil || v&3 != 0 {
			return fmt.Errorf("bad nw_tos %q (the low 2 bits must be 0)", e.value)
		}
		p.set(FieldIPDSCP, e.key, uintBytes(v>>2, 1), nil)
		return nil
	case "tp_src", "tp_dst", "tcp_src", "tcp_dst", "udp_src", "udp_dst", "sctp_src", "sctp_dst",
		"icmp_type", "icmp_code", "icmpv4_type", "icmpv4_code", "icmpv6_type", "icmpv6_code":
		p.ethernet = true
		p.l4 = append(p.l4, e)
		return nil
	case "oxm":
		raw, err := hex.DecodeString(e.value)
		if err != nil {
			return err
		}
		return p.m.AddRaw(raw)
	}
	if strings.Contains(e.key, "[") {
		sf, err := ParseSubfield(e.key)
		if err != nil {
			return err
		}
		return p.subfield(sf, e.key, e.value)
	}
	f, err := matchField(e.key)
	if err != nil {
		return err
	}
	v, mask, err := parseValue(f, e.value)
	if err != nil {
		return err
	}
	if f == FieldIPv6Label && mask != nil && bytesUint(mask) == ipv6LabelBits {
		// Open vSwitch takes a mask of the label's 20 bits as exact.
		v, mask = uintBytes(bytesUint(v)&ipv6LabelBits, 4), nil
	}
	return p.setChecked(f, e.key, v, mask)
}

// ipv6LabelBits are the bits of an IPv6 flow label.
const ipv6LabelBits = 0xfffff

// matchField looks up a match key: a field's name or alias. NXM names
// (NXM_OF_IP_SRC) are subfield syntax only, as in ovs-ofctl.
func matchField(key string) (Field, error) {
	f, err := ParseField(key)
	if err != nil || fields[f].name != key && fields[f].alias != key {
		return FieldNone, &UnsupportedError{Part: fmt.Sprintf("match field %q", key)}
	}
	if f == FieldInPort16 {
		f = FieldInPort
	}
	return f, nil
}

// setChecked sets f from a parsed value and mask (nil: exact), refusing a
// mask on a field the switch cannot mask.
func (p *matchParser) setChecked(f Field, key string, v, mask []byte) error {
	if mask != nil && !isOnes(mask) && !fields[f].maskable {
		return &UnsupportedError{Part: key, Why: "cannot be masked"}
	}
	p.set(f, key, v, mask)
	return nil
}

func (p *matchParser) set(f Field, key string, v, mask []byte) {
	if mask == nil {
		p.m.Set(f, v)
	} else {
		p.m.SetMasked(f, v, mask)
	}
	p.keyOf[f] = key
	if f == FieldPacketType {
		p.packetType = true
	}
	if fields[f].prereq != preNone {
		p.ethernet = true
	}
}

// subfield matches bits of a field against an integer, as
// "reg0[0..15]=5" does.
func (p *matchParser) subfield(sf Subfield, key, value string) error {
	val, mask, err := subfieldValue(sf, value)
	if err != nil {
		return err
	}
	if sf.Field == FieldVLANTCI {
		p.ethernet = true
		t, m := uint16(bytesUint(val)), uint16(bytesUint(mask))
		p.setTCI(p.tci&^m|t, p.tciMask|m)
		return nil
	}
	f := sf.Field
	if f == FieldInPort16 {
		if !isOnes(mask) {
			return &UnsupportedError{Part: key, Why: "cannot be masked"}
		}
		p.set(FieldInPort, key, uintBytes(uint64(port16To32(uint16(bytesUint(val)))), 4), nil)
		return nil
	}
	oldV, oldM, ok := p.m.Get(f)
	if ok {
		for i := range val {
			val[i] |= oldV[i] &^ mask[i]
			mask[i] |= oldM[i]
		}
	}
	return p.setChecked(f, key, val, mask)
}

// vlanKey applies one 802.1Q key to the TCI as Open vSwitch does:
// dl_vlan sets the VLAN ID (and the VLAN-present bit), dl_vlan_pcp and
// vlan_pcp the priority (and the present bit), vlan_vid the ID and
// present bit as OpenFlow writes them, vlan_tci all 16 bits.
func (p *matchParser) vlanKey(key, value string) error {
	const vidMask, cfi, pcpMask = 0x0fff, 0x1000, 0xe000
	switch key {
	case "dl_vlan":
		v, err := parseCUint(value, 16)
		if err != nil || v > vidMask {
			return fmt.Errorf("bad VLAN %q", value)
		}
		p.setTCI(p.tci&^(vidMask|cfi)|uint16(v)|cfi, p.tciMask|vidMask|cfi)
	case "dl_vlan_pcp", "vlan_pcp":
		v, err := parseCUint(value, 8)
		if err != nil || v > 7 {
			return fmt.Errorf("bad VLAN PCP %q", value)
		}
		p.setTCI(p.tci&^(pcpMask|cfi)|uint16(v)<<13|cfi, p.tciMask|pcpMask|cfi)
	case "vlan_vid":
		v, m, err := parseValue(FieldVLANVID, value)
		if err != nil {
			return err
		}
		vm := uint16(0x1fff)
		if m != nil {
			vm = uint16(bytesUint(m)) & 0x1fff
		}
		p.setTCI(p.tci&^0x1fff|uint16(bytesUint(v))&vm, p.tciMask&pcpMask|vm)
	case "vlan_tci":
		vs, ms, hasMask := strings.Cut(value, "/")
		v, err := parseCUint(vs, 16)
		if err != nil {
			return fmt.Errorf("bad TCI %q", value)
		}
		m := uint64(0xffff)
		if hasMask {
			if m, err = parseCUint(ms, 16); err != nil {
				return fmt.Errorf("bad TCI mask %q", value)
			}
		}
		p.setTCI(uint16(v), uint16(m))
	}
	return nil
}

func (p *matchParser) setTCI(tci, mask uint16) {
	p.tci, p.tciMask, p.tciSet = tci&mask, mask, true
}

// finish resolves what needs the whole match: the L4 keys, the TCI, the
// prerequisites and the packet type.
func (p *matchParser) finish() error {
	for _, e := range p.l4 {
		if err := p.l4Key(e); err != nil {
			return fmt.Errorf("%s: %w", e.key, err)
		}
	}
	if err := p.finishVLAN(); err != nil {
		return err
	}
	for _, f := range p.m.Fields() {
		if err := p.checkPrereq(f); err != nil {
			return err
		}
	}
	return p.finishPacketType()
}

// l4Key resolves tp_src and friends against the match's protocol, as
// Open vSwitch does (it keeps all of them in one place): tp_src is the
// port of whichever of TCP, UDP and SCTP the flow matches, icmp_type the
// type of ICMPv4 or ICMPv6.
func (p *matchParser) l4Key(e kv) error {
	ethType, _, _ := p.m.Uint(FieldEthType)
	var f Field
	switch e.key {
	case "icmp_type", "icmp_code":
		f = map[bool]Field{true: FieldICMPv4Type, false: FieldICMPv4Code}[e.key == "icmp_type"]
		if ethType == 0x86dd {
			f = map[bool]Field{true: FieldICMPv6Type, false: FieldICMPv6Code}[e.key == "icmp_type"]
		}
	case "tp_src", "tp_dst":
		var ok bool
		if f, ok = l4PortField(p.m, e.key == "tp_src"); !ok {
			return &UnsupportedError{Part: e.key, Why: "needs tcp, udp or sctp in the match (ovs-ofctl would leave it out)"}
		}
	default:
		f, _ = ParseField(e.key)
	}
	v, mask, err := parseValue(f, e.value)
	if err != nil {
		return err
	}
	return p.setChecked(f, e.key, v, mask)
}

// l4PortField is the source or destination port field of the match's
// protocol, TCP, UDP or SCTP; ok is false for any other protocol.
func l4PortField(m *Match, src bool) (f Field, ok bool) {
	proto, _, _ := m.Uint(FieldIPProto)
	ports := map[uint64][2]Field{6: {FieldTCPSrc, FieldTCPDst}, 17: {FieldUDPSrc, FieldUDPDst}, 132: {FieldSCTPSrc, FieldSCTPDst}}[proto]
	if ports[0] == FieldNone {
		return FieldNone, false
	}
	if src {
		return ports[0], true
	}
	return ports[1], true
}

// subfieldValue turns an integer written for a subfield (reg0[8..15]=5,
// load:5->reg0[8..15]) into the field's value and mask.
func subfieldValue(sf Subfield, text string) (value, mask []byte, err error) {
	w := sf.Field.Width()
	v, err := parseUintBytes(text, w)
	if err != nil {
		return nil, nil, err
	}
	n := sf.nbits()
	value, mask = make([]byte, w), make([]byte, w)
	for i := 0; i < 8*w; i++ {
		if i >= n {
			if getBit(v, i) {
				return nil, nil, fmt.Errorf("value %s does not fit into %d bits", text, n)
			}
			continue
		}
		setBit(mask, int(sf.Offset)+i, true)
		setBit(value, int(sf.Offset)+i, getBit(v, i))
	}
	return value, mask, nil
}

// finishVLAN turns the TCI into the OpenFlow 1.5 fields Open vSwitch
// sends for it: vlan_vid for the ID and present bit, and vlan_pcp, exact,
// when the priority is matched and the TCI's ID and present bits are not
// all zero. A priority ovs-ofctl would drop or make exact is refused.
func (p *matchParser) finishVLAN() error {
	if !p.tciSet {
		return nil
	}
	key := p.keyOf[FieldVLANVID]
	if key == "" {
		key = "vlan_tci"
	}
	p.m.Delete(FieldVLANVID).Delete(FieldVLANPCP).Delete(FieldVLANTCI)
	vid, vidMask := p.tci&0x1fff, p.tciMask&0x1fff
	switch {
	case vidMask == 0x1fff:
		p.m.SetUint(FieldVLANVID, uint64(vid))
	case vidMask != 0:
		p.m.SetUintMasked(FieldVLANVID, uint64(vid), uint64(vidMask))
	}
	switch pcpMask := p.tciMask >> 13; {
	case pcpMask == 0:
	case pcpMask != 7:
		return &UnsupportedError{Part: "vlan_tci", Why: "the priority bits are partly masked (OpenFlow cannot mask vlan_pcp; ovs-ofctl would match them exactly)"}
	case vid == 0:
		return &UnsupportedError{Part: "vlan_tci", Why: "a priority without a VLAN (ovs-ofctl would leave it out)"}
	default:
		p.m.SetUint(FieldVLANPCP, uint64(p.tci>>13))
	}
	return nil
}

// checkPrereq refuses a field whose prerequisites the match lacks: Open
// vSwitch leaves such fields out of what it sends (or sends them as the
// field that shares their storage, as arp_spa for nw_src).
func (p *matchParser) checkPrereq(f Field) error {
	ethType, _, hasEth := p.m.Uint(FieldEthType)
	proto, _, hasProto := p.m.Uint(FieldIPProto)
	isIP := hasEth && (ethType == 0x0800 || ethType == 0x86dd)
	icmpType, _, hasType := p.m.Uint(FieldICMPv6Type)
	icmpCode, _, _ := p.m.Uint(FieldICMPv6Code) // 0 when not matched, as Open vSwitch sees it
	isND := hasEth && ethType == 0x86dd && hasProto && proto == 58 && hasType && (icmpType == 135 || icmpType == 136) && icmpCode == 0
	var ok bool
	var needs string
	switch fields[f].prereq {
	case preNone, preVLAN: // the priority is checked with the TCI
		ok = true
	case preEthernet:
		pt, _, hasPT := p.m.Uint(FieldPacketType)
		ok, needs = !hasPT || pt == 0, "an Ethernet packet_type"
	case preMPLS:
		ok, needs = hasEth && (ethType == 0x8847 || ethType == 0x8848), "mpls or mplsm"
	case preIPv4:
		ok, needs = hasEth && ethType == 0x0800, "ip"
	case preIPv6:
		ok, needs = hasEth && ethType == 0x86dd, "ipv6"
	case preIP:
		ok, needs = isIP, "ip or ipv6"
	case preTCP:
		ok, needs = isIP && hasProto && proto == 6, "tcp or tcp6"
	case preUDP:
		ok, needs = isIP && hasProto && proto == 17, "udp or udp6"
	case preSCTP:
		ok, needs = isIP && hasProto && proto == 132, "sctp or sctp6"
	case preICMPv4:
		ok, needs = hasEth && ethType == 0x0800 && hasProto && proto == 1, "icmp"
	case preICMPv6:
		ok, needs = hasEth && ethType == 0x86dd && hasProto && proto == 58, "icmp6"
	case preND:
		ok, needs = isND, "icmp6 with icmp_type 135 or 136 and icmp_code 0"
	case preNDSolicit:
		ok, needs = isND && icmpType == 135, "icmp6 with icmp_type 135 and icmp_code 0"
	case preNDAdvert:
		ok, needs = isND && icmpType == 136, "icmp6 with icmp_type 136 and icmp_code 0"
	case preARP:
		ok, needs = hasEth && (ethType == 0x0806 || ethType == 0x8035), "arp or rarp"
		if ok && f == FieldARPOp {
			// Open vSwitch keeps the ARP opcode in 8 bits.
			op, _, _ := p.m.Uint(f)
			ok, needs = op <= 0xff, "a value below 256"
		}
	case preCT:
		// Open vSwitch sends the connection's protocol only when it is
		// not 0, and its ports only with it. (The addresses it sends as
		// given; the switch checks ct_state.)
		ctProto, _, hasCTProto := p.m.Uint(FieldCTNwProto)
		ok = true
		if f == FieldCTNwProto || f == FieldCTTpSrc || f == FieldCTTpDst {
			ok, needs = hasCTProto && ctProto != 0, "a ct_nw_proto other than 0"
		}
	}
	if ok {
		return nil
	}
	key := p.keyOf[f]
	if key == "" {
		key = f.String()
	}
	return &UnsupportedError{Part: key, Why: "needs " + needs + " in the match (ovs-ofctl would leave it out)"}
}

// finishPacketType does what ovs-ofctl does with the packet type: a
// match with a field that has prerequisites is on Ethernet packets, and
// Ethernet, the default, is sent as packet_type (0,0) only when no field
// it sends implies it.
func (p *matchParser) finishPacketType() error {
	pt, ptMask, hasPT := p.m.Uint(FieldPacketType)
	isDefault := hasPT && pt == 0 && ptMask == 0xffffffff
	if hasPT && !isDefault {
		return nil // a non-Ethernet packet: checkPrereq refused Ethernet fields
	}
	if !p.ethernet && !isDefault {
		return nil
	}
	p.m.Delete(FieldPacketType)
	for _, f := range p.m.Fields() {
		if fields[f].prereq != preNone {
			return nil // implied
		}
	}
	p.m.SetUint(FieldPacketType, 0)
	return nil
}
