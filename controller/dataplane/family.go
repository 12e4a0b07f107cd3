package dataplane

import "strconv"

// The egress family's place in the pipeline: the tables, priorities and
// cookie kinds that the k8s.ovn.org APIs after EgressService will use
// (docs/dataplane.md, "The egress pipeline for the family", gives the
// layout and the precedence they encode). TableQoS and
// priorityAdmittedLate are rendered since layout 4 (qos.go), TableFirewall
// since layout 5 (firewall.go); the other
// numbers are fixed now so that no two APIs take the same one, and each
// API's issue fills its part in.

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
