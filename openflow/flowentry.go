package openflow

import "fmt"

// FlowEntry is one flow entry of a flow dump in its wire form
// (ofp_flow_desc), read in place: its accessors allocate nothing, so a
// caller that only needs a digest of each flow (an index of what a switch
// holds, say) can walk a dump of any size without decoding it. Decode
// gives the full Flow.
//
// The lengths of the entry, its match and its statistics have been checked;
// the OXM fields and instructions inside have not, which Decode does. A
// FlowEntry aliases the reply it was read from: it is valid only while the
// callback it was handed to runs (see Client.DumpFlowEntries).
type FlowEntry struct {
	b        []byte // the whole entry
	matchEnd int    // offset just past the match's padding
	statsEnd int    // offset just past the statistics' padding
}

// Table is the table the flow is in.
func (e FlowEntry) Table() uint8 { return e.b[4] }

// Priority is the flow's priority.
func (e FlowEntry) Priority() uint16 { return be.Uint16(e.b[6:]) }

// Cookie is the flow's cookie.
func (e FlowEntry) Cookie() uint64 { return be.Uint64(e.b[16:]) }

// Match returns the entry's ofp_match as the switch encoded it, header and
// padding included: for a flow this package installed, the bytes
// Match.AppendBinary wrote (Open vSwitch keeps a match's canonical form).
func (e FlowEntry) Match() []byte { return e.b[flowDescFixedLen:e.matchEnd] }

// Instructions returns the entry's instructions as the switch encoded
// them: for a flow this package installed, the bytes AppendInstructions
// wrote.
func (e FlowEntry) Instructions() []byte { return e.b[e.statsEnd:] }

// Decode decodes the entry into a Flow, which does not alias it.
func (e FlowEntry) Decode() (Flow, error) {
	p := e.b
	f := Flow{
		Table: p[4], Priority: be.Uint16(p[6:]), IdleTimeout: be.Uint16(p[8:]), HardTimeout: be.Uint16(p[10:]),
		Flags: FlowModFlags(be.Uint16(p[12:])), Importance: be.Uint16(p[14:]), Cookie: be.Uint64(p[16:]),
	}
	var err error
	if f.Match, _, err = ParseMatch(e.Match()); err != nil {
		return Flow{}, err
	}
	if _, err := f.Stats.decode(p[e.matchEnd:]); err != nil {
		return Flow{}, err
	}
	if f.Instructions, err = ParseInstructions(e.Instructions()); err != nil {
		return Flow{}, err
	}
	return f, nil
}

// Entry encodes f as a flow dump holds it, for code that reads entries in
// place but is handed a decoded flow (a dump kept whole, a test).
func (f *Flow) Entry() (FlowEntry, error) {
	b, err := f.AppendBinary(nil)
	if err != nil {
		return FlowEntry{}, err
	}
	e, _, err := splitFlowEntry(b)
	return e, err
}

// splitFlowEntry reads the flow entry at the start of b, checking the
// lengths of the entry, its match and its statistics, and returns it with
// the entry's length.
func splitFlowEntry(b []byte) (FlowEntry, int, error) {
	if len(b) < flowDescFixedLen {
		return FlowEntry{}, 0, decodeErr("flow entry", 0, "%d bytes, want at least %d", len(b), flowDescFixedLen)
	}
	n := int(be.Uint16(b))
	if n < flowDescFixedLen || n > len(b) {
		return FlowEntry{}, 0, decodeErr("flow entry", 0, "length %d does not fit in %d bytes", n, len(b))
	}
	e := FlowEntry{b: b[:n]}
	m, err := matchLen(e.b[flowDescFixedLen:])
	if err != nil {
		return FlowEntry{}, 0, err
	}
	e.matchEnd = flowDescFixedLen + pad8(m)
	s, err := statsLen(e.b[e.matchEnd:])
	if err != nil {
		return FlowEntry{}, 0, err
	}
	e.statsEnd = e.matchEnd + pad8(s)
	return e, n, nil
}

// EachFlowEntry calls fn with each flow entry of one part of a flow dump's
// reply, a whole MULTIPART_REPLY message as read from the switch, without
// allocating per entry; fn must not keep the entry past its return. An
// error from fn stops it and is returned.
func EachFlowEntry(part []byte, fn func(FlowEntry) error) error {
	h, err := ParseHeader(part)
	if err != nil {
		return err
	}
	if h.Type != TypeMultipartReply || h.Version != Version || int(h.Length) != len(part) {
		return fmt.Errorf("openflow: flow dump answered with %v (version %#x, %d bytes in a %d-byte header)", h.Type, h.Version, len(part), h.Length)
	}
	t, _, body, err := splitMultipart("MULTIPART_REPLY", part[HeaderLen:])
	if err != nil {
		return err
	}
	if t != MultipartFlowDesc {
		return fmt.Errorf("openflow: flow dump answered with multipart type %d", t)
	}
	return eachFlowEntryOfBody(body, fn)
}

// eachFlowEntryOfBody calls fn with each entry of the body of a flow
// dump's reply part; an error from fn stops it.
func eachFlowEntryOfBody(b []byte, fn func(FlowEntry) error) error {
	for off := 0; off < len(b); {
		e, n, err := splitFlowEntry(b[off:])
		if err != nil {
			if de, ok := err.(*DecodeError); ok && de.Offset >= 0 {
				de.Offset += off
			}
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
		off += n
	}
	return nil
}
