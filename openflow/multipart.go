package openflow

import (
	"bytes"
	"net"
	"time"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// MultipartType is the type of a multipart request or reply (OFPMP_*).
type MultipartType uint16

const (
	MultipartDesc         MultipartType = 0
	MultipartFlowDesc     MultipartType = 1 // flow entries with stats: dump-flows
	MultipartAggregate    MultipartType = 2
	MultipartTable        MultipartType = 3
	MultipartPortStats    MultipartType = 4
	MultipartQueueStats   MultipartType = 5
	MultipartGroupStats   MultipartType = 6
	MultipartGroupDesc    MultipartType = 7
	MultipartGroupFeature MultipartType = 8
	MultipartMeterStats   MultipartType = 9
	MultipartMeterDesc    MultipartType = 10
	MultipartMeterFeature MultipartType = 11
	MultipartTableFeature MultipartType = 12
	MultipartPortDesc     MultipartType = 13 // port descriptions: dump-ports-desc
	MultipartTableDesc    MultipartType = 14
	MultipartQueueDesc    MultipartType = 15
	MultipartFlowMonitor  MultipartType = 16
	MultipartFlowStats    MultipartType = 17
	MultipartExperimenter MultipartType = 0xffff
)

// MultipartMore is the flag saying more parts of a request or reply follow.
const MultipartMore uint16 = 1

// MultipartRequest is a multipart request whose body this package does not
// model; it re-encodes byte for byte.
type MultipartRequest struct {
	Type  MultipartType
	Flags uint16
	Body  []byte
}

func (m *MultipartRequest) MsgType() MessageType { return TypeMultipartRequest }

func (m *MultipartRequest) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return append(appendMultipartHeader(b, m.Type, m.Flags), m.Body...), nil
}

// MultipartReply is a multipart reply whose body this package does not
// model; it re-encodes byte for byte.
type MultipartReply struct {
	Type  MultipartType
	Flags uint16
	Body  []byte
}

func (m *MultipartReply) MsgType() MessageType { return TypeMultipartReply }

func (m *MultipartReply) AppendBody(b []byte, _ uint32) ([]byte, error) {
	return append(appendMultipartHeader(b, m.Type, m.Flags), m.Body...), nil
}

// More reports whether more parts follow.
func (m *MultipartReply) More() bool { return m.Flags&MultipartMore != 0 }

func appendMultipartHeader(b []byte, t MultipartType, flags uint16) []byte {
	b = be.AppendUint16(b, uint16(t))
	b = be.AppendUint16(b, flags)
	return append(b, 0, 0, 0, 0)
}

func splitMultipart(what string, b []byte) (MultipartType, uint16, []byte, error) {
	if len(b) < 8 {
		return 0, 0, nil, decodeErr(what, 0, "body is %d bytes, want at least 8", len(b))
	}
	return MultipartType(be.Uint16(b)), be.Uint16(b[2:]), b[8:], nil
}

func decodeMultipartRequest(b []byte) (Message, error) {
	t, flags, body, err := splitMultipart("MULTIPART_REQUEST", b)
	if err != nil {
		return nil, err
	}
	switch t {
	case MultipartFlowDesc:
		return decodeFlowDescRequest(flags, body)
	case MultipartPortDesc:
		if len(body) == 8 && ofnum.IsZero(body[4:]) {
			return &PortDescRequest{Flags: flags, Port: ofnum.SentinelAsZero(be.Uint32(body), PortAny)}, nil
		}
	case MultipartGroupDesc:
		if len(body) == 8 && ofnum.IsZero(body[4:]) && be.Uint32(body) != 0 {
			return &GroupDescRequest{Flags: flags, GroupID: ofnum.SentinelAsZero(be.Uint32(body), GroupAll)}, nil
		}
	}
	return &MultipartRequest{Type: t, Flags: flags, Body: cloneBytes(body)}, nil
}

func decodeMultipartReply(b []byte) (Message, error) {
	t, flags, body, err := splitMultipart("MULTIPART_REPLY", b)
	if err != nil {
		return nil, err
	}
	switch t {
	case MultipartFlowDesc:
		return decodeFlowDescReply(flags, body)
	case MultipartPortDesc:
		return decodePortDescReply(flags, body)
	case MultipartGroupDesc:
		return decodeGroupDescReply(flags, body)
	}
	return &MultipartReply{Type: t, Flags: flags, Body: cloneBytes(body)}, nil
}

// FlowDescRequest asks for the flows matching a filter, with their
// statistics (OFPMP_FLOW_DESC request; what ovs-ofctl dump-flows sends).
// Zero OutPort and OutGroup mean any; Table TableAll means every table.
// Match selects flows whose match is at least as specific (a zero Match
// selects all).
type FlowDescRequest struct {
	Flags      uint16
	Table      uint8
	OutPort    uint32
	OutGroup   uint32
	Cookie     uint64
	CookieMask uint64
	Match      Match
}

func (m *FlowDescRequest) MsgType() MessageType { return TypeMultipartRequest }

func (m *FlowDescRequest) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendMultipartHeader(b, MultipartFlowDesc, m.Flags)
	b = append(b, m.Table, 0, 0, 0)
	b = be.AppendUint32(b, zeroAs(m.OutPort, PortAny))
	b = be.AppendUint32(b, zeroAs(m.OutGroup, GroupAny))
	b = append(b, 0, 0, 0, 0)
	b = be.AppendUint64(b, m.Cookie)
	b = be.AppendUint64(b, m.CookieMask)
	return m.Match.AppendBinary(b)
}

func decodeFlowDescRequest(flags uint16, b []byte) (Message, error) {
	if len(b) < 32 {
		return nil, decodeErr("flow desc request", 0, "body is %d bytes, want at least 32", len(b))
	}
	m := &FlowDescRequest{
		Flags: flags, Table: b[0], OutPort: ofnum.SentinelAsZero(be.Uint32(b[4:]), PortAny),
		OutGroup: ofnum.SentinelAsZero(be.Uint32(b[8:]), GroupAny), Cookie: be.Uint64(b[16:]), CookieMask: be.Uint64(b[24:]),
	}
	match, n, err := ParseMatch(b[32:])
	if err != nil {
		return nil, err
	}
	if 32+n != len(b) {
		return nil, decodeErr("flow desc request", 32+n, "%d bytes after the match", len(b)-32-n)
	}
	m.Match = match
	return m, nil
}

// FlowDescReply is one part of the reply to a FlowDescRequest. A dump is
// complete only after the part without the MultipartMore flag.
type FlowDescReply struct {
	Flags uint16
	Flows []Flow
}

func (m *FlowDescReply) MsgType() MessageType { return TypeMultipartReply }

// More reports whether more parts follow.
func (m *FlowDescReply) More() bool { return m.Flags&MultipartMore != 0 }

func (m *FlowDescReply) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendMultipartHeader(b, MultipartFlowDesc, m.Flags)
	var err error
	for i := range m.Flows {
		if b, err = m.Flows[i].AppendBinary(b); err != nil {
			return b, err
		}
	}
	return b, nil
}

func decodeFlowDescReply(flags uint16, b []byte) (Message, error) {
	m := &FlowDescReply{Flags: flags}
	err := eachFlowEntryOfBody(b, func(e FlowEntry) error {
		f, err := e.Decode()
		if err != nil {
			return err
		}
		m.Flows = append(m.Flows, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Flow is a flow entry as the switch reports it (ofp_flow_desc): what a
// line of ovs-ofctl dump-flows shows.
type Flow struct {
	Table        uint8
	Priority     uint16
	IdleTimeout  uint16
	HardTimeout  uint16
	Flags        FlowModFlags
	Importance   uint16
	Cookie       uint64
	Match        Match
	Stats        Stats
	Instructions []Instruction
}

// Actions returns the actions of the flow's ApplyActions instruction, if any.
func (f *Flow) Actions() []Action { return applyActionsOf(f.Instructions) }

// FlowMod returns an add of this flow: replaying it recreates the flow.
func (f *Flow) FlowMod() *FlowMod {
	return &FlowMod{
		Command: FlowAdd, Cookie: f.Cookie, Table: f.Table, Priority: f.Priority,
		IdleTimeout: f.IdleTimeout, HardTimeout: f.HardTimeout, Flags: f.Flags, Importance: f.Importance,
		Match: f.Match, Instructions: f.Instructions,
	}
}

// AppendBinary appends the ofp_flow_desc entry.
func (f *Flow) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, f.Table, 0)
	b = be.AppendUint16(b, f.Priority)
	b = be.AppendUint16(b, f.IdleTimeout)
	b = be.AppendUint16(b, f.HardTimeout)
	b = be.AppendUint16(b, uint16(f.Flags))
	b = be.AppendUint16(b, f.Importance)
	b = be.AppendUint64(b, f.Cookie)
	b, err := f.Match.AppendBinary(b)
	if err != nil {
		return b[:start], err
	}
	b = f.Stats.appendTo(b)
	if b, err = AppendInstructions(b, f.Instructions); err != nil {
		return b[:start], err
	}
	if err := putLen16(b, start, start, "flow entry"); err != nil {
		return b[:start], err
	}
	return b, nil
}

const flowDescFixedLen = 24

// Statistics fields (OXS), as bits of Stats.Present.
const (
	StatDuration    uint8 = 1 << 0
	StatIdleTime    uint8 = 1 << 1
	StatFlowCount   uint8 = 1 << 3
	StatPacketCount uint8 = 1 << 4
	StatByteCount   uint8 = 1 << 5
)

const oxsClassBasic = 0x8002

// Stats are a flow's OXS statistics (ofp_stats). Present says which were
// reported; unknown statistics are kept verbatim.
type Stats struct {
	Present      uint8
	DurationSec  uint32
	DurationNsec uint32
	IdleSec      uint32
	IdleNsec     uint32
	FlowCount    uint32
	PacketCount  uint64
	ByteCount    uint64
	Unknown      []byte
}

// Duration is how long the flow has been installed.
func (s Stats) Duration() time.Duration {
	return time.Duration(s.DurationSec)*time.Second + time.Duration(s.DurationNsec)
}

// IdleTime is how long the flow has seen no packet.
func (s Stats) IdleTime() time.Duration {
	return time.Duration(s.IdleSec)*time.Second + time.Duration(s.IdleNsec)
}

func appendOXS(b []byte, field int, v uint64, width int) []byte {
	b = be.AppendUint32(b, uint32(oxsClassBasic)<<16|uint32(field)<<9|uint32(width))
	if width == 4 {
		return be.AppendUint32(b, uint32(v))
	}
	return be.AppendUint64(b, v)
}

func (s *Stats) appendTo(b []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	if s.Present&StatDuration != 0 {
		b = appendOXS(b, 0, uint64(s.DurationSec)<<32|uint64(s.DurationNsec), 8)
	}
	if s.Present&StatIdleTime != 0 {
		b = appendOXS(b, 1, uint64(s.IdleSec)<<32|uint64(s.IdleNsec), 8)
	}
	if s.Present&StatPacketCount != 0 {
		b = appendOXS(b, 4, s.PacketCount, 8)
	}
	if s.Present&StatByteCount != 0 {
		b = appendOXS(b, 5, s.ByteCount, 8)
	}
	if s.Present&StatFlowCount != 0 {
		b = appendOXS(b, 3, uint64(s.FlowCount), 4)
	}
	b = append(b, s.Unknown...)
	be.PutUint16(b[start+2:], uint16(len(b)-start))
	return padTo8(b, start)
}

// statsLen checks the header of the ofp_stats at the start of b and
// returns its length without padding; the padded statistics fit in b.
func statsLen(b []byte) (int, error) {
	if len(b) < 4 {
		return 0, decodeErr("stats", 0, "need 4 bytes, have %d", len(b))
	}
	n := int(be.Uint16(b[2:]))
	if n < 4 || pad8(n) > len(b) {
		return 0, decodeErr("stats", 2, "length %d (padded %d) does not fit in %d bytes", n, pad8(n), len(b))
	}
	return n, nil
}

func (s *Stats) decode(b []byte) (int, error) {
	n, err := statsLen(b)
	if err != nil {
		return 0, err
	}
	*s = Stats{}
	for off := 4; off < n; {
		h, payload, k, err := oxmTLV(b[off:n])
		if err != nil {
			return 0, &DecodeError{What: "stats field", Offset: off, Err: err}
		}
		known := h>>16 == oxsClassBasic && h&oxmHeaderHasMask == 0
		field := int(h>>9) & 0x7f
		switch {
		case known && field == 0 && len(payload) == 8:
			s.Present |= StatDuration
			s.DurationSec, s.DurationNsec = be.Uint32(payload), be.Uint32(payload[4:])
		case known && field == 1 && len(payload) == 8:
			s.Present |= StatIdleTime
			s.IdleSec, s.IdleNsec = be.Uint32(payload), be.Uint32(payload[4:])
		case known && field == 3 && len(payload) == 4:
			s.Present |= StatFlowCount
			s.FlowCount = be.Uint32(payload)
		case known && field == 4 && len(payload) == 8:
			s.Present |= StatPacketCount
			s.PacketCount = be.Uint64(payload)
		case known && field == 5 && len(payload) == 8:
			s.Present |= StatByteCount
			s.ByteCount = be.Uint64(payload)
		default:
			s.Unknown = append(s.Unknown, b[off:off+k]...)
		}
		off += k
	}
	return pad8(n), nil
}

// PortDescRequest asks for port descriptions (OFPMP_PORT_DESC). Port 0
// means every port.
type PortDescRequest struct {
	Flags uint16
	Port  uint32
}

func (m *PortDescRequest) MsgType() MessageType { return TypeMultipartRequest }

func (m *PortDescRequest) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendMultipartHeader(b, MultipartPortDesc, m.Flags)
	b = be.AppendUint32(b, zeroAs(m.Port, PortAny))
	return append(b, 0, 0, 0, 0), nil
}

// PortDescReply is one part of the reply to a PortDescRequest.
type PortDescReply struct {
	Flags uint16
	Ports []Port
}

func (m *PortDescReply) MsgType() MessageType { return TypeMultipartReply }

// More reports whether more parts follow.
func (m *PortDescReply) More() bool { return m.Flags&MultipartMore != 0 }

func (m *PortDescReply) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = appendMultipartHeader(b, MultipartPortDesc, m.Flags)
	for i := range m.Ports {
		b = m.Ports[i].appendTo(b)
	}
	return b, nil
}

// Port describes a switch port (ofp_port). The Ethernet property, when the
// switch sends one, fills the feature and speed fields; other properties
// are kept verbatim in Properties.
type Port struct {
	PortNo      uint32
	HWAddr      net.HardwareAddr
	Name        string
	Config      uint32 // OFPPC_* bits
	State       uint32 // OFPPS_* bits
	HasEthernet bool
	Curr        uint32
	Advertised  uint32
	Supported   uint32
	Peer        uint32
	CurrSpeed   uint32 // kbps
	MaxSpeed    uint32 // kbps
	Properties  []byte
}

const portFixedLen = 40

func (p *Port) appendTo(b []byte) []byte {
	start := len(b)
	b = be.AppendUint32(b, p.PortNo)
	b = append(b, 0, 0, 0, 0)
	var hw [6]byte
	copy(hw[:], p.HWAddr)
	b = append(b, hw[:]...)
	b = append(b, 0, 0)
	var name [16]byte
	copy(name[:15], p.Name)
	b = append(b, name[:]...)
	b = be.AppendUint32(b, p.Config)
	b = be.AppendUint32(b, p.State)
	if p.HasEthernet {
		b = append(b, 0, 0, 0, 32, 0, 0, 0, 0)
		for _, v := range []uint32{p.Curr, p.Advertised, p.Supported, p.Peer, p.CurrSpeed, p.MaxSpeed} {
			b = be.AppendUint32(b, v)
		}
	}
	b = append(b, p.Properties...)
	be.PutUint16(b[start+4:], uint16(len(b)-start))
	return b
}

func decodePortDescReply(flags uint16, b []byte) (Message, error) {
	m := &PortDescReply{Flags: flags}
	for off := 0; off < len(b); {
		if len(b)-off < portFixedLen {
			return nil, decodeErr("port", off, "%d bytes, want at least %d", len(b)-off, portFixedLen)
		}
		n := int(be.Uint16(b[off+4:]))
		if n < portFixedLen || off+n > len(b) {
			return nil, decodeErr("port", off+4, "length %d does not fit in %d bytes", n, len(b)-off)
		}
		p := b[off : off+n]
		port := Port{
			PortNo: be.Uint32(p), HWAddr: net.HardwareAddr(cloneBytes(p[8:14])),
			Config: be.Uint32(p[32:]), State: be.Uint32(p[36:]),
		}
		name := p[16:32]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		port.Name = string(name)
		for q := portFixedLen; q < n; {
			if n-q < 4 {
				return nil, decodeErr("port property", off+q, "%d trailing bytes", n-q)
			}
			typ, k := be.Uint16(p[q:]), int(be.Uint16(p[q+2:]))
			if k < 4 || q+pad8(k) > n {
				return nil, decodeErr("port property", off+q, "length %d does not fit", k)
			}
			if typ == 0 && k == 32 && !port.HasEthernet {
				v := p[q+8:]
				port.HasEthernet = true
				port.Curr, port.Advertised, port.Supported = be.Uint32(v), be.Uint32(v[4:]), be.Uint32(v[8:])
				port.Peer, port.CurrSpeed, port.MaxSpeed = be.Uint32(v[12:]), be.Uint32(v[16:]), be.Uint32(v[20:])
			} else {
				port.Properties = append(port.Properties, p[q:q+pad8(k)]...)
			}
			q += pad8(k)
		}
		m.Ports = append(m.Ports, port)
		off += n
	}
	return m, nil
}
