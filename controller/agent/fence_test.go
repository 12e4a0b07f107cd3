package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	eslisters "github.com/egressflow/egressflow/controller/generated/listers/egressservice/v1"
	nolisters "github.com/egressflow/egressflow/controller/generated/listers/networkoperator/v1"
	"github.com/egressflow/egressflow/test/kubetest"
)

// TestCacheCaughtUpAfterAFreeze: a node ("node-a") frozen while the
// cluster moved everything it held to node-b comes back with caches that
// each still say it holds one kind of thing. Whichever kind's cache is
// stale (the EgressService's host, an EgressIP's address, an
// EgressRouter's holder), the agent must stay fenced (cacheCaughtUp
// errs, naming it), as it must for something moved to it that its cache
// does not know yet, and for an object deleted meanwhile that its cache
// still gives it. It unfences once every cache agrees with the API
// server, which it reads with the agent's own permissions; a stale view of
// what other nodes hold does not keep it fenced.
func TestCacheCaughtUpAfterAFreeze(t *testing.T) {
	api := kubetest.Start(t)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"deploy/controller/namespace.yaml", "deploy/agent/rbac.yaml", "deploy/agent/rbac-dataplane.yaml"} {
		kubetest.Apply(t, api.Config(kubetest.Admin), filepath.Join(root, m))
	}
	ctx := context.Background()
	admin := versioned.NewForConfigOrDie(api.Config(kubetest.Admin))
	if _, err := kubernetes.NewForConfigOrDie(api.Config(kubetest.Admin)).CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the API server says now: everything on node-b.
	es, err := admin.K8sV1().EgressServices("shop").Create(ctx, &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Status.Host = "node-b"
	if es, err = admin.K8sV1().EgressServices("shop").UpdateStatus(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eip, err := admin.K8sV1().EgressIPs().Create(ctx, &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip"},
		Spec:   esv1.EgressIPSpec{EgressIPs: []string{"172.18.0.50", "172.18.0.51"}},
		Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: "172.18.0.50", Node: "node-b"}, {EgressIP: "172.18.0.51", Node: "node-c"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := admin.NetworkOperatorV1().EgressRouters("shop").Create(ctx, &nov1.EgressRouter{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "r"},
		Spec: nov1.EgressRouterSpec{
			Mode:             nov1.EgressRouterModeRedirect,
			NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
			Addresses:        []nov1.EgressRouterAddress{{IP: "172.18.0.60/24"}},
			Redirect:         &nov1.RedirectConfig{FallbackIP: "203.0.113.1"},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	router.Status = nov1.EgressRouterStatus{Holder: "node-b", Conditions: []nov1.EgressRouterStatusCondition{}}
	if router, err = admin.NetworkOperatorV1().EgressRouters("shop").UpdateStatus(ctx, router, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// agentCaching is node-a's agent whose caches hold these objects.
	agentCaching := func(es *esv1.EgressService, eip *esv1.EgressIP, routers ...*nov1.EgressRouter) *Agent {
		newStore := func() cache.Indexer {
			return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		}
		services, eips, routerStore := newStore(), newStore(), newStore()
		add := func(store cache.Indexer, obj any) {
			if err := store.Add(obj); err != nil {
				t.Fatal(err)
			}
		}
		add(services, es)
		add(eips, eip)
		for _, r := range routers {
			add(routerStore, r)
		}
		return &Agent{
			cfg:            Config{Node: dataplane.NodeConfig{Name: "node-a"}, Egress: versioned.NewForConfigOrDie(api.Config(kubetest.Agent))},
			egressServices: eslisters.NewEgressServiceLister(services),
			egressIPs:      eslisters.NewEgressIPLister(eips),
			egressRouters:  nolisters.NewEgressRouterLister(routerStore),
		}
	}
	setRouterHolder := func(holder string) {
		router.Status.Holder = holder
		if router, err = admin.NetworkOperatorV1().EgressRouters("shop").UpdateStatus(ctx, router, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		// serverRouterHolder is the router's holder on the server
		// ("": node-b's, as created).
		serverRouterHolder string
		// stale edits copies of the server's objects into the cache's,
		// and returns other routers the cache holds.
		stale func(es *esv1.EgressService, eip *esv1.EgressIP, r *nov1.EgressRouter) []*nov1.EgressRouter
		want  string // what the error must name; "": none
	}{
		{name: "caught up"},
		{name: "host still here", stale: func(es *esv1.EgressService, _ *esv1.EgressIP, _ *nov1.EgressRouter) []*nov1.EgressRouter {
			es.Status.Host = "node-a"
			return nil
		}, want: "EgressService shop/web"},
		{name: "address still here", stale: func(_ *esv1.EgressService, eip *esv1.EgressIP, _ *nov1.EgressRouter) []*nov1.EgressRouter {
			eip.Status.Items[0].Node = "node-a"
			return nil
		}, want: "EgressIP eip/172.18.0.50"},
		{name: "router still here", stale: func(_ *esv1.EgressService, _ *esv1.EgressIP, r *nov1.EgressRouter) []*nov1.EgressRouter {
			r.Status.Holder = "node-a"
			return nil
		}, want: "EgressRouter shop/r"},
		{name: "router moved here, not yet known", serverRouterHolder: "node-a", stale: func(_ *esv1.EgressService, _ *esv1.EgressIP, r *nov1.EgressRouter) []*nov1.EgressRouter {
			r.Status.Holder = "node-b"
			return nil
		}, want: "EgressRouter shop/r"},
		{name: "router deleted meanwhile", stale: func(_ *esv1.EgressService, _ *esv1.EgressIP, r *nov1.EgressRouter) []*nov1.EgressRouter {
			gone := r.DeepCopy()
			gone.Name, gone.Status.Holder = "gone", "node-a"
			return []*nov1.EgressRouter{gone}
		}, want: "EgressRouter shop/gone"},
		{name: "other nodes' views stale", stale: func(es *esv1.EgressService, eip *esv1.EgressIP, r *nov1.EgressRouter) []*nov1.EgressRouter {
			es.Status.Host, eip.Status.Items[1].Node, r.Status.Holder = "node-c", "node-b", "node-c"
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.serverRouterHolder != "" {
				setRouterHolder(c.serverRouterHolder)
				defer setRouterHolder("node-b")
			}
			cachedES, cachedEIP, cachedRouter := es.DeepCopy(), eip.DeepCopy(), router.DeepCopy()
			var others []*nov1.EgressRouter
			if c.stale != nil {
				others = c.stale(cachedES, cachedEIP, cachedRouter)
			}
			err := agentCaching(cachedES, cachedEIP, append(others, cachedRouter)...).cacheCaughtUp(ctx)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("the caches agree about what node-a holds, but: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want+":")):
				t.Errorf("got %v, want an error naming %s", err, c.want)
			}
		})
	}
}
