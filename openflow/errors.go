package openflow

import (
	"fmt"
	"strings"
)

// ErrorType is the type of an OFPT_ERROR message (OFPET_*).
type ErrorType uint16

// OpenFlow 1.5 error types.
const (
	ErrHelloFailed         ErrorType = 0
	ErrBadRequest          ErrorType = 1
	ErrBadAction           ErrorType = 2
	ErrBadInstruction      ErrorType = 3
	ErrBadMatch            ErrorType = 4
	ErrFlowModFailed       ErrorType = 5
	ErrGroupModFailed      ErrorType = 6
	ErrPortModFailed       ErrorType = 7
	ErrTableModFailed      ErrorType = 8
	ErrQueueOpFailed       ErrorType = 9
	ErrSwitchConfigFailed  ErrorType = 10
	ErrRoleRequestFailed   ErrorType = 11
	ErrMeterModFailed      ErrorType = 12
	ErrTableFeaturesFailed ErrorType = 13
	ErrBadProperty         ErrorType = 14
	ErrAsyncConfigFailed   ErrorType = 15
	ErrFlowMonitorFailed   ErrorType = 16
	ErrBundleFailed        ErrorType = 17
	ErrExperimenter        ErrorType = 0xffff
)

var errorTypeNames = [...]string{
	"OFPET_HELLO_FAILED", "OFPET_BAD_REQUEST", "OFPET_BAD_ACTION", "OFPET_BAD_INSTRUCTION",
	"OFPET_BAD_MATCH", "OFPET_FLOW_MOD_FAILED", "OFPET_GROUP_MOD_FAILED", "OFPET_PORT_MOD_FAILED",
	"OFPET_TABLE_MOD_FAILED", "OFPET_QUEUE_OP_FAILED", "OFPET_SWITCH_CONFIG_FAILED",
	"OFPET_ROLE_REQUEST_FAILED", "OFPET_METER_MOD_FAILED", "OFPET_TABLE_FEATURES_FAILED",
	"OFPET_BAD_PROPERTY", "OFPET_ASYNC_CONFIG_FAILED", "OFPET_FLOW_MONITOR_FAILED",
	"OFPET_BUNDLE_FAILED",
}

func (t ErrorType) String() string {
	if int(t) < len(errorTypeNames) {
		return errorTypeNames[t]
	}
	if t == ErrExperimenter {
		return "OFPET_EXPERIMENTER"
	}
	return fmt.Sprintf("OFPET_%d", uint16(t))
}

// Codes of ErrBundleFailed (OFPBFC_*), the ones a bundle transaction meets.
const (
	BundleErrUnknown      uint16 = 0
	BundleErrPerm         uint16 = 1
	BundleErrBadID        uint16 = 2
	BundleErrExists       uint16 = 3
	BundleErrClosed       uint16 = 4
	BundleErrOutOfBundles uint16 = 5
	BundleErrBadType      uint16 = 6
	BundleErrBadFlags     uint16 = 7
	BundleErrMsgBadLen    uint16 = 8
	BundleErrMsgBadXid    uint16 = 9
	BundleErrMsgUnsup     uint16 = 10
	BundleErrMsgConflict  uint16 = 11
	BundleErrMsgTooMany   uint16 = 12
	BundleErrMsgFailed    uint16 = 13
	BundleErrTimeout      uint16 = 14
	BundleErrInProgress   uint16 = 15
)

// errorCodeNames maps type<<16|code to the names Open vSwitch prints (and
// that ovs-ofctl ofp-print shows), for every OpenFlow 1.5 error.
var errorCodeNames = map[uint32]string{}

func init() {
	add := func(t ErrorType, names ...string) {
		for code, n := range names {
			if n != "" {
				errorCodeNames[uint32(t)<<16|uint32(code)] = n
			}
		}
	}
	add(ErrHelloFailed, "OFPHFC_INCOMPATIBLE", "OFPHFC_EPERM")
	add(ErrBadRequest, "OFPBRC_BAD_VERSION", "OFPBRC_BAD_TYPE", "OFPBRC_BAD_STAT", "OFPBRC_BAD_VENDOR",
		"OFPBRC_BAD_SUBTYPE", "OFPBRC_EPERM", "OFPBRC_BAD_LEN", "OFPBRC_BUFFER_EMPTY",
		"OFPBRC_BUFFER_UNKNOWN", "OFPBRC_BAD_TABLE_ID", "OFPBRC_IS_SECONDARY", "OFPBRC_BAD_PORT",
		"OFPBRC_BAD_PACKET", "OFPBRC_MULTIPART_BUFFER_OVERFLOW", "OFPBRC_MULTIPART_REQUEST_TIMEOUT",
		"OFPBRC_MULTIPART_REPLY_TIMEOUT", "OFPBRC_MULTIPART_BAD_SCHED", "OFPBRC_PIPELINE_FIELDS_ONLY",
		"OFPBRC_UNKNOWN")
	add(ErrBadAction, "OFPBAC_BAD_TYPE", "OFPBAC_BAD_LEN", "OFPBAC_BAD_VENDOR", "OFPBAC_BAD_VENDOR_TYPE",
		"OFPBAC_BAD_OUT_PORT", "OFPBAC_BAD_ARGUMENT", "OFPBAC_EPERM", "OFPBAC_TOO_MANY", "OFPBAC_BAD_QUEUE",
		"OFPBAC_BAD_OUT_GROUP", "OFPBAC_MATCH_INCONSISTENT", "OFPBAC_UNSUPPORTED_ORDER", "OFPBAC_BAD_TAG",
		"OFPBAC_BAD_SET_TYPE", "OFPBAC_BAD_SET_LEN", "OFPBAC_BAD_SET_ARGUMENT", "OFPBAC_BAD_SET_MASK",
		"OFPBAC_BAD_METER")
	add(ErrBadInstruction, "OFPBIC_UNKNOWN_INST", "OFPBIC_UNSUP_INST", "OFPBIC_BAD_TABLE_ID",
		"OFPBIC_UNSUP_METADATA", "OFPBIC_UNSUP_METADATA_MASK", "OFPBIC_BAD_EXPERIMENTER",
		"OFPBIC_BAD_EXP_TYPE", "OFPBIC_BAD_LEN", "OFPBIC_EPERM", "OFPBIC_DUP_INST")
	add(ErrBadMatch, "OFPBMC_BAD_TYPE", "OFPBMC_BAD_LEN", "OFPBMC_BAD_TAG", "OFPBMC_BAD_DL_ADDR_MASK",
		"OFPBMC_BAD_NW_ADDR_MASK", "OFPBMC_BAD_WILDCARDS", "OFPBMC_BAD_FIELD", "OFPBMC_BAD_VALUE",
		"OFPBMC_BAD_MASK", "OFPBMC_BAD_PREREQ", "OFPBMC_DUP_FIELD", "OFPBMC_EPERM")
	add(ErrFlowModFailed, "OFPFMFC_UNKNOWN", "OFPFMFC_TABLE_FULL", "OFPFMFC_BAD_TABLE_ID", "OFPFMFC_OVERLAP",
		"OFPFMFC_EPERM", "OFPFMFC_BAD_TIMEOUT", "OFPFMFC_BAD_COMMAND", "OFPFMFC_BAD_FLAGS",
		"OFPFMFC_CANT_SYNC", "OFPFMFC_BAD_PRIORITY", "OFPFMFC_IS_SYNC")
	add(ErrGroupModFailed, "OFPGMFC_GROUP_EXISTS", "OFPGMFC_INVALID_GROUP", "OFPGMFC_WEIGHT_UNSUPPORTED",
		"OFPGMFC_OUT_OF_GROUPS", "OFPGMFC_OUT_OF_BUCKETS", "OFPGMFC_CHAINING_UNSUPPORTED",
		"OFPGMFC_WATCH_UNSUPPORTED", "OFPGMFC_LOOP", "OFPGMFC_UNKNOWN_GROUP", "OFPGMFC_CHAINED_GROUP",
		"OFPGMFC_BAD_TYPE", "OFPGMFC_BAD_COMMAND", "OFPGMFC_BAD_BUCKET", "OFPGMFC_BAD_WATCH",
		"OFPGMFC_EPERM", "OFPGMFC_UNKNOWN_BUCKET", "OFPGMFC_BUCKET_EXISTS")
	add(ErrPortModFailed, "OFPPMFC_BAD_PORT", "OFPPMFC_BAD_HW_ADDR", "OFPPMFC_BAD_CONFIG",
		"OFPPMFC_BAD_ADVERTISE", "OFPPMFC_EPERM")
	add(ErrTableModFailed, "OFPTMFC_BAD_TABLE", "OFPTMFC_BAD_CONFIG", "OFPTMFC_EPERM")
	add(ErrQueueOpFailed, "OFPQOFC_BAD_PORT", "OFPQOFC_BAD_QUEUE", "OFPQOFC_EPERM")
	add(ErrSwitchConfigFailed, "OFPSCFC_BAD_FLAGS", "OFPSCFC_BAD_LEN", "OFPSCFC_EPERM")
	add(ErrRoleRequestFailed, "OFPRRFC_STALE", "OFPRRFC_UNSUP", "OFPRRFC_BAD_ROLE", "OFPRRFC_ID_UNSUP",
		"OFPRRFC_ID_IN_USE")
	add(ErrMeterModFailed, "OFPMMFC_UNKNOWN", "OFPMMFC_METER_EXISTS", "OFPMMFC_INVALID_METER",
		"OFPMMFC_UNKNOWN_METER", "OFPMMFC_BAD_COMMAND", "OFPMMFC_BAD_FLAGS", "OFPMMFC_BAD_RATE",
		"OFPMMFC_BAD_BURST", "OFPMMFC_BAD_BAND", "OFPMMFC_BAD_BAND_VALUE", "OFPMMFC_OUT_OF_METERS",
		"OFPMMFC_OUT_OF_BANDS")
	add(ErrTableFeaturesFailed, "OFPTFFC_BAD_TABLE", "OFPTFFC_BAD_METADATA", "", "", "",
		"OFPTFFC_EPERM", "OFPTFFC_BAD_CAPA", "OFPTFFC_BAD_MAX_ENT", "OFPTFFC_BAD_FEATURES",
		"OFPTFFC_BAD_COMMAND", "OFPTFFC_TOO_MANY")
	add(ErrBadProperty, "OFPBPC_BAD_TYPE", "OFPBPC_BAD_LEN", "OFPBPC_BAD_VALUE", "OFPBPC_TOO_MANY",
		"OFPBPC_DUP_TYPE", "OFPBPC_BAD_EXPERIMENTER", "OFPBPC_BAD_EXP_TYPE", "OFPBPC_BAD_EXP_VALUE",
		"OFPBPC_EPERM")
	add(ErrAsyncConfigFailed, "OFPACFC_INVALID", "OFPACFC_UNSUPPORTED", "OFPACFC_EPERM")
	add(ErrFlowMonitorFailed, "OFPMOFC_UNKNOWN", "OFPMOFC_MONITOR_EXISTS", "OFPMOFC_INVALID_MONITOR",
		"OFPMOFC_UNKNOWN_MONITOR", "OFPMOFC_BAD_COMMAND", "OFPMOFC_BAD_FLAGS", "OFPMOFC_BAD_TABLE_ID",
		"OFPMOFC_BAD_OUT")
	add(ErrBundleFailed, "OFPBFC_UNKNOWN", "OFPBFC_EPERM", "OFPBFC_BAD_ID", "OFPBFC_BUNDLE_EXIST",
		"OFPBFC_BUNDLE_CLOSED", "OFPBFC_OUT_OF_BUNDLES", "OFPBFC_BAD_TYPE", "OFPBFC_BAD_FLAGS",
		"OFPBFC_MSG_BAD_LEN", "OFPBFC_MSG_BAD_XID", "OFPBFC_MSG_UNSUP", "OFPBFC_MSG_CONFLICT",
		"OFPBFC_MSG_TOO_MANY", "OFPBFC_MSG_FAILED", "OFPBFC_TIMEOUT", "OFPBFC_BUNDLE_IN_PROGRESS",
		"OFPBFC_SCHED_NOT_SUPPORTED", "OFPBFC_SCHED_FUTURE", "OFPBFC_SCHED_PAST")
}

// niciraErrorNames are Open vSwitch's experimenter errors (experimenter
// 0x00002320), keyed by experimenter code, as OpenFlow 1.2+ carries them.
var niciraErrorNames = map[uint16]string{
	2: "NXBRC_NXM_INVALID", 3: "NXBRC_NXM_BAD_TYPE", 4: "NXBRC_MUST_BE_ZERO", 5: "NXBRC_BAD_REASON",
	9: "NXBRC_FM_BAD_EVENT", 10: "NXBRC_UNENCODABLE_ERROR", 11: "NXBAC_MUST_BE_ZERO",
	12: "NXFMFC_HARDWARE", 13: "NXFMFC_BAD_TABLE_ID", 15: "NXBAC_BAD_CONJUNCTION",
	16: "NXTTMFC_BAD_COMMAND", 17: "NXTTMFC_BAD_OPT_LEN", 18: "NXTTMFC_BAD_FIELD_IDX",
	19: "NXTTMFC_TABLE_FULL", 20: "NXTTMFC_ALREADY_MAPPED", 21: "NXTTMFC_DUP_ENTRY",
	22: "OFPBFC_BAD_VERSION", 23: "NXQOFC_QUEUE_ERROR", 34: "NXR_NOT_SUPPORTED", 35: "NXR_STALE",
	36: "NXST_NOT_CONFIGURED", 37: "NXFMFC_INVALID_TLV_FIELD", 38: "NXTTMFC_INVALID_TLV_DEL",
	39: "NXBAC_BAD_HEADER_TYPE", 40: "NXBAC_UNKNOWN_ED_PROP", 41: "NXBAC_BAD_ED_PROP",
	42: "NXBAC_CT_DATAPATH_SUPPORT", 43: "NXBMC_CT_DATAPATH_SUPPORT", 44: "NXTFFC_DUP_TABLE",
}

// Error is an OFPT_ERROR message, and a Go error. For experimenter errors
// (Type ErrExperimenter) Code is the experimenter's code and Experimenter
// its id. Data holds at least the start of the message that failed.
type Error struct {
	Type         ErrorType
	Code         uint16
	Experimenter uint32
	Data         []byte
}

func (m *Error) MsgType() MessageType { return TypeError }

func (m *Error) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint16(b, uint16(m.Type))
	b = be.AppendUint16(b, m.Code)
	if m.Type == ErrExperimenter {
		b = be.AppendUint32(b, m.Experimenter)
	}
	return append(b, m.Data...), nil
}

func decodeError(b []byte) (Message, error) {
	if len(b) < 4 {
		return nil, decodeErr("ERROR", 0, "body is %d bytes, want at least 4", len(b))
	}
	m := &Error{Type: ErrorType(be.Uint16(b)), Code: be.Uint16(b[2:])}
	b = b[4:]
	if m.Type == ErrExperimenter {
		if len(b) < 4 {
			return nil, decodeErr("ERROR", 4, "experimenter error without experimenter id")
		}
		m.Experimenter = be.Uint32(b)
		b = b[4:]
	}
	m.Data = cloneBytes(b)
	return m, nil
}

// Name is the error's symbolic name as Open vSwitch prints it, e.g.
// "OFPBAC_BAD_OUT_PORT" or "NXBRC_NXM_INVALID", or a numeric form for
// codes this package does not know.
func (m *Error) Name() string {
	if m.Type == ErrExperimenter {
		if m.Experimenter == NiciraExperimenter {
			if n, ok := niciraErrorNames[m.Code]; ok {
				return n
			}
		}
		return fmt.Sprintf("OFPET_EXPERIMENTER(experimenter=0x%x,code=%d)", m.Experimenter, m.Code)
	}
	if n, ok := errorCodeNames[uint32(m.Type)<<16|uint32(m.Code)]; ok {
		return n
	}
	return fmt.Sprintf("%v(code=%d)", m.Type, m.Code)
}

// Request returns the header of the failed request, from the start of Data,
// if Data holds one.
func (m *Error) Request() (Header, bool) {
	h, err := ParseHeader(m.Data)
	return h, err == nil
}

// Error renders the error for people: the symbolic name, what kind of
// failure it is, and which request failed.
func (m *Error) Error() string {
	var sb strings.Builder
	sb.WriteString("openflow: switch rejected the request: ")
	sb.WriteString(m.Name())
	if m.Type != ErrExperimenter {
		fmt.Fprintf(&sb, " (%s, code %d)", strings.ToLower(strings.TrimPrefix(m.Type.String(), "OFPET_")), m.Code)
	}
	if h, ok := m.Request(); ok {
		fmt.Fprintf(&sb, " for %v xid 0x%x", h.Type, h.Xid)
	}
	return sb.String()
}

// Is makes errors.Is match two errors of the same type and code, so that
// errors.Is(err, &openflow.Error{Type: openflow.ErrBadAction, Code: 4})
// works whatever the data.
func (m *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Type == m.Type && t.Code == m.Code && t.Experimenter == m.Experimenter
}
