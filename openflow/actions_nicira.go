package openflow

import (
	"net/netip"
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Nicira (Open vSwitch) extension actions: type 0xffff, vendor 0x00002320,
// then a 16-bit subtype; every one is padded to a multiple of 8 bytes.

func appendNXHeader(b []byte, subtype uint16) []byte {
	b = append(b, 0xff, 0xff, 0, 0)
	b = be.AppendUint32(b, NiciraExperimenter)
	return be.AppendUint16(b, subtype)
}

// appendNX16 appends the header of a fixed 16-byte Nicira action.
func appendNX16(b []byte, subtype uint16) []byte {
	return be.AppendUint16(append(b, 0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20), subtype)
}

// finishNX pads the action started at start and stores its length.
func finishNX(b []byte, start int, what string) ([]byte, error) {
	b = padTo8(b, start)
	if err := putLen16(b, start, start+2, what); err != nil {
		return b[:start], err
	}
	return b, nil
}

func parseNiciraAction(b []byte, depth int) (Action, error) {
	sub := be.Uint16(b[8:])
	switch sub {
	case nxastResubmit, nxastResubmitTable, nxastResubmitCT:
		if len(b) != 16 {
			return nil, decodeErr("resubmit action", 0, "length %d, want 16", len(b))
		}
		if !ofnum.IsZero(b[13:16]) || (sub == nxastResubmit && b[12] != 0) {
			break
		}
		a := Resubmit{Port: Port16To32(be.Uint16(b[10:])), Table: b[12], CT: sub == nxastResubmitCT}
		if sub == nxastResubmit {
			a.Table = TableAll
		}
		if a.Port == PortInPort {
			a.Port = 0
		}
		if a.Table == TableAll && (a.CT || a.Port == 0) {
			// resubmit(,,ct) and resubmit(,) (the input port, this
			// table) have no text ovs-ofctl reads: kept verbatim.
			break
		}
		return a, nil
	case nxastNote:
		return Note{Data: cloneBytes(b[10:])}, nil
	case nxastDecTTLCntIDs:
		return parseDecTTLCntIDs(b), nil
	case nxastExit:
		if len(b) == 16 && ofnum.IsZero(b[10:]) {
			return Exit{}, nil
		}
	case nxastCTClear:
		if len(b) == 16 && ofnum.IsZero(b[10:]) {
			return CTClear{}, nil
		}
	case nxastConjunction:
		if len(b) != 16 {
			return nil, decodeErr("conjunction action", 0, "length %d, want 16", len(b))
		}
		if b[10] >= b[11] || b[11] < 2 || b[11] > 64 {
			break // no text form: ovs-ofctl reads 1 <= k <= n, 2 <= n <= 64
		}
		return Conjunction{Clause: b[10] + 1, NClauses: b[11], ID: be.Uint32(b[12:])}, nil
	case nxastCT:
		return parseCT(b, depth)
	case nxastNAT:
		return parseNAT(b)
	case nxastClone:
		if len(b) < 16 || !ofnum.IsZero(b[10:16]) {
			break
		}
		acts, err := parseActions(b[16:], depth+1)
		if err != nil {
			return nil, err
		}
		return Clone{Actions: acts}, nil
	case nxastLearn:
		return parseLearn(b)
	case nxastController2:
		if a, ok := parseController2(b); ok {
			return a, nil
		}
	}
	return RawAction{Data: cloneBytes(b)}, nil
}

// Resubmit searches another table (Nicira resubmit). Port 0 means the
// packet's own input port (ovs-ofctl's empty port); Table TableAll (255)
// means the current table. CT resubmits with the conntrack original
// direction tuple (resubmit(,N,ct)).
type Resubmit struct {
	Port  uint32
	Table uint8
	CT    bool
}

// ResubmitTable returns the common resubmit(,table).
func ResubmitTable(table uint8) Resubmit { return Resubmit{Table: table} }

func (a Resubmit) AppendBinary(b []byte) ([]byte, error) {
	port := a.Port
	if port == 0 {
		port = PortInPort
	}
	p16, ok := port32To16(port)
	if !ok {
		return b, encodeErr("resubmit", "port %d has no 16-bit form", a.Port)
	}
	// Open vSwitch always sends resubmit as RESUBMIT_TABLE (table 255 for
	// "current table"); NXAST_RESUBMIT is only decoded.
	sub := uint16(nxastResubmitTable)
	if a.CT {
		sub = nxastResubmitCT
	}
	b = appendNX16(b, sub)
	b = be.AppendUint16(b, p16)
	return append(b, a.Table, 0, 0, 0), nil
}

func (a Resubmit) String() string { return string(a.appendText(nil)) }

func (a Resubmit) appendText(b []byte) []byte {
	port := a.Port
	if port == 0 {
		port = PortInPort
	}
	if port != PortInPort && a.Table == TableAll && !a.CT {
		return append(append(b, "resubmit:"...), PortName(port)...)
	}
	b = append(b, "resubmit("...)
	if port != PortInPort {
		b = append(b, PortName(port)...)
	}
	b = append(b, ',')
	if a.Table != TableAll {
		b = strconv.AppendUint(b, uint64(a.Table), 10)
	}
	if a.CT {
		b = append(b, ",ct"...)
	}
	return append(b, ')')
}

// Note carries opaque bytes with no effect (ovs-ofctl's note:).
type Note struct{ Data []byte }

func (a Note) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, nxastNote)
	b = append(b, a.Data...)
	for len(b)-start < 16 {
		b = append(b, 0)
	}
	return finishNX(b, start, "note")
}

func (a Note) String() string { return string(a.appendText(nil)) }

func (a Note) appendText(b []byte) []byte {
	b = append(b, "note:"...)
	for i, x := range a.Data {
		if i > 0 {
			b = append(b, '.')
		}
		b = appendHexBytes(b, []byte{x})
	}
	return b
}

// Exit stops processing the action list (Nicira exit).
type Exit struct{}

func (a Exit) AppendBinary(b []byte) ([]byte, error) {
	b = appendNX16(b, nxastExit)
	return append(b, 0, 0, 0, 0, 0, 0), nil
}

func (a Exit) String() string { return "exit" }

func (a Exit) appendText(b []byte) []byte { return append(b, "exit"...) }

// CTClear clears the packet's conntrack state (Nicira ct_clear).
type CTClear struct{}

func (a CTClear) AppendBinary(b []byte) ([]byte, error) {
	b = appendNX16(b, nxastCTClear)
	return append(b, 0, 0, 0, 0, 0, 0), nil
}

func (a CTClear) String() string { return "ct_clear" }

func (a CTClear) appendText(b []byte) []byte { return append(b, "ct_clear"...) }

// Conjunction makes the flow one clause of a conjunctive match (Nicira
// conjunction). Clause is 1-based, as in ovs-ofctl's conjunction(id,k/n).
type Conjunction struct {
	ID       uint32
	Clause   uint8 // 1..NClauses
	NClauses uint8 // 2..64
}

func (a Conjunction) AppendBinary(b []byte) ([]byte, error) {
	if a.Clause == 0 || a.Clause > a.NClauses {
		return b, encodeErr("conjunction", "clause %d of %d", a.Clause, a.NClauses)
	}
	b = appendNX16(b, nxastConjunction)
	b = append(b, a.Clause-1, a.NClauses)
	return be.AppendUint32(b, a.ID), nil
}

func (a Conjunction) String() string { return string(a.appendText(nil)) }

func (a Conjunction) appendText(b []byte) []byte {
	b = append(b, "conjunction("...)
	b = strconv.AppendUint(b, uint64(a.ID), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(a.Clause), 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(a.NClauses), 10)
	return append(b, ')')
}

// Clone runs actions on a copy of the packet (Nicira clone).
type Clone struct{ Actions []Action }

func (a Clone) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, nxastClone)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b, err := AppendActions(b, a.Actions)
	if err != nil {
		return b[:start], err
	}
	return finishNX(b, start, "clone")
}

func (a Clone) String() string { return string(a.appendText(nil)) }

func (a Clone) appendText(b []byte) []byte {
	b = append(b, "clone("...)
	b = appendActionList(b, a.Actions)
	return append(b, ')')
}

// FormatActions prints an action list as ovs-ofctl does after "actions=",
// comma-separated.
func FormatActions(acts []Action) string { return string(appendActionList(nil, acts)) }

func appendActionList(b []byte, acts []Action) []byte {
	for i, a := range acts {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendActionText(b, a)
	}
	return b
}

// CT flags.
const (
	CTCommit uint16 = 1 // commit the connection to the conntrack table
	CTForce  uint16 = 2 // first delete a connection in the other direction
)

// Well-known ALG ports for CT.Alg.
const (
	CTAlgFTP  uint16 = 21
	CTAlgTFTP uint16 = 69
)

// CT sends the packet through the connection tracker (Nicira ct). The zone
// is ZoneField when it names a field, else Zone. With Recirculate the
// packet continues in table Table after tracking; otherwise processing
// continues with the next action. Actions may only hold NAT and SetField
// on ct_mark / ct_label (Open vSwitch's exec(...)).
type CT struct {
	Flags       uint16 // CTCommit | CTForce
	Zone        uint16
	ZoneField   Subfield // zone read from a field, e.g. NXM_NX_REG0[0..15]
	Recirculate bool
	Table       uint8
	Alg         uint16 // application layer gateway port: CTAlgFTP, CTAlgTFTP
	Actions     []Action
}

const ctNoRecirc = 0xff

func (a CT) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, nxastCT)
	b = be.AppendUint16(b, a.Flags)
	if a.ZoneField.Field != FieldNone {
		if !a.ZoneField.Field.valid() {
			return b[:start], encodeErr("ct", "invalid zone field")
		}
		b = be.AppendUint32(b, a.ZoneField.Field.Header())
		b = be.AppendUint16(b, a.ZoneField.ofsNbits())
	} else {
		b = be.AppendUint32(b, 0)
		b = be.AppendUint16(b, a.Zone)
	}
	table := uint8(ctNoRecirc)
	if a.Recirculate {
		table = a.Table
	}
	b = append(b, table, 0, 0, 0)
	b = be.AppendUint16(b, a.Alg)
	b, err := AppendActions(b, a.Actions)
	if err != nil {
		return b[:start], err
	}
	return finishNX(b, start, "ct")
}

func parseCT(b []byte, depth int) (Action, error) {
	if len(b) < 24 {
		return nil, decodeErr("ct action", 0, "length %d < 24", len(b))
	}
	a := CT{Flags: be.Uint16(b[10:]), Alg: be.Uint16(b[22:])}
	if a.Flags&^(CTCommit|CTForce) != 0 || a.Flags == CTForce {
		// Flags the text cannot say, or force without commit (which
		// ovs-ofctl refuses): kept verbatim.
		return RawAction{Data: cloneBytes(b)}, nil
	}
	if h := be.Uint32(b[12:]); h != 0 {
		sf, ok := subfieldFromOfsNbits(h, be.Uint16(b[16:]))
		if !ok || sf.Bits != 16 {
			return RawAction{Data: cloneBytes(b)}, nil
		}
		a.ZoneField = sf
	} else {
		a.Zone = be.Uint16(b[16:])
	}
	if t := b[18]; t != ctNoRecirc {
		a.Recirculate, a.Table = true, t
	}
	if !ofnum.IsZero(b[19:22]) {
		return RawAction{Data: cloneBytes(b)}, nil
	}
	acts, err := parseActions(b[24:], depth+1)
	if err != nil {
		return nil, err
	}
	a.Actions = acts
	return a, nil
}

func (a CT) String() string { return string(a.appendText(nil)) }

func (a CT) appendText(b []byte) []byte {
	start := len(b)
	b = append(b, "ct("...)
	if a.Flags&CTCommit != 0 {
		b = append(b, "commit,"...)
	}
	if a.Flags&CTForce != 0 {
		b = append(b, "force,"...)
	}
	if a.Recirculate {
		b = append(b, "table="...)
		b = strconv.AppendUint(b, uint64(a.Table), 10)
		b = append(b, ',')
	}
	if a.ZoneField.Field != FieldNone {
		b = append(b, "zone="...)
		b = a.ZoneField.appendText(b)
		b = append(b, ',')
	} else if a.Zone != 0 {
		b = append(b, "zone="...)
		b = strconv.AppendUint(b, uint64(a.Zone), 10)
		b = append(b, ',')
	}
	acts := a.Actions
	if len(acts) > 0 {
		if nat, ok := acts[0].(NAT); ok {
			b = nat.appendText(b)
			b = append(b, ',')
			acts = acts[1:]
		}
	}
	if len(acts) > 0 {
		b = append(b, "exec("...)
		b = appendActionList(b, acts)
		b = append(b, "),"...)
	}
	switch a.Alg {
	case 0:
	case CTAlgFTP:
		b = append(b, "alg=ftp,"...)
	case CTAlgTFTP:
		b = append(b, "alg=tftp,"...)
	default:
		b = append(b, "alg="...)
		b = strconv.AppendUint(b, uint64(a.Alg), 10)
		b = append(b, ',')
	}
	if len(b) > start+3 {
		b = b[:len(b)-1]
	}
	return append(b, ')')
}

// NAT flags.
const (
	NATSrc         uint16 = 1  // source NAT
	NATDst         uint16 = 2  // destination NAT
	NATPersistent  uint16 = 4  // same mapping across restarts
	NATProtoHash   uint16 = 8  // choose the port by hashing
	NATProtoRandom uint16 = 16 // choose the port at random
)

const (
	natRangeIPv4Min  = 1
	natRangeIPv4Max  = 2
	natRangeIPv6Min  = 4
	natRangeIPv6Max  = 8
	natRangeProtoMin = 16
	natRangeProtoMax = 32
)

// NAT translates addresses, only inside CT.Actions (Nicira nat). Without
// NATSrc or NATDst it only undoes the translation of an existing
// connection. MinAddr/MaxAddr and MinPort/MaxPort give the ranges to map
// to; zero values are absent (a single address leaves MaxAddr unset).
type NAT struct {
	Flags            uint16
	MinAddr, MaxAddr netip.Addr
	MinPort, MaxPort uint16
}

func (a NAT) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, nxastNAT)
	b = append(b, 0, 0)
	b = be.AppendUint16(b, a.Flags)
	// As in Open vSwitch, an unspecified (all-zero) address is absent.
	var present uint16
	if a.MinAddr.IsValid() && !a.MinAddr.IsUnspecified() {
		if a.MinAddr.Is4() {
			present |= natRangeIPv4Min
		} else {
			present |= natRangeIPv6Min
		}
	}
	if a.MaxAddr.IsValid() && !a.MaxAddr.IsUnspecified() {
		if a.MaxAddr.Is4() {
			present |= natRangeIPv4Max
		} else {
			present |= natRangeIPv6Max
		}
	}
	if a.MinPort != 0 {
		present |= natRangeProtoMin
	}
	if a.MaxPort != 0 {
		present |= natRangeProtoMax
	}
	b = be.AppendUint16(b, present)
	if present&natRangeIPv4Min != 0 {
		x := a.MinAddr.As4()
		b = append(b, x[:]...)
	}
	if present&natRangeIPv4Max != 0 {
		x := a.MaxAddr.As4()
		b = append(b, x[:]...)
	}
	if present&natRangeIPv6Min != 0 {
		x := a.MinAddr.As16()
		b = append(b, x[:]...)
	}
	if present&natRangeIPv6Max != 0 {
		x := a.MaxAddr.As16()
		b = append(b, x[:]...)
	}
	if present&natRangeProtoMin != 0 {
		b = be.AppendUint16(b, a.MinPort)
	}
	if present&natRangeProtoMax != 0 {
		b = be.AppendUint16(b, a.MaxPort)
	}
	return finishNX(b, start, "nat")
}

func parseNAT(b []byte) (Action, error) {
	if len(b) < 16 {
		return nil, decodeErr("nat action", 0, "length %d < 16", len(b))
	}
	a := NAT{Flags: be.Uint16(b[12:])}
	present := be.Uint16(b[14:])
	p := b[16:]
	take := func(n int) []byte {
		if len(p) < n {
			return nil
		}
		x := p[:n]
		p = p[n:]
		return x
	}
	// Keep verbatim what ovs-ofctl's nat(...) syntax cannot express: unknown
	// bits, both directions, both port choices (hash and random), ranges
	// without a direction, a maximum without a minimum, or mixed address
	// families.
	hasV4, hasV6 := present&(natRangeIPv4Min|natRangeIPv4Max) != 0, present&(natRangeIPv6Min|natRangeIPv6Max) != 0
	if present&^0x3f != 0 || a.Flags&^0x1f != 0 || a.Flags&(NATSrc|NATDst) == NATSrc|NATDst ||
		a.Flags&(NATProtoHash|NATProtoRandom) == NATProtoHash|NATProtoRandom ||
		(a.Flags&(NATSrc|NATDst) == 0 && (present != 0 || a.Flags != 0)) || (hasV4 && hasV6) ||
		(present&natRangeIPv4Max != 0 && present&natRangeIPv4Min == 0) ||
		(present&natRangeIPv6Max != 0 && present&natRangeIPv6Min == 0) ||
		(present&natRangeProtoMax != 0 && present&natRangeProtoMin == 0) ||
		(present&natRangeProtoMin != 0 && !hasV4 && !hasV6) {
		return RawAction{Data: cloneBytes(b)}, nil
	}
	for _, r := range []struct {
		bit  uint16
		n    int
		addr *netip.Addr
		port *uint16
	}{
		{natRangeIPv4Min, 4, &a.MinAddr, nil}, {natRangeIPv4Max, 4, &a.MaxAddr, nil},
		{natRangeIPv6Min, 16, &a.MinAddr, nil}, {natRangeIPv6Max, 16, &a.MaxAddr, nil},
		{natRangeProtoMin, 2, nil, &a.MinPort}, {natRangeProtoMax, 2, nil, &a.MaxPort},
	} {
		if present&r.bit == 0 {
			continue
		}
		x := take(r.n)
		if x == nil {
			return nil, decodeErr("nat action", len(b)-len(p), "range overruns the action")
		}
		if r.addr != nil {
			*r.addr, _ = netip.AddrFromSlice(x)
		} else {
			*r.port = be.Uint16(x)
		}
	}
	return a, nil
}

func (a NAT) String() string { return string(a.appendText(nil)) }

func (a NAT) appendText(b []byte) []byte {
	b = append(b, "nat"...)
	if a.Flags&(NATSrc|NATDst) == 0 {
		return b
	}
	start := len(b)
	b = append(b, '(')
	if a.Flags&NATSrc != 0 {
		b = append(b, "src"...)
	} else {
		b = append(b, "dst"...)
	}
	if a.MinAddr.IsValid() && !a.MinAddr.IsUnspecified() {
		b = append(b, '=')
		// IPv6 addresses are bracketed only when a port follows.
		br := a.MinAddr.Is6() && a.MinPort != 0
		b = appendBracketed(b, a.MinAddr, br)
		if a.MaxAddr.IsValid() && !a.MaxAddr.IsUnspecified() && a.MaxAddr != a.MinAddr {
			b = append(b, '-')
			b = appendBracketed(b, a.MaxAddr, br)
		}
		if a.MinPort != 0 {
			b = append(b, ':')
			b = strconv.AppendUint(b, uint64(a.MinPort), 10)
			if a.MaxPort != 0 && a.MaxPort != a.MinPort {
				b = append(b, '-')
				b = strconv.AppendUint(b, uint64(a.MaxPort), 10)
			}
		}
	}
	b = append(b, ',')
	if a.Flags&NATPersistent != 0 {
		b = append(b, "persistent,"...)
	}
	if a.Flags&NATProtoHash != 0 {
		b = append(b, "hash,"...)
	}
	if a.Flags&NATProtoRandom != 0 {
		b = append(b, "random,"...)
	}
	if len(b) > start+1 {
		b = b[:len(b)-1]
	}
	return append(b, ')')
}

func appendBracketed(b []byte, a netip.Addr, bracket bool) []byte {
	if bracket {
		b = append(b, '[')
	}
	b = appendAddr(b, a)
	if bracket {
		b = append(b, ']')
	}
	return b
}

// ControllerPause sends the packet to the controller and freezes its trip
// through the pipeline (NXAST_CONTROLLER2 with the pause flag; ovs-ofctl's
// controller(pause)). The switch sends it as an NXT_PACKET_IN2 with a
// continuation, and only to a connection that asked for that format
// (SetPacketInFormat); the pipeline goes on, after this action, only when
// that connection sends the continuation back (Resume). With no such
// connection the packet goes no further. MaxLen is the number of bytes
// sent; 0xffff (the default) sends the whole packet, which a continuation
// needs anyway.
type ControllerPause struct{ MaxLen uint16 }

// NXAST_CONTROLLER2 property types (nx_action_controller2_prop_type).
const (
	controller2MaxLen = 0
	controller2Pause  = 4
)

func (a ControllerPause) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(appendNXHeader(b, nxastController2), 0, 0, 0, 0, 0, 0)
	if a.MaxLen != 0xffff {
		// A 16-bit property is 8 bytes long: the value, 2 bytes of padding.
		b = appendProp(b, controller2MaxLen, []byte{byte(a.MaxLen >> 8), byte(a.MaxLen), 0, 0})
	}
	b = appendProp(b, controller2Pause, nil)
	return finishNX(b, start, "controller(pause)")
}

// parseController2 reads an NXAST_CONTROLLER2 that carries the pause flag
// and at most a max_len; any other form stays a RawAction.
func parseController2(b []byte) (Action, bool) {
	if len(b) < 16 || !ofnum.IsZero(b[10:16]) {
		return nil, false
	}
	a, pause := ControllerPause{MaxLen: 0xffff}, false
	ok := props(b[16:], func(typ uint16, value, _ []byte) bool {
		switch {
		case typ == controller2MaxLen && len(value) == 4 && ofnum.IsZero(value[2:]):
			a.MaxLen = be.Uint16(value)
		case typ == controller2Pause && len(value) == 0:
			pause = true
		default:
			return false
		}
		return true
	})
	return a, ok && pause
}

func (a ControllerPause) String() string { return string(a.appendText(nil)) }

func (a ControllerPause) appendText(b []byte) []byte {
	b = append(b, "controller("...)
	if a.MaxLen != 0xffff {
		b = strconv.AppendUint(append(b, "max_len="...), uint64(a.MaxLen), 10)
		b = append(b, ',')
	}
	return append(b, "pause)"...)
}
