package dnsresolve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DNS over TCP (RFC 1035 4.2.2, RFC 7766): each message is preceded by
// its length in two bytes, and a reply may span segments, or a segment
// hold several replies. TCPReplies follows the streams from port 53 that
// the bridge hands the agent, segment by segment, and gives back each
// reply when its last byte arrives.

// TCP stream bounds. Each followed stream costs at most maxTCPBuffer
// bytes; maxTCPStreams bounds them all (a node's pods rarely hold more
// than a few DNS-over-TCP connections at once: truncated answers, zone
// transfers). Past the bound, the stream idle longest is dropped (its
// next reply is not learned). tcpStreamIdle drops a stream whose end the
// agent never saw (no FIN or RST crossed the bridge). Higher bounds keep
// more streams through bursts, at their memory; a shorter idle time
// forgets slow streams sooner.
const (
	maxTCPStreams = 1024
	maxTCPBuffer  = 2 + 65535 // one whole message and its length
	tcpStreamIdle = 2 * time.Minute
)

// TCP header fields TCPReplies reads.
const (
	tcpMinHeaderLen = 20
	tcpFlagFIN      = 0x01
	tcpFlagSYN      = 0x02
	tcpFlagRST      = 0x04
)

// TCPReplies reassembles DNS replies from TCP segments from port 53. Safe
// for concurrent use.
type TCPReplies struct {
	now func() time.Time

	mu      sync.Mutex
	streams map[tcpStreamKey]*tcpStream
}

type tcpStreamKey struct {
	addrs            ipPair
	srcPort, dstPort uint16
}

// tcpStream is one direction of a connection, server to pod: the bytes
// after the last whole message, and the sequence number of the next byte.
type tcpStream struct {
	next     uint32
	buf      []byte
	lastSeen time.Time
}

// NewTCPReplies returns a reassembler with no stream followed yet.
func NewTCPReplies() *TCPReplies {
	return &TCPReplies{now: time.Now, streams: map[tcpStreamKey]*tcpStream{}}
}

// Add takes a frame (from its Ethernet header) carrying a TCP segment from
// port 53 and returns the DNS messages whose last byte it carries, in
// order. A segment in order extends its stream; one that repeats bytes
// already seen adds only the rest; one past a gap (a segment the bridge
// did not hand over) drops what the stream held, and the stream follows
// on from the next message boundary it can be sure of, a connection's
// start (SYN), or never. An error is for a frame that is no such segment.
// It never panics, whatever the frame holds (FuzzTCPReplies).
func (t *TCPReplies) Add(frame []byte) ([][]byte, error) {
	addrs, segment, err := transportOf(frame, protocolTCP)
	if err != nil {
		return nil, err
	}
	if len(segment) < tcpMinHeaderLen {
		return nil, errors.New("truncated TCP header")
	}
	key := tcpStreamKey{addrs: addrs, srcPort: binary.BigEndian.Uint16(segment), dstPort: binary.BigEndian.Uint16(segment[2:])}
	if key.srcPort != dnsPort {
		return nil, fmt.Errorf("TCP from port %d, not %d", key.srcPort, dnsPort)
	}
	headerLen := int(segment[12]>>4) * 4
	if headerLen < tcpMinHeaderLen || headerLen > len(segment) {
		return nil, fmt.Errorf("TCP header length %d in %d bytes", headerLen, len(segment))
	}
	seq, flags, payload := binary.BigEndian.Uint32(segment[4:]), segment[13], segment[headerLen:]

	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	s := t.streams[key]
	if flags&tcpFlagSYN != 0 {
		// The server's SYN-ACK: the stream starts at the next byte, a
		// message boundary.
		s = &tcpStream{next: seq + 1}
		t.keep(key, s, now)
	}
	var messages [][]byte
	if s != nil && len(payload) > 0 {
		s.lastSeen = now
		messages = s.take(seq, payload)
		if s.buf == nil && s.next == 0 {
			delete(t.streams, key) // a gap: the stream is lost
		}
	}
	if flags&(tcpFlagFIN|tcpFlagRST) != 0 {
		delete(t.streams, key)
	}
	return messages, nil
}

// keep follows s under key, dropping idle streams, and the one idle
// longest when there are too many.
func (t *TCPReplies) keep(key tcpStreamKey, s *tcpStream, now time.Time) {
	s.lastSeen = now
	if len(t.streams) >= maxTCPStreams {
		var oldest tcpStreamKey
		var oldestSeen time.Time
		for k, other := range t.streams {
			if now.Sub(other.lastSeen) > tcpStreamIdle {
				delete(t.streams, k)
				continue
			}
			if oldestSeen.IsZero() || other.lastSeen.Before(oldestSeen) {
				oldest, oldestSeen = k, other.lastSeen
			}
		}
		if len(t.streams) >= maxTCPStreams {
			delete(t.streams, oldest)
		}
	}
	t.streams[key] = s
}

// take adds a segment's payload at sequence number seq and returns the
// messages it completes. A gap empties the stream (buf nil, next 0).
func (s *tcpStream) take(seq uint32, payload []byte) [][]byte {
	// Bytes before next were seen already (a retransmission).
	if behind := s.next - seq; int32(behind) > 0 {
		if int(behind) >= len(payload) {
			return nil
		}
		payload = payload[behind:]
		seq = s.next
	}
	if seq != s.next {
		s.buf, s.next = nil, 0
		return nil
	}
	s.next += uint32(len(payload))
	s.buf = append(s.buf, payload...)
	if len(s.buf) > maxTCPBuffer {
		s.buf, s.next = nil, 0
		return nil
	}
	var messages [][]byte
	for len(s.buf) >= 2 {
		n := int(binary.BigEndian.Uint16(s.buf))
		if len(s.buf) < 2+n {
			break
		}
		messages = append(messages, append([]byte(nil), s.buf[2:2+n]...))
		s.buf = s.buf[2+n:]
	}
	if len(s.buf) == 0 {
		s.buf = []byte{} // empty, not lost
	}
	return messages
}
