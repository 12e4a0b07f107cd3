package assign

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

var (
	net4a = netip.MustParsePrefix("192.0.2.0/24")
	net4b = netip.MustParsePrefix("198.51.100.0/24")
	net6  = netip.MustParsePrefix("2001:db8::/64")
)

// egressNode is an available node with subnets.
func egressNode(name string, subnets ...netip.Prefix) *EgressNode {
	return &EgressNode{Name: name, Ready: true, AgentAlive: true, Subnets: subnets}
}

func nodeSet(nodes ...*EgressNode) EgressNodes {
	m := map[string]*EgressNode{}
	for _, n := range nodes {
		m[n.Name] = n
	}
	return EgressNodes{Assignable: m}
}

// eipLoads are the loads of nodes from their IPv4 and IPv6 counts.
func eipLoads(v4, v6 map[string]int) func(string) EgressLoad {
	return func(n string) EgressLoad { return EgressLoad{IPv4: v4[n], IPv6: v6[n]} }
}

// capped is n with capacity c.
func capped(n *EgressNode, c EgressCapacity) *EgressNode {
	n.Capacity = &c
	return n
}

func holders(kv ...string) map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for i := 0; i < len(kv); i += 2 {
		m[netip.MustParseAddr(kv[i])] = kv[i+1]
	}
	return m
}

// fnvScore is the rendezvous score written out again: FNV-1a 64 of
// address, NUL, node.
func fnvScore(addr, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(addr + "\x00" + node))
	return h.Sum64()
}

// got is a decision in short: "address=node" or "address:Reason" per
// item, and the lost holders as "address lost node (cause)".
func short(d EgressIPDecision) (items, lost []string) {
	for _, it := range d.Items {
		if it.Node != "" {
			items = append(items, it.Address+"="+it.Node)
		} else {
			items = append(items, it.Address+":"+string(it.Reason))
		}
		if it.Lost != NodeOK {
			lost = append(lost, fmt.Sprintf("%s lost %s (%s)", it.Address, it.Previous, it.Lost))
		}
	}
	return items, lost
}

func TestDecideEgressIP(t *testing.T) {
	notReady := egressNode("c", net4a)
	notReady.Ready = false
	deadAgent := egressNode("d", net4a)
	deadAgent.AgentAlive = false
	cases := []struct {
		name      string
		addresses []string
		holders   map[netip.Addr]string
		conflicts map[netip.Addr]string
		nodes     EgressNodes
		load      map[string]int // IPv4 addresses held
		load6     map[string]int // IPv6 addresses held
		exists    []string       // nodes that exist without the label
		want      []string
		wantLost  []string
	}{
		{
			name:      "fewest addresses first",
			addresses: []string{"192.0.2.10"},
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net4a), egressNode("c", net4a)),
			load:      map[string]int{"a": 2, "b": 0, "c": 1},
			want:      []string{"192.0.2.10=b"},
		},
		{
			name:      "a valid holder is kept however loaded",
			addresses: []string{"192.0.2.10"},
			holders:   holders("192.0.2.10", "a"),
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net4a)),
			load:      map[string]int{"a": 9},
			want:      []string{"192.0.2.10=a"},
		},
		{
			name:      "two addresses never share a node",
			addresses: []string{"192.0.2.10", "192.0.2.11"},
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net4a)),
			load:      map[string]int{"a": 0, "b": 5},
			want:      []string{"192.0.2.10=a", "192.0.2.11=b"},
		},
		{
			name:      "more addresses than nodes",
			addresses: []string{"192.0.2.10", "192.0.2.11"},
			nodes:     nodeSet(egressNode("a", net4a)),
			want:      []string{"192.0.2.10=a", "192.0.2.11:AllNodesTaken"},
		},
		{
			name:      "only nodes with the address in a subnet",
			addresses: []string{"198.51.100.7", "2001:db8::7"},
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net4b), egressNode("c", net4a, net6)),
			want:      []string{"198.51.100.7=b", "2001:db8::7=c"},
		},
		{
			// Greedy in spec order puts the IPv4 address on the emptier
			// dual-stack node, where the IPv6 one must go: it moves to the
			// IPv4-only node instead.
			name:      "dual-stack: an address placed in the same decision makes room",
			addresses: []string{"192.0.2.10", "2001:db8::10"},
			nodes:     nodeSet(egressNode("v4", net4a), egressNode("dual", net4a, net6)),
			load:      map[string]int{"v4": 3, "dual": 0},
			want:      []string{"192.0.2.10=v4", "2001:db8::10=dual"},
		},
		{
			name:      "a kept address does not move to make room",
			addresses: []string{"192.0.2.10", "2001:db8::10"},
			holders:   holders("192.0.2.10", "dual"),
			nodes:     nodeSet(egressNode("v4", net4a), egressNode("dual", net4a, net6)),
			want:      []string{"192.0.2.10=dual", "2001:db8::10:AllNodesTaken"},
		},
		{
			name:      "holder deleted",
			addresses: []string{"192.0.2.10"},
			holders:   holders("192.0.2.10", "gone"),
			nodes:     nodeSet(egressNode("a", net4a)),
			want:      []string{"192.0.2.10=a"},
			wantLost:  []string{"192.0.2.10 lost gone (NodeDeleted)"},
		},
		{
			name:      "holder lost its label",
			addresses: []string{"192.0.2.10"},
			holders:   holders("192.0.2.10", "plain"),
			exists:    []string{"plain"},
			nodes:     nodeSet(egressNode("a", net4a)),
			want:      []string{"192.0.2.10=a"},
			wantLost:  []string{"192.0.2.10 lost plain (NotEgressAssignable)"},
		},
		{
			name:      "holders not Ready, or without a live agent, or whose subnets changed",
			addresses: []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"},
			holders:   holders("192.0.2.10", "c", "192.0.2.11", "d", "192.0.2.12", "e"),
			nodes:     nodeSet(notReady, deadAgent, egressNode("e", net4b), egressNode("a", net4a), egressNode("b", net4a), egressNode("f", net4a)),
			load:      map[string]int{"a": 0, "b": 1, "f": 2},
			want:      []string{"192.0.2.10=a", "192.0.2.11=b", "192.0.2.12=f"},
			wantLost: []string{"192.0.2.10 lost c (NodeNotReady)", "192.0.2.11 lost d (AgentLeaseExpired)",
				"192.0.2.12 lost e (NotInSubnet)"},
		},
		{
			name:      "two holders on one node (another writer's status): the first keeps it",
			addresses: []string{"192.0.2.10", "192.0.2.11"},
			holders:   holders("192.0.2.10", "a", "192.0.2.11", "a"),
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net4a)),
			want:      []string{"192.0.2.10=a", "192.0.2.11=b"},
			wantLost:  []string{"192.0.2.11 lost a (SharedNode)"},
		},
		{
			name:      "no node labelled",
			addresses: []string{"192.0.2.10"},
			nodes:     nodeSet(),
			want:      []string{"192.0.2.10:NoEgressNode"},
		},
		{
			name:      "no egress node in the subnet",
			addresses: []string{"203.0.113.1"},
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net6)),
			want:      []string{"203.0.113.1:NoNodeInSubnet"},
		},
		{
			name:      "egress nodes in the subnet, none available",
			addresses: []string{"192.0.2.10", "198.51.100.1"},
			holders:   holders("192.0.2.10", "c"),
			nodes:     nodeSet(notReady, deadAgent, egressNode("b", net4b)),
			want:      []string{"192.0.2.10:NodesUnavailable", "198.51.100.1=b"},
			wantLost:  []string{"192.0.2.10 lost c (NodeNotReady)"},
		},
		{
			name:      "an address an older EgressIP lists",
			addresses: []string{"192.0.2.10", "192.0.2.11"},
			holders:   holders("192.0.2.10", "a"),
			conflicts: map[netip.Addr]string{netip.MustParseAddr("192.0.2.10"): "older"},
			nodes:     nodeSet(egressNode("a", net4a), egressNode("b", net4a)),
			load:      map[string]int{"a": 0, "b": 3},
			want:      []string{"192.0.2.10:AddressConflict", "192.0.2.11=a"},
			wantLost:  []string{"192.0.2.10 lost a (AddressConflict)"},
		},
		{
			name:      "a node's address is never held, and a holder whose address became a node's loses it",
			addresses: []string{"192.0.2.21", "192.0.2.10", "192.0.2.11"},
			holders:   holders("192.0.2.10", "a"),
			nodes: func() EgressNodes {
				ns := nodeSet(egressNode("a", net4a), egressNode("b", net4a))
				ns.Addresses = map[netip.Addr]string{netip.MustParseAddr("192.0.2.21"): "a", netip.MustParseAddr("192.0.2.10"): "z"}
				return ns
			}(),
			want:     []string{"192.0.2.21:NodeAddress", "192.0.2.10:NodeAddress", "192.0.2.11=a"},
			wantLost: []string{"192.0.2.10 lost a (NodeAddress)"},
		},
		{
			name:      "a node at its capacity takes no more, however lightly loaded",
			addresses: []string{"192.0.2.10"},
			nodes:     nodeSet(capped(egressNode("a", net4a), EgressCapacity{NoLimit, NoLimit, 1}), egressNode("b", net4a)),
			load:      map[string]int{"a": 1, "b": 7},
			want:      []string{"192.0.2.10=b"},
		},
		{
			name:      "a family's capacity bounds that family only",
			addresses: []string{"192.0.2.10", "2001:db8::10"},
			nodes:     nodeSet(capped(egressNode("a", net4a, net6), EgressCapacity{1, 5, NoLimit}), egressNode("b", net4a, net6)),
			load:      map[string]int{"a": 1, "b": 3},
			load6:     map[string]int{"b": 3},
			want:      []string{"192.0.2.10=b", "2001:db8::10=a"},
		},
		{
			name:      "the total bounds both families together",
			addresses: []string{"2001:db8::10"},
			nodes:     nodeSet(capped(egressNode("a", net6), EgressCapacity{NoLimit, NoLimit, 2})),
			load:      map[string]int{"a": 2},
			want:      []string{"2001:db8::10:NodesAtCapacity"},
		},
		{
			name:      "a capacity of 0 holds none",
			addresses: []string{"192.0.2.10"},
			nodes:     nodeSet(capped(egressNode("a", net4a), EgressCapacity{0, 0, 0})),
			want:      []string{"192.0.2.10:NodesAtCapacity"},
		},
		{
			name:      "a holder above a lowered capacity keeps what it holds",
			addresses: []string{"192.0.2.10", "192.0.2.11"},
			holders:   holders("192.0.2.10", "a"),
			nodes:     nodeSet(capped(egressNode("a", net4a), EgressCapacity{NoLimit, NoLimit, 0})),
			load:      map[string]int{"a": 4},
			want:      []string{"192.0.2.10=a", "192.0.2.11:AllNodesTaken"},
		},
		{
			// Room on a would hold it: the reason names the capacity.
			name:      "a full node and a node the same EgressIP takes: NodesAtCapacity",
			addresses: []string{"192.0.2.10", "192.0.2.11"},
			nodes:     nodeSet(capped(egressNode("a", net4a), EgressCapacity{NoLimit, NoLimit, 1}), egressNode("b", net4a)),
			load:      map[string]int{"a": 1},
			want:      []string{"192.0.2.10=b", "192.0.2.11:NodesAtCapacity"},
		},
		{
			name:      "spellings: compared as addresses, written as the spec writes them",
			addresses: []string{"2001:DB8::A", "2001:db8:0:0::a", "not-an-ip", "fe80::1%eth0"},
			holders:   holders("2001:db8::a", "a"),
			nodes:     nodeSet(egressNode("a", net6), egressNode("b", net6)),
			want:      []string{"2001:DB8::A=a", "2001:db8:0:0::a:InvalidAddress", "not-an-ip:InvalidAddress", "fe80::1%eth0:InvalidAddress"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes := tc.nodes
			nodes.Exists = func(n string) bool { return slices.Contains(tc.exists, n) }
			d := DecideEgressIP(EgressIPInput{Addresses: tc.addresses, Holders: tc.holders, Conflicts: tc.conflicts}, nodes, eipLoads(tc.load, tc.load6))
			items, lost := short(d)
			if !slices.Equal(items, tc.want) {
				t.Errorf("items %q, want %q", items, tc.want)
			}
			if !slices.Equal(lost, tc.wantLost) {
				t.Errorf("lost %q, want %q", lost, tc.wantLost)
			}
		})
	}
}

// TestDecideEgressIPTieBreak: at equal loads the lowest rendezvous score
// of (address, node) wins, so addresses created at once spread, and
// every replica picks the same node.
func TestDecideEgressIPTieBreak(t *testing.T) {
	nodes := nodeSet(egressNode("a", net4a), egressNode("b", net4a), egressNode("c", net4a), egressNode("d", net4a))
	picked := map[string]int{}
	for i := range 40 {
		addr := fmt.Sprintf("192.0.2.%d", i+1)
		want := ""
		for _, n := range []string{"a", "b", "c", "d"} {
			if want == "" || fnvScore(addr, n) < fnvScore(addr, want) {
				want = n
			}
		}
		d := DecideEgressIP(EgressIPInput{Addresses: []string{addr}}, nodes, eipLoads(nil, nil))
		if got := d.Items[0].Node; got != want {
			t.Errorf("%s went to %s, want %s", addr, got, want)
		}
		picked[d.Items[0].Node]++
	}
	if len(picked) != 4 {
		t.Errorf("40 addresses at equal load went to %v: the hash does not spread them", picked)
	}
	// The canonical address is hashed: another spelling picks the same node.
	a := DecideEgressIP(EgressIPInput{Addresses: []string{"2001:db8::1"}}, nodeSet(egressNode("a", net6), egressNode("b", net6), egressNode("c", net6)), eipLoads(nil, nil))
	b := DecideEgressIP(EgressIPInput{Addresses: []string{"2001:DB8:0::1"}}, nodeSet(egressNode("a", net6), egressNode("b", net6), egressNode("c", net6)), eipLoads(nil, nil))
	if a.Items[0].Node != b.Items[0].Node {
		t.Errorf("two spellings of one address went to %s and %s", a.Items[0].Node, b.Items[0].Node)
	}
}

func TestEgressIPCondition(t *testing.T) {
	notReady := egressNode("c", net6)
	notReady.Ready = false
	deadAgent := egressNode("d", net6)
	deadAgent.AgentAlive = false
	unpublished := &EgressNode{Name: "e", Ready: true}
	cases := []struct {
		name        string
		addresses   []string
		nodes       EgressNodes
		ok          bool
		reason      reasons.Reason
		message     string
		statusItems []esv1.EgressIPStatusItem
	}{
		{
			name:        "every address held",
			addresses:   []string{"192.0.2.10", "2001:DB8::10"},
			nodes:       nodeSet(egressNode("a", net4a), egressNode("b", net6)),
			ok:          true,
			reason:      reasons.Assigned,
			message:     "every address is held: 192.0.2.10 on a, 2001:DB8::10 on b",
			statusItems: []esv1.EgressIPStatusItem{{EgressIP: "192.0.2.10", Node: "a"}, {EgressIP: "2001:DB8::10", Node: "b"}},
		},
		{
			name:      "the first address not held gives the reason; every one is listed",
			addresses: []string{"192.0.2.10", "203.0.113.5", "2001:db8::10", "192.0.2.11"},
			nodes:     nodeSet(egressNode("a", net4a), notReady, deadAgent, unpublished),
			reason:    reasons.NoNodeInSubnet,
			message: "not held: 203.0.113.5 (NoNodeInSubnet: no egress node has it in a subnet (some egress nodes' agents have published no subnets)); " +
				"2001:db8::10 (NodesUnavailable: the egress nodes with it in a subnet are not Ready, or have no live agent); " +
				"192.0.2.11 (AllNodesTaken: every egress node that could hold it holds another address of this EgressIP); held: 192.0.2.10 on a",
			statusItems: []esv1.EgressIPStatusItem{{EgressIP: "192.0.2.10", Node: "a"}},
		},
		{
			name:        "nothing held",
			addresses:   []string{"192.0.2.10"},
			nodes:       nodeSet(),
			reason:      reasons.NoEgressNode,
			message:     "not held: 192.0.2.10 (NoEgressNode: no node is labelled k8s.ovn.org/egress-assignable)",
			statusItems: []esv1.EgressIPStatusItem{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideEgressIP(EgressIPInput{Addresses: tc.addresses}, tc.nodes, eipLoads(nil, nil))
			ok, reason, message := d.Condition()
			if ok != tc.ok || reason != tc.reason || message != tc.message {
				t.Errorf("condition %v %s %q\nwant      %v %s %q", ok, reason, message, tc.ok, tc.reason, tc.message)
			}
			if got := d.StatusItems(); !reflect.DeepEqual(got, tc.statusItems) {
				t.Errorf("status items %+v, want %+v", got, tc.statusItems)
			}
		})
	}
}

// TestDecideEgressIPAgainstBruteForce compares DecideEgressIP on random
// small clusters with a specification written independently: the holders
// it keeps, the most addresses any assignment can hold (by enumerating
// them all), each node a candidate and used once, the reasons, and, for a
// single address to place, the exact node.
func TestDecideEgressIPAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	pool := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "198.51.100.1", "198.51.100.2", "2001:db8::1", "2001:DB8::2", "203.0.113.1"}
	subnets := []netip.Prefix{net4a, net4b, net6}
	for iter := range 20000 {
		// Nodes n0..n(k-1), each labelled or not, with random state.
		var all []string
		assignable := map[string]*EgressNode{}
		for i := range rng.IntN(5) {
			name := fmt.Sprintf("n%d", i)
			all = append(all, name)
			if rng.IntN(5) == 0 {
				continue // exists, not labelled
			}
			n := &EgressNode{Name: name, Ready: rng.IntN(6) != 0, AgentAlive: rng.IntN(6) != 0, AgentRestarting: rng.IntN(4) == 0}
			if rng.IntN(2) == 0 {
				limit := func() int { return rng.IntN(4) - 1 } // NoLimit, 0, 1 or 2
				n.Capacity = &EgressCapacity{limit(), limit(), limit()}
			}
			for _, p := range subnets {
				if rng.IntN(2) == 0 {
					n.Subnets = append(n.Subnets, p)
				}
			}
			assignable[name] = n
		}
		nodes := EgressNodes{Assignable: assignable, Exists: func(n string) bool { return slices.Contains(all, n) }}
		load, load6 := map[string]int{}, map[string]int{}
		for _, n := range all {
			load[n], load6[n] = rng.IntN(3), rng.IntN(2)
		}
		var addrs []string
		for range 1 + rng.IntN(4) {
			addrs = append(addrs, pool[rng.IntN(len(pool))])
		}
		hold := map[netip.Addr]string{}
		conflicts := map[netip.Addr]string{}
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			if rng.IntN(2) == 0 {
				hold[a] = fmt.Sprintf("n%d", rng.IntN(6)) // n4, n5 never exist
			}
			if rng.IntN(8) == 0 {
				conflicts[a] = "older"
			}
		}
		in := EgressIPInput{Addresses: addrs, Holders: hold, Conflicts: conflicts}
		d := DecideEgressIP(in, nodes, eipLoads(load, load6))
		if again := DecideEgressIP(in, nodes, eipLoads(load, load6)); !reflect.DeepEqual(again, d) {
			t.Fatalf("iteration %d: two decisions on the same input differ", iter)
		}
		if err := checkEgressIPSpec(in, assignable, load, load6, d); err != nil {
			t.Fatalf("iteration %d: %v\naddresses %q holders %v conflicts %v load %v %v\nnodes %s\ndecision %+v", iter, err, addrs, hold, conflicts, load, load6, describeNodes(assignable), d.Items)
		}
	}
}

func describeNodes(nodes map[string]*EgressNode) string {
	s := ""
	for _, n := range nodes {
		s += fmt.Sprintf("%s(ready %v alive %v restarting %v %v capacity %v) ", n.Name, n.Ready, n.AgentAlive, n.AgentRestarting, n.Subnets, n.Capacity)
	}
	return s
}

// checkEgressIPSpec is the specification of one decision. load and load6
// are the IPv4 and IPv6 addresses each node holds.
func checkEgressIPSpec(in EgressIPInput, nodes map[string]*EgressNode, load, load6 map[string]int, d EgressIPDecision) error {
	if len(d.Items) != len(in.Addresses) {
		return fmt.Errorf("%d items for %d addresses", len(d.Items), len(in.Addresses))
	}
	// mayHold: available, with a in a subnet; candidate: and with room
	// (a limit of -1 is none; a kept holder needs no room).
	mayHold := func(node string, a netip.Addr) bool {
		n, ok := nodes[node]
		if !ok || !n.Ready || !n.AgentAlive {
			return false
		}
		for _, p := range n.Subnets {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	hasRoom := func(node string, a netip.Addr) bool {
		c := nodes[node].Capacity
		if c == nil {
			return true
		}
		familyLimit, familyHeld := c.IPv4, load[node]
		if a.Is6() {
			familyLimit, familyHeld = c.IPv6, load6[node]
		}
		return (familyLimit < 0 || familyHeld < familyLimit) && (c.Any < 0 || load[node]+load6[node] < c.Any)
	}
	candidate := func(node string, a netip.Addr) bool { return mayHold(node, a) && hasRoom(node, a) }
	// Which entries count (first spelling of each address), which are
	// kept, and which are left to place.
	first := map[netip.Addr]int{}
	keptNodes := map[string]bool{}
	var free []int
	for i, s := range in.Addresses {
		a := netip.MustParseAddr(s)
		it := d.Items[i]
		if j, dup := first[a]; dup {
			if it.Node != "" || it.Reason != reasons.InvalidAddress {
				return fmt.Errorf("%s repeats entry %d but is %s %q", s, j, it.Node, it.Reason)
			}
			continue
		}
		first[a] = i
		if _, c := in.Conflicts[a]; c {
			if it.Node != "" || it.Reason != reasons.AddressConflict {
				return fmt.Errorf("%s is another EgressIP's but is %s %q", s, it.Node, it.Reason)
			}
			continue
		}
		if h := in.Holders[a]; h != "" && mayHold(h, a) && !keptNodes[h] {
			keptNodes[h] = true
			if it.Node != h || it.Lost != NodeOK {
				return fmt.Errorf("%s: valid holder %s not kept (got %s, lost %s)", s, h, it.Node, it.Lost)
			}
			continue
		}
		if h := in.Holders[a]; h != "" && it.Lost == NodeOK {
			return fmt.Errorf("%s: holder %s given up without a cause", s, h)
		}
		free = append(free, i)
	}
	// The most of the free entries any assignment can hold.
	var best func(k int, used map[string]bool) int
	best = func(k int, used map[string]bool) int {
		if k == len(free) {
			return 0
		}
		a := netip.MustParseAddr(in.Addresses[free[k]])
		m := best(k+1, used)
		for n := range nodes {
			if !used[n] && candidate(n, a) {
				used[n] = true
				m = max(m, 1+best(k+1, used))
				delete(used, n)
			}
		}
		return m
	}
	want := best(0, keptNodes)
	held, usedNodes := 0, map[string]bool{}
	for n := range keptNodes {
		usedNodes[n] = true
	}
	for _, i := range free {
		it := d.Items[i]
		a := netip.MustParseAddr(in.Addresses[i])
		if it.Node == "" {
			// Nodes that could hold it: full ones among them say
			// NodesAtCapacity, else all taken by this EgressIP.
			var anyMayHold, anyFreeOfThis, anyLabelled, inSubnet bool
			for n, node := range nodes {
				anyLabelled = true
				if mayHold(n, a) {
					anyMayHold = true
					taken := false
					for _, other := range d.Items {
						taken = taken || other.Node == n
					}
					if !taken {
						if hasRoom(n, a) {
							return fmt.Errorf("%s not held, though %s may hold it, has room and holds nothing of this EgressIP", it.Address, n)
						}
						anyFreeOfThis = true
					}
				}
				for _, p := range node.Subnets {
					inSubnet = inSubnet || p.Contains(a)
				}
			}
			wantReason := reasons.NodesUnavailable
			switch {
			case anyFreeOfThis:
				wantReason = reasons.NodesAtCapacity
			case anyMayHold:
				wantReason = reasons.AllNodesTaken
			case !anyLabelled:
				wantReason = reasons.NoEgressNode
			case !inSubnet:
				wantReason = reasons.NoNodeInSubnet
			}
			if it.Reason != wantReason {
				return fmt.Errorf("%s not held for %s, want %s", it.Address, it.Reason, wantReason)
			}
			continue
		}
		if !candidate(it.Node, a) || usedNodes[it.Node] {
			return fmt.Errorf("%s on %s: not a candidate, or the node is used twice", it.Address, it.Node)
		}
		usedNodes[it.Node] = true
		held++
		if it.Reason != reasons.Assigned {
			return fmt.Errorf("%s held with reason %s", it.Address, it.Reason)
		}
	}
	if held != want {
		return fmt.Errorf("%d of the free addresses held, %d could be", held, want)
	}
	if len(free) == 1 && d.Items[free[0]].Node != "" {
		a := in.Addresses[free[0]]
		canon := netip.MustParseAddr(a).String()
		wantNode := ""
		for n := range nodes {
			if !candidate(n, netip.MustParseAddr(a)) || keptNodes[n] {
				continue
			}
			// A restarting agent's node ranks after every other.
			restartingRank := func(n string) int {
				if nodes[n].AgentRestarting {
					return 1
				}
				return 0
			}
			total := func(n string) int { return load[n] + load6[n] }
			if wantNode == "" || restartingRank(n) < restartingRank(wantNode) || (restartingRank(n) == restartingRank(wantNode) && (total(n) < total(wantNode) ||
				(total(n) == total(wantNode) && (fnvScore(canon, n) < fnvScore(canon, wantNode) ||
					(fnvScore(canon, n) == fnvScore(canon, wantNode) && n < wantNode))))) {
				wantNode = n
			}
		}
		if got := d.Items[free[0]].Node; got != wantNode {
			return fmt.Errorf("%s went to %s, want %s (agents not restarting, then fewest addresses, then hash)", a, got, wantNode)
		}
	}
	return nil
}

// TestConfirmed: an address the cloud has yet to confirm on its node is
// not held, reason CloudPending with confirm's why; the others are as
// decided, and the decision itself is not changed.
func TestConfirmed(t *testing.T) {
	d := DecideEgressIP(EgressIPInput{Addresses: []string{"192.0.2.10", "192.0.2.11", "203.0.113.1"}},
		nodeSet(egressNode("a", net4a), egressNode("b", net4a)), eipLoads(nil, nil))
	var asked []string
	c := d.Confirmed(func(a netip.Addr, node string) (bool, string) {
		asked = append(asked, a.String()+"="+node)
		return a.String() == "192.0.2.10", "not yet on " + node
	})
	items, _ := short(c)
	if !slices.Equal(items, []string{"192.0.2.10=" + d.Items[0].Node, "192.0.2.11:CloudPending", "203.0.113.1:NoNodeInSubnet"}) {
		t.Errorf("confirmed %q", items)
	}
	if c.Items[1].Why != "not yet on "+d.Items[1].Node {
		t.Errorf("why %q", c.Items[1].Why)
	}
	if len(asked) != 2 {
		t.Errorf("asked about %q, want the two held addresses only", asked)
	}
	if orig, _ := short(d); orig[1] != "192.0.2.11="+d.Items[1].Node {
		t.Errorf("the decision changed: %q", orig)
	}
	if ok, reason, _ := c.Condition(); ok || reason != reasons.CloudPending || !c.Pending() || d.Pending() {
		t.Errorf("condition %v %s, pending %v (decision %v), want not ok, CloudPending, pending (not)", ok, reason, c.Pending(), d.Pending())
	}
}
