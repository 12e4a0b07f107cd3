package heartbeat

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// asker is the identity of the agent whose probe the tests run.
var asker = mustIdentity("asker")

func mustIdentity(node string) *PeerIdentity {
	id, err := NewPeerIdentity(node)
	if err != nil {
		panic(err)
	}
	return id
}

// knows is the key lookup of an agent whose Lease cache holds the keys of
// ids.
func knows(ids ...*PeerIdentity) func(string) ed25519.PublicKey {
	return func(node string) ed25519.PublicKey {
		for _, id := range ids {
			if id.Node == node {
				return ParsePeerKey(id.PublicKey())
			}
		}
		return nil
	}
}

// serve serves h on loopback until the test ends, and returns its address.
func serve(t *testing.T, h http.Handler) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

var peerCount atomic.Int32

// peer serves PeerPath on loopback for an agent whose renewer's last
// attempt succeeded or not, which knows the asker's key, and returns it as
// the asker's Lease cache shows it.
func peer(t *testing.T, renewing bool) Peer {
	t.Helper()
	id := mustIdentity(fmt.Sprintf("peer-%d", peerCount.Add(1)))
	r, err := NewRenewer(fake.NewClientset().CoordinationV1(), RenewerConfig{Namespace: "ns", NodeName: id.Node})
	if err != nil {
		t.Fatal(err)
	}
	r.failing.Store(!renewing)
	addr := serve(t, PeerHandler(id, r.Renewing, knows(asker)))
	return Peer{Node: id.Node, Addr: addr, Key: ParsePeerKey(id.PublicKey())}
}

// closedPort is a peer at an address where nothing listens.
func closedPort(t *testing.T) Peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	return Peer{Node: "gone", Addr: addr, Key: ParsePeerKey(mustIdentity("gone").PublicKey())}
}

// sharedOutage runs a probe over peers until it has a complete round, and
// returns its verdict.
func sharedOutage(t *testing.T, peers []Peer) bool {
	t.Helper()
	p := &PeerProbe{Peers: func() []Peer { return append([]Peer(nil), peers...) }, Identity: asker,
		Renewing: func() bool { return false }, Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		round := p.last
		p.mu.Unlock()
		if round.asked == len(peers) && !round.until.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no complete round in 5 s: %+v", round)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p.SharedOutage()
}

// TestPeerProbe: an agent that cannot renew asks its peers over HTTP and
// sees a shared outage only when the disruption rule holds over itself
// and the peers that answered, signed, that they cannot renew either; a
// peer that does not answer counts as renewing.
func TestPeerProbe(t *testing.T) {
	for _, c := range []struct {
		name  string
		peers func(t *testing.T) []Peer
		want  bool
	}{
		{"every peer fails too", func(t *testing.T) []Peer { return []Peer{peer(t, false), peer(t, false)} }, true},
		{"one of two peers renews", func(t *testing.T) []Peer { return []Peer{peer(t, false), peer(t, true)} }, false},
		{"peers unreachable", func(t *testing.T) []Peer { return []Peer{closedPort(t), closedPort(t)} }, false},
		{"three of five peers fail", func(t *testing.T) []Peer {
			return []Peer{peer(t, false), peer(t, false), peer(t, false), peer(t, true), peer(t, true)}
		}, true}, // with this agent: 4 of 6 = 67 % >= 55 %, and >= 3
		{"two of five peers fail", func(t *testing.T) []Peer {
			return []Peer{peer(t, false), peer(t, false), peer(t, true), peer(t, true), peer(t, true)}
		}, false}, // 3 of 6 = 50 %
		{"no peer", func(*testing.T) []Peer { return nil }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sharedOutage(t, c.peers(t)); got != c.want {
				t.Errorf("SharedOutage() = %v, want %v", got, c.want)
			}
		})
	}
}

// TestPeerProbeIgnoresForgedAnswers: two peers "answer" that they cannot
// renew, which, believed, would be a shared outage (as "every peer fails
// too" above) and keep this cut-off agent from fencing. None of these
// answers is the peer's own word, so each counts as renewing and the agent
// fences: no shared outage.
func TestPeerProbeIgnoresForgedAnswers(t *testing.T) {
	// unsigned answers the question as the old, unauthenticated protocol
	// did.
	unsigned := func(t *testing.T, node string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(PeerStatus{Node: node, Renewing: false})
		})
	}
	for _, c := range []struct {
		name   string
		forged func(t *testing.T) Peer
	}{
		{"no signature", func(t *testing.T) Peer {
			p := peer(t, true)
			p.Addr = serve(t, unsigned(t, p.Node))
			return p
		}},
		{"signed with another key than the peer's Lease publishes", func(t *testing.T) Peer {
			p := peer(t, true)
			impostor := &PeerIdentity{Node: p.Node, key: mustIdentity(p.Node).key}
			p.Addr = serve(t, PeerHandler(impostor, func() bool { return false }, knows(asker)))
			return p
		}},
		{"a genuine answer of the peer to an earlier question, replayed", func(t *testing.T) Peer {
			p := peer(t, false)
			// Record one of the peer's real "cannot renew" answers...
			var recorded []byte
			probe := &PeerProbe{Identity: asker, Client: &http.Client{Transport: recorder{&recorded}}}
			if probe.ask(context.Background(), p) {
				t.Fatal("the genuine peer's answer was not believed")
			}
			// ...and play it back to every later question.
			p.Addr = serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(recorded) }))
			return p
		}},
		{"the peer's signed answer about another node", func(t *testing.T) Peer {
			p := peer(t, true)
			other := peer(t, false) // answers, signed, as itself
			p.Addr = other.Addr
			p.Key = other.Key // even with that node's key, the answer is not about p
			return p
		}},
		{"a peer whose Lease publishes no key", func(t *testing.T) Peer {
			p := peer(t, false)
			p.Key = nil
			return p
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if sharedOutage(t, []Peer{c.forged(t), c.forged(t)}) {
				t.Error("forged answers made a shared outage: a cut-off node would not fence")
			}
		})
	}
}

// recorder is a transport that keeps the body of the answer it passes on.
type recorder struct{ body *[]byte }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	*r.body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(*r.body))
	return resp, err
}

// TestPeerHandlerAnswersOnlySignedQuestions: an agent says whether it
// renews only to a peer that signs its question with the key its Lease
// publishes, addresses it to this agent, and asked it recently.
func TestPeerHandlerAnswersOnlySignedQuestions(t *testing.T) {
	answerer := mustIdentity("answerer")
	stranger := mustIdentity("stranger") // an agent whose key the answerer does not know
	addr := serve(t, PeerHandler(answerer, func() bool { return false }, knows(asker)))
	url := "http://" + addr.String() + PeerPath
	question := func(from *PeerIdentity, to string, at time.Time) PeerQuestion {
		q := PeerQuestion{From: from.Node, To: to, Nonce: make([]byte, peerNonceSize), UnixMilli: at.UnixMilli()}
		q.Nonce[0] = 7
		q.Signature = ed25519.Sign(from.key, questionMessage(q))
		return q
	}
	post := func(q PeerQuestion) *http.Response {
		body, _ := json.Marshal(q)
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want %d", resp.StatusCode, http.StatusMethodNotAllowed)
	}
	unsigned := question(asker, answerer.Node, time.Now())
	unsigned.Signature = nil
	tampered := question(asker, answerer.Node, time.Now())
	tampered.From = stranger.Node
	impostor := question(&PeerIdentity{Node: asker.Node, key: stranger.key}, answerer.Node, time.Now())
	for name, q := range map[string]PeerQuestion{
		"unsigned":                         unsigned,
		"from a node whose key is unknown": question(stranger, answerer.Node, time.Now()),
		"signed by another key than the asker's Lease publishes": impostor,
		"its asker changed after signing":                        tampered,
		"addressed to another node":                              question(asker, "elsewhere", time.Now()),
		"asked too long ago (a replay)":                          question(asker, answerer.Node, time.Now().Add(-PeerQuestionMaxAge-time.Second)),
	} {
		resp := post(q)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, body, http.StatusUnauthorized)
		}
	}
	q := question(asker, answerer.Node, time.Now())
	resp = post(q)
	defer resp.Body.Close()
	var st PeerStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a signed question: %d, %v", resp.StatusCode, err)
	}
	if st.Node != answerer.Node || st.Renewing ||
		!ed25519.Verify(ParsePeerKey(answerer.PublicKey()), answerMessage(st.Node, st.Renewing, asker.Node, q.Nonce), st.Signature) {
		t.Errorf("answer %+v: want answerer's signed \"not renewing\"", st)
	}
}

// TestPeerProbeAsksNobodyWhileRenewing: an agent that renews has no
// question, and no stale answer counts once it is more than two intervals
// old.
func TestPeerProbeAsksNobodyWhileRenewing(t *testing.T) {
	asked := 0
	p := &PeerProbe{Peers: func() []Peer { asked++; return nil }, Identity: asker, Renewing: func() bool { return true }, Interval: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p.Run(ctx)
	if asked != 0 {
		t.Errorf("a renewing agent asked its peers %d times", asked)
	}
	p.last = peerRound{until: time.Now().Add(-time.Second + 2*p.Interval), peers: 2, asked: 2, notRenew: 2}
	if p.SharedOutage() {
		t.Error("a round a second old (interval 10 ms) still counts")
	}
}

// TestRenewingTurnsFalseWhenOverdue: an agent whose next renewal has not
// succeeded an interval and a half after the last one tells its peers it
// does not renew, though no attempt has failed yet (it hangs).
func TestRenewingTurnsFalseWhenOverdue(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))
	r, err := NewRenewer(fake.NewClientset().CoordinationV1(), RenewerConfig{Namespace: "ns", NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Renewing() {
		t.Error("not renewing before the first attempt")
	}
	if err := r.RenewOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(DefaultRenewInterval * 3 / 2)
	if !r.Renewing() {
		t.Error("not renewing an interval and a half after a renewal")
	}
	clk.Step(time.Millisecond)
	if r.Renewing() {
		t.Error("still renewing past an interval and a half without a renewal")
	}
}
