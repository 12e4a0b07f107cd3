package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SCTP over raw sockets: the machines the tests run on may have no SCTP in
// their kernel, and a raw socket of protocol 132 needs none. A client
// sends an INIT (RFC 4960 §3.3.2) and waits for the INIT ACK; the server
// records each INIT it receives, with the address it arrived at, and
// answers it. That is the association's first exchange, which is all a
// redirect's conntrack and NAT see of a new association.

// sctpProtocol is SCTP's IP protocol number.
const sctpProtocol = 132

// SCTP chunk types and the State Cookie parameter (RFC 4960 §3.3, §3.3.3).
const (
	sctpInit        = 1
	sctpInitAck     = 2
	sctpStateCookie = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpPacket is an SCTP packet of one INIT or INIT ACK chunk: ports, the
// verification tag of its common header, and the chunk's initiate tag;
// an INIT ACK carries a State Cookie. Its checksum is CRC32c, as RFC 4960
// appendix B places it.
func sctpPacket(src, dst uint16, vtag uint32, chunk uint8, initTag uint32) []byte {
	b := make([]byte, 12, 48)
	binary.BigEndian.PutUint16(b[0:], src)
	binary.BigEndian.PutUint16(b[2:], dst)
	binary.BigEndian.PutUint32(b[4:], vtag)
	length := 20
	if chunk == sctpInitAck {
		length += 8
	}
	b = append(b, chunk, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(length))
	b = binary.BigEndian.AppendUint32(b, initTag)
	b = binary.BigEndian.AppendUint32(b, 65536)     // a_rwnd
	b = binary.BigEndian.AppendUint16(b, 1)         // outbound streams
	b = binary.BigEndian.AppendUint16(b, 1)         // inbound streams
	b = binary.BigEndian.AppendUint32(b, initTag^1) // initial TSN
	if chunk == sctpInitAck {
		b = binary.BigEndian.AppendUint16(b, sctpStateCookie)
		b = binary.BigEndian.AppendUint16(b, 8)
		b = binary.BigEndian.AppendUint32(b, initTag^0xc00c1e)
	}
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, castagnoli))
	return b
}

// sctpHeader reads an SCTP packet's ports, verification tag, first chunk
// type and initiate tag; false if it is too short.
func sctpHeader(b []byte) (src, dst uint16, vtag uint32, chunk uint8, initTag uint32, ok bool) {
	if len(b) < 20 {
		return 0, 0, 0, 0, 0, false
	}
	return binary.BigEndian.Uint16(b[0:]), binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint32(b[4:]), b[12], binary.BigEndian.Uint32(b[16:]), true
}

// rawSCTP opens a raw SCTP socket of addr's family in namespace ns, bound
// to addr unless it is invalid.
func rawSCTP(ns string, family int, addr netip.Addr) (int, error) {
	fd := -1
	err := InNetns(ns, func() error {
		var err error
		if fd, err = unix.Socket(family, unix.SOCK_RAW, sctpProtocol); err != nil {
			return err
		}
		if addr.IsValid() {
			return unix.Bind(fd, sockaddr(addr, 0))
		}
		return nil
	})
	if err != nil && fd >= 0 {
		unix.Close(fd)
	}
	return fd, err
}

func sockaddr(addr netip.Addr, port int) unix.Sockaddr {
	if addr.Is4() {
		return &unix.SockaddrInet4{Addr: addr.As4(), Port: port}
	}
	return &unix.SockaddrInet6{Addr: addr.As16(), Port: port}
}

func fromSockaddr(sa unix.Sockaddr) netip.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(sa.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(sa.Addr)
	}
	return netip.Addr{}
}

// sctpPayload is the SCTP packet in what a raw socket of family read: an
// IPv4 raw socket gives the IP header too, an IPv6 one does not.
func sctpPayload(family int, b []byte) []byte {
	if family == unix.AF_INET {
		if len(b) < 20 || int(b[0]&0xf)*4 > len(b) {
			return nil
		}
		return b[int(b[0]&0xf)*4:]
	}
	return b
}

// SCTPInit is an INIT a server received: from where, at which of its
// addresses and ports.
type SCTPInit struct {
	From, At netip.AddrPort
}

// SCTPServer answers the INITs that reach a host's addresses.
type SCTPServer struct {
	mu    sync.Mutex
	inits []SCTPInit
}

// ServeSCTP starts an SCTPServer on addrs of the host (its own IPv4 and
// IPv6 addresses when none are given); it stops when the test ends.
func (h *Host) ServeSCTP(t testing.TB, addrs ...netip.Addr) *SCTPServer {
	t.Helper()
	if len(addrs) == 0 {
		addrs = []netip.Addr{h.IP, h.IP6}
	}
	s := &SCTPServer{}
	for _, addr := range addrs {
		family := unix.AF_INET6
		if addr.Is4() {
			family = unix.AF_INET
		}
		fd, err := rawSCTP(h.Netns, family, addr)
		if err != nil {
			t.Fatalf("topology: SCTP server on %s of %s: %v", addr, h.Name, err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		go s.serve(fd, family, addr)
	}
	return s
}

func (s *SCTPServer) serve(fd, family int, at netip.Addr) {
	buf := make([]byte, 2048)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return // closed
		}
		src, dst, _, chunk, initTag, ok := sctpHeader(sctpPayload(family, buf[:n]))
		if !ok || chunk != sctpInit {
			continue
		}
		peer := fromSockaddr(from)
		s.mu.Lock()
		s.inits = append(s.inits, SCTPInit{From: netip.AddrPortFrom(peer, src), At: netip.AddrPortFrom(at, dst)})
		s.mu.Unlock()
		_ = unix.Sendto(fd, sctpPacket(dst, src, initTag, sctpInitAck, rand.Uint32()|1), 0, sockaddr(peer, 0))
	}
}

// Inits returns the INITs received so far, in arrival order.
func (s *SCTPServer) Inits() []SCTPInit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SCTPInit(nil), s.inits...)
}

// SCTPInit sends an INIT from the pod to server and waits up to
// dialTimeout for the INIT ACK, which must come from server's address and
// port and carry the INIT's tag; it returns the source port it used.
func (p *Pod) SCTPInit(server netip.AddrPort) (uint16, error) {
	family := unix.AF_INET6
	if server.Addr().Is4() {
		family = unix.AF_INET
	}
	fd, err := rawSCTP(p.Netns, family, netip.Addr{})
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	srcPort := uint16(20000 + rand.IntN(20000))
	tag := rand.Uint32() | 1
	if err := unix.Sendto(fd, sctpPacket(srcPort, server.Port(), 0, sctpInit, tag), 0, sockaddr(server.Addr(), 0)); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(dialTimeout)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		tv := unix.NsecToTimeval(time.Until(deadline).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return 0, err
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, err
		}
		src, dst, vtag, chunk, _, ok := sctpHeader(sctpPayload(family, buf[:n]))
		if ok && chunk == sctpInitAck && fromSockaddr(from) == server.Addr() && src == server.Port() && dst == srcPort && vtag == tag {
			return srcPort, nil
		}
	}
	return 0, fmt.Errorf("sctp INIT from pod %s to %s: no INIT ACK within %v", p.Name, server, dialTimeout)
}
