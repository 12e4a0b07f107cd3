// Package dnstest is a small authoritative DNS server for tests: it
// answers A and AAAA queries (and follows its own CNAMEs) from records set
// at run time, over UDP and TCP on one port, and counts the queries it
// gets. It truncates UDP replies over 512 bytes (it offers no EDNS(0)),
// so clients must retry over TCP as real servers make them.
//
// It is for the resolver's tests and for integration tests that run it
// as an external host's DNS server inside a network namespace: Start binds
// its sockets in the network namespace of the calling thread, and they
// stay there.
package dnstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// MaxUDPReply is the largest UDP reply; a larger one goes out truncated
// (TC set, no records).
const MaxUDPReply = 512

// maxChain bounds the CNAMEs followed in one answer.
const maxChain = 8

// Server is a running test DNS server.
type Server struct {
	udp  *net.UDPConn
	tcp  *net.TCPListener
	addr netip.AddrPort

	mu       sync.Mutex
	names    map[string][]Record
	queries  map[string]int
	tcpCount map[string]int
	rotation map[rotationKey]int
	conns    map[net.Conn]struct{}
	closed   bool

	wg sync.WaitGroup
}

type rotationKey struct {
	name  string
	qtype dnsmessage.Type
}

// Start listens on UDP and TCP at addr ("127.0.0.1:0", "[::1]:5353",
// ":0"): port 0 picks one port free for both.
func Start(addr string) (*Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	tries := 1
	if port == "0" || port == "" {
		tries = 20
	}
	var lastErr error
	for range tries {
		udpAddr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, port))
		if err != nil {
			return nil, err
		}
		udp, err := net.ListenUDP("udp", udpAddr)
		if err != nil {
			return nil, err
		}
		bound := udp.LocalAddr().(*net.UDPAddr).AddrPort()
		tcpAddr := &net.TCPAddr{IP: udpAddr.IP, Port: int(bound.Port()), Zone: udpAddr.Zone}
		tcp, err := net.ListenTCP("tcp", tcpAddr)
		if err != nil {
			udp.Close()
			lastErr = err
			continue // the port is taken for TCP: pick another
		}
		s := &Server{
			udp: udp, tcp: tcp, addr: netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port()),
			names: map[string][]Record{}, queries: map[string]int{}, tcpCount: map[string]int{},
			rotation: map[rotationKey]int{}, conns: map[net.Conn]struct{}{},
		}
		s.wg.Add(2)
		go s.serveUDP()
		go s.serveTCP()
		return s, nil
	}
	return nil, fmt.Errorf("no port free for both UDP and TCP on %s: %w", host, lastErr)
}

// Addr is the address and port the server listens on (UDP and TCP).
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Set replaces the records of name (any case, final dot or not). With no
// record the name exists with no data: every query gets NODATA. A name
// never Set gets NXDOMAIN.
func (s *Server) Set(name string, records ...Record) {
	key := key(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[key] = append([]Record(nil), records...)
	for k := range s.rotation {
		if k.name == key {
			delete(s.rotation, k)
		}
	}
}

// Queries is how many queries for name (any type, UDP or TCP) came.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[key(name)]
}

// TCPQueries is how many of them came over TCP.
func (s *Server) TCPQueries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tcpCount[key(name)]
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := errors.Join(s.udp.Close(), s.tcp.Close())
	s.wg.Wait()
	return err
}

func key(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		reply := s.handle(buf[:n], false)
		if reply != nil {
			_, _ = s.udp.WriteToUDPAddrPort(reply, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		conn, err := s.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(conn)
	}
}

// serveConn answers length-prefixed queries on one connection until the
// client closes it.
func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	for {
		var length [2]byte
		if _, err := io.ReadFull(conn, length[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(length[:]))
		if _, err := io.ReadFull(conn, query); err != nil {
			return
		}
		reply := s.handle(query, true)
		if reply == nil {
			continue
		}
		framed := binary.BigEndian.AppendUint16(nil, uint16(len(reply)))
		if _, err := conn.Write(append(framed, reply...)); err != nil {
			return
		}
	}
}

// handle answers one query; nil means no reply.
func (s *Server) handle(query []byte, overTCP bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := key(q.Name.String())

	s.mu.Lock()
	s.queries[name]++
	if overTCP {
		s.tcpCount[name]++
	}
	res := s.resolveLocked(name, q.Type)
	s.mu.Unlock()

	if res.drop {
		return nil
	}
	reply, err := buildReply(h, q, res, false)
	if err != nil {
		return nil
	}
	if !overTCP && len(reply) > MaxUDPReply {
		reply, err = buildReply(h, q, res, true)
		if err != nil {
			return nil
		}
	}
	return reply
}

// resolution is the reply to build: its code and records.
type resolution struct {
	rcode   dnsmessage.RCode
	drop    bool
	answers []dnsmessage.Resource
	soa     *dnsmessage.Resource
}

// resolveLocked answers qtype for name from the records, following
// CNAMEs.
func (s *Server) resolveLocked(name string, qtype dnsmessage.Type) resolution {
	var res resolution
	current := name
	for range maxChain {
		records, ok := s.names[current]
		if !ok {
			res.rcode = dnsmessage.RCodeNameError
			return res
		}
		negTTL, hasNeg := uint32(0), false
		var cname *Record
		var addrs []Record
		roundRobin := 0
		for i, rec := range records {
			switch rec.Kind {
			case KindDrop:
				res.drop = true
				return res
			case KindServFail:
				res.rcode = dnsmessage.RCodeServerFailure
				return res
			case KindRefused:
				res.rcode = dnsmessage.RCodeRefused
				return res
			case KindNegativeTTL:
				negTTL, hasNeg = rec.TTL, true
			case KindCNAME:
				cname = &records[i]
			case KindRoundRobin:
				roundRobin = rec.N
			case KindA:
				if qtype == dnsmessage.TypeA {
					addrs = append(addrs, rec)
				}
			case KindAAAA:
				if qtype == dnsmessage.TypeAAAA {
					addrs = append(addrs, rec)
				}
			}
		}
		owner := dnsmessage.MustNewName(current + ".")
		if hasNeg {
			res.soa = soaRecord(owner, negTTL)
		}
		for _, rec := range records {
			if rec.Kind == KindNXDomain {
				res.rcode = dnsmessage.RCodeNameError
				return res
			}
		}
		if cname != nil && qtype != dnsmessage.TypeCNAME {
			target := key(cname.Target)
			res.answers = append(res.answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: cname.TTL},
				Body:   &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(target + ".")},
			})
			current = target
			continue
		}
		if roundRobin > 0 && roundRobin < len(addrs) {
			k := rotationKey{name: current, qtype: qtype}
			start := s.rotation[k] % len(addrs)
			s.rotation[k]++
			picked := make([]Record, 0, roundRobin)
			for i := range roundRobin {
				picked = append(picked, addrs[(start+i)%len(addrs)])
			}
			addrs = picked
		}
		for _, rec := range addrs {
			hdr := dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: rec.TTL}
			if rec.Kind == KindA {
				res.answers = append(res.answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: rec.Addr.As4()}})
			} else {
				res.answers = append(res.answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: rec.Addr.As16()}})
			}
		}
		return res
	}
	res.rcode = dnsmessage.RCodeServerFailure // a CNAME chain too long or a loop
	res.answers = nil
	return res
}

func soaRecord(owner dnsmessage.Name, ttl uint32) *dnsmessage.Resource {
	return &dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: ttl},
		Body: &dnsmessage.SOAResource{
			NS: dnsmessage.MustNewName("ns.dnstest."), MBox: dnsmessage.MustNewName("hostmaster.dnstest."),
			Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, MinTTL: ttl,
		},
	}
}

// buildReply packs the reply; truncated leaves the records out and sets
// TC.
func buildReply(qh dnsmessage.Header, q dnsmessage.Question, res resolution, truncated bool) ([]byte, error) {
	h := dnsmessage.Header{
		ID: qh.ID, Response: true, Authoritative: true, RecursionDesired: qh.RecursionDesired,
		RecursionAvailable: true, RCode: res.rcode, Truncated: truncated,
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if truncated {
		return b.Finish()
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, rr := range res.answers {
		var err error
		switch body := rr.Body.(type) {
		case *dnsmessage.AResource:
			err = b.AResource(rr.Header, *body)
		case *dnsmessage.AAAAResource:
			err = b.AAAAResource(rr.Header, *body)
		case *dnsmessage.CNAMEResource:
			err = b.CNAMEResource(rr.Header, *body)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := b.StartAuthorities(); err != nil {
		return nil, err
	}
	negative := res.rcode == dnsmessage.RCodeNameError || (res.rcode == dnsmessage.RCodeSuccess && !hasType(res.answers, q.Type))
	if res.soa != nil && negative {
		if err := b.SOAResource(res.soa.Header, *res.soa.Body.(*dnsmessage.SOAResource)); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func hasType(answers []dnsmessage.Resource, t dnsmessage.Type) bool {
	for _, rr := range answers {
		switch rr.Body.(type) {
		case *dnsmessage.AResource:
			if t == dnsmessage.TypeA {
				return true
			}
		case *dnsmessage.AAAAResource:
			if t == dnsmessage.TypeAAAA {
				return true
			}
		}
	}
	return false
}
