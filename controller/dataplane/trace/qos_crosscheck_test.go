package trace_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
)

// TestCrossCheckQoSFlows installs the TableQoS that dataplane.ComputeQoS
// and QoSFlows render (EgressQoS, issue 18) alone on a real bridge, behind
// a table 0 that sends every packet to TableQoS and a TableEgress that
// sends it out of the uplink. Open vSwitch accepts
// them (one bundle), and the tracer and ofproto/trace agree on the DSCP of
// every generated packet; dataplane's TestQoSMatchesSpecification holds
// the tracer's answers to the API's rule.
func TestCrossCheckQoSFlows(t *testing.T) {
	b := startBridge(t)
	t.Logf("seed %d", crossCheckSeed)
	rnd := rand.New(rand.NewPCG(crossCheckSeed, 18))

	selector := func(app string) esv1.LabelSelector {
		return esv1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	qoses := []*esv1.EgressQoS{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "default"}, Spec: esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
			{DSCP: 46, DstCIDR: "203.0.113.0/25", PodSelector: selector("voice")},
			{DSCP: 34, DstCIDR: "2001:db8:ff::/64", PodSelector: selector("voice")},
			{DSCP: 10, DstCIDR: "203.0.113.0/24"},
			{DSCP: 8, PodSelector: selector("web")},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "bank", Name: "default"}, Spec: esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
			{DSCP: 63},
		}}},
	}
	pod := func(ns, app string, ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ips[0], Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("shop", "voice", "10.244.1.5", "fd00:10:244:1::5"),
		pod("shop", "web", "10.244.1.6", "fd00:10:244:1::6"),
		pod("shop", "db", "10.244.1.7"),
		pod("bank", "api", "10.244.1.8", "fd00:10:244:1::8"),
	}
	exempt := append(append([]netip.Prefix{}, podCIDRs...), serviceCIDRs...)
	qos := dataplane.ComputeQoS(nodeConfig("n1"), qoses, pods)
	flows := append([]*openflow.FlowMod{
		{Command: openflow.FlowAdd, Cookie: dataplane.CookiePrefix, Table: dataplane.TableClassify, Priority: 1,
			Instructions: []openflow.Instruction{openflow.GotoTable{Table: dataplane.TableQoS}}},
		{Command: openflow.FlowAdd, Cookie: dataplane.CookiePrefix, Table: dataplane.TableEgress, Priority: 1,
			Instructions: []openflow.Instruction{openflow.Apply(openflow.Output{Port: b.uplink})}},
	}, dataplane.QoSFlows(qos, exempt)...)
	b.install(t, flows, dataplane.CookiePrefix, dataplane.CookiePrefixMask)

	sources := []string{"10.244.1.5", "fd00:10:244:1::5", "10.244.1.6", "fd00:10:244:1::6", "10.244.1.7", "10.244.1.8",
		"fd00:10:244:1::8", "10.244.1.99", "fd00:10:244:1::99"}
	destinations := []string{"203.0.113.1", "203.0.113.200", "198.51.100.7", "10.244.2.9", "10.96.0.10",
		"2001:db8:ff::1", "2001:db8:fe::1", "fd00:10:244:2::9"}
	probes := make([]probe, packetsPerScenario)
	for i := range probes {
		src, dst := pickPair(rnd, sources, destinations)
		p := trace.Packet{InPort: openflow.PortLocal, EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd), Src: src, Dst: dst,
			DSCP: pick(rnd, []uint8{0, 0, 12})}
		randomTransport(rnd, &p)
		probes[i] = probe{packet: p, state: openflow.CTStateTrk | openflow.CTStateNew}
	}
	results := crossCheck(t, b, flows, probes)
	coverage(t, flows, probes, results)
	marked := map[uint8]int{}
	for _, r := range results {
		for _, e := range r.Emits {
			marked[e.Packet.DSCP]++
		}
	}
	// Every rule's mark, and the unmarked, must be among the ends, or
	// agreement proves less.
	for _, dscp := range []uint8{46, 34, 10, 8, 63, 0, 12} {
		if marked[dscp] == 0 {
			t.Errorf("no packet left with DSCP %d (%v)", dscp, fmt.Sprint(marked))
		}
	}
}
