package openflow

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Text forms of field values, following Open vSwitch's mf_format and
// mf_parse so that what this package prints is what ovs-ofctl prints.

// appendHex appends bytes as Open vSwitch's ds_put_hex does: "0x" and the
// value without leading zeros, or "0".
func appendHex(b []byte, v []byte) []byte {
	printed := false
	for _, x := range v {
		if !printed {
			if x == 0 {
				continue
			}
			b = append(b, "0x"...)
			b = strconv.AppendUint(b, uint64(x), 16)
			printed = true
			continue
		}
		if x < 0x10 {
			b = append(b, '0')
		}
		b = strconv.AppendUint(b, uint64(x), 16)
	}
	if !printed {
		b = append(b, '0')
	}
	return b
}

func appendMAC(b []byte, v []byte) []byte {
	for i, x := range v {
		if i > 0 {
			b = append(b, ':')
		}
		const hexd = "0123456789abcdef"
		b = append(b, hexd[x>>4], hexd[x&15])
	}
	return b
}

// cidrLen returns the prefix length if mask is a CIDR mask, else -1.
func cidrLen(mask []byte) int {
	n := 0
	i := 0
	for ; i < len(mask) && mask[i] == 0xff; i++ {
		n += 8
	}
	if i < len(mask) {
		x := mask[i]
		for x&0x80 != 0 {
			n++
			x <<= 1
		}
		if x != 0 {
			return -1
		}
		for i++; i < len(mask); i++ {
			if mask[i] != 0 {
				return -1
			}
		}
	}
	return n
}

func appendIP(b []byte, v []byte) []byte {
	a, _ := netip.AddrFromSlice(v)
	return appendAddr(b, a)
}

// appendAddr formats an address as Open vSwitch does (with glibc's
// inet_ntop): as netip does, except that an IPv6 address whose first 96
// bits are zero and next 16 are not ends in dotted IPv4 form, ::1.2.3.4.
func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is6() && !a.Is4In6() {
		x := a.As16()
		if ofnum.IsZero(x[:12]) && (x[12] != 0 || x[13] != 0) {
			b = append(b, "::"...)
			return netip.AddrFrom4([4]byte(x[12:])).AppendTo(b)
		}
	}
	return a.AppendTo(b)
}

// appendIPMasked formats like Open vSwitch's ip_format_masked and
// ipv6_format_masked: addr, addr/len for CIDR masks, addr/mask otherwise.
func appendIPMasked(b []byte, v, mask []byte) []byte {
	b = appendIP(b, v)
	if mask == nil || ofnum.IsOnes(mask) {
		return b
	}
	b = append(b, '/')
	if n := cidrLen(mask); n >= 0 {
		return strconv.AppendInt(b, int64(n), 10)
	}
	return appendIP(b, mask)
}

var ctStateNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

var tcpFlagNames = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns", "[200]", "[400]", "[800]"}

func flagName(names []string, bit uint) string {
	if int(bit) < len(names) {
		return names[bit]
	}
	return ""
}

// appendFlags is Open vSwitch's format_flags: names joined by '|', unknown
// bits in hex, "0" for none.
func appendFlags(b []byte, names []string, flags uint32) []byte {
	if flags == 0 {
		return append(b, '0')
	}
	var bad uint32
	first := true
	for bit := uint(0); bit < 32; bit++ {
		if flags&(1<<bit) == 0 {
			continue
		}
		n := flagName(names, bit)
		if n == "" {
			bad |= 1 << bit
			continue
		}
		if !first {
			b = append(b, '|')
		}
		b = append(b, n...)
		first = false
	}
	if bad != 0 {
		if !first {
			b = append(b, '|')
		}
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, uint64(bad), 16)
	}
	return b
}

// appendFlagsMasked is format_flags_masked: exact (mask == max) as flags,
// otherwise +name/-name for each masked bit.
func appendFlagsMasked(b []byte, names []string, flags, mask, max uint32) []byte {
	if mask == max {
		return appendFlags(b, names, flags)
	}
	if mask == 0 {
		return append(b, "0/0"...)
	}
	for bit := uint(0); bit < 32; bit++ {
		if mask&(1<<bit) == 0 {
			continue
		}
		if flags&(1<<bit) != 0 {
			b = append(b, '+')
		} else {
			b = append(b, '-')
		}
		n := flagName(names, bit)
		if n == "" {
			n = "[Unknown]"
		}
		b = append(b, n...)
	}
	return b
}

func appendFrag(b []byte, v, mask uint8) []byte {
	switch mask & 3 {
	case 3:
		switch v & 3 {
		case 0:
			return append(b, "no"...)
		case 1:
			return append(b, "first"...)
		case 3:
			return append(b, "later"...)
		}
		// Open vSwitch prints "<error>"; the number parses back.
		return append(b, "0x2/0x3"...)
	case 1:
		if v&1 != 0 {
			return append(b, "yes"...)
		}
		return append(b, "no"...)
	case 2:
		if v&2 != 0 {
			return append(b, "later"...)
		}
		return append(b, "not_later"...)
	}
	return append(b, "0/0"...)
}

// appendValue formats a value of field f as mf_format does; mask may be nil
// for an exact value.
func appendValue(b []byte, f Field, v, mask []byte) []byte {
	if mask != nil {
		if ofnum.IsZero(mask) {
			return append(b, "ANY"...)
		}
		if ofnum.IsOnes(mask) {
			mask = nil
		}
	}
	fi := f.info()
	switch fi.format {
	case fmtDecimal:
		if len(v) > 8 {
			b = appendHex(b, v)
		} else {
			b = strconv.AppendUint(b, ofnum.BytesUint(v), 10)
		}
	case fmtHex:
		b = appendHex(b, v)
	case fmtMAC:
		b = appendMAC(b, v)
		if mask != nil {
			b = append(b, '/')
			b = appendMAC(b, mask)
		}
		return b
	case fmtIPv4, fmtIPv6:
		return appendIPMasked(b, v, mask)
	case fmtPort16:
		return append(b, PortName(Port16To32(uint16(ofnum.BytesUint(v))))...)
	case fmtPort32:
		return append(b, PortName(uint32(ofnum.BytesUint(v)))...)
	case fmtCTState:
		m := uint32(0xffffffff)
		if mask != nil {
			m = uint32(ofnum.BytesUint(mask))
		}
		return appendFlagsMasked(b, ctStateNames, uint32(ofnum.BytesUint(v)), m, 0xffffffff)
	case fmtTCPFlags:
		m := uint32(0xffff)
		if mask != nil {
			m = uint32(ofnum.BytesUint(mask))
		}
		x := uint32(ofnum.BytesUint(v))
		if m != 0xffff && (x|m)&0xf000 != 0 {
			// Reserved bits: numbers, which parse back.
			b = appendHexC(b, uint64(x))
			b = append(b, '/')
			return appendHexC(b, uint64(m))
		}
		return appendFlagsMasked(b, tcpFlagNames, x, m&0x0fff, 0x0fff)
	case fmtFrag:
		m := uint8(0xff)
		if mask != nil {
			m = mask[0]
		}
		return appendFrag(b, v[0], m)
	case fmtPacketType:
		x := uint32(ofnum.BytesUint(v))
		b = append(b, '(')
		b = strconv.AppendUint(b, uint64(x>>16), 10)
		b = append(b, ",0x"...)
		b = strconv.AppendUint(b, uint64(x&0xffff), 16)
		return append(b, ')')
	}
	if mask != nil {
		b = append(b, '/')
		b = appendHex(b, mask)
	}
	return b
}

// ParseValue parses a value (and optional /mask) of the field as
// Open vSwitch's mf_parse does. mask is nil when none was given.
func (f Field) ParseValue(s string) (value, mask []byte, err error) {
	fi := f.info()
	w := fi.width
	if s == "ANY" && fi.format != fmtPort16 && fi.format != fmtPort32 {
		// What a zero mask formats as.
		return make([]byte, w), make([]byte, w), nil
	}
	vs, ms, hasMask := strings.Cut(s, "/")
	switch fi.format {
	case fmtMAC:
		value, err = parseMAC(vs)
		if err == nil && hasMask {
			mask, err = parseMAC(ms)
		}
	case fmtIPv4, fmtIPv6:
		value, mask, err = parseIPMasked(vs, ms, hasMask, w)
	case fmtPort16, fmtPort32:
		var p uint32
		p, err = ParsePort(s)
		if err == nil {
			if fi.format == fmtPort16 {
				p16, ok := port32To16(p)
				if !ok {
					return nil, nil, fmt.Errorf("port %s does not fit in 16 bits", s)
				}
				value = ofnum.UintBytes(uint64(p16), 2)
			} else {
				value = ofnum.UintBytes(uint64(p), 4)
			}
		}
		return value, nil, err
	case fmtCTState:
		var v, m uint32
		v, m, err = parseFlags(s, ctStateNames, 0xffffffff)
		if err == nil {
			value = ofnum.UintBytes(uint64(v), 4)
			if m != 0xffffffff {
				mask = ofnum.UintBytes(uint64(m), 4)
			}
		}
		return value, mask, err
	case fmtTCPFlags:
		var v, m uint32
		v, m, err = parseFlags(s, tcpFlagNames, 0x0fff)
		if err == nil {
			value = ofnum.UintBytes(uint64(v), 2)
			// Flags by name, or a number alone, are exact; a number's
			// own mask is kept unless it is all ones.
			exact := m == 0xffff || m == 0x0fff && !(ofnum.IsDigits(s[:1]) && hasMask)
			if !exact {
				mask = ofnum.UintBytes(uint64(m), 2)
			}
		}
		return value, mask, err
	case fmtFrag:
		frags := map[string][2]byte{"no": {0, 3}, "first": {1, 3}, "later": {3, 3}, "yes": {1, 1}, "not_later": {0, 2}}
		if fm, ok := frags[s]; ok {
			value = []byte{fm[0]}
			if fm[1] != 3 {
				mask = []byte{fm[1]}
			}
			return value, mask, nil
		}
		value, mask, err = parseIntMasked(vs, ms, hasMask, w)
	case fmtPacketType:
		if !strings.HasPrefix(s, "(") {
			value, mask, err = parseIntMasked(vs, ms, hasMask, w)
			break
		}
		var ns, typ uint64
		in := strings.TrimSuffix(strings.TrimPrefix(s, "("), ")")
		a, bb, ok := strings.Cut(in, ",")
		if !ok {
			return nil, nil, fmt.Errorf("packet_type %q: want (namespace,type)", s)
		}
		if ns, err = ofnum.ParseCUint(strings.TrimSpace(a), 16); err == nil {
			typ, err = ofnum.ParseCUint(strings.TrimSpace(bb), 16)
		}
		return ofnum.UintBytes(ns<<16|typ, 4), nil, err
	default:
		value, mask, err = parseIntMasked(vs, ms, hasMask, w)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%v: %w", f, err)
	}
	return value, mask, nil
}

func parseMAC(s string) ([]byte, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return nil, fmt.Errorf("bad Ethernet address %q", s)
	}
	return hw, nil
}

func parseIPMasked(vs, ms string, hasMask bool, w int) (value, mask []byte, err error) {
	a, err := netip.ParseAddr(vs)
	if err != nil || (w == 4) != a.Is4() || a.Zone() != "" {
		return nil, nil, fmt.Errorf("bad IPv%d address %q", map[int]int{4: 4, 16: 6}[w], vs)
	}
	value = a.AsSlice()
	if !hasMask {
		return value, nil, nil
	}
	if n, err := ofnum.ParseDecimal(ms, 8); err == nil {
		if n > uint64(8*w) {
			return nil, nil, fmt.Errorf("bad prefix length %q", ms)
		}
		mask = make([]byte, w)
		for i := 0; i < int(n); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		return value, mask, nil
	}
	m, err := netip.ParseAddr(ms)
	if err != nil || (w == 4) != m.Is4() || m.Zone() != "" {
		return nil, nil, fmt.Errorf("bad mask %q", ms)
	}
	return value, m.AsSlice(), nil
}

func parseIntMasked(vs, ms string, hasMask bool, w int) (value, mask []byte, err error) {
	if value, err = ofnum.ParseUintBytes(vs, w); err != nil {
		return nil, nil, err
	}
	if hasMask {
		if mask, err = ofnum.ParseUintBytes(ms, w); err != nil {
			return nil, nil, err
		}
	}
	return value, mask, nil
}

// parseFlags parses flag syntax: "trk|est", "+trk-new", or an integer with
// optional mask. It returns value and mask; an exact value has mask max.
func parseFlags(s string, names []string, max uint32) (v, m uint32, err error) {
	if s == "" {
		return 0, 0, fmt.Errorf("empty flags")
	}
	if s[0] >= '0' && s[0] <= '9' {
		vs, ms, hasMask := strings.Cut(s, "/")
		x, err := ofnum.ParseCUint(vs, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("bad flags %q", s)
		}
		if !hasMask {
			return uint32(x), max, nil
		}
		y, err := ofnum.ParseCUint(ms, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("bad flags mask %q", s)
		}
		return uint32(x), uint32(y), nil
	}
	lookup := func(n string) (uint32, bool) {
		for i, name := range names {
			if name == n {
				return 1 << i, true
			}
		}
		return 0, false
	}
	if s[0] == '+' || s[0] == '-' {
		for s != "" {
			sign := s[0]
			if sign != '+' && sign != '-' {
				return 0, 0, fmt.Errorf("bad flags syntax at %q", s)
			}
			s = s[1:]
			end := strings.IndexAny(s, "+-")
			if end < 0 {
				end = len(s)
			}
			bit, ok := lookup(s[:end])
			if !ok {
				return 0, 0, fmt.Errorf("unknown flag %q", s[:end])
			}
			if m&bit != 0 {
				return 0, 0, fmt.Errorf("flag %q given twice", s[:end])
			}
			m |= bit
			if sign == '+' {
				v |= bit
			}
			s = s[end:]
		}
		return v, m, nil
	}
	for _, n := range strings.Split(s, "|") {
		bit, ok := lookup(n)
		if !ok {
			// Bits without names are written in hex, as Open vSwitch does.
			x, err := ofnum.ParseCUint(n, 32)
			if err != nil || !strings.HasPrefix(n, "0x") {
				return 0, 0, fmt.Errorf("unknown flag %q", n)
			}
			bit = uint32(x)
		}
		v |= bit
	}
	return v, max, nil
}

// ParsePort parses a port as ovs-ofctl does: a reserved name (LOCAL,
// IN_PORT, CONTROLLER, NORMAL, FLOOD, ALL, TABLE, ANY or NONE) in any
// case, or a number in base 10. Numbers in OpenFlow 1.0's reserved range
// (65280 to 65535) stand for the OpenFlow 1.1 reserved ports, as in
// ovs-ofctl (65534 is LOCAL). Other 32-bit numbers, which ovs-ofctl
// refuses, are taken as they are.
func ParsePort(s string) (uint32, error) {
	u := strings.ToUpper(s)
	for p, n := range reservedPortNames {
		if n == u {
			return p, nil
		}
	}
	if u == "NONE" {
		return PortAny, nil
	}
	x, err := ofnum.ParseDecimal(s, 32)
	if err != nil {
		return 0, fmt.Errorf("openflow: bad port %q", s)
	}
	if x >= uint64(port16Max) && x <= 0xffff {
		return Port16To32(uint16(x)), nil
	}
	return uint32(x), nil
}

// Subfield names a run of bits inside a field, as in Open vSwitch's
// NXM_NX_REG0[0..15] syntax. Bits == 0 with Offset == 0 means the whole
// field.
type Subfield struct {
	Field  Field
	Offset uint16 // first bit, counting from the least significant
	Bits   uint16 // number of bits; 0 means the whole field
}

// NBits is the number of bits the subfield spans, Bits or, for 0, the
// rest of the field above Offset.
func (s Subfield) NBits() int {
	if s.Bits == 0 {
		return s.Field.Bits() - int(s.Offset)
	}
	return int(s.Bits)
}

// String formats the subfield as Open vSwitch does: NXM_NX_REG0[],
// NXM_NX_REG0[5], NXM_NX_REG0[0..15].
func (s Subfield) String() string { return string(s.appendText(nil)) }

func (s Subfield) appendText(b []byte) []byte {
	b = append(b, s.Field.nxm()...)
	n := s.NBits()
	switch {
	case s.Offset == 0 && n == s.Field.Bits():
		return append(b, "[]"...)
	case n == 1:
		b = append(b, '[')
		b = strconv.AppendUint(b, uint64(s.Offset), 10)
		return append(b, ']')
	}
	b = append(b, '[')
	b = strconv.AppendUint(b, uint64(s.Offset), 10)
	b = append(b, ".."...)
	b = strconv.AppendUint(b, uint64(int(s.Offset)+n-1), 10)
	return append(b, ']')
}

// ParseSubfield parses NAME[], NAME[N], NAME[A..B] or a bare field name
// (the whole field).
func ParseSubfield(s string) (Subfield, error) {
	name, rest, hasBr := strings.Cut(s, "[")
	f, err := ParseField(name)
	if err != nil {
		return Subfield{}, err
	}
	sf := Subfield{Field: f, Bits: uint16(f.Bits())}
	if !hasBr || rest == "]" {
		if hasBr && rest != "]" {
			return Subfield{}, fmt.Errorf("openflow: bad subfield %q", s)
		}
		return sf, nil
	}
	if !strings.HasSuffix(rest, "]") {
		return Subfield{}, fmt.Errorf("openflow: bad subfield %q: missing ]", s)
	}
	rest = strings.TrimSuffix(rest, "]")
	a, bs, rng := strings.Cut(rest, "..")
	lo, err := strconv.ParseUint(a, 10, 16)
	if err != nil {
		return Subfield{}, fmt.Errorf("openflow: bad subfield %q", s)
	}
	hi := lo
	if rng {
		if hi, err = strconv.ParseUint(bs, 10, 16); err != nil {
			return Subfield{}, fmt.Errorf("openflow: bad subfield %q", s)
		}
	}
	if hi < lo || int(hi) >= f.Bits() {
		return Subfield{}, fmt.Errorf("openflow: subfield %q out of range for %d-bit %v", s, f.Bits(), f)
	}
	sf.Offset, sf.Bits = uint16(lo), uint16(hi-lo+1)
	return sf, nil
}

// ofsNbits packs offset and width the way Nicira actions do.
func (s Subfield) ofsNbits() uint16 { return s.Offset<<6 | uint16(s.NBits()-1) }

func subfieldFromOfsNbits(h uint32, ofsNbits uint16) (Subfield, bool) {
	f, ok := fieldFromHeader(h &^ oxmHeaderHasMask)
	if !ok {
		return Subfield{}, false
	}
	sf := Subfield{Field: f, Offset: ofsNbits >> 6, Bits: ofsNbits&0x3f + 1}
	if int(sf.Offset)+int(sf.Bits) > f.Bits() {
		return Subfield{}, false
	}
	return sf, true
}
