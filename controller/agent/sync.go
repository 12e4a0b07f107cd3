package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
)

// sync converges the node to the desired dataplane: it recomputes the
// services marked dirty, then sends what differs for every service not yet
// converged (all of them after a (re)connection).
func (a *Agent) sync(ctx context.Context) (err error) {
	start := time.Now()
	m := a.cfg.Metrics
	defer func() {
		m.syncDuration.Observe(time.Since(start).Seconds())
		result, failed := "ok", 0.0
		if err != nil {
			result, failed = "error", 1
		}
		m.syncs.WithLabelValues(result).Inc()
		m.lastError.Set(failed)
	}()

	if err := a.recompute(); err != nil {
		return fmt.Errorf("read the informer caches: %w", err)
	}

	full := a.installed == nil
	if full {
		// First sync, or the connection came back: what is on the bridge is
		// unknown (OVS may have restarted empty). Read it, then replay the
		// difference; flows that are already right are left alone.
		read := a.takePrefetched()
		if read == nil {
			read = a.readBridge(ctx)
		}
		if read.err != nil {
			return read.err
		}
		a.uplink, a.installed = read.uplink, read.installed
		for _, k := range a.planner.Keys() {
			a.unapplied[k] = true
		}
		for k := range a.applied {
			a.unapplied[k] = true
		}
	}
	changes, err := a.diff(full)
	if err != nil {
		return err
	}
	if !changes.Empty() {
		mods := changes.Mods()
		if err := a.cfg.Switch.Bundle(ctx, mods); err != nil {
			// The bundle is atomic, but a lost connection leaves us unsure
			// whether it committed: read the bridge again next time.
			a.installed = nil
			return fmt.Errorf("apply %d flow changes: %w", len(mods), err)
		}
		m.flowMods.Add(float64(len(mods)))
		changes.ApplyTo(a.installed)
	}

	if _, _, err := a.cfg.Rules.Sync(a.planner.Rules()); err != nil {
		return fmt.Errorf("policy-routing rules: %w", err)
	}
	// Only now that no flow SNATs them any more (or SNATs them to another
	// address) can their old translations go: a connection flushed before
	// would be re-created with the old mapping.
	before, after := conntrack.Translations{}, conntrack.Translations{}
	for k := range a.unapplied {
		a.applied[k].AddTranslations(before)
		if s, ok := a.planner.Service(k); ok {
			s.AddTranslations(after)
		}
	}
	flushed, err := conntrack.FlushSources(ctx, a.cfg.Switch, conntrack.SNATZone, conntrack.Stale(before, after))
	m.ctFlushes.Add(float64(flushed))
	if err != nil {
		return err
	}
	for k := range a.unapplied {
		if s, ok := a.planner.Service(k); ok {
			a.applied[k] = s
		} else {
			delete(a.applied, k)
		}
	}
	clear(a.unapplied)
	return nil
}

// bridgeRead is what a full sync reads from the bridge first.
type bridgeRead struct {
	generation uint64 // of the connection it was read on
	uplink     uint32
	installed  *dataplane.Installed
	err        error
}

// readBridge looks the uplink up and indexes egressflow's flows.
func (a *Agent) readBridge(ctx context.Context) *bridgeRead {
	r := &bridgeRead{generation: a.cfg.Switch.Generation()}
	var err error
	if r.uplink, err = a.cfg.Switch.PortNumber(ctx, a.cfg.UplinkPort); err != nil {
		r.err = fmt.Errorf("uplink port %q: %w", a.cfg.UplinkPort, err)
		return r
	}
	dumped, err := a.cfg.Switch.DumpFlows(ctx, dataplane.CookiePrefix, dataplane.CookiePrefixMask)
	if err != nil {
		r.err = fmt.Errorf("read egressflow's flows from the bridge: %w", err)
		return r
	}
	r.installed = dataplane.NewInstalled(dumped)
	return r
}

// prefetch reads the bridge while the informers list the cluster (Run), so
// that the first sync after a start need not: on a restart at 10,000
// services the two take about as long as each other.
func (a *Agent) prefetch(ctx context.Context) {
	r := a.readBridge(ctx)
	a.mu.Lock()
	a.prefetched = r
	a.mu.Unlock()
}

// takePrefetched returns the prefetched read if it is still valid: it
// succeeded, on the connection that is still up.
func (a *Agent) takePrefetched() *bridgeRead {
	a.mu.Lock()
	r := a.prefetched
	a.prefetched = nil
	a.mu.Unlock()
	if r == nil || r.err != nil || r.generation != a.cfg.Switch.Generation() {
		return nil
	}
	return r
}

// recompute feeds the planner the dirty services' inputs and the nodes and
// Leases, and marks what changed as unapplied.
func (a *Agent) recompute() error {
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	leaseList, err := a.leases.Leases(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	leases := make(map[string]*coordinationv1.Lease, len(leaseList))
	for _, l := range leaseList {
		leases[l.Name] = l
	}
	a.planner.SetNodes(nodes) // the shared flows are diffed on every sync
	changed := a.planner.SetLeases(leases)
	dirty := a.takeDirty()
	for k := range dirty {
		in, err := a.inputs(k)
		if err != nil {
			// Mark the rest again so the retry reads them.
			for k := range dirty {
				a.markDirty(k)
			}
			return err
		}
		changed = append(changed, a.planner.Update(k, in)...)
		delete(dirty, k)
	}
	for _, k := range changed {
		a.unapplied[k] = true
		group := dataplane.ServiceHash(k)
		if _, ok := a.planner.Service(k); ok {
			if a.byGroup[group] == nil {
				a.byGroup[group] = map[string]bool{}
			}
			a.byGroup[group][k] = true
		} else if a.byGroup[group] != nil {
			delete(a.byGroup[group], k)
			if len(a.byGroup[group]) == 0 {
				delete(a.byGroup, group)
			}
		}
	}
	a.report(changed)
	return nil
}

// diff renders the unapplied services' flow groups (every group when full)
// and the shared flows, and compares them with the installed flows,
// encoding each group's adds as it goes (Changes.Compact) so that a full
// sync never holds every new flow decoded at once. It also sets the
// per-service flow gauge of what it rendered.
func (a *Agent) diff(full bool) (dataplane.Changes, error) {
	ports := dataplane.Ports{Uplink: a.uplink}
	groups := map[uint32]bool{}
	for k := range a.unapplied {
		groups[dataplane.ServiceHash(k)] = true
	}
	if full {
		for _, g := range a.installed.Groups() {
			groups[g] = true
		}
	}
	var changes dataplane.Changes
	for g := range groups {
		if g == 0 {
			continue
		}
		var desired []*openflow.FlowMod
		for _, k := range slices.Sorted(maps.Keys(a.byGroup[g])) {
			s, _ := a.planner.Service(k)
			flows := dataplane.ServiceFlows(s, ports)
			a.cfg.Metrics.flows.WithLabelValues(k).Set(float64(len(flows)))
			desired = append(desired, flows...)
		}
		changes.DiffGroup(g, desired, a.installed)
		if err := changes.Compact(); err != nil {
			return changes, err
		}
	}
	for k := range a.unapplied {
		if _, ok := a.planner.Service(k); !ok {
			a.cfg.Metrics.flows.DeleteLabelValues(k)
		}
	}
	shared := dataplane.SharedFlows(a.planner.Exempt(), a.planner.Acting(dataplane.RoleHost), a.planner.Acting(dataplane.RoleSteer), ports)
	a.cfg.Metrics.flows.WithLabelValues("").Set(float64(len(shared)))
	changes.DiffGroup(0, shared, a.installed)
	return changes, nil
}

// report logs each new problem of the changed services once and records an
// Event on its EgressService, when it first appears (not on every sync).
func (a *Agent) report(changed []string) {
	for _, k := range changed {
		problems := a.planner.Problems(k)
		for _, p := range problems {
			if slices.Contains(a.reported[k], p) {
				continue
			}
			klog.InfoS("EgressService not programmed as asked", "service", p.Service, "reason", p.Reason, "message", p.Message, "node", a.cfg.Node.Name)
			if a.cfg.Recorder == nil {
				continue
			}
			namespace, name, _ := cache.SplitMetaNamespaceKey(k)
			if es, err := a.egressServices.EgressServices(namespace).Get(name); err == nil {
				a.cfg.Recorder.Eventf(es, corev1.EventTypeWarning, p.Reason, "node %s: %s", a.cfg.Node.Name, p.Message)
			}
		}
		if len(problems) == 0 {
			delete(a.reported, k)
		} else {
			a.reported[k] = problems
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
