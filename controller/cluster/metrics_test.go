package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value is a gauge's or a counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.GetGauge().GetValue()
	}
	return d.GetCounter().GetValue()
}

// failing_syncs counts the keys of a queue whose latest sync failed: a key
// counts once however often it fails, leaves on its first success, and
// every key is forgotten when the term ends. A success sets the queue's
// timestamp; a failure leaves it.
func TestSyncMetrics(t *testing.T) {
	m := newMetrics(prometheus.NewPedanticRegistry())
	failing := func(queue string) float64 { return value(t, m.failingSyncs.WithLabelValues(queue)) }
	last := func(queue string) float64 { return value(t, m.lastSuccess.WithLabelValues(queue)) }
	boom := errors.New("conflict")
	at := time.Unix(1700000000, 500_000_000)

	m.synced(queueService, "shop/web", boom, at)
	m.synced(queueService, "shop/web", boom, at)
	m.synced(queueService, "shop/db", boom, at)
	m.synced(queueNode, "node-a", nil, at)
	if failing(queueService) != 2 || failing(queueNode) != 0 {
		t.Errorf("failing service %v, node %v; want 2, 0", failing(queueService), failing(queueNode))
	}
	if last(queueService) != 0 || last(queueNode) != 1700000000.5 {
		t.Errorf("last success service %v, node %v; want 0, 1700000000.5", last(queueService), last(queueNode))
	}
	m.synced(queueService, "shop/web", nil, at.Add(time.Second))
	if failing(queueService) != 1 || last(queueService) != 1700000001.5 {
		t.Errorf("after web's success: failing %v, last success %v; want 1, 1700000001.5", failing(queueService), last(queueService))
	}
	if got := value(t, m.syncs.WithLabelValues(queueService, "error")); got != 3 {
		t.Errorf("syncs_total{service,error} = %v, want 3", got)
	}
	m.stoppedLeading()
	if failing(queueService) != 0 {
		t.Errorf("failing after the term ended: %v, want 0", failing(queueService))
	}
}
