package dataplane

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// TestEgressIPMemberUpdate checks the EgressIP member's Update of one
// object against the whole set given at once (SetEgressIPs, as the agent
// gives it): through random histories of EgressIPs over random pods and
// namespaces, a Planner fed one object at a time through UpdateObject has
// the same State, and the keys each Update returned hold every key whose
// part or problems changed.
func TestEgressIPMemberUpdate(t *testing.T) {
	names := []string{"e1", "e2", "e3"}
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 29))
		leases := map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease("02:00:00:00:00:02")}
		pods := randomPodsIn(r, "a", "b")
		namespaces := randomNamespaces(r, "a", "b")
		whole, each := NewPlanner(n1Config, tables), NewPlanner(n1Config, tables)
		for _, p := range []*Planner{whole, each} {
			p.SetLeases(leases)
			p.SetNamespaces(namespaces)
			p.SetLocalPods(pods)
			p.SetClusterPods(pods)
		}
		eips := map[string]*esv1.EgressIP{}
		// asText is key's part and problems, as text.
		asText := func(k string) string {
			part, _ := each.Part(k)
			return fmt.Sprintf("%+v %+v", part, each.Problems(k))
		}
		before := map[string]string{}
		for _, n := range names {
			k := ObjectKey(APIEgressIP, "", n)
			before[k] = asText(k)
		}
		for step := range 30 {
			name := names[r.IntN(len(names))]
			key := ObjectKey(APIEgressIP, "", name)
			eip := randomEgressIP(r, name)
			if eip == nil {
				delete(eips, name)
			} else {
				eips[name] = eip
			}
			whole.SetEgressIPs(slices.Collect(maps.Values(eips)))
			whole.TakeEgressIPChanges()
			var changed []string
			if eip == nil {
				changed = each.UpdateObject(key, nil)
			} else {
				changed = each.UpdateObject(key, eip)
			}
			if got, want := normalize(each.State()), normalize(whole.State()); got != want {
				t.Fatalf("seed %d step %d: one object at a time\n%s\nall at once\n%s", seed, step, got, want)
			}
			for _, n := range names {
				k := ObjectKey(APIEgressIP, "", n)
				now := asText(k)
				if now != before[k] && !slices.Contains(changed, k) {
					t.Fatalf("seed %d step %d: %s changed, but Update returned %v", seed, step, k, changed)
				}
				before[k] = now
			}
		}
	}
}
