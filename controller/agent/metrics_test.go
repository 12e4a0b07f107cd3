package agent

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The flows gauge exposes one sample per service that wants flows, with
// the latest count, and none for a service removed.
func TestFlowGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	m.flows.set("shop/web", 4)
	m.flows.set("shop/db", 2)
	m.flows.set("", 5)
	m.flows.set("shop/web", 6)
	m.flows.remove("shop/db")
	m.flows.remove("shop/never")

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "egressflow_agent_flows" {
			continue
		}
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) != 1 || s.GetLabel()[0].GetName() != "service" {
				t.Fatalf("sample labels %v, want service only", s.GetLabel())
			}
			got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
		}
	}
	if want := map[string]float64{"shop/web": 6, "": 5}; !maps.Equal(got, want) {
		t.Fatalf("egressflow_agent_flows = %v, want %v", got, want)
	}
}
