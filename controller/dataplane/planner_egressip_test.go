package dataplane

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// TestEgressIPPlannerIncremental holds the Planner's incremental EgressIP
// part to ComputeEgressIP (through Compute, which finds the services'
// claims on its own) after each of a random history of one-object
// changes, each given the narrowest way the agent gives it: one EgressIP
// through UpdateObject (its status only, redrawn whole, or deleted), one
// pod added, relabelled, finished or deleted, one namespace relabelled,
// a holder's bridge MAC, the fence, a LoadBalancerIP-mode service
// claiming pod addresses. Every object whose part or problems differ from
// the step before must be among the keys returned.
func TestEgressIPPlannerIncremental(t *testing.T) {
	names := []string{"e1", "e2", "e3", "e4"}
	namespaces := []string{"a", "b", "c"}
	serviceKeys := []string{"a/x", "b/y"}
	macs := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", ""}
	seen := map[string]bool{}
	for seed := range uint64(150) {
		for _, base := range []NodeConfig{n1Config, n2Config} {
			for _, unheld := range []EgressIPUnheld{EgressIPUnheldDrop, EgressIPUnheldNodeIP} {
				r := rand.New(rand.NewPCG(seed, 11))
				cfg := base
				cfg.EgressIPUnheld = unheld
				p := NewPlanner(cfg, tables)
				eips := map[string]*esv1.EgressIP{}
				for _, name := range names {
					if eip := randomEgressIP(r, name); eip != nil {
						eips[name] = eip
					}
				}
				p.SetEgressIPs(slices.Collect(maps.Values(eips)))
				nsList := randomNamespaces(r, namespaces...)
				p.SetNamespaces(nsList)
				pods := randomPodsIn(r, namespaces...)
				p.SetClusterPods(pods)
				if len(pods) > 1 && r.IntN(2) == 0 {
					// Before the first plan, with every pod still to be
					// decided: a pod gone, and the namespaces relisted.
					pods = slices.Delete(slices.Clone(pods), 0, 1)
					p.SetClusterPods(pods)
					nsList = randomNamespaces(r, namespaces...)
					p.SetNamespaces(nsList)
				}
				leases := map[string]*coordinationv1.Lease{"n1": agentLease(macs[0]), "n2": agentLease(macs[1]), "n3": agentLease(macs[2])}
				p.SetLeases(leases)
				inputs := map[string]ServiceInputs{}
				p.TakeEgressIPChanges()
				before := p.egressIPState()
				for step := range 80 {
					var changed []string
					what := ""
					switch r.IntN(12) {
					case 0, 1:
						name := names[r.IntN(len(names))]
						if eips[name] == nil {
							continue
						}
						moved := eips[name].DeepCopy()
						moved.Status.Items = nil
						if redrawn := randomEgressIP(r, name); redrawn != nil {
							moved.Status.Items = redrawn.Status.Items
						}
						eips[name] = moved
						what = "an EgressIP's holders"
						changed = p.UpdateObject(ObjectKey(APIEgressIP, "", name), moved)
					case 2:
						name := names[r.IntN(len(names))]
						eip := randomEgressIP(r, name)
						if eip == nil {
							delete(eips, name)
							what = "an EgressIP deleted"
							changed = p.UpdateObject(ObjectKey(APIEgressIP, "", name), nil)
						} else {
							eips[name] = eip
							what = "an EgressIP redrawn"
							changed = p.UpdateObject(ObjectKey(APIEgressIP, "", name), eip)
						}
					case 3, 4, 5:
						pods = slices.Clone(pods)
						switch i := r.IntN(len(pods) + 1); {
						case i == len(pods):
							added := randomPodsIn(r, namespaces...)
							if len(added) == 0 {
								continue
							}
							added[0].Name = fmt.Sprintf("new%d", step)
							pods = append(pods, added[0])
							what = "a pod added"
						case r.IntN(4) == 0:
							pods = slices.Delete(pods, i, i+1)
							what = "a pod deleted"
						case r.IntN(3) == 0:
							finished := pods[i].DeepCopy()
							finished.Status.Phase = corev1.PodSucceeded
							pods[i] = finished
							what = "a pod finished"
						default:
							relabelled := pods[i].DeepCopy()
							relabelled.Labels = map[string]string{"app": []string{"a", "b", "c"}[r.IntN(3)]}
							pods[i] = relabelled
							what = "a pod relabelled"
						}
						p.SetClusterPods(pods)
					case 6:
						nsList = slices.Clone(nsList)
						i := r.IntN(len(namespaces))
						nsList = slices.DeleteFunc(nsList, func(ns *corev1.Namespace) bool { return ns.Name == namespaces[i] })
						if r.IntN(5) > 0 {
							ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaces[i]}}
							if team := []string{"x", "y", ""}[r.IntN(3)]; team != "" {
								ns.Labels = map[string]string{"team": team}
							}
							nsList = append(nsList, ns)
						}
						what = "a namespace relabelled"
						p.SetNamespaces(nsList)
					case 7:
						name := fmt.Sprintf("n%d", r.IntN(3)+1)
						leases = maps.Clone(leases)
						leases[name] = agentLease(macs[r.IntN(len(macs))])
						what = "a holder's bridge MAC"
						changed = p.SetLeases(leases)
					case 8:
						cfg.Fenced = !cfg.Fenced
						what = "the fence"
						changed = p.SetFenced(cfg.Fenced)
					case 9:
						k := serviceKeys[r.IntN(len(serviceKeys))]
						inputs[k] = randomInputs(r, k)
						what = "a service's claims"
						changed = p.Update(k, inputs[k])
					default:
						for _, name := range names {
							if eip := randomEgressIP(r, name); eip != nil {
								eips[name] = eip
							} else {
								delete(eips, name)
							}
						}
						what = "every EgressIP"
						p.SetEgressIPs(slices.Collect(maps.Values(eips)))
					}
					changed = append(changed, p.TakeEgressIPChanges()...)
					cluster := clusterOf(inputs, nil, leases)
					cluster.Pods, cluster.Namespaces = pods, nsList
					for _, name := range slices.Sorted(maps.Keys(eips)) {
						cluster.EgressIPs = append(cluster.EgressIPs, eips[name])
					}
					got, want := p.egressIPState(), Compute(cfg, cluster, tables).EgressIP
					if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
						t.Fatalf("seed %d node %s (unheld: %s) step %d (%s):\nplanner %s\nspec    %s", seed, cfg.Name, unheld, step, what, g, w)
					}
					for _, name := range names {
						k := ObjectKey(APIEgressIP, "", name)
						if !slices.Contains(changed, k) && fmt.Sprint(eipShare(before, k)) != fmt.Sprint(eipShare(got, k)) {
							t.Fatalf("seed %d node %s step %d (%s): %s changed but was not returned (returned %v)", seed, cfg.Name, step, what, k, changed)
						}
					}
					if len(got.Parts) > 0 {
						seen[what] = true
					}
					before = got
				}
			}
		}
	}
	for _, what := range []string{"an EgressIP's holders", "an EgressIP deleted", "an EgressIP redrawn", "a pod added", "a pod deleted",
		"a pod finished", "a pod relabelled", "a namespace relabelled", "a holder's bridge MAC", "the fence", "a service's claims", "every EgressIP"} {
		if !seen[what] {
			t.Errorf("no history reached %q with a part on the node", what)
		}
	}
}

// eipShare is key's part and problems in s.
func eipShare(s EgressIPs, key string) []any {
	var out []any
	for _, part := range s.Parts {
		if part.Key == key {
			out = append(out, part)
		}
	}
	for _, p := range s.Problems {
		if p.Key == key {
			out = append(out, p)
		}
	}
	return out
}

// TestEgressIPPlannerTouchesWhatChanged: in a cluster of 200 EgressIPs,
// each selecting the pods of its own namespace (20 each, on this node and
// others), each input decides again only the pods it can move and
// rebuilds only the objects it can change, and the parts stay those of
// the specification.
func TestEgressIPPlannerTouchesWhatChanged(t *testing.T) {
	const objects, podsEach = 200, 20
	var eips []*esv1.EgressIP
	var nsList []*corev1.Namespace
	var pods []*corev1.Pod
	for i := range objects {
		ns := fmt.Sprintf("ns%03d", i)
		nsList = append(nsList, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"tenant": ns}}})
		eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%03d", i)},
			Spec:   esv1.EgressIPSpec{EgressIPs: []string{fmt.Sprintf("192.0.2.%d", i)}},
			Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: fmt.Sprintf("192.0.2.%d", i), Node: []string{"n1", "n2"}[i%2]}}}}
		eip.Spec.NamespaceSelector.MatchLabels = map[string]string{"tenant": ns}
		eip.Spec.PodSelector.MatchLabels = map[string]string{"app": "web"}
		eips = append(eips, eip)
		for j := range podsEach {
			pod := pod(ns, []string{"n1", "n2", "n3"}[j%3], map[string]string{"app": "web"}, fmt.Sprintf("10.244.%d.%d", i, j+1))
			pod.Name = fmt.Sprintf("p%02d", j)
			pods = append(pods, pod)
		}
	}
	leases := map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease("02:00:00:00:00:02")}
	p := NewPlanner(n1Config, tables)
	p.SetLeases(leases)
	p.SetEgressIPs(eips)
	p.SetNamespaces(nsList)
	p.SetClusterPods(pods)
	p.TakeEgressIPChanges()
	// change makes one change and checks what it cost and changed.
	change := func(what string, decided, rebuilt int, wantChanged []string, do func() []string) {
		t.Helper()
		p.egressIP.work = struct{ decided, rebuilt int }{}
		changed := do()
		changed = append(changed, p.TakeEgressIPChanges()...)
		if w := p.egressIP.work; w.decided != decided || w.rebuilt != rebuilt {
			t.Errorf("%s: decided %d pods and rebuilt %d objects, want %d and %d", what, w.decided, w.rebuilt, decided, rebuilt)
		}
		slices.Sort(changed)
		if changed = slices.Compact(changed); !slices.Equal(changed, wantChanged) {
			t.Errorf("%s: changed %v, want %v", what, changed, wantChanged)
		}
		cluster := Cluster{EgressIPs: eips, Namespaces: nsList, Pods: pods, Leases: leases}
		if got, want := fmt.Sprintf("%+v", p.egressIPState()), fmt.Sprintf("%+v", ComputeEgressIP(n1Config, cluster, p.lbClaimed)); got != want {
			t.Fatalf("%s: the planner's parts are not the specification's:\n%s\n%s", what, got, want)
		}
	}
	keys := func(objects ...int) []string {
		var out []string
		for _, i := range objects {
			out = append(out, ObjectKey(APIEgressIP, "", eips[i].Name))
		}
		return out
	}

	change("a pod relabelled out", 1, 1, keys(7), func() []string {
		pods = slices.Clone(pods)
		out := pods[7*podsEach].DeepCopy()
		out.Labels = map[string]string{"app": "db"}
		pods[7*podsEach] = out
		p.SetClusterPods(pods)
		return nil
	})
	change("a pod's new version, decided as before", 1, 0, nil, func() []string {
		pods = slices.Clone(pods)
		pods[8*podsEach+1] = pods[8*podsEach+1].DeepCopy()
		p.SetClusterPods(pods)
		return nil
	})
	change("a holder moved here", 0, 1, keys(9), func() []string {
		eips = slices.Clone(eips)
		moved := eips[9].DeepCopy()
		moved.Status.Items[0].Node = "n1"
		eips[9] = moved
		return p.UpdateObject(keys(9)[0], moved)
	})
	// Namespace 11 relabelled so that object 12 selects it instead of
	// object 11: its pods, the objects that select it before and after.
	change("a namespace relabelled", podsEach, 2, keys(11, 12), func() []string {
		nsList = slices.Clone(nsList)
		relabelled := nsList[11].DeepCopy()
		relabelled.Labels = map[string]string{"tenant": "ns012"}
		nsList[11] = relabelled
		p.SetNamespaces(nsList)
		return nil
	})
	// n2's bridge MAC changed: the objects held there are rebuilt, and
	// those with local pods steered there (all but object 11, which
	// selects nothing now) change.
	var steered []int
	for i := 1; i < objects; i += 2 {
		if i != 9 && i != 11 {
			steered = append(steered, i)
		}
	}
	change("a holder's bridge MAC", 0, objects/2-1, keys(steered...), func() []string {
		leases = maps.Clone(leases)
		leases["n2"] = agentLease("02:00:00:00:00:22")
		return p.SetLeases(leases)
	})
}
