package dnsresolve

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// tcpFrame wraps a TCP segment from port 53 (seq, flags, payload) in IPv4
// or IPv6 by dst's family, and Ethernet.
func tcpFrame(dst netip.Addr, seq uint32, flags byte, payload []byte) []byte {
	tcp := binary.BigEndian.AppendUint16(nil, dnsPort)
	tcp = binary.BigEndian.AppendUint16(tcp, 40000)
	tcp = binary.BigEndian.AppendUint32(tcp, seq)
	tcp = binary.BigEndian.AppendUint32(tcp, 1)
	tcp = append(tcp, 5<<4, flags, 0xff, 0xff, 0, 0, 0, 0)
	tcp = append(tcp, payload...)
	frame := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}
	if dst.Is4() {
		frame = append(frame, 0x08, 0x00)
		ip := []byte{0x45, 0, 0, 0, 0, 1, 0, 0, 64, protocolTCP, 0, 0, 172, 31, 0, 53}
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4MinHeaderLen+len(tcp)))
		ip = append(ip, dst.AsSlice()...)
		return append(append(frame, ip...), tcp...)
	}
	frame = append(frame, 0x86, 0xdd)
	ip := []byte{0x60, 0, 0, 0, 0, 0, protocolTCP, 64}
	binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)))
	ip = append(ip, netip.MustParseAddr("fd00::53").AsSlice()...)
	ip = append(ip, dst.AsSlice()...)
	return append(append(frame, ip...), tcp...)
}

// framed is msg with its two-byte length, as DNS over TCP sends it.
func framed(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
}

// TestTCPReplies: messages split over segments come out whole once their
// last byte arrives; two in one segment come out together; a
// retransmission adds nothing twice; a gap loses the stream until its end;
// a segment of a stream whose start was not seen teaches nothing; FIN
// ends a stream; IPv6 too.
func TestTCPReplies(t *testing.T) {
	first, second := bytes.Repeat([]byte{0xa1}, 300), bytes.Repeat([]byte{0xb2}, 20)
	for _, pod := range []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:10:244:1::5")} {
		r := NewTCPReplies()
		add := func(seq uint32, flags byte, payload []byte) [][]byte {
			t.Helper()
			got, err := r.Add(tcpFrame(pod, seq, flags, payload))
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		stream := append(framed(first), framed(second)...)
		if got := add(999, tcpFlagSYN, nil); len(got) != 0 {
			t.Fatalf("SYN-ACK gave %d messages", len(got))
		}
		if got := add(1000, 0, stream[:100]); len(got) != 0 {
			t.Fatalf("a message's first part gave %d messages", len(got))
		}
		if got := add(1000, 0, stream[:100]); len(got) != 0 {
			t.Fatalf("a retransmission gave %d messages", len(got))
		}
		// The rest of the first message and all of the second, with 50
		// bytes already seen at its front.
		got := add(1050, 0, stream[50:])
		if len(got) != 2 || !bytes.Equal(got[0], first) || !bytes.Equal(got[1], second) {
			t.Fatalf("%s: got %d messages %x, want the two", pod, len(got), got)
		}
		// A gap: the next segment is not the next byte; the stream is
		// lost, and so is what follows.
		next := uint32(1000 + len(stream))
		if got := add(next+10, 0, framed(second)); len(got) != 0 {
			t.Fatalf("a segment past a gap gave %d messages", len(got))
		}
		if got := add(next+10+uint32(len(framed(second))), 0, framed(second)); len(got) != 0 {
			t.Fatalf("a segment after a lost stream gave %d messages", len(got))
		}
		// A stream whose start (SYN-ACK) was never seen teaches nothing.
		if got := add(5000, 0, framed(second)); len(got) != 0 {
			t.Fatalf("an unfollowed stream gave %d messages", len(got))
		}
		// A new connection, ended by FIN with its last message.
		add(7999, tcpFlagSYN, nil)
		if got := add(8000, tcpFlagFIN, framed(second)); len(got) != 1 || !bytes.Equal(got[0], second) {
			t.Fatalf("the FIN's segment gave %x", got)
		}
		if got := add(8000+uint32(len(framed(second))), 0, framed(second)); len(got) != 0 {
			t.Fatalf("a segment after the FIN gave %d messages", len(got))
		}
	}
	if _, err := NewTCPReplies().Add(udpFrame(framed(first), netip.MustParseAddr("10.244.1.5"), dnsPort, false)); err == nil {
		t.Error("a UDP frame was taken for a TCP segment")
	}
}

// TestTCPRepliesBound: the streams followed stay within maxTCPStreams.
func TestTCPRepliesBound(t *testing.T) {
	r := NewTCPReplies()
	base := netip.MustParseAddr("10.244.0.0")
	for i := 0; i < maxTCPStreams+100; i++ {
		base = base.Next()
		if _, err := r.Add(tcpFrame(base, 1, tcpFlagSYN, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.streams); n > maxTCPStreams {
		t.Errorf("%d streams followed; the bound is %d", n, maxTCPStreams)
	}
}

func FuzzTCPReplies(f *testing.F) {
	pod := netip.MustParseAddr("10.244.1.5")
	f.Add(tcpFrame(pod, 1, tcpFlagSYN, nil), tcpFrame(pod, 2, 0, framed([]byte("abc"))))
	f.Add(tcpFrame(netip.MustParseAddr("fd00::5"), 7, tcpFlagSYN, nil), tcpFrame(netip.MustParseAddr("fd00::5"), 0xffffffff, tcpFlagFIN, []byte{0, 9, 1}))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		r := NewTCPReplies()
		for _, frame := range [][]byte{a, b, a} {
			messages, _ := r.Add(frame)
			for _, m := range messages {
				if len(m) > maxTCPBuffer {
					t.Fatalf("a %d-byte message", len(m))
				}
			}
		}
	})
}
