package bfd

import (
	"testing"
	"time"
)

// rfcNext is the state diagram of RFC 5880 section 6.2, written out as
// its arrows, with the diagnostic section 6.8.6 sets on the way down. It
// is the specification the session's reception is checked against.
func rfcNext(local, received State) (State, Diag, bool) {
	const keep = Diag(255)
	type arrow struct {
		to   State
		diag Diag
	}
	table := map[State]map[State]arrow{
		Down: {Down: {Init, DiagNone}, Init: {Up, DiagNone}, Up: {Down, keep}, AdminDown: {Down, keep}},
		Init: {Down: {Init, keep}, Init: {Up, DiagNone}, Up: {Up, DiagNone}, AdminDown: {Down, DiagNeighborSignaledDown}},
		Up:   {Down: {Down, DiagNeighborSignaledDown}, Init: {Up, keep}, Up: {Up, keep}, AdminDown: {Down, DiagNeighborSignaledDown}},
	}
	a, ok := table[local][received]
	return a.to, a.diag, ok && a.diag != keep
}

func TestSessionFollowsTheRFCStateDiagram(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, local := range []State{AdminDown, Down, Init, Up} {
		for _, received := range []State{AdminDown, Down, Init, Up} {
			s := newSession(Config{}, 42)
			s.state, s.diag = local, DiagPathDown // a diag that only a transition changes
			p := Packet{State: received, DetectMult: 3, MyDiscriminator: 7, YourDiscriminator: 42, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
			changed := s.receive(p, now)
			wantState, wantDiag, diagSet := rfcNext(local, received)
			if local == AdminDown {
				wantState, wantDiag, diagSet = AdminDown, DiagPathDown, true // AdminDown discards what it receives
			}
			if !diagSet {
				wantDiag = DiagPathDown
			}
			if s.state != wantState || s.diag != wantDiag {
				t.Errorf("%v receiving %v: now %v (%v), want %v (%v)", local, received, s.state, s.diag, wantState, wantDiag)
			}
			if changed != (wantState != local) {
				t.Errorf("%v receiving %v: reported changed=%v", local, received, changed)
			}
		}
	}
}

func TestSessionTimersAndPollSequence(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSession(Config{DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 50 * time.Millisecond, DetectMult: 3}, 42)
	first := s.packet(false)
	if first.State != Down || first.DesiredMinTx != time.Second || first.RequiredMinRx != 50*time.Millisecond || first.YourDiscriminator != 0 || first.Poll || first.MyDiscriminator != 42 {
		t.Fatalf("first packet %+v: want Down, 1 s desired (not Up), 50 ms required, no discriminator of the peer, no poll", first)
	}
	if iv := s.txInterval(); iv != time.Second {
		t.Fatalf("interval before the peer spoke: %v, want the slow 1 s", iv)
	}

	// The peer, Down, slow as well: Init, and the peer may be silent for
	// 3 x max(50 ms, its 1 s).
	peer := Packet{State: Down, DetectMult: 3, MyDiscriminator: 7, DesiredMinTx: time.Second, RequiredMinRx: 200 * time.Millisecond}
	s.receive(peer, now)
	if s.state != Init || !s.detectAt.Equal(now.Add(3*time.Second)) || s.packet(false).YourDiscriminator != 7 {
		t.Fatalf("after the peer's Down: %v, detect at %v, your discriminator %d; want Init, +3 s, 7", s.state, s.detectAt.Sub(now), s.packet(false).YourDiscriminator)
	}

	// Up: the fast interval is advertised with Poll until the peer
	// answers Final; the interval is the slower of ours and what the peer
	// accepts.
	peer.State, peer.YourDiscriminator = Init, 42
	s.receive(peer, now)
	if p := s.packet(false); s.state != Up || !p.Poll || p.DesiredMinTx != 100*time.Millisecond {
		t.Fatalf("after the peer's Init: %v, packet %+v; want Up polling with 100 ms", s.state, p)
	}
	if iv := s.txInterval(); iv != 200*time.Millisecond {
		t.Fatalf("interval when Up: %v, want max(100 ms ours, 200 ms the peer's)", iv)
	}
	peer.State, peer.Final, peer.DesiredMinTx = Up, true, 150*time.Millisecond
	s.receive(peer, now)
	if s.packet(false).Poll {
		t.Fatal("Final did not end the poll")
	}
	if !s.detectAt.Equal(now.Add(450 * time.Millisecond)) {
		t.Fatalf("detection after the peer sped up: %v, want 3 x 150 ms", s.detectAt.Sub(now))
	}

	// The peer polls: a Final is owed at once, and a Final never polls.
	peer.Final, peer.Poll = false, true
	s.receive(peer, now)
	if !s.finalDue {
		t.Fatal("a poll from the peer owes no Final")
	}
	if p := s.packet(true); !p.Final || p.Poll {
		t.Fatalf("the answer to a poll: %+v", p)
	}

	// Silence: nothing before the detection time, Down at it, and the
	// peer forgotten; Down advertises the slow interval again, polling.
	if s.expire(now.Add(449 * time.Millisecond)) {
		t.Fatal("down before the detection time")
	}
	if !s.expire(now.Add(450*time.Millisecond)) || s.state != Down || s.diag != DiagControlDetectionExpired {
		t.Fatalf("at the detection time: %v (%v), want Down (control detection time expired)", s.state, s.diag)
	}
	if p := s.packet(false); p.YourDiscriminator != 0 || p.DesiredMinTx != time.Second || !p.Poll {
		t.Fatalf("after expiry: %+v; want the peer forgotten and a poll for 1 s", p)
	}
	if s.expire(now.Add(time.Hour)) {
		t.Fatal("a disarmed timer expired again")
	}

	// A peer that wants no periodic packets gets none.
	peer.RequiredMinRx = 0
	s.receive(peer, now)
	if iv := s.txInterval(); iv != 0 {
		t.Fatalf("interval with a peer requiring 0: %v", iv)
	}

	// Taken down administratively: AdminDown, and what arrives changes
	// nothing.
	s.adminDown()
	peer.State = Down
	if s.receive(peer, now) || s.state != AdminDown || s.diag != DiagAdministrativelyDown || s.packet(false).Poll {
		t.Fatalf("AdminDown: %v (%v)", s.state, s.diag)
	}
}
