package cluster

import (
	"cmp"
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/reasons"
)

// repair runs when a term starts, before any worker, and fixes what a
// previous run (or a previous leader) left behind, in this order:
//
//  1. Every status.host that is still valid is adopted as it is: the load of
//     each node counts it, and no later decision moves it.
//  2. Service labels that no adopted assignment explains are removed from
//     every node (one patch per node). Labels of adopted assignments stay.
//  3. Every status.host that is not valid (deleted or non-candidate node,
//     ineligible service, ALL outside Network mode, a node in Network mode)
//     is synced at once: replaced by a new host or cleared.
//
// Then the workers start and converge the rest (new services, missing
// labels). A failure here is logged and left to the workers, which retry.
func (m *egressServices) repair(ctx context.Context, t *term) {
	c := m.c
	logger := klog.FromContext(ctx)
	s := m.state(t)
	ess, _ := m.lister.List(labels.Everything())
	slices.SortFunc(ess, func(a, b *esv1.EgressService) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})

	var stale []string
	adopted := 0
	for _, es := range ess {
		key, host := es.Namespace+"/"+es.Name, es.Status.Host
		if host == "" {
			continue
		}
		in, err := m.input(es)
		if err != nil {
			stale = append(stale, key)
			continue
		}
		el := assign.Evaluate(in)
		s.mu.Lock()
		n := m.nodesView(t)[host]
		switch {
		case host == esv1.HostAll && el.Reason == reasons.AllNodes:
		case host != esv1.HostAll && el.Reason == "" && n != nil && el.Check(n) == assign.NodeOK:
			s.reserve(key, host)
			s.confirm(key, host)
			adopted++
		default:
			stale = append(stale, key)
		}
		s.mu.Unlock()
	}

	nodes, _ := c.nodeLister.List(labels.Everything())
	strays := 0
	for _, n := range nodes {
		s.mu.Lock()
		remove := s.actualLabels(n.Name).Difference(s.desiredLabels(n.Name))
		s.mu.Unlock()
		if remove.Len() == 0 {
			continue
		}
		patched, err := c.patchLabels(ctx, n.Name, nil, remove)
		if err != nil {
			logger.Error(err, "Startup repair: stale labels not removed; the node worker retries")
			continue
		}
		strays += remove.Len()
		s.mu.Lock()
		s.observeNode(patched)
		s.mu.Unlock()
	}

	for _, key := range stale {
		if ctx.Err() != nil {
			return
		}
		if err := m.syncService(ctx, t, key); err != nil {
			logger.Error(err, "Startup repair: stale host not fixed; the service worker retries", "egressService", key)
		}
	}
	logger.Info("Startup repair", "adopted", adopted, "staleLabelsRemoved", strays, "staleHostsFixed", len(stale))
}
