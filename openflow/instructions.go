package openflow

import (
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// Instruction is one OpenFlow instruction of a flow. The concrete types are
// ApplyActions, WriteActions, ClearActions, GotoTable, WriteMetadata and
// RawInstruction (anything else, kept verbatim).
type Instruction interface {
	AppendBinary(b []byte) ([]byte, error)
	String() string
}

// Instruction types (OFPIT_*).
const (
	instGotoTable     = 1
	instWriteMetadata = 2
	instWriteActions  = 3
	instApplyActions  = 4
	instClearActions  = 5
)

// instRank orders instructions the way Open vSwitch prints and encodes them.
func instRank(i Instruction) int {
	switch i.(type) {
	case ApplyActions:
		return 1
	case ClearActions:
		return 2
	case WriteActions:
		return 3
	case WriteMetadata:
		return 4
	case GotoTable:
		return 5
	}
	return 6
}

// Apply is shorthand for an ApplyActions instruction.
func Apply(actions ...Action) ApplyActions { return ApplyActions{Actions: actions} }

// ApplyActions applies actions immediately (OFPIT_APPLY_ACTIONS).
type ApplyActions struct{ Actions []Action }

func (i ApplyActions) AppendBinary(b []byte) ([]byte, error) {
	return appendActionsInstruction(b, instApplyActions, i.Actions)
}

func (i ApplyActions) String() string { return string(appendActionList(nil, i.Actions)) }

// WriteActions merges actions into the action set (OFPIT_WRITE_ACTIONS).
type WriteActions struct{ Actions []Action }

func (i WriteActions) AppendBinary(b []byte) ([]byte, error) {
	return appendActionsInstruction(b, instWriteActions, i.Actions)
}

func (i WriteActions) String() string {
	return "write_actions(" + string(appendActionList(nil, i.Actions)) + ")"
}

func appendActionsInstruction(b []byte, typ uint16, acts []Action) ([]byte, error) {
	start := len(b)
	b = append(b, byte(typ>>8), byte(typ), 0, 0, 0, 0, 0, 0)
	b, err := AppendActions(b, acts)
	if err != nil {
		return b[:start], err
	}
	if err := putLen16(b, start, start+2, "instruction"); err != nil {
		return b[:start], err
	}
	return b, nil
}

// ClearActions empties the action set (OFPIT_CLEAR_ACTIONS).
type ClearActions struct{}

func (i ClearActions) AppendBinary(b []byte) ([]byte, error) {
	return append(b, 0, instClearActions, 0, 8, 0, 0, 0, 0), nil
}

func (i ClearActions) String() string { return "clear_actions" }

// GotoTable continues processing in a later table (OFPIT_GOTO_TABLE).
type GotoTable struct{ Table uint8 }

func (i GotoTable) AppendBinary(b []byte) ([]byte, error) {
	return append(b, 0, instGotoTable, 0, 8, i.Table, 0, 0, 0), nil
}

func (i GotoTable) String() string { return "goto_table:" + strconv.Itoa(int(i.Table)) }

// WriteMetadata writes the metadata field under a mask (OFPIT_WRITE_METADATA).
type WriteMetadata struct{ Metadata, Mask uint64 }

func (i WriteMetadata) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, 0, instWriteMetadata, 0, 24, 0, 0, 0, 0)
	b = be.AppendUint64(b, i.Metadata)
	return be.AppendUint64(b, i.Mask), nil
}

// String formats the instruction as ovs-ofctl does, value and mask as C's
// %#x ("0" for zero).
func (i WriteMetadata) String() string {
	b := appendHexC([]byte("write_metadata:"), i.Metadata)
	if i.Mask != ^uint64(0) {
		b = appendHexC(append(b, '/'), i.Mask)
	}
	return string(b)
}

// RawInstruction is an instruction this package does not model, kept
// verbatim (header included).
type RawInstruction struct{ Data []byte }

func (i RawInstruction) AppendBinary(b []byte) ([]byte, error) {
	if len(i.Data) < 8 || len(i.Data)%8 != 0 || int(be.Uint16(i.Data[2:])) != len(i.Data) {
		return b, encodeErr("raw instruction", "data of %d bytes is not a whole, padded instruction", len(i.Data))
	}
	return append(b, i.Data...), nil
}

func (i RawInstruction) String() string {
	return "raw_instruction(" + string(appendHexBytes(nil, i.Data)) + ")"
}

// AppendInstructions appends the wire form of a list of instructions.
func AppendInstructions(b []byte, insts []Instruction) ([]byte, error) {
	var err error
	for _, in := range insts {
		if in == nil {
			return b, encodeErr("instruction", "nil instruction")
		}
		if b, err = in.AppendBinary(b); err != nil {
			return b, err
		}
	}
	return b, nil
}

// ParseInstructions decodes a list of instructions that fills b exactly.
func ParseInstructions(b []byte) ([]Instruction, error) {
	var out []Instruction
	for off := 0; off < len(b); {
		if len(b)-off < 8 {
			return nil, decodeErr("instruction", off, "%d trailing bytes", len(b)-off)
		}
		typ, n := be.Uint16(b[off:]), int(be.Uint16(b[off+2:]))
		if n < 8 || n%8 != 0 || off+n > len(b) {
			return nil, decodeErr("instruction", off, "bad length %d (%d bytes left)", n, len(b)-off)
		}
		p := b[off : off+n]
		var in Instruction
		switch {
		case typ == instApplyActions || typ == instWriteActions:
			acts, err := parseActions(p[8:], 1)
			if err != nil {
				return nil, err
			}
			if typ == instApplyActions {
				in = ApplyActions{Actions: acts}
			} else {
				in = WriteActions{Actions: acts}
			}
		case typ == instClearActions && n == 8:
			in = ClearActions{}
		case typ == instGotoTable && n == 8 && ofnum.IsZero(p[5:8]):
			in = GotoTable{Table: p[4]}
		case typ == instWriteMetadata && n == 24 && ofnum.IsZero(p[4:8]):
			in = WriteMetadata{Metadata: be.Uint64(p[8:]), Mask: be.Uint64(p[16:])}
		default:
			in = RawInstruction{Data: cloneBytes(p)}
		}
		out = append(out, in)
		off += n
	}
	return out, nil
}

// FormatInstructions prints instructions as ovs-ofctl does after
// "actions=": in Open vSwitch's order, comma-separated, "drop" if empty.
func FormatInstructions(insts []Instruction) string {
	return string(appendInstructionsText(nil, insts))
}

// appendInstructionsText formats instructions as ovs-ofctl does after
// "actions=": in Open vSwitch's order, comma-separated, "drop" if empty.
func appendInstructionsText(b []byte, insts []Instruction) []byte {
	start := len(b)
	for rank := 1; rank <= 6; rank++ {
		for _, in := range insts {
			if in == nil || instRank(in) != rank {
				continue
			}
			if aa, ok := in.(ApplyActions); ok && len(aa.Actions) == 0 {
				continue
			}
			if len(b) > start {
				b = append(b, ',')
			}
			if aa, ok := in.(ApplyActions); ok {
				b = appendActionList(b, aa.Actions)
			} else {
				b = append(b, in.String()...)
			}
		}
	}
	if len(b) == start {
		b = append(b, "drop"...)
	}
	return b
}
