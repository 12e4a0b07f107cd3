// Package ofconn is the connection between egressflow and one Open
// vSwitch bridge, over OpenFlow 1.5: the handshake, keepalive,
// reconnection, request/reply matching, atomic bundles and dumps. The
// messages themselves are package openflow's.
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
// Open vSwitch specifics it follows: the switch echoes a refused message
// whole in its error, which is how a Transaction names the message without
// keeping it; and it drops a connection's open bundles with the
// connection.
package ofconn
