// Package reasons is egressflow's one vocabulary of reasons: the
// machine-readable codes its decisions carry, on both sides.
//
//   - The cluster component's decisions (controller/assign) say why a
//     service has the host it has, or none: the reason of its Ready
//     condition, and of the Events the controller records.
//   - The node agent's problems (controller/dataplane) say why part of a
//     service is not programmed as asked on a node: the reason of the
//     Warnings the agent records.
//
// Each Reason is, as spelled here, an Event's reason on the wire and a log
// key; docs/events.md lists them and docs/troubleshooting.md says what to do
// about each. An API of the egress family adds its reasons here, so that no
// two components spell one code twice or give one spelling two meanings.
//
// It holds names only: it decides nothing and imports nothing.
package reasons

// Reason is a machine-readable code for a decision or a problem.
type Reason string

// Why a service has a host, or none (controller/assign). Every decision
// carries one; all but Assigned, AllNodes and HostLost say why there is no
// host.
const (
	// Assigned: the service has a host node.
	Assigned Reason = "Assigned"
	// AllNodes: sourceIPBy is Network, so the host is "ALL".
	AllNodes Reason = "AllNodes"
	// InvalidSelector: spec.nodeSelector does not parse (an
	// AdminPolicyBasedExternalRoute's problem too, for any of its
	// selectors).
	InvalidSelector Reason = "InvalidSelector"
	// ServiceNotFound: there is no Service of the same name.
	ServiceNotFound Reason = "ServiceNotFound"
	// NotLoadBalancer: the Service is not of type LoadBalancer.
	NotLoadBalancer Reason = "NotLoadBalancer"
	// NoIngressIP: the Service has no load-balancer ingress IP.
	NoIngressIP Reason = "NoIngressIP"
	// NoEndpoints: the Service has no endpoint on the cluster network.
	NoEndpoints Reason = "NoEndpoints"
	// NoMatchingNode: the service is eligible but no node is a candidate.
	NoMatchingNode Reason = "NoMatchingNode"
	// HostLost: the previous host stopped being a candidate (an Event
	// reason; the assign.NodeProblem says why).
	HostLost Reason = "HostLost"
)

// Why part of a service is not programmed as asked on a node
// (controller/dataplane's Problems).
const (
	// PodClaimed: a pod an EgressIP selects leaves otherwise: an older
	// EgressIP selects it too (the oldest, then the first by name, wins),
	// or it is an endpoint of an EgressService with sourceIPBy
	// LoadBalancerIP, whose SNAT takes precedence.
	PodClaimed Reason = "PodClaimed"
	// EndpointClaimed: a pod is an endpoint of several EgressServices; the
	// first by namespace/name gets it, on every node alike.
	EndpointClaimed Reason = "EndpointClaimed"
	// UnknownNetwork: spec.network names no routing table here.
	UnknownNetwork Reason = "UnknownNetwork"
	// HostUnknown: the host's agent has not published its bridge MAC, so
	// local endpoints' egress is dropped until it does.
	HostUnknown Reason = "HostUnknown"
	// Fenced: this node is status.host but could not renew its heartbeat,
	// so it does not act as the host (fail closed) until it can and has
	// read the service's current status.
	Fenced Reason = "Fenced"
	// HostMismatch: status.host does not fit sourceIPBy (ALL with
	// LoadBalancerIP, a node with Network); nothing is programmed until the
	// cluster component corrects it.
	HostMismatch Reason = "HostMismatch"
)

// Why part of an EgressQoS is not programmed on a node (controller/dataplane's
// ComputeQoS). The object's other rules still apply.
const (
	// InvalidRule: a rule the CRD refuses (a DSCP outside 0–63, a dstCIDR
	// or podSelector that does not parse, a position past
	// esv1.MaxEgressQoSRules), found in an object stored before the CRD
	// refused it. The rule is skipped: it marks nothing (rendered, a DSCP
	// of 64 would make Open vSwitch refuse the whole bundle).
	InvalidRule Reason = "InvalidRule"
	// WrongFamily: a rule's dstCIDR is of a family the cluster has no pod
	// of; it can never match.
	WrongFamily Reason = "WrongFamily"
)

// How far an EgressQoS or EgressFirewall is applied: the cluster
// component's status of it (controller/cluster, rollout_status.go), the
// reasons of an EgressQoS's conditions, and the Events of both. Both are
// node-local: an object is applied on a node once that node's agent has
// taken in its current generation and synced.
const (
	// Applied: the object's current generation is applied on the node of
	// every live agent (condition Applied, and Ready when it is also
	// Valid). Also the Normal Event sent when that becomes true.
	Applied Reason = "Applied"
	// Pending: some live agents have not applied the current generation
	// yet (the message names them). The Warning Event of that reason is
	// sent only when it lasts longer than the controller's threshold.
	Pending Reason = "Pending"
	// RevisionUnknown: the object's resourceVersion is not an etcd
	// revision, so the controller cannot tell where it is applied; it
	// never reports such an object Applied.
	RevisionUnknown Reason = "RevisionUnknown"
	// Valid: every rule can be applied as written (condition Valid).
	Valid Reason = "Valid"
	// Invalid: some rule cannot be applied (condition Ready; condition
	// Valid carries the specific reason, InvalidRule or WrongFamily;
	// an EgressFirewall's status.messages name each rule). The other rules
	// still apply. Also the Warning Event sent when the problems change,
	// and the state of an EgressFirewall not named default, which applies
	// nowhere.
	Invalid Reason = "Invalid"
)

// Why part of an EgressFirewall is not programmed on a node
// (controller/dataplane's ComputeFirewall). The object's other rules still
// apply; InvalidRule and WrongFamily (above) serve it too: a rule the CRD
// refuses, found in an object stored before it did, is skipped, and a
// cidrSelector of a family the cluster has no pod of can never match.
const (
	// DNSNameUnresolved: a dnsName rule's name has no answer yet (the
	// resolver has not resolved it, or its lookups fail). The rule matches
	// nothing until it has one, so the rules after it decide; that is also
	// what the reference's empty address set does.
	DNSNameUnresolved Reason = "DNSNameUnresolved"
)

// Why an address of an EgressIP is held by a node, or by none
// (controller/assign's DecideEgressIP): the reason of the EgressIP's
// Assigned condition (that of its first address not held, in spec order)
// and of its Events. Assigned (above) says the address is held; the
// condition's reason is Assigned when every address is.
const (
	// NoEgressNode: no node is labelled k8s.ovn.org/egress-assignable.
	NoEgressNode Reason = "NoEgressNode"
	// NoNodeInSubnet: no egress node has the address inside one of the
	// subnets its agent publishes (heartbeat.Facts.EgressSubnets).
	NoNodeInSubnet Reason = "NoNodeInSubnet"
	// NodesUnavailable: egress nodes have the address in a subnet, but none
	// of them is Ready with a live agent.
	NodesUnavailable Reason = "NodesUnavailable"
	// AllNodesTaken: every available egress node with the address in a
	// subnet holds another address of the same EgressIP (two addresses of
	// one EgressIP never share a node).
	AllNodesTaken Reason = "AllNodesTaken"
	// NodesAtCapacity: the available egress nodes with the address in a
	// subnet hold as many addresses as their capacity allows (the cloud's
	// per-interface limit, egressflow.io/max-egress-ips, or the
	// controller's --max-egress-ips-per-node).
	NodesAtCapacity Reason = "NodesAtCapacity"
	// InvalidEgressCapacity (an Event on a Node): the node's
	// egressflow.io/max-egress-ips or cloud.network.openshift.io/egress-ipconfig
	// annotation cannot be read. The node takes no new address until it
	// can, and keeps those it holds.
	InvalidEgressCapacity Reason = "InvalidEgressCapacity"
	// AddressConflict: an older EgressIP (by creationTimestamp, then name)
	// lists the same address and is the one that may hold it.
	AddressConflict Reason = "AddressConflict"
	// InvalidAddress: a spec.egressIPs entry that is not an IP address, or
	// repeats one (the CRD refuses both; an object stored otherwise).
	InvalidAddress Reason = "InvalidAddress"
	// NodeAddress: the address is a node's (an InternalIP or ExternalIP):
	// holding it would answer ARP and neighbour solicitations for that
	// node and take its traffic.
	NodeAddress Reason = "NodeAddress"
	// CloudPending: on a cloud, the address's node is chosen and its
	// CloudPrivateIPConfig asks the cloud for it there; the cloud has yet
	// to confirm it (its condition's reason follows). The address is not
	// in status.items meanwhile, so no node uses it.
	CloudPending Reason = "CloudPending"
)

// Why a CloudPrivateIPConfig's address is where it is, or nowhere (the
// reason of its Assigned condition and of its Events): Assigned says the
// cloud has it on spec.node; the others say why not yet.
const (
	// CloudNodeNotFound: spec.node names no Node.
	CloudNodeNotFound Reason = "NodeNotFound"
	// CloudNodeUnknown: the cloud does not know the node's instance or its
	// primary interface (no providerID, or one the cloud does not have).
	CloudNodeUnknown Reason = "CloudNodeUnknown"
	// CloudThrottled: the cloud refused the controller's calls for their
	// rate; they are retried with backoff.
	CloudThrottled Reason = "CloudThrottled"
	// CloudInterfaceFull: the node's interface holds as many addresses as
	// its instance type allows.
	CloudInterfaceFull Reason = "CloudInterfaceFull"
	// CloudAddressInUse: the address is another interface's primary
	// address, or something other than egressflow holds it.
	CloudAddressInUse Reason = "CloudAddressInUse"
	// CloudAssignPending: the cloud accepted the assignment, and does not
	// list it yet (its reads lag its writes).
	CloudAssignPending Reason = "CloudAssignPending"
	// CloudRequestFailed: any other error of the cloud's API.
	CloudRequestFailed Reason = "CloudRequestFailed"
	// InvalidObjectName: the object's name is not an address in the
	// convention of CloudPrivateIPConfig (the CRD refuses it; an object
	// stored otherwise).
	InvalidObjectName Reason = "InvalidObjectName"
)

// Why a gateway pod that an AdminPolicyBasedExternalRoute's dynamic hop
// selects is not one of its next hops (controller/dataplane's
// ComputeExternalRouteHops). The policy's other hops still apply.
const (
	// GatewayNotHostNetwork: the hop names no networkAttachmentName, so
	// its gateway must be host-networked (the gateway address is its
	// node's), and the pod is not.
	GatewayNotHostNetwork Reason = "GatewayNotHostNetwork"
	// GatewayNetworkUnknown: the hop names a network attachment that the
	// pod's k8s.v1.cni.cncf.io/network-status annotation does not list, or
	// the annotation is missing or unreadable.
	GatewayNetworkUnknown Reason = "GatewayNetworkUnknown"
)

// The Events of a change of what the nodes note about an
// AdminPolicyBasedExternalRoute (heartbeat.Facts.ExternalRouteNotes).
const (
	// NextHopsDegraded: some node that uses the policy cannot use some of
	// its next hops (BFD session down, no neighbour answer), or a gateway
	// pod its dynamic hops select is no hop; the message lists them.
	NextHopsDegraded Reason = "NextHopsDegraded"
	// NextHopsRecovered: no node notes anything about the policy any more.
	NextHopsRecovered Reason = "NextHopsRecovered"
)

// Reasons of an EgressRouter's conditions and Events beside the shared
// ones (Assigned, Pending, Applied, NoNodeInSubnet, NodesUnavailable and
// the spec's InvalidRule, InvalidAddress, WrongFamily).
const (
	// NoSuchInterface: the router's macvlan.master names an interface that
	// no node publishes as its uplink, so no node can serve it.
	NoSuchInterface Reason = "NoSuchInterface"
	// ServiceConflict: a Service of the router's name exists and is not
	// the router's, so the router's clients are not given its addresses
	// under that name; the router is served all the same.
	ServiceConflict Reason = "ServiceConflict"
	// HolderChanged: the router has a new holder (Normal Event).
	HolderChanged Reason = "HolderChanged"
)
