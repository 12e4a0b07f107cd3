package openflow

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Parsing of ovs-ofctl's flow syntax, the inverse of the String methods.
// It covers the matches and actions this package models, including the
// ct/nat, set_field/load/move, output, resubmit, goto_table, learn,
// register and conntrack-field families.

// ParseError reports where flow text could not be parsed.
type ParseError struct {
	Text string // the whole input
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("openflow: parse %q: %v", e.Text, e.Err) }

func (e *ParseError) Unwrap() error { return e.Err }

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

var protocolShortcuts = map[string][2]uint64{ // name -> eth_type, ip_proto (0 = none)
	"ip": {0x0800, 0}, "ipv4": {0x0800, 0}, "icmp": {0x0800, 1}, "igmp": {0x0800, 2}, "tcp": {0x0800, 6},
	"udp": {0x0800, 17}, "sctp": {0x0800, 132}, "ipv6": {0x86dd, 0}, "ip6": {0x86dd, 0}, "icmp6": {0x86dd, 58},
	"tcp6": {0x86dd, 6}, "udp6": {0x86dd, 17}, "sctp6": {0x86dd, 132}, "arp": {0x0806, 0},
	"rarp": {0x8035, 0}, "mpls": {0x8847, 0}, "mplsm": {0x8848, 0},
}

// ParseFlow parses a flow in ovs-ofctl syntax: a line of `ovs-ofctl
// dump-flows` output (statistics are ignored), an add-flow argument, or a
// line of an add-flows/bundle file with an optional leading command
// (add, modify, modify_strict, delete, delete_strict).
//
// As in ovs-ofctl, a flow without priority gets DefaultPriority, and a
// delete without table applies to every table.
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
	matchText, actText, hasActions := cutActions(rest)
	if !hasActions && (fm.Command == FlowAdd || fm.Command == FlowModify || fm.Command == FlowModifyStrict) {
		return nil, fmt.Errorf("must specify actions")
	}
	elems, err := splitKV(matchText)
	if err != nil {
		return nil, err
	}
	var pending []kv // L4 and ICMP fields, resolved once the protocol is known
	for _, e := range elems {
		switch e.key {
		case "duration", "n_packets", "n_bytes", "idle_age", "hard_age", "no_readonly_table", "allow_hidden_fields":
			continue
		case "send_flow_rem":
			fm.Flags |= FlowSendFlowRem
			continue
		case "check_overlap":
			fm.Flags |= FlowCheckOverlap
			continue
		case "reset_counts":
			fm.Flags |= FlowResetCounts
			continue
		case "no_packet_counts":
			fm.Flags |= FlowNoPktCounts
			continue
		case "no_byte_counts":
			fm.Flags |= FlowNoBytCounts
			continue
		}
		if p, ok := protocolShortcuts[e.key]; ok && !e.hasValue {
			fm.Match.SetUint(FieldEthType, p[0])
			if p[1] != 0 {
				fm.Match.SetUint(FieldIPProto, p[1])
			}
			continue
		}
		if !e.hasValue {
			return nil, fmt.Errorf("field %s missing value", e.key)
		}
		var err error
		switch e.key {
		case "table":
			fm.Table, err = parseUint8(e.value)
		case "priority":
			fm.Priority, err = parseUint16(e.value)
		case "idle_timeout":
			fm.IdleTimeout, err = parseUint16(e.value)
		case "hard_timeout":
			fm.HardTimeout, err = parseUint16(e.value)
		case "importance":
			fm.Importance, err = parseUint16(e.value)
		case "cookie":
			v, m, hasMask := strings.Cut(e.value, "/")
			if fm.Cookie, err = parseUint64(v); err == nil && hasMask {
				if fm.Command == FlowAdd {
					return nil, fmt.Errorf("flow additions cannot use a cookie mask")
				}
				fm.CookieMask, err = parseUint64(m)
			}
		case "out_port":
			fm.OutPort, err = ParsePort(e.value)
			if fm.OutPort == PortAny {
				fm.OutPort = 0
			}
		case "out_group":
			var g uint64
			if g, err = strconv.ParseUint(e.value, 0, 32); err == nil {
				fm.OutGroup = sentinelAsZero(uint32(g), GroupAny)
			}
		case "tp_src", "tp_dst", "tcp_src", "tcp_dst", "udp_src", "udp_dst", "sctp_src", "sctp_dst",
			"icmp_type", "icmp_code", "icmpv4_type", "icmpv4_code", "icmpv6_type", "icmpv6_code":
			pending = append(pending, e)
		default:
			err = parseMatchField(&fm.Match, e.key, e.value)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
	}
	for _, e := range pending {
		if err := parseL4Field(&fm.Match, e.key, e.value); err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
	}
	if hasActions {
		if fm.Instructions, err = ParseInstructionsText(actText); err != nil {
			return nil, err
		}
	}
	return fm, nil
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

// parseUint64 parses a 64-bit number; "-1" is all ones, as in ovs-ofctl's
// cookie=0x5/-1.
func parseUint64(s string) (uint64, error) {
	if s == "-1" {
		return ^uint64(0), nil
	}
	return strconv.ParseUint(s, 0, 64)
}

func parseUint8(s string) (uint8, error) {
	x, err := strconv.ParseUint(s, 0, 8)
	return uint8(x), err
}

func parseUint16(s string) (uint16, error) {
	x, err := strconv.ParseUint(s, 0, 16)
	return uint16(x), err
}

// ParseMatchText parses the match part of ovs-ofctl flow syntax, e.g.
// "ip,nw_src=10.0.0.0/8,reg0=0x5".
func ParseMatchText(s string) (Match, error) {
	fm, err := parseFlow("delete_strict " + s)
	if err != nil {
		return Match{}, &ParseError{Text: s, Err: err}
	}
	return fm.Match, nil
}

// parseMatchField parses one field=value of a match.
func parseMatchField(m *Match, key, value string) error {
	switch key {
	case "dl_vlan":
		v, err := strconv.ParseUint(value, 0, 16)
		if err != nil || v > 0xfff {
			return fmt.Errorf("bad VLAN %q", value)
		}
		m.SetUint(FieldVLANVID, 0x1000|v)
		return nil
	case "dl_vlan_pcp":
		v, err := strconv.ParseUint(value, 0, 8)
		if err != nil || v > 7 {
			return fmt.Errorf("bad VLAN PCP %q", value)
		}
		if !m.Has(FieldVLANVID) {
			m.SetUintMasked(FieldVLANVID, 0x1000, 0x1000)
		}
		m.SetUint(FieldVLANPCP, v)
		return nil
	case "vlan_tci":
		vs, ms, hasMask := strings.Cut(value, "/")
		v, err := strconv.ParseUint(vs, 0, 16)
		if err != nil {
			return fmt.Errorf("bad TCI %q", value)
		}
		mask := uint64(0xffff)
		if hasMask {
			if mask, err = strconv.ParseUint(ms, 0, 16); err != nil {
				return fmt.Errorf("bad TCI mask %q", value)
			}
		}
		v &= mask
		switch vm := mask & 0x1fff; {
		case vm == 0x1fff:
			m.SetUint(FieldVLANVID, v&0x1fff)
		case vm != 0:
			m.SetUintMasked(FieldVLANVID, v&0x1fff, vm)
		}
		if mask&0xe000 != 0 && (v&0x1fff != 0 || v>>13 != 0) {
			m.SetUint(FieldVLANPCP, v>>13)
		}
		return nil
	case "nw_tos":
		v, err := strconv.ParseUint(value, 0, 8)
		if err != nil || v&3 != 0 {
			return fmt.Errorf("bad nw_tos %q (the low 2 bits must be 0)", value)
		}
		m.SetUint(FieldIPDSCP, v>>2)
		return nil
	case "oxm":
		raw, err := hex.DecodeString(value)
		if err != nil {
			return err
		}
		return m.AddRaw(raw)
	}
	if strings.Contains(key, "[") {
		sf, err := ParseSubfield(key)
		if err != nil {
			return err
		}
		return setSubfield(m, sf, value)
	}
	f, err := ParseField(key)
	if err != nil {
		return err
	}
	if f == FieldInPort16 {
		f = FieldInPort
	}
	v, mask, err := parseValue(f, value)
	if err != nil {
		return err
	}
	if mask == nil {
		m.Set(f, v)
	} else {
		m.SetMasked(f, v, mask)
	}
	return nil
}

// setSubfield matches bits of a field against an integer, as
// "reg0[0..15]=5" does.
func setSubfield(m *Match, sf Subfield, value string) error {
	w := sf.Field.Width()
	v, err := parseUintBytes(value, w)
	if err != nil {
		return err
	}
	n := sf.nbits()
	val, mask := make([]byte, w), make([]byte, w)
	for i := 0; i < n; i++ {
		bit := int(sf.Offset) + i
		src := getBit(v, i)
		setBit(mask, bit, true)
		setBit(val, bit, src)
	}
	for i := n; i < 8*w; i++ {
		if getBit(v, i) {
			return fmt.Errorf("value %s does not fit into %d bits", value, n)
		}
	}
	oldV, oldM, ok := m.Get(sf.Field)
	if ok {
		for i := range val {
			val[i] |= oldV[i] &^ mask[i]
			mask[i] |= oldM[i]
		}
	}
	m.SetMasked(sf.Field, val, mask)
	return nil
}

// getBit reads bit i (0 = least significant) of a big-endian byte string.
func getBit(b []byte, i int) bool {
	if i/8 >= len(b) {
		return false
	}
	return b[len(b)-1-i/8]&(1<<(i%8)) != 0
}

func setBit(b []byte, i int, v bool) {
	if v {
		b[len(b)-1-i/8] |= 1 << (i % 8)
	} else {
		b[len(b)-1-i/8] &^= 1 << (i % 8)
	}
}

// parseL4Field resolves tp_src and friends against the match's protocol,
// as Open vSwitch does: tp_src is the TCP, UDP or SCTP port of whichever
// protocol the flow matches.
func parseL4Field(m *Match, key, value string) error {
	ethType, _, _ := m.Uint(FieldEthType)
	proto, _, _ := m.Uint(FieldIPProto)
	var f Field
	switch key {
	case "icmp_type", "icmp_code":
		f = map[bool]Field{true: FieldICMPv4Type, false: FieldICMPv4Code}[key == "icmp_type"]
		if ethType == 0x86dd {
			f = map[bool]Field{true: FieldICMPv6Type, false: FieldICMPv6Code}[key == "icmp_type"]
		}
	case "icmpv4_type", "icmpv4_code", "icmpv6_type", "icmpv6_code":
		f, _ = ParseField(key)
	case "tcp_src", "tcp_dst", "udp_src", "udp_dst", "sctp_src", "sctp_dst":
		f, _ = ParseField(key)
	default:
		src := strings.HasSuffix(key, "_src")
		switch proto {
		case 17:
			f = map[bool]Field{true: FieldUDPSrc, false: FieldUDPDst}[src]
		case 132:
			f = map[bool]Field{true: FieldSCTPSrc, false: FieldSCTPDst}[src]
		default:
			f = map[bool]Field{true: FieldTCPSrc, false: FieldTCPDst}[src]
		}
	}
	v, mask, err := parseValue(f, value)
	if err != nil {
		return err
	}
	if mask == nil {
		m.Set(f, v)
	} else {
		m.SetMasked(f, v, mask)
	}
	return nil
}

// ParseInstructionsText parses what follows "actions=" in ovs-ofctl
// syntax: actions, then optionally clear_actions, write_actions(...),
// write_metadata:V[/M] and goto_table:N. "drop" (or nothing) is an empty
// list. Instructions come back in Open vSwitch's canonical order.
func ParseInstructionsText(s string) ([]Instruction, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	var acts []Action
	var clear, write, meta, gotoT Instruction
	for _, e := range elems {
		switch e.key {
		case "goto_table":
			t, err := parseUint8(e.value)
			if err != nil {
				return nil, fmt.Errorf("goto_table: %w", err)
			}
			gotoT = GotoTable{Table: t}
		case "clear_actions":
			clear = ClearActions{}
		case "write_actions":
			wa, err := parseActionList(e.value)
			if err != nil {
				return nil, fmt.Errorf("write_actions: %w", err)
			}
			write = WriteActions{Actions: wa}
		case "write_metadata":
			vs, ms, hasMask := strings.Cut(e.value, "/")
			v, err := strconv.ParseUint(vs, 0, 64)
			mask := ^uint64(0)
			if err == nil && hasMask {
				mask, err = strconv.ParseUint(ms, 0, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("write_metadata: %w", err)
			}
			meta = WriteMetadata{Metadata: v, Mask: mask}
		default:
			if gotoT != nil || write != nil || clear != nil || meta != nil {
				return nil, fmt.Errorf("action %s after an instruction", e.key)
			}
			a, err := parseAction1(e)
			if err != nil {
				return nil, err
			}
			if a != nil {
				acts = append(acts, a)
			}
		}
	}
	var out []Instruction
	if len(acts) > 0 {
		out = append(out, ApplyActions{Actions: acts})
	}
	for _, in := range []Instruction{clear, write, meta, gotoT} {
		if in != nil {
			out = append(out, in)
		}
	}
	return out, nil
}

// ParseActionText parses a comma-separated action list in ovs-ofctl
// syntax, such as "ct(commit,zone=5,nat(src=10.0.0.1)),output:2".
func ParseActionText(s string) ([]Action, error) {
	acts, err := parseActionList(s)
	if err != nil {
		return nil, &ParseError{Text: s, Err: err}
	}
	return acts, nil
}

func parseActionList(s string) ([]Action, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	var acts []Action
	for _, e := range elems {
		a, err := parseAction1(e)
		if err != nil {
			return nil, err
		}
		if a != nil {
			acts = append(acts, a)
		}
	}
	return acts, nil
}

// parseAction1 parses one action; "drop" yields nil.
func parseAction1(e kv) (Action, error) {
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("%s: %w", e.key, err)
	}
	switch strings.ToLower(e.key) {
	case "drop":
		return nil, nil
	case "output":
		p, err := ParsePort(e.value)
		return Output{Port: p}, wrap(err)
	case "controller":
		a := Output{Port: PortController, MaxLen: 0xffff}
		if e.hasValue && e.value != "" {
			if strings.HasPrefix(e.value, "max_len=") {
				e.value = strings.TrimPrefix(e.value, "max_len=")
			}
			n, err := parseUint16(e.value)
			if err != nil {
				return nil, wrap(err)
			}
			a.MaxLen = n
		}
		return a, nil
	case "group":
		n, err := strconv.ParseUint(e.value, 0, 32)
		return Group{ID: uint32(n)}, wrap(err)
	case "set_queue":
		n, err := strconv.ParseUint(e.value, 0, 32)
		return SetQueue{ID: uint32(n)}, wrap(err)
	case "meter":
		n, err := strconv.ParseUint(e.value, 0, 32)
		return Meter{ID: uint32(n)}, wrap(err)
	case "dec_ttl":
		return DecTTL{}, nil
	case "push_vlan":
		n, err := strconv.ParseUint(e.value, 0, 16)
		return PushVLAN{EtherType: uint16(n)}, wrap(err)
	case "pop_vlan", "strip_vlan":
		return PopVLAN{}, nil
	case "ct_clear":
		return CTClear{}, nil
	case "exit":
		return Exit{}, nil
	case "set_field":
		a, err := parseSetFieldText(e.value)
		return a, wrap(err)
	case "load":
		a, err := parseLoadText(e.value)
		return a, wrap(err)
	case "move":
		src, dst, ok := strings.Cut(e.value, "->")
		if !ok {
			return nil, wrap(fmt.Errorf("want SRC->DST"))
		}
		s, err := ParseSubfield(src)
		if err != nil {
			return nil, wrap(err)
		}
		d, err := ParseSubfield(dst)
		if err != nil {
			return nil, wrap(err)
		}
		if s.nbits() != d.nbits() {
			return nil, wrap(fmt.Errorf("source is %d bits, destination %d", s.nbits(), d.nbits()))
		}
		return CopyField{Src: s, Dst: d}, nil
	case "mod_dl_src", "mod_dl_dst", "mod_nw_src", "mod_nw_dst", "mod_tp_src", "mod_tp_dst":
		f := map[string]Field{"mod_dl_src": FieldEthSrc, "mod_dl_dst": FieldEthDst, "mod_nw_src": FieldIPv4Src,
			"mod_nw_dst": FieldIPv4Dst, "mod_tp_src": FieldTCPSrc, "mod_tp_dst": FieldTCPDst}[e.key]
		v, _, err := parseValue(f, e.value)
		return SetField{Field: f, Value: v}, wrap(err)
	case "resubmit":
		a, err := parseResubmitText(e)
		return a, wrap(err)
	case "ct":
		a, err := parseCTText(e.value)
		return a, wrap(err)
	case "nat":
		a, err := parseNATText(e.value, e.hasValue)
		return a, wrap(err)
	case "conjunction":
		var a Conjunction
		id, kn, ok := strings.Cut(e.value, ",")
		k, n, ok2 := strings.Cut(kn, "/")
		if !ok || !ok2 {
			return nil, wrap(fmt.Errorf("want conjunction(id,k/n)"))
		}
		x, err1 := strconv.ParseUint(strings.TrimSpace(id), 0, 32)
		y, err2 := strconv.ParseUint(strings.TrimSpace(k), 0, 8)
		z, err3 := strconv.ParseUint(strings.TrimSpace(n), 0, 8)
		if err1 != nil || err2 != nil || err3 != nil || y == 0 || y > z {
			return nil, wrap(fmt.Errorf("bad conjunction(%s)", e.value))
		}
		a.ID, a.Clause, a.NClauses = uint32(x), uint8(y), uint8(z)
		return a, nil
	case "note":
		var data []byte
		for _, part := range strings.Split(e.value, ".") {
			if part == "" {
				continue
			}
			x, err := hex.DecodeString(part)
			if err != nil {
				return nil, wrap(err)
			}
			data = append(data, x...)
		}
		return Note{Data: data}, nil
	case "clone":
		acts, err := parseActionList(e.value)
		return Clone{Actions: acts}, wrap(err)
	case "learn":
		a, err := parseLearnText(e.value)
		return a, wrap(err)
	case "raw":
		data, err := hex.DecodeString(e.value)
		if err != nil {
			return nil, wrap(err)
		}
		a := RawAction{Data: data}
		if _, err := a.AppendBinary(nil); err != nil {
			return nil, wrap(err)
		}
		return a, nil
	}
	if !e.hasValue {
		if p, err := ParsePort(e.key); err == nil {
			if p == PortController {
				return Output{Port: PortController, MaxLen: 0xffff}, nil
			}
			return Output{Port: p}, nil
		}
	}
	return nil, fmt.Errorf("unknown action %q", e.key)
}

func parseSetFieldText(s string) (Action, error) {
	val, dst, ok := strings.Cut(s, "->")
	if !ok {
		return nil, fmt.Errorf("want VALUE->FIELD")
	}
	f, err := ParseField(dst)
	if err != nil {
		return nil, err
	}
	v, mask, err := parseValue(f, val)
	if err != nil {
		return nil, err
	}
	if mask != nil && isOnes(mask) {
		mask = nil
	}
	for i := range mask {
		if v[i]&^mask[i] != 0 {
			return nil, fmt.Errorf("value %s has bits outside its mask", val)
		}
	}
	return SetField{Field: f, Value: v, Mask: mask}, nil
}

// parseLoadText turns load:VALUE->DST[bits] into the OpenFlow 1.5 masked
// set_field Open vSwitch sends for it.
func parseLoadText(s string) (Action, error) {
	val, dst, ok := strings.Cut(s, "->")
	if !ok {
		return nil, fmt.Errorf("want VALUE->DST")
	}
	sf, err := ParseSubfield(dst)
	if err != nil {
		return nil, err
	}
	w := sf.Field.Width()
	v, err := parseUintBytes(val, w)
	if err != nil {
		return nil, err
	}
	n := sf.nbits()
	value, mask := make([]byte, w), make([]byte, w)
	for i := 0; i < 8*w; i++ {
		if i >= n {
			if getBit(v, i) {
				return nil, fmt.Errorf("value %s does not fit into %d bits", val, n)
			}
			continue
		}
		setBit(mask, int(sf.Offset)+i, true)
		setBit(value, int(sf.Offset)+i, getBit(v, i))
	}
	if isOnes(mask) {
		mask = nil
	}
	return SetField{Field: sf.Field, Value: value, Mask: mask}, nil
}

func parseResubmitText(e kv) (Action, error) {
	a := Resubmit{Table: TableAll}
	if !e.paren {
		p, err := ParsePort(e.value)
		if err != nil {
			return nil, err
		}
		a.Port = p
		if a.Port == PortInPort {
			a.Port = 0
		}
		return a, nil
	}
	parts := strings.Split(e.value, ",")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("want resubmit([port],[table][,ct])")
	}
	if p := strings.TrimSpace(parts[0]); p != "" {
		port, err := ParsePort(p)
		if err != nil {
			return nil, err
		}
		if port != PortInPort {
			a.Port = port
		}
	}
	if t := strings.TrimSpace(parts[1]); t != "" {
		n, err := parseUint8(t)
		if err != nil {
			return nil, err
		}
		a.Table = n
	}
	if len(parts) == 3 {
		if strings.TrimSpace(parts[2]) != "ct" {
			return nil, fmt.Errorf("unknown resubmit option %q", parts[2])
		}
		a.CT = true
	}
	return a, nil
}

func parseCTText(s string) (Action, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	var a CT
	for _, e := range elems {
		switch e.key {
		case "commit":
			a.Flags |= CTCommit
		case "force":
			a.Flags |= CTForce
		case "table":
			t, err := parseUint8(e.value)
			if err != nil {
				return nil, fmt.Errorf("table: %w", err)
			}
			a.Recirculate, a.Table = true, t
		case "zone":
			if n, err := strconv.ParseUint(e.value, 0, 16); err == nil {
				a.Zone = uint16(n)
				break
			}
			sf, err := ParseSubfield(e.value)
			if err != nil {
				return nil, fmt.Errorf("zone: %w", err)
			}
			if sf.nbits() != 16 {
				return nil, fmt.Errorf("zone: %v is not 16 bits", e.value)
			}
			a.ZoneField = sf
		case "alg":
			switch e.value {
			case "ftp":
				a.Alg = CTAlgFTP
			case "tftp":
				a.Alg = CTAlgTFTP
			default:
				n, err := strconv.ParseUint(e.value, 0, 16)
				if err != nil {
					return nil, fmt.Errorf("alg: unknown %q", e.value)
				}
				a.Alg = uint16(n)
			}
		case "nat":
			n, err := parseNATText(e.value, e.hasValue)
			if err != nil {
				return nil, err
			}
			a.Actions = append([]Action{n}, a.Actions...)
		case "exec":
			acts, err := parseActionList(e.value)
			if err != nil {
				return nil, fmt.Errorf("exec: %w", err)
			}
			a.Actions = append(a.Actions, acts...)
		default:
			return nil, fmt.Errorf("unknown ct argument %q", e.key)
		}
	}
	return a, nil
}

func parseNATText(s string, hasValue bool) (Action, error) {
	var a NAT
	if !hasValue || s == "" {
		return a, nil
	}
	elems, err := splitNATArgs(s)
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		key, val, hasVal := strings.Cut(e, "=")
		switch key {
		case "src", "dst":
			if a.Flags&(NATSrc|NATDst) != 0 {
				return nil, fmt.Errorf("nat: only one of src and dst")
			}
			if key == "src" {
				a.Flags |= NATSrc
			} else {
				a.Flags |= NATDst
			}
			if hasVal {
				if err := parseNATRange(&a, val); err != nil {
					return nil, err
				}
			}
		case "persistent", "hash", "random":
			if a.Flags&(NATSrc|NATDst) == 0 {
				return nil, fmt.Errorf("nat: %s needs src or dst first", key)
			}
			a.Flags |= map[string]uint16{"persistent": NATPersistent, "hash": NATProtoHash, "random": NATProtoRandom}[key]
		default:
			return nil, fmt.Errorf("nat: unknown argument %q", e)
		}
	}
	return a, nil
}

// splitNATArgs splits nat arguments at commas outside brackets.
func splitNATArgs(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("nat: unbalanced brackets in %q", s)
	}
	return append(out, strings.TrimSpace(s[start:])), nil
}

// parseNATRange parses ADDR[-ADDR][:PORT[-PORT]], IPv6 addresses in
// brackets when ports follow.
func parseNATRange(a *NAT, s string) error {
	var addrs, ports string
	if strings.HasPrefix(s, "[") {
		end := strings.LastIndex(s, "]")
		if end < 0 {
			return fmt.Errorf("nat: missing ] in %q", s)
		}
		addrs = s[:end+1]
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return fmt.Errorf("nat: bad range %q", s)
			}
			ports = rest[1:]
		}
		addrs = strings.NewReplacer("[", "", "]", "").Replace(addrs)
	} else if strings.Count(s, ":") == 1 && strings.Contains(s, ".") {
		addrs, ports, _ = strings.Cut(s, ":")
	} else {
		addrs = s
	}
	lo, hi, isRange := strings.Cut(addrs, "-")
	var err error
	if a.MinAddr, err = netip.ParseAddr(lo); err != nil {
		return fmt.Errorf("nat: %w", err)
	}
	if isRange {
		if a.MaxAddr, err = netip.ParseAddr(hi); err != nil {
			return fmt.Errorf("nat: %w", err)
		}
		if a.MaxAddr.Is4() != a.MinAddr.Is4() {
			return fmt.Errorf("nat: mixed address families in %q", addrs)
		}
	}
	if a.MinAddr.IsUnspecified() || (a.MaxAddr.IsValid() && a.MaxAddr.IsUnspecified()) {
		return fmt.Errorf("nat: the unspecified address %v cannot be a translation", a.MinAddr)
	}
	if a.MaxAddr == a.MinAddr {
		a.MaxAddr = netip.Addr{} // a one-address "range"
	}
	if ports != "" {
		plo, phi, isPRange := strings.Cut(ports, "-")
		if a.MinPort, err = parseUint16(plo); err != nil {
			return fmt.Errorf("nat: port: %w", err)
		}
		if a.MinPort == 0 {
			return fmt.Errorf("nat: port range cannot start at 0")
		}
		if isPRange {
			if a.MaxPort, err = parseUint16(phi); err != nil {
				return fmt.Errorf("nat: port: %w", err)
			}
			if a.MaxPort == a.MinPort {
				a.MaxPort = 0
			}
		}
	}
	return nil
}

func parseLearnText(s string) (Action, error) {
	elems, err := splitKV(s)
	if err != nil {
		return nil, err
	}
	a := Learn{Table: 1, Priority: DefaultPriority}
	for _, e := range elems {
		var err error
		switch e.key {
		case "table":
			a.Table, err = parseUint8(e.value)
		case "priority":
			a.Priority, err = parseUint16(e.value)
		case "idle_timeout":
			a.IdleTimeout, err = parseUint16(e.value)
		case "hard_timeout":
			a.HardTimeout, err = parseUint16(e.value)
		case "fin_idle_timeout":
			a.FinIdleTimeout, err = parseUint16(e.value)
		case "fin_hard_timeout":
			a.FinHardTimeout, err = parseUint16(e.value)
		case "cookie":
			a.Cookie, err = strconv.ParseUint(e.value, 0, 64)
		case "send_flow_rem":
			a.Flags |= LearnSendFlowRem
		case "delete_learned":
			a.Flags |= LearnDeleteLearned
		case "load":
			err = parseLearnLoad(&a, e.value)
		case "output":
			var sf Subfield
			if sf, err = ParseSubfield(e.value); err == nil {
				a.Specs = append(a.Specs, LearnSpec{Kind: LearnOutput, Src: sf})
			}
		default:
			err = parseLearnMatch(&a, e)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
	}
	return a, nil
}

// immediate encodes v into the 2*ceil(bits/16) bytes a learn spec carries.
func learnImmediate(v []byte, bits int) ([]byte, error) {
	k := 2 * ((bits + 15) / 16)
	out := make([]byte, k)
	for i := 0; i < 8*len(v); i++ {
		if !getBit(v, i) {
			continue
		}
		if i >= bits {
			return nil, fmt.Errorf("value does not fit into %d bits", bits)
		}
		setBit(out, i, true)
	}
	return out, nil
}

func parseLearnLoad(a *Learn, s string) error {
	src, dst, ok := strings.Cut(s, "->")
	if !ok {
		return fmt.Errorf("want SRC->DST")
	}
	d, err := ParseSubfield(dst)
	if err != nil {
		return err
	}
	spec := LearnSpec{Kind: LearnLoad, Dst: d}
	if src != "" && (src[0] >= '0' && src[0] <= '9') {
		v, err := parseUintBytes(src, 16)
		if err != nil {
			return err
		}
		if spec.Value, err = learnImmediate(v, d.nbits()); err != nil {
			return err
		}
	} else {
		if spec.Src, err = ParseSubfield(src); err != nil {
			return err
		}
		if spec.Src.nbits() != d.nbits() {
			return fmt.Errorf("%v and %v differ in width", spec.Src, d)
		}
	}
	a.Specs = append(a.Specs, spec)
	return nil
}

func parseLearnMatch(a *Learn, e kv) error {
	d, err := ParseSubfield(e.key)
	if err != nil {
		return err
	}
	spec := LearnSpec{Kind: LearnMatch, Dst: d}
	switch {
	case !e.hasValue:
		spec.Src = d
	case strings.Contains(e.key, "["):
		// dst[bits]=src[bits] or dst[bits]=integer
		if s, err := ParseSubfield(e.value); err == nil {
			if s.nbits() != d.nbits() {
				return fmt.Errorf("%v and %v differ in width", s, d)
			}
			spec.Src = s
			break
		}
		v, err := parseUintBytes(e.value, 16)
		if err != nil {
			return err
		}
		if spec.Value, err = learnImmediate(v, d.nbits()); err != nil {
			return err
		}
	default:
		// field=value (whole field), or field=src[bits]
		if strings.Contains(e.value, "[") {
			s, err := ParseSubfield(e.value)
			if err != nil {
				return err
			}
			if s.nbits() != d.nbits() {
				return fmt.Errorf("%v and %v differ in width", s, d)
			}
			spec.Src = s
			break
		}
		v, _, err := parseValue(d.Field, e.value)
		if err != nil {
			return err
		}
		if spec.Value, err = learnImmediate(v, d.nbits()); err != nil {
			return err
		}
	}
	a.Specs = append(a.Specs, spec)
	return nil
}
