package dnsresolve

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
)

// replyFrom asks server for name's records of type qtype over real UDP and
// returns the reply's bytes as they came.
func replyFrom(t *testing.T, server *dnstest.Server, name string, qtype dnsmessage.Type) []byte {
	t.Helper()
	q := dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}
	msg, err := buildQuery(0x1234, q)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", server.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// udpFrame wraps payload in UDP from srcPort and IPv4 or IPv6 (by dst's
// family) and Ethernet, optionally with an 802.1Q tag, as Open vSwitch
// would hand a packet over.
func udpFrame(payload []byte, dst netip.Addr, srcPort uint16, vlan bool) []byte {
	udp := binary.BigEndian.AppendUint16(nil, srcPort)
	udp = binary.BigEndian.AppendUint16(udp, 40000)
	udp = binary.BigEndian.AppendUint16(udp, uint16(udpHeaderLen+len(payload)))
	udp = append(binary.BigEndian.AppendUint16(udp, 0), payload...)
	frame := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}
	if vlan {
		frame = append(frame, 0x81, 0x00, 0x00, 0x07)
	}
	if dst.Is4() {
		frame = append(frame, 0x08, 0x00)
		ip := []byte{0x45, 0, 0, 0, 0, 1, 0, 0, 64, protocolUDP, 0, 0, 172, 31, 0, 53}
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4MinHeaderLen+len(udp)))
		ip = append(ip, dst.AsSlice()...)
		return append(append(frame, ip...), udp...)
	}
	frame = append(frame, 0x86, 0xdd)
	ip := []byte{0x60, 0, 0, 0, 0, 0, protocolUDP, 64}
	binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
	ip = append(ip, netip.MustParseAddr("fd00::53").AsSlice()...)
	ip = append(ip, dst.AsSlice()...)
	return append(append(frame, ip...), udp...)
}

// TestLearnFrame: replies a real DNS server sent, framed as a pod receives
// them, fill the names they answer: a wildcard from a name it covers
// (through a CNAME chain, with the chain's least TTL), in IPv4 and IPv6
// frames, with a VLAN tag; not a name two labels below the wildcard, nor a
// negative answer; and frames that are no DNS reply are refused.
func TestLearnFrame(t *testing.T) {
	server := startServer(t, "127.0.0.1:0")
	server.Set("a.wild.test", dnstest.CNAME("edge.cdn.test", 30))
	server.Set("edge.cdn.test", dnstest.A("198.51.100.7", 20), dnstest.AAAA("2001:db8::7", 20))
	server.Set("b.a.wild.test", dnstest.A("198.51.100.9", 20))
	server.Set("exact.test", dnstest.A("198.51.100.8", 20))
	clock := newFakeClock()
	r, err := New(testConfig(clock, server))
	if err != nil {
		t.Fatal(err)
	}
	r.SetNames([]string{"*.wild.test", "exact.test"})
	pod4, pod6 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:10:244:1::5")

	n, err := r.LearnFrame(udpFrame(replyFrom(t, server, "a.wild.test", dnsmessage.TypeA), pod4, 53, false))
	if err != nil || n != 1 {
		t.Fatalf("an A reply through a CNAME: %d addresses, %v", n, err)
	}
	wantSnapshot(t, r, "*.wild.test", addrs("198.51.100.7"))
	if got := expiryOf(r, "*.wild.test", netip.MustParseAddr("198.51.100.7")); !got.Equal(clock.Now().Add(addressLifetime(20*time.Second, r.cfg))) {
		t.Errorf("learned address expires at %v, want the chain's least TTL (20 s) from now", got)
	}
	if _, err := r.LearnFrame(udpFrame(replyFrom(t, server, "A.Wild.Test", dnsmessage.TypeAAAA), pod6, 53, true)); err != nil {
		t.Fatalf("an AAAA reply over IPv6 with a VLAN tag: %v", err)
	}
	wantSnapshot(t, r, "*.wild.test", addrs("198.51.100.7", "2001:db8::7"))
	if _, err := r.LearnFrame(udpFrame(replyFrom(t, server, "b.a.wild.test", dnsmessage.TypeA), pod4, 53, false)); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, r, "*.wild.test", addrs("198.51.100.7", "2001:db8::7")) // one label only
	if n, err := r.LearnFrame(udpFrame(replyFrom(t, server, "gone.wild.test", dnsmessage.TypeA), pod4, 53, false)); err != nil || n != 0 {
		t.Errorf("NXDOMAIN: %d addresses, %v; want nothing learned and no error", n, err)
	}
	if _, err := r.LearnFrame(udpFrame(replyFrom(t, server, "exact.test", dnsmessage.TypeA), pod4, 53, false)); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, r, "exact.test", addrs("198.51.100.8"))
	if snap := r.Snapshot(); snap["a.wild.test"] != nil {
		t.Errorf("a name nobody wants was filed: %v", snap)
	}

	reply := replyFrom(t, server, "a.wild.test", dnsmessage.TypeA)
	query, _ := buildQuery(7, dnsmessage.Question{Name: dnsmessage.MustNewName("a.wild.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	fragment := udpFrame(reply, pod4, 53, false)
	binary.BigEndian.PutUint16(fragment[ethernetHeaderLen+6:], 0x0010) // offset 128 bytes
	for what, frame := range map[string][]byte{
		"a query":           udpFrame(query, pod4, 53, false),
		"from port 5353":    udpFrame(reply, pod4, 5353, false),
		"a later fragment":  fragment,
		"a truncated frame": udpFrame(reply, pod4, 53, false)[:40],
		"an ARP frame":      append([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x06}, make([]byte, 28)...),
		"garbage after UDP": udpFrame([]byte{1, 2, 3}, pod4, 53, false),
		"an empty frame":    nil,
		"an IPv6 non-UDP":   func() []byte { f := udpFrame(reply, pod6, 53, false); f[ethernetHeaderLen+6] = 6; return f }(),
	} {
		if _, err := r.LearnFrame(frame); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

// FuzzLearnFrame: LearnFrame never panics, whatever the frame holds.
func FuzzLearnFrame(f *testing.F) {
	reply := []byte{0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 1, 'a', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
		0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 198, 51, 100, 7}
	f.Add(udpFrame(reply, netip.MustParseAddr("10.244.1.5"), 53, false))
	f.Add(udpFrame(reply, netip.MustParseAddr("fd00:10:244:1::5"), 53, true))
	r, err := New(Config{Servers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")}})
	if err != nil {
		f.Fatal(err)
	}
	r.SetNames([]string{"a.test", "*.test"})
	f.Fuzz(func(t *testing.T, frame []byte) {
		_, _ = r.LearnFrame(frame)
	})
}
