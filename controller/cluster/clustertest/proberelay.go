package clustertest

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/egressflow/egressflow/controller/heartbeat"
)

// ProbeRelay is an agent's end of the probe protocol for tests: a real
// heartbeat.Responder on loopback behind a UDP relay, whose address the
// agent publishes. The relay forwards every datagram both ways, except
// what a test cuts: the observer's pings (CutFromObserver: the observer
// and its witnesses disagree), or everything (StopAnswering: the agent is
// dead to the probes while its Lease is still renewed).
type ProbeRelay struct {
	responder *heartbeat.Responder
	front     *net.UDPConn

	observerCut atomic.Bool
	silent      atomic.Bool

	mu sync.Mutex
	// upstream has one socket towards the responder per source, so that
	// the answers find their way back.
	upstream map[netip.AddrPort]*net.UDPConn
	closed   bool
}

// StartProbeRelay starts a responder and its relay; the test's end stops
// both.
func StartProbeRelay(t testing.TB) *ProbeRelay {
	t.Helper()
	responder, err := heartbeat.ListenResponder("127.0.0.1:0", heartbeat.ResponderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = responder.Serve() }()
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		_ = responder.Close()
		t.Fatal(err)
	}
	r := &ProbeRelay{responder: responder, front: front, upstream: map[netip.AddrPort]*net.UDPConn{}}
	go r.forward()
	t.Cleanup(r.close)
	return r
}

// Addr is the relay's address, the agent's published probe address.
func (r *ProbeRelay) Addr() netip.AddrPort {
	return r.front.LocalAddr().(*net.UDPAddr).AddrPort()
}

// CutFromObserver drops (cut) or forwards again the observer's pings: the
// witnesses still reach the agent.
func (r *ProbeRelay) CutFromObserver(cut bool) { r.observerCut.Store(cut) }

// StopAnswering drops every datagram from now on (silent) or forwards
// again.
func (r *ProbeRelay) StopAnswering(silent bool) { r.silent.Store(silent) }

func (r *ProbeRelay) forward() {
	buf := make([]byte, 512)
	for {
		n, from, err := r.front.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || r.silent.Load() || (r.observerCut.Load() && heartbeat.ObserverPing(buf[:n])) {
			continue
		}
		up := r.upstreamFor(from)
		if up == nil {
			return
		}
		_, _ = up.Write(buf[:n])
	}
}

// upstreamFor returns the socket towards the responder for source from,
// making it (and its return path) on first use; nil once closed.
func (r *ProbeRelay) upstreamFor(from netip.AddrPort) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if up, ok := r.upstream[from]; ok {
		return up
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.responder.Addr()))
	if err != nil {
		return nil
	}
	r.upstream[from] = up
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := up.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil || r.silent.Load() {
				continue
			}
			_, _ = r.front.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return up
}

func (r *ProbeRelay) close() {
	r.mu.Lock()
	r.closed = true
	for _, up := range r.upstream {
		_ = up.Close()
	}
	r.mu.Unlock()
	_ = r.front.Close()
	_ = r.responder.Close()
}
