package topology

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/wait"
)

// TestRoutedPodNetwork builds two nodes and checks the plain network every
// dataplane test starts from: pods reach the external host over TCP, UDP and
// ICMP, IPv4 and IPv6, with their own IP as source, pods on different nodes reach each other,
// and the packets really cross br-ex (a drop flow there stops them).
func TestRoutedPodNetwork(t *testing.T) {
	topo := New(t, 2)
	a := topo.Nodes[0].AddPod(t, "a")
	b := topo.Nodes[1].AddPod(t, "b")
	server := topo.External.Serve(t)

	for _, server := range []netip.AddrPort{server.Addr, server.Addr6} {
		for _, network := range []string{"tcp", "udp"} {
			for _, pod := range []*Pod{a, b} {
				want := pod.IP
				if server.Addr().Is6() {
					want = pod.IP6
				}
				source, err := pod.Dial(network, server)
				if err != nil {
					t.Fatal(err)
				}
				if source != want {
					t.Errorf("%s from pod %s to %s: external host saw %s, want the pod IP %s", network, pod.Name, server, source, want)
				}
			}
		}
	}
	if got := server.Sources(); len(got) != 8 {
		t.Errorf("server recorded %v, want 8 sources", got)
	}
	for _, dst := range []netip.Addr{topo.External.IP, topo.External.IP6} {
		if err := a.Ping(dst, 1); err != nil {
			t.Error(err)
		}
	}
	for _, pair := range [][2]netip.Addr{{b.IP, topo.Nodes[0].IP}, {b.IP6, topo.Nodes[0].IP6}} {
		if err := a.Ping(pair[0], 1); err != nil {
			t.Errorf("pod to pod across nodes: %v", err)
		}
		if err := b.Ping(pair[1], 1); err != nil {
			t.Errorf("pod to other node: %v", err)
		}
	}

	// A drop flow on node 1's br-ex for pod a's packets cuts it off; removing
	// it restores the path. Both take effect once OVS has revalidated the
	// datapath's cached flows, so each is awaited, within a deadline.
	const revalidationTimeout = 10 * time.Second // takes milliseconds; the rest is slack for a loaded machine
	drop := "priority=1000,ip,nw_src=" + a.IP.String()
	topo.Nodes[0].Ofctl(t, "add-flow", topo.Nodes[0].Bridge, drop+",actions=drop")
	wait.Until(t, revalidationTimeout, func() error {
		if source, err := a.Dial("udp", server.Addr); err == nil {
			return fmt.Errorf("pod a reached the external host as %s despite the drop flow", source)
		}
		return nil
	})
	topo.Nodes[0].Ofctl(t, "del-flows", "--strict", topo.Nodes[0].Bridge, drop)
	wait.Until(t, revalidationTimeout, func() error {
		if source, err := a.Dial("tcp", server.Addr); err != nil || source != a.IP {
			return fmt.Errorf("after removing the drop flow: source %v, err %v", source, err)
		}
		return nil
	})
}

// TestConnectionProbedTwice keeps one TCP connection open across probes.
func TestConnectionProbedTwice(t *testing.T) {
	topo := New(t, 1)
	pod := topo.Nodes[0].AddPod(t, "p")
	server := topo.External.Serve(t)
	conn, err := pod.Connect("tcp", server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := 0; i < 2; i++ {
		source, err := conn.Probe()
		if err != nil || source != pod.IP {
			t.Fatalf("probe %d: source %v, err %v", i, source, err)
		}
	}
	if got := server.Sources(); len(got) != 1 || got[0] != netip.Addr(pod.IP) {
		t.Fatalf("one connection should be one source record, got %v", got)
	}
}

// TestCapture: the external host's capture sees a pod's packets of both
// families with the pod's addresses, and ICMP among them.
func TestCapture(t *testing.T) {
	topo := New(t, 1)
	pod := topo.Nodes[0].AddPod(t, "p")
	server := topo.External.Serve(t)
	capture := topo.External.Capture(t)
	for _, dst := range []netip.AddrPort{server.Addr, server.Addr6} {
		if _, err := pod.Dial("udp", dst); err != nil {
			t.Fatal(err)
		}
		if err := pod.Ping(dst.Addr(), 1); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	packets := capture.Stop()
	for _, p := range packets {
		for _, want := range []struct {
			src, dst netip.Addr
			kind     string
		}{
			{pod.IP, topo.External.IP, "UDP"}, {pod.IP, topo.External.IP, "ICMP echo request"},
			{pod.IP6, topo.External.IP6, "UDP"}, {pod.IP6, topo.External.IP6, "ICMP6, echo request"},
		} {
			if p.Src == want.src && p.Dst == want.dst && strings.Contains(p.Line, want.kind) {
				seen[want.src.String()+" "+want.kind] = true
			}
		}
	}
	if len(seen) != 4 {
		t.Errorf("capture saw only %v of the pod's UDP and ICMP packets in both families; all: %v", seen, packets)
	}
}

func TestParsePacketLine(t *testing.T) {
	const macs = "1763727000.000001 02:00:00:00:00:01 > 02:00:00:00:00:02, "
	for line, want := range map[string][2]string{
		macs + "IPv4, length 48: 10.244.1.2.40000 > 172.18.0.100.8080: UDP, length 6":                  {"10.244.1.2", "172.18.0.100"},
		macs + "IPv4, length 98: 192.0.2.10 > 172.18.0.100: ICMP echo request, id 1, seq 1, length 64": {"192.0.2.10", "172.18.0.100"},
		macs + "IPv6, length 68: fd00:10:244:1::2.40000 > fd00:172:18::100.8080: UDP, length 6":        {"fd00:10:244:1::2", "fd00:172:18::100"},
		macs + "IPv6, length 118: 2001:db8::10 > fd00:172:18::100: ICMP6, echo request, id 1, seq 1":   {"2001:db8::10", "fd00:172:18::100"},
		macs + "IPv6, length 86: fe80::1 > ff02::1:ff00:100: ICMP6, neighbor solicitation, who has x":  {"fe80::1", "ff02::1:ff00:100"},
	} {
		p, ok := parsePacketLine(line)
		if !ok || p.Src.String() != want[0] || p.Dst.String() != want[1] || p.SrcMAC != "02:00:00:00:00:01" || p.DstMAC != "02:00:00:00:00:02" {
			t.Errorf("parsePacketLine(%q) = %v, %v; want %v", line, p, ok, want)
		}
	}
	for _, line := range []string{macs + "ARP, length 42: Request who-has 172.18.0.1", macs + "IPv4, length 20: truncated-ip", "IP 10.0.0.1 > 10.0.0.2: UDP", ""} {
		if p, ok := parsePacketLine(line); ok {
			t.Errorf("parsePacketLine(%q) = %v, want no packet", line, p)
		}
	}
}
