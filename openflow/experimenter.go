package openflow

import (
	"net/netip"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Experimenter is an OFPT_EXPERIMENTER message this package does not model
// further; it re-encodes byte for byte.
type Experimenter struct {
	Experimenter uint32
	ExpType      uint32
	Data         []byte
}

func (m *Experimenter) MsgType() MessageType { return TypeExperimenter }

func (m *Experimenter) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint32(b, m.Experimenter)
	b = be.AppendUint32(b, m.ExpType)
	return append(b, m.Data...), nil
}

// Nicira experimenter message types.
const (
	nxtCTFlushZone = 29
	nxtCTFlush     = 32
)

func decodeExperimenter(b []byte) (Message, error) {
	if len(b) < 8 {
		return nil, decodeErr("EXPERIMENTER", 0, "body is %d bytes, want at least 8", len(b))
	}
	exp, typ, data := be.Uint32(b), be.Uint32(b[4:]), b[8:]
	if exp == NiciraExperimenter {
		switch typ {
		case nxtCTFlushZone:
			if len(data) == 8 && ofnum.IsZero(data[:6]) {
				return &CTFlushZone{Zone: be.Uint16(data[6:])}, nil
			}
		case nxtCTFlush:
			if m, ok := decodeCTFlush(data); ok {
				return m, nil
			}
		case nxtPacketIn2:
			if m, ok := decodePacketIn2(data); ok {
				return m, nil
			}
		case nxtResume:
			if props(data, func(uint16, []byte, []byte) bool { return true }) {
				return &Resume{Properties: cloneBytes(data)}, nil
			}
		case nxtSetPacketInFormat:
			if len(data) == 4 {
				return &SetPacketInFormat{Format: PacketInFormat(be.Uint32(data))}, nil
			}
		}
	}
	return &Experimenter{Experimenter: exp, ExpType: typ, Data: cloneBytes(data)}, nil
}

func appendNXMsgHeader(b []byte, typ uint32) []byte {
	return be.AppendUint32(be.AppendUint32(b, NiciraExperimenter), typ)
}

// CTFlushZone deletes every conntrack entry in a zone (Nicira
// NXT_CT_FLUSH_ZONE). The switch answers nothing on success: follow it with
// a barrier.
type CTFlushZone struct{ Zone uint16 }

func (m *CTFlushZone) MsgType() MessageType { return TypeExperimenter }

func (m *CTFlushZone) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendNXMsgHeader(b, nxtCTFlushZone)
	b = append(b, 0, 0, 0, 0, 0, 0)
	return be.AppendUint16(b, m.Zone), nil
}

// CTTuple selects connections by one direction's tuple in a CTFlush. Zero
// values are wildcards. IPv4 addresses travel IPv4-mapped.
type CTTuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // TCP, UDP, SCTP
	ICMPID           uint16 // ICMP and ICMPv6
	ICMPType         uint8
	ICMPCode         uint8
}

func (t CTTuple) isZero() bool { return t == CTTuple{} }

// CTFlush deletes the conntrack entries matching a protocol and the
// original and/or reply tuple (Nicira NXT_CT_FLUSH, Open vSwitch 3.1+).
// Open vSwitch answers nothing on success: follow it with a barrier.
//
// Without HasZone, Open vSwitch flushes the given tuple in zone 0; with
// neither a zone nor a tuple it flushes everything. A partial tuple makes
// the switch walk the whole table. Extra holds further TLVs verbatim
// (Open vSwitch 3.1 ignores the ones it does not know, such as the mark
// and labels filters of 3.3).
type CTFlush struct {
	Proto   uint8
	Zone    uint16
	HasZone bool
	Orig    CTTuple
	Reply   CTTuple
	Extra   []byte
}

// NXT_CT_FLUSH TLV types.
const (
	ctFlushOrigTuple  = 0
	ctFlushReplyTuple = 1
	ctFlushZoneID     = 2
	ctTupleSrc        = 0
	ctTupleDst        = 1
	ctTupleSrcPort    = 2
	ctTupleDstPort    = 3
	ctTupleICMPID     = 4
	ctTupleICMPType   = 5
	ctTupleICMPCode   = 6
)

func (m *CTFlush) MsgType() MessageType { return TypeExperimenter }

// appendProp appends an OpenFlow property: type, length (without
// padding), value, zero padding to 8 bytes.
func appendProp(b []byte, typ uint16, value []byte) []byte {
	start := len(b)
	b = be.AppendUint16(b, typ)
	b = be.AppendUint16(b, uint16(4+len(value)))
	b = append(b, value...)
	return padTo8(b, start)
}

func (m *CTFlush) isICMP() bool { return m.Proto == 1 || m.Proto == 58 }

func (m *CTFlush) appendTuple(b []byte, typ uint16, t CTTuple) []byte {
	var nested []byte
	var scratch [16]byte
	if t.Src.IsValid() && !t.Src.IsUnspecified() {
		scratch = t.Src.As16()
		nested = appendProp(nested, ctTupleSrc, scratch[:])
	}
	if t.Dst.IsValid() && !t.Dst.IsUnspecified() {
		scratch = t.Dst.As16()
		nested = appendProp(nested, ctTupleDst, scratch[:])
	}
	if m.isICMP() {
		// Like ovs-ofctl, always send the ICMP fields for ICMP.
		nested = appendProp(nested, ctTupleICMPID, []byte{byte(t.ICMPID >> 8), byte(t.ICMPID), 0, 0})
		nested = appendProp(nested, ctTupleICMPType, []byte{t.ICMPType})
		nested = appendProp(nested, ctTupleICMPCode, []byte{t.ICMPCode})
	} else {
		if t.SrcPort != 0 {
			nested = appendProp(nested, ctTupleSrcPort, []byte{byte(t.SrcPort >> 8), byte(t.SrcPort), 0, 0})
		}
		if t.DstPort != 0 {
			nested = appendProp(nested, ctTupleDstPort, []byte{byte(t.DstPort >> 8), byte(t.DstPort), 0, 0})
		}
	}
	if len(nested) == 0 {
		return b
	}
	// A nested property: header, 4 bytes of padding, then the properties.
	b = be.AppendUint16(b, typ)
	b = be.AppendUint16(b, uint16(8+len(nested)))
	b = append(b, 0, 0, 0, 0)
	return append(b, nested...)
}

func (m *CTFlush) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendNXMsgHeader(b, nxtCTFlush)
	b = append(b, m.Proto, 0, 0, 0, 0, 0, 0, 0)
	b = m.appendTuple(b, ctFlushOrigTuple, m.Orig)
	b = m.appendTuple(b, ctFlushReplyTuple, m.Reply)
	if m.HasZone {
		b = appendProp(b, ctFlushZoneID, []byte{byte(m.Zone >> 8), byte(m.Zone), 0, 0})
	}
	return append(b, m.Extra...), nil
}

// props iterates over OpenFlow properties, calling fn with each type,
// value (length-trimmed) and whole padded property. It reports false on a
// malformed list.
func props(b []byte, fn func(typ uint16, value, whole []byte) bool) bool {
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return false
		}
		typ, n := be.Uint16(b[off:]), int(be.Uint16(b[off+2:]))
		if n < 4 || off+n > len(b) {
			return false
		}
		end := off + pad8(n)
		if end > len(b) {
			end = len(b)
		}
		if !fn(typ, b[off+4:off+n], b[off:end]) {
			return false
		}
		off = end
	}
	return true
}

func decodeCTTuple(v []byte, t *CTTuple) bool {
	if len(v) < 4 {
		return false
	}
	return props(v[4:], func(typ uint16, val, _ []byte) bool {
		switch typ {
		case ctTupleSrc, ctTupleDst:
			if len(val) != 16 {
				return false
			}
			a := netip.AddrFrom16([16]byte(val)).Unmap()
			if typ == ctTupleSrc {
				t.Src = a
			} else {
				t.Dst = a
			}
		case ctTupleSrcPort, ctTupleDstPort, ctTupleICMPID:
			if len(val) != 4 {
				return false
			}
			x := be.Uint16(val)
			switch typ {
			case ctTupleSrcPort:
				t.SrcPort = x
			case ctTupleDstPort:
				t.DstPort = x
			default:
				t.ICMPID = x
			}
		case ctTupleICMPType, ctTupleICMPCode:
			if len(val) != 1 {
				return false
			}
			if typ == ctTupleICMPType {
				t.ICMPType = val[0]
			} else {
				t.ICMPCode = val[0]
			}
		default:
			return false
		}
		return true
	})
}

func decodeCTFlush(data []byte) (*CTFlush, bool) {
	if len(data) < 8 || !ofnum.IsZero(data[1:8]) {
		return nil, false
	}
	m := &CTFlush{Proto: data[0]}
	ok := props(data[8:], func(typ uint16, val, whole []byte) bool {
		switch typ {
		case ctFlushOrigTuple:
			return decodeCTTuple(val, &m.Orig)
		case ctFlushReplyTuple:
			return decodeCTTuple(val, &m.Reply)
		case ctFlushZoneID:
			if len(val) != 4 || m.HasZone {
				return false
			}
			m.Zone, m.HasZone = be.Uint16(val), true
		default:
			m.Extra = append(m.Extra, whole...)
		}
		return true
	})
	if !ok {
		return nil, false
	}
	// Keep the message verbatim unless it re-encodes to the same bytes.
	again, _ := m.AppendBody(nil, 0)
	if string(again[8:]) != string(data) {
		return nil, false
	}
	return m, true
}
