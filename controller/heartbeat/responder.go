package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The agent's side of the probe protocol (see the package doc, "Fast
// detection").
const (
	// FenceIntervals is how many of its observer's probe intervals an
	// agent may go without a probe before it asks its peers whether it is
	// cut off (Responder.Lost). It is well below DeadIntervals, the
	// observer's bound, so that a cut-off holder has fenced itself before
	// any other node is given its addresses: with the default 100 ms
	// interval the holder fences about 200 ms after its last probe plus a
	// check interval and DefaultPeerCheckTimeout, while the observer
	// judges it 500 ms after its last answer. Lost probes alone never
	// fence (the peers must be silent too), so the bound can be tight;
	// lower would ask the peers on every late datagram.
	FenceIntervals = 2
	// DefaultPeerCheckTimeout is how long an agent that hears no probe
	// waits for its peers to answer before it counts itself cut off. On a
	// LAN an answer takes well under a millisecond; longer delays the
	// fence of a cut-off holder towards the moment its addresses move.
	DefaultPeerCheckTimeout = 50 * time.Millisecond
	// PeerCheckPeers is how many peers an agent asks when it hears no
	// probe: one that answers shows the agent is not cut off, so the
	// observer is (or it stalled), and no one is moved. More survive more
	// dead peers at once; each costs one datagram per check.
	PeerCheckPeers = 3
	// WitnessTimeout is how long a witness waits for the target of a ping
	// request before it answers probeNack. It pings twice within it, so
	// that one lost datagram does not make a nack.
	WitnessTimeout = 150 * time.Millisecond
	// peerBaselineInterval is how often an agent that hears its observer
	// pings its peers until one has answered: so that it knows, before it
	// ever needs to, that its peers can answer at all (Lost trusts their
	// silence only then). A few datagrams per interval, and none once a
	// peer has answered.
	peerBaselineInterval = 5 * time.Second
	// DefaultUnhealthyGrace is how long an agent whose dataplane is
	// unhealthy (ResponderConfig.Healthy: the bridge away, syncs failing)
	// still answers pings; past it, it answers none, and the observer
	// fails its node over as a dead one's. It spans an ovs-vswitchd
	// restart, after which the agent replays its flows within
	// milliseconds, as the Lease of the protocol before the probes did
	// (3 s). Shorter moves the addresses of a node whose switch restarts;
	// longer keeps them on a node that cannot forward for longer.
	DefaultUnhealthyGrace = 3 * time.Second
)

// maxProbeDatagram bounds what the read loops accept: a probe message,
// with room for fields a later version may append.
const maxProbeDatagram = 512

// ResponderConfig configures a Responder.
type ResponderConfig struct {
	// AllowTarget, if not nil, says whether a ping request's target may be
	// pinged: an agent is a witness only for its peers, not a reflector
	// towards any address. Nil allows every target.
	AllowTarget func(netip.AddrPort) bool
	// Healthy, if not nil, says whether the agent's dataplane works: once
	// it has said no for UnhealthyGrace without a break, the agent
	// answers no ping until it says yes again. Nil is always healthy.
	Healthy func() bool
	// UnhealthyGrace defaults to DefaultUnhealthyGrace.
	UnhealthyGrace time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithDelayedExecution
}

// Responder is an agent's end of the probe protocol. It answers pings
// (from the cluster component, and from peers checking whether they are
// cut off), acts as a witness for ping requests, and tells the agent
// whether it must fence itself (Lost).
type Responder struct {
	cfg  ResponderConfig
	conn *net.UDPConn

	mu sync.Mutex
	// lastObserved is when the last ping of the observer arrived, and
	// interval what that ping said its period is; zero before the first.
	lastObserved time.Time
	interval     time.Duration
	// relays are this agent's pings as a witness, by token.
	relays map[uint64]*relay
	// checks are this agent's own pings to peers (Lost), by token.
	checks map[uint64]*peerCheck
	// lastCall, lastCheck and lastCut are Lost's memory: when it was last
	// called, when it last asked the peers, and whether they were silent.
	lastCall, lastCheck, lastBaseline time.Time
	lastCut                           bool
	// peerAnswered: some peer has answered a ping of this agent's, ever.
	// Until one has, peers that do not answer prove nothing (UDP between
	// the nodes may be filtered), and Lost does not fence for them.
	peerAnswered bool
	// unhealthySince is when Healthy began saying no (zero while it says
	// yes).
	unhealthySince time.Time
}

// relay is a ping request this agent serves as a witness.
type relay struct {
	asker netip.AddrPort
	token uint64
	timer clock.Timer
}

// ListenResponder opens the agent's probe socket on addr (UDP, e.g.
// ":9102").
func ListenResponder(addr string, cfg ResponderConfig) (*Responder, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("probe address %q: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("listen for probes on %s: %w", addr, err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.UnhealthyGrace <= 0 {
		cfg.UnhealthyGrace = DefaultUnhealthyGrace
	}
	return &Responder{cfg: cfg, conn: conn, relays: map[uint64]*relay{}, checks: map[uint64]*peerCheck{}}, nil
}

// Addr is the socket's local address (its port, when addr left it to the
// system).
func (r *Responder) Addr() netip.AddrPort {
	return r.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Close stops answering: from here on the observer hears nothing from this
// agent.
func (r *Responder) Close() error { return r.conn.Close() }

// Serve answers datagrams until the socket is closed; it returns nil then.
func (r *Responder) Serve() error {
	buf := make([]byte, maxProbeDatagram)
	for {
		n, from, err := r.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			continue // an ICMP error reported on the socket: nothing to do
		}
		m, err := decodeProbe(buf[:n])
		if err != nil {
			klog.V(4).InfoS("Ignoring a malformed probe datagram", "from", from, "err", err)
			continue
		}
		r.handle(m, from.Addr().Unmap(), from)
	}
}

func (r *Responder) handle(m probeMessage, fromAddr netip.Addr, from netip.AddrPort) {
	from = netip.AddrPortFrom(fromAddr, from.Port())
	switch m.kind {
	case probePing:
		if m.interval > 0 {
			r.mu.Lock()
			r.lastObserved, r.interval = r.cfg.Clock.Now(), m.interval
			r.mu.Unlock()
		}
		if r.answering() {
			r.send(probeMessage{kind: probeAck, token: m.token}, from)
		}
	case probePingRequest:
		if r.cfg.AllowTarget != nil && !r.cfg.AllowTarget(m.target) {
			return
		}
		r.witness(m, from)
	case probeAck:
		r.mu.Lock()
		if rl, ok := r.relays[m.token]; ok {
			delete(r.relays, m.token)
			rl.timer.Stop()
			r.mu.Unlock()
			r.send(probeMessage{kind: probeAck, token: rl.token}, rl.asker)
			return
		}
		if c, ok := r.checks[m.token]; ok {
			r.peerAnswered = true
			c.answer()
		}
		r.mu.Unlock()
	}
}

// answering says whether the agent answers pings: it is healthy, or has
// been unhealthy for less than the grace.
func (r *Responder) answering() bool {
	if r.cfg.Healthy == nil {
		return true
	}
	healthy := r.cfg.Healthy()
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case healthy:
		r.unhealthySince = time.Time{}
		return true
	case r.unhealthySince.IsZero():
		r.unhealthySince = now
	}
	return now.Sub(r.unhealthySince) < r.cfg.UnhealthyGrace
}

// witness pings m's target on behalf of asker, twice within
// WitnessTimeout, and answers the asker with the outcome.
func (r *Responder) witness(m probeMessage, asker netip.AddrPort) {
	token := rand.Uint64()
	rl := &relay{asker: asker, token: m.token}
	r.mu.Lock()
	r.relays[token] = rl
	rl.timer = r.cfg.Clock.AfterFunc(WitnessTimeout, func() {
		r.mu.Lock()
		_, pending := r.relays[token]
		delete(r.relays, token)
		r.mu.Unlock()
		if pending {
			r.send(probeMessage{kind: probeNack, token: m.token}, asker)
		}
	})
	r.mu.Unlock()
	ping := probeMessage{kind: probePing, token: token}
	r.send(ping, m.target)
	r.cfg.Clock.AfterFunc(WitnessTimeout/2, func() {
		r.mu.Lock()
		_, pending := r.relays[token]
		r.mu.Unlock()
		if pending {
			r.send(ping, m.target)
		}
	})
}

func (r *Responder) send(m probeMessage, to netip.AddrPort) {
	var buf [probeMessageSize]byte
	// A send that fails (no route while cut off) is a datagram lost.
	_, _ = r.conn.WriteToUDPAddrPort(m.encode(buf[:0]), to)
}

// Lost says whether the agent must fence itself by the probe protocol,
// and why. The agent calls it periodically (every FenceIntervals'th of the
// shortest probe interval or more often); peers lists the probe addresses
// of other agents, called only when they are asked. Before the first probe of an observer it says no: the
// cluster component does not probe this agent (an older one, or none
// leads), and the Lease alone counts. After that, it says yes when
//
//   - the agent stalled (a gap between two calls) for DeadIntervals - 1
//     probe intervals: it answered no probe meanwhile, so the observer
//     (whose count starts from the last answer, up to an interval before
//     the stall) may have judged it dead and given its addresses away.
//     A shorter stall cannot have made it dead, and does not fence;
//   - the observer's probes stopped for FenceIntervals intervals and none
//     of PeerCheckPeers peers answers within DefaultPeerCheckTimeout: this
//     node is cut off, and about to be moved.
//
// Probes that stop while peers answer mean the observer is away (it
// stalled, or a new one is being elected): nothing moves then, so the
// agent does not fence. Nor does it while no peer has ever answered it:
// the peers' silence then says more about a filter between the nodes
// than about this node. Peers are asked at most once per FenceIntervals
// intervals while the probes stay away; the answer holds meanwhile.
func (r *Responder) Lost(ctx context.Context, peers func() []netip.AddrPort) (bool, string) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	last, interval, lastCall := r.lastObserved, r.interval, r.lastCall
	r.lastCall = now
	r.mu.Unlock()
	if interval <= 0 {
		return false, ""
	}
	bound := FenceIntervals * interval
	if !lastCall.IsZero() && now.Sub(lastCall) > (DeadIntervals-1)*interval {
		return true, fmt.Sprintf("this agent stalled for %v: the cluster component may have judged it dead", now.Sub(lastCall).Round(time.Millisecond))
	}
	silence := now.Sub(last)
	if silence <= bound {
		r.mu.Lock()
		r.lastCut = false
		baseline := !r.peerAnswered && now.Sub(r.lastBaseline) >= peerBaselineInterval
		if baseline {
			r.lastBaseline = now
		}
		r.mu.Unlock()
		if baseline {
			go r.reachAny(ctx, peers()) // an answer sets peerAnswered
		}
		return false, ""
	}
	r.mu.Lock()
	recheck := now.Sub(r.lastCheck) >= bound
	cut := r.lastCut
	r.mu.Unlock()
	asked := 0
	if recheck {
		addrs := peers()
		asked = min(len(addrs), PeerCheckPeers)
		cut = !r.reachAny(ctx, addrs)
		r.mu.Lock()
		// Silent peers prove nothing before one has ever answered.
		cut = cut && r.peerAnswered
		r.lastCheck, r.lastCut = r.cfg.Clock.Now(), cut
		r.mu.Unlock()
	}
	if cut {
		return true, fmt.Sprintf("no probe from the cluster component for %v, and none of %d peers answers: this node is cut off", silence.Round(time.Millisecond), asked)
	}
	return false, ""
}

// reachAny pings up to PeerCheckPeers of peers, chosen at random, and says
// whether any answers within DefaultPeerCheckTimeout. With no peer to ask
// it says yes: a lone node has no one to be cut off from, and no one to
// give its addresses to.
func (r *Responder) reachAny(ctx context.Context, peers []netip.AddrPort) bool {
	if len(peers) == 0 {
		return true
	}
	check := &peerCheck{answered: make(chan struct{})}
	var tokens []uint64
	r.mu.Lock()
	for range min(len(peers), PeerCheckPeers) {
		token := rand.Uint64()
		r.checks[token] = check
		tokens = append(tokens, token)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, t := range tokens {
			delete(r.checks, t)
		}
		r.mu.Unlock()
	}()
	for i, p := range rand.Perm(len(peers))[:len(tokens)] {
		r.send(probeMessage{kind: probePing, token: tokens[i]}, peers[p])
	}
	timer := r.cfg.Clock.NewTimer(DefaultPeerCheckTimeout)
	defer timer.Stop()
	select {
	case <-check.answered:
		return true
	case <-timer.C():
		return false
	case <-ctx.Done():
		return true
	}
}

// peerCheck is one round of reachAny: the first answer to any of its
// pings closes answered.
type peerCheck struct {
	once     sync.Once
	answered chan struct{}
}

func (c *peerCheck) answer() { c.once.Do(func() { close(c.answered) }) }
