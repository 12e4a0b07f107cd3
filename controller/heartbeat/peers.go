package heartbeat

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Agents ask each other, before fencing, whether they can renew: an agent
// whose Lease ran out because the API server is away for everyone must not
// fence, since the cluster component holds every assignment in such a
// disruption (Judge); one that alone cannot renew (cut off, or unhealthy)
// must, since its services are about to move.

// PeerPath is where an agent answers its peers, on its health address.
const PeerPath = "/heartbeat"

// PeerStatus is an agent's answer on PeerPath.
type PeerStatus struct {
	Node string `json:"node"`
	// Renewing: the agent's last renewal attempt succeeded.
	Renewing bool `json:"renewing"`
}

// PeerHandler answers PeerPath for the agent of node from r.
func PeerHandler(node string, r *Renewer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(PeerStatus{Node: node, Renewing: r.Renewing()})
	})
}

// Defaults of PeerProbe.
const (
	// DefaultPeerProbeInterval is how often an agent that cannot renew asks
	// its peers: its fence decision at the Lease's expiry uses an answer at
	// most this old. Agents that renew ask nobody.
	DefaultPeerProbeInterval = 500 * time.Millisecond
	// DefaultPeerProbeTimeout bounds one question. A peer that does not
	// answer in time counts as renewing: a node cut off from everything
	// fences.
	DefaultPeerProbeTimeout = 300 * time.Millisecond
	// DefaultMaxProbedPeers is how many peers are asked per round, chosen
	// at random: the share of them that cannot renew estimates the
	// cluster's. More costs more requests (only while the API server is
	// away); fewer estimates worse.
	DefaultMaxProbedPeers = 16
)

// PeerProbe estimates, for an agent that cannot renew, whether its peers
// cannot either.
type PeerProbe struct {
	// Peers returns the peers' health addresses (the agent's own excluded).
	Peers func() []netip.AddrPort
	// Renewing reports whether this agent's last renewal attempt succeeded.
	Renewing func() bool
	Client   *http.Client
	// Interval, Timeout, MaxPeers default to the constants above.
	Interval, Timeout time.Duration
	MaxPeers          int

	mu   sync.Mutex
	last peerRound
}

type peerRound struct {
	// until is when the round is too old to count: two intervals after it
	// started. It travels with the round, so that SharedOutage reads
	// nothing but the round (Run sets the defaults on its own goroutine).
	until                  time.Time
	peers, asked, notRenew int
}

// Run probes every Interval while this agent cannot renew, until ctx ends.
func (p *PeerProbe) Run(ctx context.Context) {
	p.setDefaults()
	ticker := time.NewTicker(p.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if p.Renewing() {
			continue
		}
		round := p.probe(ctx)
		p.mu.Lock()
		p.last = round
		p.mu.Unlock()
	}
}

func (p *PeerProbe) setDefaults() {
	if p.Interval <= 0 {
		p.Interval = DefaultPeerProbeInterval
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultPeerProbeTimeout
	}
	if p.MaxPeers <= 0 {
		p.MaxPeers = DefaultMaxProbedPeers
	}
	if p.Client == nil {
		p.Client = &http.Client{}
	}
}

// probe asks up to MaxPeers random peers at once.
func (p *PeerProbe) probe(ctx context.Context) peerRound {
	peers := p.Peers()
	round := peerRound{until: time.Now().Add(2 * p.Interval), peers: len(peers)}
	rand.Shuffle(len(peers), func(i, k int) { peers[i], peers[k] = peers[k], peers[i] })
	peers = peers[:min(len(peers), p.MaxPeers)]
	round.asked = len(peers)
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	answers := make(chan bool, len(peers))
	for _, peer := range peers {
		go func() { answers <- p.ask(ctx, peer) }()
	}
	for range peers {
		if !<-answers {
			round.notRenew++
		}
	}
	return round
}

// ask returns false only for a peer that answered that it cannot renew.
func (p *PeerProbe) ask(ctx context.Context, peer netip.AddrPort) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+peer.String()+PeerPath, nil)
	if err != nil {
		return true
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return true
	}
	defer resp.Body.Close()
	var st PeerStatus
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return true
	}
	return st.Renewing
}

// SharedOutage says whether the latest round (if it is at most two
// intervals old) found so many peers unable to renew that the cluster
// component, seeing the same, holds every assignment: the disruption rule
// (Disrupted) over this agent and its peers, the asked ones' share
// extended to all.
func (p *PeerProbe) SharedOutage() bool {
	p.mu.Lock()
	r := p.last
	p.mu.Unlock()
	if r.asked == 0 || time.Now().After(r.until) {
		return false
	}
	dead := 1 + r.notRenew*r.peers/r.asked
	return Disrupted(dead, 1+r.peers)
}

// HealthPort returns the port of a health address such as ":9102".
func HealthPort(addr string) (uint16, bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return uint16(n), err == nil && n != 0
}
