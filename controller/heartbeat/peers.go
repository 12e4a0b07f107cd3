package heartbeat

import (
	"bytes"
	"context"
	"crypto/ed25519"
	cryptorand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
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

// The peer protocol is authenticated both ways, without the API server,
// since it is asked exactly when the API server may be away for everyone.
// Every agent process makes an Ed25519 key pair at start
// (NewPeerIdentity) and publishes the public key on its heartbeat Lease
// (Facts.PeerKey), which only the agent of that node may write (the
// admission policy egressflow-agent-own-lease). A question names its
// asker and the node asked, carries a fresh random nonce and the time, and
// is signed by the asker; the answering agent answers only a question
// signed with the key its Lease cache holds for the asker, addressed to
// itself and recent. The answer names the node, says whether it renews,
// and is signed over the asker's nonce; the asker believes it only if the
// signature verifies with the key the Lease of the node it asked
// publishes. An answer that does not (none, unsigned, signed by another
// key, for another nonce or node) counts as renewing, as a peer that does
// not answer does: a forgery can only make a node fence, never keep a
// cut-off node from fencing. The keys were learnt through the Lease watch
// while the API server served, so the protocol works when it does not.

// PeerQuestion is what an agent sends (POST, JSON) on PeerPath.
type PeerQuestion struct {
	// From is the asking agent's node, To the node asked.
	From string `json:"from"`
	To   string `json:"to"`
	// Nonce is fresh randomness that the answer must sign.
	Nonce []byte `json:"nonce"`
	// UnixMilli is when the question was asked, by the asker's clock.
	UnixMilli int64 `json:"unixMilli"`
	// Signature is the asker's over the fields above (questionMessage).
	Signature []byte `json:"signature"`
}

// PeerStatus is an agent's answer on PeerPath.
type PeerStatus struct {
	Node string `json:"node"`
	// Renewing: the agent's last renewal attempt succeeded.
	Renewing bool `json:"renewing"`
	// Signature is the answering agent's over Node, Renewing and the
	// question's asker and nonce (answerMessage).
	Signature []byte `json:"signature"`
}

const (
	// PeerQuestionMaxAge is how far a question's time may lie from the
	// answering agent's clock: a captured question replayed later is not
	// answered. It must exceed the nodes' clock skew (NTP keeps it at
	// milliseconds); shorter narrows the replay window, which only ever
	// yields an answer bound to the old nonce.
	PeerQuestionMaxAge = 30 * time.Second
	// peerNonceSize is the nonce's length in bytes: 128 bits never repeat.
	peerNonceSize = 16
	// maxPeerMessage bounds a question's or an answer's body.
	maxPeerMessage = 4 << 10
)

// PeerIdentity is an agent's key in the peer protocol, made fresh by each
// process.
type PeerIdentity struct {
	Node string
	key  ed25519.PrivateKey
}

// NewPeerIdentity makes node's agent a new key pair.
func NewPeerIdentity(node string) (*PeerIdentity, error) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	return &PeerIdentity{Node: node, key: key}, nil
}

// PublicKey is the key to publish (Facts.PeerKey): base64 of the Ed25519
// public key.
func (id *PeerIdentity) PublicKey() string {
	return base64.StdEncoding.EncodeToString(id.key.Public().(ed25519.PublicKey))
}

// ParsePeerKey reads a published key (Facts.PeerKey); nil if it is not
// one.
func ParsePeerKey(s string) ed25519.PublicKey {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil
	}
	return ed25519.PublicKey(b)
}

// questionMessage and answerMessage are what is signed, each with its own
// prefix, so that a signature of one kind is never valid as the other.
// Node names contain no NUL.
func questionMessage(q PeerQuestion) []byte {
	return fmt.Appendf(nil, "egressflow heartbeat question\x00%s\x00%s\x00%x\x00%d", q.From, q.To, q.Nonce, q.UnixMilli)
}

func answerMessage(node string, renewing bool, asker string, nonce []byte) []byte {
	return fmt.Appendf(nil, "egressflow heartbeat answer\x00%s\x00%t\x00%s\x00%x", node, renewing, asker, nonce)
}

// PeerHandler answers PeerPath for id's agent: whether it renews, to a
// question signed by a peer whose key keyOf returns (nil for a node it
// knows no key of). Anything else gets no answer: 401 for a question it
// cannot authenticate, 400 for one it cannot read.
func PeerHandler(id *PeerIdentity, renewing func() bool, keyOf func(node string) ed25519.PublicKey) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a signed question", http.StatusMethodNotAllowed)
			return
		}
		var q PeerQuestion
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPeerMessage)).Decode(&q); err != nil {
			http.Error(w, "unreadable question", http.StatusBadRequest)
			return
		}
		key := keyOf(q.From)
		age := time.Since(time.UnixMilli(q.UnixMilli)).Abs()
		if q.To != id.Node || key == nil || len(q.Nonce) != peerNonceSize || age > PeerQuestionMaxAge ||
			!ed25519.Verify(key, questionMessage(q), q.Signature) {
			http.Error(w, "unauthenticated question", http.StatusUnauthorized)
			return
		}
		renews := renewing()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(PeerStatus{Node: id.Node, Renewing: renews,
			Signature: ed25519.Sign(id.key, answerMessage(id.Node, renews, q.From, q.Nonce))})
	})
}

// Peer is another agent as the probe asks it.
type Peer struct {
	Node string
	// Addr is its health address.
	Addr netip.AddrPort
	// Key is its published key (Facts.PeerKey); a peer without one is not
	// asked, as its answer could not be believed.
	Key ed25519.PublicKey
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
	// Peers returns the other agents (the agent's own excluded).
	Peers func() []Peer
	// Identity signs this agent's questions.
	Identity *PeerIdentity
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

// ask returns false only for a peer that answered, with its signature over
// this question, that it cannot renew.
func (p *PeerProbe) ask(ctx context.Context, peer Peer) bool {
	renewing, believed := AskPeer(ctx, p.Client, p.Identity, peer)
	return renewing || !believed
}

// AskPeer asks peer once, as id, whether it renews. believed says whether
// an answer came that is the peer's word: about the peer, over this
// question's nonce, signed with peer.Key. A peer without a key is not
// asked.
func AskPeer(ctx context.Context, client *http.Client, id *PeerIdentity, peer Peer) (renewing, believed bool) {
	if peer.Key == nil {
		return false, false
	}
	q := PeerQuestion{From: id.Node, To: peer.Node, Nonce: make([]byte, peerNonceSize), UnixMilli: time.Now().UnixMilli()}
	if _, err := cryptorand.Read(q.Nonce); err != nil {
		return false, false
	}
	q.Signature = ed25519.Sign(id.key, questionMessage(q))
	body, err := json.Marshal(q)
	if err != nil {
		return false, false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+peer.Addr.String()+PeerPath, bytes.NewReader(body))
	if err != nil {
		return false, false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	var st PeerStatus
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, maxPeerMessage)).Decode(&st) != nil {
		return false, false
	}
	if st.Node != peer.Node || !ed25519.Verify(peer.Key, answerMessage(st.Node, st.Renewing, q.From, q.Nonce), st.Signature) {
		return false, false // not the peer's word
	}
	return st.Renewing, true
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
