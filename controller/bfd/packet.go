package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// State is a session's state (RFC 5880 section 4.1, "Sta").
type State uint8

const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

var stateNames = [...]string{"AdminDown", "Down", "Init", "Up"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Diag says why a session last left Up (RFC 5880 section 4.1).
type Diag uint8

const (
	DiagNone                    Diag = 0
	DiagControlDetectionExpired Diag = 1
	DiagEchoFailed              Diag = 2
	DiagNeighborSignaledDown    Diag = 3
	DiagForwardingPlaneReset    Diag = 4
	DiagPathDown                Diag = 5
	DiagConcatenatedPathDown    Diag = 6
	DiagAdministrativelyDown    Diag = 7
	DiagReverseConcatenatedDown Diag = 8
)

// The Control packet's wire layout (RFC 5880 section 4.1).
const (
	version      = 1
	packetLen    = 24 // without authentication
	authMinLen   = 26 // with the smallest authentication section
	versionShift = 5
	diagMask     = 0x1f
	stateShift   = 6

	flagPoll       = 1 << 5
	flagFinal      = 1 << 4
	flagCPI        = 1 << 3
	flagAuth       = 1 << 2
	flagDemand     = 1 << 1
	flagMultipoint = 1 << 0

	// Intervals are carried in microseconds, in 32 bits.
	intervalUnit = time.Microsecond
	maxInterval  = time.Duration(1<<32-1) * intervalUnit
)

var diagNames = [...]string{
	"none", "control detection time expired", "echo function failed",
	"neighbor signaled session down", "forwarding plane reset", "path down",
	"concatenated path down", "administratively down", "reverse concatenated path down",
}

func (d Diag) String() string {
	if int(d) < len(diagNames) {
		return diagNames[d]
	}
	return fmt.Sprintf("diag(%d)", uint8(d))
}

// Packet is a BFD Control packet without authentication (RFC 5880
// section 4.1). Intervals are carried in microseconds; a Duration here
// round-trips exactly for every value the field holds.
type Packet struct {
	Diag  Diag
	State State
	// Poll and Final run a Poll Sequence: a change of timers is confirmed
	// by a packet with Final set.
	Poll, Final bool
	// ControlPlaneIndependent, Demand: what the sender claims; this
	// package sets neither.
	ControlPlaneIndependent, Demand bool
	DetectMult                      uint8
	MyDiscriminator                 uint32
	YourDiscriminator               uint32
	DesiredMinTx                    time.Duration
	RequiredMinRx                   time.Duration
	RequiredMinEchoRx               time.Duration
}

// Append encodes p after b. Intervals above the field's range are sent
// as its maximum.
func (p *Packet) Append(b []byte) []byte {
	b = append(b, version<<versionShift|byte(p.Diag&diagMask), byte(p.State&3)<<stateShift|flagBits(p), p.DetectMult, packetLen)
	b = binary.BigEndian.AppendUint32(b, p.MyDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.YourDiscriminator)
	for _, d := range [...]time.Duration{p.DesiredMinTx, p.RequiredMinRx, p.RequiredMinEchoRx} {
		b = binary.BigEndian.AppendUint32(b, intervalField(d))
	}
	return b
}

func flagBits(p *Packet) byte {
	var f byte
	for _, x := range [...]struct {
		set  bool
		flag byte
	}{{p.Poll, flagPoll}, {p.Final, flagFinal}, {p.ControlPlaneIndependent, flagCPI}, {p.Demand, flagDemand}} {
		if x.set {
			f |= x.flag
		}
	}
	return f
}

func intervalField(d time.Duration) uint32 {
	switch {
	case d <= 0:
		return 0
	case d >= maxInterval:
		return 1<<32 - 1
	}
	return uint32(d / intervalUnit)
}

// Reasons a received packet is discarded (RFC 5880 section 6.8.6, the
// checks that need no session).
var (
	ErrVersion           = errors.New("bfd: version is not 1")
	ErrLength            = errors.New("bfd: length field too small or beyond the datagram")
	ErrDetectMult        = errors.New("bfd: detect multiplier is zero")
	ErrMultipoint        = errors.New("bfd: multipoint bit set")
	ErrMyDiscriminator   = errors.New("bfd: my discriminator is zero")
	ErrYourDiscriminator = errors.New("bfd: your discriminator is zero outside Down and AdminDown")
	ErrAuthentication    = errors.New("bfd: authenticated packet, and this system uses no authentication")
)

// Decode reads a Control packet from a UDP payload, applying the checks
// of RFC 5880 section 6.8.6 that need no session. It never panics.
func Decode(b []byte) (Packet, error) {
	if len(b) < packetLen {
		return Packet{}, ErrLength
	}
	if b[0]>>versionShift != version {
		return Packet{}, ErrVersion
	}
	n := int(b[3])
	auth := b[1]&flagAuth != 0
	if n < packetLen || auth && n < authMinLen || n > len(b) {
		return Packet{}, ErrLength
	}
	p := Packet{
		Diag:                    Diag(b[0] & diagMask),
		State:                   State(b[1] >> stateShift),
		Poll:                    b[1]&flagPoll != 0,
		Final:                   b[1]&flagFinal != 0,
		ControlPlaneIndependent: b[1]&flagCPI != 0,
		Demand:                  b[1]&flagDemand != 0,
		DetectMult:              b[2],
		MyDiscriminator:         binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator:       binary.BigEndian.Uint32(b[8:]),
		DesiredMinTx:            time.Duration(binary.BigEndian.Uint32(b[12:])) * intervalUnit,
		RequiredMinRx:           time.Duration(binary.BigEndian.Uint32(b[16:])) * intervalUnit,
		RequiredMinEchoRx:       time.Duration(binary.BigEndian.Uint32(b[20:])) * intervalUnit,
	}
	switch {
	case p.DetectMult == 0:
		return Packet{}, ErrDetectMult
	case b[1]&flagMultipoint != 0:
		return Packet{}, ErrMultipoint
	case p.MyDiscriminator == 0:
		return Packet{}, ErrMyDiscriminator
	case p.YourDiscriminator == 0 && p.State != Down && p.State != AdminDown:
		return Packet{}, ErrYourDiscriminator
	case auth:
		return Packet{}, ErrAuthentication
	}
	return p, nil
}
