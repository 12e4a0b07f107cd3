// Package openflow is an OpenFlow 1.5 codec for Open vSwitch, written
// against the switch itself: the tests check our bytes against the bytes
// ovs-ofctl sends for the same flows or what ovs-ofctl ofp-print and
// parse-actions read in them, and our text against what ovs-ofctl prints.
//
// # What it owns
//
// The package owns the messages between egressflow and a bridge and their
// wire form: HELLO, ERROR, ECHO, FEATURES, GET/SET_CONFIG, FLOW_MOD,
// GROUP_MOD, flow, port and group description multiparts, BARRIER,
// bundles, Nicira conntrack flushes, and how each value prints. It does
// not decide what flows to install, and it never touches flows it was not
// asked to: other controllers may share the bridge. Note that a controller
// that runs `ovs-ofctl replace-flows` on a shared bridge (ovn-kubernetes
// does on its gateway bridge) deletes everyone else's flows; owners should
// mark their flows with a cookie, delete and dump by cookie mask, and
// replay after the connection's Reconnected.
//
// # Layout
//
// Three layers, one package each:
//   - openflow (this package): the messages, their codec, and their
//     printed form;
//   - openflow/flowtext: ovs-ofctl's flow syntax read into these messages
//     (ParseFlow and its parts);
//   - openflow/ofconn: the connection to a switch: handshake, keepalive,
//     reconnection, request/reply matching, bundles and dumps.
//
// openflow/internal/ofnum holds the number handling the codec and the text
// reader share, and openflow/internal/oftest what their tests share (Open
// vSwitch's tools as oracles, a fake switch, the golden flows).
//
// # Codec
//
// Messages implement Message; AppendMessage encodes into a caller's buffer
// without allocating, MarshalMessage into a new slice, and UnmarshalMessage
// or ReadMessage decode. Flows are built from a Match (OXM fields, kept in
// Open vSwitch's canonical form so that a dumped flow equals the one
// installed) and Instructions holding Actions:
//
//	var m openflow.Match
//	m.SetUint(openflow.FieldEthType, 0x0800).SetAddr(openflow.FieldIPv4Src, src)
//	fm := &openflow.FlowMod{Cookie: 0x1, Priority: 100, Match: m,
//		Instructions: []openflow.Instruction{openflow.Apply(
//			openflow.CT{Flags: openflow.CTCommit, Zone: 5, Actions: []openflow.Action{
//				openflow.NAT{Flags: openflow.NATSrc, MinAddr: lb}}},
//			openflow.Output{Port: 2})}}
//
// Decoders never panic and check every length. Actions, match fields,
// instructions, multipart bodies and messages the package does not model
// decode into opaque values (RawAction, RawMessage, ...) that re-encode
// byte for byte, so dumping a bridge shared with other controllers never
// fails.
//
// # Text
//
// FlowMod.String and Flow.String print flows exactly as
// `ovs-ofctl -O OpenFlow15 dump-flows` does (--no-stats for a FlowMod),
// GroupDesc.String prints a group as `ovs-ofctl -O OpenFlow15 dump-groups`
// does, and every action, instruction, field and subfield prints as
// ovs-ofctl writes it (FormatActions and FormatInstructions for lists), so
// logs, tests and operators speak the same language. Field.ParseValue,
// ParsePort, ParseField and ParseSubfield read one value as ovs-ofctl
// does; openflow/flowtext reads whole flows.
//
// Open vSwitch specifics this package follows: in OpenFlow 1.5 the switch
// reports flows as OFPMP_FLOW_DESC entries with OXS statistics; it sends
// registers in matches as 64-bit xreg pairs; it refuses the Nicira
// reg_load/reg_move actions (so loads and moves are set_field with a mask
// and copy_field).
package openflow
