package assign

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// Node is what candidacy depends on about one node.
type Node struct {
	Name   string
	Labels map[string]string
	// Ready: the Node serves (NodeServes).
	Ready bool
	// AgentAlive is the node agent being judged alive (heartbeat.Judge).
	AgentAlive bool
	// AgentUnreachable: the agent is judged dead by the probes, not (only)
	// by its Lease.
	AgentUnreachable bool
	// AgentRestarting: the agent handed its Lease over for a restart
	// (heartbeat.AnnotationRestarting), and no successor has renewed it
	// yet. Still a candidate, but chosen only when no other is: until the
	// successor renews, the probes do not judge the node, so a fault of it
	// would fail over only when the handover runs out.
	AgentRestarting bool
	// Load is how many services are assigned to the node: kept beside
	// the rest so that a decision, which weighs every node, reads it
	// without a lookup per node.
	Load int
}

// agentProblem is why a node whose agent is judged dead is not a
// candidate: the probes' verdict when they made it, else the Lease's.
func agentProblem(unreachable bool) NodeProblem {
	if unreachable {
		return NodeAgentUnreachable
	}
	return NodeAgentLeaseExpired
}

// ReadyCondition is the status of a Node's Ready condition, "" without one.
func ReadyCondition(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// NodeServes says whether a node may host services and hold egress IPs as
// far as its Node object tells: its Ready condition is True, or Unknown
// while its agent is alive (heartbeat.Judge). Unknown is the node
// lifecycle controller's word for "no status from the kubelet lately":
// after an outage of the API server, or of the controller manager's
// watch, it marks every node so, though no node failed. Whether the
// node's dataplane is up is the agent's liveness to tell (the probes
// within a second), and a kubelet that stopped alone does not stop the
// dataplane. False, the kubelet's own report (its runtime or network
// not ready), is not held against the agent's word.
func NodeServes(n *corev1.Node, agentAlive bool) bool {
	switch ReadyCondition(n) {
	case corev1.ConditionTrue:
		return true
	case corev1.ConditionUnknown:
		return agentAlive
	}
	return false
}

// Check says why n is not a candidate for a service with eligibility el, or
// NodeOK. The checks run in this order: Ready, agent Lease, nodeSelector,
// local endpoint.
func (el Eligibility) Check(n *Node) NodeProblem {
	switch {
	case !n.Ready:
		return NodeNotReady
	case !n.AgentAlive:
		return agentProblem(n.AgentUnreachable)
	case el.Selector != nil && !el.Selector.Matches(labels.Set(n.Labels)):
		return NodeNotSelected
	case el.LocalNodes != nil && !el.LocalNodes[n.Name]:
		return NodeNoLocalEndpoint
	}
	return NodeOK
}

// Decision is the outcome for one service.
type Decision struct {
	// Host is the node name, esv1.HostAll, or "" for none.
	Host string
	// Reason is reasons.Assigned, reasons.AllNodes, or why there is no host.
	Reason reasons.Reason
	// Message explains Reason to a person.
	Message string
	// Lost is why the current host was given up, when it was a node and is
	// not kept (NodeOK otherwise).
	Lost NodeProblem
}

// Decide picks the host of service key ("namespace/name") with eligibility
// el. current is its current host ("" for none); nodes are all known nodes
// by name, each with its load.
//
// A current host that is still a candidate is kept (a restarting agent
// too: a rolling update moves nothing). Otherwise a candidate whose agent
// is not restarting wins over one whose agent is, then the lowest load,
// then the lowest rendezvous hash of (key, node), then the lowest name.
func Decide(key string, el Eligibility, current string, nodes map[string]*Node) Decision {
	d := Decision{}
	if el.Reason == "" && current != "" && current != esv1.HostAll {
		if n, ok := nodes[current]; !ok {
			d.Lost = NodeDeleted
		} else if d.Lost = el.Check(n); d.Lost == NodeOK {
			return assigned(key, current)
		}
	}
	switch el.Reason {
	case "":
	case reasons.AllNodes:
		return Decision{Host: esv1.HostAll, Reason: reasons.AllNodes, Message: el.Message}
	default:
		d.Reason, d.Message = el.Reason, el.Message
		return d
	}

	// With externalTrafficPolicy Local only the endpoints' nodes can be
	// candidates: they are the ones looked at, and every node only to
	// explain why none was.
	consider := func(yield func(string, *Node) bool) {
		for name, n := range nodes {
			if !yield(name, n) {
				return
			}
		}
	}
	if el.LocalNodes != nil {
		consider = func(yield func(string, *Node) bool) {
			for name := range el.LocalNodes {
				if n, ok := nodes[name]; ok && !yield(name, n) {
					return
				}
			}
		}
	}
	keyHash := newRendezvousPrefix(key)
	var best candidateRank
	for name, n := range consider {
		if el.Check(n) != NodeOK {
			continue
		}
		// Built only when it wins: a decision ranks every node.
		if score := keyHash.score(name); best.name == "" || best.after(n.AgentRestarting, n.Load, score, name) {
			best = candidateRank{n.AgentRestarting, n.Load, score, name}
		}
	}
	if best.name == "" {
		problems := map[NodeProblem]bool{}
		for _, n := range nodes {
			if p := el.Check(n); p != NodeOK {
				problems[p] = true
			}
		}
		d.Reason, d.Message = reasons.NoMatchingNode, noCandidateMessage(len(nodes), problems)
		return d
	}
	a := assigned(key, best.name)
	a.Lost = d.Lost
	return a
}

// candidateRank orders the candidates for a service or an egress IP, best
// first: agents not restarting, then the lowest load, then the lowest
// rendezvous score of (key, node), then the lowest name.
type candidateRank struct {
	restarting bool
	load       int
	score      uint64
	name       string
}

// after says whether r ranks after the candidate of those fields.
func (r *candidateRank) after(restarting bool, load int, score uint64, name string) bool {
	switch {
	case r.restarting != restarting:
		return r.restarting
	case r.load != load:
		return load < r.load
	case r.score != score:
		return score < r.score
	}
	return name < r.name
}

// compare is the order as a sort function.
func (r candidateRank) compare(o candidateRank) int {
	switch {
	case o.after(r.restarting, r.load, r.score, r.name):
		return -1
	case r.after(o.restarting, o.load, o.score, o.name):
		return 1
	}
	return 0
}

func assigned(key, host string) Decision {
	ns, name, _ := strings.Cut(key, "/")
	return Decision{Host: host, Reason: reasons.Assigned,
		Message: fmt.Sprintf("node %s handles the egress traffic; it carries the label %s", host, LabelKey(ns, name))}
}

// noCandidateMessage names the problems that excluded nodes, in a fixed order
// and without counts, so that it changes (and costs a status write) only when
// the kind of problem changes.
func noCandidateMessage(nodes int, problems map[NodeProblem]bool) string {
	if nodes == 0 {
		return "no candidate node: there are no nodes"
	}
	var why []string
	for _, p := range nodeProblemText {
		if problems[p.problem] {
			why = append(why, p.text)
		}
	}
	return "no candidate node: the nodes " + strings.Join(why, ", or ")
}

// FNV-1a, 64 bits (hash/fnv's), written out so that a decision hashes
// the service's key once and allocates nothing per node.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// rendezvousPrefix is the tie-break hash's state after the service key
// and its separator: score finishes it with a node's name.
type rendezvousPrefix uint64

func newRendezvousPrefix(key string) rendezvousPrefix {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * fnvPrime64
	}
	return rendezvousPrefix(h * fnvPrime64) // the separator: a zero byte, xor-ing nothing
}

// score is the tie-break score of node for the prefix's service:
// FNV-1a of key, a zero byte, and node.
func (p rendezvousPrefix) score(node string) uint64 {
	h := uint64(p)
	for i := 0; i < len(node); i++ {
		h = (h ^ uint64(node[i])) * fnvPrime64
	}
	return h
}
