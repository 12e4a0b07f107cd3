package openflow

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Match is the set of field values a flow matches (an OXM ofp_match). The
// zero Match matches every packet.
//
// A Match keeps fields in the canonical order and form Open vSwitch uses
// when it encodes matches for OpenFlow 1.5 (registers as xreg pairs, masks
// normalized, values masked), so a Match read back from a flow dump is Equal
// to the one that installed the flow, and the bytes are the same. Fields
// this package does not model are kept verbatim and re-encoded byte for byte
// after the known ones.
//
// The Set methods panic on programming errors (a value of the wrong size for
// the field, an address setter on a non-address field); decoding never
// panics.
type Match struct {
	entries []matchEntry
	unknown []byte // OXM TLVs this package does not model, verbatim
}

type matchEntry struct {
	field Field
	value [16]byte // big-endian, left-aligned, width bytes used
	mask  [16]byte
}

// fullMask is the mask of an exact match on f: all ones over the field's
// width, or the part of it Open vSwitch tracks.
func fullMask(f Field) (m [16]byte) {
	fi := f.info()
	if fi.tracked != 0 {
		for i := 0; i < fi.width; i++ {
			m[i] = byte(fi.tracked >> (8 * (fi.width - 1 - i)))
		}
		return m
	}
	for i := 0; i < fi.width; i++ {
		m[i] = 0xff
	}
	return m
}

func (e *matchEntry) exact() bool { return e.mask == fullMask(e.field) }

// encodesMasked reports whether the entry goes on the wire with a mask.
func (e *matchEntry) encodesMasked() bool {
	return !e.exact() || e.field.info().maskedExact
}

// Set matches f exactly against value, which must be f.Width() bytes,
// big-endian. Setting a view (xreg, xxreg) sets the registers under it.
func (m *Match) Set(f Field, value []byte) *Match {
	full := fullMask(f)
	return m.SetMasked(f, value, full[:f.Width()])
}

// SetMasked matches the bits of f selected by mask against value. A zero
// mask removes f from the match.
func (m *Match) SetMasked(f Field, value, mask []byte) *Match {
	if !f.valid() {
		panic(fmt.Sprintf("openflow: Match.Set: invalid field %d", f))
	}
	w := f.Width()
	if len(value) != w || len(mask) != w {
		panic(fmt.Sprintf("openflow: Match.Set %v: value and mask must be %d bytes, got %d and %d", f, w, len(value), len(mask)))
	}
	switch {
	case f >= FieldXReg0 && f < FieldXReg0+8:
		n := int(f - FieldXReg0)
		m.SetMasked(FieldReg(2*n), value[:4], mask[:4])
		return m.SetMasked(FieldReg(2*n+1), value[4:], mask[4:])
	case f >= FieldXXReg0 && f < FieldXXReg0+4:
		n := int(f - FieldXXReg0)
		for i := 0; i < 4; i++ {
			m.SetMasked(FieldReg(4*n+i), value[4*i:4*i+4], mask[4*i:4*i+4])
		}
		return m
	case f == FieldInPort16:
		v := Port16To32(be.Uint16(value))
		if ofnum.IsZero(mask) {
			m.Delete(FieldInPort)
			return m
		}
		return m.SetUint(FieldInPort, uint64(v))
	}
	var e matchEntry
	e.field = f
	full := fullMask(f)
	for i := 0; i < w; i++ {
		e.mask[i] = mask[i] & full[i]
		e.value[i] = value[i] & e.mask[i]
	}
	if ofnum.IsZero(e.mask[:w]) {
		m.Delete(f)
		return m
	}
	m.put(e)
	return m
}

// matchStartFields is the room a match gets with its first field: most
// matches have a few fields, so one allocation instead of growing from
// one field by doubling (three allocations for three or four fields).
const matchStartFields = 4

// put inserts or replaces an entry, keeping canonical order.
func (m *Match) put(e matchEntry) {
	if m.entries == nil {
		m.entries = make([]matchEntry, 0, matchStartFields)
	}
	ko := e.field.info().order
	for i := range m.entries {
		x := &m.entries[i]
		if x.field == e.field {
			*x = e
			return
		}
		xo := x.field.info().order
		if xo > ko || (xo == ko && x.field > e.field) {
			m.entries = append(m.entries, matchEntry{})
			copy(m.entries[i+1:], m.entries[i:])
			m.entries[i] = e
			return
		}
	}
	m.entries = append(m.entries, e)
}

// Delete removes f (or, for a view, the registers under it) from the match.
func (m *Match) Delete(f Field) *Match {
	switch {
	case f >= FieldXReg0 && f < FieldXReg0+8:
		n := int(f - FieldXReg0)
		return m.Delete(FieldReg(2 * n)).Delete(FieldReg(2*n + 1))
	case f >= FieldXXReg0 && f < FieldXXReg0+4:
		n := int(f - FieldXXReg0)
		for i := 0; i < 4; i++ {
			m.Delete(FieldReg(4*n + i))
		}
		return m
	case f == FieldInPort16:
		f = FieldInPort
	}
	for i := range m.entries {
		if m.entries[i].field == f {
			m.entries = append(m.entries[:i], m.entries[i+1:]...)
			if len(m.entries) == 0 {
				m.entries = nil
			}
			break
		}
	}
	return m
}

// SetUint matches f exactly against v. For 16-byte fields (ct_label,
// xxreg, addresses) v is the low 64 bits and the high bits must be zero.
func (m *Match) SetUint(f Field, v uint64) *Match {
	w := f.Width()
	if w < 8 && v>>(8*w) != 0 {
		panic(fmt.Sprintf("openflow: Match.SetUint %v: value %#x does not fit in %d bytes", f, v, w))
	}
	return m.Set(f, ofnum.UintBytes(v, w))
}

// SetUintMasked matches the bits of f selected by mask against v. For
// 16-byte fields value and mask cover the low 64 bits; the high 64 bits
// are wildcarded.
func (m *Match) SetUintMasked(f Field, v, mask uint64) *Match {
	w := f.Width()
	if w < 8 && (v|mask)>>(8*w) != 0 {
		panic(fmt.Sprintf("openflow: Match.SetUintMasked %v: %#x/%#x does not fit in %d bytes", f, v, mask, w))
	}
	return m.SetMasked(f, ofnum.UintBytes(v, w), ofnum.UintBytes(mask, w))
}

func addrBytes(f Field, a netip.Addr) []byte {
	switch {
	case f.Width() == 4 && a.Is4():
		b := a.As4()
		return b[:]
	case f.Width() == 16 && a.IsValid():
		b := a.As16()
		return b[:]
	}
	panic(fmt.Sprintf("openflow: %v cannot hold address %v", f, a))
}

// SetAddr matches an IPv4 or IPv6 address field exactly.
func (m *Match) SetAddr(f Field, a netip.Addr) *Match { return m.Set(f, addrBytes(f, a)) }

// SetPrefix matches an IPv4 or IPv6 address field against a CIDR prefix.
func (m *Match) SetPrefix(f Field, p netip.Prefix) *Match {
	v := addrBytes(f, p.Addr())
	mask := make([]byte, len(v))
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return m.SetMasked(f, v, mask)
}

// SetMAC matches an Ethernet address field exactly.
func (m *Match) SetMAC(f Field, mac net.HardwareAddr) *Match { return m.Set(f, mac) }

// SetMACMasked matches the bits of an Ethernet address field selected by mask.
func (m *Match) SetMACMasked(f Field, mac, mask net.HardwareAddr) *Match {
	return m.SetMasked(f, mac, mask)
}

// Get returns the value and mask f is matched against (the mask is all ones
// for an exact match). ok is false if the match does not constrain f. For a
// view (xreg, xxreg) the registers under it are combined.
func (m Match) Get(f Field) (value, mask []byte, ok bool) {
	switch {
	case f >= FieldXReg0 && f < FieldXReg0+8:
		return m.getRegs(2*int(f-FieldXReg0), 2)
	case f >= FieldXXReg0 && f < FieldXXReg0+4:
		return m.getRegs(4*int(f-FieldXXReg0), 4)
	case f == FieldInPort16:
		v, _, ok := m.Uint(FieldInPort)
		if !ok {
			return nil, nil, false
		}
		p, _ := port32To16(uint32(v))
		return ofnum.UintBytes(uint64(p), 2), []byte{0xff, 0xff}, true
	}
	for i := range m.entries {
		e := &m.entries[i]
		if e.field == f {
			w := f.Width()
			return append([]byte(nil), e.value[:w]...), append([]byte(nil), e.mask[:w]...), true
		}
	}
	return nil, nil, false
}

func (m Match) getRegs(first, n int) (value, mask []byte, ok bool) {
	value, mask = make([]byte, 4*n), make([]byte, 4*n)
	for i := 0; i < n; i++ {
		if v, mk, found := m.Get(FieldReg(first + i)); found {
			copy(value[4*i:], v)
			copy(mask[4*i:], mk)
			ok = true
		}
	}
	if !ok {
		return nil, nil, false
	}
	return value, mask, true
}

// Addr returns the address an IPv4 or IPv6 address field matches
// exactly (no mask, or a full one); false when it matches none, or a
// prefix.
func (m Match) Addr(f Field) (netip.Addr, bool) {
	value, mask, ok := m.Get(f)
	if !ok || (mask != nil && !ofnum.IsOnes(mask)) {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(value)
	return a, ok
}

// Uint returns the value and mask of f as integers (the low 64 bits for
// 16-byte fields).
func (m Match) Uint(f Field) (v, mask uint64, ok bool) {
	value, mk, ok := m.Get(f)
	if !ok {
		return 0, 0, false
	}
	for i := 0; i < len(value) && i < 8; i++ {
		v |= uint64(value[len(value)-1-i]) << (8 * i)
		mask |= uint64(mk[len(mk)-1-i]) << (8 * i)
	}
	return v, mask, true
}

// Has reports whether the match constrains f.
func (m Match) Has(f Field) bool {
	_, _, ok := m.Get(f)
	return ok
}

// Fields lists the fields the match constrains, in canonical order.
// Registers are listed as reg<n> whatever view set them.
func (m Match) Fields() []Field {
	fs := make([]Field, len(m.entries))
	for i := range m.entries {
		fs[i] = m.entries[i].field
	}
	return fs
}

// IsEmpty reports whether the match matches every packet.
func (m Match) IsEmpty() bool { return len(m.entries) == 0 && len(m.unknown) == 0 }

// Equal reports whether two matches constrain the same fields the same way
// (including any fields kept verbatim).
func (m Match) Equal(o Match) bool {
	if len(m.entries) != len(o.entries) || !bytes.Equal(m.unknown, o.unknown) {
		return false
	}
	for i := range m.entries {
		if m.entries[i] != o.entries[i] {
			return false
		}
	}
	return true
}

// Reset empties m (it then matches every packet) but keeps its storage
// for the fields set next, so that code rendering many matches in turn
// into one Match allocates only for the first. Copies of m made before
// share that storage: Reset m only once they are no longer used.
func (m *Match) Reset() {
	m.entries = m.entries[:0]
	m.unknown = m.unknown[:0]
}

// Clone returns a deep copy.
func (m Match) Clone() Match {
	return Match{entries: append([]matchEntry(nil), m.entries...), unknown: cloneBytes(m.unknown)}
}

// Unknown returns the OXM TLVs of fields this package does not model,
// verbatim, as they will be re-encoded.
func (m Match) Unknown() []byte { return m.unknown }

// AddRaw appends one or more raw OXM TLVs (header and payload) that this
// package does not model; they are sent after the known fields. Known fields
// in tlv are decoded into the match like any other.
func (m *Match) AddRaw(tlv []byte) error {
	return m.decodeTLVs(tlv, 0)
}

const matchTypeOXM = 1

// AppendBinary appends the ofp_match structure (type OXM, length, TLVs,
// padding to 8 bytes). It implements encoding.BinaryAppender.
func (m *Match) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, 0, matchTypeOXM, 0, 0)
	for i := 0; i < len(m.entries); i++ {
		e := &m.entries[i]
		if e.field >= FieldReg0 && e.field < FieldReg0+16 {
			// Open vSwitch sends registers in OpenFlow 1.5 as xreg pairs.
			n := int(e.field-FieldReg0) / 2
			var v, mk [8]byte
			j := i
			for ; j < len(m.entries) && j < i+2; j++ {
				r := m.entries[j].field
				if r < FieldReg0+Field(2*n) || r > FieldReg0+Field(2*n+1) {
					break
				}
				off := 4 * int(r-FieldReg0-Field(2*n))
				copy(v[off:off+4], m.entries[j].value[:4])
				copy(mk[off:off+4], m.entries[j].mask[:4])
			}
			i = j - 1
			h := fields[FieldXReg(n)].header
			if ofnum.IsOnes(mk[:]) {
				b = be.AppendUint32(b, h)
				b = append(b, v[:]...)
			} else {
				b = be.AppendUint32(b, h&^0xff|oxmHeaderHasMask|16)
				b = append(b, v[:]...)
				b = append(b, mk[:]...)
			}
			continue
		}
		fi := e.field.info()
		if e.encodesMasked() {
			b = be.AppendUint32(b, fi.header&^0xff|oxmHeaderHasMask|uint32(2*fi.width))
			b = append(b, e.value[:fi.width]...)
			b = append(b, e.mask[:fi.width]...)
		} else {
			b = be.AppendUint32(b, fi.header)
			b = append(b, e.value[:fi.width]...)
		}
	}
	b = append(b, m.unknown...)
	if err := putLen16(b, start, start+2, "match"); err != nil {
		return b[:start], err
	}
	return padTo8(b, start), nil
}

// MarshalBinary encodes the ofp_match. It implements encoding.BinaryMarshaler.
func (m *Match) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

// UnmarshalBinary decodes an ofp_match, padding included.
func (m *Match) UnmarshalBinary(b []byte) error {
	x, n, err := ParseMatch(b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return decodeErr("match", n, "%d bytes left over", len(b)-n)
	}
	*m = x
	return nil
}

// ParseMatch decodes the ofp_match at the start of b and returns it with the
// number of bytes it occupies, padding included.
func ParseMatch(b []byte) (Match, int, error) {
	n, err := matchLen(b)
	if err != nil {
		return Match{}, 0, err
	}
	var m Match
	if err := m.decodeTLVs(b[4:n], 4); err != nil {
		return Match{}, 0, err
	}
	return m, pad8(n), nil
}

// matchLen checks the header of the ofp_match at the start of b and
// returns its length without padding; the padded match fits in b.
func matchLen(b []byte) (int, error) {
	if len(b) < 4 {
		return 0, decodeErr("match", 0, "need 4 bytes, have %d", len(b))
	}
	typ, n := be.Uint16(b), int(be.Uint16(b[2:]))
	if typ != matchTypeOXM {
		return 0, decodeErr("match", 0, "match type %d is not OXM (1)", typ)
	}
	if n < 4 || pad8(n) > len(b) {
		return 0, decodeErr("match", 2, "length %d (padded %d) does not fit in %d bytes", n, pad8(n), len(b))
	}
	return n, nil
}

// oxmTLV splits the OXM TLV at the start of b into its normalized header
// (for lookup), whether it has a mask, its payload and total length.
func oxmTLV(b []byte) (header uint32, payload []byte, n int, err error) {
	if len(b) < 4 {
		return 0, nil, 0, errTruncated
	}
	h := be.Uint32(b)
	plen := int(h & 0xff)
	hlen := 4
	if h>>16 == oxmClassExperim {
		hlen = 8
		if plen < 4 {
			return 0, nil, 0, fmt.Errorf("experimenter OXM length %d < 4", plen)
		}
		plen -= 4
	}
	if hlen+plen > len(b) {
		return 0, nil, 0, fmt.Errorf("OXM %08x length %d overruns %d bytes", h, plen, len(b))
	}
	return h, b[hlen : hlen+plen], hlen + plen, nil
}

func (m *Match) decodeTLVs(b []byte, base int) error {
	for off := 0; off < len(b); {
		h, payload, n, err := oxmTLV(b[off:])
		if err != nil {
			return &DecodeError{What: "match field", Offset: base + off, Err: err}
		}
		if !m.decodeKnown(h, payload) {
			m.unknown = append(m.unknown, b[off:off+n]...)
		}
		off += n
	}
	return nil
}

// decodeKnown stores a TLV of a modelled field, reporting false (keep it
// verbatim) for anything else, including known fields of the wrong length.
func (m *Match) decodeKnown(h uint32, payload []byte) bool {
	if h>>16 == oxmClassExperim {
		return false
	}
	masked := h&oxmHeaderHasMask != 0
	w := len(payload)
	if masked {
		if w%2 != 0 {
			return false
		}
		w /= 2
	}
	f, ok := fieldFromHeader(h&^0x1ff | uint32(w))
	if !ok || f.Width() != w {
		return false
	}
	if masked {
		m.SetMasked(f, payload[:w], payload[w:])
	} else {
		m.Set(f, payload)
	}
	return true
}

// MissingPrerequisite says what m lacks for a match on f to mean anything
// to Open vSwitch (its MFP_* prerequisites, ovs-fields(7)), in
// ovs-ofctl's words ("tcp or tcp6"), or "" when m has it. Open vSwitch
// leaves such a field out of what it sends, or sends it as the field that
// shares its storage (arp_spa for nw_src), and refuses a match that holds
// it.
func (m *Match) MissingPrerequisite(f Field) string {
	ethType, _, hasEth := m.Uint(FieldEthType)
	proto, _, hasProto := m.Uint(FieldIPProto)
	isIP := hasEth && (ethType == 0x0800 || ethType == 0x86dd)
	icmpType, _, hasType := m.Uint(FieldICMPv6Type)
	icmpCode, _, _ := m.Uint(FieldICMPv6Code) // 0 when not matched, as Open vSwitch sees it
	isND := hasEth && ethType == 0x86dd && hasProto && proto == 58 && hasType && (icmpType == 135 || icmpType == 136) && icmpCode == 0
	var ok bool
	var needs string
	switch f.info().prereq {
	case preNone, preVLAN: // the priority is checked with the TCI
		ok = true
	case preEthernet:
		pt, _, hasPT := m.Uint(FieldPacketType)
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
			op, _, _ := m.Uint(f)
			ok, needs = op <= 0xff, "a value below 256"
		}
	case preCT:
		// Open vSwitch sends the connection's protocol only when it is
		// not 0, and its ports only with it. (The addresses it sends as
		// given; the switch checks ct_state.)
		ctProto, _, hasCTProto := m.Uint(FieldCTNwProto)
		ok = true
		if f == FieldCTNwProto || f == FieldCTTpSrc || f == FieldCTTpDst {
			ok, needs = hasCTProto && ctProto != 0, "a ct_nw_proto other than 0"
		}
	}
	if ok {
		return ""
	}
	return needs
}
