// Package bfd is Bidirectional Forwarding Detection in asynchronous mode
// (RFC 5880) over single-hop UDP (RFC 5881), for the node agent to learn
// within a fraction of a second that an external gateway stopped
// forwarding, with no API round trip.
//
// It owns the Control packet codec (Packet, Decode), one session's state
// machine as a pure function of received packets and the clock (session),
// and the Engine that runs sessions over UDP: port 3784, a source port per
// session from 49152-65535, TTL 255 on what it sends and only TTL 255
// accepted (the generalized TTL security of RFC 5881 section 5). It does
// not decide which peers to watch, nor what a session's state changes in
// the dataplane: the caller adds and removes peers and reads states when
// told that one changed.
//
// Not implemented: authentication (an authenticated packet is
// discarded), Demand mode and the Echo function (never requested, and
// ignored when the peer asks), multihop sessions (RFC 5883).
package bfd
