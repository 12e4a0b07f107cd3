package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// labelStripes serialize label additions per label key (striped), so that
// two nodes can never both add one service's label: the check that no
// other node carries it and the patch that adds it happen under the key's
// stripe. More stripes mean less false sharing between unrelated keys.
const labelStripes = 64

type stripedLocks [labelStripes]sync.Mutex

// lock locks the stripes of keys in a fixed order and returns the unlock.
func (l *stripedLocks) lock(keys []string) func() {
	var idx []int
	for _, k := range keys {
		h := fnv.New32a()
		h.Write([]byte(k))
		idx = append(idx, int(h.Sum32()%labelStripes))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		l[i].Lock()
	}
	return func() {
		for _, i := range slices.Backward(idx) {
			l[i].Unlock()
		}
	}
}

// syncNode makes a node carry exactly the service labels of the services
// confirmed on it, in one merge patch. A label is added only when no other
// node carries it (as far as the cache and this term's own patches tell);
// otherwise the addition waits until the other node has lost it, so one
// service is never labelled on two nodes. Removals never wait.
func (m *egressServices) syncNode(ctx context.Context, t *term, name string) error {
	c := m.c
	s := m.state(t)
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil // onNodeDelete forgot its labels
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.observeNode(node)
	want := m.desiredLabels(s, name)
	adds := want.Difference(s.actualLabels(name)).UnsortedList()
	s.mu.Unlock()

	unlock := m.labelLocks(t).lock(adds)
	defer unlock()
	locked := sets.New(adds...)
	s.mu.Lock()
	want = m.desiredLabels(s, name)
	have := s.actualLabels(name)
	removes := have.Difference(want)
	add := sets.New[string]()
	blocked, unlocked := false, false
	for k := range want.Difference(have) {
		switch {
		case !locked.Has(k):
			unlocked = true // became desired meanwhile: next round
		case s.carriedElsewhere(k, name):
			blocked = true
		default:
			add.Insert(k)
		}
	}
	s.mu.Unlock()
	if unlocked {
		m.nodes(t).Add(name)
	}
	if blocked {
		m.nodes(t).AddAfter(name, blockedLabelRecheck)
	}
	if add.Len() == 0 && removes.Len() == 0 {
		return nil
	}

	patched, err := c.patchLabels(ctx, name, add, removes)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	removed := s.observeNode(patched)
	s.mu.Unlock()
	m.unblockHolders(t, removed)
	return nil
}

// labelsPatch is the JSON merge patch that adds labels add (value "") and
// removes labels remove, and touches no other label.
func labelsPatch(add, remove sets.Set[string]) ([]byte, error) {
	labels := map[string]any{}
	for k := range add {
		labels[k] = ""
	}
	for k := range remove {
		labels[k] = nil
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
}

// desiredLabels are the service labels node should carry: none once
// egressflow is being uninstalled.
func (m *egressServices) desiredLabels(s *state, node string) sets.Set[string] {
	c := m.c
	if c.uninstalling.Load() {
		return sets.New[string]()
	}
	return s.desiredLabels(node)
}

// patchLabels adds (value "") and removes service labels of node in one
// JSON merge patch, which touches no other label.
func (c *Controller) patchLabels(ctx context.Context, node string, add, remove sets.Set[string]) (*corev1.Node, error) {
	patch, err := labelsPatch(add, remove)
	if err != nil {
		return nil, err
	}
	n, err := c.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	c.metrics.apiWritesByResult.WithLabelValues("node_labels", writeResult(err)).Inc()
	if err != nil {
		return nil, fmt.Errorf("patch labels of node %s (add %v, remove %v): %w", node, sets.List(add), sets.List(remove), err)
	}
	return n, nil
}
