package agent

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node agent's Prometheus metrics, prefixed egressflow_agent_.
type Metrics struct {
	flows        *flowGauge
	syncDuration prometheus.Histogram
	syncs        *prometheus.CounterVec
	flowMods     prometheus.Counter
	connected    prometheus.GaugeFunc
	// isConnected is read at scrape time: nothing else happens while the
	// connection is down.
	isConnected atomic.Pointer[func() bool]
	lastError   prometheus.Gauge
	ctFlushes   prometheus.Counter
}

// syncBuckets span a no-op sync (well under a millisecond) up to a full
// sync of 100k flows (about a second): exponential from 100 µs to ~3 s.
var syncBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

// NewMetrics creates the agent's metrics and registers them with reg (nil:
// not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		flows: &flowGauge{
			desc: prometheus.NewDesc("egressflow_agent_flows",
				"Flows egressflow wants on the bridge, by service (namespace/name; \"\" for the shared flows).",
				[]string{"service"}, nil),
			count: map[string]int{},
		},
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressflow_agent_sync_duration_seconds",
			Help:    "Duration of a node sync: compute, diff, bundle, ip rules, conntrack flushes.",
			Buckets: syncBuckets,
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressflow_agent_syncs_total",
			Help: "Node syncs by result (ok, error).",
		}, []string{"result"}),
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
			Help: "Conntrack flushes of endpoints whose SNAT went away or changed.",
		}),
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
		reg.MustRegister(m.flows, m.syncDuration, m.syncs, m.flowMods, m.connected, m.lastError, m.ctFlushes)
	}
	return m
}

// flowGauge is egressflow_agent_flows, made at scrape time from a count per
// service that the sync keeps. A GaugeVec would keep a metric, its label
// pair and its hash for every service, about 450 bytes each: some 4.5 MB at
// 10,000 services, held for a figure read once a scrape.
type flowGauge struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	count map[string]int
}

// set records how many flows service wants.
func (g *flowGauge) set(service string, flows int) {
	g.mu.Lock()
	g.count[service] = flows
	g.mu.Unlock()
}

// remove forgets a service that wants no flows any more.
func (g *flowGauge) remove(service string) {
	g.mu.Lock()
	delete(g.count, service)
	g.mu.Unlock()
}

func (g *flowGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect sends the counts as they are now; the sync waits only while they
// are copied, not while the scrape reads them.
func (g *flowGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	metrics := make([]prometheus.Metric, 0, len(g.count))
	for service, n := range g.count {
		metrics = append(metrics, prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), service))
	}
	g.mu.Unlock()
	for _, m := range metrics {
		ch <- m
	}
}
