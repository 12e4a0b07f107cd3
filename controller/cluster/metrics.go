package cluster

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressflow/egressflow/controller/events"
)

// metrics are the controller's Prometheus metrics, all prefixed
// egressflow_controller_, in one group per concern.
type metrics struct {
	serviceMetrics
	*syncMetrics // holds a mutex
	livenessMetrics
	rolloutMetrics
	egressIPMetrics
}

// serviceMetrics are the EgressServices' hosts.
type serviceMetrics struct {
	assignments    prometheus.Counter
	failovers      *prometheus.CounterVec
	eventToStatus  prometheus.Histogram
	withoutHost    prometheus.Gauge
	noMatchingNode prometheus.Gauge
}

// syncMetrics are the work queues', the leadership's and the writes'.
type syncMetrics struct {
	syncs        *prometheus.CounterVec
	lastSuccess  *prometheus.GaugeVec
	failingSyncs *prometheus.GaugeVec
	// failing holds, by queue, the keys whose latest sync failed: they
	// are being retried. Only this replica's current term adds to it.
	mu                sync.Mutex
	failing           map[string]map[any]bool
	leader            prometheus.Gauge
	apiWritesByResult *prometheus.CounterVec
	events            *prometheus.CounterVec
}

// livenessMetrics are the liveness judgement's (heartbeat.Judge, the
// probes).
type livenessMetrics struct {
	agentsBlind prometheus.Gauge
	deathsHeld  prometheus.Gauge
	// agentsRestarting counts the agents whose Lease carries the restart
	// mark (chosen last as hosts and holders meanwhile).
	agentsRestarting prometheus.Gauge
	// probeVerdicts counts the probe protocol's changes of an agent's
	// reachability, by verdict.
	probeVerdicts *prometheus.CounterVec
}

// rolloutMetrics are EgressQoS's, EgressFirewall's and
// AdminPolicyBasedExternalRoute's status.
type rolloutMetrics struct {
	qosStates            *prometheus.GaugeVec
	qosApplied           prometheus.Histogram
	firewallStates       *prometheus.GaugeVec
	firewallApplied      prometheus.Histogram
	externalRouteStates  *prometheus.GaugeVec
	externalRouteApplied prometheus.Histogram
	// routerStates are the EgressRouters by state (routerState).
	routerStates *prometheus.GaugeVec
}

// egressIPMetrics are the EgressIP assignment's, after the reference's
// egress_ips_{assign,unassign}_latency_seconds,
// egress_ips_node_unreachable_total and egress_ips_rebalance_total.
type egressIPMetrics struct {
	eipAssign          prometheus.Histogram
	eipUnassign        prometheus.Histogram
	eipNodeUnreachable *prometheus.CounterVec
	eipRebalances      prometheus.Counter
	eipAddresses       *prometheus.GaugeVec
}

// eventToStatusBuckets span a sub-millisecond in-memory decision up to the
// capped retry delay: exponential from 1 ms to about 33 s.
var eventToStatusBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{newServiceMetrics(), newSyncMetrics(), newLivenessMetrics(), newRolloutMetrics(), newEgressIPMetrics()}
	if reg != nil {
		reg.MustRegister(m.assignments, m.failovers, m.eventToStatus, m.withoutHost, m.noMatchingNode, m.syncs, m.lastSuccess, m.failingSyncs,
			m.leader, m.apiWritesByResult, m.events, m.agentsBlind, m.deathsHeld, m.agentsRestarting, m.probeVerdicts, m.qosStates, m.qosApplied,
			m.firewallStates, m.firewallApplied, m.externalRouteStates, m.externalRouteApplied, m.routerStates, m.eipAssign, m.eipUnassign, m.eipNodeUnreachable, m.eipRebalances, m.eipAddresses)
	}
	return m
}

func newServiceMetrics() serviceMetrics {
	return serviceMetrics{
		assignments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressflow_controller_assignments_total",
			Help: "Host assignments written to an EgressService's status.host (a node, not ALL), first assignments and moves alike.",
		}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_failovers_total",
			Help: "Services whose host stopped being a candidate, by cause (AgentLeaseExpired, AgentUnreachable, NodeNotReady, NodeDeleted, NotSelected, NoLocalEndpoint).",
		}, []string{"cause"}),
		eventToStatus: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_controller_event_to_status_seconds",
			Help:    "Time from the first event that made a service's status stale (object change, node change, agent Lease expiry) to its status being written.",
			Buckets: eventToStatusBuckets,
		}),
		withoutHost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_services_without_host",
			Help: "EgressServices whose status.host is empty (see their Ready condition for why).",
		}),
		noMatchingNode: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_services_no_matching_node",
			Help: "EgressServices that could have a host but find no candidate node (Ready reason NoMatchingNode): their endpoints leave with their own IPs. A subset of egressflow_controller_services_without_host.",
		}),
	}
}

func newSyncMetrics() *syncMetrics {
	m := &syncMetrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_syncs_total",
			Help: "Syncs by queue (service, node, egressqos, egressfirewall, egressip, externalroute, cloudprivateipconfig, cloudnode, egressrouter) and result (ok, error).",
		}, []string{"queue", "result"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_controller_last_successful_sync_timestamp_seconds",
			Help: "When the last sync that succeeded ended, by queue (service, node, egressqos, egressfirewall, egressip, externalroute, cloudprivateipconfig, cloudnode, egressrouter), in Unix seconds. Only the leader syncs; it re-syncs everything every --resync-period.",
		}, []string{"queue"}),
		failingSyncs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_controller_failing_syncs",
			Help: "Objects whose latest sync failed and that are being retried, by queue (service, node, egressqos, egressfirewall, egressip, externalroute, cloudprivateipconfig, cloudnode, egressrouter); 0 on a replica that does not lead.",
		}, []string{"queue"}),
		failing: map[string]map[any]bool{},
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_leader",
			Help: "1 while this replica leads (and so writes), else 0.",
		}),
		apiWritesByResult: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_api_writes_total",
			Help: "API writes by the controller by kind (status, node_labels, input_labels, qos_status, firewall_status, egressip_status, externalroute_status, cloudip_status, cloudip_finalizer, cloudip_request, node_annotations, egressrouter_status, egressrouter_service) and result (ok, conflict, error).",
		}, []string{"kind", "result"}),
		events: events.NewCounter("egressflow_controller"),
	}
	// Known label values start at 0, so that a rate or a sum over them
	// exists before the first failure.
	for _, queue := range []string{queueService, queueNode, queueQoS, queueFirewall, queueEgressIP, queueExternalRoute, queueCloudIP, queueCloudNode, queueEgressRouter} {
		m.failingSyncs.WithLabelValues(queue)
		for _, result := range []string{"ok", "error"} {
			m.syncs.WithLabelValues(queue, result)
		}
	}
	return m
}

func newLivenessMetrics() livenessMetrics {
	return livenessMetrics{
		agentsBlind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_agents_unseen",
			Help: "1 while this replica has observed no agent Lease renewal for longer than heartbeat.DefaultBlindAfter (API server or watch away): no agent is judged dead meanwhile.",
		}),
		deathsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_failovers_held",
			Help: "Agents whose Lease ran out but whose failover the disruption rule holds back (one is let through per heartbeat.DefaultDisruptedFailoverInterval).",
		}),
		agentsRestarting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_agents_restarting",
			Help: "Agents that handed their Lease over for a restart (a rolling update) and whose successor has not renewed it yet: their silence is not judged meanwhile, and they are chosen last as new hosts and holders.",
		}),
		probeVerdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_probe_verdicts_total",
			Help: "Changes of an agent's reachability by the leader's probes (heartbeat.Prober), by verdict: unreachable (the leader and a witness could not reach it: it is failed over, unless the disruption rule holds it back) or reachable (it answers again).",
		}, []string{"verdict"}),
	}
}

func newRolloutMetrics() rolloutMetrics {
	m := rolloutMetrics{
		qosStates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_controller_egressqos",
			Help: "EgressQoS objects (named default) by state, their Ready reason: applied (on every live agent's node), pending (some agent has not applied the current generation), invalid (a rule cannot be applied; the others are), unknown (resourceVersion not an etcd revision). 0 on a replica that does not lead.",
		}, []string{"state"}),
		qosApplied: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_controller_egressqos_apply_seconds",
			Help:    "Time from the controller first seeing an EgressQoS generation to every live agent having applied it (generations that waited for agents only).",
			Buckets: eventToStatusBuckets,
		}),
		firewallStates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_controller_egressfirewall",
			Help: "EgressFirewall objects by state, status.status's first word: applied (on every live agent's node), pending (some agent has not applied the current generation), invalid (a rule cannot be applied, the others are; or the object is not named default and applies nowhere), unknown (resourceVersion not an etcd revision). 0 on a replica that does not lead.",
		}, []string{"state"}),
		firewallApplied: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_controller_egressfirewall_apply_seconds",
			Help:    "Time from the controller first seeing an EgressFirewall generation to every live agent having applied it (generations that waited for agents only).",
			Buckets: eventToStatusBuckets,
		}),
		externalRouteStates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_controller_externalroute",
			Help: "AdminPolicyBasedExternalRoute objects by state, status.messages' first word: applied (on every live agent's node), pending (some agent has not applied the current generation), invalid (a selector or static hop cannot be read; the rest applies), unknown (resourceVersion not an etcd revision). Next hops down do not count: see the agents' egressflow_agent_externalroute_policy_hops. 0 on a replica that does not lead.",
		}, []string{"state"}),
		externalRouteApplied: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_controller_externalroute_apply_seconds",
			Help:    "Time from the controller first seeing an AdminPolicyBasedExternalRoute generation to every live agent having applied it (generations that waited for agents only).",
			Buckets: eventToStatusBuckets,
		}),
	}
	m.routerStates = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressflow_controller_egressrouters",
		Help: "EgressRouter objects by state: available (its holder serves it), pending (a holder is taking it over), degraded (no node can serve it; its Degraded condition says why). 0 on a replica that does not lead.",
	}, []string{"state"})
	setStates(m.qosStates, nil)
	setStates(m.firewallStates, nil)
	setStates(m.externalRouteStates, nil)
	setRouterStates(m.routerStates, nil)
	return m
}

func newEgressIPMetrics() egressIPMetrics {
	m := egressIPMetrics{
		eipAssign: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_controller_egressip_assign_latency_seconds",
			Help:    "Time from the controller learning that an EgressIP address needs a node (the object created or changed, its holder lost) to the status write that names the node. Moves count too.",
			Buckets: eventToStatusBuckets,
		}),
		eipUnassign: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_controller_egressip_unassign_latency_seconds",
			Help:    "Time from the controller learning that an EgressIP address must leave its node (the object deleted, the address removed, the node lost) to the status write that removes it (for a deleted object: to the controller forgetting it).",
			Buckets: eventToStatusBuckets,
		}),
		eipNodeUnreachable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_egressip_node_unreachable_total",
			Help: "Egress nodes that became unreachable while holding EgressIP addresses, by cause (AgentLeaseExpired, AgentUnreachable, NodeNotReady).",
		}, []string{"cause"}),
		eipRebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressflow_controller_egressip_rebalance_total",
			Help: "EgressIP addresses moved from one node to another (the status write that names the new node).",
		}),
		eipAddresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressflow_controller_egressip_addresses",
			Help: "EgressIP addresses by state: held (a node holds it) or unheld (none does; the EgressIP's Assigned condition says why). Only the leader's value describes the cluster.",
		}, []string{"state"}),
	}
	for _, cause := range []string{"AgentLeaseExpired", "AgentUnreachable", "NodeNotReady"} {
		m.eipNodeUnreachable.WithLabelValues(cause)
	}
	for _, state := range []string{"held", "unheld"} {
		m.eipAddresses.WithLabelValues(state)
	}
	return m
}

// The queue label's values.
const (
	queueService  = "service"
	queueNode     = "node"
	queueQoS      = "egressqos"
	queueFirewall = "egressfirewall"
	queueEgressIP = "egressip"
	// queueExternalRoute is AdminPolicyBasedExternalRoute's.
	queueExternalRoute = "externalroute"
	// queueCloudIP is CloudPrivateIPConfig's, queueCloudNode the nodes
	// whose cloud capacity is published.
	queueCloudIP   = "cloudprivateipconfig"
	queueCloudNode = "cloudnode"
	// queueEgressRouter is EgressRouter's.
	queueEgressRouter = "egressrouter"
)

// synced records the sync of key from queue that ended at now with err.
func (m *metrics) synced(queue string, key any, err error, now time.Time) {
	m.syncs.WithLabelValues(queue, resultLabel(err)).Inc()
	if err == nil {
		m.lastSuccess.WithLabelValues(queue).Set(float64(now.UnixNano()) / 1e9)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	failing := m.failing[queue]
	if failing == nil {
		failing = map[any]bool{}
		m.failing[queue] = failing
	}
	if err != nil {
		failing[key] = true
	} else {
		delete(failing, key)
	}
	m.failingSyncs.WithLabelValues(queue).Set(float64(len(failing)))
}

// stoppedLeading forgets the failing keys: their retries ended with the
// term, and the next leader syncs every object again.
// observeProbe counts a probe verdict.
func (m *metrics) observeProbe(reachable bool) {
	verdict := "unreachable"
	if reachable {
		verdict = "reachable"
	}
	m.probeVerdicts.WithLabelValues(verdict).Inc()
}

func (m *metrics) stoppedLeading() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for queue := range m.failing {
		delete(m.failing, queue)
		m.failingSyncs.WithLabelValues(queue).Set(0)
	}
}

func resultLabel(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// boolGauge is a gauge's value for b: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
