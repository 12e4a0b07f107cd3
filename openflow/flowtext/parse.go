package flowtext

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/ofnum"
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

// commandKeys says which flow keys (beyond cookie, table and the match)
// each command takes, as in ovs-ofctl: a delete selects by out_port and
// out_group and takes no actions, a strict command selects by priority.
var commandKeys = [...]flowKeys{
	openflow.FlowAdd:          keyActions | keyTimeouts | keyPriority | keyFlags | keyImportance,
	openflow.FlowModify:       keyActions | keyTimeouts | keyPriority | keyFlags,
	openflow.FlowModifyStrict: keyActions | keyTimeouts | keyPriority | keyFlags,
	openflow.FlowDelete:       keyOutPort,
	openflow.FlowDeleteStrict: keyOutPort | keyPriority,
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

var flowFlagKeys = map[string]openflow.FlowModFlags{
	"send_flow_rem": openflow.FlowSendFlowRem, "check_overlap": openflow.FlowCheckOverlap, "reset_counts": openflow.FlowResetCounts,
	"no_packet_counts": openflow.FlowNoPktCounts, "no_byte_counts": openflow.FlowNoBytCounts,
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
func ParseFlow(s string) (*openflow.FlowMod, error) {
	fm, err := parseFlow(s)
	if err != nil {
		return nil, &ParseError{Text: s, Err: err}
	}
	return fm, nil
}

func parseFlow(s string) (*openflow.FlowMod, error) {
	fm := &openflow.FlowMod{Priority: openflow.DefaultPriority}
	rest := strings.TrimLeft(s, " \t")
	word := rest
	if i := strings.IndexAny(rest, ", \t"); i >= 0 {
		word = rest[:i]
	}
	for c := openflow.FlowAdd; c <= openflow.FlowDeleteStrict; c++ {
		if word == c.String() {
			fm.Command = c
			rest = rest[len(word):]
			break
		}
	}
	if fm.Command == openflow.FlowDelete || fm.Command == openflow.FlowDeleteStrict {
		fm.Table = openflow.TableAll
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
				fm.OutPort, err = openflow.ParsePort(e.value)
				fm.OutPort = ofnum.SentinelAsZero(fm.OutPort, openflow.PortAny)
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
func parseCookie(fm *openflow.FlowMod, s string) error {
	v, m, hasMask := strings.Cut(s, "/")
	var err error
	if fm.Cookie, err = parseUint64(v); err != nil {
		return err
	}
	switch {
	case hasMask && fm.Command == openflow.FlowAdd:
		return fmt.Errorf("flow additions cannot use a cookie mask")
	case hasMask:
		fm.CookieMask, err = parseUint64(m)
		fm.Cookie &= fm.CookieMask
		return err
	case fm.Command != openflow.FlowAdd:
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
		return openflow.GroupAll, nil
	}
	g, err := ofnum.ParseDecimal(s, 32)
	return ofnum.SentinelAsZero(uint32(g), openflow.GroupAny), err
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
	return ofnum.ParseCUint(s, 64)
}

// parseC16 parses a 16-bit number in C's base 0 (priorities, timeouts).
func parseC16(s string) (uint16, error) {
	x, err := ofnum.ParseCUint(s, 16)
	return uint16(x), err
}

// parseTable parses a table number, which ovs-ofctl reads in base 10.
func parseTable(s string) (uint8, error) {
	x, err := ofnum.ParseDecimal(s, 8)
	return uint8(x), err
}

// parseAtoi16 parses what ovs-ofctl reads with C's atoi (learn's timeouts
// and priority, dec_ttl's controller ids): decimal digits only here, since
// atoi would read "0x10" as 0 and "5x" as 5, and no more than 16 bits,
// where ovs-ofctl would truncate.
func parseAtoi16(s string) (uint16, error) {
	x, err := ofnum.ParseDecimal(s, 16)
	return uint16(x), err
}

// ParseMatchText parses the match part of ovs-ofctl flow syntax, e.g.
// "ip,nw_src=10.0.0.0/8,reg0=0x5": match fields and protocol keywords
// only, as ParseFlow reads them.
func ParseMatchText(s string) (openflow.Match, error) {
	var m openflow.Match
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
		return openflow.Match{}, &ParseError{Text: s, Err: err}
	}
	return m, nil
}

// matchParser builds a Match from ovs-ofctl's match keys the way
// ovs-ofctl builds and encodes its own: 802.1Q keys edit one TCI, L4 and
// ICMP keys are resolved against the flow's protocol, and fields that
// ovs-ofctl would leave out of the FLOW_MOD (no prerequisites) are
// refused.
type matchParser struct {
	m *openflow.Match
	// The 802.1Q keys (dl_vlan, dl_vlan_pcp, vlan_pcp, vlan_vid,
	// vlan_tci) edit one TCI value and mask, as in Open vSwitch.
	tci, tciMask uint16
	tciSet       bool
	l4           []kv // tp_src and friends, resolved once the protocol is known
	// keyOf is the key that set each field, for error messages.
	keyOf map[openflow.Field]string
	// ethernet: a field with prerequisites was given (zero mask or not),
	// which makes ovs-ofctl match on Ethernet packets (packet_type (0,0)).
	ethernet bool
	// packetType: packet_type was given.
	packetType bool
}

func newMatchParser(m *openflow.Match) *matchParser {
	return &matchParser{m: m, keyOf: map[openflow.Field]string{}}
}

// key parses one key or key=value of a match.
func (p *matchParser) key(e kv) error {
	if ethType, ipProto, ok := openflow.ProtocolShortcut(e.key); ok && !e.hasValue {
		p.m.SetUint(openflow.FieldEthType, ethType)
		p.keyOf[openflow.FieldEthType] = e.key
		if ipProto != 0 {
			p.m.SetUint(openflow.FieldIPProto, ipProto)
			p.keyOf[openflow.FieldIPProto] = e.key
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
		v, err := ofnum.ParseCUint(e.value, 8)
		if err != nil || v&3 != 0 {
			return fmt.Errorf("bad nw_tos %q (the low 2 bits must be 0)", e.value)
		}
		p.set(openflow.FieldIPDSCP, e.key, ofnum.UintBytes(v>>2, 1), nil)
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
		sf, err := openflow.ParseSubfield(e.key)
		if err != nil {
			return err
		}
		return p.subfield(sf, e.key, e.value)
	}
	f, err := matchField(e.key)
	if err != nil {
		return err
	}
	v, mask, err := f.ParseValue(e.value)
	if err != nil {
		return err
	}
	if f == openflow.FieldIPv6Label && mask != nil && ofnum.BytesUint(mask) == ipv6LabelBits {
		// Open vSwitch takes a mask of the label's 20 bits as exact.
		v, mask = ofnum.UintBytes(ofnum.BytesUint(v)&ipv6LabelBits, 4), nil
	}
	return p.setChecked(f, e.key, v, mask)
}

// ipv6LabelBits are the bits of an IPv6 flow label.
const ipv6LabelBits = 0xfffff

// matchField looks up a match key: a field's name or alias. NXM names
// (NXM_OF_IP_SRC) are subfield syntax only, as in ovs-ofctl.
func matchField(key string) (openflow.Field, error) {
	f, err := openflow.ParseField(key)
	if err != nil || !f.HasName(key) {
		return openflow.FieldNone, &UnsupportedError{Part: fmt.Sprintf("match field %q", key)}
	}
	if f == openflow.FieldInPort16 {
		f = openflow.FieldInPort
	}
	return f, nil
}

// setChecked sets f from a parsed value and mask (nil: exact), refusing a
// mask on a field the switch cannot mask.
func (p *matchParser) setChecked(f openflow.Field, key string, v, mask []byte) error {
	if mask != nil && !ofnum.IsOnes(mask) && !f.Maskable() {
		return &UnsupportedError{Part: key, Why: "cannot be masked"}
	}
	p.set(f, key, v, mask)
	return nil
}

func (p *matchParser) set(f openflow.Field, key string, v, mask []byte) {
	if mask == nil {
		p.m.Set(f, v)
	} else {
		p.m.SetMasked(f, v, mask)
	}
	p.keyOf[f] = key
	if f == openflow.FieldPacketType {
		p.packetType = true
	}
	if f.HasPrerequisites() {
		p.ethernet = true
	}
}

// subfield matches bits of a field against an integer, as
// "reg0[0..15]=5" does.
func (p *matchParser) subfield(sf openflow.Subfield, key, value string) error {
	val, mask, err := subfieldValue(sf, value)
	if err != nil {
		return err
	}
	if sf.Field == openflow.FieldVLANTCI {
		p.ethernet = true
		t, m := uint16(ofnum.BytesUint(val)), uint16(ofnum.BytesUint(mask))
		p.setTCI(p.tci&^m|t, p.tciMask|m)
		return nil
	}
	f := sf.Field
	if f == openflow.FieldInPort16 {
		if !ofnum.IsOnes(mask) {
			return &UnsupportedError{Part: key, Why: "cannot be masked"}
		}
		p.set(openflow.FieldInPort, key, ofnum.UintBytes(uint64(openflow.Port16To32(uint16(ofnum.BytesUint(val)))), 4), nil)
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
		v, err := ofnum.ParseCUint(value, 16)
		if err != nil || v > vidMask {
			return fmt.Errorf("bad VLAN %q", value)
		}
		p.setTCI(p.tci&^(vidMask|cfi)|uint16(v)|cfi, p.tciMask|vidMask|cfi)
	case "dl_vlan_pcp", "vlan_pcp":
		v, err := ofnum.ParseCUint(value, 8)
		if err != nil || v > 7 {
			return fmt.Errorf("bad VLAN PCP %q", value)
		}
		p.setTCI(p.tci&^(pcpMask|cfi)|uint16(v)<<13|cfi, p.tciMask|pcpMask|cfi)
	case "vlan_vid":
		v, m, err := openflow.FieldVLANVID.ParseValue(value)
		if err != nil {
			return err
		}
		vm := uint16(0x1fff)
		if m != nil {
			vm = uint16(ofnum.BytesUint(m)) & 0x1fff
		}
		p.setTCI(p.tci&^0x1fff|uint16(ofnum.BytesUint(v))&vm, p.tciMask&pcpMask|vm)
	case "vlan_tci":
		vs, ms, hasMask := strings.Cut(value, "/")
		v, err := ofnum.ParseCUint(vs, 16)
		if err != nil {
			return fmt.Errorf("bad TCI %q", value)
		}
		m := uint64(0xffff)
		if hasMask {
			if m, err = ofnum.ParseCUint(ms, 16); err != nil {
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
	ethType, _, _ := p.m.Uint(openflow.FieldEthType)
	var f openflow.Field
	switch e.key {
	case "icmp_type", "icmp_code":
		f = map[bool]openflow.Field{true: openflow.FieldICMPv4Type, false: openflow.FieldICMPv4Code}[e.key == "icmp_type"]
		if ethType == 0x86dd {
			f = map[bool]openflow.Field{true: openflow.FieldICMPv6Type, false: openflow.FieldICMPv6Code}[e.key == "icmp_type"]
		}
	case "tp_src", "tp_dst":
		var ok bool
		if f, ok = l4PortField(p.m, e.key == "tp_src"); !ok {
			return &UnsupportedError{Part: e.key, Why: "needs tcp, udp or sctp in the match (ovs-ofctl would leave it out)"}
		}
	default:
		f, _ = openflow.ParseField(e.key)
	}
	v, mask, err := f.ParseValue(e.value)
	if err != nil {
		return err
	}
	return p.setChecked(f, e.key, v, mask)
}

// l4PortField is the source or destination port field of the match's
// protocol, TCP, UDP or SCTP; ok is false for any other protocol.
func l4PortField(m *openflow.Match, src bool) (f openflow.Field, ok bool) {
	proto, _, _ := m.Uint(openflow.FieldIPProto)
	ports := map[uint64][2]openflow.Field{6: {openflow.FieldTCPSrc, openflow.FieldTCPDst}, 17: {openflow.FieldUDPSrc, openflow.FieldUDPDst}, 132: {openflow.FieldSCTPSrc, openflow.FieldSCTPDst}}[proto]
	if ports[0] == openflow.FieldNone {
		return openflow.FieldNone, false
	}
	if src {
		return ports[0], true
	}
	return ports[1], true
}

// subfieldValue turns an integer written for a subfield (reg0[8..15]=5,
// load:5->reg0[8..15]) into the field's value and mask.
func subfieldValue(sf openflow.Subfield, text string) (value, mask []byte, err error) {
	w := sf.Field.Width()
	v, err := ofnum.ParseUintBytes(text, w)
	if err != nil {
		return nil, nil, err
	}
	n := sf.NBits()
	value, mask = make([]byte, w), make([]byte, w)
	for i := 0; i < 8*w; i++ {
		if i >= n {
			if ofnum.GetBit(v, i) {
				return nil, nil, fmt.Errorf("value %s does not fit into %d bits", text, n)
			}
			continue
		}
		ofnum.SetBit(mask, int(sf.Offset)+i, true)
		ofnum.SetBit(value, int(sf.Offset)+i, ofnum.GetBit(v, i))
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
	key := p.keyOf[openflow.FieldVLANVID]
	if key == "" {
		key = "vlan_tci"
	}
	p.m.Delete(openflow.FieldVLANVID).Delete(openflow.FieldVLANPCP).Delete(openflow.FieldVLANTCI)
	vid, vidMask := p.tci&0x1fff, p.tciMask&0x1fff
	switch {
	case vidMask == 0x1fff:
		p.m.SetUint(openflow.FieldVLANVID, uint64(vid))
	case vidMask != 0:
		p.m.SetUintMasked(openflow.FieldVLANVID, uint64(vid), uint64(vidMask))
	}
	switch pcpMask := p.tciMask >> 13; {
	case pcpMask == 0:
	case pcpMask != 7:
		return &UnsupportedError{Part: "vlan_tci", Why: "the priority bits are partly masked (OpenFlow cannot mask vlan_pcp; ovs-ofctl would match them exactly)"}
	case vid == 0:
		return &UnsupportedError{Part: "vlan_tci", Why: "a priority without a VLAN (ovs-ofctl would leave it out)"}
	default:
		p.m.SetUint(openflow.FieldVLANPCP, uint64(p.tci>>13))
	}
	return nil
}

// checkPrereq refuses a field whose prerequisites the match lacks: Open
// vSwitch leaves such fields out of what it sends (or sends them as the
// field that shares their storage, as arp_spa for nw_src).
func (p *matchParser) checkPrereq(f openflow.Field) error {
	needs := p.m.MissingPrerequisite(f)
	if needs == "" {
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
	pt, ptMask, hasPT := p.m.Uint(openflow.FieldPacketType)
	isDefault := hasPT && pt == 0 && ptMask == 0xffffffff
	if hasPT && !isDefault {
		return nil // a non-Ethernet packet: checkPrereq refused Ethernet fields
	}
	if !p.ethernet && !isDefault {
		return nil
	}
	p.m.Delete(openflow.FieldPacketType)
	for _, f := range p.m.Fields() {
		if f.HasPrerequisites() {
			return nil // implied
		}
	}
	p.m.SetUint(openflow.FieldPacketType, 0)
	return nil
}
