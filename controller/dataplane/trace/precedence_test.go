package trace_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
)

// uplink is the uplink's port number in the pure tests.
const uplink = 1

// TestPrecedenceOnPureState shows how a test asserts the precedence
// between parts of the pipeline with no switch: compute a node's desired
// state from API objects, render its flows, trace packets through them.
// The EgressIP, EgressQoS and EgressFirewall issues assert their order
// against EgressService and the pod guard this way.
//
// Here: web's endpoint 10.244.1.5 is a known pod of n1 that no service is
// about to claim, so the pod guard admits it too; the endpoint's flow
// outranks the admission, and its packet leaves SNATed to web's LB IP.
// The exemptions outrank the SNAT. A held pod, an unknown one and an
// endpoint whose host has no known MAC are dropped.
func TestPrecedenceOnPureState(t *testing.T) {
	cluster := testCluster()
	n1 := nodeConfig("n1")
	state := dataplane.Compute(n1, cluster, routingTables)
	endpoint := netip.MustParseAddr("10.244.1.5")
	if !slices.Contains(state.Admitted, endpoint) {
		t.Fatalf("the pod guard does not admit %v, so this test would not see the endpoint's flow outrank an admission: %v", endpoint, state.Admitted)
	}
	bridgeMAC, _ := net.ParseMAC(n1MAC)
	tables, err := trace.New(append(dataplane.Flows(n1, state, dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	n2, _ := net.ParseMAC(n2MAC)

	// routedOut is a pod's packet as the host stack sends it towards the
	// uplink: from LOCAL.
	routedOut := func(src, dst string) trace.Result {
		t.Helper()
		return mustTrace(t, tables, trace.Packet{
			InPort: openflow.PortLocal, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
			Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: 443,
		}, trace.Conntrack{})
	}
	lastHit := func(r trace.Result) uint64 { return r.Hits[len(r.Hits)-1].Flow.Cookie }
	leaves := func(name string, r trace.Result, port uint32, check func(trace.Packet) bool) {
		t.Helper()
		if len(r.Emits) != 1 || r.Emits[0].Port != port || !check(r.Emits[0].Packet) {
			t.Errorf("%s: want one output to %s, got\n%v", name, openflow.PortName(port), r)
		}
	}

	r := routedOut("10.244.1.5", "198.51.100.7")
	leaves("web's endpoint, admitted too", r, uplink, func(p trace.Packet) bool { return p.Src == netip.MustParseAddr("192.0.2.10") })
	if r.Hits[0].Flow.Cookie != dataplane.Cookie(dataplane.KindRedirect, "shop/web") || r.Hits[len(r.Hits)-2].Flow.Cookie != dataplane.Cookie(dataplane.KindSNAT, "shop/web") ||
		lastHit(r) != dataplane.Cookie(dataplane.KindUplink, "") {
		t.Errorf("web's endpoint took another path than its redirect, SNAT and uplink flows:\n%v", r)
	}
	// A packet of the endpoint's that conntrack cannot tie to a
	// connection (an ICMP error about one this host never saw) is not
	// translated: it must not leave with the pod's address.
	for _, flow := range [][2]string{{"10.244.1.5", "198.51.100.7"}, {"fd00:10:244:1::5", "2001:db8:ff::1"}} {
		endpointIP := flow[0]
		r = mustTrace(t, tables, trace.Packet{InPort: openflow.PortLocal, Src: netip.MustParseAddr(endpointIP), Dst: netip.MustParseAddr(flow[1]),
			Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: 443}, trace.Conntrack{States: []uint32{openflow.CTStateTrk | openflow.CTStateInv}})
		if !r.Dropped() || lastHit(r) != dataplane.Cookie(dataplane.KindUplink, "") {
			t.Errorf("an untranslatable packet of web's endpoint %s was not dropped after SNAT:\n%v", endpointIP, r)
		}
	}
	r = routedOut("fd00:10:244:1::5", "2001:db8:ff::1")
	leaves("web's IPv6 endpoint", r, uplink, func(p trace.Packet) bool { return p.Src == netip.MustParseAddr("2001:db8::10") })

	r = routedOut("10.244.1.5", "10.244.2.9")
	leaves("web's endpoint to a pod", r, openflow.PortNormal, func(p trace.Packet) bool { return p.Src == endpoint })
	if lastHit(r) != dataplane.Cookie(dataplane.KindExempt, "") {
		t.Errorf("web's endpoint to a pod was not exempt:\n%v", r)
	}

	r = routedOut("10.244.1.9", "198.51.100.7")
	leaves("a bystander pod", r, openflow.PortNormal, func(p trace.Packet) bool { return p.Src == netip.MustParseAddr("10.244.1.9") })
	if lastHit(r) != dataplane.Cookie(dataplane.KindAdmit, "") {
		t.Errorf("the bystander was not admitted:\n%v", r)
	}

	r = routedOut("10.244.1.6", "198.51.100.7")
	leaves("api's endpoint, steered to n2", r, uplink, func(p trace.Packet) bool {
		return p.Src == netip.MustParseAddr("10.244.1.6") && p.EthDst == trace.MACFrom(n2)
	})
	r = routedOut("10.244.1.8", "198.51.100.7")
	leaves("net's endpoint (Network mode: routed by ip rule)", r, openflow.PortNormal, func(p trace.Packet) bool { return true })

	for _, src := range []string{"10.244.1.10", "fd00:10:244:1::10", "10.244.1.11", "10.244.1.7", "fd00:10:244:1::7"} {
		if r := routedOut(src, "198.51.100.7"); !r.Dropped() {
			t.Errorf("%s (held, unknown, or an endpoint of a host with no MAC) was not dropped:\n%v", src, r)
		}
	}
	// Held still reaches the cluster.
	r = routedOut("10.244.1.10", "10.96.0.10")
	leaves("a held pod to a ClusterIP", r, openflow.PortNormal, func(p trace.Packet) bool { return true })

	// A reply to web's LB IP is un-NATed by conntrack and goes to the host
	// stack; a new connection to it is not web's.
	reply := trace.Packet{InPort: uplink, Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("192.0.2.10"), Proto: trace.ProtoTCP, SrcPort: 443, DstPort: 40000}
	established := trace.Conntrack{States: []uint32{openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl}}
	leaves("a reply to the LB IP", mustTrace(t, tables, reply, established), openflow.PortLocal, func(p trace.Packet) bool { return p.CTZone != 0 })
	leaves("a new connection to the LB IP", mustTrace(t, tables, reply, trace.Conntrack{}), openflow.PortNormal, func(p trace.Packet) bool { return true })

	// Fenced, n1 hosts nothing: web's endpoint is dropped, not SNATed.
	n1.Fenced = true
	fenced, err := trace.New(append(dataplane.Flows(n1, dataplane.Compute(n1, cluster, routingTables), dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	if r := mustTrace(t, fenced, trace.Packet{InPort: openflow.PortLocal, Src: endpoint, Dst: netip.MustParseAddr("198.51.100.7"), Proto: trace.ProtoUDP}, trace.Conntrack{}); !r.Dropped() {
		t.Errorf("fenced: web's endpoint was not dropped:\n%v", r)
	}
}

// TestQoSPrecedenceOnPureState: with an EgressQoS in shop (rule 0: DSCP 46
// for web's pods towards 198.51.100.0/24; rule 1: DSCP 10 for every pod),
// the packets of n1's pods leave marked by the first rule that matches,
// and the EgressService decisions after TableQoS are unchanged: web's
// endpoint is marked and SNATed to web's LB IP (the DSCP survives the
// SNAT), api's is marked and steered to n2, a bystander is marked and
// admitted in TableEgress (not in TableClassify), a held pod is still
// dropped, and so are the endpoints of a service whose host has no known
// MAC, and a fenced node's. Cluster destinations stay unmarked, and a packet steered here
// from another node keeps the DSCP its own node gave it.
func TestQoSPrecedenceOnPureState(t *testing.T) {
	cluster := testCluster()
	cluster.EgressQoSes = []*esv1.EgressQoS{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressQoSName},
		Spec: esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
			{DSCP: 46, DstCIDR: "198.51.100.0/24", PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			{DSCP: 10},
		}},
	}}
	n1 := nodeConfig("n1")
	state := dataplane.Compute(n1, cluster, routingTables)
	bystander := netip.MustParseAddr(bystanders[0])
	if slices.Contains(state.Admitted, bystander) || !slices.Contains(state.AdmittedLate, bystander) {
		t.Fatalf("the bystander %v of a namespace with an EgressQoS must be admitted late: admitted %v, late %v", bystander, state.Admitted, state.AdmittedLate)
	}
	bridgeMAC, _ := net.ParseMAC(n1MAC)
	tables, err := trace.New(append(dataplane.Flows(n1, state, dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	n2, _ := net.ParseMAC(n2MAC)
	routedOut := func(src, dst string, dscp uint8) trace.Result {
		t.Helper()
		return mustTrace(t, tables, trace.Packet{
			InPort: openflow.PortLocal, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
			Proto: trace.ProtoUDP, SrcPort: 40000, DstPort: 53, DSCP: dscp,
		}, trace.Conntrack{})
	}
	for _, c := range []struct {
		name, src, dst string
		in             uint8
		port           uint32
		src2           string // the source that leaves
		dscp           uint8
		ethDst         net.HardwareAddr
	}{
		{"web's endpoint, rule 0", "10.244.1.5", "198.51.100.7", 0, uplink, "192.0.2.10", 46, nil},
		{"web's endpoint, rule 1", "10.244.1.5", "203.0.113.7", 0, uplink, "192.0.2.10", 10, nil},
		{"web's IPv6 endpoint, rule 1 (rule 0 is IPv4)", "fd00:10:244:1::5", "2001:db8:ff::1", 0, uplink, "2001:db8::10", 10, nil},
		{"api's endpoint, steered to n2", "10.244.1.6", "198.51.100.7", 0, uplink, "10.244.1.6", 10, n2},
		{"a bystander, admitted late", bystanders[0], "198.51.100.7", 0, openflow.PortNormal, bystanders[0], 10, nil},
		{"a bystander over IPv6", bystanders[1], "2001:db8:ff::1", 0, openflow.PortNormal, bystanders[1], 10, nil},
		{"web's endpoint to a pod: exempt", "10.244.1.5", "10.244.2.9", 0, openflow.PortNormal, "10.244.1.5", 0, nil},
		{"a bystander to a ClusterIP: exempt", bystanders[0], "10.96.0.10", 0, openflow.PortNormal, bystanders[0], 0, nil},
		{"web's endpoint on n2, steered here, keeps its mark", "10.244.2.5", "198.51.100.7", 46, uplink, "192.0.2.10", 46, nil},
	} {
		r := routedOut(c.src, c.dst, c.in)
		if len(r.Emits) != 1 {
			t.Errorf("%s: want one output, got\n%v", c.name, r)
			continue
		}
		out := r.Emits[0]
		if out.Port != c.port || out.Packet.Src != netip.MustParseAddr(c.src2) || out.Packet.DSCP != c.dscp ||
			(c.ethDst != nil && out.Packet.EthDst != trace.MACFrom(c.ethDst)) {
			t.Errorf("%s: want out of %s from %s with DSCP %d, got\n%v", c.name, openflow.PortName(c.port), c.src2, c.dscp, r)
		}
	}
	if r := routedOut(bystanders[0], "198.51.100.7", 0); r.Hits[len(r.Hits)-1].Flow.Cookie != dataplane.Cookie(dataplane.KindAdmit, "") ||
		r.Hits[len(r.Hits)-1].Table != dataplane.TableEgress {
		t.Errorf("the bystander was not admitted in TableEgress:\n%v", r)
	}
	for _, src := range slices.Concat(heldPod, unknownPod) {
		if r := routedOut(src, "198.51.100.7", 0); !r.Dropped() {
			t.Errorf("%s (held or unknown) was not dropped:\n%v", src, r)
		}
	}
	// db's endpoints, whose host published no MAC, are admitted late as
	// known pods of shop; their own drop outranks that admission, so they
	// never leave with their pod IP (nor do a fenced node's).
	for _, src := range dbEndpoints {
		if r := routedOut(src, "198.51.100.7", 0); !r.Dropped() {
			t.Errorf("db's endpoint %s (its host's MAC unknown) was not dropped:\n%v", src, r)
		}
	}
	n1.Fenced = true
	fenced, err := trace.New(append(dataplane.Flows(n1, dataplane.Compute(n1, cluster, routingTables), dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	for _, flow := range [][2]string{{"10.244.1.5", "198.51.100.7"}, {"fd00:10:244:1::5", "2001:db8:ff::1"}} {
		r := mustTrace(t, fenced, trace.Packet{InPort: openflow.PortLocal, Src: netip.MustParseAddr(flow[0]), Dst: netip.MustParseAddr(flow[1]),
			Proto: trace.ProtoUDP, SrcPort: 40000, DstPort: 53}, trace.Conntrack{})
		if !r.Dropped() {
			t.Errorf("fenced, web's endpoint %s was not dropped:\n%v", flow[0], r)
		}
	}
}
