package conntrack

// Zones of the egress family's later APIs, beside SNATZone
// (docs/dataplane.md, "The egress pipeline for the family"). FirewallZone
// is EgressFirewall's since layout 5; RouterZone and RouterSNATZone are
// EgressRouter's; ExternalRouteZone is AdminPolicyBasedExternalRoute's. SNATZone
// itself serves every API that rewrites a pod's source, EgressService and
// EgressIP: the precedence between them leaves one translation per source,
// so Stale over their union and flushes by source stay exact. A
// connection's ct_mark belongs to the API that owns its zone.
const (
	// FirewallZone tracks the connections of firewalled pods, in the
	// direction they were opened, so that TableFirewall judges those a
	// pod opens and lets its replies to the others pass. It cannot be
	// SNATZone: the firewall tracks a packet before its source is
	// decided, and a source NAT can only be attached to a connection at its
	// first commit.
	FirewallZone uint16 = SNATZone + 1
	// ExternalRouteZone is AdminPolicyBasedExternalRoute's, should its next
	// hops need to keep a connection on the gateway it began on.
	ExternalRouteZone uint16 = SNATZone + 2
	// RouterZone is EgressRouter's, for the destination NAT of its redirect.
	RouterZone uint16 = SNATZone + 3
	// EgressIPZone keeps which address of its EgressIP each connection of
	// a pod leaves with, when the object holds several of the pod's
	// family: in ct_label, on the pod's own node, so that a connection
	// stays on its address while that address is held however the
	// object's addresses come and go. It cannot be SNATZone: the address
	// is chosen before the packet is steered, on a node that may not be
	// the one that translates it.
	EgressIPZone uint16 = SNATZone + 4
	// RouterSNATZone is EgressRouter's, for the source NAT of its
	// redirect to the reserved address. It cannot be RouterZone: one
	// commit attaches one translation to a connection, and the redirect
	// rewrites both ends. It cannot be SNATZone either: a redirected
	// connection's source is a client's, which an EgressIP or
	// EgressService on the same node may translate too.
	RouterSNATZone uint16 = SNATZone + 5
)
