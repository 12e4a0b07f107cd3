package nodeview

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
)

// Reader reads the views an informer caches as Nodes (Decode). Each view
// is decoded once per resourceVersion: a reader lists every node on every
// sync of the agent.
type Reader struct {
	views corelisters.ConfigMapNamespaceLister

	mu      sync.Mutex
	decoded map[string]decodedView // by view name
}

type decodedView struct {
	resourceVersion string
	node            *corev1.Node // nil: did not decode
}

// NewReader reads the views in views (the ConfigMaps of one namespace
// selected by Selector).
func NewReader(views corelisters.ConfigMapNamespaceLister) *Reader {
	return &Reader{views: views, decoded: map[string]decodedView{}}
}

// List returns every node that has a view. Views that do not decode are
// left out (logged once per version): the publisher rewrites them.
func (r *Reader) List() ([]*corev1.Node, error) {
	views, err := r.views.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*corev1.Node, 0, len(views))
	current := make(map[string]decodedView, len(views))
	for _, cm := range views {
		d := r.decodeLocked(cm)
		current[cm.Name] = d
		if d.node != nil {
			out = append(out, d.node)
		}
	}
	r.decoded = current
	return out, nil
}

// Get returns node's view, or false if it has none that decodes.
func (r *Reader) Get(node string) (*corev1.Node, bool) {
	name, ok := Name(node)
	if !ok {
		return nil, false
	}
	cm, err := r.views.Get(name)
	if err != nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.decodeLocked(cm)
	r.decoded[cm.Name] = d
	return d.node, d.node != nil
}

func (r *Reader) decodeLocked(cm *corev1.ConfigMap) decodedView {
	if d, ok := r.decoded[cm.Name]; ok && d.resourceVersion == cm.ResourceVersion {
		return d
	}
	n, err := Decode(cm)
	if err != nil {
		klog.ErrorS(err, "Ignoring a node view until it is published again")
	}
	return decodedView{resourceVersion: cm.ResourceVersion, node: n}
}
