package agent

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/bfd"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// sync converges the node to the desired dataplane: it recomputes the
// services marked dirty, then sends what differs for every service not yet
// converged (all of them after a (re)connection).
func (a *Agent) sync(ctx context.Context, epoch syncEpoch) (err error) {
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
		if err == nil {
			m.lastSuccess.SetToCurrentTime()
		}
	}()

	if err := a.recompute(ctx); err != nil {
		return fmt.Errorf("read the informer caches: %w", err)
	}

	a.trustLedgerOn(epoch.generation)
	ports, err := a.readPorts(ctx)
	if err != nil {
		return err
	}
	// bridge is what a full sync reads; nil when the ledger knows what the
	// bridge holds.
	var bridge *dataplane.Installed
	if a.ledger.NeedsRead(ports) {
		// First sync, the connection came back, or the uplink moved: what
		// is on the bridge is unknown (OVS may have restarted empty). Read
		// it, then replay the difference; flows that are already right are
		// left alone.
		read := a.takePrefetched(ctx)
		if read == nil {
			read = a.readBridge(ctx)
		}
		if read.err != nil {
			return read.err
		}
		bridge = read.installed
	}
	// The changes go to the bridge as the diff produces them, in one
	// atomic bundle.
	stream := bundleStream{sw: a.cfg.Switch}
	diffed, err := a.ledger.Diff(a.planner, ports, bridge, dataplane.DiffOutput{
		Send: func(c *dataplane.Changes) error { return stream.add(ctx, c) },
		Dump: func(fn func(openflow.FlowEntry) error) error {
			return a.cfg.Switch.DumpFlows(ctx, dataplane.CookiePrefix, dataplane.CookiePrefixMask, fn)
		},
		Count: func(key string, role dataplane.Role, flows int) {
			m.flows.count(key, role, flows)
			m.qosPackets.track(key, role)
			m.firewallDenied.track(key, role)
		},
	})
	if err == nil {
		err = stream.commit(ctx)
	}
	if err != nil {
		stream.discard()
		if stream.opened() {
			// The bundle is atomic, but a lost connection leaves us unsure
			// whether it committed: read the bridge again next time.
			a.ledger.Forget()
		}
		return fmt.Errorf("apply %d flow changes: %w", stream.sent, err)
	}
	a.ledger.Commit(diffed)
	if err := a.syncHostFirewall(ctx); err != nil {
		return err
	}
	// The DNS replies held for these answers (in the flows and in the
	// nftables table) may go on (SnoopDNS).
	a.dnsApplied.advance(a.dnsRendered)
	a.announceTakeovers(ctx, ports)
	a.recordApplied(stream.sent)
	// The flows are in place: a vswitchd waiting for them may forward.
	if err := a.release(ctx, epoch); err != nil {
		return err
	}

	rules, routes := a.planner.Routing()
	if !a.routesCurrent || !slices.Equal(routes, a.routesSynced) {
		if _, _, err := a.cfg.Rules.SyncRoutes(routes); err != nil {
			return fmt.Errorf("routes of egressflow's tables: %w", err)
		}
		a.routesCurrent, a.routesSynced = true, routes
	}
	if _, _, err := a.cfg.Rules.Sync(rules); err != nil {
		return fmt.Errorf("policy-routing rules: %w", err)
	}
	return a.flushStale(ctx)
}

// flushStale flushes the connections the committed flows no longer make:
// only now that no flow SNATs them any more (or SNATs them to another
// address) can their old translations go, and the connections redirected
// through the addresses no router here serves any more.
func (a *Agent) flushStale(ctx context.Context) error {
	m := a.cfg.Metrics
	flushed, err := conntrack.FlushSources(ctx, a.cfg.Switch, conntrack.SNATZone, a.ledger.StaleSources())
	m.ctFlushes.Add(float64(flushed))
	if err != nil {
		return err
	}
	flushed, err = conntrack.FlushRedirects(ctx, a.cfg.Switch, a.ledger.StaleRedirects())
	m.ctFlushes.Add(float64(flushed))
	if err != nil {
		return err
	}
	a.ledger.Flushed()
	return nil
}

// syncHostFirewall hands Config.HostFirewall the firewall parts, the
// routers' refusals and the node's own addresses when any changed since it
// last took them: the whole desired table is rendered only then, not on
// every sync (an EgressService's, an EgressIP's or a Lease's renewal
// leaves it alone).
func (a *Agent) syncHostFirewall(ctx context.Context) error {
	if a.cfg.HostFirewall == nil {
		return nil
	}
	local := a.planner.OwnAddresses()
	if a.hostFirewallCurrent && slices.Equal(local, a.hostFirewallLocal) {
		return nil
	}
	if _, err := a.cfg.HostFirewall.Sync(ctx, a.planner.FirewallState(), a.planner.RouterRefusals(), local); err != nil {
		return err
	}
	a.hostFirewallCurrent, a.hostFirewallLocal = true, local
	return nil
}

// bridgeRead is what a full sync reads from the bridge first.
type bridgeRead struct {
	generation uint64 // of the connection it was read on
	installed  *dataplane.Installed
	err        error
}

// readPorts reads the uplink's port number and the bridge's own MAC.
// trustLedgerOn forgets the ledger's account unless it is of connection
// generation: on any other, OVS may have restarted empty.
func (a *Agent) trustLedgerOn(generation uint64) {
	if a.ledgerGeneration != generation {
		a.ledger.Forget()
		a.ledgerGeneration = generation
	}
}

func (a *Agent) readPorts(ctx context.Context) (dataplane.Ports, error) {
	return readPorts(ctx, a.cfg.Switch, a.cfg.UplinkPort)
}

func readPorts(ctx context.Context, sw Switch, uplinkPort string) (dataplane.Ports, error) {
	var out dataplane.Ports
	ports, err := sw.Ports(ctx)
	if err != nil {
		return out, fmt.Errorf("read the bridge's ports: %w", err)
	}
	var names []string
	for _, p := range ports {
		switch {
		case p.Name == uplinkPort:
			out.Uplink = p.PortNo
		case p.PortNo == openflow.PortLocal:
			out.BridgeMAC = p.HWAddr
		}
		names = append(names, p.Name)
	}
	if out.Uplink == 0 {
		return out, fmt.Errorf("uplink port %q: %w (the bridge has %s)", uplinkPort, ofconn.ErrNoSuchPort, strings.Join(names, ", "))
	}
	return out, nil
}

// readBridge indexes egressflow's flows and groups.
func (a *Agent) readBridge(ctx context.Context) *bridgeRead {
	r := &bridgeRead{generation: a.cfg.Switch.Generation()}
	// Indexed as the dump arrives: only the index is ever held.
	start := time.Now()
	r.installed = dataplane.NewInstalled(nil)
	index := func(e openflow.FlowEntry) error { r.installed.AddDumped(e); return nil }
	if err := a.cfg.Switch.DumpFlows(ctx, dataplane.CookiePrefix, dataplane.CookiePrefixMask, index); err != nil {
		r.err = fmt.Errorf("read egressflow's flows from the bridge: %w", err)
		return r
	}
	groups, err := a.cfg.Switch.Groups(ctx)
	if err != nil {
		r.err = fmt.Errorf("read the bridge's groups: %w", err)
		return r
	}
	r.installed.AddGroups(groups)
	klog.InfoS("Read egressflow's flows from the bridge", "node", a.cfg.Node.Name, "flows", r.installed.Len(), "duration", time.Since(start).Round(time.Millisecond))
	return r
}

// takePrefetched waits for the bridge read Run started, the first time it
// is called, and returns it if it is still valid: it succeeded, on the
// connection that is still up. Otherwise (a later call, a failed read, a
// reconnection since) it returns nil, and the bridge is read again.
func (a *Agent) takePrefetched(ctx context.Context) *bridgeRead {
	if a.prefetched == nil {
		return nil
	}
	var r *bridgeRead
	select {
	case r = <-a.prefetched:
	case <-ctx.Done():
	}
	a.prefetched = nil
	if r == nil || r.err != nil || r.generation != a.cfg.Switch.Generation() {
		return nil
	}
	return r
}

// egressIPObjects are the EgressIPs and namespaces as setHolderWatches
// read them.
type egressIPObjects struct {
	eips       []*esv1.EgressIP
	namespaces []*corev1.Namespace
}

// setHolderWatches reads the EgressIPs and namespaces and makes the
// podScope's holder watches those they ask for; a stopped watch counts as
// a pod change.
func (a *Agent) setHolderWatches(ctx context.Context) (egressIPObjects, error) {
	eips, err := a.egressIPs.List(labels.Everything())
	if err != nil {
		return egressIPObjects{}, err
	}
	namespaces, err := a.namespaces.List(labels.Everything())
	if err != nil {
		return egressIPObjects{}, err
	}
	routes, err := a.externalRoutes.List(labels.Everything())
	if err != nil {
		return egressIPObjects{}, err
	}
	want := dataplane.MergePodWatches(dataplane.HolderPodWatches(a.cfg.Node.Name, eips, namespaces), dataplane.GatewayPodWatches(routes, namespaces))
	if a.podScope.set(ctx, want) {
		a.podsChanged.Store(true)
	}
	return egressIPObjects{eips, namespaces}, nil
}

// recompute feeds the planner the dirty services' inputs, the nodes,
// Leases and local Pods and the fence, and marks what changed as
// unapplied.
func (a *Agent) recompute(ctx context.Context) error {
	nodes, err := a.nodes.List()
	if err != nil {
		return err
	}
	leases, err := a.peerLeases()
	if err != nil {
		return err
	}
	// The shared flows are diffed on every sync: the exemptions need no
	// keys.
	_, changed := a.planner.SetNodes(nodes)
	routes, err := a.updateEgressIPInputs(ctx)
	if err != nil {
		return err
	}
	changed = append(changed, routes...)
	if a.podsChanged.Swap(false) {
		pods, err := a.podScope.list()
		if err != nil {
			a.podsChanged.Store(true)
			return err
		}
		changed = append(changed, a.planner.SetLocalPods(pods)...)
		a.planner.SetClusterPods(pods)
		changed = append(changed, a.planner.SetExternalRouteGateways(pods)...)
	}
	changed = append(changed, a.planner.SetLeases(leases)...)
	changed = append(changed, a.fence(ctx)...)
	keys, err := a.updateDirty()
	if err != nil {
		return err
	}
	changed = append(changed, keys...)
	changed = append(changed, a.updateHopView()...)
	changed = append(changed, a.updateResolved(ctx)...)
	if slices.ContainsFunc(changed, func(k string) bool {
		return strings.HasPrefix(k, firewallKeyPrefix) || strings.HasPrefix(k, routerKeyPrefix)
	}) {
		a.hostFirewallCurrent = false
	}
	// EgressIP's parts are recomputed once, from every input above.
	changed = append(changed, a.planner.TakeEgressIPChanges()...)
	a.ledger.Changed(a.planner, changed)
	a.report(changed)
	return nil
}

// updateEgressIPInputs gives the planner the EgressIPs and namespaces, if
// either changed, once the holder watches they imply are in place, and
// returns the keys of the external routes the namespaces changed.
func (a *Agent) updateEgressIPInputs(ctx context.Context) ([]string, error) {
	if !a.egressIPsChanged.Load() && !a.namespacesChanged.Load() && !a.routesChanged.Load() {
		return nil, nil
	}
	eipsChanged, namespacesChanged, routesChanged := a.egressIPsChanged.Swap(false), a.namespacesChanged.Swap(false), a.routesChanged.Swap(false)
	in, err := a.setHolderWatches(ctx)
	if err != nil {
		// Mark them again for the retry (a handler may have since).
		for _, again := range []struct {
			was  bool
			flag *atomic.Bool
		}{{eipsChanged, &a.egressIPsChanged}, {namespacesChanged, &a.namespacesChanged}, {routesChanged, &a.routesChanged}} {
			if again.was {
				again.flag.Store(true)
			}
		}
		return nil, err
	}
	if eipsChanged {
		a.planner.SetEgressIPs(in.eips)
	}
	if namespacesChanged {
		return a.planner.SetNamespaces(in.namespaces), nil
	}
	return nil, nil
}

// recordApplied records what a sync applied, once its bundle is in: the
// metrics, and what the heartbeat publishes once the sync has ended (the
// unresolved dnsNames, the external routes' notes).
func (a *Agent) recordApplied(flowMods int) {
	m := a.cfg.Metrics
	m.flowMods.Add(float64(flowMods))
	m.qosRules.Set(float64(a.planner.QoSRules()))
	m.firewallRules.Set(float64(a.planner.FirewallRules()))
	a.syncUnresolved = m.setUnresolvedDNS(a.planner.UnresolvedDNS())
	report := a.planner.ExternalRouteReport(a.hopNote)
	a.syncRouteNotes = report.Notes
	m.setPolicyHops(report.Hops)
}

// updateHopView asks Neighbours for the external routes' next hops and
// BFD for sessions to those that ask for one, and gives the planner what
// they know now (a snapshot: each hop's MAC, and whether its session is
// up), returning the keys whose part changed.
func (a *Agent) updateHopView() []string {
	hops := a.planner.ExternalRouteHops()
	addrs := make([]netip.Addr, len(hops))
	for i, h := range hops {
		addrs[i] = h.IP
	}
	if a.cfg.Neighbours != nil && !slices.Equal(addrs, a.wantedHops) {
		a.cfg.Neighbours.Want(addrs)
		a.wantedHops = addrs
	}
	macs, up := map[netip.Addr]net.HardwareAddr{}, map[netip.Addr]bool{}
	a.hopsFollowed = map[netip.Addr]bool{}
	for _, h := range hops {
		a.hopsFollowed[h.IP] = h.BFD
		if a.cfg.Neighbours != nil {
			if mac, ok := a.cfg.Neighbours.MAC(h.IP); ok {
				macs[h.IP] = mac
			}
		}
		if h.BFD && a.cfg.BFD != nil {
			a.startBFD(h.IP)
			st, _, _ := a.cfg.BFD.State(h.IP)
			up[h.IP] = st == bfd.Up
		}
	}
	if a.cfg.BFD != nil {
		for _, peer := range a.cfg.BFD.Peers() {
			if i, found := slices.BinarySearchFunc(hops, peer, func(h dataplane.ExternalHop, p netip.Addr) int { return h.IP.Compare(p) }); !found || !hops[i].BFD {
				a.cfg.BFD.Remove(peer)
			}
		}
	}
	var moved []netip.Addr
	states := map[string]float64{hopUsable: 0, hopUnresolved: 0, hopBFDDown: 0}
	for _, h := range hops {
		old, had := a.hopMACs[h.IP]
		mac, has := macs[h.IP]
		state := hopState(has, h.BFD, up[h.IP])
		states[state]++
		if had != has || !bytes.Equal(old, mac) || a.hopsUp[h.IP] != up[h.IP] {
			moved = append(moved, h.IP)
			usable, wasUsable := state == hopUsable, hopState(had, h.BFD, a.hopsUp[h.IP]) == hopUsable
			if usable != wasUsable {
				to := "unusable"
				if usable {
					to = "usable"
				}
				a.cfg.Metrics.hopChanges.WithLabelValues(to).Inc()
			}
		}
	}
	for state, n := range states {
		a.cfg.Metrics.externalRouteHops.WithLabelValues(state).Set(n)
	}
	for hop := range a.hopMACs {
		if _, still := macs[hop]; !still && !slices.Contains(moved, hop) {
			moved = append(moved, hop)
		}
	}
	if len(moved) == 0 {
		return nil
	}
	a.hopMACs, a.hopsUp = macs, up
	return a.planner.SetExternalRouteView(dataplane.ExternalRouteNode{
		MAC: func(hop netip.Addr) (net.HardwareAddr, bool) {
			mac, ok := macs[hop]
			return mac, ok
		},
		BFDUp: func(hop netip.Addr) bool { return up[hop] },
	}, moved)
}

// A next hop's state on this node, as egressflow_agent_externalroute_hops
// labels it.
const (
	hopUsable     = "usable"     // MAC resolved, and BFD up if it follows the hop
	hopUnresolved = "unresolved" // no MAC
	hopBFDDown    = "bfd_down"   // MAC resolved, BFD followed and not up
)

// hopState is the state of a hop with a MAC or not, followed by BFD or
// not, whose session is up or not.
func hopState(hasMAC, followed, up bool) string {
	switch {
	case !hasMAC:
		return hopUnresolved
	case followed && !up:
		return hopBFDDown
	}
	return hopUsable
}

// hopNotes say why the node cannot use a hop in each state but usable, as
// the external routes' notes put it.
var hopNotes = map[string]string{hopUnresolved: "no neighbour answer (ARP or NDP)", hopBFDDown: "BFD session down"}

// hopNote says why the node cannot use hop (dataplane.Planner.
// ExternalRouteReport); "" when it can.
func (a *Agent) hopNote(hop netip.Addr) string {
	return hopNotes[hopState(a.hopMACs[hop] != nil, a.hopsFollowed[hop], a.hopsUp[hop])]
}

// startBFD starts the session to hop, if there is none, logging an error
// once until it changes.
func (a *Agent) startBFD(hop netip.Addr) {
	err := a.cfg.BFD.Add(hop)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != a.bfdErrors[hop] {
		if a.bfdErrors == nil {
			a.bfdErrors = map[netip.Addr]string{}
		}
		a.bfdErrors[hop] = msg
		if err != nil {
			klog.ErrorS(err, "Could not start the BFD session to an external route's next hop; it is not used until it can", "node", a.cfg.Node.Name, "hop", hop)
		}
	}
}

// updateDirty gives the planner the objects marked dirty (EgressServices,
// EgressQoSes, EgressFirewalls) as they are now, and returns the keys of
// the flows that changed. On an error the objects are marked again, for
// the retry.
func (a *Agent) updateDirty() ([]string, error) {
	var changed []string
	dirty := a.takeDirty()
	for k := range dirty {
		var keys []string
		var err error
		if read := a.sources[a.planner.MemberOf(k).API()].read; read != nil {
			var obj any
			if obj, err = read(k); err == nil {
				keys = a.planner.UpdateObject(k, obj)
			}
		}
		if err != nil {
			for k := range dirty {
				a.markDirty(k)
			}
			return nil, err
		}
		changed = append(changed, keys...)
		delete(dirty, k)
	}
	return changed, nil
}

// updateResolved tells the resolver the dnsNames of this node's
// EgressFirewalls, as they are now (answers to new ones come later,
// through Changed), gives the planner its answers if they changed, and
// returns the keys of the flows that changed.
func (a *Agent) updateResolved(ctx context.Context) []string {
	if a.cfg.DNS == nil {
		return nil
	}
	names := a.planner.DNSNames()
	a.cfg.DNS.SetNames(names)
	a.dnsNamedOnce.Do(func() { close(a.dnsNamed) })
	if !a.dnsAwaited {
		// A restarted agent finds its predecessor's flows for the names
		// on the bridge; syncing before its resolver has answered would
		// take them away until it has.
		a.dnsAwaited = true
		a.restoreAnswers(ctx)
		awaitAnswers(ctx, a.cfg.DNS, names)
		a.dnsChanged.Store(true)
	}
	if !a.dnsChanged.Swap(false) {
		return nil
	}
	// The generation first: the snapshot holds at least what it counts
	// (dnsresolve.Resolver.Generation).
	a.dnsRendered = a.cfg.DNS.Generation()
	return a.planner.SetResolved(a.cfg.DNS.Snapshot())
}

// restoredAnswerTTL is how long the addresses a restarted agent reads
// back from its predecessor's flows stay, unless an answer renews them:
// the reference's ceiling on a name's TTL, so that an address a pod may
// still have cached stays judged (a Deny by wildcard above all, which no
// lookup finds again). Shorter lets an address that left a name go
// sooner; longer keeps judging one the pods may have long forgotten.
const restoredAnswerTTL = 30 * time.Minute

// restoreAnswers gives the resolver the addresses of the dnsName rules
// that the bridge holds, from the predecessor's flows
// (dataplane.FirewallAnswers), so that the first sync renders them rather
// than take them away until the pods look the names up again. Names no
// rule of this node wants any more are ignored (Learn files only wanted
// names). A bridge that cannot be read restores nothing.
func (a *Agent) restoreAnswers(ctx context.Context) {
	var flows []openflow.Flow
	for _, kind := range []dataplane.FlowKind{dataplane.KindFirewallAllow, dataplane.KindFirewallDeny} {
		err := a.cfg.Switch.DumpFlows(ctx, dataplane.Cookie(kind, ""), dataplane.KindCookieMask, func(e openflow.FlowEntry) error {
			f, err := e.Decode()
			if err == nil {
				flows = append(flows, f)
			}
			return nil
		})
		if err != nil {
			klog.InfoS("Could not read the predecessor's DNS answers from the bridge", "err", err)
			return
		}
	}
	restored := 0
	for name, addrs := range dataplane.FirewallAnswers(flows) {
		a.cfg.DNS.Learn(name, addrs, restoredAnswerTTL)
		restored += len(addrs)
	}
	if restored > 0 {
		klog.InfoS("Kept the DNS answers the bridge's flows hold from before the restart", "addresses", restored)
	}
}

// firstAnswersTimeout bounds how long the agent's first sync waits for its
// resolver's first answers to the names its firewalls need: longer keeps a
// restarted agent's dnsName flows in place through a slow resolver, shorter
// bounds how long an unreachable one delays every other part of the first
// sync (the pod guard holds new pods meanwhile).
const firstAnswersTimeout = 3 * time.Second

// answersPollInterval is how often awaitAnswers looks at the snapshot: a
// local resolver answers in milliseconds.
const answersPollInterval = 20 * time.Millisecond

// awaitAnswers waits until dns has an answer (or a negative one) for each
// of names, firstAnswersTimeout at most.
func awaitAnswers(ctx context.Context, dns FirewallDNS, names []string) {
	// A wildcard is answered only by the pods' replies: not awaited.
	exact := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return strings.HasPrefix(n, "*.") })
	ctx, cancel := context.WithTimeout(ctx, firstAnswersTimeout)
	defer cancel()
	for {
		snapshot := dns.Snapshot()
		missing := slices.DeleteFunc(slices.Clone(exact), func(n string) bool { _, ok := snapshot[n]; return ok })
		if len(missing) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			klog.InfoS("First sync without answers for some EgressFirewall names", "names", missing, "waited", firstAnswersTimeout)
			return
		case <-time.After(answersPollInterval):
		}
	}
}

// fence fences the node while its heartbeat Lease has run out, and
// unfences it once the Lease is renewed and the EgressService cache agrees
// with a fresh read from the API server about every service that names
// this node as its host, by either: a cut-off node's cache may still say it
// hosts a service the cluster has moved meanwhile. It returns the keys
// whose part changed.
func (a *Agent) fence(ctx context.Context) []string {
	lapsed := a.mustFence.Load()
	switch {
	case lapsed && !a.planner.Fenced():
		klog.InfoS("Heartbeat Lease ran out or probes lost: fenced, hosting nothing until they are back", "node", a.cfg.Node.Name)
		a.fenced.Store(true)
		return a.planner.SetFenced(true)
	case !lapsed && a.planner.Fenced():
		if err := a.cacheCaughtUp(ctx); err != nil {
			a.fencePending.Store(true)
			klog.InfoS("Heartbeat renewed; staying fenced until the caches have caught up", "node", a.cfg.Node.Name, "reason", err)
			return nil
		}
		a.fencePending.Store(false)
		klog.InfoS("Heartbeat renewed and caches current: unfenced", "node", a.cfg.Node.Name)
		a.fenced.Store(false)
		return a.planner.SetFenced(false)
	}
	return nil
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
			api := a.planner.MemberOf(k).API()
			klog.InfoS("Object not programmed as asked", "kind", api, "object", p.Key, "reason", p.Reason, "message", p.Message, "node", a.cfg.Node.Name)
			eventObject := a.sources[api].eventObject
			if a.cfg.Recorder == nil || eventObject == nil {
				continue
			}
			// Each node records its own problems: its endpoints, its pods.
			if obj := eventObject(k); obj != nil {
				a.cfg.Recorder.Eventf(obj, corev1.EventTypeWarning, string(p.Reason), "node %s: %s", a.cfg.Node.Name, p.Message)
			}
		}
		if len(problems) == 0 {
			delete(a.reported, k)
		} else {
			a.reported[k] = problems
		}
	}
}
