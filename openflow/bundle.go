package openflow

import (
	"strconv"

	"github.com/egressflow/egressflow/openflow/internal/ofnum"
)

// BundleControlType is the type of a BUNDLE_CONTROL message
// (OFPBCT_*): requests are even, their replies the next odd number.
type BundleControlType uint16

const (
	BundleOpenRequest    BundleControlType = 0
	BundleOpenReply      BundleControlType = 1
	BundleCloseRequest   BundleControlType = 2
	BundleCloseReply     BundleControlType = 3
	BundleCommitRequest  BundleControlType = 4
	BundleCommitReply    BundleControlType = 5
	BundleDiscardRequest BundleControlType = 6
	BundleDiscardReply   BundleControlType = 7
)

var bundleControlNames = []string{"OPEN_REQUEST", "OPEN_REPLY", "CLOSE_REQUEST", "CLOSE_REPLY",
	"COMMIT_REQUEST", "COMMIT_REPLY", "DISCARD_REQUEST", "DISCARD_REPLY"}

func (t BundleControlType) String() string {
	if int(t) < len(bundleControlNames) {
		return bundleControlNames[t]
	}
	return "bundle_control(" + strconv.Itoa(int(t)) + ")"
}

// BundleFlags are OFPBF_* flags. Open vSwitch requires the same flags on
// every message of a bundle.
type BundleFlags uint16

const (
	BundleAtomic  BundleFlags = 1 // all or nothing
	BundleOrdered BundleFlags = 2 // apply in the order added
	BundleTime    BundleFlags = 4 // scheduled commit (unsupported by Open vSwitch)
)

// BundleControl opens, closes, commits or discards a bundle
// (OFPT_BUNDLE_CONTROL). Properties are kept verbatim.
type BundleControl struct {
	BundleID   uint32
	Type       BundleControlType
	Flags      BundleFlags
	Properties []byte
}

func (m *BundleControl) MsgType() MessageType { return TypeBundleControl }

func (m *BundleControl) AppendBody(b []byte, _ uint32) ([]byte, error) {
	b = be.AppendUint32(b, m.BundleID)
	b = be.AppendUint16(b, uint16(m.Type))
	b = be.AppendUint16(b, uint16(m.Flags))
	return append(b, m.Properties...), nil
}

func decodeBundleControl(b []byte) (Message, error) {
	if len(b) < 8 {
		return nil, decodeErr("BUNDLE_CONTROL", 0, "body is %d bytes, want at least 8", len(b))
	}
	return &BundleControl{BundleID: be.Uint32(b), Type: BundleControlType(be.Uint16(b[4:])),
		Flags: BundleFlags(be.Uint16(b[6:])), Properties: cloneBytes(b[8:])}, nil
}

// BundleAdd adds a message to an open bundle (OFPT_BUNDLE_ADD_MESSAGE). The
// inner message is encoded with the outer message's xid, as OpenFlow
// requires.
type BundleAdd struct {
	BundleID   uint32
	Flags      BundleFlags
	Message    Message
	Properties []byte
}

func (m *BundleAdd) MsgType() MessageType { return TypeBundleAddMessage }

func (m *BundleAdd) AppendBody(b []byte, xid uint32) ([]byte, error) {
	if m.Message == nil {
		return b, encodeErr("BUNDLE_ADD_MESSAGE", "no message")
	}
	b = be.AppendUint32(b, m.BundleID)
	b = append(b, 0, 0)
	b = be.AppendUint16(b, uint16(m.Flags))
	start := len(b)
	b, err := AppendMessage(b, xid, m.Message)
	if err != nil {
		return b, err
	}
	if len(m.Properties) > 0 {
		b = padTo8(b, start)
		b = append(b, m.Properties...)
	}
	return b, nil
}

func decodeBundleAdd(h Header, b []byte) (Message, error) {
	if len(b) < 8+HeaderLen {
		return nil, decodeErr("BUNDLE_ADD_MESSAGE", 0, "body is %d bytes, want at least %d", len(b), 8+HeaderLen)
	}
	m := &BundleAdd{BundleID: be.Uint32(b), Flags: BundleFlags(be.Uint16(b[6:]))}
	inner := b[8:]
	ih, err := ParseHeader(inner)
	if err != nil {
		return nil, err
	}
	if int(ih.Length) > len(inner) {
		return nil, decodeErr("BUNDLE_ADD_MESSAGE", 8, "inner length %d overruns %d bytes", ih.Length, len(inner))
	}
	if ih.Type == TypeBundleAddMessage || ih.Type == TypeBundleControl {
		return nil, decodeErr("BUNDLE_ADD_MESSAGE", 8, "bundles cannot nest %v", ih.Type)
	}
	if ih.Xid != h.Xid {
		return nil, decodeErr("BUNDLE_ADD_MESSAGE", 12, "inner xid 0x%x differs from outer xid 0x%x", ih.Xid, h.Xid)
	}
	_, msg, err := UnmarshalMessage(inner[:ih.Length])
	if err != nil {
		return nil, err
	}
	m.Message = msg
	if rest := inner[ih.Length:]; len(rest) > 0 {
		p := pad8(int(ih.Length)) - int(ih.Length)
		if p > len(rest) || !ofnum.IsZero(rest[:p]) {
			return nil, decodeErr("BUNDLE_ADD_MESSAGE", 8+int(ih.Length), "bad padding before properties")
		}
		m.Properties = cloneBytes(rest[p:])
	}
	return m, nil
}
