package openflow

// PacketInReason says why the switch sent a packet to the controller
// (ofp_packet_in_reason).
type PacketInReason uint8

// The reasons OpenFlow 1.5 defines (§7.4.1).
const (
	PacketInTableMiss   PacketInReason = 0
	PacketInApplyAction PacketInReason = 1
	PacketInInvalidTTL  PacketInReason = 2
	PacketInActionSet   PacketInReason = 3
	PacketInGroup       PacketInReason = 4
	PacketInPacketOut   PacketInReason = 5
)

// PacketIn is OFPT_PACKET_IN: a packet the switch sends to the controller,
// by an output to CONTROLLER or a table miss. It arrives unsolicited
// (WithUnsolicited), and only on a connection that asked for packet-ins:
// Open vSwitch sends none to a service connection (the bridge's .mgmt
// socket) until its SetConfig gives a nonzero MissSendLen.
type PacketIn struct {
	// BufferID is the switch's buffer holding the packet; NoBuffer when
	// Data holds all of it.
	BufferID uint32
	// TotalLen is the packet's full length; Data may be shorter (the
	// output's max_len).
	TotalLen uint16
	Reason   PacketInReason
	Table    uint8
	Cookie   uint64
	// Match holds the packet's pipeline fields: in_port, metadata,
	// registers.
	Match Match
	// Data is the packet from its Ethernet header.
	Data []byte
}

// packetInFixedLen is ofp_packet_in before its match: buffer_id,
// total_len, reason, table_id, cookie.
const packetInFixedLen = 16

func (m *PacketIn) MsgType() MessageType { return TypePacketIn }

func (m *PacketIn) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint32(b, m.BufferID)
	b = be.AppendUint16(b, m.TotalLen)
	b = append(b, byte(m.Reason), m.Table)
	b = be.AppendUint64(b, m.Cookie)
	b, err := m.Match.AppendBinary(b)
	if err != nil {
		return b, err
	}
	b = append(b, 0, 0) // pad
	return append(b, m.Data...), nil
}

func decodePacketIn(b []byte) (Message, error) {
	if len(b) < packetInFixedLen {
		return nil, decodeErr("PACKET_IN", 0, "body is %d bytes, want at least %d", len(b), packetInFixedLen)
	}
	m := &PacketIn{BufferID: be.Uint32(b), TotalLen: be.Uint16(b[4:]), Reason: PacketInReason(b[6]), Table: b[7],
		Cookie: be.Uint64(b[8:])}
	match, n, err := ParseMatch(b[packetInFixedLen:])
	if err != nil {
		return nil, err
	}
	m.Match = match
	rest := b[packetInFixedLen+n:]
	if len(rest) < 2 {
		return nil, decodeErr("PACKET_IN", packetInFixedLen+n, "no room for the 2 pad bytes before the packet")
	}
	m.Data = cloneBytes(rest[2:])
	return m, nil
}
