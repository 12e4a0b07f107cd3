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

	"k8s.io/utils/clock"
)

// The observer's side of the probe protocol (see the package doc, "Fast
// detection").
const (
	// DefaultHolderProbeInterval is how often the observer pings an agent
	// whose node holds something (an EgressService host, an egress IP).
	// Failover takes about DeadIntervals of it plus the witnesses' answer
	// and the new holder's sync. Shorter fails over sooner; each ping is
	// two 34-byte datagrams (the ping and its answer), so at 5,000 holders
	// the default costs the observer 100,000 datagrams per second.
	DefaultHolderProbeInterval = 100 * time.Millisecond
	// DefaultIdleProbeInterval is how often the observer pings an agent
	// whose node holds nothing: such a node only needs to be known dead
	// before it is chosen as a new holder. Shorter keeps a freshly dead
	// node from being chosen for longer; longer costs less.
	DefaultIdleProbeInterval = time.Second
	// SuspectIntervals is how many probe intervals without an answer make
	// the observer ask witnesses (other agents) to ping the agent too.
	SuspectIntervals = 3
	// DeadIntervals is how many probe intervals without an answer, with
	// at least one witness that could not reach the agent either and none
	// that could, make the agent unreachable. Higher tolerates more lost
	// datagrams and longer stalls before a failover; it must exceed
	// FenceIntervals, so that a cut-off holder fences first.
	DeadIntervals = 5
	// DefaultWitnesses is how many witnesses the observer asks about a
	// silent agent. One that reaches it keeps it alive; one that cannot,
	// with none that can, confirms the observer's silence. An observer that
	// no witness answers is the one cut off, and judges no one.
	DefaultWitnesses = 2
)

// proberTick is how often the observer looks at its targets: the
// resolution of every interval above. A look walks every target.
const proberTick = 20 * time.Millisecond

// tokenLifetime is how long the observer remembers a ping's token: an
// answer that comes later than DeadIntervals of the longest interval is
// no longer evidence.
const tokenLifetime = DeadIntervals * DefaultIdleProbeInterval

// ProbeTarget is one agent the observer probes.
type ProbeTarget struct {
	// Node is the agent's node.
	Node string
	// Addr is its probe address (Facts.ProbeAddress).
	Addr netip.AddrPort
	// Interval is how often to ping it.
	Interval time.Duration
	// Held: the agent is restarting (its Lease says so, Facts of a
	// handover), so its silence is expected; it is pinged but not judged.
	Held bool
}

// ProberConfig configures a Prober; zero fields take the defaults.
type ProberConfig struct {
	// Witnesses defaults to DefaultWitnesses.
	Witnesses int
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Prober is the observer's end of the probe protocol: it pings the agents
// it is given (SetTargets), asks witnesses about the silent ones, and
// reports every change of an agent's reachability. The cluster component's
// leader runs one; the Judge takes its reports beside the Leases.
type Prober struct {
	cfg    ProberConfig
	conn   *net.UDPConn
	report func(node string, reachable bool)

	mu      sync.Mutex
	targets map[string]*probed
	tokens  map[uint64]tokenRef
}

// probed is what the observer knows of one target.
type probed struct {
	ProbeTarget
	// lastAnswer is when the agent last answered, directly or through a
	// witness; the start of probing counts as one.
	lastAnswer time.Time
	nextPing   time.Time
	// askedWitnesses is when witnesses were last asked; nacks counts
	// their "could not reach it" since the agent last answered.
	askedWitnesses time.Time
	nacks          int
	unreachable    bool
}

// tokenRef is what a ping's token stands for.
type tokenRef struct {
	node string
	sent time.Time
}

// ListenProber opens the observer's socket on addr (UDP; ":0" for any
// port) and returns a Prober that calls report, from its own goroutines,
// for every change of a target's reachability.
func ListenProber(addr string, cfg ProberConfig, report func(node string, reachable bool)) (*Prober, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("probe address %q: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("listen for probe answers on %s: %w", addr, err)
	}
	if cfg.Witnesses <= 0 {
		cfg.Witnesses = DefaultWitnesses
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Prober{cfg: cfg, conn: conn, report: report, targets: map[string]*probed{}, tokens: map[uint64]tokenRef{}}, nil
}

// SetTargets replaces the agents to probe. A new target gets a full
// DeadIntervals from now before it can be judged; one that stays keeps
// its history; one that goes is forgotten, reported neither way.
func (p *Prober) SetTargets(targets []ProbeTarget) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := make(map[string]*probed, len(targets))
	for _, t := range targets {
		if t.Interval <= 0 {
			t.Interval = DefaultIdleProbeInterval
		}
		old, ok := p.targets[t.Node]
		if !ok {
			keep[t.Node] = &probed{ProbeTarget: t, lastAnswer: now, nextPing: now}
			continue
		}
		if t.Interval < old.Interval {
			old.nextPing = now // becoming a holder: probe at the fast rate at once
		}
		if t.Addr != old.Addr {
			old.lastAnswer = now // a new address is a new agent
		}
		old.ProbeTarget = t
		keep[t.Node] = old
	}
	p.targets = keep
}

// Unreachable returns the targets judged unreachable now.
func (p *Prober) Unreachable() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, t := range p.targets {
		if t.unreachable {
			out = append(out, name)
		}
	}
	return out
}

// Run probes until ctx ends, then closes the socket.
func (p *Prober) Run(ctx context.Context) {
	go p.read()
	defer p.conn.Close()
	ticker := p.cfg.Clock.NewTicker(proberTick)
	defer ticker.Stop()
	last := p.cfg.Clock.Now()
	lastSweep := last
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		now := p.cfg.Clock.Now()
		if gap := now.Sub(last); gap > SuspectIntervals*DefaultHolderProbeInterval {
			// This observer stalled: the silence meanwhile is its own,
			// not the agents'. Every target starts afresh.
			p.forgive(now)
		}
		last = now
		p.round(now)
		if now.Sub(lastSweep) > tokenLifetime {
			p.sweep(now)
			lastSweep = now
		}
	}
}

// forgive counts now as an answer of every target not yet unreachable.
func (p *Prober) forgive(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.targets {
		if !t.unreachable {
			t.lastAnswer, t.nacks = now, 0
		}
	}
}

// outgoing is a datagram a round decided to send.
type outgoing struct {
	m  probeMessage
	to netip.AddrPort
}

// round pings the targets that are due, asks witnesses about the silent
// ones, and judges those whose silence the witnesses confirm.
func (p *Prober) round(now time.Time) {
	var out []outgoing
	var died []string
	var pool *witnessPool // built once per round, for the first silent target
	p.mu.Lock()
	for name, t := range p.targets {
		if !now.Before(t.nextPing) {
			out = append(out, outgoing{p.newPing(name, t.Interval, now), t.Addr})
			t.nextPing = now.Add(t.Interval)
		}
		silence := now.Sub(t.lastAnswer)
		if t.Held || t.unreachable || silence < SuspectIntervals*t.Interval {
			continue
		}
		if now.Sub(t.askedWitnesses) >= t.Interval {
			t.askedWitnesses = now
			if pool == nil {
				pool = p.witnessPool(now)
			}
			for _, w := range pool.pick(name, p.cfg.Witnesses) {
				token := p.newToken(name, now)
				out = append(out, outgoing{probeMessage{kind: probePingRequest, token: token, target: t.Addr}, w})
			}
		}
		if silence >= DeadIntervals*t.Interval && t.nacks > 0 {
			t.unreachable = true
			died = append(died, name)
		}
	}
	p.mu.Unlock()
	for _, o := range out {
		p.send(o.m, o.to)
	}
	for _, name := range died {
		p.report(name, false)
	}
}

// witnessPool are the targets fit to witness in one round: those that
// answered within their last two intervals. One pool serves every silent
// target of the round, so that a round with many silent targets (a rack
// lost, the observer starved of CPU) walks the targets once, not once per
// silent target.
type witnessPool struct {
	nodes []string
	addrs []netip.AddrPort
}

// witnessPool gathers the round's witnesses. Called with p.mu held.
func (p *Prober) witnessPool(now time.Time) *witnessPool {
	pool := &witnessPool{}
	for name, t := range p.targets {
		if !t.unreachable && now.Sub(t.lastAnswer) <= 2*t.Interval {
			pool.nodes, pool.addrs = append(pool.nodes, name), append(pool.addrs, t.Addr)
		}
	}
	return pool
}

// pick chooses up to n witnesses other than except, at random: a partial
// Fisher-Yates shuffle of the pool's first n places.
func (w *witnessPool) pick(except string, n int) []netip.AddrPort {
	var picked []netip.AddrPort
	for i := 0; i < len(w.nodes) && len(picked) < n; i++ {
		j := i + rand.IntN(len(w.nodes)-i)
		w.nodes[i], w.nodes[j] = w.nodes[j], w.nodes[i]
		w.addrs[i], w.addrs[j] = w.addrs[j], w.addrs[i]
		if w.nodes[i] != except {
			picked = append(picked, w.addrs[i])
		}
	}
	return picked
}

// newPing is a ping of node with a fresh token. Called with p.mu held.
func (p *Prober) newPing(node string, interval time.Duration, now time.Time) probeMessage {
	return probeMessage{kind: probePing, interval: interval, token: p.newToken(node, now)}
}

func (p *Prober) newToken(node string, now time.Time) uint64 {
	token := rand.Uint64()
	p.tokens[token] = tokenRef{node: node, sent: now}
	return token
}

// sweep forgets tokens older than tokenLifetime.
func (p *Prober) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for token, ref := range p.tokens {
		if now.Sub(ref.sent) > tokenLifetime {
			delete(p.tokens, token)
		}
	}
}

func (p *Prober) send(m probeMessage, to netip.AddrPort) {
	var buf [probeMessageSize]byte
	_, _ = p.conn.WriteToUDPAddrPort(m.encode(buf[:0]), to)
}

// read takes the answers until the socket is closed.
func (p *Prober) read() {
	buf := make([]byte, maxProbeDatagram)
	for {
		n, _, err := p.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		m, err := decodeProbe(buf[:n])
		if err != nil || (m.kind != probeAck && m.kind != probeNack) {
			continue
		}
		if name, back := p.answer(m); back {
			p.report(name, true)
		}
	}
}

// answer records an ack or a nack; it says whether an unreachable target
// answered again, and which.
func (p *Prober) answer(m probeMessage) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ref, ok := p.tokens[m.token]
	if !ok {
		return "", false
	}
	delete(p.tokens, m.token)
	t, ok := p.targets[ref.node]
	if !ok {
		return "", false
	}
	if m.kind == probeNack {
		t.nacks++
		return "", false
	}
	t.lastAnswer, t.nacks = p.cfg.Clock.Now(), 0
	if t.unreachable {
		t.unreachable = false
		return ref.node, true
	}
	return "", false
}
