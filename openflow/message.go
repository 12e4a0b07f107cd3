package openflow

import (
	"fmt"
	"io"
	"sync"
)

// Header is the fixed 8-byte header that starts every OpenFlow message.
type Header struct {
	Version uint8
	Type    MessageType
	Length  uint16 // total message length, header included
	Xid     uint32 // transaction id: replies carry the xid of their request
}

func (h Header) String() string {
	return fmt.Sprintf("%v (version 0x%02x, length %d, xid 0x%x)", h.Type, h.Version, h.Length, h.Xid)
}

// ParseHeader decodes the header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, decodeErr("header", 0, "need %d bytes, have %d", HeaderLen, len(b))
	}
	h := Header{Version: b[0], Type: MessageType(b[1]), Length: be.Uint16(b[2:]), Xid: be.Uint32(b[4:])}
	if h.Length < HeaderLen {
		return h, decodeErr("header", 2, "length %d is shorter than the header", h.Length)
	}
	return h, nil
}

// A Message is the body of one OpenFlow message: everything after the
// header. The concrete types in this package are pointers such as *FlowMod,
// *BundleControl or *Error; messages this package does not model decode as
// *RawMessage (or *Experimenter), which re-encode byte for byte.
type Message interface {
	// MsgType is the header's type byte for this message.
	MsgType() MessageType
	// AppendBody appends the encoded body to b and returns the extended
	// slice. xid is the transaction id of the message being built; only
	// messages that embed another message (BundleAdd) use it.
	AppendBody(b []byte, xid uint32) ([]byte, error)
}

// AppendMessage appends the complete message (header and body) with the
// given transaction id to b. It allocates only if b lacks capacity, so
// encoding into a reused buffer does not allocate.
func AppendMessage(b []byte, xid uint32, m Message) ([]byte, error) {
	start := len(b)
	b = append(b, Version, byte(m.MsgType()), 0, 0, byte(xid>>24), byte(xid>>16), byte(xid>>8), byte(xid))
	b, err := m.AppendBody(b, xid)
	if err != nil {
		return b[:start], err
	}
	if err := putLen16(b, start, start+2, m.MsgType().String()); err != nil {
		return b[:start], err
	}
	return b, nil
}

// scratch buffers for MarshalMessage, so that it allocates only its result.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// MarshalMessage encodes m as a complete message with transaction id xid,
// in a new slice of exactly the message's length (one allocation).
func MarshalMessage(xid uint32, m Message) ([]byte, error) {
	bp := scratch.Get().(*[]byte)
	b, err := AppendMessage((*bp)[:0], xid, m)
	var out []byte
	if err == nil {
		out = make([]byte, len(b))
		copy(out, b)
	}
	if cap(b) <= 1<<16 {
		*bp = b[:0]
		scratch.Put(bp)
	}
	return out, err
}

// UnmarshalMessage decodes b, which must hold exactly one complete message.
// The returned message never aliases b. Messages of a type this package does
// not model are returned as *RawMessage; malformed bodies of modelled types
// are an error. It never panics, whatever b holds.
func UnmarshalMessage(b []byte) (Header, Message, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, nil, err
	}
	if int(h.Length) != len(b) {
		return h, nil, decodeErr("message", 2, "header length %d but %d bytes given", h.Length, len(b))
	}
	m, err := decodeBody(h, b[HeaderLen:])
	return h, m, err
}

// ReadMessage reads one message from r. buf is scratch space that may be
// reused across calls (pass nil to allocate); the returned message never
// aliases it. The returned buffer is the (possibly grown) scratch space.
func ReadMessage(r io.Reader, buf []byte) (Header, Message, []byte, error) {
	if cap(buf) < HeaderLen {
		buf = make([]byte, 0, 4096)
	}
	buf = buf[:HeaderLen]
	if _, err := io.ReadFull(r, buf); err != nil {
		return Header{}, nil, buf, err
	}
	h, err := ParseHeader(buf)
	if err != nil {
		return h, nil, buf, err
	}
	if cap(buf) < int(h.Length) {
		nb := make([]byte, h.Length)
		copy(nb, buf)
		buf = nb
	}
	buf = buf[:h.Length]
	if _, err := io.ReadFull(r, buf[HeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, buf, err
	}
	m, err := decodeBody(h, buf[HeaderLen:])
	return h, m, buf, err
}

// decodeBody decodes a message body. Only HELLO and ERROR are decoded for
// versions other than 1.5 (version negotiation needs them); everything else
// must be OpenFlow 1.5.
func decodeBody(h Header, body []byte) (Message, error) {
	if h.Version != Version && h.Type != TypeHello && h.Type != TypeError {
		return nil, decodeErr(h.Type.String(), -1, "unsupported OpenFlow version 0x%02x (want 0x%02x)", h.Version, Version)
	}
	switch h.Type {
	case TypeHello:
		return decodeHello(body)
	case TypeError:
		return decodeError(body)
	case TypeEchoRequest:
		return &EchoRequest{Data: cloneBytes(body)}, nil
	case TypeEchoReply:
		return &EchoReply{Data: cloneBytes(body)}, nil
	case TypeExperimenter:
		return decodeExperimenter(body)
	case TypeFeaturesRequest:
		if len(body) != 0 {
			return nil, decodeErr("FEATURES_REQUEST", 0, "unexpected %d-byte body", len(body))
		}
		return &FeaturesRequest{}, nil
	case TypeFeaturesReply:
		return decodeFeaturesReply(body)
	case TypeGetConfigRequest:
		if len(body) != 0 {
			return nil, decodeErr("GET_CONFIG_REQUEST", 0, "unexpected %d-byte body", len(body))
		}
		return &GetConfigRequest{}, nil
	case TypeGetConfigReply, TypeSetConfig:
		return decodeSwitchConfig(h.Type, body)
	case TypeFlowMod:
		return decodeFlowMod(body)
	case TypeGroupMod:
		return decodeGroupMod(body)
	case TypeMultipartRequest:
		return decodeMultipartRequest(body)
	case TypeMultipartReply:
		return decodeMultipartReply(body)
	case TypeBarrierRequest:
		if len(body) != 0 {
			return nil, decodeErr("BARRIER_REQUEST", 0, "unexpected %d-byte body", len(body))
		}
		return &BarrierRequest{}, nil
	case TypeBarrierReply:
		if len(body) != 0 {
			return nil, decodeErr("BARRIER_REPLY", 0, "unexpected %d-byte body", len(body))
		}
		return &BarrierReply{}, nil
	case TypeBundleControl:
		return decodeBundleControl(body)
	case TypeBundleAddMessage:
		return decodeBundleAdd(h, body)
	case TypePacketIn:
		return decodePacketIn(body)
	case TypePacketOut:
		return decodePacketOut(body)
	}
	return &RawMessage{Type: h.Type, Body: cloneBytes(body)}, nil
}

// RawMessage is a message this package does not model, or one encoded in
// advance (Batch.At). It re-encodes byte for byte.
type RawMessage struct {
	Type MessageType
	Body []byte
}

func (m *RawMessage) MsgType() MessageType { return m.Type }

func (m *RawMessage) AppendBody(b []byte, _ uint32) ([]byte, error) { return append(b, m.Body...), nil }

// Decode decodes the body as the message its type names (a *FlowMod for a
// FLOW_MOD, ...); a type this package does not model decodes to a copy of
// m. It never panics, whatever the body holds.
func (m *RawMessage) Decode() (Message, error) {
	if len(m.Body) > 0xffff-HeaderLen {
		return nil, decodeErr("message", 2, "body of %d bytes does not fit a message", len(m.Body))
	}
	return decodeBody(Header{Version: Version, Type: m.Type, Length: uint16(HeaderLen + len(m.Body))}, m.Body)
}

// EchoRequest asks the peer to answer with an EchoReply carrying the same data.
type EchoRequest struct{ Data []byte }

func (m *EchoRequest) MsgType() MessageType { return TypeEchoRequest }

func (m *EchoRequest) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return append(b, m.Data...), nil
}

// EchoReply answers an EchoRequest.
type EchoReply struct{ Data []byte }

func (m *EchoReply) MsgType() MessageType { return TypeEchoReply }

func (m *EchoReply) AppendBody(b []byte, _ uint32) ([]byte, error) { return append(b, m.Data...), nil }

// FeaturesRequest asks for the switch's FeaturesReply.
type FeaturesRequest struct{}

func (m *FeaturesRequest) MsgType() MessageType { return TypeFeaturesRequest }

func (m *FeaturesRequest) AppendBody(b []byte, _ uint32) ([]byte, error) { return b, nil }

// FeaturesReply describes the switch (ofp_switch_features).
type FeaturesReply struct {
	DatapathID   uint64
	Buffers      uint32 // packets the switch can buffer at once
	Tables       uint8  // number of flow tables
	AuxiliaryID  uint8  // 0 on the main connection
	Capabilities uint32 // OFPC_* bits
	Reserved     uint32
}

func (m *FeaturesReply) MsgType() MessageType { return TypeFeaturesReply }

func (m *FeaturesReply) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint64(b, m.DatapathID)
	b = be.AppendUint32(b, m.Buffers)
	b = append(b, m.Tables, m.AuxiliaryID, 0, 0)
	b = be.AppendUint32(b, m.Capabilities)
	return be.AppendUint32(b, m.Reserved), nil
}

func decodeFeaturesReply(b []byte) (Message, error) {
	if len(b) != 24 {
		return nil, decodeErr("FEATURES_REPLY", 0, "body is %d bytes, want 24", len(b))
	}
	return &FeaturesReply{
		DatapathID: be.Uint64(b), Buffers: be.Uint32(b[8:]), Tables: b[12], AuxiliaryID: b[13],
		Capabilities: be.Uint32(b[16:]), Reserved: be.Uint32(b[20:]),
	}, nil
}

// GetConfigRequest asks for the switch configuration.
type GetConfigRequest struct{}

func (m *GetConfigRequest) MsgType() MessageType { return TypeGetConfigRequest }

func (m *GetConfigRequest) AppendBody(b []byte, _ uint32) ([]byte, error) { return b, nil }

// Switch configuration flags (OFPC_FRAG_*).
const (
	ConfigFragNormal uint16 = 0 // no special handling of IP fragments
	ConfigFragDrop   uint16 = 1 // drop fragments
	ConfigFragReasm  uint16 = 2 // reassemble fragments
)

// SwitchConfig is the body of GET_CONFIG_REPLY and SET_CONFIG.
type SwitchConfig struct {
	Flags       uint16 // OFPC_FRAG_* handling
	MissSendLen uint16 // bytes of a table-miss packet sent to the controller
}

// GetConfigReply carries the switch configuration.
type GetConfigReply struct{ SwitchConfig }

func (m *GetConfigReply) MsgType() MessageType { return TypeGetConfigReply }

func (m *GetConfigReply) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return m.SwitchConfig.appendTo(b), nil
}

// SetConfig changes the switch configuration.
type SetConfig struct{ SwitchConfig }

func (m *SetConfig) MsgType() MessageType { return TypeSetConfig }

func (m *SetConfig) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return m.SwitchConfig.appendTo(b), nil
}

func (c SwitchConfig) appendTo(b []byte) []byte {
	return be.AppendUint16(be.AppendUint16(b, c.Flags), c.MissSendLen)
}

func decodeSwitchConfig(t MessageType, b []byte) (Message, error) {
	if len(b) != 4 {
		return nil, decodeErr(t.String(), 0, "body is %d bytes, want 4", len(b))
	}
	c := SwitchConfig{Flags: be.Uint16(b), MissSendLen: be.Uint16(b[2:])}
	if t == TypeSetConfig {
		return &SetConfig{c}, nil
	}
	return &GetConfigReply{c}, nil
}

// BarrierRequest asks the switch to finish every earlier message before
// answering with a BarrierReply.
type BarrierRequest struct{}

func (m *BarrierRequest) MsgType() MessageType { return TypeBarrierRequest }

func (m *BarrierRequest) AppendBody(b []byte, _ uint32) ([]byte, error) { return b, nil }

// BarrierReply answers a BarrierRequest.
type BarrierReply struct{}

func (m *BarrierReply) MsgType() MessageType { return TypeBarrierReply }

func (m *BarrierReply) AppendBody(b []byte, _ uint32) ([]byte, error) { return b, nil }

// Describe names a message for error texts and logs: a flow mod (also one
// held raw) by its ovs-ofctl text, any other message by its type.
func Describe(m Message) string {
	if raw, ok := m.(*RawMessage); ok {
		if decoded, err := raw.Decode(); err == nil {
			if _, still := decoded.(*RawMessage); !still {
				m = decoded
			}
		}
	}
	if fm, ok := m.(*FlowMod); ok {
		return fm.String()
	}
	if m == nil {
		return "<nil>"
	}
	return m.MsgType().String()
}
