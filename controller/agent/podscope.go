package agent

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
)

// An agent watches the pods bound to its node, through a field selector,
// the pods of the EgressIPs it holds, which it SNATs wherever they run,
// and the gateway pods of the external routes' dynamic hops, through
// watches scoped by namespace and podSelector
// (dataplane.HolderPodWatches, dataplane.GatewayPodWatches): so in a large
// cluster an agent that holds nothing and serves no route receives its
// own pods' events alone.

// podScope is the agent's view of the pods: its node's, and the holder
// watches of the moment. Its watches change on the sync worker only (and
// in Run before the worker starts); list reads the informers' caches.
type podScope struct {
	cfg Config
	// handler is what every pod informer reports to.
	handler cache.ResourceEventHandler
	own     corelisters.PodLister
	// holder are the running holder watches.
	holder map[dataplane.PodWatch]*podWatch
}

// podWatch is one running holder watch.
type podWatch struct {
	lister corelisters.PodLister
	synced cache.InformerSynced
	stop   chan struct{}
}

// ownPodFactory is an informer factory of the pods bound to cfg.Node.
func ownPodFactory(cfg Config) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(listingKube{cfg.Kube}, cfg.Resync,
		informers.WithTransform(slim),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "spec.nodeName=" + cfg.Node.Name
		}))
}

// set makes want the running holder watches: it stops the others and
// starts the new ones, which report what they list to the handler. It
// reports whether a watch stopped, whose pods list no longer returns.
func (s *podScope) set(ctx context.Context, want []dataplane.PodWatch) (stopped bool) {
	for w, running := range s.holder {
		if !slices.Contains(want, w) {
			close(running.stop)
			delete(s.holder, w)
			stopped = true
			klog.V(2).InfoS("Stopped watching pods of a held EgressIP or an external route's gateways", "node", s.cfg.Node.Name, "namespace", w.Namespace, "selector", w.Selector)
		}
	}
	for _, w := range want {
		if _, ok := s.holder[w]; ok {
			continue
		}
		opts := []informers.SharedInformerOption{informers.WithTransform(slim),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = w.Selector })}
		if w.Namespace != "" {
			opts = append(opts, informers.WithNamespace(w.Namespace))
		}
		factory := informers.NewSharedInformerFactoryWithOptions(listingKube{s.cfg.Kube}, s.cfg.Resync, opts...)
		pods := factory.Core().V1().Pods()
		registration, err := pods.Informer().AddEventHandler(s.handler)
		if err != nil {
			panic(err) // only fails once the informer has stopped
		}
		running := &podWatch{lister: pods.Lister(), synced: registration.HasSynced, stop: make(chan struct{})}
		factory.Start(mergeDone(ctx.Done(), running.stop))
		s.holder[w] = running
		klog.V(2).InfoS("Watching pods of a held EgressIP or an external route's gateways", "node", s.cfg.Node.Name, "namespace", w.Namespace, "selector", w.Selector)
	}
	return stopped
}

// synced reports whether every holder watch has listed its pods.
func (s *podScope) synced() bool {
	for _, w := range s.holder {
		if !w.synced() {
			return false
		}
	}
	return true
}

// list returns the node's pods and those of the holder watches, each
// once.
func (s *podScope) list() ([]*corev1.Pod, error) {
	out, err := s.own.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	if len(s.holder) == 0 {
		return out, nil
	}
	seen := make(map[string]bool, len(out))
	for _, p := range out {
		seen[p.Namespace+"/"+p.Name] = true
	}
	for _, w := range s.holder {
		pods, err := w.lister.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, p := range pods {
			if key := p.Namespace + "/" + p.Name; !seen[key] {
				seen[key] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}
