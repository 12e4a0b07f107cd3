package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/topology"
)

// A node's secondary addresses in the tests: outside every prefix the
// topology routes, so that only the routes a test adds lead to them.
var (
	secondaryAddr4 = netip.MustParseAddr("192.168.77.2")
	secondaryAddr6 = netip.MustParseAddr("fd00:192:168:77::2")
)

// hostAddressRenewInterval is how often n2's agent heartbeat publishes its
// host addresses in TestAgentHostAddresses: shorter than the DaemonSet's
// (1 s) so that the test waits less, while still a renewal loop.
const hostAddressRenewInterval = 200 * time.Millisecond

// publishHostAddresses renews n's heartbeat Lease every
// hostAddressRenewInterval with its bridge MAC and the host addresses its
// agent a reads from n's namespace, as the agent's main does, until the
// test ends.
func (e *env) publishHostAddresses(n *topology.Node, a *Agent) {
	t := e.t
	nsHandle, err := netns.GetFromName(n.Netns)
	if err != nil {
		t.Fatal(err)
	}
	handle, err := netlink.NewHandleAt(nsHandle)
	if err != nil {
		nsHandle.Close()
		t.Fatal(err)
	}
	reader := &HostAddressReader{Handle: handle, Excluded: a.HostAddressExclusions}
	mac := n.BridgeMAC(t)
	renewer, err := heartbeat.NewRenewer(e.agentKube.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: n.Name, LeaseDuration: time.Hour, RenewInterval: hostAddressRenewInterval,
		Facts: func() heartbeat.Facts { return heartbeat.Facts{BridgeMAC: mac, HostAddresses: reader.Read()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = renewer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; handle.Close(); nsHandle.Close() })
}

// TestHostAddressReader reads a real network namespace: the addresses of
// every interface, both families, without loopback, link-local, excluded
// and kube-ipvs0 addresses (a service address kube-proxy binds there); an
// address added or removed shows at the next read.
func TestHostAddressReader(t *testing.T) {
	ovstest.RequireRoot(t)
	ns := ovstest.NewNetns(t, "hostaddr")
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	// veth pairs (this kernel has no dummy links); their peers hold only
	// link-local IPv6 addresses, which are not published.
	for i, link := range []string{"eth0", "eth1", "kube-ipvs0"} {
		peer := fmt.Sprintf("peer%d", i)
		ip("link", "add", link, "type", "veth", "peer", "name", peer)
		ip("link", "set", link, "up")
		ip("link", "set", peer, "up")
	}
	ip("addr", "add", "172.18.0.11/24", "dev", "eth0")
	ip("addr", "add", "fd00:172:18::11/64", "dev", "eth0", "nodad")
	ip("addr", "add", "10.244.1.1/24", "dev", "eth0") // a pod gateway: excluded
	ip("addr", "add", "192.168.77.2/32", "dev", "eth1")
	ip("addr", "add", "198.51.100.10/32", "dev", "kube-ipvs0") // an LB IP bound by kube-proxy
	ip("addr", "add", "10.96.0.10/32", "dev", "kube-ipvs0")
	nsHandle, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsHandle.Close()
	handle, err := netlink.NewHandleAt(nsHandle)
	if err != nil {
		t.Fatal(err)
	}
	defer handle.Close()
	reader := &HostAddressReader{Handle: handle, Excluded: func() []netip.Prefix {
		return []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	}}
	want := []netip.Addr{netip.MustParseAddr("172.18.0.11"), netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("fd00:172:18::11")}
	if got := reader.Read(); !slices.Equal(got, want) {
		t.Errorf("read %v, want %v", got, want)
	}
	ip("addr", "del", "192.168.77.2/32", "dev", "eth1")
	ip("addr", "add", "fd00:192:168:77::2/128", "dev", "eth1", "nodad")
	want = []netip.Addr{netip.MustParseAddr("172.18.0.11"), netip.MustParseAddr("fd00:172:18::11"), netip.MustParseAddr("fd00:192:168:77::2")}
	if got := reader.Read(); !slices.Equal(got, want) {
		t.Errorf("after a change, read %v, want %v", got, want)
	}
}

// TestAgentHostAddresses: node n2 gets a secondary address of each family
// on its bridge, beside its InternalIPs, and a server listens on them in
// n2's namespace. On n1, an endpoint of the EgressService web (hosted on
// n1) and a pod that the EgressIP billing selects (its addresses held by
// n1) reach that server with their own pod IPs, in both families, TCP and
// UDP, once n2's agent has published the addresses (unexempt, the
// endpoint's connection is SNATed to the LB IP and the server's answer
// never comes back). Then the addresses leave n2 for a host outside the
// cluster: traffic to them is egress again, SNATed to the LB IP and the
// egress IP.
func TestAgentHostAddresses(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	endpoint := e.addPod(n1, "endpoint")
	selected := e.addLabelledPod(n1, "selected", map[string]string{"app": "eip"})
	e.startAgent(n1).waitHealthy(t)
	e.publishHostAddresses(n2, e.startAgent(n2).Agent)
	e.agents[n2.Name].waitHealthy(t)

	lb4, lb6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	e.announce(lb4, n1)
	e.announce(lb6, n1)
	e.createEgressService("web", []netip.Addr{lb4, lb6}, esv1.EgressServiceSpec{}, n1.Name, endpoint)
	e.labelNamespace(map[string]string{"team": "billing"})
	e.setEgressIP("billing", esv1.EgressIPSpec{
		EgressIPs:         []string{egressIP4.String(), egressIP6.String()},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}},
		PodSelector:       esv1.LabelSelector{MatchLabels: map[string]string{"app": "eip"}},
	}, map[netip.Addr]string{egressIP4: n1.Name, egressIP6: n1.Name})
	// egressSource is what the outside sees from each pod in each family.
	egressSource := map[*topology.Pod][2]netip.Addr{endpoint: {lb4, lb6}, selected: {egressIP4, egressIP6}}
	for pod, want := range egressSource {
		e.expectSource(pod, "udp", want[0])
		e.expectSource(pod, "udp", want[1])
	}

	// The secondary addresses on n2's bridge, routed there from n1, and a
	// server on them in n2's namespace.
	added := time.Now()
	for _, addr := range []netip.Addr{secondaryAddr4, secondaryAddr6} {
		cmd := []string{"addr", "add", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", n2.Bridge}
		via := n2.IP
		if addr.Is6() {
			cmd, via = append(cmd, "nodad"), n2.IP6
		}
		n2.Exec(t, "ip", cmd...)
		n1.Exec(t, "ip", "route", "add", addr.String(), "via", via.String())
	}
	onNode := (&topology.Host{Name: n2.Name, Netns: n2.Netns, IP: secondaryAddr4, IP6: secondaryAddr6}).Serve(t)
	eventually(t, "n2's secondary addresses published", func() error {
		return e.leaseHostAddresses(n2, true)
	})
	published := time.Since(added)
	for pod := range egressSource {
		for _, network := range []string{"udp", "tcp"} {
			e.expectSourceVia(pod, network, onNode.Addr, onNode, pod.IP)
			e.expectSourceVia(pod, network, onNode.Addr6, onNode, pod.IP6)
		}
	}
	t.Logf("n2's secondary addresses published %v after they were added, reached with the pods' own IPs %v after",
		published.Round(time.Millisecond), time.Since(added).Round(time.Millisecond))
	// n1's exemption flows name them.
	for _, addr := range []netip.Addr{secondaryAddr4, secondaryAddr6} {
		if flows := serviceFlowsNaming(t, n1, addr); len(flows) == 0 {
			t.Errorf("no flow of n1 names %s", addr)
		}
	}

	// The addresses move to a host outside the cluster: egress again.
	removed := time.Now()
	for _, addr := range []netip.Addr{secondaryAddr4, secondaryAddr6} {
		n2.Exec(t, "ip", "addr", "del", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", n2.Bridge)
		e.topo.External.AddAddress(t, addr)
		via := e.topo.External.IP
		if addr.Is6() {
			via = e.topo.External.IP6
		}
		n1.Exec(t, "ip", "route", "replace", addr.String(), "via", via.String())
	}
	outside := e.topo.External.Serve(t, secondaryAddr4, secondaryAddr6)
	eventually(t, "n2's secondary addresses withdrawn", func() error {
		return e.leaseHostAddresses(n2, false)
	})
	for pod, want := range egressSource {
		for _, network := range []string{"udp", "tcp"} {
			e.expectSourceVia(pod, network, outside.At(secondaryAddr4), outside, want[0])
			e.expectSourceVia(pod, network, outside.At(secondaryAddr6), outside, want[1])
		}
	}
	t.Logf("traffic to the withdrawn addresses SNATed again %v after they left n2", time.Since(removed).Round(time.Millisecond))
}

// leaseHostAddresses checks that n's Lease publishes both secondary
// addresses (want) or neither, beside its InternalIPs.
func (e *env) leaseHostAddresses(n *topology.Node, want bool) error {
	l, err := e.admin.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	got := heartbeat.ReadFacts(l).HostAddresses
	if !slices.Contains(got, n.IP) || !slices.Contains(got, n.IP6) {
		return fmt.Errorf("%s publishes %v, without its InternalIPs", n.Name, got)
	}
	for _, addr := range []netip.Addr{secondaryAddr4, secondaryAddr6} {
		if slices.Contains(got, addr) != want {
			return fmt.Errorf("%s publishes %v", n.Name, got)
		}
	}
	return nil
}

// hostAddressSamples is how many address changes
// BenchmarkHostAddressToFlow times: 100 make p99 the worst but one.
const hostAddressSamples = 100

// hostAddressGap separates the changes, so that each is one Lease event
// and one sync (the agent merges a burst into one sync).
const hostAddressGap = 20 * time.Millisecond

// BenchmarkHostAddressToFlow measures, on real Open vSwitch and a real API
// server, how long an address a node's agent publishes takes to become an
// exemption on another node: from the Update of n2's heartbeat Lease with
// one more host address to the commit of n1's bundle that adds the
// address's exemption flow. The agent's own publication comes before it,
// at its next renewal (at most the renew interval, 1 s by default, after
// the address appears). It reports p50 and p99 in milliseconds.
func BenchmarkHostAddressToFlow(b *testing.B) {
	e := newEnv(b, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	watched := &exemptionWatch{}
	e.startAgent(n1, func(c *Config) { watched.Switch = c.Switch; c.Switch = watched }).waitHealthy(b)
	leases := e.admin.Kube.CoordinationV1().Leases(kubetest.SystemNamespace)
	ctx := context.Background()
	var latencies []time.Duration
	for b.Loop() {
		latencies = latencies[:0]
		for i := range hostAddressSamples {
			addr := netip.AddrFrom4([4]byte{192, 168, 78, byte(1 + i)})
			done := watched.expect(addr)
			l, err := leases.Get(ctx, n2.Name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			published := append(heartbeat.ReadFacts(l).HostAddresses, addr)
			var list []string
			for _, a := range published {
				list = append(list, a.String())
			}
			l.Annotations[heartbeat.AnnotationHostAddresses] = strings.Join(list, ",")
			start := time.Now()
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			select {
			case acked := <-done:
				latencies = append(latencies, acked.Sub(start))
			case <-time.After(convergeTimeout):
				b.Fatalf("no exemption flow for %s within %v", addr, convergeTimeout)
			}
			time.Sleep(hostAddressGap)
		}
		// The next round publishes the same addresses anew.
		l, err := leases.Get(ctx, n2.Name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		delete(l.Annotations, heartbeat.AnnotationHostAddresses)
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // the withdrawal synced
	}
	slices.Sort(latencies)
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100-1]
	b.Logf("host address published -> exemption flow in OVS (%d samples): p50 %v, p99 %v, max %v",
		len(latencies), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), latencies[len(latencies)-1].Round(100*time.Microsecond))
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
}

// exemptionWatch is a Switch that reports when a bundle that adds the
// exemption of an awaited address commits.
type exemptionWatch struct {
	Switch
	mu      sync.Mutex
	awaited netip.Addr
	done    chan time.Time
}

// expect awaits the exemption of addr; the channel gets the commit's time.
func (w *exemptionWatch) expect(addr netip.Addr) <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.awaited, w.done = addr, make(chan time.Time, 1)
	return w.done
}

func (w *exemptionWatch) BeginBundle(ctx context.Context) (Bundle, error) {
	inner, err := w.Switch.BeginBundle(ctx)
	if err != nil {
		return nil, err
	}
	return &exemptionBundle{Bundle: inner, w: w}, nil
}

// exemptionBundle is one bundle through an exemptionWatch.
type exemptionBundle struct {
	Bundle
	w       *exemptionWatch
	carries chan time.Time // the awaited address's, once a flow mod adds it
}

func (b *exemptionBundle) Add(ctx context.Context, msgs openflow.Sequence) error {
	b.w.mu.Lock()
	addr, done := b.w.awaited, b.w.done
	b.w.mu.Unlock()
	if addr.IsValid() && b.carries == nil {
		for i := range msgs.Len() {
			m := msgs.At(i)
			if raw, ok := m.(*openflow.RawMessage); ok {
				if m, _ = raw.Decode(); m == nil {
					continue
				}
			}
			if fm, ok := m.(*openflow.FlowMod); ok && fm.Command == openflow.FlowAdd {
				if v, _, ok := fm.Match.Get(openflow.FieldIPv4Dst); ok && bytes.Equal(v, addr.AsSlice()) {
					b.carries = done
					break
				}
			}
		}
	}
	return b.Bundle.Add(ctx, msgs)
}

func (b *exemptionBundle) Commit(ctx context.Context) error {
	if err := b.Bundle.Commit(ctx); err != nil {
		return err
	}
	if b.carries != nil {
		select {
		case b.carries <- time.Now():
		default: // already reported
		}
	}
	return nil
}
