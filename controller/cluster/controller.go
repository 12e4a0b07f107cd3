package cluster

import (
	"context"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	esscheme "github.com/egressflow/egressflow/controller/generated/clientset/versioned/scheme"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/nodeview"
)

// endpointSliceServiceIndex indexes EndpointSlices by "namespace/service".
const endpointSliceServiceIndex = "service"

// eventComponent is the source of the Events the controller emits.
const eventComponent = "egressflow-controller"

// Controller assigns EgressService hosts and EgressIP addresses to nodes,
// and reports where EgressQoSes and EgressFirewalls are applied. Build it with New, run it with Run.
type Controller struct {
	opts    Options
	kube    kubernetes.Interface
	es      versioned.Interface
	metrics *metrics

	kubeInformers  informers.SharedInformerFactory
	leaseInformers informers.SharedInformerFactory
	nsInformers    informers.SharedInformerFactory // the uninstall watch
	viewInformers  informers.SharedInformerFactory // the node views (nodeview)
	deployInformer informers.SharedInformerFactory // the uninstall watch of its Deployment; nil without one
	esInformers    esinformers.SharedInformerFactory

	serviceLister corelisters.ServiceLister
	nodeLister    corelisters.NodeLister
	leaseLister   coordinationlisters.LeaseLister
	slices        cache.Indexer
	synced        []cache.InformerSynced

	events  *events.Emitter
	healthz *leaderelection.HealthzAdaptor

	// term is the current leadership term, nil while not leading. Event
	// handlers feed it; they do nothing without one.
	term  atomic.Pointer[term]
	ready atomic.Bool
	// uninstalling: egressflow's namespace or the controller's Deployment
	// is being deleted; no node is
	// to carry a service label any more (see uninstall).
	uninstalling atomic.Bool
	active       atomic.Int64 // syncs in progress, for Idle

	// judge decides which agents are dead from the Lease renewals observed
	// (heartbeat.Judge). Every replica feeds it, leading or not, so that a
	// replica that takes over knows how long each agent has been silent.
	// probes are the agents' probe addresses (probe.go).
	probes      probeAgents
	judgeMu     sync.Mutex
	judge       *heartbeat.Judge
	lastVerdict heartbeat.Verdict
	// leaseFacts are the agents' published subnets and restart marks as
	// last seen (every replica), for the assignments.
	leaseFacts candidacyFacts

	// members are the APIs' cluster-side work (member.go): the
	// EgressService hosts, the EgressIP assignment, and where EgressQoSes
	// and EgressFirewalls are applied (rollout.go).
	members []member

	// views publishes the nodes' addresses and labels for the agents
	// (nodeview), while leading.
	views *nodeview.Publisher
}

// term is one period of leadership: its queues and state live and die with it.
type term struct {
	// agents are the agents' liveness as last judged (judgeLiveness);
	// liveness re-judges them when a Lease runs out or a held death is
	// due.
	agents   agentLiveness
	liveness workqueue.TypedDelayingInterface[string]
	// podCIDRs are the Nodes' pod CIDRs, which the rollouts check rules'
	// families against.
	podCIDRs podCIDRCache
	// parts are the members' parts of the term (their queues and state),
	// by slot.
	parts []any
}

// agentLiveness is agent liveness per node, from the heartbeat Leases and
// the probes; unreachable are the nodes the probes judged dead. It is
// guarded by mu, which is taken after any other lock of the term and
// held for no call out.
type agentLiveness struct {
	mu          sync.Mutex
	alive       map[string]bool
	unreachable map[string]bool
}

// of says whether node's agent is alive, and whether the probes judged it
// unreachable.
func (a *agentLiveness) of(node string) (alive, unreachable bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.alive[node], a.unreachable[node]
}

// New builds a controller that talks to the API server of cfg.
func New(cfg *rest.Config, opts Options) (*Controller, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = eventComponent
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	es, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		opts:    opts,
		kube:    kube,
		es:      es,
		metrics: newMetrics(opts.Registerer),
		healthz: leaderelection.NewLeaderHealthzAdaptor(opts.RenewDeadline),
		judge:   heartbeat.NewJudge(opts.Liveness),
	}
	// Informers have no resync of their own: Resync enqueues everything.
	c.kubeInformers = informers.NewSharedInformerFactory(kube, 0)
	c.leaseInformers = informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{heartbeat.LeaseLabel: heartbeat.LeaseLabelValue}).String()
		}))
	c.viewInformers = informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = nodeview.Selector() }))
	c.esInformers = esinformers.NewSharedInformerFactory(es, 0)
	c.nsInformers = uninstallInformers(c)
	if _, err := c.nsInformers.Core().V1().Namespaces().Informer().AddEventHandler(c.namespaceHandler()); err != nil {
		return nil, err
	}
	if c.deployInformer = deploymentInformers(c); c.deployInformer != nil {
		if _, err := c.deployInformer.Apps().V1().Deployments().Informer().AddEventHandler(c.deploymentHandler()); err != nil {
			return nil, err
		}
	}

	svcInf := c.kubeInformers.Core().V1().Services()
	nodeInf := c.kubeInformers.Core().V1().Nodes()
	sliceInf := c.kubeInformers.Discovery().V1().EndpointSlices()
	leaseInf := c.leaseInformers.Coordination().V1().Leases()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{endpointSliceServiceIndex: sliceServiceKeys}); err != nil {
		return nil, err
	}
	c.registerMembers(svcInf.Informer(), sliceInf.Informer())
	c.serviceLister, c.nodeLister, c.leaseLister = svcInf.Lister(), nodeInf.Lister(), leaseInf.Lister()
	c.slices = sliceInf.Informer().GetIndexer()
	if c.views, err = nodeview.NewPublisher(kube, opts.Namespace, nodeInf, c.viewInformers.Core().V1().ConfigMaps(), c.uninstalling.Load); err != nil {
		return nil, err
	}
	c.synced = append(c.synced, c.views.HasSynced)

	var watches []watch
	for _, m := range c.members {
		watches = append(watches, m.watches()...)
	}
	for _, h := range append(watches, []watch{
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.onNodeAdd, UpdateFunc: c.onNodeUpdate, DeleteFunc: c.onNodeDelete}},
		{leaseInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.onLease, UpdateFunc: func(_, n any) { c.onLease(n) }, DeleteFunc: c.onLeaseDelete}},
	}...) {
		reg, err := h.informer.AddEventHandler(h.handler)
		if err != nil {
			return nil, err
		}
		c.synced = append(c.synced, reg.HasSynced)
	}

	// Events have a client of their own: their writes never wait for, nor
	// take, the budget of status writes and label patches.
	c.events, err = events.NewForConfig(cfg, eventScheme(), events.Options{Component: eventComponent, Counter: c.metrics.events})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// registerMembers registers each API's cluster-side work with the
// informers it follows.
func (c *Controller) registerMembers(services, slices cache.SharedIndexInformer) {
	api := c.esInformers.K8s().V1()
	cloudConfigs := c.esInformers.CloudNetwork().V1().CloudPrivateIPConfigs()
	register(c, func(s slot[*svcTerm]) member {
		return newEgressServices(c, api.EgressServices(), services, slices, s)
	})
	register(c, func(s slot[*eipTerm]) member { return newEgressIPs(c, api.EgressIPs(), cloudConfigs, s) })
	register(c, func(s slot[*rolloutTerm[*esv1.EgressQoS]]) member {
		return newQoSRollout(c, api.EgressQoSes().Informer(), s)
	})
	register(c, func(s slot[*rolloutTerm[*esv1.EgressFirewall]]) member {
		return newFirewallRollout(c, api.EgressFirewalls().Informer(), s)
	})
	register(c, func(s slot[*rolloutTerm[*esv1.AdminPolicyBasedExternalRoute]]) member {
		return newExternalRouteRollout(c, api.AdminPolicyBasedExternalRoutes().Informer(), s)
	})
	register(c, func(s slot[*cloudTerm]) member { return newCloudIPs(c, c.opts.CloudProvider, cloudConfigs, s) })
	register(c, func(s slot[*routerTerm]) member {
		return newRouters(c, c.esInformers.NetworkOperator().V1().EgressRouters(), s)
	})
}

// eventScheme knows the kinds Events are about: the APIs' and Nodes
// (InvalidEgressCapacity).
func eventScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(esscheme.AddToScheme(s))
	utilruntime.Must(corev1.AddToScheme(s))
	return s
}

// sliceServiceKeys indexes an EndpointSlice by its Service's key.
func sliceServiceKeys(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + name}, nil
}

// Run starts the informers, waits for their caches, and then leads (or, with
// leader election, campaigns to lead) until ctx ends. A replica that loses
// leadership campaigns again; each term starts from the caches.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	// Events are written until Run returns, and then for a short drain.
	eventsCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		c.events.Run(eventsCtx)
	}()
	defer func() { stopEvents(); <-eventsDone }()

	c.kubeInformers.Start(ctx.Done())
	c.leaseInformers.Start(ctx.Done())
	c.viewInformers.Start(ctx.Done())
	defer c.viewInformers.Shutdown()
	c.nsInformers.Start(ctx.Done())
	defer c.nsInformers.Shutdown()
	if c.deployInformer != nil {
		c.deployInformer.Start(ctx.Done())
		defer c.deployInformer.Shutdown()
	}
	c.esInformers.Start(ctx.Done())
	defer c.kubeInformers.Shutdown()
	defer c.leaseInformers.Shutdown()
	defer c.esInformers.Shutdown()
	defer c.uninstallIfBeingRemoved() // first on the way out
	if !cache.WaitForNamedCacheSync(eventComponent, ctx.Done(), c.synced...) {
		return ctx.Err()
	}
	c.ready.Store(true)
	logger.Info("Caches synced")

	if !c.opts.LeaderElection {
		c.lead(ctx)
		return nil
	}
	return c.campaign(ctx)
}

// campaign runs leader election and leads while elected. On ctx's end it
// stops the workers first and only then releases the Lease, so that no write
// of this replica can land after another one took over.
func (c *Controller) campaign(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.opts.Namespace, Name: c.opts.LeaderLeaseName},
		Client:     c.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.opts.Identity},
	}
	electorCtx, cancelElector := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElector()
	var (
		mu       sync.Mutex
		stopping bool
		leading  sync.WaitGroup
	)
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
		case <-finished:
			return
		}
		mu.Lock()
		stopping = true
		mu.Unlock()
		leading.Wait()
		cancelElector()
	}()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.opts.LeaseDuration,
		RenewDeadline:   c.opts.RenewDeadline,
		RetryPeriod:     c.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.opts.LeaderLeaseName,
		WatchDog:        c.healthz,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				leading.Add(1)
				mu.Unlock()
				defer leading.Done()
				// Workers stop when leadership is lost or ctx ends, whichever
				// is first; the Lease is released only after that.
				workCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				c.lead(workCtx)
			},
			OnStoppedLeading: func() { logger.Info("Stopped leading", "identity", c.opts.Identity) },
			OnNewLeader: func(identity string) {
				logger.Info("Leader observed", "leader", identity, "self", identity == c.opts.Identity)
			},
		},
	})
	if err != nil {
		return err
	}
	c.healthz.SetLeaderElection(elector)
	for {
		elector.Run(electorCtx)
		// The term's workers stop before this replica campaigns again, so
		// that two terms never overlap.
		leading.Wait()
		if ctx.Err() != nil {
			break
		}
		// Lost (the API server was away past the renew deadline, or this
		// process stalled): campaign again with the warm caches, whose
		// agent observations (heartbeat.Judge) carry over, rather than
		// exit and restart cold.
		logger.Info("Leadership lost; campaigning again", "identity", c.opts.Identity)
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	leading.Wait()
	return nil
}
