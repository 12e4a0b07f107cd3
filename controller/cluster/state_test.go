package cluster

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/egressflow/egressflow/controller/assign"
)

// TestViewLoadsFollowReservations: whatever the order of reservations,
// each node's load in the view (what Decide weighs) is the number of
// services reserved on it, counted again from the records.
func TestViewLoadsFollowReservations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := newState()
	nodes := []string{"", "node-a", "node-b", "node-c", "node-d"}
	s.view = map[string]*assign.Node{}
	for _, n := range nodes[1:4] { // node-d joins later
		s.view[n] = &assign.Node{Name: n}
	}
	for step := range 3000 {
		key := fmt.Sprintf("ns/svc-%d", rng.IntN(40))
		switch rng.IntN(10) {
		case 0:
			s.release(key)
		case 1:
			if step > 1000 && s.view["node-d"] == nil {
				s.view["node-d"] = &assign.Node{Name: "node-d", Load: s.load("node-d")}
			}
		default:
			s.reserve(key, nodes[rng.IntN(len(nodes))])
		}
		counted := map[string]int{}
		for _, r := range s.services {
			counted[r.host]++
		}
		for name, n := range s.view {
			if n.Load != counted[name] {
				t.Fatalf("step %d: %s has load %d in the view, %d services reserved on it", step, name, n.Load, counted[name])
			}
		}
	}
}
