package cluster

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/reasons"
)

// The incremental EgressIP bookkeeping (eipState: decide, release,
// nodeChanged, adopt, and the keys the handlers enqueue from them)
// against a specification of the whole cluster, on random histories.
// After every step the queue is drained as the workers would, and then:
//
//   - every EgressIP's status is a fixed point: deciding it again, from
//     scratch as a resync does, writes nothing (so the keys enqueued were
//     enough);
//   - every held address is on a node that may hold it, no node holds two
//     addresses of one EgressIP, and no address is held by two EgressIPs:
//     each is held by its owner, the oldest EgressIP that lists it;
//   - the load and byNode indexes equal a recount from the statuses;
//   - a new term adopting the statuses writes nothing and keeps every
//     address where it is.

// simNode is a node of the simulation.
type simNode struct {
	labelled, ready, alive bool
	subnets                []netip.Prefix
	// capacity is nil for none.
	capacity *assign.EgressCapacity
}

// randomCapacity is none half the time, else a total, or per family, of
// 0 to 2.
func (s *eipSim) randomCapacity() *assign.EgressCapacity {
	switch s.rng.IntN(4) {
	case 0:
		return &assign.EgressCapacity{IPv4: assign.NoLimit, IPv6: assign.NoLimit, Any: s.rng.IntN(3)}
	case 1:
		return &assign.EgressCapacity{IPv4: s.rng.IntN(3), IPv6: s.rng.IntN(3), Any: assign.NoLimit}
	}
	return nil
}

type eipSim struct {
	t     *testing.T
	rng   *rand.Rand
	nodes map[string]*simNode
	eips  map[string]*esv1.EgressIP
	state *eipState
	queue []string
	// writes counts status changes.
	writes int
}

var (
	simSubnets = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::/64")}
	simPool    = []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "198.51.100.1", "198.51.100.2", "2001:db8::1", "2001:DB8::2", "203.0.113.1"}
)

func (s *eipSim) view() assign.EgressNodes {
	v := assign.EgressNodes{Assignable: map[string]*assign.EgressNode{}, Exists: func(n string) bool { return s.nodes[n] != nil }}
	for name, n := range s.nodes {
		if n.labelled {
			v.Assignable[name] = &assign.EgressNode{Name: name, Ready: n.ready, AgentAlive: n.alive, Subnets: slices.Clone(n.subnets), Capacity: n.capacity}
		}
	}
	return v
}

// sync is syncEgressIP without the API: the decision is written as the
// object's status when it differs.
func (s *eipSim) sync(name string) {
	st := s.state
	eip := s.eips[name]
	if eip == nil {
		_, affected := st.release(name)
		s.queue = append(s.queue, affected...)
		return
	}
	d, affected := st.decide(eip, s.view())
	s.queue = append(s.queue, affected...)
	items, cond := d.StatusItems(), assignedCondition(eip, d, dataplane.EgressIPUnheldDrop)
	if !egressIPUpToDate(eip, items, cond) {
		eip.Status.Items = items
		eip.Status.Conditions = []metav1.Condition{cond}
		s.writes++
	}
}

func (s *eipSim) drain() {
	for len(s.queue) > 0 {
		i := s.rng.IntN(len(s.queue))
		name := s.queue[i]
		s.queue = slices.Delete(s.queue, i, i+1)
		s.sync(name)
	}
}

// nodeEvent is what the handlers enqueue for a node change.
func (s *eipSim) nodeEvent(name string, relevant bool) {
	s.queue = append(s.queue, s.state.nodeChanged(name, relevant, time.Time{})...)
}

func (s *eipSim) randomAddresses() []string {
	var out []string
	for range 1 + s.rng.IntN(3) {
		a := simPool[s.rng.IntN(len(simPool))]
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// step makes one random change, as an API event, and enqueues what the
// handlers would.
func (s *eipSim) step() string {
	names := func(m map[string]*simNode) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	switch op := s.rng.IntN(10); {
	case op < 3: // create or change an EgressIP
		name := fmt.Sprintf("eip-%d", s.rng.IntN(6))
		if eip := s.eips[name]; eip != nil {
			eip.Spec.EgressIPs = s.randomAddresses()
			s.queue = append(s.queue, name)
			return "change " + name
		}
		// Creation times collide sometimes: the name breaks the tie.
		s.eips[name] = &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(s.rng.IntN(4)), 0))},
			Spec: esv1.EgressIPSpec{EgressIPs: s.randomAddresses()}}
		s.queue = append(s.queue, name)
		return "create " + name
	case op < 4: // delete an EgressIP
		name := fmt.Sprintf("eip-%d", s.rng.IntN(6))
		delete(s.eips, name)
		s.queue = append(s.queue, name)
		return "delete " + name
	case op < 5: // add or delete a node
		name := fmt.Sprintf("node-%d", s.rng.IntN(6))
		if n := s.nodes[name]; n != nil {
			delete(s.nodes, name)
			s.nodeEvent(name, n.labelled)
			return "delete " + name
		}
		n := &simNode{labelled: s.rng.IntN(4) != 0, ready: true, alive: true, capacity: s.randomCapacity()}
		for _, p := range simSubnets {
			if s.rng.IntN(2) == 0 {
				n.subnets = append(n.subnets, p)
			}
		}
		s.nodes[name] = n
		s.nodeEvent(name, n.labelled)
		return "add " + name
	default: // change a node
		all := names(s.nodes)
		if len(all) == 0 {
			return "nothing"
		}
		name := all[s.rng.IntN(len(all))]
		n := s.nodes[name]
		switch s.rng.IntN(5) {
		case 4: // capacity (its annotation, or the cloud's)
			n.capacity = s.randomCapacity()
			s.nodeEvent(name, n.labelled)
			return "capacity " + name
		case 0:
			n.labelled = !n.labelled
			s.nodeEvent(name, true)
			return "relabel " + name
		case 1:
			n.ready = !n.ready
			s.nodeEvent(name, n.labelled)
			return "readiness " + name
		case 2: // liveness, judged (agentChanged)
			n.alive = !n.alive
			s.nodeEvent(name, n.labelled)
			return "liveness " + name
		default: // subnets (leaseSubnetsObserved)
			p := simSubnets[s.rng.IntN(len(simSubnets))]
			if i := slices.Index(n.subnets, p); i >= 0 {
				n.subnets = slices.Delete(n.subnets, i, i+1)
			} else {
				n.subnets = append(n.subnets, p)
			}
			s.nodeEvent(name, n.labelled)
			return "subnets " + name
		}
	}
}

// check is the specification of the whole cluster.
func (s *eipSim) check() error {
	// Fixed point: a resync writes nothing.
	before := s.writes
	for name := range s.eips {
		s.sync(name)
	}
	if s.writes != before {
		return fmt.Errorf("a resync changed %d statuses", s.writes-before)
	}
	if len(s.queue) > 0 {
		return fmt.Errorf("a resync enqueued %v", s.queue)
	}
	// Ownership, written out independently: the oldest lister.
	owner := map[netip.Addr]string{}
	for name, eip := range s.eips {
		for _, str := range eip.Spec.EgressIPs {
			a := netip.MustParseAddr(str)
			o, ok := owner[a]
			if !ok {
				owner[a] = name
				continue
			}
			oc, c := s.eips[o].CreationTimestamp.Time, eip.CreationTimestamp.Time
			if c.Before(oc) || (c.Equal(oc) && name < o) {
				owner[a] = name
			}
		}
	}
	load := map[string]assign.EgressLoad{} // recounted per family
	byNode := map[string]sets.Set[string]{}
	for name, eip := range s.eips {
		used := map[string]bool{}
		for _, it := range eip.Status.Items {
			a := netip.MustParseAddr(it.EgressIP)
			n := s.nodes[it.Node]
			if n == nil || !n.labelled || !n.ready || !n.alive || !slices.ContainsFunc(n.subnets, func(p netip.Prefix) bool { return p.Contains(a) }) {
				return fmt.Errorf("%s: %s held by %s, which may not hold it (%+v)", name, it.EgressIP, it.Node, n)
			}
			if used[it.Node] {
				return fmt.Errorf("%s: two addresses on %s", name, it.Node)
			}
			used[it.Node] = true
			if owner[a] != name {
				return fmt.Errorf("%s holds %s, which %s owns", name, a, owner[a])
			}
			l := load[it.Node]
			if a.Is4() {
				l.IPv4++
			} else {
				l.IPv6++
			}
			load[it.Node] = l
			if byNode[it.Node] == nil {
				byNode[it.Node] = sets.New[string]()
			}
			byNode[it.Node].Insert(name)
		}
		for _, str := range eip.Spec.EgressIPs {
			a := netip.MustParseAddr(str)
			if owner[a] != name && !slices.ContainsFunc(eip.Status.Conditions, func(c metav1.Condition) bool {
				return c.Status == metav1.ConditionFalse && strings.Contains(c.Message, str+" ("+string(reasons.AddressConflict))
			}) {
				return fmt.Errorf("%s lists %s, which %s owns, and does not say so: %+v", name, str, owner[a], eip.Status.Conditions)
			}
		}
	}
	for n, l := range s.state.load {
		if load[n] != l {
			return fmt.Errorf("load index %v, recount %v", s.state.load, load)
		}
	}
	for n, l := range load {
		if s.state.load[n] != l || !s.state.byNode[n].Equal(byNode[n]) {
			return fmt.Errorf("indexes: load %v byNode %v; recount %v %v", s.state.load, s.state.byNode, load, byNode)
		}
	}
	// Room is used: an address its owner does not hold has no node that
	// may hold it, holds nothing of that EgressIP and is below every limit
	// (-1: none) for the address's family and in all.
	for name, eip := range s.eips {
		for _, str := range eip.Spec.EgressIPs {
			a := netip.MustParseAddr(str)
			if owner[a] != name || slices.ContainsFunc(eip.Status.Items, func(it esv1.EgressIPStatusItem) bool { return it.EgressIP == str }) {
				continue
			}
			for nodeName, n := range s.nodes {
				if !n.labelled || !n.ready || !n.alive || !slices.ContainsFunc(n.subnets, func(p netip.Prefix) bool { return p.Contains(a) }) ||
					slices.ContainsFunc(eip.Status.Items, func(it esv1.EgressIPStatusItem) bool { return it.Node == nodeName }) {
					continue
				}
				room := true
				if c := n.capacity; c != nil {
					sameFamily, familyLimit := load[nodeName].IPv4, c.IPv4
					if a.Is6() {
						sameFamily, familyLimit = load[nodeName].IPv6, c.IPv6
					}
					all := load[nodeName].IPv4 + load[nodeName].IPv6
					room = (familyLimit < 0 || sameFamily < familyLimit) && (c.Any < 0 || all < c.Any)
				}
				if room {
					return fmt.Errorf("%s: %s not held, though %s may hold it and has room (holds %+v, capacity %+v)", name, str, nodeName, load[nodeName], n.capacity)
				}
			}
		}
	}
	held, unheld := 0, 0
	for _, eip := range s.eips {
		held += len(eip.Status.Items)
		for _, str := range eip.Spec.EgressIPs {
			if !slices.ContainsFunc(eip.Status.Items, func(it esv1.EgressIPStatusItem) bool { return it.EgressIP == str }) {
				unheld++
			}
		}
	}
	if h, u := s.state.totals(); h != held || u != unheld {
		return fmt.Errorf("totals %d held, %d unheld; recount %d, %d", h, u, held, unheld)
	}
	if len(s.state.records) != len(s.eips) {
		return fmt.Errorf("%d records for %d EgressIPs", len(s.state.records), len(s.eips))
	}

	// A new term adopts the statuses: it writes nothing and moves nothing.
	next := &eipSim{t: s.t, rng: s.rng, nodes: s.nodes, eips: map[string]*esv1.EgressIP{}, state: newEIPState()}
	var list []*esv1.EgressIP
	for name, eip := range s.eips {
		next.eips[name] = eip.DeepCopy()
		list = append(list, next.eips[name])
	}
	next.state.adopt(list, next.view(), nil)
	for name := range next.eips {
		next.sync(name)
	}
	next.drain()
	if next.writes != 0 {
		return fmt.Errorf("a new term wrote %d statuses", next.writes)
	}
	return nil
}

func TestEgressIPStateAgainstSpec(t *testing.T) {
	for seed := range uint64(200) {
		s := &eipSim{t: t, rng: rand.New(rand.NewPCG(seed, 99)), nodes: map[string]*simNode{}, eips: map[string]*esv1.EgressIP{}, state: newEIPState()}
		var history []string
		for range 60 {
			history = append(history, s.step())
			s.drain()
			if err := s.check(); err != nil {
				t.Fatalf("seed %d, after %v: %v", seed, history, err)
			}
		}
	}
}

// Under node-ip the Assigned condition says in which families the selected
// pods leave through their nodes: those of which no address is held. By
// default (drop) it says only why addresses are unheld.
func TestAssignedConditionUnheld(t *testing.T) {
	eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "billing", Generation: 3}}
	item := func(addr, node string) assign.EgressIPItem {
		it := assign.EgressIPItem{Address: addr, Addr: netip.MustParseAddr(addr), Node: node, Reason: reasons.Assigned}
		if node == "" {
			it.Reason, it.Why = reasons.NoEgressNode, "no node is labelled"
		}
		return it
	}
	leaves := func(family string) string {
		return "no " + family + " address is held: with EGRESSIP_UNHELD=node-ip the selected pods' " + family + " egress leaves through their own nodes"
	}
	for _, tc := range []struct {
		name   string
		items  []assign.EgressIPItem
		unheld dataplane.EgressIPUnheld
		says   []string
		silent []string
	}{
		{"drop: nothing about nodes", []assign.EgressIPItem{item("172.18.0.100", ""), item("2001:db8::100", "")}, dataplane.EgressIPUnheldDrop,
			nil, []string{leaves("IPv4"), leaves("IPv6")}},
		{"node-ip, nothing held: both families", []assign.EgressIPItem{item("172.18.0.100", ""), item("2001:db8::100", "")}, dataplane.EgressIPUnheldNodeIP,
			[]string{leaves("IPv4"), leaves("IPv6")}, nil},
		{"node-ip, IPv6 held: IPv4 only", []assign.EgressIPItem{item("172.18.0.100", ""), item("2001:db8::100", "n2")}, dataplane.EgressIPUnheldNodeIP,
			[]string{leaves("IPv4")}, []string{leaves("IPv6")}},
		{"node-ip, one of two IPv4 held: none", []assign.EgressIPItem{item("172.18.0.100", ""), item("172.18.0.101", "n2")}, dataplane.EgressIPUnheldNodeIP,
			nil, []string{leaves("IPv4"), leaves("IPv6")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cond := assignedCondition(eip, assign.EgressIPDecision{Items: tc.items}, tc.unheld)
			if cond.Status != metav1.ConditionFalse || cond.Reason != string(reasons.NoEgressNode) || !strings.HasPrefix(cond.Message, "not held: ") {
				t.Errorf("condition %+v, want False/NoEgressNode saying what is not held", cond)
			}
			for _, s := range tc.says {
				if !strings.Contains(cond.Message, s) {
					t.Errorf("message %q does not say %q", cond.Message, s)
				}
			}
			for _, s := range tc.silent {
				if strings.Contains(cond.Message, s) {
					t.Errorf("message %q says %q", cond.Message, s)
				}
			}
		})
	}
}
