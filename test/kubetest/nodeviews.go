package kubetest

import (
	"context"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/egressflow/egressflow/controller/nodeview"
)

// PublishNodeViews runs the cluster component's node-view publisher
// (nodeview.Publisher) with cfg's identity in SystemNamespace until the
// test ends, as the leading cluster component does: node agents read the
// Nodes through the views. One worker: nodes are published in the order
// of their events. withdrawn is the publisher's (nil: never).
func PublishNodeViews(t testing.TB, cfg *rest.Config, withdrawn func() bool) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	nodes := informers.NewSharedInformerFactory(kube, 0)
	views := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = nodeview.Selector() }))
	p, err := nodeview.NewPublisher(kube, SystemNamespace, nodes.Core().V1().Nodes(), views.Core().V1().ConfigMaps(), withdrawn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		nodes.Shutdown()
		views.Shutdown()
	})
	nodes.Start(ctx.Done())
	views.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.HasSynced) {
		t.Fatal("node-view publisher: caches did not sync")
	}
	wg.Go(func() { p.Run(ctx, 1) })
}
