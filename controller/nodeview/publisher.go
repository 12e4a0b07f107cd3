package nodeview

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const (
	// retryBaseDelay and retryMaxDelay bound the backoff of a view write
	// that failed: short enough that a node's view follows within seconds
	// of an API server blip, long enough not to hammer one that refuses.
	retryBaseDelay = 50 * time.Millisecond
	retryMaxDelay  = 30 * time.Second
)

// Publisher keeps one view per Node in a namespace (Desired), and none for
// nodes that are gone. Only the leading replica of the cluster component
// runs it (Run); event handlers queue the nodes whose view may be wrong:
// a Node whose addresses or labels changed, a view that was changed or
// deleted by anyone else.
type Publisher struct {
	kube      kubernetes.Interface
	namespace string
	nodes     corelisters.NodeLister
	views     corelisters.ConfigMapNamespaceLister
	// withdrawn says that no node is to have a view (egressflow is being
	// uninstalled); nil: never.
	withdrawn func() bool
	synced    []cache.InformerSynced

	// queue is the running term's queue of node names, nil while not
	// running.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
}

// NewPublisher builds a publisher of views in namespace. views must list
// the ConfigMaps of namespace selected by Selector. withdrawn, if not nil,
// is read on every sync.
func NewPublisher(kube kubernetes.Interface, namespace string, nodes coreinformers.NodeInformer, views coreinformers.ConfigMapInformer, withdrawn func() bool) (*Publisher, error) {
	p := &Publisher{kube: kube, namespace: namespace, nodes: nodes.Lister(),
		views: views.Lister().ConfigMaps(namespace), withdrawn: withdrawn}
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{nodes.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: p.enqueueNode,
			UpdateFunc: func(old, cur any) {
				if !maps.Equal(Data(old.(*corev1.Node)), Data(cur.(*corev1.Node))) {
					p.enqueueNode(cur)
				}
			},
			DeleteFunc: p.enqueueNode,
		}},
		{views.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    p.enqueueView,
			UpdateFunc: func(_, cur any) { p.enqueueView(cur) },
			DeleteFunc: p.enqueueView,
		}},
	} {
		reg, err := h.informer.AddEventHandler(h.handler)
		if err != nil {
			return nil, err
		}
		p.synced = append(p.synced, reg.HasSynced)
	}
	return p, nil
}

// HasSynced says whether the handlers have seen the informers' initial
// lists.
func (p *Publisher) HasSynced() bool {
	for _, s := range p.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run publishes until ctx ends, with workers syncs at a time: first every
// node's view and every view's node, then whatever the handlers queue.
// The informers must have synced.
func (p *Publisher) Run(ctx context.Context, workers int) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "node-views"})
	p.queue.Store(&q)
	defer p.queue.Store(nil)
	p.Resync()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			defer utilruntime.HandleCrash()
			for p.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

// Resync queues every node and every view's node, while running.
func (p *Publisher) Resync() {
	nodes, _ := p.nodes.List(labels.Everything())
	for _, n := range nodes {
		p.enqueue(n.Name)
	}
	views, _ := p.views.List(labels.Everything())
	for _, v := range views {
		p.enqueueView(v)
	}
}

// Pending is the number of nodes queued (0 while not running).
func (p *Publisher) Pending() int {
	if q := p.queue.Load(); q != nil {
		return (*q).Len()
	}
	return 0
}

func (p *Publisher) enqueue(node string) {
	if q := p.queue.Load(); q != nil {
		(*q).Add(node)
	}
}

func (p *Publisher) enqueueNode(obj any) {
	if name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		p.enqueue(name)
	}
}

func (p *Publisher) enqueueView(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		if node, ok := strings.CutSuffix(cm.Name, nameSuffix); ok && node != "" {
			p.enqueue(node)
		}
	}
}

func (p *Publisher) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	node, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(node)
	if err := p.sync(ctx, node); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Could not publish a node's view; will retry", "node", node, "retries", q.NumRequeues(node))
		q.AddRateLimited(node)
		return true
	}
	q.Forget(node)
	return true
}

// sync makes node's view what Desired says, or deletes it: node gone,
// or withdrawn.
func (p *Publisher) sync(ctx context.Context, node string) error {
	name, ok := Name(node)
	if !ok {
		return nil
	}
	var want *corev1.ConfigMap
	if n, err := p.nodes.Get(node); err == nil && (p.withdrawn == nil || !p.withdrawn()) {
		want, _ = Desired(p.namespace, n)
	} else if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	have, err := p.views.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	switch {
	case have == nil && want == nil:
		return nil
	case want == nil:
		err := p.kube.CoreV1().ConfigMaps(p.namespace).Delete(ctx, name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or replaced: its event queues node again
		}
		return err
	case have == nil:
		_, err := p.kube.CoreV1().ConfigMaps(p.namespace).Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// A ConfigMap of that name without the label (edited): the
		// cache does not hold it.
		if have, err = p.kube.CoreV1().ConfigMaps(p.namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
	case UpToDate(have, want):
		return nil
	}
	update := have.DeepCopy()
	update.Data = want.Data
	update.OwnerReferences = want.OwnerReferences
	if update.Labels == nil {
		update.Labels = map[string]string{}
	}
	update.Labels[Label] = LabelValue
	_, err = p.kube.CoreV1().ConfigMaps(p.namespace).Update(ctx, update, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // changed meanwhile: its event queues node again
	}
	return err
}

// Withdraw deletes every view in namespace: the last step of an uninstall
// that keeps the namespace.
func Withdraw(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	return kube.CoreV1().ConfigMaps(namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: Selector()})
}
