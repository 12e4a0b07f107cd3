package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
)

// cacheCaughtUp reads from the API server every object that gives a node
// something to hold (an EgressService's host, an EgressIP's addresses, an
// EgressRouter's holder) and returns an error unless the cache agrees with
// that read about every assignment either gives to this node. A node whose
// Lease ran out must not take up again, and announce, what the cluster
// moved meanwhile: each informer's watch resumes on its own after a
// freeze, so one kind's cache may be current while another's is not.
func (a *Agent) cacheCaughtUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	node := a.cfg.Node.Name

	services, err := a.cfg.Egress.K8sV1().EgressServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	cachedServices, err := a.egressServices.List(labels.Everything())
	if err != nil {
		return err
	}
	if err := holderMismatch("EgressService", node, serviceHosts(ptrs(services.Items)), serviceHosts(cachedServices)); err != nil {
		return err
	}

	eips, err := a.cfg.Egress.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	cachedEIPs, err := a.egressIPs.List(labels.Everything())
	if err != nil {
		return err
	}
	if err := holderMismatch("EgressIP", node, addressHolders(ptrs(eips.Items)), addressHolders(cachedEIPs)); err != nil {
		return err
	}

	routers, err := a.cfg.Egress.NetworkOperatorV1().EgressRouters("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	cachedRouters, err := a.egressRouters.List(labels.Everything())
	if err != nil {
		return err
	}
	return holderMismatch("EgressRouter", node, routerHolders(ptrs(routers.Items)), routerHolders(cachedRouters))
}

// holderMismatch returns an error naming the first assignment (in key
// order) that a fresh read and the cache give different holders, among
// those either gives to node; both map an assignment to its holder ("" or
// absent: none).
func holderMismatch(kind, node string, fresh, cached map[string]string) error {
	keys := slices.Sorted(maps.Keys(fresh))
	for k := range cached {
		if _, ok := fresh[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		now, seen := fresh[k], cached[k]
		if (now == node || seen == node) && now != seen {
			return fmt.Errorf("%s %s: cached holder %q, current %q", kind, k, seen, now)
		}
	}
	return nil
}

// serviceHosts are the EgressServices' hosts, by namespace/name.
func serviceHosts(services []*esv1.EgressService) map[string]string {
	out := make(map[string]string, len(services))
	for _, es := range services {
		out[es.Namespace+"/"+es.Name] = es.Status.Host
	}
	return out
}

// addressHolders are the EgressIPs' addresses' holders, by name/address.
func addressHolders(eips []*esv1.EgressIP) map[string]string {
	out := map[string]string{}
	for _, eip := range eips {
		for _, it := range eip.Status.Items {
			out[eip.Name+"/"+it.EgressIP] = it.Node
		}
	}
	return out
}

// routerHolders are the EgressRouters' holders, by namespace/name.
func routerHolders(routers []*nov1.EgressRouter) map[string]string {
	out := make(map[string]string, len(routers))
	for _, r := range routers {
		out[r.Namespace+"/"+r.Name] = r.Status.Holder
	}
	return out
}

// ptrs points at each item of a list.
func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
