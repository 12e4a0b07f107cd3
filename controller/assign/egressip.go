package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// EgressIP assignment: which node holds each address of an EgressIP. The
// rules (docs/egressip.md, "Assignment"):
//
//   - an address may go to a node that carries EgressAssignableLabel (any
//     value), is Ready, has a live agent, has the address inside one of
//     the subnets its agent publishes (or the cloud's: capacity.go), and
//     has room for it under its capacity (capacity.go);
//   - two addresses of one EgressIP never share a node;
//   - a holder that still satisfies all that is kept, however unbalanced;
//   - otherwise the address goes to the candidate with the fewest addresses
//     (of every EgressIP), ties to the lowest rendezvous hash of (address,
//     node), then to the lowest name;
//   - an address that two EgressIPs list belongs to the older one (by
//     creationTimestamp, then name; the caller says which: Conflicts); the
//     other reports AddressConflict for it;
//   - an address that is a node's own (EgressNodes.Addresses) is never
//     held: NodeAddress.
//
// Addresses are placed in spec order; when an address finds every
// candidate taken by an address of the same EgressIP placed in the same
// decision, those are moved to other candidates where that frees one (an
// augmenting path), so that as many addresses are held as the nodes allow.
// Kept addresses never move to make room.

// EgressAssignableLabel marks the nodes that may hold egress IPs. Its
// presence counts, not its value, as in the reference.
const EgressAssignableLabel = "k8s.ovn.org/egress-assignable"

// EgressAssignable says whether n carries EgressAssignableLabel.
func EgressAssignable(n *corev1.Node) bool {
	_, ok := n.Labels[EgressAssignableLabel]
	return ok
}

// Why a holder of an egress IP was given up, besides NodeDeleted,
// NodeNotReady and NodeAgentLeaseExpired.
const (
	// NodeNotEgressAssignable: the node lost EgressAssignableLabel.
	NodeNotEgressAssignable NodeProblem = "NotEgressAssignable"
	// NodeNotInSubnet: the address is in none of the node's subnets (they
	// changed).
	NodeNotInSubnet NodeProblem = "NotInSubnet"
	// NodeShared: another address of the EgressIP holds the node (a status
	// some other writer made).
	NodeShared NodeProblem = "SharedNode"
	// NodeAddressConflict: an older EgressIP lists the address.
	NodeAddressConflict NodeProblem = "AddressConflict"
	// NodeIsNodeAddress: the address became a node's own.
	NodeIsNodeAddress NodeProblem = "NodeAddress"
)

// EgressNode is what holding egress IPs depends on about one node that
// carries EgressAssignableLabel.
type EgressNode struct {
	Name string
	// Ready: the Node serves (NodeServes).
	Ready bool
	// AgentAlive is the node agent being judged alive (heartbeat.Judge),
	// and AgentUnreachable that the probes judged it dead.
	AgentAlive, AgentUnreachable bool
	// AgentRestarting: the agent handed its Lease over for a restart, not
	// yet renewed by its successor (see Node.AgentRestarting): a new
	// address goes to it only when no other node can take it.
	AgentRestarting bool
	// Subnets are the subnets the node's agent last published
	// (heartbeat.Facts.EgressSubnets), or the cloud's
	// (EgressLimits.CloudSubnets); nil when there are none.
	Subnets []netip.Prefix
	// Capacity limits the addresses the node may hold; nil for none.
	Capacity *EgressCapacity
}

// InSubnet says whether a lies in one of n's subnets.
func (n *EgressNode) InSubnet(a netip.Addr) bool {
	for _, p := range n.Subnets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// available says whether n may take addresses at all.
func (n *EgressNode) available() bool { return n.Ready && n.AgentAlive }

// EgressNodes are the nodes an EgressIP decision looks at.
type EgressNodes struct {
	// Assignable are the nodes that carry EgressAssignableLabel, by name.
	Assignable map[string]*EgressNode
	// Exists says whether a Node of that name exists, labelled or not: it
	// tells a deleted holder from one that lost the label. Nil: only the
	// Assignable ones exist.
	Exists func(name string) bool
	// Addresses are every node's addresses (InternalIP, ExternalIP), with
	// the node's name: an address that is one is never held. The
	// reference only warns about such an EgressIP; holding it would answer
	// ARP for the node and take its traffic.
	Addresses map[netip.Addr]string
}

func (ns EgressNodes) exists(name string) bool {
	if _, ok := ns.Assignable[name]; ok {
		return true
	}
	return ns.Exists != nil && ns.Exists(name)
}

// EgressIPInput is one EgressIP as its decision sees it.
type EgressIPInput struct {
	// Addresses are spec.egressIPs as written.
	Addresses []string
	// Holders are the nodes that hold its addresses now (canonical
	// addresses): the controller's own record, adopted from status.items
	// when its term began.
	Holders map[netip.Addr]string
	// Conflicts are its addresses that an older EgressIP lists, each with
	// that EgressIP's name.
	Conflicts map[netip.Addr]string
}

// EgressIPItem is the decision for one spec.egressIPs entry.
type EgressIPItem struct {
	// Address is the entry as the spec writes it.
	Address string
	// Addr is the address, canonical; invalid when Address is not one, or
	// repeats an earlier entry.
	Addr netip.Addr
	// Node holds the address, "" for none.
	Node string
	// Reason is reasons.Assigned when Node holds it, else why none does.
	Reason reasons.Reason
	// Why explains Reason for an address not held, to a person.
	Why string
	// Previous is the holder before this decision ("" for none).
	Previous string
	// Lost is why Previous was given up; NodeOK when it was kept, or there
	// was none.
	Lost NodeProblem
}

// EgressIPDecision is the outcome for one EgressIP: one item per
// spec.egressIPs entry, in spec order.
type EgressIPDecision struct {
	Items []EgressIPItem
}

// DecideEgressIP decides which node holds each address of in. load(node) is
// how many addresses, of every EgressIP, the node holds, its own kept
// ones included.
func DecideEgressIP(in EgressIPInput, nodes EgressNodes, load func(node string) EgressLoad) EgressIPDecision {
	items := make([]EgressIPItem, len(in.Addresses))
	seen := make(map[netip.Addr]bool, len(in.Addresses))
	used := make(map[string]int, len(in.Addresses)) // node -> item holding it
	kept := make([]bool, len(in.Addresses))

	// Parse, and keep every holder that is still right.
	for i, s := range in.Addresses {
		it := &items[i]
		it.Address = s
		a, ok := esv1.ParseEgressIP(s)
		switch {
		case !ok:
			it.Reason, it.Why = reasons.InvalidAddress, "not an IP address"
			continue
		case seen[a]:
			it.Reason, it.Why = reasons.InvalidAddress, "listed twice"
			continue
		}
		seen[a] = true
		it.Addr = a
		it.Previous = in.Holders[a]
		if node, ok := nodes.Addresses[a]; ok {
			it.Reason, it.Why = reasons.NodeAddress, fmt.Sprintf("it is node %s's address", node)
			if it.Previous != "" {
				it.Lost = NodeIsNodeAddress
			}
			continue
		}
		if older, ok := in.Conflicts[a]; ok {
			it.Reason, it.Why = reasons.AddressConflict, fmt.Sprintf("the older EgressIP %s lists it", older)
			if it.Previous != "" {
				it.Lost = NodeAddressConflict
			}
			continue
		}
		if it.Previous == "" {
			continue
		}
		if it.Lost = holderProblem(nodes, it.Previous, a); it.Lost != NodeOK {
			continue
		}
		if _, taken := used[it.Previous]; taken {
			it.Lost = NodeShared
			continue
		}
		used[it.Previous], kept[i] = i, true
		it.Node, it.Reason = it.Previous, reasons.Assigned
	}

	// Place the others, in spec order.
	candidates := make([][]string, len(items))
	for i := range items {
		it := &items[i]
		if kept[i] || !it.Addr.IsValid() || it.Reason != "" {
			continue
		}
		candidates[i] = rankCandidates(it.Addr, nodes, load)
		placeEgressIP(i, items, candidates, kept, used, map[string]bool{})
	}
	for i := range items {
		it := &items[i]
		switch {
		case it.Node != "":
			it.Reason, it.Why = reasons.Assigned, ""
		case it.Reason == "" && it.Addr.IsValid():
			it.Reason, it.Why = unheldReason(it.Addr, nodes, used)
		}
	}
	return EgressIPDecision{Items: items}
}

// placeEgressIP gives item i a node among its candidates: a free one in
// order of preference, else one held by an item placed in this decision
// that can itself move to another (Kuhn's augmenting path; visited guards
// the search).
func placeEgressIP(i int, items []EgressIPItem, candidates [][]string, kept []bool, used map[string]int, visited map[string]bool) bool {
	for _, n := range candidates[i] {
		if _, taken := used[n]; !taken {
			used[n], items[i].Node = i, n
			return true
		}
	}
	for _, n := range candidates[i] {
		j := used[n]
		if visited[n] || kept[j] {
			continue
		}
		visited[n] = true
		if placeEgressIP(j, items, candidates, kept, used, visited) {
			used[n], items[i].Node = i, n
			return true
		}
	}
	return false
}

// holderProblem says why node may no longer hold a, or NodeOK.
func holderProblem(nodes EgressNodes, node string, a netip.Addr) NodeProblem {
	n, ok := nodes.Assignable[node]
	switch {
	case !ok && nodes.exists(node):
		return NodeNotEgressAssignable
	case !ok:
		return NodeDeleted
	case !n.Ready:
		return NodeNotReady
	case !n.AgentAlive:
		return agentProblem(n.AgentUnreachable)
	case !n.InSubnet(a):
		return NodeNotInSubnet
	}
	return NodeOK
}

// rankCandidates are the nodes that may hold a and have room for it,
// best first (candidateRank, the load being the addresses a node holds).
func rankCandidates(a netip.Addr, nodes EgressNodes, load func(string) EgressLoad) []string {
	keyHash := newRendezvousPrefix(a.String())
	var out []candidateRank
	for name, n := range nodes.Assignable {
		if !n.available() || !n.InSubnet(a) {
			continue
		}
		if l := load(name); n.Capacity.HasRoom(a, l) {
			out = append(out, candidateRank{n.AgentRestarting, l.Total(), keyHash.score(name), name})
		}
	}
	slices.SortFunc(out, candidateRank.compare)
	names := make([]string, len(out))
	for i, r := range out {
		names[i] = r.name
	}
	return names
}

// unheldReason says why a (not an address another EgressIP holds, not
// placed) has no node; used are the nodes the EgressIP's addresses hold.
// An available node with a in a subnet and none of them is full: the
// placement would have taken it otherwise. Which reason it is depends on
// this EgressIP alone, not on the loads, so that another EgressIP filling
// a node does not change this one's status.
func unheldReason(a netip.Addr, nodes EgressNodes, used map[string]int) (reasons.Reason, string) {
	var mayHold bool
	for name, n := range nodes.Assignable {
		if !n.available() || !n.InSubnet(a) {
			continue
		}
		if _, taken := used[name]; !taken {
			return reasons.NodesAtCapacity, "the available egress nodes with it in a subnet that hold no other address of this EgressIP hold as many addresses as their capacity allows"
		}
		mayHold = true
	}
	if mayHold {
		return reasons.AllNodesTaken, "every egress node that could hold it holds another address of this EgressIP"
	}
	if len(nodes.Assignable) == 0 {
		return reasons.NoEgressNode, "no node is labelled " + EgressAssignableLabel
	}
	var notReady, noLease, unpublished, inSubnet bool
	for _, n := range nodes.Assignable {
		if len(n.Subnets) == 0 {
			unpublished = true
		}
		if !n.InSubnet(a) {
			continue
		}
		inSubnet = true
		if !n.Ready {
			notReady = true
		} else if !n.AgentAlive {
			noLease = true
		}
	}
	if !inSubnet {
		why := "no egress node has it in a subnet"
		if unpublished {
			why += " (some egress nodes' agents have published no subnets)"
		}
		return reasons.NoNodeInSubnet, why
	}
	var problems []string
	if notReady {
		problems = append(problems, "are not Ready")
	}
	if noLease {
		problems = append(problems, "have no live agent")
	}
	return reasons.NodesUnavailable, "the egress nodes with it in a subnet " + strings.Join(problems, ", or ")
}

// Held are the addresses held, by canonical address.
func (d EgressIPDecision) Held() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, it := range d.Items {
		if it.Node != "" {
			out[it.Addr] = it.Node
		}
	}
	return out
}

// StatusItems are status.items: each held address, as the spec writes it,
// with its node, in spec order.
func (d EgressIPDecision) StatusItems() []esv1.EgressIPStatusItem {
	out := []esv1.EgressIPStatusItem{}
	for _, it := range d.Items {
		if it.Node != "" {
			out = append(out, esv1.EgressIPStatusItem{EgressIP: it.Address, Node: it.Node})
		}
	}
	return out
}

// Confirmed is d with every held address that confirm does not confirm
// on its node made not held, reason reasons.CloudPending and confirm's
// why. On a cloud, an address is usable only once the cloud has it on its
// node's interface: until then no node may use it.
func (d EgressIPDecision) Confirmed(confirm func(a netip.Addr, node string) (ok bool, why string)) EgressIPDecision {
	items := slices.Clone(d.Items)
	for i := range items {
		it := &items[i]
		if it.Node == "" {
			continue
		}
		if ok, why := confirm(it.Addr, it.Node); !ok {
			it.Node, it.Reason, it.Why = "", reasons.CloudPending, why
		}
	}
	return EgressIPDecision{Items: items}
}

// Pending says whether an address waits for the cloud (CloudPending).
func (d EgressIPDecision) Pending() bool {
	return slices.ContainsFunc(d.Items, func(it EgressIPItem) bool { return it.Reason == reasons.CloudPending })
}

// Condition is the Assigned condition's verdict: ok when every address is
// held; reason Assigned then, else that of the first address not held;
// message naming every address not held with its reason (in spec order,
// without counts, so that it changes only with the decision), then the
// held ones with their nodes.
func (d EgressIPDecision) Condition() (ok bool, reason reasons.Reason, message string) {
	var held, unheld []string
	for _, it := range d.Items {
		if it.Node != "" {
			held = append(held, it.Address+" on "+it.Node)
			continue
		}
		if reason == "" {
			reason = it.Reason
		}
		unheld = append(unheld, fmt.Sprintf("%s (%s: %s)", it.Address, it.Reason, it.Why))
	}
	if len(unheld) == 0 {
		return true, reasons.Assigned, "every address is held: " + strings.Join(held, ", ")
	}
	message = "not held: " + strings.Join(unheld, "; ")
	if len(held) > 0 {
		message += "; held: " + strings.Join(held, ", ")
	}
	return false, reason, message
}
