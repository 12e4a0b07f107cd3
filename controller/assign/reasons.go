package assign

// NodeProblem says why a node is not a candidate for a service. It is also
// the cause label of the failover metric.
type NodeProblem string

const (
	// NodeOK: the node is a candidate.
	NodeOK NodeProblem = ""
	// NodeDeleted: the Node object is gone.
	NodeDeleted NodeProblem = "NodeDeleted"
	// NodeNotReady: the Node's Ready condition is not True (nor Unknown
	// while its agent is alive: NodeServes).
	NodeNotReady NodeProblem = "NodeNotReady"
	// NodeAgentLeaseExpired: the node agent's heartbeat Lease is missing or
	// expired.
	NodeAgentLeaseExpired NodeProblem = "AgentLeaseExpired"
	// NodeAgentUnreachable: the leader's probes and a witness's cannot
	// reach the node agent (heartbeat.Prober), whatever its Lease says.
	NodeAgentUnreachable NodeProblem = "AgentUnreachable"
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
	{NodeAgentUnreachable, "do not answer the liveness probes"},
	{NodeNotSelected, "do not match nodeSelector"},
	{NodeNoLocalEndpoint, "run no endpoint (externalTrafficPolicy Local)"},
}
