package bfd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

const (
	// ControlPort is where single-hop Control packets go (RFC 5881).
	ControlPort = 3784
	// The source ports of sessions (RFC 5881 section 4).
	minSourcePort, maxSourcePort = 49152, 65535
	// gtsmTTL is the only TTL (hop limit) sent and accepted: a packet
	// that crossed a router cannot carry it (RFC 5881 section 5).
	gtsmTTL = 255
	// rxQueue bounds the packets waiting for one session's goroutine; a
	// flood beyond it is dropped rather than let block the receiver.
	rxQueue = 16
	// adminDownPackets is how many AdminDown packets a removed session
	// sends before it closes, so that the peer sees an administrative
	// stop rather than a failure even if one is lost.
	adminDownPackets = 3
	// readBuffer holds a Control packet with the largest authentication
	// section (24 + 28 bytes) and more.
	readBuffer = 128
)

// Change is a session's new state, as handed to the Engine's callback.
type Change struct {
	Peer  netip.Addr
	State State
	Diag  Diag
}

// Engine runs BFD sessions to peers over single-hop UDP. It is safe for
// concurrent use.
type Engine struct {
	cfg      Config
	onChange func(Change)
	conns    []*net.UDPConn // the receive sockets, IPv4 and IPv6

	mu       sync.Mutex
	sessions map[netip.Addr]*runner
	byDiscr  map[uint32]*runner
	closed   bool

	wg sync.WaitGroup
	// Discarded counts received packets that were not applied: malformed,
	// a TTL other than 255, or for no session.
	Discarded atomic.Uint64
}

// Listen opens the Control port, IPv4 and IPv6, and returns an Engine
// with no sessions. onChange is called, from a session's goroutine, after
// each state change; it must not block (set a flag or queue a key).
func Listen(cfg Config, onChange func(Change)) (*Engine, error) {
	e := &Engine{cfg: cfg.WithDefaults(), onChange: onChange, sessions: map[netip.Addr]*runner{}, byDiscr: map[uint32]*runner{}}
	for _, network := range []string{"udp4", "udp6"} {
		c, err := net.ListenUDP(network, &net.UDPAddr{Port: ControlPort})
		if err != nil {
			e.closeConns()
			return nil, fmt.Errorf("bfd: listen on %s port %d: %w", network, ControlPort, err)
		}
		e.conns = append(e.conns, c)
		if err := e.startReceiver(network, c); err != nil {
			e.closeConns()
			return nil, err
		}
	}
	return e, nil
}

func (e *Engine) closeConns() {
	for _, c := range e.conns {
		c.Close()
	}
}

// startReceiver asks the kernel for each packet's TTL (hop limit) and
// reads the socket until it closes.
func (e *Engine) startReceiver(network string, c *net.UDPConn) error {
	var read func([]byte) (int, int, net.Addr, error)
	if network == "udp4" {
		pc := ipv4.NewPacketConn(c)
		if err := pc.SetControlMessage(ipv4.FlagTTL, true); err != nil {
			return fmt.Errorf("bfd: receive TTL: %w", err)
		}
		read = func(b []byte) (int, int, net.Addr, error) {
			n, cm, src, err := pc.ReadFrom(b)
			if cm == nil {
				return n, -1, src, err
			}
			return n, cm.TTL, src, err
		}
	} else {
		pc := ipv6.NewPacketConn(c)
		if err := pc.SetControlMessage(ipv6.FlagHopLimit, true); err != nil {
			return fmt.Errorf("bfd: receive hop limit: %w", err)
		}
		read = func(b []byte) (int, int, net.Addr, error) {
			n, cm, src, err := pc.ReadFrom(b)
			if cm == nil {
				return n, -1, src, err
			}
			return n, cm.HopLimit, src, err
		}
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		b := make([]byte, readBuffer)
		for {
			n, ttl, src, err := read(b)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			e.deliver(b[:n], ttl, src)
		}
	}()
	return nil
}

// deliver decodes a datagram and hands it to its session: by Your
// Discriminator, or by the sender's address while the peer does not know
// ours yet (RFC 5881 section 3).
func (e *Engine) deliver(b []byte, ttl int, src net.Addr) {
	udp, ok := src.(*net.UDPAddr)
	if !ok || ttl != gtsmTTL {
		e.Discarded.Add(1)
		return
	}
	p, err := Decode(b)
	if err != nil {
		e.Discarded.Add(1)
		return
	}
	peer := udp.AddrPort().Addr().Unmap()
	e.mu.Lock()
	r := e.sessions[peer]
	if p.YourDiscriminator != 0 {
		r = e.byDiscr[p.YourDiscriminator]
	}
	e.mu.Unlock()
	if r == nil || r.peer != peer {
		e.Discarded.Add(1)
		return
	}
	select {
	case r.rx <- p:
	default:
		e.Discarded.Add(1)
	}
}

// Add starts a session to peer, if there is none. The session sends from
// the address the kernel routes peer through.
func (e *Engine) Add(peer netip.Addr) error {
	peer = peer.Unmap()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return net.ErrClosed
	}
	if _, ok := e.sessions[peer]; ok {
		return nil
	}
	conn, err := dialFromSourcePort(peer)
	if err != nil {
		return err
	}
	discr := e.newDiscriminator()
	r := &runner{peer: peer, conn: conn, rx: make(chan Packet, rxQueue), stop: make(chan struct{}), s: newSession(e.cfg, discr)}
	r.publish()
	e.sessions[peer] = r
	e.byDiscr[discr] = r
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		r.run(e.onChange)
	}()
	return nil
}

// newDiscriminator picks a random nonzero discriminator unused here
// (RFC 5880 section 6.3). Called with e.mu held.
func (e *Engine) newDiscriminator() uint32 {
	for {
		d := rand.Uint32()
		if _, used := e.byDiscr[d]; d != 0 && !used {
			return d
		}
	}
}

// dialFromSourcePort opens a session's socket: connected to the peer's
// Control port, from a free port in the range RFC 5881 gives, sending
// with TTL 255.
func dialFromSourcePort(peer netip.Addr) (*net.UDPConn, error) {
	network := "udp4"
	if peer.Is6() {
		network = "udp6"
	}
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, ControlPort))
	span := maxSourcePort - minSourcePort + 1
	first := rand.IntN(span)
	for i := 0; i < span; i++ {
		port := minSourcePort + (first+i)%span
		c, err := net.DialUDP(network, &net.UDPAddr{Port: port}, raddr)
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bfd: socket to %s: %w", peer, err)
		}
		if peer.Is6() {
			err = ipv6.NewConn(c).SetHopLimit(gtsmTTL)
		} else {
			err = ipv4.NewConn(c).SetTTL(gtsmTTL)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("bfd: TTL 255 on the socket to %s: %w", peer, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("bfd: no free source port for %s", peer)
}

// Remove tells the peer the session is administratively down and ends
// it. It does not wait for the last packets.
func (e *Engine) Remove(peer netip.Addr) {
	peer = peer.Unmap()
	e.mu.Lock()
	r := e.sessions[peer]
	if r != nil {
		delete(e.sessions, peer)
		delete(e.byDiscr, r.s.localDiscr)
	}
	e.mu.Unlock()
	if r != nil {
		close(r.stop)
	}
}

// Peers returns the peers with a session.
func (e *Engine) Peers() []netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]netip.Addr, 0, len(e.sessions))
	for p := range e.sessions {
		out = append(out, p)
	}
	return out
}

// State returns the state of the session to peer, and why it last went
// down; ok is false when there is no session.
func (e *Engine) State(peer netip.Addr) (st State, d Diag, ok bool) {
	e.mu.Lock()
	r := e.sessions[peer.Unmap()]
	e.mu.Unlock()
	if r == nil {
		return 0, 0, false
	}
	c := r.snapshot.Load()
	return c.State, c.Diag, true
}

// Close takes every session administratively down, closes the Control
// port and waits for the goroutines.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	for peer, r := range e.sessions {
		delete(e.sessions, peer)
		close(r.stop)
	}
	e.byDiscr = map[uint32]*runner{}
	e.mu.Unlock()
	e.closeConns()
	e.wg.Wait()
	return nil
}

// runner is a session's goroutine and socket. Only the goroutine touches
// s; others read snapshot.
type runner struct {
	peer     netip.Addr
	conn     *net.UDPConn
	rx       chan Packet
	stop     chan struct{}
	s        *session
	snapshot atomic.Pointer[Change]
	buf      []byte
}

func (r *runner) publish() {
	r.snapshot.Store(&Change{Peer: r.peer, State: r.s.state, Diag: r.s.diag})
}

func (r *runner) send(final bool) {
	p := r.s.packet(final)
	r.buf = p.Append(r.buf[:0])
	_, _ = r.conn.Write(r.buf) // a lost packet is what BFD tolerates
}

// jittered returns the next periodic interval: 75-100% of d, or 75-90%
// with a detect multiplier of 1 (RFC 5880 section 6.8.7).
func (r *runner) jittered(d time.Duration) time.Duration {
	top := 100
	if r.s.cfg.DetectMult == 1 {
		top = 90
	}
	return d * time.Duration(75+rand.IntN(top-75+1)) / 100
}

func (r *runner) run(onChange func(Change)) {
	defer r.conn.Close()
	tx := time.NewTimer(0)
	defer tx.Stop()
	nextTx := time.Now()
	detect := time.NewTimer(time.Hour)
	detect.Stop()
	defer detect.Stop()
	changed := func() {
		r.publish()
		if onChange != nil {
			onChange(*r.snapshot.Load())
		}
	}
	for {
		select {
		case p := <-r.rx:
			now := time.Now()
			stateChanged := r.s.receive(p, now)
			detect.Reset(r.s.detectAt.Sub(now))
			if r.s.finalDue {
				r.s.finalDue = false
				r.send(true)
			}
			// A shorter interval (the session came Up) applies now,
			// not after the slow one runs out.
			if iv := r.s.txInterval(); iv > 0 && now.Add(iv).Before(nextTx) {
				nextTx = now.Add(r.jittered(iv))
				tx.Reset(nextTx.Sub(now))
			}
			if stateChanged {
				changed()
			}
		case <-tx.C:
			iv := r.s.txInterval()
			if iv == 0 {
				nextTx = time.Now().Add(time.Hour)
				tx.Reset(time.Hour) // the peer asked for no packets; its next packet may change that
				continue
			}
			r.send(false)
			nextTx = time.Now().Add(r.jittered(iv))
			tx.Reset(nextTx.Sub(time.Now()))
		case <-detect.C:
			if r.s.expire(time.Now()) {
				changed()
			}
		case <-r.stop:
			r.s.adminDown()
			changed()
			for i := 0; i < adminDownPackets; i++ {
				r.send(false)
				time.Sleep(r.jittered(max(r.s.txInterval(), r.s.cfg.DesiredMinTx)))
			}
			return
		}
	}
}
