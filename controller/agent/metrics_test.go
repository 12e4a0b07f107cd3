package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// samples gathers reg and returns the samples of the named metrics, keyed
// as the text exposition writes them: name{label="value",...}.
func samples(t testing.TB, reg prometheus.Gatherer, names ...string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := f.GetName()
			if len(labels) > 0 {
				sort.Strings(labels)
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// The flows gauges: every node's totals by role, and a per-service series
// only for the services the node hosts. A service that stops being hosted
// here (moved, fenced or gone) loses its series, and its flows count under
// its new role.
func TestFlowGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	g := m.flows
	check := func(step string, want map[string]float64) {
		t.Helper()
		got := samples(t, reg, "egressflow_agent_flows", "egressflow_agent_service_flows")
		if !maps.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", step, got, want)
		}
	}
	check("before any sync", map[string]float64{
		`egressflow_agent_flows{role="host"}`: 0, `egressflow_agent_flows{role="steer"}`: 0, `egressflow_agent_flows{role="shared"}`: 0,
	})

	g.set("shop/web", dataplane.RoleHost, 4)
	g.set("shop/db", dataplane.RoleSteer, 2)
	g.set("shop/net", dataplane.RoleNetwork, 0)
	g.setShared(5)
	check("one hosted, one steered, one Network", map[string]float64{
		`egressflow_agent_flows{role="host"}`: 4, `egressflow_agent_flows{role="steer"}`: 2,
		`egressflow_agent_flows{role="network"}`: 0, `egressflow_agent_flows{role="shared"}`: 5,
		`egressflow_agent_service_flows{service="shop/web"}`: 4,
	})

	g.set("shop/web", dataplane.RoleHost, 6)
	g.set("shop/db", dataplane.RoleHost, 3) // moved here
	check("db moved here", map[string]float64{
		`egressflow_agent_flows{role="host"}`: 9, `egressflow_agent_flows{role="steer"}`: 0,
		`egressflow_agent_flows{role="network"}`: 0, `egressflow_agent_flows{role="shared"}`: 5,
		`egressflow_agent_service_flows{service="shop/web"}`: 6, `egressflow_agent_service_flows{service="shop/db"}`: 3,
	})

	g.set("shop/web", dataplane.RoleSteer, 6) // moved away
	g.remove("shop/db")
	g.remove("shop/never")
	g.setShared(7)
	check("web moved away, db gone", map[string]float64{
		`egressflow_agent_flows{role="host"}`: 0, `egressflow_agent_flows{role="steer"}`: 6,
		`egressflow_agent_flows{role="network"}`: 0, `egressflow_agent_flows{role="shared"}`: 7,
	})
}

// Each heartbeat renewal is counted by its result, every result from 0.
func TestLeaseRenewalCounter(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	const name = "egressflow_agent_lease_renewals_total"
	if got, want := samples(t, reg, name), map[string]float64{
		name + `{result="ok"}`: 0, name + `{result="error"}`: 0, name + `{result="skipped"}`: 0,
	}; !maps.Equal(got, want) {
		t.Errorf("before any renewal: %v, want %v", got, want)
	}
	for _, r := range []heartbeat.RenewalResult{heartbeat.RenewalOK, heartbeat.RenewalOK, heartbeat.RenewalError, heartbeat.RenewalSkipped} {
		m.ObserveRenewal(r)
	}
	if got, want := samples(t, reg, name), map[string]float64{
		name + `{result="ok"}`: 2, name + `{result="error"}`: 1, name + `{result="skipped"}`: 1,
	}; !maps.Equal(got, want) {
		t.Errorf("after renewals: %v, want %v", got, want)
	}
}

// TestAgentFlowMetrics: two nodes on a real API server and real OVS, a
// service hosted on node 1 with an endpoint on each node. Only node 1
// exports the service's series, and it counts exactly the service's flows
// on its bridge; node 2 counts the flows it holds for the service under
// role steer. When the host moves to node 2, the series moves with it.
// Both agents report a successful sync's time.
func TestAgentFlowMetrics(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	a, b := e.addPod(n1, "a"), e.addPod(n2, "b")
	agents := map[string]*runningAgent{}
	for _, n := range e.topo.Nodes {
		agents[n.Name] = e.startAgent(n)
		agents[n.Name].waitHealthy(t)
	}
	lb := netip.MustParseAddr("192.0.2.10")
	e.announce(lb, n1)
	e.createService("web", lb, n1.Name, a, b)

	serviceFilter := fmt.Sprintf("cookie=%#x/%#x", dataplane.Cookie(0, "shop/web"), dataplane.ServiceCookieMask)
	const service = `egressflow_agent_service_flows{service="shop/web"}`
	// hostedOn checks that host alone exports the service's series, equal
	// to the service's flows on its bridge, and that every other node
	// counts that service's flows under role steer.
	hostedOn := func(host string) func() error {
		return func() error {
			for _, n := range e.topo.Nodes {
				got := samples(t, agents[n.Name].metrics, "egressflow_agent_flows", "egressflow_agent_service_flows", "egressflow_agent_last_successful_sync_timestamp_seconds")
				onBridge := float64(n.FlowCount(t, serviceFilter))
				if onBridge == 0 {
					return fmt.Errorf("%s: no flow of shop/web on the bridge yet", n.Name)
				}
				v, exported := got[service]
				switch {
				case n.Name == host && (!exported || v != onBridge):
					return fmt.Errorf("host %s: %s = %v (exported %v), want the %v flows on its bridge", n.Name, service, v, exported, onBridge)
				case n.Name == host && got[`egressflow_agent_flows{role="host"}`] != onBridge:
					return fmt.Errorf("host %s: flows by role %v, want host = %v", n.Name, got, onBridge)
				case n.Name != host && exported:
					return fmt.Errorf("%s, not the host, exports %s = %v", n.Name, service, v)
				case n.Name != host && got[`egressflow_agent_flows{role="steer"}`] != onBridge:
					return fmt.Errorf("%s: flows by role %v, want steer = the %v flows of shop/web on its bridge", n.Name, got, onBridge)
				case got[`egressflow_agent_flows{role="shared"}`] == 0:
					return fmt.Errorf("%s: no shared flows counted: %v", n.Name, got)
				case got["egressflow_agent_last_successful_sync_timestamp_seconds"] <= 0:
					return fmt.Errorf("%s: no successful sync's time: %v", n.Name, got)
				}
			}
			return nil
		}
	}
	eventually(t, "shop/web's series on "+n1.Name, hostedOn(n1.Name))
	e.expectSource(a, "udp", lb)

	e.admin.SetHost(t, "shop", "web", n2.Name)
	e.announce(lb, n2)
	eventually(t, "shop/web's series on "+n2.Name, hostedOn(n2.Name))
	e.expectSource(b, "udp", lb)
}
