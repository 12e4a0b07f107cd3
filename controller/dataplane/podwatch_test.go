package dataplane

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

func TestHolderPodWatches(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	namespaces := []*corev1.Namespace{
		ns("billing", map[string]string{"team": "pay"}),
		ns("ledger", map[string]string{"team": "pay"}),
		ns("shop", map[string]string{"team": "web"}),
	}
	eip := func(name string, nsSel, podSel esv1.LabelSelector, held map[string]string) *esv1.EgressIP {
		e := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: esv1.EgressIPSpec{NamespaceSelector: nsSel, PodSelector: podSel}}
		for addr, node := range held {
			e.Spec.EgressIPs = append(e.Spec.EgressIPs, addr)
			e.Status.Items = append(e.Status.Items, esv1.EgressIPStatusItem{EgressIP: addr, Node: node})
		}
		return e
	}
	pay := esv1.LabelSelector{MatchLabels: map[string]string{"team": "pay"}}
	web := esv1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	every := esv1.LabelSelector{}
	for _, tc := range []struct {
		name string
		eips []*esv1.EgressIP
		want []PodWatch
	}{
		{"holds nothing", []*esv1.EgressIP{eip("a", pay, web, map[string]string{"10.0.0.1": "n2"})}, []PodWatch{}},
		{"holds one of two addresses", []*esv1.EgressIP{eip("a", pay, web, map[string]string{"10.0.0.1": "n2", "10.0.0.2": "n1"})},
			[]PodWatch{{"billing", "app=web"}, {"ledger", "app=web"}}},
		{"two objects, same namespaces, one selector repeated",
			[]*esv1.EgressIP{
				eip("a", pay, web, map[string]string{"10.0.0.1": "n1"}),
				eip("b", pay, every, map[string]string{"10.0.0.2": "n1"}),
				eip("c", every, web, map[string]string{"10.0.0.3": "n1"}),
			},
			[]PodWatch{{"billing", ""}, {"billing", "app=web"}, {"ledger", ""}, {"ledger", "app=web"}, {"shop", "app=web"}}},
		{"selects no namespace", []*esv1.EgressIP{eip("a", esv1.LabelSelector{MatchLabels: map[string]string{"team": "none"}}, web,
			map[string]string{"10.0.0.1": "n1"})}, []PodWatch{}},
		{"status names an address not in the spec", func() []*esv1.EgressIP {
			e := eip("a", pay, web, nil)
			e.Status.Items = []esv1.EgressIPStatusItem{{EgressIP: "10.0.0.9", Node: "n1"}}
			return []*esv1.EgressIP{e}
		}(), []PodWatch{}},
		{"selector that does not parse", []*esv1.EgressIP{eip("a", pay,
			esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}},
			map[string]string{"10.0.0.1": "n1"})}, []PodWatch{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HolderPodWatches("n1", tc.eips, namespaces)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}

	// Past the bound, one cluster-wide watch per selector.
	var many []*corev1.Namespace
	for i := range MaxHolderPodWatches {
		many = append(many, ns(fmt.Sprintf("ns-%03d", i), map[string]string{"team": "pay"}))
	}
	held := []*esv1.EgressIP{eip("a", pay, web, map[string]string{"10.0.0.1": "n1"})}
	if got := HolderPodWatches("n1", held, many); len(got) != MaxHolderPodWatches || got[0] != (PodWatch{"ns-000", "app=web"}) {
		t.Errorf("at the bound: %d watches from %v, want one per namespace", len(got), got[0])
	}
	held = append(held, eip("b", pay, every, map[string]string{"10.0.0.2": "n1"}))
	if got, want := HolderPodWatches("n1", held, many), []PodWatch{{"", ""}, {"", "app=web"}}; !slices.Equal(got, want) {
		t.Errorf("past the bound: got %v, want %v", got, want)
	}
}

// TestGatewayPodWatches: each dynamic hop's podSelector in the namespaces
// its namespaceSelector selects, once each; static hops, and a hop whose
// selector does not parse, watch nothing; past MaxHolderPodWatches, one
// cluster-wide watch per selector; merged with the holder watches, each
// watch once.
func TestGatewayPodWatches(t *testing.T) {
	namespaces := []*corev1.Namespace{
		labelledNamespace("gw-a", map[string]string{"role": "gateways"}),
		labelledNamespace("gw-b", map[string]string{"role": "gateways"}),
		labelledNamespace("shop", map[string]string{"team": "web"}),
	}
	dynamic := func(role, app string) esv1.DynamicHop {
		return esv1.DynamicHop{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"role": role}},
			PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": app}}}
	}
	bad := dynamic("gateways", "router")
	bad.PodSelector = esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}
	routes := []*esv1.AdminPolicyBasedExternalRoute{
		externalRoute("a", nil, []esv1.StaticHop{{IP: "172.18.0.50"}}, dynamic("gateways", "router")),
		externalRoute("b", nil, nil, dynamic("gateways", "router"), dynamic("none", "router"), bad),
	}
	want := []PodWatch{{Namespace: "gw-a", Selector: "app=router"}, {Namespace: "gw-b", Selector: "app=router"}}
	if got := GatewayPodWatches(routes, namespaces); !slices.Equal(got, want) {
		t.Errorf("watches %v, want %v", got, want)
	}
	merged := MergePodWatches(want, []PodWatch{{Namespace: "gw-a", Selector: "app=router"}, {Namespace: "billing", Selector: "app=pay"}})
	if wantMerged := []PodWatch{{Namespace: "billing", Selector: "app=pay"}, {Namespace: "gw-a", Selector: "app=router"}, {Namespace: "gw-b", Selector: "app=router"}}; !slices.Equal(merged, wantMerged) {
		t.Errorf("merged %v, want %v", merged, wantMerged)
	}
	var many []*corev1.Namespace
	for i := range MaxHolderPodWatches + 1 {
		many = append(many, labelledNamespace(fmt.Sprintf("gw-%d", i), map[string]string{"role": "gateways"}))
	}
	if got := GatewayPodWatches(routes, many); !slices.Equal(got, []PodWatch{{Selector: "app=router"}}) {
		t.Errorf("past %d namespaces: %v, want one cluster-wide watch", MaxHolderPodWatches, got)
	}
}
