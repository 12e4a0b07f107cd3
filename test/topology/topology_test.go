package topology

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/wait"
)

// TestRoutedPodNetwork builds two nodes and checks the plain network every
// dataplane test starts from: pods reach the external host over TCP, UDP and
// ICMP with their own IP as source, pods on different nodes reach each other,
// and the packets really cross br-ex (a drop flow there stops them).
func TestRoutedPodNetwork(t *testing.T) {
	topo := New(t, 2)
	a := topo.Nodes[0].AddPod(t, "a")
	b := topo.Nodes[1].AddPod(t, "b")
	server := topo.External.Serve(t)

	for _, network := range []string{"tcp", "udp"} {
		for _, pod := range []*Pod{a, b} {
			source, err := pod.Dial(network, server.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if source != pod.IP {
				t.Errorf("%s from pod %s: external host saw %s, want the pod IP %s", network, pod.Name, source, pod.IP)
			}
		}
	}
	if got := server.Sources(); len(got) != 4 {
		t.Errorf("server recorded %v, want 4 sources", got)
	}
	if err := a.Ping(topo.External.IP, 1); err != nil {
		t.Error(err)
	}
	if err := a.Ping(b.IP, 1); err != nil {
		t.Errorf("pod to pod across nodes: %v", err)
	}
	if err := b.Ping(topo.Nodes[0].IP, 1); err != nil {
		t.Errorf("pod to other node: %v", err)
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
