package dataplane

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// PodWatch is a set of pods an agent lists and watches beside its own
// node's: those of Namespace ("": every namespace) that the label
// selector Selector ("": every pod) selects.
type PodWatch struct {
	Namespace string
	Selector  string
}

// MaxHolderPodWatches bounds the watches HolderPodWatches asks for. Past
// it, the holder watches each distinct podSelector across the cluster
// and ignores the pods of namespaces it does not serve. A watch per
// namespace brings the holder only the pods it serves but holds one
// stream each; the API server serves at most a few hundred streams on
// one connection (HTTP/2's concurrent-stream limit), and each stream
// costs it a watcher. 64 namespaces per holder covers an EgressIP per
// team or per application; an EgressIP over every namespace costs the
// holder every pod its podSelector selects.
const MaxHolderPodWatches = 64

// HolderPodWatches are what node's agent must watch, beyond its own
// node's pods, to SNAT the pods of the EgressIPs it holds (whose status
// names it for one of their addresses): for each, its podSelector in
// every namespace its namespaceSelector selects. They are sorted and
// without repeats; more than MaxHolderPodWatches collapse to one
// cluster-wide watch per distinct podSelector. EgressIPs whose selectors
// do not parse select nothing.
func HolderPodWatches(node string, eips []*esv1.EgressIP, namespaces []*corev1.Namespace) []PodWatch {
	var w podWatchSet
	for _, eip := range eips {
		if !holds(node, eip) {
			continue
		}
		if nsSel, podSel, err := egressIPSelectors(eip); err == nil {
			w.add(nsSel, podSel, namespaces)
		}
	}
	return w.list()
}

// GatewayPodWatches are what an agent must watch to know the gateway pods
// of the external routes' dynamic hops, wherever they run: for each hop,
// its podSelector in every namespace its namespaceSelector selects;
// sorted, without repeats, and collapsed past MaxHolderPodWatches as
// HolderPodWatches' are. Hops whose selectors do not parse select
// nothing.
func GatewayPodWatches(routes []*esv1.AdminPolicyBasedExternalRoute, namespaces []*corev1.Namespace) []PodWatch {
	var w podWatchSet
	for _, route := range routes {
		for _, h := range route.Spec.NextHops.DynamicHops {
			nsSel, err := metav1.LabelSelectorAsSelector(h.NamespaceSelector.AsMeta())
			if err != nil {
				continue
			}
			if podSel, err := metav1.LabelSelectorAsSelector(h.PodSelector.AsMeta()); err == nil {
				w.add(nsSel, podSel, namespaces)
			}
		}
	}
	return w.list()
}

// podWatchSet gathers the watches of pod selectors in selected namespaces.
type podWatchSet struct {
	want      map[PodWatch]bool
	selectors map[string]bool
}

// add adds podSel's watch in each namespace nsSel selects.
func (w *podWatchSet) add(nsSel, podSel labels.Selector, namespaces []*corev1.Namespace) {
	if w.want == nil {
		w.want, w.selectors = map[PodWatch]bool{}, map[string]bool{}
	}
	w.selectors[podSel.String()] = true
	for _, ns := range namespaces {
		if nsSel.Matches(labels.Set(ns.Labels)) {
			w.want[PodWatch{Namespace: ns.Name, Selector: podSel.String()}] = true
		}
	}
}

// list returns the watches sorted, or, past MaxHolderPodWatches, one
// cluster-wide watch per selector.
func (w *podWatchSet) list() []PodWatch {
	want := w.want
	if len(want) > MaxHolderPodWatches {
		want = map[PodWatch]bool{}
		for s := range w.selectors {
			want[PodWatch{Selector: s}] = true
		}
	}
	out := make([]PodWatch, 0, len(want))
	for pw := range want {
		out = append(out, pw)
	}
	slices.SortFunc(out, comparePodWatches)
	return out
}

func comparePodWatches(a, b PodWatch) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Selector, b.Selector))
}

// MergePodWatches returns the watches of both lists, sorted, without
// repeats.
func MergePodWatches(a, b []PodWatch) []PodWatch {
	out := slices.SortedFunc(slices.Values(slices.Concat(a, b)), comparePodWatches)
	return slices.Compact(out)
}

// holds reports whether node holds one of eip's addresses.
func holds(node string, eip *esv1.EgressIP) bool {
	for _, family := range egressIPHolders(eip) {
		for _, h := range family {
			if h.node == node {
				return true
			}
		}
	}
	return false
}
