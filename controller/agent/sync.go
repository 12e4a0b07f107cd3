package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
)

// sync converges the node to the desired dataplane of the current state.
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

	cluster, err := a.cluster()
	if err != nil {
		return fmt.Errorf("read the informer caches: %w", err)
	}
	state := dataplane.Compute(a.cfg.Node, cluster, a.cfg.Tables)
	a.report(state.Problems, cluster)

	if a.installed == nil {
		// First sync, or the connection came back: what is on the bridge is
		// unknown (OVS may have restarted empty). Read it, then replay the
		// difference; flows that are already right are left alone.
		if a.uplink, err = a.cfg.Switch.PortNumber(ctx, a.cfg.UplinkPort); err != nil {
			return fmt.Errorf("uplink port %q: %w", a.cfg.UplinkPort, err)
		}
		dumped, err := a.cfg.Switch.DumpFlows(ctx, dataplane.CookiePrefix, dataplane.CookiePrefixMask)
		if err != nil {
			return fmt.Errorf("read egressflow's flows from the bridge: %w", err)
		}
		a.installed = dataplane.Installed(dumped)
	}
	desired := dataplane.Flows(state, dataplane.Ports{Uplink: a.uplink})
	changes := dataplane.Diff(desired, a.installed)
	if !changes.Empty() {
		mods := slices.Concat(changes.Delete, changes.Add)
		if err := a.cfg.Switch.Bundle(ctx, mods); err != nil {
			// The bundle is atomic, but a lost connection leaves us unsure
			// whether it committed: read the bridge again next time.
			a.installed = nil
			return fmt.Errorf("apply %d flow changes: %w", len(mods), err)
		}
		m.flowMods.Add(float64(len(mods)))
		changes.ApplyTo(a.installed)
	}
	a.countFlows(state, desired)

	if _, _, err := a.cfg.Rules.Sync(state.Rules); err != nil {
		return fmt.Errorf("policy-routing rules: %w", err)
	}
	// Only now that no flow SNATs them any more (or SNATs them to another
	// address) can their old translations go: a connection flushed before
	// would be re-created with the old mapping.
	flushed, err := conntrack.FlushSources(ctx, a.cfg.Switch, conntrack.SNATZone,
		conntrack.Stale(a.lastState.Translations(), state.Translations()))
	m.ctFlushes.Add(float64(flushed))
	if err != nil {
		return err
	}
	a.lastState = state
	return nil
}

// report logs each problem once and records an Event on its EgressService,
// when it first appears (not on every sync).
func (a *Agent) report(problems []dataplane.Problem, cluster dataplane.Cluster) {
	current := make(map[dataplane.Problem]bool, len(problems))
	for _, p := range problems {
		current[p] = true
		if a.lastProblems[p] {
			continue
		}
		klog.InfoS("EgressService not programmed as asked", "service", p.Service, "reason", p.Reason, "message", p.Message, "node", a.cfg.Node.Name)
		if a.cfg.Recorder == nil {
			continue
		}
		for _, es := range cluster.EgressServices {
			if es.Namespace+"/"+es.Name == p.Service {
				a.cfg.Recorder.Eventf(es, corev1.EventTypeWarning, p.Reason, "node %s: %s", a.cfg.Node.Name, p.Message)
			}
		}
	}
	a.lastProblems = current
}

// countFlows sets the per-service flow gauge from the desired flows.
func (a *Agent) countFlows(state dataplane.State, desired []*openflow.FlowMod) {
	counts := map[uint32]int{}
	for _, fm := range desired {
		counts[uint32(fm.Cookie>>8)]++
	}
	names := map[uint32]string{0: ""}
	for _, s := range state.Services {
		names[dataplane.ServiceHash(s.Key)] = s.Key
	}
	a.cfg.Metrics.flows.Reset()
	for hash, n := range counts {
		a.cfg.Metrics.flows.WithLabelValues(names[hash]).Set(float64(n))
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
