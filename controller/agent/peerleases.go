package agent

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/heartbeat"
)

// An agent reads its peers' facts (bridge MAC, host addresses, peer key,
// probe address) from their peer-facts Leases, which change only when the
// facts do (heartbeat.PeerFactsLeaseName), and not from their heartbeat
// Leases, which change with every renewal: so a renewal reaches the
// cluster component alone, not every agent. An agent of an older version
// writes no peer-facts Lease; until every live agent that has a heartbeat
// Lease also has a peer-facts Lease (an upgrade has rolled through), the
// agent reads the heartbeat Leases too, and then stops watching them.

// heartbeatRetireCheck is how often the agent looks whether it still
// needs its peers' heartbeat Leases. Each look walks the Leases in its
// cache; shorter stops the watch sooner after an upgrade.
const heartbeatRetireCheck = 10 * time.Second

// namespaceFactory is an informer factory of the objects in cfg.Namespace
// that the label selector selects: the agents' Leases, the node views.
func namespaceFactory(cfg Config, selector string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(listingKube{cfg.Kube}, cfg.Resync,
		informers.WithNamespace(cfg.Namespace), informers.WithTransform(slim),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
}

// mergeDone is closed when either a or b is.
func mergeDone(a <-chan struct{}, b chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		select {
		case <-a:
		case <-b:
		}
	}()
	return out
}

// peerLeases returns, by node, the Lease each peer's facts are read from:
// its peer-facts Lease, else (while read) its heartbeat Lease.
func (a *Agent) peerLeases() (map[string]*coordinationv1.Lease, error) {
	out := map[string]*coordinationv1.Lease{}
	if a.readingHeartbeats.Load() {
		beats, err := a.heartbeatLeases.Leases(a.cfg.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, l := range beats {
			out[l.Name] = l // named after their node
		}
	}
	facts, err := a.leases.Leases(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, l := range facts {
		if node, ok := heartbeat.PeerFactsNode(l); ok {
			out[node] = l
		}
	}
	return out, nil
}

// peerLease is the Lease node's facts are read from (peerLeases), nil if
// none.
func (a *Agent) peerLease(node string) *coordinationv1.Lease {
	if name, ok := heartbeat.PeerFactsLeaseName(node); ok {
		if l, err := a.leases.Leases(a.cfg.Namespace).Get(name); err == nil {
			return l
		}
	}
	if a.readingHeartbeats.Load() {
		if l, err := a.heartbeatLeases.Leases(a.cfg.Namespace).Get(node); err == nil {
			return l
		}
	}
	return nil
}

// retireHeartbeatLeases stops the heartbeat Lease informer once every
// heartbeat Lease of an existing node has a peer-facts Lease beside it (or
// its node's name is too long to have one, which keeps the heartbeat
// Leases read). A Lease that ran out counts too: an older agent that is
// down now may come back.
func (a *Agent) retireHeartbeatLeases(ctx context.Context) {
	ticker := time.NewTicker(heartbeatRetireCheck)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if a.cachesSynced.Load() && !a.needHeartbeatLeases() {
			a.readingHeartbeats.Store(false)
			close(a.heartbeatLeasesStop)
			klog.InfoS("Every agent publishes a peer-facts Lease: no longer watching the heartbeat Leases", "node", a.cfg.Node.Name)
			a.queue.Add(syncKey)
			return
		}
	}
}

// needHeartbeatLeases says whether some agent on an existing node has no
// peer-facts Lease.
func (a *Agent) needHeartbeatLeases() bool {
	beats, err := a.heartbeatLeases.Leases(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return true
	}
	for _, l := range beats {
		if _, ok := a.nodes.Get(l.Name); !ok {
			continue
		}
		name, ok := heartbeat.PeerFactsLeaseName(l.Name)
		if !ok {
			return true
		}
		if _, err := a.leases.Leases(a.cfg.Namespace).Get(name); err != nil {
			return true
		}
	}
	return false
}
