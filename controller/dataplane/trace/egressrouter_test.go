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

// TestRouterPrecedenceOnPureState: n1 holds two EgressRouters (each a rule
// for TCP 80 to 198.51.100.10:8080 and a fallback 198.51.100.99), and shop
// has an EgressQoS (DSCP 46 for every pod) and an EgressFirewall that
// denies the second router's reserved address. A shop pod of
// n1, which both concern, reaches the first address: the firewall lets it
// through, QoS marks it, and the redirect then takes it above every other
// source decision (DNAT by the rule or to the fallback, SNAT to the
// reserved address, back to the host stack), keeping the mark. The
// firewall drops its packet to the second address before the redirect
// sees it: the firewall judges the reserved address as the destination it
// is. A pod of another node forwarded here by the host stack is
// redirected unmarked (its own node marked it or not). A reply from the
// destination is un-NATed to the client and goes back to the host stack.
func TestRouterPrecedenceOnPureState(t *testing.T) {
	cluster := testCluster()
	reserved, denied := netip.MustParseAddr("192.0.2.60"), netip.MustParseAddr("192.0.2.61")
	destination, fallback := netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("198.51.100.99")
	cluster.EgressQoSes = []*esv1.EgressQoS{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressQoSName},
		Spec:       esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 46}}},
	}}
	cluster.EgressFirewalls = []*esv1.EgressFirewall{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: denied.String() + "/32"}},
		}},
	}}
	n1 := nodeConfig("n1")
	state := dataplane.Compute(n1, cluster, routingTables)
	bridgeMAC, _ := net.ParseMAC(n1MAC)
	ports := dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}
	rules := []dataplane.RouterRule{{Protocol: 6, Port: 80, TargetPort: 8080, Destination: destination}}
	billing := dataplane.RouterPart{Key: dataplane.ObjectKey(dataplane.APIEgressRouter, "shop", "billing"), ID: 7,
		Addresses: []netip.Addr{reserved}, Rules: rules, Fallback: fallback}
	closed := dataplane.RouterPart{Key: dataplane.ObjectKey(dataplane.APIEgressRouter, "shop", "closed"), ID: 8,
		Addresses: []netip.Addr{denied}, Rules: rules, Fallback: fallback}
	var buf dataplane.FlowBuffer
	// Without the bridge's MAC: the tracer does not model the ARP
	// responders' fields.
	flows := dataplane.Flows(n1, state, ports)
	for _, part := range []dataplane.RouterPart{billing, closed} {
		flows = part.AppendFlows(&buf, flows, dataplane.Ports{Uplink: uplink})
	}
	tables, err := trace.New(append(flows, trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	pod := netip.MustParseAddr(bystanders[0])
	fromHost := func(src, dst netip.Addr, dstPort uint16) trace.Result {
		t.Helper()
		return mustTrace(t, tables, trace.Packet{InPort: openflow.PortLocal, Src: src, Dst: dst, Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: dstPort}, trace.Conntrack{})
	}
	for _, c := range []struct {
		name     string
		src      netip.Addr
		port     uint16
		dst      netip.Addr
		dstPort  uint16
		dscp     uint8
		viaStage bool // the firewall and QoS stages saw it
	}{
		{"a shop pod of n1 to the rule's port", pod, 80, destination, 8080, 46, true},
		{"a shop pod of n1 to another port: the fallback", pod, 443, fallback, 443, 46, true},
		{"another node's pod, forwarded by the host stack", netip.MustParseAddr(otherPods[0]), 80, destination, 8080, 0, false},
	} {
		r := fromHost(c.src, reserved, c.port)
		if len(r.Emits) != 1 {
			t.Errorf("%s: want one output, got\n%v", c.name, r)
			continue
		}
		out := r.Emits[0]
		if out.Port != openflow.PortLocal || out.Packet.Src != reserved || out.Packet.Dst != c.dst || out.Packet.DstPort != c.dstPort || out.Packet.DSCP != c.dscp {
			t.Errorf("%s: want back to the host stack from %s to %s:%d with DSCP %d, got\n%v", c.name, reserved, c.dst, c.dstPort, c.dscp, r)
		}
		tablesHit := map[uint8]bool{}
		for _, h := range r.Hits {
			tablesHit[h.Table] = true
		}
		if c.viaStage && (!tablesHit[dataplane.TableFirewall] || !tablesHit[dataplane.TableQoS]) {
			t.Errorf("%s: did not pass the firewall and QoS stages before the redirect:\n%v", c.name, r)
		}
		if !tablesHit[dataplane.TableRouterSNAT] || r.Hits[len(r.Hits)-1].Table != dataplane.TableRouterOut {
			t.Errorf("%s: did not leave through the router's tables:\n%v", c.name, r)
		}
	}

	r := fromHost(pod, denied, 80)
	if !r.Dropped() || slices.ContainsFunc(r.Hits, func(h trace.Hit) bool { return h.Table >= dataplane.TableRouter }) {
		t.Errorf("the firewall did not drop the shop pod's packet to the denied reserved address before the redirect:\n%v", r)
	}

	// A reply: the source NAT undone in the first lookup, the destination
	// NAT in the second.
	reply := trace.Packet{InPort: openflow.PortLocal, Src: destination, Dst: reserved, Proto: trace.ProtoTCP, SrcPort: 8080, DstPort: 40000}
	r = mustTrace(t, tables, reply, trace.Conntrack{
		States: []uint32{openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl | openflow.CTStateDNAT,
			openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl | openflow.CTStateSNAT},
		Unnat: func(p trace.Packet) trace.Packet {
			if p.Dst == reserved {
				p.Dst = pod
			} else {
				p.Src, p.SrcPort = reserved, 80
			}
			return p
		},
	})
	if len(r.Emits) != 1 || r.Emits[0].Port != openflow.PortLocal || r.Emits[0].Packet.Src != reserved || r.Emits[0].Packet.SrcPort != 80 || r.Emits[0].Packet.Dst != pod {
		t.Errorf("the reply was not un-NATed to the client and sent to the host stack:\n%v", r)
	}
	// A client's packet whose source conntrack did not translate (it
	// could not tie it to a connection) is dropped, never sent with the
	// client's address.
	r = mustTrace(t, tables, trace.Packet{InPort: openflow.PortLocal, Src: pod, Dst: reserved, Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: 80},
		trace.Conntrack{States: []uint32{openflow.CTStateTrk | openflow.CTStateNew, openflow.CTStateTrk | openflow.CTStateNew, openflow.CTStateTrk | openflow.CTStateNew,
			openflow.CTStateTrk | openflow.CTStateNew | openflow.CTStateDNAT, openflow.CTStateTrk | openflow.CTStateInv}})
	if !r.Dropped() {
		t.Errorf("an untranslated client packet was not dropped:\n%v", r)
	}
}
