package cluster

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/endpoints"
)

// lead does the leader's work until ctx ends: it builds a fresh term from
// the caches, repairs what a previous run left stale, then runs the workers.
// It returns once every worker has stopped.
func (c *Controller) lead(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Leading", "identity", c.opts.Identity)
	c.metrics.leader.Set(1)
	defer c.metrics.leader.Set(0)
	defer c.metrics.stoppedLeading()

	limiter := func() workqueue.TypedRateLimiter[string] {
		// Per object only: a global token bucket would throttle the start-up
		// burst of thousands of services for nothing.
		return workqueue.NewTypedItemExponentialFailureRateLimiter[string](c.opts.RetryBaseDelay, c.opts.RetryMaxDelay)
	}
	t := &term{
		state:    newState(),
		services: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressservices", Clock: c.opts.Clock}),
		nodes:    workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes", Clock: c.opts.Clock}),
		liveness: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "agent-leases", Clock: c.opts.Clock}),
		eips:     newEIPState(),
		eipQueue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressips", Clock: c.opts.Clock}),
	}
	for _, r := range c.rollouts {
		r.newTerm(t, limiter())
		defer r.shutDown(t)
		defer r.clearStates()
	}
	defer t.services.ShutDown()
	defer t.nodes.ShutDown()
	defer t.liveness.ShutDown()
	defer t.eipQueue.ShutDown()

	// From here on, event handlers feed this term; what they add while the
	// repair runs is processed after it.
	c.term.Store(t)
	defer c.term.Store(nil)

	c.judgeLiveness(t)
	nodes, _ := c.nodeLister.List(labels.Everything())
	t.state.mu.Lock()
	for _, n := range nodes {
		t.state.observeNode(n)
	}
	t.state.mu.Unlock()

	start := c.opts.Clock.Now()
	c.repair(ctx, t)
	c.adoptEgressIPs(ctx, t)
	logger.Info("Startup repair done", "duration", c.opts.Clock.Since(start))

	c.enqueueAll(t)
	var wg sync.WaitGroup
	run := func(n int, f func(context.Context, *term) bool) {
		for range n {
			wg.Go(func() {
				defer utilruntime.HandleCrash()
				for f(ctx, t) {
				}
			})
		}
	}
	run(c.opts.ServiceWorkers, c.processService)
	run(c.opts.NodeWorkers, c.processNode)
	run(1, c.processLiveness)
	wg.Go(func() { c.runProber(ctx, t) })
	run(c.opts.EgressIPWorkers, c.processEgressIP)
	wg.Go(func() { c.views.Run(ctx, c.opts.NodeWorkers) })
	for _, r := range c.rollouts {
		run(r.workerCount(), r.process)
	}
	if c.opts.ResyncPeriod > 0 {
		wg.Go(func() {
			ticker := c.opts.Clock.NewTicker(c.opts.ResyncPeriod)
			defer ticker.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C():
					c.enqueueAll(t)
				}
			}
		})
	}
	<-ctx.Done()
	t.services.ShutDown()
	t.nodes.ShutDown()
	t.liveness.ShutDown()
	t.eipQueue.ShutDown()
	for _, r := range c.rollouts {
		r.shutDown(t)
	}
	wg.Wait()
	logger.Info("Stopped leading work", "identity", c.opts.Identity)
}

// enqueueAll enqueues every EgressService, EgressIP, EgressQoS,
// EgressFirewall and node: a resync. Syncs of objects that are right cost
// no API call.
func (c *Controller) enqueueAll(t *term) {
	ess, _ := c.esLister.List(labels.Everything())
	for _, es := range ess {
		t.services.Add(es.Namespace + "/" + es.Name)
	}
	// And what carries the agents' label, in case its EgressService went
	// while no replica led: the sync takes the label off.
	svcs, _ := c.serviceLister.List(labels.SelectorFromSet(labels.Set{endpoints.EgressServiceLabel: endpoints.EgressServiceLabelValue}))
	for _, s := range svcs {
		t.services.Add(s.Namespace + "/" + s.Name)
	}
	for _, o := range c.slices.List() {
		if s := o.(*discoveryv1.EndpointSlice); marked(s.Labels) {
			keys, _ := sliceServiceKeys(s)
			for _, k := range keys {
				t.services.Add(k)
			}
		}
	}
	nodes, _ := c.nodeLister.List(labels.Everything())
	for _, n := range nodes {
		t.nodes.Add(n.Name)
	}
	eips, _ := c.eipLister.List(labels.Everything())
	for _, eip := range eips {
		t.eipQueue.Add(eip.Name)
	}
	for _, r := range c.rollouts {
		r.enqueueAll(t)
	}
	c.views.Resync()
}

// Resync enqueues every EgressService, EgressIP, EgressQoS, EgressFirewall
// and node now, as the periodic resync does. It does nothing while this replica does not lead.
func (c *Controller) Resync() {
	if t := c.term.Load(); t != nil {
		c.enqueueAll(t)
	}
}

// Leading says whether this replica leads (its workers are running or about
// to).
func (c *Controller) Leading() bool { return c.term.Load() != nil }

// Idle says whether this replica leads with nothing queued and no sync in
// progress (delayed retries and Lease expiry checks are not counted).
func (c *Controller) Idle() bool {
	t := c.term.Load()
	if t == nil || t.services.Len() > 0 || t.nodes.Len() > 0 || t.eipQueue.Len() > 0 || c.views.Pending() > 0 || c.active.Load() > 0 {
		return false
	}
	for _, r := range c.rollouts {
		if r.queueLen(t) > 0 {
			return false
		}
	}
	return true
}

// Ready is a readiness check: the caches have synced.
func (c *Controller) Ready(*http.Request) error {
	if !c.ready.Load() {
		return errNotSynced
	}
	return nil
}

// Healthz is a liveness check: it fails when this replica leads but has not
// renewed its Lease for longer than the renew deadline plus a grace period.
func (c *Controller) Healthz(r *http.Request) error { return c.healthz.Check(r) }

// process runs one item of queue q through sync, with capped exponential
// backoff on error.
func process[T comparable](ctx context.Context, c *Controller, q workqueue.TypedRateLimitingInterface[T], name string, sync func(context.Context, T) error) bool {
	item, quit := q.Get()
	if quit {
		return false
	}
	c.active.Add(1)
	defer c.active.Add(-1)
	defer q.Done(item)
	err := sync(ctx, item)
	c.metrics.synced(name, item, err, c.opts.Clock.Now())
	if err == nil || ctx.Err() != nil {
		q.Forget(item)
		return true
	}
	klog.FromContext(ctx).Error(err, "Sync failed, will retry", "queue", name, "key", item, "retries", q.NumRequeues(item))
	q.AddRateLimited(item)
	return true
}

func (c *Controller) processService(ctx context.Context, t *term) bool {
	return process(ctx, c, t.services, queueService, func(ctx context.Context, key string) error { return c.syncService(ctx, t, key) })
}

func (c *Controller) processEgressIP(ctx context.Context, t *term) bool {
	return process(ctx, c, t.eipQueue, queueEgressIP, func(ctx context.Context, name string) error { return c.syncEgressIP(ctx, t, name) })
}

func (c *Controller) processNode(ctx context.Context, t *term) bool {
	return process(ctx, c, t.nodes, queueNode, func(ctx context.Context, name string) error { return c.syncNode(ctx, t, name) })
}

// processLiveness judges the agents again when a Lease runs out or a death
// held back by the disruption rule is due.
func (c *Controller) processLiveness(ctx context.Context, t *term) bool {
	key, quit := t.liveness.Get()
	if quit {
		return false
	}
	defer t.liveness.Done(key)
	c.judgeLiveness(t)
	return true
}

var errNotSynced = errors.New("informer caches not synced yet")

// blockedLabelRecheck is when a node whose label addition waits for another
// node to lose that label is looked at again, should no event arrive first
// (the other node's update normally re-queues it at once).
const blockedLabelRecheck = time.Second
