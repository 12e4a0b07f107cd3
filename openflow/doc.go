// Package openflow is an OpenFlow 1.5 codec and client for Open vSwitch,
// written against the switch itself: the tests check our bytes against the
// bytes ovs-ofctl sends for the same flows or what ovs-ofctl ofp-print and
// parse-actions read in them, and our text against what ovs-ofctl prints.
//
// # What it owns
//
// The package owns the wire protocol between egressflow and a bridge: the
// message codec (HELLO, ERROR, ECHO, FEATURES, GET/SET_CONFIG, FLOW_MOD,
// flow and port description multiparts, BARRIER, bundles, Nicira conntrack
// flushes), the flow text syntax, and the connection (handshake, keepalive,
// reconnection, request/reply matching). It does not decide what flows to
// install, and it never touches flows it was not asked to: other
// controllers may share the bridge. Note that a controller that runs
// `ovs-ofctl replace-flows` on a shared bridge (ovn-kubernetes does on its
// gateway bridge) deletes everyone else's flows; owners should mark their
// flows with a cookie, delete and dump by cookie mask, and replay after
// Client.Reconnected.
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
// `ovs-ofctl -O OpenFlow15 dump-flows` does (--no-stats for a FlowMod), and
// ParseFlow reads that syntax back, so logs, tests and operators speak the
// same language. Unknown actions and fields print as raw(HEX) and oxm=HEX,
// which parse back.
//
// # Client
//
// Dial connects to a bridge's management socket ("unix:/run/openvswitch/
// br-ex.mgmt", no set-controller needed) or "tcp:host:port". The Client
// keeps one reader goroutine that hands each reply to the caller waiting
// for its transaction id and never blocks on a consumer; it probes a
// silent switch with echoes, and reconnects with capped exponential backoff
// when the connection dies, failing every call in flight at once. Bundle
// applies many flow mods atomically (OPEN, pipelined ADDs, CLOSE, then
// COMMIT only if no message failed, else DISCARD); BeginBundle does the same
// in parts (a Transaction), for a change too large to hold at once, each
// Add sent as it is ready. DumpFlows collects every part of a flow dump,
// DumpFlowsFunc hands each flow over as its part arrives, and
// DumpFlowEntries hands each over undecoded, read in place (a FlowEntry),
// for callers that index a large table by digests of its bytes.
// FlushConntrack and FlushConntrackZone clear conntrack entries (confirmed
// with a barrier, as the switch answers nothing on success).
//
// Open vSwitch specifics this package follows: in OpenFlow 1.5 the switch
// reports flows as OFPMP_FLOW_DESC entries with OXS statistics; it sends
// registers in matches as 64-bit xreg pairs; it refuses the Nicira
// reg_load/reg_move actions (so loads and moves are set_field with a mask
// and copy_field); it echoes a refused message whole in its error, which is
// how a Transaction names the message without keeping it; and it drops a
// connection's open bundles with the connection.
package openflow
