package trace_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/openflow"
)

// TestHostAddressesOnPureState: n2's agent publishes two host addresses
// besides its InternalIPs (a secondary address of each family on its
// bridge). On n1, web's endpoint and a pod that the EgressIP billing
// selects (its address held by n2, so n1 steers the pod's egress there)
// reach them with their own addresses, not SNATed nor steered,
// as they reach n2's InternalIP; an address published by the Lease of a
// node that no longer exists is outside the cluster, SNATed or steered
// like any; and once n2 stops publishing an address, traffic to it is
// egress again.
// In Network mode the same addresses skip the service's routing table.
func TestHostAddressesOnPureState(t *testing.T) {
	secondary4, secondary6 := netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("fd00:192:168:77::2")
	leftOver := netip.MustParseAddr("192.168.77.9") // on the Lease of a deleted node
	eipPod, egressIP := netip.MustParseAddr("10.244.1.12"), netip.MustParseAddr("172.18.0.50")

	cluster := testCluster()
	published := func(mac string, addrs ...netip.Addr) *coordinationv1.Lease {
		l := agentLease(mac)
		var list []string
		for _, a := range addrs {
			list = append(list, a.String())
		}
		l.Annotations[heartbeat.AnnotationHostAddresses] = strings.Join(list, ",")
		return l
	}
	cluster.Leases["n2"] = published(n2MAC, secondary4, secondary6)
	cluster.Leases["gone"] = published("02:00:00:00:00:09", leftOver)
	cluster.Namespaces = []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "billing"}}}}
	cluster.EgressIPs = []*esv1.EgressIP{{
		ObjectMeta: metav1.ObjectMeta{Name: "billing"},
		Spec: esv1.EgressIPSpec{EgressIPs: []string{egressIP.String()},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}},
			PodSelector:       esv1.LabelSelector{MatchLabels: map[string]string{"app": "eip"}}},
		Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: egressIP.String(), Node: "n2"}}},
	}}
	cluster.Pods = append(cluster.Pods, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "eip", Labels: map[string]string{"app": "eip"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: eipPod.String()}}},
	})

	n1 := nodeConfig("n1")
	bridgeMAC, _ := net.ParseMAC(n1MAC)
	flowsOf := func(c dataplane.Cluster) (*trace.Tables, dataplane.State) {
		t.Helper()
		state := dataplane.Compute(n1, c, routingTables)
		tables, err := trace.New(append(dataplane.Flows(n1, state, dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}), trace.DefaultFlow()))
		if err != nil {
			t.Fatal(err)
		}
		return tables, state
	}
	// leaving is where a pod's packet to dst goes from n1, routed by the
	// host stack (from LOCAL): the port (NORMAL: exempt, as without
	// egressflow), its source and destination MAC; "dropped" if dropped.
	leaving := func(tables *trace.Tables, src, dst netip.Addr) string {
		t.Helper()
		r := mustTrace(t, tables, trace.Packet{InPort: openflow.PortLocal, Src: src, Dst: dst, Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: 8080}, trace.Conntrack{})
		if len(r.Emits) != 1 {
			return "dropped"
		}
		e := r.Emits[0]
		if e.Port == openflow.PortNormal {
			return "NORMAL from " + e.Packet.Src.String()
		}
		return fmt.Sprintf("port %d from %s to %s", e.Port, e.Packet.Src, net.HardwareAddr(e.Packet.EthDst[:]))
	}
	exempt := func(src netip.Addr) string { return "NORMAL from " + src.String() }
	snat := func(lb string) string { return fmt.Sprintf("port %d from %s to 00:00:00:00:00:00", uplink, lb) }
	steered := func(src netip.Addr) string { return fmt.Sprintf("port %d from %s to %s", uplink, src, n2MAC) }

	tables, state := flowsOf(cluster)
	web4, web6 := netip.MustParseAddr(webEndpoints[0]), netip.MustParseAddr(webEndpoints[1])
	n2IP := netip.MustParseAddr(nodeIPs["n2"][0])
	outside := netip.MustParseAddr("198.51.100.7")
	for _, c := range []struct {
		what     string
		src, dst netip.Addr
		want     string
	}{
		{"web's endpoint to n2's InternalIP", web4, n2IP, exempt(web4)},
		{"web's endpoint to n2's secondary IPv4 address", web4, secondary4, exempt(web4)},
		{"web's endpoint to n2's secondary IPv6 address", web6, secondary6, exempt(web6)},
		{"the EgressIP's pod to n2's secondary address", eipPod, secondary4, exempt(eipPod)},
		{"web's endpoint to an address outside", web4, outside, snat("192.0.2.10")},
		{"the EgressIP's pod to an address outside", eipPod, outside, steered(eipPod)},
		{"web's endpoint to a deleted node's address", web4, leftOver, snat("192.0.2.10")},
		{"the EgressIP's pod to a deleted node's address", eipPod, leftOver, steered(eipPod)},
	} {
		if got := leaving(tables, c.src, c.dst); got != c.want {
			t.Errorf("%s: %s, want %s", c.what, got, c.want)
		}
	}
	// Network mode: the published addresses skip the service's table.
	for _, addr := range []netip.Addr{secondary4} {
		exempt := dataplane.Rule{Kind: dataplane.ExemptRule, Destination: netip.PrefixFrom(addr, 32)}
		if !slices.Contains(state.Rules, exempt) {
			t.Errorf("no rule keeps %v off the Network-mode table: %v", addr, state.Rules)
		}
	}

	// n2 no longer has the IPv4 address: it is outside again.
	cluster.Leases["n2"] = published(n2MAC, secondary6)
	tables, _ = flowsOf(cluster)
	for _, c := range []struct {
		what     string
		src, dst netip.Addr
		want     string
	}{
		{"web's endpoint to the address n2 gave up", web4, secondary4, snat("192.0.2.10")},
		{"the EgressIP's pod to the address n2 gave up", eipPod, secondary4, steered(eipPod)},
		{"web's endpoint to the address n2 kept", web6, secondary6, exempt(web6)},
	} {
		if got := leaving(tables, c.src, c.dst); got != c.want {
			t.Errorf("%s: %s, want %s", c.what, got, c.want)
		}
	}
}
