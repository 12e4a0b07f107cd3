package openflow

import "strconv"

// Version is the OpenFlow wire version this package speaks: OpenFlow 1.5.
const Version uint8 = 0x06

// HeaderLen is the length of the fixed OpenFlow message header.
const HeaderLen = 8

// MessageType is the type byte of an OpenFlow 1.5 message header (OFPT_*).
type MessageType uint8

// OpenFlow 1.5 message types.
const (
	TypeHello            MessageType = 0
	TypeError            MessageType = 1
	TypeEchoRequest      MessageType = 2
	TypeEchoReply        MessageType = 3
	TypeExperimenter     MessageType = 4
	TypeFeaturesRequest  MessageType = 5
	TypeFeaturesReply    MessageType = 6
	TypeGetConfigRequest MessageType = 7
	TypeGetConfigReply   MessageType = 8
	TypeSetConfig        MessageType = 9
	TypePacketIn         MessageType = 10
	TypeFlowRemoved      MessageType = 11
	TypePortStatus       MessageType = 12
	TypePacketOut        MessageType = 13
	TypeFlowMod          MessageType = 14
	TypeGroupMod         MessageType = 15
	TypePortMod          MessageType = 16
	TypeTableMod         MessageType = 17
	TypeMultipartRequest MessageType = 18
	TypeMultipartReply   MessageType = 19
	TypeBarrierRequest   MessageType = 20
	TypeBarrierReply     MessageType = 21
	TypeRoleRequest      MessageType = 24
	TypeRoleReply        MessageType = 25
	TypeGetAsyncRequest  MessageType = 26
	TypeGetAsyncReply    MessageType = 27
	TypeSetAsync         MessageType = 28
	TypeMeterMod         MessageType = 29
	TypeRoleStatus       MessageType = 30
	TypeTableStatus      MessageType = 31
	TypeRequestForward   MessageType = 32
	TypeBundleControl    MessageType = 33
	TypeBundleAddMessage MessageType = 34
	TypeControllerStatus MessageType = 35
)

var messageTypeNames = [...]string{
	0: "OFPT_HELLO", 1: "OFPT_ERROR", 2: "OFPT_ECHO_REQUEST", 3: "OFPT_ECHO_REPLY",
	4: "OFPT_EXPERIMENTER", 5: "OFPT_FEATURES_REQUEST", 6: "OFPT_FEATURES_REPLY",
	7: "OFPT_GET_CONFIG_REQUEST", 8: "OFPT_GET_CONFIG_REPLY", 9: "OFPT_SET_CONFIG",
	10: "OFPT_PACKET_IN", 11: "OFPT_FLOW_REMOVED", 12: "OFPT_PORT_STATUS",
	13: "OFPT_PACKET_OUT", 14: "OFPT_FLOW_MOD", 15: "OFPT_GROUP_MOD", 16: "OFPT_PORT_MOD",
	17: "OFPT_TABLE_MOD", 18: "OFPT_MULTIPART_REQUEST", 19: "OFPT_MULTIPART_REPLY",
	20: "OFPT_BARRIER_REQUEST", 21: "OFPT_BARRIER_REPLY", 22: "", 23: "",
	24: "OFPT_ROLE_REQUEST", 25: "OFPT_ROLE_REPLY", 26: "OFPT_GET_ASYNC_REQUEST",
	27: "OFPT_GET_ASYNC_REPLY", 28: "OFPT_SET_ASYNC", 29: "OFPT_METER_MOD",
	30: "OFPT_ROLE_STATUS", 31: "OFPT_TABLE_STATUS", 32: "OFPT_REQUESTFORWARD",
	33: "OFPT_BUNDLE_CONTROL", 34: "OFPT_BUNDLE_ADD_MESSAGE", 35: "OFPT_CONTROLLER_STATUS",
}

func (t MessageType) String() string {
	if int(t) < len(messageTypeNames) && messageTypeNames[t] != "" {
		return messageTypeNames[t]
	}
	return "OFPT_" + strconv.Itoa(int(t))
}

// Reserved OpenFlow 1.1+ port numbers (OFPP_*).
const (
	PortMax        uint32 = 0xffffff00 // highest ordinary port number + 1
	PortUnset      uint32 = 0xfffffff7 // Open vSwitch: "no port" (actset_output when no output is set)
	PortInPort     uint32 = 0xfffffff8 // the packet's input port
	PortTable      uint32 = 0xfffffff9 // submit to the first flow table (packet-out only)
	PortNormal     uint32 = 0xfffffffa // the switch's normal L2/L3 processing
	PortFlood      uint32 = 0xfffffffb // all ports except input and blocked ones
	PortAll        uint32 = 0xfffffffc // all ports except the input port
	PortController uint32 = 0xfffffffd // the controller
	PortLocal      uint32 = 0xfffffffe // the bridge's local port
	PortAny        uint32 = 0xffffffff // wildcard in filters; "none" in actions
)

var reservedPortNames = map[uint32]string{
	PortInPort: "IN_PORT", PortTable: "TABLE", PortNormal: "NORMAL", PortFlood: "FLOOD",
	PortAll: "ALL", PortController: "CONTROLLER", PortLocal: "LOCAL", PortAny: "ANY", PortUnset: "UNSET",
}

// PortName formats a port number as ovs-ofctl does: reserved ports by name
// (LOCAL, IN_PORT, ...), other ports of OpenFlow 1.1's reserved range by
// their OpenFlow 1.0 numbers (0xffffff00 is 65280), others in decimal.
func PortName(port uint32) string {
	if n, ok := reservedPortNames[port]; ok {
		return n
	}
	if p16, ok := port32To16(port); ok {
		return strconv.FormatUint(uint64(p16), 10)
	}
	return strconv.FormatUint(uint64(port), 10)
}

// Port numbers in OVS's 16-bit (OpenFlow 1.0) form, used inside some Nicira
// actions such as resubmit.
const (
	port16Max uint16 = 0xff00
	port16Off uint32 = 0xffff0000 // OF1.1 port = OF1.0 port + offset, for reserved ports
)

// Port16To32 converts an OpenFlow 1.0 16-bit port number to 32 bits.
func Port16To32(p uint16) uint32 {
	if p >= port16Max {
		return uint32(p) + port16Off
	}
	return uint32(p)
}

// port32To16 converts a 32-bit port to OVS's 16-bit form; ok is false when
// it has none.
func port32To16(p uint32) (uint16, bool) {
	if p < uint32(port16Max) {
		return uint16(p), true
	}
	if p >= PortMax {
		return uint16(p - port16Off), true
	}
	return 0, false
}

// Special table numbers.
const (
	TableMax uint8 = 0xfe // highest table number
	TableAll uint8 = 0xff // all tables, in flow deletes and stats requests
)

// Group numbers.
const (
	GroupMax uint32 = 0xffffff00
	GroupAll uint32 = 0xfffffffc
	GroupAny uint32 = 0xffffffff
)

// NoBuffer is the buffer_id of messages that carry no buffered packet.
const NoBuffer uint32 = 0xffffffff

// Experimenter (vendor) ids.
const (
	NiciraExperimenter uint32 = 0x00002320 // Nicira / Open vSwitch extensions (NX_VENDOR_ID)
	ONFExperimenter    uint32 = 0x4f4e4600 // Open Networking Foundation extensions
)

// DefaultPriority is the priority ovs-ofctl uses when a flow gives none.
const DefaultPriority uint16 = 0x8000
