package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus metrics, all prefixed
// egressflow_controller_.
type metrics struct {
	assignments       prometheus.Counter
	failovers         *prometheus.CounterVec
	eventToStatus     prometheus.Histogram
	withoutHost       prometheus.Gauge
	syncs             *prometheus.CounterVec
	leader            prometheus.Gauge
	apiWritesByResult *prometheus.CounterVec
	events            *prometheus.CounterVec
}

// eventToStatusBuckets span a sub-millisecond in-memory decision up to the
// capped retry delay: exponential from 1 ms to about 33 s.
var eventToStatusBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		assignments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressflow_controller_assignments_total",
			Help: "Host assignments written to an EgressService's status.host (a node, not ALL), first assignments and moves alike.",
		}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_failovers_total",
			Help: "Services whose host stopped being a candidate, by cause (AgentLeaseExpired, NodeNotReady, NodeDeleted, NotSelected, NoLocalEndpoint).",
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
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_syncs_total",
			Help: "Syncs by queue (service, node) and result (ok, error).",
		}, []string{"queue", "result"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressflow_controller_leader",
			Help: "1 while this replica leads (and so writes), else 0.",
		}),
		apiWritesByResult: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_api_writes_total",
			Help: "API writes by the controller by kind (status, node_labels) and result (ok, conflict, error).",
		}, []string{"kind", "result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_controller_events_total",
			Help: "Events emitted on EgressServices, by type and reason (client-go may drop some under a burst).",
		}, []string{"type", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.assignments, m.failovers, m.eventToStatus, m.withoutHost, m.syncs, m.leader, m.apiWritesByResult, m.events)
	}
	return m
}

func resultLabel(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
