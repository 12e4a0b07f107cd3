package bfd

import "time"

// Config is a session's timers. The defaults detect a dead peer in 300 ms
// at 10 packets a second each way per session.
type Config struct {
	// DesiredMinTx is how often this system would send while the session
	// is Up: lower detects faster, at 1/DesiredMinTx packets a second per
	// session.
	DesiredMinTx time.Duration
	// RequiredMinRx is the fastest this system accepts packets; the
	// peer's detection of this system is paced by the slower of this and
	// the peer's own transmit interval.
	RequiredMinRx time.Duration
	// DetectMult is how many intervals without a packet declare the peer
	// down: lower detects faster, higher rides out lost packets.
	DetectMult uint8
}

const (
	DefaultDesiredMinTx  = 100 * time.Millisecond
	DefaultRequiredMinRx = 100 * time.Millisecond
	DefaultDetectMult    = 3

	// slowTxInterval is the least a system advertises while its session
	// is not Up (RFC 5880 section 6.8.3): a peer that is not there costs
	// one packet a second.
	slowTxInterval = time.Second
	// initialRemoteMinRx is bfd.RemoteMinRxInterval before the peer has
	// said anything (RFC 5880 section 6.8.1).
	initialRemoteMinRx = time.Microsecond
)

// WithDefaults fills the zero fields of c with the defaults.
func (c Config) WithDefaults() Config {
	if c.DesiredMinTx <= 0 {
		c.DesiredMinTx = DefaultDesiredMinTx
	}
	if c.RequiredMinRx <= 0 {
		c.RequiredMinRx = DefaultRequiredMinRx
	}
	if c.DetectMult == 0 {
		c.DetectMult = DefaultDetectMult
	}
	return c
}

// session is one BFD session's state variables (RFC 5880 section 6.8.1)
// and its reception, timer and transmission rules (sections 6.8.3 to
// 6.8.7), as functions of the packets it is given and the time it is
// told: it does no I/O and reads no clock, so a test can drive it.
type session struct {
	cfg        Config
	localDiscr uint32
	state      State
	diag       Diag

	remoteDiscr        uint32
	remoteState        State
	remoteMinRx        time.Duration
	remoteDesiredMinTx time.Duration
	remoteDetectMult   uint8

	// advertisedTx is bfd.DesiredMinTxInterval: at least slowTxInterval
	// while not Up.
	advertisedTx time.Duration
	// pollActive: a timer change is being confirmed; packets carry Poll
	// until one with Final arrives.
	pollActive bool
	// finalDue: the peer polled, and a packet with Final is owed now.
	finalDue bool
	// detectAt is when the peer is declared down without another packet;
	// zero while nothing has been received.
	detectAt time.Time
}

func newSession(cfg Config, localDiscr uint32) *session {
	s := &session{cfg: cfg.WithDefaults(), localDiscr: localDiscr, state: Down, remoteState: Down, remoteMinRx: initialRemoteMinRx}
	s.advertisedTx = s.desiredTxFor(Down)
	return s
}

func (s *session) desiredTxFor(st State) time.Duration {
	if st == Up {
		return s.cfg.DesiredMinTx
	}
	return max(s.cfg.DesiredMinTx, slowTxInterval)
}

// setState moves the session to st with diag d; a change of the
// advertised transmit interval that comes with it starts a Poll Sequence.
func (s *session) setState(st State, d Diag) {
	s.state, s.diag = st, d
	if tx := s.desiredTxFor(st); tx != s.advertisedTx {
		s.advertisedTx = tx
		s.pollActive = true
	}
}

// detectionTime is how long the peer may be silent (asynchronous mode).
func (s *session) detectionTime() time.Duration {
	return time.Duration(s.remoteDetectMult) * max(s.cfg.RequiredMinRx, s.remoteDesiredMinTx)
}

// receive applies a packet that passed Decode and was demultiplexed to
// this session (RFC 5880 section 6.8.6). It reports whether the state
// changed.
func (s *session) receive(p Packet, now time.Time) bool {
	s.remoteDiscr = p.MyDiscriminator
	s.remoteState = p.State
	s.remoteMinRx = p.RequiredMinRx
	s.remoteDesiredMinTx = p.DesiredMinTx
	s.remoteDetectMult = p.DetectMult
	if p.Final {
		s.pollActive = false
	}
	s.detectAt = now.Add(s.detectionTime())
	if s.state == AdminDown {
		return false
	}
	if p.Poll {
		s.finalDue = true
	}
	before := s.state
	if p.State == AdminDown {
		if s.state != Down {
			s.setState(Down, DiagNeighborSignaledDown)
		}
		return s.state != before
	}
	switch s.state {
	case Down:
		switch p.State {
		case Down:
			s.setState(Init, DiagNone)
		case Init:
			s.setState(Up, DiagNone)
		}
	case Init:
		if p.State == Init || p.State == Up {
			s.setState(Up, DiagNone)
		}
	case Up:
		if p.State == Down {
			s.setState(Down, DiagNeighborSignaledDown)
		}
	}
	return s.state != before
}

// expire applies the detection timer at now: a peer silent for the
// detection time takes an Init or Up session Down, and is forgotten
// (its discriminator reset, RFC 5880 section 6.8.1). It reports whether
// the state changed.
func (s *session) expire(now time.Time) bool {
	if s.detectAt.IsZero() || now.Before(s.detectAt) {
		return false
	}
	s.detectAt = time.Time{}
	s.remoteDiscr = 0
	s.remoteState = Down
	if s.state == Init || s.state == Up {
		s.setState(Down, DiagControlDetectionExpired)
		return true
	}
	return false
}

// adminDown takes the session administratively down: the peer is told,
// and takes its side Down without declaring a failure.
func (s *session) adminDown() {
	s.state, s.diag = AdminDown, DiagAdministrativelyDown
	s.pollActive = false // nothing to confirm: the session is ending
}

// txInterval is the period of periodic packets before jitter (RFC 5880
// section 6.8.7), 0 when the peer asked for none.
func (s *session) txInterval() time.Duration {
	if s.remoteMinRx == 0 {
		return 0
	}
	return max(s.advertisedTx, s.remoteMinRx)
}

// packet is what the session sends now: with final, the answer to a poll
// (sent at once, outside the periodic schedule).
func (s *session) packet(final bool) Packet {
	return Packet{
		Diag:              s.diag,
		State:             s.state,
		Poll:              s.pollActive && !final,
		Final:             final,
		DetectMult:        s.cfg.DetectMult,
		MyDiscriminator:   s.localDiscr,
		YourDiscriminator: s.remoteDiscr,
		DesiredMinTx:      s.advertisedTx,
		RequiredMinRx:     s.cfg.RequiredMinRx,
	}
}
