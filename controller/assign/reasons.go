package assign

// Reason is a machine-readable code for a decision. It is the Ready
// condition's reason, an Event's reason, and a log key.
type Reason string

const (
	// ReasonAssigned: the service has a host node.
	ReasonAssigned Reason = "Assigned"
	// ReasonAllNodes: sourceIPBy is Network, so the host is "ALL".
	ReasonAllNodes Reason = "AllNodes"
	// ReasonInvalidSelector: spec.nodeSelector does not parse.
	ReasonInvalidSelector Reason = "InvalidSelector"
	// ReasonServiceNotFound: there is no Service of the same name.
	ReasonServiceNotFound Reason = "ServiceNotFound"
	// ReasonNotLoadBalancer: the Service is not of type LoadBalancer.
	ReasonNotLoadBalancer Reason = "NotLoadBalancer"
	// ReasonNoIngressIP: the Service has no load-balancer ingress IP.
	ReasonNoIngressIP Reason = "NoIngressIP"
	// ReasonNoEndpoints: the Service has no endpoint on the cluster network.
	ReasonNoEndpoints Reason = "NoEndpoints"
	// ReasonNoMatchingNode: the service is eligible but no node is a candidate.
	ReasonNoMatchingNode Reason = "NoMatchingNode"
	// ReasonHostLost: the previous host stopped being a candidate (an Event
	// reason; the NodeProblem says why).
	ReasonHostLost Reason = "HostLost"
)

// NodeProblem says why a node is not a candidate for a service. It is also
// the cause label of the failover metric.
type NodeProblem string

const (
	// NodeOK: the node is a candidate.
	NodeOK NodeProblem = ""
	// NodeDeleted: the Node object is gone.
	NodeDeleted NodeProblem = "NodeDeleted"
	// NodeNotReady: the Node's Ready condition is not True.
	NodeNotReady NodeProblem = "NodeNotReady"
	// NodeAgentLeaseExpired: the node agent's heartbeat Lease is missing or
	// expired.
	NodeAgentLeaseExpired NodeProblem = "AgentLeaseExpired"
	// NodeNotSelected: the node does not match spec.nodeSelector.
	NodeNotSelected NodeProblem = "NotSelected"
	// NodeNoLocalEndpoint: externalTrafficPolicy is Local and the node runs
	// no endpoint of the service.
	NodeNoLocalEndpoint NodeProblem = "NoLocalEndpoint"
)

// nodeProblemText is how messages phrase each problem, in the order messages
// list them.
var nodeProblemText = []struct {
	problem NodeProblem
	text    string
}{
	{NodeNotReady, "are not Ready"},
	{NodeAgentLeaseExpired, "have no fresh agent Lease"},
	{NodeNotSelected, "do not match nodeSelector"},
	{NodeNoLocalEndpoint, "run no endpoint (externalTrafficPolicy Local)"},
}
