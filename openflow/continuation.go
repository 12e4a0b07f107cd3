package openflow

// Continuations: a packet paused in the pipeline (ControllerPause) reaches
// the controller as an NXT_PACKET_IN2 with a continuation, and goes on
// where it stopped when the controller sends that continuation back in an
// NXT_RESUME. Open vSwitch 2.6+ (nicira-ext.h, "NXT_PACKET_IN2").

// Nicira experimenter message types of continuations.
const (
	nxtSetPacketInFormat = 16
	nxtResume            = 28
	nxtPacketIn2         = 30
)

// PacketInFormat is a connection's packet-in format
// (NXT_SET_PACKET_IN_FORMAT).
type PacketInFormat uint32

const (
	// PacketInStandard is OFPT_PACKET_IN, the default.
	PacketInStandard PacketInFormat = 0
	// PacketInNX2 is NXT_PACKET_IN2, the only format that carries
	// continuations.
	PacketInNX2 PacketInFormat = 2
)

// SetPacketInFormat selects the format of the packet-ins the switch sends
// on this connection. The switch answers nothing on success: follow it
// with a barrier.
type SetPacketInFormat struct{ Format PacketInFormat }

func (m *SetPacketInFormat) MsgType() MessageType { return TypeExperimenter }

func (m *SetPacketInFormat) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return be.AppendUint32(appendNXMsgHeader(b, nxtSetPacketInFormat), uint32(m.Format)), nil
}

// NXT_PACKET_IN2 property types (nx_packet_in2_prop_type) that this
// package reads; Properties keeps every one verbatim.
const (
	packetIn2Packet       = 0
	packetIn2TableID      = 3
	packetIn2Cookie       = 4
	packetIn2Reason       = 5
	packetIn2Continuation = 8
)

// PacketIn2 is an NXT_PACKET_IN2. Properties holds its property list
// verbatim (what Resume sends back); the fields are read from it.
type PacketIn2 struct {
	Properties []byte
	// Data is the packet, from its Ethernet header.
	Data   []byte
	Table  uint8
	Cookie uint64
	Reason PacketInReason
	// Paused: the packet carries a continuation, and its pipeline waits
	// for a Resume.
	Paused bool
}

func (m *PacketIn2) MsgType() MessageType { return TypeExperimenter }

func (m *PacketIn2) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return append(appendNXMsgHeader(b, nxtPacketIn2), m.Properties...), nil
}

// Resume returns the continuation of a paused packet-in to the switch.
func (m *PacketIn2) Resume() *Resume { return &Resume{Properties: m.Properties} }

func decodePacketIn2(data []byte) (*PacketIn2, bool) {
	m := &PacketIn2{Properties: cloneBytes(data)}
	hasPacket := false
	ok := props(m.Properties, func(typ uint16, value, _ []byte) bool {
		switch typ {
		case packetIn2Packet:
			m.Data, hasPacket = value, true
		case packetIn2TableID:
			if len(value) < 1 {
				return false
			}
			m.Table = value[0]
		case packetIn2Cookie:
			// A 64-bit property: 4 bytes of padding, then the value.
			if len(value) != 12 {
				return false
			}
			m.Cookie = be.Uint64(value[4:])
		case packetIn2Reason:
			if len(value) < 1 {
				return false
			}
			m.Reason = PacketInReason(value[0])
		case packetIn2Continuation:
			m.Paused = true
		}
		return true
	})
	return m, ok && hasPacket
}

// Resume is an NXT_RESUME: the properties of a paused NXT_PACKET_IN2
// (packet, metadata and continuation) sent back, so that the packet's
// trip through the pipeline goes on where it stopped. Send each once and
// promptly: the switch may discard a continuation it keeps state for. The
// switch answers nothing on success.
type Resume struct{ Properties []byte }

func (m *Resume) MsgType() MessageType { return TypeExperimenter }

func (m *Resume) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return append(appendNXMsgHeader(b, nxtResume), m.Properties...), nil
}
