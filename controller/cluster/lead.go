package cluster

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
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
		agents:   agentLiveness{alive: map[string]bool{}},
		liveness: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "agent-leases", Clock: c.opts.Clock}),
	}
	for _, m := range c.members {
		t.parts = append(t.parts, m.newTerm(limiter))
		defer m.shutDown(t)
		defer m.clearStates()
	}
	defer t.liveness.ShutDown()

	// From here on, event handlers feed this term; what they add while the
	// repair runs is processed after it.
	c.term.Store(t)
	defer c.term.Store(nil)

	c.judgeLiveness(t)
	start := c.opts.Clock.Now()
	for _, m := range c.members {
		m.prepare(ctx, t)
	}
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
	run(1, c.processLiveness)
	wg.Go(func() { c.runProber(ctx, t) })
	wg.Go(func() { c.views.Run(ctx, c.opts.NodeWorkers) })
	for _, m := range c.members {
		for _, p := range m.pools() {
			run(p.workers, p.process)
		}
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
	t.liveness.ShutDown()
	for _, m := range c.members {
		m.shutDown(t)
	}
	wg.Wait()
	logger.Info("Stopped leading work", "identity", c.opts.Identity)
}

// enqueueAll enqueues every object of every member and every node: a
// resync. Syncs of objects that are right cost no API call.
func (c *Controller) enqueueAll(t *term) {
	for _, m := range c.members {
		m.enqueueAll(t)
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
	if t == nil || c.views.Pending() > 0 || c.active.Load() > 0 {
		return false
	}
	for _, m := range c.members {
		if m.queueLen(t) > 0 {
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
