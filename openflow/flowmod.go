package openflow

import (
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// FlowModCommand is the command of a FlowMod (OFPFC_*).
type FlowModCommand uint8

const (
	FlowAdd          FlowModCommand = 0 // add a flow, replacing an identical one
	FlowModify       FlowModCommand = 1 // change the instructions of matching flows
	FlowModifyStrict FlowModCommand = 2 // ... of the flow with exactly this match and priority
	FlowDelete       FlowModCommand = 3 // delete matching flows
	FlowDeleteStrict FlowModCommand = 4 // delete the flow with exactly this match and priority
)

var flowModCommandNames = []string{"add", "modify", "modify_strict", "delete", "delete_strict"}

// String returns the command as ovs-ofctl's flow files spell it.
func (c FlowModCommand) String() string {
	if int(c) < len(flowModCommandNames) {
		return flowModCommandNames[c]
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}

// FlowModFlags are OFPFF_* flags of a flow.
type FlowModFlags uint16

const (
	FlowSendFlowRem  FlowModFlags = 1 << 0 // send FLOW_REMOVED when the flow expires or is deleted
	FlowCheckOverlap FlowModFlags = 1 << 1 // refuse to add an overlapping flow
	FlowResetCounts  FlowModFlags = 1 << 2 // reset the counters of a modified flow
	FlowNoPktCounts  FlowModFlags = 1 << 3 // do not count packets
	FlowNoBytCounts  FlowModFlags = 1 << 4 // do not count bytes
)

// FlowMod adds, modifies or deletes flows (OFPT_FLOW_MOD).
//
// For FlowAdd, Cookie is the new flow's cookie and CookieMask must be 0.
// For the other commands Cookie/CookieMask filter the flows acted on
// (a mask of 0 selects every cookie): deleting with a cookie mask removes
// all the flows of one owner cheaply.
//
// Priority 0 is priority 0 (ovs-ofctl's default, used by ParseFlow, is
// DefaultPriority). Zero values mean "none" where OpenFlow has a sentinel:
// OutPort 0 is
// PortAny, OutGroup 0 is GroupAny and BufferID 0 is NoBuffer. (Port 0 is
// not a valid port, Open vSwitch never buffers, and group 0 cannot be used
// as a delete filter.) Table 0 is table 0: deletes in every table use
// TableAll.
type FlowMod struct {
	Cookie       uint64
	CookieMask   uint64
	Table        uint8
	Command      FlowModCommand
	IdleTimeout  uint16 // seconds without traffic before removal; 0 = never
	HardTimeout  uint16 // seconds before removal; 0 = never
	Priority     uint16
	BufferID     uint32
	OutPort      uint32 // delete/modify filter: flows that output to this port
	OutGroup     uint32 // delete/modify filter: flows that output to this group
	Flags        FlowModFlags
	Importance   uint16 // eviction importance (add only)
	Match        Match
	Instructions []Instruction
}

func (m *FlowMod) MsgType() MessageType { return TypeFlowMod }

func zeroAs(v, sentinel uint32) uint32 {
	if v == 0 {
		return sentinel
	}
	return v
}

// AppendBody appends the FLOW_MOD body. Encoding into a buffer with enough
// capacity does not allocate.
func (m *FlowMod) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint64(b, m.Cookie)
	b = be.AppendUint64(b, m.CookieMask)
	b = append(b, m.Table, byte(m.Command))
	b = be.AppendUint16(b, m.IdleTimeout)
	b = be.AppendUint16(b, m.HardTimeout)
	b = be.AppendUint16(b, m.Priority)
	b = be.AppendUint32(b, zeroAs(m.BufferID, NoBuffer))
	b = be.AppendUint32(b, zeroAs(m.OutPort, PortAny))
	b = be.AppendUint32(b, zeroAs(m.OutGroup, GroupAny))
	b = be.AppendUint16(b, uint16(m.Flags))
	b = be.AppendUint16(b, m.Importance)
	b, err := m.Match.AppendBinary(b)
	if err != nil {
		return b, err
	}
	return AppendInstructions(b, m.Instructions)
}

const flowModFixedLen = 40

func decodeFlowMod(b []byte) (Message, error) {
	if len(b) < flowModFixedLen+8 {
		return nil, decodeErr("FLOW_MOD", 0, "body is %d bytes, want at least %d", len(b), flowModFixedLen+8)
	}
	m := &FlowMod{
		Cookie: be.Uint64(b), CookieMask: be.Uint64(b[8:]), Table: b[16], Command: FlowModCommand(b[17]),
		IdleTimeout: be.Uint16(b[18:]), HardTimeout: be.Uint16(b[20:]), Priority: be.Uint16(b[22:]),
		BufferID: ofnum.SentinelAsZero(be.Uint32(b[24:]), NoBuffer), OutPort: ofnum.SentinelAsZero(be.Uint32(b[28:]), PortAny),
		OutGroup: ofnum.SentinelAsZero(be.Uint32(b[32:]), GroupAny), Flags: FlowModFlags(be.Uint16(b[36:])),
		Importance: be.Uint16(b[38:]),
	}
	match, n, err := ParseMatch(b[flowModFixedLen:])
	if err != nil {
		return nil, err
	}
	m.Match = match
	if m.Instructions, err = ParseInstructions(b[flowModFixedLen+n:]); err != nil {
		return nil, err
	}
	return m, nil
}

// Actions returns the actions of the flow's ApplyActions instruction, if any.
func (m *FlowMod) Actions() []Action { return applyActionsOf(m.Instructions) }

func applyActionsOf(insts []Instruction) []Action {
	for _, in := range insts {
		if aa, ok := in.(ApplyActions); ok {
			return aa.Actions
		}
	}
	return nil
}
