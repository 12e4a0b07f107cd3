// Package agent is the node agent's control loop: it watches EgressServices,
// Services, EndpointSlices, Nodes and the agents' heartbeat Leases, computes
// this node's desired dataplane (controller/dataplane), and converges br-ex,
// the policy-routing rules and conntrack to it. It owns the apply step and
// nothing else: what to install is decided by pure functions elsewhere.
//
// One level-triggered sync at a time: every event enqueues the same key, so
// bursts collapse into one sync of the whole node, sent as one atomic
// OpenFlow bundle that moves only what differs from what is installed. The
// first sync waits until every informer has synced, so a partial view of
// the cluster is never programmed. After the OpenFlow connection comes back
// (OVS restarted, or the agent did), the installed flows are dumped again
// and the difference replayed.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	eslisters "github.com/egressflow/egressflow/controller/generated/listers/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/iprule"
	"github.com/egressflow/egressflow/openflow"
)

// Switch is what the agent needs of its bridge's OpenFlow connection.
type Switch interface {
	// DumpFlows returns every flow whose cookie matches cookie under mask.
	DumpFlows(ctx context.Context, cookie, mask uint64) ([]*openflow.Flow, error)
	// Bundle applies the flow mods as one atomic, ordered transaction.
	Bundle(ctx context.Context, mods []*openflow.FlowMod) error
	// PortNumber returns the OpenFlow port number of a port by name.
	PortNumber(ctx context.Context, name string) (uint32, error)
	// FlushConntrack removes the connections the filter selects.
	FlushConntrack(ctx context.Context, filter *openflow.CTFlush) error
	// Connected reports whether the connection is up now.
	Connected() bool
	// Generation counts the connections made so far: it changes with every
	// reconnection, after which the bridge may have lost its flows.
	Generation() uint64
}

// RuleSyncer converges the policy-routing rules (iprule.Manager).
type RuleSyncer interface {
	Sync(desired []iprule.Rule) (added, removed int, err error)
}

// Retry backoff after a failed sync: the first retry comes quickly (a
// transient bundle error usually clears at once), later ones back off so a
// persistent failure (OVS down) costs little; the cap keeps recovery within
// seconds of the cause going away.
const (
	retryBaseDelay = 50 * time.Millisecond
	retryMaxDelay  = 5 * time.Second
)

// syncKey is the only key of the queue: a sync always covers the whole node.
const syncKey = "node"

// Config wires an Agent.
type Config struct {
	Node       dataplane.NodeConfig
	UplinkPort string // name of the uplink port on the bridge
	// Namespace holds the agents' heartbeat Leases.
	Namespace string
	Kube      kubernetes.Interface
	Egress    versioned.Interface
	Switch    Switch
	Rules     RuleSyncer
	Tables    dataplane.TableResolver
	Recorder  record.EventRecorder
	Metrics   *Metrics
	// Resync is the informers' resync period (0: none). A resync only
	// re-runs the level-triggered sync; nothing is written unless it differs.
	Resync time.Duration
}

// Agent runs the node's sync loop.
type Agent struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]

	egressServices eslisters.EgressServiceLister
	kubeFactory    informers.SharedInformerFactory
	leaseFactory   informers.SharedInformerFactory
	esFactory      esinformers.SharedInformerFactory
	synced         []cache.InformerSynced

	// Owned by the single worker.
	installed    map[string]*openflow.FlowMod // by FlowID; nil: unknown, dump first
	uplink       uint32
	lastState    dataplane.State
	lastProblems map[dataplane.Problem]bool

	mu          sync.Mutex
	lastSyncErr error
	everSynced  bool
	// syncedGeneration is the connection generation the last successful
	// sync started on: the flows are known to be on the bridge only while
	// the connection is still that one.
	syncedGeneration uint64
}

// New builds an Agent; Run starts it.
func New(cfg Config) *Agent {
	a := &Agent{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressflow-agent"}),
		kubeFactory: informers.NewSharedInformerFactory(cfg.Kube, cfg.Resync),
		leaseFactory: informers.NewSharedInformerFactoryWithOptions(cfg.Kube, cfg.Resync,
			informers.WithNamespace(cfg.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = heartbeat.LeaseLabel + "=" + heartbeat.LeaseLabelValue
			})),
		esFactory:    esinformers.NewSharedInformerFactory(cfg.Egress, cfg.Resync),
		lastProblems: map[dataplane.Problem]bool{},
	}
	// enqueue syncs on every add and delete, and on updates for which
	// relevant says something the dataplane reads changed (nil: any update).
	enqueue := func(relevant func(old, new any) bool) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { a.queue.Add(syncKey) },
			UpdateFunc: func(old, new any) {
				if relevant == nil || relevant(old, new) {
					a.queue.Add(syncKey)
				}
			},
			DeleteFunc: func(any) { a.queue.Add(syncKey) },
		}
	}
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		relevant func(old, new any) bool
	}{
		{a.esFactory.K8s().V1().EgressServices().Informer(), nil},
		{a.kubeFactory.Core().V1().Services().Informer(), nil},
		{a.kubeFactory.Discovery().V1().EndpointSlices().Informer(), nil},
		// Kubelets update Node status every few seconds and agents renew
		// their Leases every second; the dataplane reads only the nodes'
		// addresses and the agents' published facts.
		{a.kubeFactory.Core().V1().Nodes().Informer(), nodeAddressesChanged},
		{a.leaseFactory.Coordination().V1().Leases().Informer(), leaseFactsChanged},
	} {
		_, _ = h.informer.AddEventHandler(enqueue(h.relevant))
		a.synced = append(a.synced, h.informer.HasSynced)
	}
	a.egressServices = a.esFactory.K8s().V1().EgressServices().Lister()
	if cfg.Metrics != nil && cfg.Switch != nil {
		connected := cfg.Switch.Connected
		cfg.Metrics.isConnected.Store(&connected)
	}
	return a
}

// Run starts the informers, waits for them, and syncs until ctx ends.
// Reconnected, if not nil, signals that the OpenFlow connection was
// re-established: the bridge's flows are read again and replayed.
func (a *Agent) Run(ctx context.Context, reconnected <-chan struct{}) error {
	defer utilruntime.HandleCrash()
	defer a.queue.ShutDown()
	a.kubeFactory.Start(ctx.Done())
	a.leaseFactory.Start(ctx.Done())
	a.esFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return errors.New("informer caches did not sync")
	}
	klog.InfoS("Caches synced; starting the node sync", "node", a.cfg.Node.Name)
	a.queue.Add(syncKey)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-reconnected:
				if !ok {
					return
				}
				a.queue.Add(reconnectKey)
			}
		}
	}()
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for a.processNext(ctx) {
	}
	return nil
}

// reconnectKey asks the worker to forget what it believes is installed.
const reconnectKey = "reconnected"

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if key == reconnectKey {
		a.installed = nil
		a.queue.Forget(key)
		a.queue.Add(syncKey)
		return true
	}
	generation := a.cfg.Switch.Generation()
	err := a.sync(ctx)
	a.mu.Lock()
	a.lastSyncErr = err
	if err == nil {
		a.everSynced = true
		a.syncedGeneration = generation
	}
	a.mu.Unlock()
	if err != nil {
		klog.ErrorS(err, "Node sync failed; retrying", "node", a.cfg.Node.Name, "retries", a.queue.NumRequeues(key))
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// Healthy reports whether this node's dataplane can be trusted: OpenFlow is
// connected, and the last sync succeeded on the current connection (after a
// reconnection the flows are not trusted until they were checked and
// replayed). The heartbeat renews only while it is, so a broken dataplane
// makes the cluster component fail over.
func (a *Agent) Healthy(context.Context) error {
	if !a.cfg.Switch.Connected() {
		return errors.New("OpenFlow connection to the bridge is down")
	}
	generation := a.cfg.Switch.Generation()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.everSynced:
		return errors.New("no successful sync yet")
	case a.lastSyncErr != nil:
		return fmt.Errorf("last sync failed: %w", a.lastSyncErr)
	case a.syncedGeneration != generation:
		return errors.New("reconnected to the bridge; flows not replayed yet")
	}
	return nil
}

// SyncState is the heartbeat's view of Healthy.
func (a *Agent) SyncState() heartbeat.SyncState {
	generation := a.cfg.Switch.Generation()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.lastSyncErr != nil:
		return heartbeat.SyncStateFailed
	case !a.everSynced || a.syncedGeneration != generation:
		return heartbeat.SyncStateSyncing
	}
	return heartbeat.SyncStateSynced
}

// cluster reads the API state the desired dataplane depends on.
func (a *Agent) cluster() (dataplane.Cluster, error) {
	c := dataplane.Cluster{
		Services:       map[string]*corev1.Service{},
		EndpointSlices: map[string][]*discoveryv1.EndpointSlice{},
		Leases:         map[string]*coordinationv1.Lease{},
	}
	var err error
	if c.EgressServices, err = a.egressServices.List(labels.Everything()); err != nil {
		return c, err
	}
	services := a.kubeFactory.Core().V1().Services().Lister()
	slices := a.kubeFactory.Discovery().V1().EndpointSlices().Lister()
	for _, es := range c.EgressServices {
		key := es.Namespace + "/" + es.Name
		if svc, err := services.Services(es.Namespace).Get(es.Name); err == nil {
			c.Services[key] = svc
		}
		selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: es.Name})
		if c.EndpointSlices[key], err = slices.EndpointSlices(es.Namespace).List(selector); err != nil {
			return c, err
		}
	}
	if c.Nodes, err = a.kubeFactory.Core().V1().Nodes().Lister().List(labels.Everything()); err != nil {
		return c, err
	}
	leases, err := a.leaseFactory.Coordination().V1().Leases().Lister().Leases(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return c, err
	}
	for _, l := range leases {
		c.Leases[l.Name] = l
	}
	return c, nil
}

func nodeAddressesChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := new.(*corev1.Node)
	return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses)
}

func leaseFactsChanged(old, new any) bool {
	o, ok1 := old.(*coordinationv1.Lease)
	n, ok2 := new.(*coordinationv1.Lease)
	return !ok1 || !ok2 || !equality.Semantic.DeepEqual(heartbeat.ReadFacts(o), heartbeat.ReadFacts(n))
}
