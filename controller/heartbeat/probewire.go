package heartbeat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// The probe protocol's datagrams (see the package doc, "Fast detection").
// Every message is probeMessageSize bytes, in network byte order:
//
//	0  2  magic 0xEF 0x1B
//	2  1  version (probeVersion)
//	3  1  kind (probePing, probeAck, probePingRequest, probeNack)
//	4  4  interval in milliseconds: on a ping from the observer, how often
//	      it pings this agent (0 on a peer's or a witness's ping)
//	8  8  token: random, chosen by the asker, echoed by the answer
//	16 16 target address (IPv4 as IPv4-mapped IPv6), on a ping request
//	32 2  target port, on a ping request
//
// The token makes an answer unforgeable for anyone who did not see the
// question; it is not a signature (see the package doc on what a forged
// answer can and cannot do).
const (
	probeMessageSize = 34
	probeVersion     = 1
)

var probeMagic = [2]byte{0xEF, 0x1B}

// probeKind is what a probe message is.
type probeKind byte

const (
	// probePing asks the receiver to answer with probeAck.
	probePing probeKind = 1
	// probeAck answers a ping, or a ping request whose target answered.
	probeAck probeKind = 2
	// probePingRequest asks the receiver (a witness) to ping the target
	// and answer probeAck if it answers in time, probeNack if not.
	probePingRequest probeKind = 3
	// probeNack answers a ping request whose target did not answer.
	probeNack probeKind = 4
)

func (k probeKind) String() string {
	switch k {
	case probePing:
		return "ping"
	case probeAck:
		return "ack"
	case probePingRequest:
		return "ping-request"
	case probeNack:
		return "nack"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// probeMessage is one decoded datagram.
type probeMessage struct {
	kind     probeKind
	interval time.Duration
	token    uint64
	// target is set on a ping request only.
	target netip.AddrPort
}

var errProbeShort = errors.New("probe message too short")

// decodeProbe reads one datagram. Extra bytes past probeMessageSize are
// ignored (a later version may append fields); anything else malformed is
// an error, never a panic.
func decodeProbe(b []byte) (probeMessage, error) {
	if len(b) < probeMessageSize {
		return probeMessage{}, errProbeShort
	}
	if b[0] != probeMagic[0] || b[1] != probeMagic[1] {
		return probeMessage{}, errors.New("not a probe message: bad magic")
	}
	if b[2] != probeVersion {
		return probeMessage{}, fmt.Errorf("probe message version %d, want %d", b[2], probeVersion)
	}
	m := probeMessage{
		kind:     probeKind(b[3]),
		interval: time.Duration(binary.BigEndian.Uint32(b[4:8])) * time.Millisecond,
		token:    binary.BigEndian.Uint64(b[8:16]),
	}
	switch m.kind {
	case probePing, probeAck, probeNack:
	case probePingRequest:
		addr := netip.AddrFrom16([16]byte(b[16:32])).Unmap()
		port := binary.BigEndian.Uint16(b[32:34])
		if !addr.IsValid() || addr.IsUnspecified() || port == 0 {
			return probeMessage{}, errors.New("ping request without a target")
		}
		m.target = netip.AddrPortFrom(addr, port)
	default:
		return probeMessage{}, fmt.Errorf("unknown probe message %v", m.kind)
	}
	return m, nil
}

// encode appends m's datagram to b.
func (m probeMessage) encode(b []byte) []byte {
	var out [probeMessageSize]byte
	out[0], out[1], out[2], out[3] = probeMagic[0], probeMagic[1], probeVersion, byte(m.kind)
	binary.BigEndian.PutUint32(out[4:8], uint32(min(m.interval.Milliseconds(), 1<<32-1)))
	binary.BigEndian.PutUint64(out[8:16], m.token)
	if m.kind == probePingRequest {
		a := m.target.Addr().As16()
		copy(out[16:32], a[:])
		binary.BigEndian.PutUint16(out[32:34], m.target.Port())
	}
	return append(b, out[:]...)
}

// ObserverPing says whether datagram is a ping from the observer (a
// Prober's, which carries its interval), as a packet filter would tell it
// from a witness's or a peer's: for a test kit that cuts an agent off from
// its observer alone.
func ObserverPing(datagram []byte) bool {
	m, err := decodeProbe(datagram)
	return err == nil && m.kind == probePing && m.interval > 0
}
