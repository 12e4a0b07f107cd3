package openflow

import (
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Action is one OpenFlow action. The concrete types in this package are
// values (Output, SetField, CT, ...); actions this package does not model
// decode as RawAction and re-encode byte for byte.
//
// AppendBinary appends the action's wire form, padded to 8 bytes. String
// returns the action in ovs-ofctl syntax ("output:2",
// "ct(commit,zone=5,nat(src=10.0.0.1))").
type Action interface {
	AppendBinary(b []byte) ([]byte, error)
	String() string
}

// textAppender is implemented by every action in this package, to format
// without intermediate strings.
type textAppender interface {
	appendText(b []byte) []byte
}

func appendActionText(b []byte, a Action) []byte {
	if t, ok := a.(textAppender); ok {
		return t.appendText(b)
	}
	return append(b, a.String()...)
}

// OpenFlow action types (OFPAT_*).
const (
	actOutput       = 0
	actSetQueue     = 21
	actGroup        = 22
	actDecNwTTL     = 24
	actPushVLAN     = 17
	actPopVLAN      = 18
	actSetField     = 25
	actCopyField    = 28
	actMeter        = 29
	actExperimenter = 0xffff
)

// Nicira action subtypes (NXAST_*).
const (
	nxastResubmit      = 1
	nxastNote          = 8
	nxastDecTTLCntIDs  = 21
	nxastResubmitTable = 14
	nxastLearn         = 16
	nxastExit          = 17
	nxastConjunction   = 34
	nxastCT            = 35
	nxastNAT           = 36
	nxastClone         = 42
	nxastCTClear       = 43
	nxastResubmitCT    = 44
	nxastController2   = 37
)

// maxActionDepth bounds nesting (ct, clone, write_actions) when decoding, so
// that hostile input cannot exhaust the stack.
const maxActionDepth = 8

// AppendActions appends the wire form of a list of actions.
func AppendActions(b []byte, actions []Action) ([]byte, error) {
	var err error
	for _, a := range actions {
		if a == nil {
			return b, encodeErr("action", "nil action")
		}
		if b, err = a.AppendBinary(b); err != nil {
			return b, err
		}
	}
	return b, nil
}

// ParseActions decodes a list of actions that fills b exactly. Unknown
// actions become RawAction values; malformed known ones are an error.
func ParseActions(b []byte) ([]Action, error) { return parseActions(b, 0) }

func parseActions(b []byte, depth int) ([]Action, error) {
	if depth > maxActionDepth {
		return nil, decodeErr("action", 0, "nested more than %d deep", maxActionDepth)
	}
	var out []Action
	for off := 0; off < len(b); {
		if len(b)-off < 8 {
			return nil, decodeErr("action", off, "%d trailing bytes", len(b)-off)
		}
		n := int(be.Uint16(b[off+2:]))
		if n < 8 || n%8 != 0 || off+n > len(b) {
			return nil, decodeErr("action", off, "bad length %d (%d bytes left)", n, len(b)-off)
		}
		a, err := parseAction(b[off:off+n], depth)
		if err != nil {
			if de, ok := err.(*DecodeError); ok && de.Offset >= 0 {
				de.Offset += off
			}
			return nil, err
		}
		out = append(out, a)
		off += n
	}
	return out, nil
}

func parseAction(b []byte, depth int) (Action, error) {
	typ := be.Uint16(b)
	switch typ {
	case actOutput:
		if len(b) != 16 {
			return nil, decodeErr("output action", 0, "length %d, want 16", len(b))
		}
		port := be.Uint32(b[4:])
		if port >= uint32(port16Max) && port <= 0xffff {
			// Its number is text for an OpenFlow 1.1 reserved port
			// (65534 is LOCAL); Open vSwitch holds no such port.
			break
		}
		return Output{Port: port, MaxLen: be.Uint16(b[8:])}, nil
	case actGroup, actSetQueue, actMeter:
		if len(b) != 8 {
			return nil, decodeErr("action", 0, "type %d length %d, want 8", typ, len(b))
		}
		switch typ {
		case actGroup:
			return Group{ID: be.Uint32(b[4:])}, nil
		case actSetQueue:
			return SetQueue{ID: be.Uint32(b[4:])}, nil
		default:
			return Meter{ID: be.Uint32(b[4:])}, nil
		}
	case actDecNwTTL, actPopVLAN:
		if len(b) != 8 {
			return nil, decodeErr("action", 0, "type %d length %d, want 8", typ, len(b))
		}
		if typ == actPopVLAN {
			return PopVLAN{}, nil
		}
		return DecTTL{}, nil
	case actPushVLAN:
		if len(b) != 8 {
			return nil, decodeErr("push_vlan action", 0, "length %d, want 8", len(b))
		}
		// Only the two VLAN ethertypes have a text form (Open vSwitch
		// refuses others); anything else stays verbatim.
		if et := be.Uint16(b[4:]); (et == 0x8100 || et == 0x88a8) && ofnum.IsZero(b[6:8]) {
			return PushVLAN{EtherType: et}, nil
		}
	case actSetField:
		return parseSetField(b)
	case actCopyField:
		return parseCopyField(b)
	case actExperimenter:
		if be.Uint32(b[4:]) == NiciraExperimenter && len(b) >= 16 {
			return parseNiciraAction(b, depth)
		}
	}
	return RawAction{Data: cloneBytes(b)}, nil
}

// RawAction is an action this package does not model, kept verbatim
// (header included) so that it re-encodes byte for byte.
type RawAction struct {
	Data []byte
}

func (a RawAction) AppendBinary(b []byte) ([]byte, error) {
	if len(a.Data) < 8 || len(a.Data)%8 != 0 || int(be.Uint16(a.Data[2:])) != len(a.Data) {
		return b, encodeErr("raw action", "data of %d bytes is not a whole, padded action", len(a.Data))
	}
	return append(b, a.Data...), nil
}

// String formats the action as raw(HEX); ParseActionText accepts it back.
func (a RawAction) String() string { return string(a.appendText(nil)) }

func (a RawAction) appendText(b []byte) []byte {
	b = append(b, "raw("...)
	b = appendHexBytes(b, a.Data)
	return append(b, ')')
}

func appendHexBytes(b, data []byte) []byte {
	const hexd = "0123456789abcdef"
	for _, x := range data {
		b = append(b, hexd[x>>4], hexd[x&15])
	}
	return b
}

// Output sends the packet to a port (OFPAT_OUTPUT). MaxLen is the number
// of bytes to send when Port is PortController; 0xffff sends whole packets.
type Output struct {
	Port   uint32
	MaxLen uint16
}

func (a Output) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, 0, actOutput, 0, 16)
	b = be.AppendUint32(b, a.Port)
	b = be.AppendUint16(b, a.MaxLen)
	return append(b, 0, 0, 0, 0, 0, 0), nil
}

func (a Output) String() string { return string(a.appendText(nil)) }

func (a Output) appendText(b []byte) []byte {
	// As Open vSwitch: "output:" before ordinary ports (and ports it has
	// no 16-bit number for), none before reserved ones, named or not.
	if _, ok := port32To16(a.Port); a.Port < PortMax || !ok {
		b = append(b, "output:"...)
	}
	b = append(b, PortName(a.Port)...)
	if a.Port == PortController {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(a.MaxLen), 10)
	}
	return b
}

// Group sends the packet through a group (OFPAT_GROUP).
type Group struct{ ID uint32 }

func (a Group) AppendBinary(b []byte) ([]byte, error) {
	return be.AppendUint32(append(b, 0, actGroup, 0, 8), a.ID), nil
}

func (a Group) String() string { return string(a.appendText(nil)) }

func (a Group) appendText(b []byte) []byte {
	return strconv.AppendUint(append(b, "group:"...), uint64(a.ID), 10)
}

// SetQueue sets the output queue (OFPAT_SET_QUEUE).
type SetQueue struct{ ID uint32 }

func (a SetQueue) AppendBinary(b []byte) ([]byte, error) {
	return be.AppendUint32(append(b, 0, actSetQueue, 0, 8), a.ID), nil
}

func (a SetQueue) String() string { return string(a.appendText(nil)) }

func (a SetQueue) appendText(b []byte) []byte {
	return strconv.AppendUint(append(b, "set_queue:"...), uint64(a.ID), 10)
}

// Meter applies a meter (OpenFlow 1.5 OFPAT_METER).
type Meter struct{ ID uint32 }

func (a Meter) AppendBinary(b []byte) ([]byte, error) {
	return be.AppendUint32(append(b, 0, actMeter, 0, 8), a.ID), nil
}

func (a Meter) String() string { return string(a.appendText(nil)) }

func (a Meter) appendText(b []byte) []byte {
	return strconv.AppendUint(append(b, "meter:"...), uint64(a.ID), 10)
}

// DecTTL decrements the IP TTL. Without ControllerIDs it is OpenFlow's
// OFPAT_DEC_NW_TTL, and a packet whose TTL runs out goes to the
// controllers with id 0; with them it is Nicira's NXAST_DEC_TTL_CNT_IDS
// (ovs-ofctl's dec_ttl(ID,...)), which sends such packets to the
// controllers with those ids.
type DecTTL struct {
	ControllerIDs []uint16
}

func (a DecTTL) AppendBinary(b []byte) ([]byte, error) {
	if len(a.ControllerIDs) == 0 {
		return append(b, 0, actDecNwTTL, 0, 8, 0, 0, 0, 0), nil
	}
	// nx_action_cnt_ids: the Nicira header, n_controllers, 4 zero
	// bytes, then the ids, padded to 8 bytes.
	start := len(b)
	b = appendNXHeader(b, nxastDecTTLCntIDs)
	if len(a.ControllerIDs) > 0xffff {
		return b[:start], encodeErr("dec_ttl", "%d controller ids", len(a.ControllerIDs))
	}
	b = be.AppendUint16(b, uint16(len(a.ControllerIDs)))
	b = append(b, 0, 0, 0, 0)
	for _, id := range a.ControllerIDs {
		b = be.AppendUint16(b, id)
	}
	return finishNX(b, start, "dec_ttl")
}

// parseDecTTLCntIDs decodes NXAST_DEC_TTL_CNT_IDS; anything the text form
// cannot say (no ids, nonzero reserved or padding bytes, extra room)
// stays a RawAction.
func parseDecTTLCntIDs(b []byte) Action {
	n := int(be.Uint16(b[10:]))
	if n == 0 || !ofnum.IsZero(b[12:16]) || len(b) != pad8(16+2*n) || !ofnum.IsZero(b[16+2*n:]) {
		return RawAction{Data: cloneBytes(b)}
	}
	a := DecTTL{ControllerIDs: make([]uint16, n)}
	for i := range a.ControllerIDs {
		a.ControllerIDs[i] = be.Uint16(b[16+2*i:])
	}
	return a
}

func (a DecTTL) String() string { return string(a.appendText(nil)) }

func (a DecTTL) appendText(b []byte) []byte {
	b = append(b, "dec_ttl"...)
	if len(a.ControllerIDs) == 0 {
		return b
	}
	for i, id := range a.ControllerIDs {
		if i == 0 {
			b = append(b, '(')
		} else {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ')')
}

// PushVLAN pushes a VLAN header (OFPAT_PUSH_VLAN), usually EtherType 0x8100.
type PushVLAN struct{ EtherType uint16 }

func (a PushVLAN) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, 0, actPushVLAN, 0, 8)
	return append(be.AppendUint16(b, a.EtherType), 0, 0), nil
}

func (a PushVLAN) String() string { return string(a.appendText(nil)) }

func (a PushVLAN) appendText(b []byte) []byte {
	b = append(b, "push_vlan:0x"...)
	return strconv.AppendUint(b, uint64(a.EtherType), 16)
}

// PopVLAN pops the outer VLAN header (OFPAT_POP_VLAN).
type PopVLAN struct{}

func (a PopVLAN) AppendBinary(b []byte) ([]byte, error) {
	return append(b, 0, actPopVLAN, 0, 8, 0, 0, 0, 0), nil
}

func (a PopVLAN) String() string { return "pop_vlan" }

func (a PopVLAN) appendText(b []byte) []byte { return append(b, "pop_vlan"...) }

// SetField writes a field (OFPAT_SET_FIELD). In OpenFlow 1.5 it may carry a
// mask: only the bits set in Mask are written. Mask nil (or all ones) writes
// the whole field. Value and Mask are Field.Width() bytes, big-endian.
type SetField struct {
	Field Field
	Value []byte
	Mask  []byte
}

// SetFieldUint returns a SetField writing v into f (the low 64 bits for
// 16-byte fields).
func SetFieldUint(f Field, v uint64) SetField {
	return SetField{Field: f, Value: ofnum.UintBytes(v, f.Width())}
}

// SetFieldUintMasked returns a SetField writing the bits of v selected by mask.
func SetFieldUintMasked(f Field, v, mask uint64) SetField {
	return SetField{Field: f, Value: ofnum.UintBytes(v, f.Width()), Mask: ofnum.UintBytes(mask, f.Width())}
}

func (a SetField) AppendBinary(b []byte) ([]byte, error) {
	fi := a.Field.info()
	if !a.Field.valid() || len(a.Value) != fi.width || (a.Mask != nil && len(a.Mask) != fi.width) {
		return b, encodeErr("set_field", "%v needs %d-byte value and mask, have %d and %d", a.Field, fi.width, len(a.Value), len(a.Mask))
	}
	start := len(b)
	b = append(b, 0, actSetField, 0, 0)
	if a.Mask == nil || ofnum.IsOnes(a.Mask) {
		b = be.AppendUint32(b, fi.header)
		b = append(b, a.Value...)
	} else {
		b = be.AppendUint32(b, fi.header&^0xff|oxmHeaderHasMask|uint32(2*fi.width))
		b = append(b, a.Value...)
		b = append(b, a.Mask...)
	}
	b = padTo8(b, start)
	be.PutUint16(b[start+2:], uint16(len(b)-start))
	return b, nil
}

func parseSetField(b []byte) (Action, error) {
	h, payload, _, err := oxmTLV(b[4:])
	if err != nil {
		return nil, &DecodeError{What: "set_field action", Offset: 4, Err: err}
	}
	masked := h&oxmHeaderHasMask != 0
	w := len(payload)
	if masked {
		w /= 2
	}
	f, ok := fieldFromHeader(h&^0x1ff | uint32(w))
	if !ok || f.Width() != w || (masked && len(payload) != 2*w) || f == FieldInPort16 && masked {
		return RawAction{Data: cloneBytes(b)}, nil
	}
	a := SetField{Field: f, Value: cloneBytes(payload[:w])}
	if masked && !ofnum.IsOnes(payload[w:]) {
		a.Mask = cloneBytes(payload[w:])
		for i := range a.Mask {
			if a.Value[i]&^a.Mask[i] != 0 {
				// Value bits outside the mask: invalid, and not expressible
				// in text; keep it verbatim.
				return RawAction{Data: cloneBytes(b)}, nil
			}
		}
	}
	return a, nil
}

func (a SetField) String() string { return string(a.appendText(nil)) }

func (a SetField) appendText(b []byte) []byte {
	b = append(b, "set_field:"...)
	if len(a.Value) == a.Field.Width() && (a.Mask == nil || len(a.Mask) == len(a.Value)) {
		b = appendValue(b, a.Field, a.Value, a.Mask)
	} else {
		b = append(b, "<bad value>"...)
	}
	b = append(b, "->"...)
	return append(b, a.Field.String()...)
}

// CopyField copies bits from one field to another (OpenFlow 1.5
// OFPAT_COPY_FIELD, ovs-ofctl's "move"). Src and Dst must be equally wide.
type CopyField struct {
	Src, Dst Subfield
}

func (a CopyField) AppendBinary(b []byte) ([]byte, error) {
	n := a.Src.NBits()
	if !a.Src.Field.valid() || !a.Dst.Field.valid() || n != a.Dst.NBits() || n <= 0 {
		return b, encodeErr("copy_field", "%v and %v differ in width or are invalid", a.Src, a.Dst)
	}
	b = append(b, 0, actCopyField, 0, 24)
	b = be.AppendUint16(b, uint16(n))
	b = be.AppendUint16(b, a.Src.Offset)
	b = be.AppendUint16(b, a.Dst.Offset)
	b = append(b, 0, 0)
	b = be.AppendUint32(b, a.Src.Field.Header())
	b = be.AppendUint32(b, a.Dst.Field.Header())
	return append(b, 0, 0, 0, 0), nil
}

func parseCopyField(b []byte) (Action, error) {
	if len(b) < 20 {
		return nil, decodeErr("copy_field action", 0, "length %d < 20", len(b))
	}
	n, so, do := be.Uint16(b[4:]), be.Uint16(b[6:]), be.Uint16(b[8:])
	src, ok1 := fieldFromHeader(be.Uint32(b[12:]))
	dst, ok2 := fieldFromHeader(be.Uint32(b[16:]))
	if !ok1 || !ok2 || len(b) != 24 || n == 0 || !ofnum.IsZero(b[20:]) || !ofnum.IsZero(b[10:12]) ||
		int(so)+int(n) > src.Bits() || int(do)+int(n) > dst.Bits() {
		return RawAction{Data: cloneBytes(b)}, nil
	}
	return CopyField{Src: Subfield{Field: src, Offset: so, Bits: n}, Dst: Subfield{Field: dst, Offset: do, Bits: n}}, nil
}

func (a CopyField) String() string { return string(a.appendText(nil)) }

func (a CopyField) appendText(b []byte) []byte {
	b = append(b, "move:"...)
	b = a.Src.appendText(b)
	b = append(b, "->"...)
	return a.Dst.appendText(b)
}
