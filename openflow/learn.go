package openflow

import (
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Learn flags.
const (
	LearnSendFlowRem   uint16 = 1 // learned flows send FLOW_REMOVED
	LearnDeleteLearned uint16 = 2 // delete learned flows when this flow goes
)

// LearnSpecKind says what a LearnSpec builds in the learned flow.
type LearnSpecKind uint8

const (
	LearnMatch  LearnSpecKind = 0 // a match on Dst
	LearnLoad   LearnSpecKind = 1 // a load into Dst
	LearnOutput LearnSpecKind = 2 // an output to the port in Src
)

// LearnSpec is one flow_mod_spec of a Learn action. The source is Value
// when it is non-nil (an immediate: 2*ceil(bits/16) bytes, big-endian, as on
// the wire), otherwise the field bits Src. For immediates the width is
// Dst's.
type LearnSpec struct {
	Kind  LearnSpecKind
	Src   Subfield
	Value []byte
	Dst   Subfield
}

func (s LearnSpec) nbits() int {
	if s.Value != nil {
		return s.Dst.NBits()
	}
	return s.Src.NBits()
}

// Learn adds or modifies a flow built from the packet (Nicira learn).
type Learn struct {
	Table          uint8
	IdleTimeout    uint16
	HardTimeout    uint16
	FinIdleTimeout uint16
	FinHardTimeout uint16
	Priority       uint16
	Cookie         uint64
	Flags          uint16 // LearnSendFlowRem | LearnDeleteLearned
	Specs          []LearnSpec
}

const (
	learnSrcImmediate = 1 << 13
	learnDstShift     = 11
)

func (a Learn) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, nxastLearn)
	b = be.AppendUint16(b, a.IdleTimeout)
	b = be.AppendUint16(b, a.HardTimeout)
	b = be.AppendUint16(b, a.Priority)
	b = be.AppendUint64(b, a.Cookie)
	b = be.AppendUint16(b, a.Flags)
	b = append(b, a.Table, 0)
	b = be.AppendUint16(b, a.FinIdleTimeout)
	b = be.AppendUint16(b, a.FinHardTimeout)
	for _, s := range a.Specs {
		n := s.nbits()
		if n <= 0 || n > 0x7ff || s.Kind > LearnOutput {
			return b[:start], encodeErr("learn", "bad spec (kind %d, %d bits)", s.Kind, n)
		}
		h := uint16(n) | uint16(s.Kind)<<learnDstShift
		if s.Value != nil {
			if s.Kind == LearnOutput || len(s.Value) != 2*((n+15)/16) {
				return b[:start], encodeErr("learn", "immediate of %d bytes for %d bits (want %d)", len(s.Value), n, 2*((n+15)/16))
			}
			h |= learnSrcImmediate
		}
		b = be.AppendUint16(b, h)
		if s.Value != nil {
			b = append(b, s.Value...)
		} else {
			if !s.Src.Field.valid() {
				return b[:start], encodeErr("learn", "spec without source")
			}
			b = be.AppendUint32(b, s.Src.Field.nxmHeader())
			b = be.AppendUint16(b, s.Src.Offset)
		}
		if s.Kind != LearnOutput {
			if !s.Dst.Field.valid() {
				return b[:start], encodeErr("learn", "spec without destination")
			}
			b = be.AppendUint32(b, s.Dst.Field.nxmHeader())
			b = be.AppendUint16(b, s.Dst.Offset)
		}
	}
	return finishNX(b, start, "learn")
}

func parseLearn(b []byte) (Action, error) {
	if len(b) < 32 {
		return nil, decodeErr("learn action", 0, "length %d < 32", len(b))
	}
	raw := RawAction{Data: cloneBytes(b)}
	a := Learn{
		IdleTimeout: be.Uint16(b[10:]), HardTimeout: be.Uint16(b[12:]), Priority: be.Uint16(b[14:]),
		Cookie: be.Uint64(b[16:]), Flags: be.Uint16(b[24:]), Table: b[26],
		FinIdleTimeout: be.Uint16(b[28:]), FinHardTimeout: be.Uint16(b[30:]),
	}
	if b[27] != 0 || a.Flags&^(LearnSendFlowRem|LearnDeleteLearned) != 0 {
		return raw, nil
	}
	p := b[32:]
	for len(p) >= 2 {
		h := be.Uint16(p)
		if h == 0 {
			if !ofnum.IsZero(p) {
				return raw, nil
			}
			break
		}
		p = p[2:]
		n := int(h & 0x7ff)
		kind := LearnSpecKind(h >> learnDstShift & 3)
		if n == 0 || h&0xc000 != 0 || kind > LearnOutput {
			return raw, nil
		}
		var s LearnSpec
		s.Kind = kind
		if h&learnSrcImmediate != 0 {
			k := 2 * ((n + 15) / 16)
			if len(p) < k || kind == LearnOutput {
				return raw, nil
			}
			s.Value = cloneBytes(p[:k])
			p = p[k:]
			for i := n; i < 8*k; i++ {
				if ofnum.GetBit(s.Value, i) {
					return raw, nil // bits beyond the spec's width
				}
			}
		} else {
			var ok bool
			if s.Src, p, ok = readLearnSubfield(p, n); !ok {
				return raw, nil
			}
		}
		if kind != LearnOutput {
			var ok bool
			if s.Dst, p, ok = readLearnSubfield(p, n); !ok {
				return raw, nil
			}
		}
		a.Specs = append(a.Specs, s)
	}
	if len(p) == 1 && p[0] != 0 {
		return raw, nil
	}
	return a, nil
}

func (a Learn) String() string { return string(a.appendText(nil)) }

func (a Learn) appendText(b []byte) []byte {
	b = append(b, "learn(table="...)
	b = strconv.AppendUint(b, uint64(a.Table), 10)
	num := func(name string, v uint64) {
		b = append(b, ',')
		b = append(b, name...)
		b = append(b, '=')
		b = strconv.AppendUint(b, v, 10)
	}
	if a.IdleTimeout != 0 {
		num("idle_timeout", uint64(a.IdleTimeout))
	}
	if a.HardTimeout != 0 {
		num("hard_timeout", uint64(a.HardTimeout))
	}
	if a.FinIdleTimeout != 0 {
		num("fin_idle_timeout", uint64(a.FinIdleTimeout))
	}
	if a.FinHardTimeout != 0 {
		num("fin_hard_timeout", uint64(a.FinHardTimeout))
	}
	if a.Priority != DefaultPriority {
		num("priority", uint64(a.Priority))
	}
	if a.Flags&LearnSendFlowRem != 0 {
		b = append(b, ",send_flow_rem"...)
	}
	if a.Flags&LearnDeleteLearned != 0 {
		b = append(b, ",delete_learned"...)
	}
	if a.Cookie != 0 {
		b = append(b, ",cookie=0x"...)
		b = strconv.AppendUint(b, a.Cookie, 16)
	}
	for _, s := range a.Specs {
		b = append(b, ',')
		n := s.nbits()
		nbytes := (n + 7) / 8
		var imm []byte
		if s.Value != nil && len(s.Value) >= nbytes {
			imm = s.Value[len(s.Value)-nbytes:]
		}
		switch {
		case s.Kind == LearnMatch && s.Value != nil:
			if s.Dst.Offset == 0 && n == s.Dst.Field.Bits() {
				w := s.Dst.Field.Width()
				v := make([]byte, w)
				if nbytes <= w {
					copy(v[w-nbytes:], imm)
				}
				b = append(b, s.Dst.Field.String()...)
				b = append(b, '=')
				b = appendValue(b, s.Dst.Field, v, nil)
			} else {
				b = s.Dst.appendText(b)
				b = append(b, '=')
				b = appendHex(b, imm)
			}
		case s.Kind == LearnMatch:
			b = s.Dst.appendText(b)
			if s.Src.Field != s.Dst.Field || s.Src.Offset != s.Dst.Offset {
				b = append(b, '=')
				b = s.Src.appendText(b)
			}
		case s.Kind == LearnLoad && s.Value != nil:
			b = append(b, "load:"...)
			b = appendHex(b, imm)
			b = append(b, "->"...)
			b = s.Dst.appendText(b)
		case s.Kind == LearnLoad:
			b = append(b, "load:"...)
			b = s.Src.appendText(b)
			b = append(b, "->"...)
			b = s.Dst.appendText(b)
		case s.Kind == LearnOutput:
			b = append(b, "output:"...)
			b = s.Src.appendText(b)
		}
	}
	return append(b, ')')
}

// readLearnSubfield reads a learn spec's n-bit subfield (field header, 16-bit
// offset) from the front of p and returns the rest; ok is false when p is
// too short or names an unknown field or bits beyond it.
func readLearnSubfield(p []byte, n int) (s Subfield, rest []byte, ok bool) {
	if len(p) < 6 {
		return Subfield{}, p, false
	}
	f, known := fieldFromHeader(be.Uint32(p))
	ofs := be.Uint16(p[4:])
	if !known || int(ofs)+n > f.Bits() {
		return Subfield{}, p, false
	}
	return Subfield{Field: f, Offset: ofs, Bits: uint16(n)}, p[6:], true
}
