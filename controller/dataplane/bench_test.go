package dataplane

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/egressflow/egressflow/openflow"
)

// benchCluster is n services of 10 endpoints each, on 10 nodes, hosted on
// n1 (4 in 5) or n2: the shape of make bench-agent, without an API server.
func benchCluster(n int) Cluster {
	c := Cluster{Services: map[string]*corev1.Service{}, EndpointSlices: map[string][]*discoveryv1.EndpointSlice{}}
	base := baseCluster()
	c.Nodes, c.Leases = base.Nodes, base.Leases
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		host := "n1"
		if i%5 == 4 {
			host = "n2"
		}
		c.EgressServices = append(c.EgressServices, egressService("shop", name, "", "", host))
		lb := netip.AddrFrom4([4]byte{192, 0, byte(2 + i/250), byte(i % 250)})
		c.Services["shop/"+name] = lbService("shop", name, lb.String())
		var pairs []string
		for e := range 10 {
			v := uint32(i*10+e) + 2 // 100,000 distinct IPs in benchConfig's pod CIDR
			pairs = append(pairs, fmt.Sprintf("n%d", e+1), netip.AddrFrom4([4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)}).String())
		}
		c.EndpointSlices["shop/"+name] = []*discoveryv1.EndpointSlice{endpointSlice(pairs...)}
	}
	return c
}

// benchConfig is node n1 of a cluster whose pods are in 10.0.0.0/8.
var benchConfig = NodeConfig{Name: "n1", ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ServiceCIDRs: n1Config.ServiceCIDRs}

// BenchmarkFullSync is the pure part of one agent sync at 10,000 services x
// 10 endpoints: Compute, Flows and Diff against what is installed.
func BenchmarkFullSync(b *testing.B) {
	cluster := benchCluster(10000)
	installed := InstalledOf(Flows(benchConfig, Compute(benchConfig, cluster, tables), Ports{Uplink: 1}))
	if want := 10000 * 10 * 2; installed.Len() < want { // a redirect and a SNAT or steer flow per endpoint
		b.Fatalf("%d flows installed, want at least %d", installed.Len(), want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		state := Compute(benchConfig, cluster, tables)
		flows := Flows(benchConfig, state, Ports{Uplink: 1})
		if c := Diff(flows, installed); !c.Empty() {
			b.Fatal("changes in a no-op sync")
		}
	}
}

// BenchmarkEndpointAdded is the pure part of the agent's sync after one
// endpoint joined one of 10,000 services: the planner update, that
// service's flows and the shared ones, and their diff.
func BenchmarkEndpointAdded(b *testing.B) {
	cluster := benchCluster(10000)
	p := NewPlanner(benchConfig, tables)
	p.SetNodes(cluster.Nodes)
	p.SetLeases(cluster.Leases)
	for _, es := range cluster.EgressServices {
		k := es.Namespace + "/" + es.Name
		p.Update(k, ServiceInputs{EgressService: es, Service: cluster.Services[k], EndpointSlices: cluster.EndpointSlices[k]})
	}

	key, inputs := endpointAdded(cluster)
	// As the agent does, each changed service's new flows are diffed
	// against its flows as last applied, re-rendered.
	ports := Ports{Uplink: 1}
	applied := map[string]Service{}
	applied[key], _ = p.Service(key)
	shared := SharedFlows(p.Shared(), ports)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var c Changes
		diff := func(desired, sent []*openflow.FlowMod) {
			installed := InstalledOf(sent)
			c.DiffFlows(desired, installed)
			c.DeleteRest(installed)
		}
		for _, k := range p.Update(key, inputs[i%2]) {
			s, _ := p.Service(k)
			diff(ServiceFlows(s, ports), ServiceFlows(applied[k], ports))
			applied[k] = s
		}
		next := SharedFlows(p.Shared(), ports)
		diff(next, shared)
		shared = next
		if len(c.Add) != 2-2*(i%2) || len(c.Delete) != 2*(i%2) {
			b.Fatalf("round %d: %d adds %d deletes, want the endpoint's two flows added or deleted", i, len(c.Add), len(c.Delete))
		}
		i++
	}
}

// BenchmarkLedgerEndpointAdded is BenchmarkEndpointAdded as the agent runs
// it, through its Ledger, after a full sync of the 10,000 services: the
// planner update, the ledger's diff of that service and the shared flows,
// the commit and the stale translations.
func BenchmarkLedgerEndpointAdded(b *testing.B) {
	cluster := benchCluster(10000)
	p := NewPlanner(benchConfig, tables)
	p.SetNodes(cluster.Nodes)
	p.SetLeases(cluster.Leases)
	l := NewLedger()
	for _, es := range cluster.EgressServices {
		k := es.Namespace + "/" + es.Name
		l.Changed(p, p.Update(k, ServiceInputs{EgressService: es, Service: cluster.Services[k], EndpointSlices: cluster.EndpointSlices[k]}))
	}
	var sent int
	out := countingOutput(&sent)
	ports := Ports{Uplink: 1}
	full, err := l.Diff(p, ports, NewInstalled(nil), out)
	if err != nil {
		b.Fatal(err)
	}
	l.Commit(full)
	l.Flushed()

	key, inputs := endpointAdded(cluster)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Changed(p, p.Update(key, inputs[i%2]))
		sent = 0
		d, err := l.Diff(p, ports, nil, out)
		if err != nil {
			b.Fatal(err)
		}
		if sent != 2 {
			b.Fatalf("round %d: %d flow mods, want the endpoint's two flows added or deleted", i, sent)
		}
		l.Commit(d)
		if stale := l.StaleSources(); len(stale) != i%2 {
			b.Fatalf("round %d: stale sources %v", i, stale)
		}
		l.Flushed()
		i++
	}
}

// countingOutput is a DiffOutput that counts the flow mods it is sent in
// *sent, and dumps an empty bridge.
func countingOutput(sent *int) DiffOutput {
	return DiffOutput{
		Send: func(c *Changes) error {
			*sent += len(c.Add) + len(c.Delete)
			c.Add, c.Delete = c.Add[:0], c.Delete[:0]
			return nil
		},
		Dump: func(func(openflow.FlowEntry) error) error { return nil },
	}
}

// endpointAdded is the key of service 42 of a benchCluster, and its inputs
// with one endpoint more and as they are, in that order.
func endpointAdded(cluster Cluster) (string, []ServiceInputs) {
	const key = "shop/svc-42"
	es := cluster.EgressServices[42]
	grown := cluster.EndpointSlices[key][0].DeepCopy()
	grown.Endpoints = append(grown.Endpoints, grown.Endpoints[0])
	grown.Endpoints[len(grown.Endpoints)-1].Addresses = []string{"10.200.0.1"}
	return key, []ServiceInputs{
		{EgressService: es, Service: cluster.Services[key], EndpointSlices: []*discoveryv1.EndpointSlice{grown}},
		{EgressService: es, Service: cluster.Services[key], EndpointSlices: cluster.EndpointSlices[key]},
	}
}
