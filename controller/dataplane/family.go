package dataplane

import "strconv"

// The pipeline's layout, in one place: every table egressflow owns on the
// bridge and every priority its flows take, table by table, then the
// egress family's members (APIs) and their cookie kinds. docs/dataplane.md
// draws the layout ("The egress pipeline for the family") and the
// precedence the priorities encode. An API that adds flows takes its
// table and priorities here, so that no two take the same number and the
// precedence between them reads in one file. TableQoS and
// priorityAdmittedLate are rendered since layout 4 (qos.go), TableFirewall
// since layout 5 (firewall.go); the numbers of the APIs still to come are
// reserved now, and each fills its part in when it comes.

// Tables egressflow owns on br-ex (table 0 is shared: egressflow adds only
// flows that carry its cookie, above OVS's own priority-0 NORMAL flow).
const (
	// TableClassify is OpenFlow's first table, where egressflow diverts the
	// packets it handles: every IP packet with an endpoint's source,
	// whatever port it entered the bridge from.
	TableClassify uint8 = 0
	// TableOrigin sorts an endpoint's packet by where it entered the
	// bridge: from the host stack (LOCAL) it goes on to TableEgress; from
	// the uplink (steered here by another node) it is the host stack's;
	// from any other port (a pod attached to the bridge) it may go
	// straight to another pod or node, but never past the host stack to
	// the outside (a pod that accepted an ICMP redirect sends so).
	TableOrigin uint8 = 40
	// TableEgress decides what happens to an endpoint's packet on its way
	// from the host stack to the uplink: exempt, SNAT, steer or drop.
	TableEgress uint8 = 41
	// TableReply delivers un-SNATed replies to the host stack.
	TableReply uint8 = 42
	// TableMarker holds one flow that no packet reaches: its presence
	// tells a starting agent that this ovs-vswitchd has been programmed by
	// egressflow (see ColdGuardFlows).
	TableMarker uint8 = 43
	// TableUplink is the last table of a SNATed packet: the SNAT flows
	// commit it to conntrack with its translation and recirculate it here,
	// and it leaves through the uplink only if conntrack translated its
	// source. Conntrack translates nothing in a packet it cannot tie to a
	// connection it may track (an ICMP error or TCP reset about a
	// connection this host never saw, as just after a host moved): such a
	// packet still carries the pod's address, and is dropped.
	TableUplink uint8 = 47
)

// TableEgressIPSpread spreads a local pod's connections over the
// addresses its EgressIP holds of the pod's family, when it holds more
// than one: TableEgress commits the packet's connection to
// conntrack.EgressIPZone (reg6 holding the object's group, ct_label the
// address a connection was given) and recirculates it here, where a
// connection keeps the address it was given while that address is held
// (KindEgressIPSticky), and one without (a new connection, or one whose
// address went) gets one from the object's select group
// (KindEgressIPPick), which records it in ct_label.
const TableEgressIPSpread uint8 = 48

// TableExternalRoute sends a local pod's connection to one of its
// namespace's external gateways (AdminPolicyBasedExternalRoute): TableEgress
// tracks the packet in conntrack.ExternalRouteZone (reg7 holding its
// route's group, ct_label the gateway a connection was given or came in
// through) and recirculates it here, where a connection keeps its gateway
// while that gateway is live (KindExternalRouteSticky), and one without
// gets one from the route's select group (KindExternalRoutePick), which
// records it (KindExternalRouteCommit).
const TableExternalRoute uint8 = 49

// EgressRouter's tables, in a redirected packet's order, each reached by
// a conntrack recirculation (egressrouter.go). Every packet to a reserved
// address the node serves enters them from TableEgress, with its router's
// ID in reg8, once its source is known to be the host stack: a client's
// connection that the host forwarded, or a destination's reply that the
// host routed back.
const (
	// TableRouter follows the packet's lookup in conntrack.RouterSNATZone,
	// undoing the source NAT of a reply: a reply goes on to be un-DNATed in
	// conntrack.RouterZone and out, a client's packet to be DNATed there.
	TableRouter uint8 = 50
	// TableRouterDNAT follows a client's packet's lookup in
	// conntrack.RouterZone: a new connection is committed with the
	// destination of its rule, or the fallback, or refused; an
	// established one goes on to be SNATed as it was.
	TableRouterDNAT uint8 = 51
	// TableRouterSNAT commits a new, DNATed connection in
	// conntrack.RouterSNATZone with the reserved address as its source.
	TableRouterSNAT uint8 = 52
	// TableRouterOut sends a translated packet back to the host stack,
	// which routes it: a client's packet only if its source was
	// translated, a reply always.
	TableRouterOut uint8 = 53
)

// TableNeighbour is the second half of the neighbour advertisement
// responder: Open vSwitch lets a flow write nd_tll only if its match says
// the packet is an advertisement, so the solicitation, rewritten into an
// advertisement in TableClassify, is looked up again here, where the match
// can say so.
const TableNeighbour uint8 = 46

// Tables reserved for the family's node-local stages, after the four
// egressflow already owns (40–43; tables below 40 are left to other
// controllers of the bridge). From the layout that renders them,
// TableOrigin sends a packet that came from the host stack (LOCAL) through
// them in this order, and the last one resubmits it to TableEgress, where
// its source is decided: an OpenFlow goto may only go forward, and
// TableEgress keeps its number.
const (
	// TableFirewall is EgressFirewall's: a packet from a pod of this node
	// to a destination outside the cluster's pod and service CIDRs is
	// checked against its namespace's rules in order; Deny drops it, Allow
	// or no match send it on to TableQoS. Rendered since layout 5
	// (firewall.go), as the first stage: TableOrigin's LOCAL flow goes to
	// it.
	TableFirewall uint8 = 44
	// TableQoS is EgressQoS's: a packet from a pod of this node that the
	// firewall let through gets the DSCP of its namespace's first matching
	// rule, then goes on to TableEgress. Rendered since layout 4 (qos.go).
	TableQoS uint8 = 45
)

// Priorities, highest first within a table.
const (
	// priorityExempt keeps destinations inside the cluster untouched.
	priorityExempt uint16 = 300
	// priorityService is every per-service flow.
	priorityService uint16 = 200
	// priorityAdmitted lets an admitted pod's packets go as they are,
	// above the pod guard and below the per-endpoint flows.
	priorityAdmitted uint16 = 175
	// priorityPodGuard diverts every pod's packet to the fail-closed
	// pipeline, below the flows that admit a pod or act for a service.
	priorityPodGuard uint16 = 150
	// priorityMulticast passes a pod's multicast and broadcast traffic
	// (neighbour discovery among it) in TableOrigin: it is never SNATed,
	// and other pods on the bridge must see it.
	priorityMulticast uint16 = 250
	// priorityFallback is the fail-closed drop in TableEgress and the
	// NORMAL of non-reply traffic in TableReply.
	priorityFallback uint16 = 100
)

// Priorities the family's source and next-hop decisions take in
// TableEgress, between an EgressService's (priorityService) and the
// fail-closed drop (priorityFallback). Their order is the precedence
// between the APIs: a pod that several of them select takes the decision
// of the highest. Reserved, priorityAdmittedLate excepted.
const (
	// priorityEgressIP is an EgressIP's SNAT (on the node holding the
	// address) or steering (towards it). In TableClassify it is also the
	// priority of the flows that divert an EgressIP's pods and send the
	// replies to its addresses through conntrack, so that they never share
	// a table, priority and match with an endpoint's flows.
	priorityEgressIP uint16 = 190
	// priorityHeld drops a pod the guard holds (about to be an
	// EgressService's endpoint) above the external route, which would
	// otherwise send it through a gateway with its pod IP.
	priorityHeld uint16 = 185
	// priorityExternalRoute is an AdminPolicyBasedExternalRoute's next hop,
	// for a pod whose source no API above sets.
	priorityExternalRoute uint16 = 180
	// priorityAdmittedLate admits a pod that a node-local stage (firewall,
	// QoS, next hop) concerns: it passes the stages first, so it cannot be
	// admitted in TableClassify (priorityAdmitted) as other pods are.
	// Rendered since layout 4, for the pods of namespaces with an
	// EgressQoS or an EgressFirewall (State.AdmittedLate).
	priorityAdmittedLate uint16 = 160
)

// EgressRouter's priorities outside its own tables.
const (
	// priorityRouterEntry takes a packet from the host stack (LOCAL) to a
	// reserved address through the pipeline in TableClassify, above a pod's
	// admission (which would switch it back to LOCAL) and below the
	// EgressIP and EgressService diversions, which send it the same way.
	priorityRouterEntry uint16 = 177
	// priorityRouterNeighbour is above the entry, which would otherwise
	// also take a unicast neighbour solicitation (sent to the address
	// itself): the ARP and neighbour responders for a reserved address
	// (duplicate address detection's solicitations pass one above), and
	// the drop of the ICMP redirects the host stack sends towards it (it
	// forwards the redirected connections out of the interface they came
	// in on).
	priorityRouterNeighbour uint16 = 178
	// priorityRouter, in TableEgress, sends a packet to a reserved address
	// into the router's tables above every exemption and source decision:
	// on the holder, the redirect decides a client's source.
	priorityRouter uint16 = 310
)

// Priorities in TableRouterDNAT: a new connection's rule first, then the
// fallback (or the refusal when there is none); an established
// connection's flow matches no new one.
const (
	priorityRouterRule     uint16 = 200
	priorityRouterFallback uint16 = 100
)

// priorityFirewallInbound is the inbound commit's priority in
// TableClassify, below the snoop flows (which commit too) and above every
// other flow there that can match a packet to a pod (every packet it
// takes would go on by NORMAL anyway).
const priorityFirewallInbound uint16 = 205

// priorityFirewallSnoop is the snoop flows' priority in TableClassify:
// above every flow there that matches a packet to a pod (a reply to an LB
// IP is not to a pod address; an endpoint's own classification matches
// its source), so that a reply is copied whatever else matches it. Every
// packet such a flow takes came from outside the node and would go on by
// NORMAL anyway (TableOrigin hands what the uplink brings to NORMAL).
const priorityFirewallSnoop uint16 = 210

// Priorities in TableEgressIPSpread: a connection with an address first.
const (
	priorityEgressIPSticky uint16 = 200
	priorityEgressIPPick   uint16 = 100
)

// Priorities in TableExternalRoute: a connection with a live gateway
// first.
const (
	priorityExternalRouteSticky uint16 = 200
	priorityExternalRoutePick   uint16 = 100
)

// priorityExternalRouteInbound is the inbound commit of a packet from an
// external gateway to a pod it serves, in TableClassify: above every other
// flow there that a packet to a pod can match (the firewall's inbound
// commit and DNS snoop), since it records the gateway and then looks the
// packet up again, marked (reg7InboundRecorded), for those to act.
const priorityExternalRouteInbound uint16 = 220

// Priorities in TableFirewall. Classification (reg4=0, before conntrack)
// and what follows it (reg4=ID, tracked) never match one packet, so only
// the exemptions must be above both and the defaults below.
const (
	priorityFirewallExempt uint16 = 12000
	// priorityFirewallClassify could be any value below the exemptions; it
	// sits above the rules so that a dump reads in the packet's order.
	priorityFirewallClassify uint16 = 11000
	// priorityFirewallReply passes a classified packet of the reply
	// direction of a connection the outside opened (committed inbound by
	// KindFirewallInbound), above every rule: the firewall judges the
	// connections pods open, not their answers to others'.
	priorityFirewallReply uint16 = 10500
	// priorityFirewallFirstRule is the priority of rule 0; rule i has
	// priorityFirewallFirstRule − i, down to 10000 − 7999 = 2001: the
	// reference's numbers (EgressFirewallStartPriority 10000, and
	// MinimumReservedEgressFirewallPriority 2000 below the last rule).
	priorityFirewallFirstRule uint16 = 10000
	// priorityFirewallCommitted is the default of a classified (tracked)
	// packet that no rule judged: committed, then on to TableQoS.
	priorityFirewallCommitted uint16 = 1
	priorityFirewallDefault   uint16 = 0
)

// Priorities in TableQoS. Classification (reg5=0) and marking (reg5=class)
// never match the same packet, so only the exemptions must be above both,
// and the default below.
const (
	priorityQoSExempt uint16 = 3000
	// priorityQoSClassify could be any value below the exemptions; it
	// sits above the rules so that a dump reads in the packet's order.
	priorityQoSClassify uint16 = 2500
	// priorityQoSFirstRule is the priority of rule 0; rule i has
	// priorityQoSFirstRule − i, down to priorityQoSFirstRule −
	// (esv1.MaxEgressQoSRules − 1) = 1000, the reference's 1000 − index
	// shifted up by 999.
	priorityQoSFirstRule uint16 = 1999
	priorityQoSDefault   uint16 = 0
)

// API is the member of the egress family a flow belongs to: the high four
// bits of its FlowKind, bits 47..44 of its cookie, so that
// `ovs-ofctl dump-flows br-ex cookie=0xef10<A>00000000000/0xfffff00000000000`
// lists the flows of API A. The low four bits are the flow's role within
// its API.
type API uint8

const (
	// APIEgressService holds the kinds of layouts 1–3: EgressService's
	// flows and the pipeline's shared ones (KindRedirect..KindAdmit). They
	// keep their values.
	APIEgressService API = iota
	// APIPipeline holds the shared flows that the family's stages add (the
	// way into each stage and on to the next), carrying object hash 0.
	APIPipeline
	APIEgressIP
	APIEgressQoS
	APIEgressFirewall
	// APIExternalRoute is AdminPolicyBasedExternalRoute.
	APIExternalRoute
	// APIEgressRouter is network.operator.openshift.io's EgressRouter.
	APIEgressRouter
	// apiCount is the number of APIs with kinds reserved; 7..15 are free.
	apiCount
)

// apiKinds are the API kinds as Kubernetes names them.
var apiKinds = [apiCount]string{
	"EgressService", "Pipeline", "EgressIP", "EgressQoS", "EgressFirewall",
	"AdminPolicyBasedExternalRoute", "EgressRouter",
}

func (a API) String() string {
	if a < apiCount {
		return apiKinds[a]
	}
	return "API(" + strconv.Itoa(int(a)) + ")"
}

// API returns the API that flows of kind k belong to.
func (k FlowKind) API() API { return API(k >> 4) }

// Kind returns a's flow kind for role (0..15; EgressService's role 0 is
// never used, so that kind 0 stays "no kind").
func (a API) Kind(role uint8) FlowKind { return FlowKind(a)<<4 | FlowKind(role&0xf) }

// APICookieMask selects the prefix and the API of a cookie: every flow of
// API a has a cookie c with c&APICookieMask == a.Cookie().
const APICookieMask uint64 = CookiePrefixMask | 0xf<<44

// KindCookieMask selects the prefix and the flow kind of a cookie: every
// flow of kind k has a cookie c with c&KindCookieMask ==
// Cookie(k, "")&KindCookieMask, whatever object owns it.
const KindCookieMask uint64 = CookiePrefixMask | 0xff<<40

// Cookie is the prefix and API part of the cookies of a's flows.
func (a API) Cookie() uint64 { return CookiePrefix | uint64(a)<<44 }

// ObjectKey is the key of an API object whose hash (ServiceHash) its flows'
// cookies carry, and under which its flows form one group: namespace/name
// for an EgressService, as in layouts 1–3; the kind, a slash and
// namespace/name (name alone when cluster-scoped, namespace "") for the
// others. A namespace name is a DNS label, which cannot hold a capital
// letter, so no other API's key is ever an EgressService's.
func ObjectKey(a API, namespace, name string) string {
	k := name
	if namespace != "" {
		k = key(namespace, name)
	}
	if a == APIEgressService {
		return k
	}
	return a.String() + "/" + k
}

// CookieFields are the parts of one of egressflow's cookies.
type CookieFields struct {
	Kind FlowKind
	// Hash is the ServiceHash of the object's key (ObjectKey); 0 for the
	// flows no one object owns.
	Hash uint32
	// Layout is the CookieLayout of the agent that installed the flow.
	Layout uint8
}

// DecodeCookie splits a cookie into the parts Cookie built it from;
// false when the cookie lacks egressflow's prefix.
func DecodeCookie(c uint64) (CookieFields, bool) {
	if c&CookiePrefixMask != CookiePrefix {
		return CookieFields{}, false
	}
	return CookieFields{Kind: FlowKind(c >> 40), Hash: uint32(c >> 8), Layout: uint8(c)}, true
}

// takeID returns id, or the first value above it (wrapping past the
// largest) that taken lacks, and marks it taken: how a stage gives the
// values of its register (EgressQoS's classes, EgressFirewall's
// namespaces) IDs from their hashes that stay put while others come and
// go, and stay unique on a collision. Put 0 in taken to keep it for
// "unclassified".
func takeID(taken map[uint32]bool, id uint32) uint32 {
	for taken[id] {
		id++
	}
	taken[id] = true
	return id
}
