package openflow

// PacketOut is OFPT_PACKET_OUT: a packet the controller hands the switch to
// run through a list of actions (OpenFlow 1.5 §7.3.7). The agent sends
// gratuitous ARP and unsolicited neighbour advertisements this way, out of
// the uplink, when its node takes over an EgressIP address.
type PacketOut struct {
	// BufferID is the switch's buffer holding the packet; NoBuffer when
	// Data holds all of it (always, from egressflow).
	BufferID uint32
	// Match holds the packet's pipeline fields; OpenFlow 1.5 requires
	// in_port among them (PortController for a packet the controller
	// made up).
	Match   Match
	Actions []Action
	// Data is the packet from its Ethernet header.
	Data []byte
}

// packetOutFixedLen is ofp_packet_out before its match: buffer_id,
// actions_len, pad.
const packetOutFixedLen = 8

func (m *PacketOut) MsgType() MessageType { return TypePacketOut }

func (m *PacketOut) AppendBody(b []byte, _ uint32) ([]byte, error) {
	start := len(b)
	b = be.AppendUint32(b, m.BufferID)
	b = append(b, 0, 0, 0, 0) // actions_len, filled in below; pad
	b, err := m.Match.AppendBinary(b)
	if err != nil {
		return b[:start], err
	}
	actionsAt := len(b)
	if b, err = AppendActions(b, m.Actions); err != nil {
		return b[:start], err
	}
	if err := putLen16(b, actionsAt, start+4, "PACKET_OUT actions"); err != nil {
		return b[:start], err
	}
	return append(b, m.Data...), nil
}

func decodePacketOut(b []byte) (Message, error) {
	if len(b) < packetOutFixedLen {
		return nil, decodeErr("PACKET_OUT", 0, "body is %d bytes, want at least %d", len(b), packetOutFixedLen)
	}
	m := &PacketOut{BufferID: be.Uint32(b)}
	actionsLen := int(be.Uint16(b[4:]))
	match, n, err := ParseMatch(b[packetOutFixedLen:])
	if err != nil {
		return nil, err
	}
	m.Match = match
	rest := b[packetOutFixedLen+n:]
	if actionsLen > len(rest) {
		return nil, decodeErr("PACKET_OUT", 4, "actions_len %d exceeds the %d bytes after the match", actionsLen, len(rest))
	}
	if m.Actions, err = ParseActions(rest[:actionsLen]); err != nil {
		return nil, err
	}
	m.Data = cloneBytes(rest[actionsLen:])
	return m, nil
}
