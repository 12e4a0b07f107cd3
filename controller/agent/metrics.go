package agent

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressflow/egressflow/controller/bfd"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/openflow"
)

// Metrics are the node agent's Prometheus metrics, prefixed egressflow_agent_.
// Every series is per node, and their number per node is bounded by a
// constant, except egressflow_agent_service_flows, which only the host of a
// service exports: across the cluster, about one series per service, not
// one per node and service (docs/monitoring.md).
type Metrics struct {
	flows        *flowGauge
	syncDuration prometheus.Histogram
	syncs        *prometheus.CounterVec
	lastSuccess  prometheus.Gauge
	flowMods     prometheus.Counter
	connected    prometheus.GaugeFunc
	// isConnected is read at scrape time: nothing else happens while the
	// connection is down.
	isConnected   atomic.Pointer[func() bool]
	lastError     prometheus.Gauge
	ctFlushes     prometheus.Counter
	announcements *prometheus.CounterVec
	leaseRenewals *prometheus.CounterVec
	qosRules      prometheus.Gauge
	externalRouteMetrics
	// qosPackets reads the marking flows' packet counters at scrape time,
	// firewallDenied the deny flows'.
	qosPackets, firewallDenied *stagePacketCounter
	firewallRules              prometheus.Gauge
	// firewallUnresolved counts the unresolved dnsNames by namespace;
	// unresolvedNamespaces are the namespaces it has a series for.
	firewallUnresolved   *prometheus.GaugeVec
	unresolvedNamespaces map[string]bool
	// dnsHold and dnsReplies: the DNS replies the snoop flows paused
	// (SnoopDNS).
	dnsHold    prometheus.Histogram
	dnsReplies *prometheus.CounterVec
}

// externalRouteMetrics are the AdminPolicyBasedExternalRoutes' next hops
// on this node.
type externalRouteMetrics struct {
	// externalRouteHops counts the hops the node follows by state;
	// hopChanges counts their changes of state.
	externalRouteHops *prometheus.GaugeVec
	hopChanges        *prometheus.CounterVec
	// policyHops counts each used policy's hops by state; usedPolicies
	// are the policies it has series for. bfdChanges counts the BFD
	// sessions' changes of state.
	policyHops   *prometheus.GaugeVec
	usedPolicies map[string]bool
	bfdChanges   *prometheus.CounterVec
}

func newExternalRouteMetrics() externalRouteMetrics {
	return externalRouteMetrics{
		externalRouteHops: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_agent_externalroute_hops",
			Help: "Next hops of the AdminPolicyBasedExternalRoutes selecting a namespace with a pod on this node, as this node last saw them: usable (MAC resolved, and BFD up when it asks for it), unresolved (no MAC), bfd_down (MAC resolved, BFD session not up).",
		}, []string{"state"}),
		hopChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_externalroute_hop_changes_total",
			Help: "Times an external route's next hop became usable (to=usable) or stopped being usable (to=unusable) on this node, each taken into the flows at once.",
		}, []string{"to"}),
		policyHops: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_agent_externalroute_policy_hops",
			Help: "Next hops of each AdminPolicyBasedExternalRoute that selects a namespace with a pod on this node, after the last successful sync: usable, or unusable (no MAC, or BFD asked for and not up). Only policies this node uses have series.",
		}, []string{"policy", "state"}),
		usedPolicies: map[string]bool{},
		bfdChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_bfd_session_changes_total",
			Help: "Changes of state of this node's BFD sessions to external route next hops, by the state entered (down, init, up, admin_down).",
		}, []string{"to"}),
	}
}

func (m *externalRouteMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.externalRouteHops, m.hopChanges, m.policyHops, m.bfdChanges}
}

// dnsHoldBuckets span a reply released at once (tens of microseconds:
// its addresses were in the flows already) up to the hold's bound
// (DefaultDNSHoldTimeout): exponential from 50 µs to ~1.6 s.
var dnsHoldBuckets = prometheus.ExponentialBuckets(0.00005, 2, 16)

// DNS reply outcomes (egressflow_agent_dns_replies_total's label).
const (
	// dnsReleasedApplied: the flows for what the reply taught were in the
	// bridge (at once, or after a sync) when it went on.
	dnsReleasedApplied = "applied"
	// dnsReleasedTimeout: they were not within the hold's bound, and the
	// reply went on all the same (a reply is never lost).
	dnsReleasedTimeout = "timeout"
	// dnsResumeFailed: the switch did not take the resumption (it
	// restarted, or the connection was lost): the reply is lost, and the
	// pod's resolver asks again.
	dnsResumeFailed = "resume_failed"
)

// syncBuckets span a no-op sync (well under a millisecond) up to a full
// sync of 100k flows (about a second): exponential from 100 µs to ~3 s.
var syncBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

// NewMetrics creates the agent's metrics and registers them with reg (nil:
// not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		flows: newFlowGauge(),
		qosPackets: newStagePacketCounter("egressflow_agent_qos_marked_packets_total",
			"Packets this node marked for each namespace's EgressQoS: the sum of its marking flows' packet counters, read at scrape time (a replaced flow starts from 0).",
			dataplane.KindQoSMark, dataplane.RoleQoS, qosKeyPrefix),
		firewallDenied: newStagePacketCounter("egressflow_agent_firewall_denied_packets_total",
			"Packets of this node's pods that each namespace's EgressFirewall dropped: the sum of its Deny flows' packet counters, read at scrape time (a replaced flow starts from 0).",
			dataplane.KindFirewallDeny, dataplane.RoleFirewall, firewallKeyPrefix),
		firewallRules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_agent_firewall_rules",
			Help: "EgressFirewall rules applied on this node after the last successful sync: of each namespace's EgressFirewall with a pod on this node, the rules not skipped for a problem.",
		}),
		firewallUnresolved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_agent_firewall_dns_unresolved",
			Help: "Exact dnsNames of each namespace's EgressFirewall (of namespaces with a pod on this node) that this node had no answer for after the last successful sync: their rules match nothing meanwhile. Wildcards are not counted (they fill from the pods' own lookups). A namespace's series goes when it has none.",
		}, []string{"namespace"}),
		unresolvedNamespaces: map[string]bool{},
		qosRules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_agent_qos_rules",
			Help: "EgressQoS rules applied on this node after the last successful sync: of each namespace's EgressQoS, the rules that select a pod of this node.",
		}),
		externalRouteMetrics: newExternalRouteMetrics(),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_agent_sync_duration_seconds",
			Help:    "Duration of a node sync: compute, diff, bundle, ip rules, conntrack flushes.",
			Buckets: syncBuckets,
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_syncs_total",
			Help: "Node syncs by result (ok, error).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_agent_last_successful_sync_timestamp_seconds",
			Help: "When the last node sync that succeeded ended (Unix seconds; 0 before the first). The agent syncs on changes, not on a clock: an old value on an idle node is no fault, a failing sync is (egressflow_agent_last_sync_failed).",
		}),
		flowMods: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressflow_agent_flow_mods_total",
			Help: "Flow mods sent to the bridge (adds, modifies and deletes).",
		}),
		lastError: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_agent_last_sync_failed",
			Help: "1 if the last node sync failed (its error is in the log and in the heartbeat's sync state).",
		}),
		ctFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressflow_agent_conntrack_flushes_total",
			Help: "Conntrack flushes of endpoints whose SNAT went away or changed, and of EgressRouter addresses whose redirect left the node.",
		}),
		announcements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_egressip_announcements_total",
			Help: "Gratuitous ARPs (family ipv4) and unsolicited neighbour advertisements (ipv6) sent out of the bridge's ports for addresses (EgressIP, EgressRouter) this node took over, or handed back to their holder, by result: ok, or error (the packet-out failed).",
		}, []string{"family", "result"}),
		dnsHold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_agent_dns_reply_hold_seconds",
			Help:    "How long a DNS reply to a pod of a namespace with a dnsName rule was held in the bridge, from the switch's packet-in to its resumption: until the flows for its addresses were in place.",
			Buckets: dnsHoldBuckets,
		}),
		dnsReplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_dns_replies_total",
			Help: "DNS replies to pods of namespaces with a dnsName rule that the bridge held, by outcome: applied (released once the flows for their addresses were in place), timeout (released after the hold's bound without them), resume_failed (the switch did not take the resumption).",
		}, []string{"outcome"}),
		leaseRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_lease_renewals_total",
			Help: "Attempts to renew the node's heartbeat Lease by result: ok; error (the API server refused or did not answer); skipped (the dataplane was unhealthy, so the agent let the Lease run out on purpose).",
		}, []string{"result"}),
	}
	// Known label values start at 0, so that a rate over them exists
	// before the first failure.
	for _, result := range []string{"ok", "error"} {
		m.syncs.WithLabelValues(result)
	}
	for _, outcome := range []string{dnsReleasedApplied, dnsReleasedTimeout, dnsResumeFailed} {
		m.dnsReplies.WithLabelValues(outcome)
	}
	for _, result := range []heartbeat.RenewalResult{heartbeat.RenewalOK, heartbeat.RenewalError, heartbeat.RenewalSkipped} {
		m.leaseRenewals.WithLabelValues(string(result))
	}
	m.connected = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "egressflow_agent_openflow_connected",
		Help: "1 while the OpenFlow connection to the bridge is up.",
	}, func() float64 {
		if f := m.isConnected.Load(); f != nil {
			return boolGauge((*f)())
		}
		return 0
	})
	if reg != nil {
		reg.MustRegister(append(m.collectors(), m.flows, m.syncDuration, m.syncs, m.lastSuccess, m.flowMods, m.connected, m.lastError, m.ctFlushes,
			m.announcements, m.leaseRenewals, m.qosRules, m.qosPackets, m.firewallRules, m.firewallUnresolved, m.firewallDenied, m.dnsHold, m.dnsReplies)...)
	}
	return m
}

// boolGauge is a gauge's value for b: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ObserveRenewal counts one attempt to renew the heartbeat Lease
// (heartbeat.RenewerConfig.Observe).
func (m *Metrics) ObserveRenewal(result heartbeat.RenewalResult) {
	m.leaseRenewals.WithLabelValues(string(result)).Inc()
}

// flowRoleShared is the role label of the flows every node has whatever
// the services (the pipeline, exemptions and pod guard).
const flowRoleShared = "shared"

// flowGauge exports two metrics made at scrape time from counts that the
// sync keeps:
//
//   - egressflow_agent_flows{role}: the node's flows by its role for their
//     service (host, steer, network) or shared: a few series per node,
//     whatever the number of services.
//   - egressflow_agent_service_flows{service}: the flows of each service
//     this node hosts, only. Every node holds flows for every service with
//     a host (it steers their endpoints), so a per-service series on every
//     node would cost nodes × services series; on the host alone it costs
//     one per service, and the host's count is the one that says what the
//     service does (it SNATs all its endpoints).
//
// A GaugeVec would keep a metric, its label pair and its hash for every
// service, about 450 bytes each: some 4.5 MB at 10,000 services, held for a
// figure read once a scrape. The totals are kept as the counts change, so a
// scrape costs the hosted services only.
type flowGauge struct {
	byRole, byService *prometheus.Desc
	mu                sync.Mutex
	// services holds every service's flows with the role they were rendered
	// for; total sums them by role label (and holds the shared flows);
	// hosted is the subset of services whose role is RoleHost.
	services map[string]serviceFlows
	total    map[string]int
	hosted   map[string]int
}

type serviceFlows struct {
	role  dataplane.Role
	flows int
}

func newFlowGauge() *flowGauge {
	g := &flowGauge{
		byRole: prometheus.NewDesc("egressflow_agent_flows",
			"Flows egressflow wants on this node's bridge, by role: host (services this node hosts: SNAT and replies), steer (other hosts' services: their endpoints steered there), network (sourceIPBy Network), shared (every node's pipeline and pod guard). A few series per node; sum without (role) is the node's total.",
			[]string{"role"}, nil),
		byService: prometheus.NewDesc("egressflow_agent_service_flows",
			"Flows of each EgressService (namespace/name) that this node hosts. Only the host exports a service's series, so their number is that of the services with a host, not nodes × services; the other nodes count theirs in egressflow_agent_flows{role=\"steer\"}.",
			[]string{"service"}, nil),
		services: map[string]serviceFlows{},
		hosted:   map[string]int{},
		total:    map[string]int{},
	}
	// The roles every node has, present from the start.
	for _, role := range []string{roleLabel(dataplane.RoleHost), roleLabel(dataplane.RoleSteer), flowRoleShared} {
		g.total[role] = 0
	}
	return g
}

// roleLabel is role's value of the role label: "host", "steer", "network".
func roleLabel(role dataplane.Role) string { return strings.ToLower(string(role)) }

// set records how many flows service wants, rendered for role.
func (g *flowGauge) set(service string, role dataplane.Role, flows int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forget(service)
	g.services[service] = serviceFlows{role: role, flows: flows}
	g.total[roleLabel(role)] += flows
	if role == dataplane.RoleHost {
		g.hosted[service] = flows
	}
}

// remove forgets a service that wants no flows any more.
func (g *flowGauge) remove(service string) {
	g.mu.Lock()
	g.forget(service)
	g.mu.Unlock()
}

// count records what a sync's diff rendered (dataplane.DiffOutput.Count):
// a service's flows, a service gone (role ""), or the shared flows (key "").
func (g *flowGauge) count(key string, role dataplane.Role, flows int) {
	if role == dataplane.RoleQoS || role == dataplane.RoleFirewall {
		// Its flows count under its role; no per-object series.
		g.mu.Lock()
		g.forget(key)
		g.services[key] = serviceFlows{role: role, flows: flows}
		g.total[roleLabel(role)] += flows
		g.mu.Unlock()
		return
	}
	switch {
	case key == "":
		g.setShared(flows)
	case role == "":
		g.remove(key)
	default:
		g.set(key, role, flows)
	}
}

// setShared records how many shared flows the node wants.
func (g *flowGauge) setShared(flows int) {
	g.mu.Lock()
	g.total[flowRoleShared] = flows
	g.mu.Unlock()
}

// forget takes service's flows out of the counts; g.mu is held.
func (g *flowGauge) forget(service string) {
	old, ok := g.services[service]
	if !ok {
		return
	}
	g.total[roleLabel(old.role)] -= old.flows
	delete(g.services, service)
	delete(g.hosted, service)
}

func (g *flowGauge) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.byRole
	ch <- g.byService
}

// Collect sends the counts as they are now; the sync waits only while they
// are copied, not while the scrape reads them.
func (g *flowGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	metrics := make([]prometheus.Metric, 0, len(g.total)+len(g.hosted))
	for role, n := range g.total {
		metrics = append(metrics, prometheus.MustNewConstMetric(g.byRole, prometheus.GaugeValue, float64(n), role))
	}
	for service, n := range g.hosted {
		metrics = append(metrics, prometheus.MustNewConstMetric(g.byService, prometheus.GaugeValue, float64(n), service))
	}
	g.mu.Unlock()
	for _, m := range metrics {
		ch <- m
	}
}

// stageScrapeTimeout bounds the flow-stats request a scrape of a
// stagePacketCounter makes: longer lets a busy switch answer, shorter
// keeps a scrape from hanging on a wedged one.
const stageScrapeTimeout = 2 * time.Second

// stagePacketCounter exports a counter by namespace of the packets one
// kind of a node-local stage's flows matched
// (egressflow_agent_qos_marked_packets_total: the packets TableQoS marked;
// egressflow_agent_firewall_denied_packets_total: those TableFirewall
// dropped), summed at scrape time from those flows' packet counters, read
// with one flow-stats request filtered by their cookie kind. The series
// exist on the nodes where the namespace's object has flows. A flow that
// is replaced starts counting from 0, which rate() reads as a counter
// reset.
type stagePacketCounter struct {
	desc *prometheus.Desc
	// kind is the flows' cookie kind; role and keyPrefix, their objects'.
	kind      dataplane.FlowKind
	role      dataplane.Role
	keyPrefix string
	mu        sync.Mutex
	// sw is the agent's switch; nil: nothing exported.
	sw Switch
	// namespaces holds the namespace of each object with flows, by the
	// hash its cookies carry.
	namespaces map[uint32]string
}

func newStagePacketCounter(name, help string, kind dataplane.FlowKind, role dataplane.Role, keyPrefix string) *stagePacketCounter {
	return &stagePacketCounter{
		desc: prometheus.NewDesc(name, help, []string{"namespace"}, nil),
		kind: kind, role: role, keyPrefix: keyPrefix,
		namespaces: map[uint32]string{},
	}
}

// setSwitch gives the counter the switch whose flows it reads.
func (c *stagePacketCounter) setSwitch(sw Switch) {
	c.mu.Lock()
	c.sw = sw
	c.mu.Unlock()
}

// track records that key (an object of the counter's API) has flows
// (the counter's role) or none (role ""), as the sync's diff counts them;
// other keys are ignored.
func (c *stagePacketCounter) track(key string, role dataplane.Role) {
	rest, ok := strings.CutPrefix(key, c.keyPrefix)
	if !ok {
		return
	}
	namespace, _, _ := strings.Cut(rest, "/")
	c.mu.Lock()
	defer c.mu.Unlock()
	if role == c.role {
		c.namespaces[dataplane.ServiceHash(key)] = namespace
	} else {
		delete(c.namespaces, dataplane.ServiceHash(key))
	}
}

func (c *stagePacketCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stagePacketCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sw, namespaces := c.sw, maps.Clone(c.namespaces)
	c.mu.Unlock()
	if sw == nil || len(namespaces) == 0 || !sw.Connected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stageScrapeTimeout)
	defer cancel()
	packets := map[string]uint64{}
	kind := dataplane.Cookie(c.kind, "") &^ 0xff
	err := sw.DumpFlows(ctx, kind, dataplane.CookiePrefixMask|0xff<<40, func(e openflow.FlowEntry) error {
		ns, ok := namespaces[uint32(e.Cookie()>>8)]
		if !ok {
			return nil
		}
		f, err := e.Decode()
		if err != nil {
			return err
		}
		packets[ns] += f.Stats.PacketCount
		return nil
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for ns, n := range packets {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), ns)
	}
}

// setUnresolvedDNS sets egressflow_agent_firewall_dns_unresolved from the
// planner's unresolved names and returns them as the heartbeat publishes
// them (heartbeat.Facts.FirewallUnresolvedDNS: never nil). Called by the
// sync only.
func (m *Metrics) setUnresolvedDNS(names []dataplane.UnresolvedDNSName) []string {
	out := make([]string, 0, len(names))
	counts := map[string]int{}
	for _, n := range names {
		out = append(out, n.Namespace+"/"+n.Name)
		counts[n.Namespace]++
	}
	for ns := range m.unresolvedNamespaces {
		if counts[ns] == 0 {
			m.firewallUnresolved.DeleteLabelValues(ns)
			delete(m.unresolvedNamespaces, ns)
		}
	}
	for ns, c := range counts {
		m.firewallUnresolved.WithLabelValues(ns).Set(float64(c))
		m.unresolvedNamespaces[ns] = true
	}
	return out
}

// setPolicyHops sets egressflow_agent_externalroute_policy_hops from the
// used policies' hops (dataplane.ExternalRouteReport.Hops), dropping the
// series of policies no longer used. Called by the sync only.
func (m *Metrics) setPolicyHops(hops map[string]dataplane.PolicyHops) {
	for policy := range m.usedPolicies {
		if _, ok := hops[policy]; !ok {
			m.policyHops.DeleteLabelValues(policy, "usable")
			m.policyHops.DeleteLabelValues(policy, "unusable")
			delete(m.usedPolicies, policy)
		}
	}
	for policy, n := range hops {
		m.policyHops.WithLabelValues(policy, "usable").Set(float64(n.Usable))
		m.policyHops.WithLabelValues(policy, "unusable").Set(float64(n.Unusable))
		m.usedPolicies[policy] = true
	}
}

// BFDChanged counts a BFD session's change of state
// (egressflow_agent_bfd_session_changes_total): the bfd.Engine's callback
// calls it.
func (m *Metrics) BFDChanged(c bfd.Change) {
	m.bfdChanges.WithLabelValues(bfdStateLabels[c.State]).Inc()
}

// bfdStateLabels are the states' values of the to label.
var bfdStateLabels = map[bfd.State]string{bfd.AdminDown: "admin_down", bfd.Down: "down", bfd.Init: "init", bfd.Up: "up"}
