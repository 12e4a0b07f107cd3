package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
	"github.com/egressflow/egressflow/test/dnsquery"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// windowLookups is how many lookups each phase of TestAgentFirewallWindow
// makes; every one answers an address never given before. Over TCP, a
// connection each: windowTCPLookups.
const (
	windowLookups    = 300
	windowTCPLookups = 100
)

// windowEnv is one node whose agent holds DNS replies, a pod "app" of
// namespace shop, and a DNS server on the external host whose answers a
// phase makes rotate over addresses of its own (pool, rotate). The
// namespace's EgressFirewall denies the names rotate.test and
// *.wild.test.
type windowEnv struct {
	*env
	agent *runningAgent
	app   *topology.Pod
	dns   *dnstest.Server
}

const windowExact, windowWildcard = "rotate.test", "a.wild.test"

func newWindowEnv(t testing.TB) *windowEnv {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	w := &windowEnv{env: e, dns: e.externalDNS()}
	e.dnsServers = []netip.AddrPort{w.dns.Addr()}
	w.app = e.addPod(n, "app")
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: windowExact}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "*.wild.test"}},
		}},
	}
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(context.Background(), fw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.agent = e.startAgent(n)
	w.agent.waitHealthy(t)
	// The firewall is in place once a fixed address of its own is denied.
	fixed := netip.MustParseAddr("198.51.100.77")
	e.topo.External.AddAddress(t, fixed)
	e.routeToExternal(fixed)
	w.dns.Set("fixed.wild.test", dnstest.A(fixed.String(), 60))
	podLookup(t, w.app, w.dns.Addr(), "fixed.wild.test")
	e.expectDenied(w.app, "udp", e.server.At(fixed))
	return w
}

// pool returns n addresses of phase's own /17, routed from the node to
// the external host, where a capture sees whatever reaches them.
func (w *windowEnv) pool(phase, n int) []netip.Addr {
	base := netip.AddrFrom4([4]byte{198, byte(18 + phase/2), byte(phase%2) * 128, 0})
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = base
		base = base.Next()
	}
	for _, node := range w.topo.Nodes {
		node.Exec(w.t, "ip", "route", "replace", netip.PrefixFrom(out[0], 17).String(), "via", w.topo.External.IP.String())
	}
	return out
}

// rotate makes name's answer the next of addrs at every query.
func (w *windowEnv) rotate(name string, addrs []netip.Addr) {
	records := make([]dnstest.Record, 0, len(addrs)+1)
	for _, a := range addrs {
		records = append(records, dnstest.A(a.String(), 60))
	}
	w.dns.Set(name, append(records, dnstest.RoundRobin(1))...)
}

// copyReplies turns the agent's snoop flows to copying, as before the
// hold: the replies go on at once.
func (w *windowEnv) copyReplies() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	if err := w.agent.client.SendFlowMods(ctx, dataplane.SnoopCopyingFlowMods()...); err != nil {
		w.t.Fatal(err)
	}
}

// TestAgentFirewallWindow: a Deny for a name whose answer is a new address
// at every query, and a pod that sends to each answer the moment it has
// it. With the agent holding each DNS reply until the flows for its
// address are in the bridge, no packet reaches a denied address: for an
// exact name, for a wildcard, and after the agent restarts. The same
// lookups with the snoop flows copying instead (the agent before the
// hold), in the same run, are counted for comparison.
func TestAgentFirewallWindow(t *testing.T) {
	w := newWindowEnv(t)
	exactPool, wildPool := w.pool(0, windowLookups), w.pool(1, windowLookups)
	w.rotate(windowExact, exactPool)
	w.rotate(windowWildcard, wildPool)

	reached := func(phase, network, name string, addrs []netip.Addr) int {
		t.Helper()
		denied := map[netip.Addr]bool{}
		for _, a := range addrs {
			denied[a] = true
		}
		capture := w.topo.External.Capture(t)
		lookups := len(addrs)
		rtts, err := lookupAndSend(w.app, w.dns.Addr(), network, name, lookups)
		time.Sleep(200 * time.Millisecond) // the last datagrams' way to the capture
		packets := capture.Stop()
		if err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		count := 0
		for _, p := range packets {
			if denied[p.Dst] {
				count++
			}
		}
		t.Logf("%s: %d lookups, %d datagrams sent to their answers, %d reached a denied address", phase, lookups, len(rtts), count)
		return count
	}
	if got := reached("held, exact name", "udp", windowExact, exactPool); got != 0 {
		t.Errorf("held, exact name: %d packets reached a denied address", got)
	}
	if got := reached("held, wildcard", "udp", windowWildcard, wildPool); got != 0 {
		t.Errorf("held, wildcard: %d packets reached a denied address", got)
	}
	// After a restart: the new agent's first sync, then the same. The
	// wildcard's addresses, which only the pods' replies taught, are
	// judged from the first sync on, read back from the predecessor's
	// flows: a pod that still has them cached gets no packet through.
	w.agent.stop()
	w.agent = w.startAgent(w.topo.Nodes[0])
	w.agent.waitHealthy(t)
	capture := w.topo.External.Capture(t)
	for _, a := range wildPool[:20] {
		if err := sendDatagram(w.app, netip.AddrPortFrom(a, 9), 100); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, p := range capture.Stop() {
		if slices.Contains(wildPool, p.Dst) {
			t.Errorf("after the restart, a packet to an address the wildcard had before reached the external host: %s", p.Line)
		}
	}
	restartPool := w.pool(2, windowLookups)
	w.rotate(windowExact, restartPool)
	if got := reached("held, after a restart", "udp", windowExact, restartPool); got != 0 {
		t.Errorf("held, after a restart: %d packets reached a denied address", got)
	}
	// Over TCP, as a resolver asks again after a truncated answer: the
	// segment that completes a reply is held like a datagram.
	tcpPool := w.pool(4, windowTCPLookups)
	w.rotate(windowExact, tcpPool)
	if got := reached("held, over TCP", "tcp", windowExact, tcpPool); got != 0 {
		t.Errorf("held, over TCP: %d packets reached a denied address", got)
	}
	metrics := samples(t, w.agent.metrics, "egressflow_agent_dns_replies_total")
	if metrics[`egressflow_agent_dns_replies_total{outcome="applied"}`] < windowLookups {
		t.Errorf("the restarted agent counted %v replies released with their flows; want at least %d", metrics[`egressflow_agent_dns_replies_total{outcome="applied"}`], windowLookups)
	}

	// For comparison: the snoop flows copying the replies and letting them
	// go on at once, as before the hold.
	w.copyReplies()
	copyPool := w.pool(3, windowLookups)
	w.rotate(windowExact, copyPool)
	reached("copied (no hold), exact name", "udp", windowExact, copyPool)
}

// BenchmarkDNSReplyHold: the DNS latency the hold adds, from inside a pod:
// each lookup's round trip on one node, for a name whose every answer is
// an address the agent has no flow for yet (the worst case: each reply
// waits for a sync and its bundle), for a name whose answer it has a flow
// for already (the reply goes on at once), and, in the same run, with the
// snoop flows copying (no hold). Run with -benchtime 1x: each part makes
// dnsHoldLookups lookups whatever b.N.
func BenchmarkDNSReplyHold(b *testing.B) {
	w := newWindowEnv(b)
	measure := func(name string) []time.Duration {
		b.Helper()
		rtts, err := lookupAndSend(w.app, w.dns.Addr(), "udp", name, dnsHoldLookups)
		if err != nil {
			b.Fatal(err)
		}
		slices.Sort(rtts)
		return rtts
	}
	q := func(rtts []time.Duration, p int) time.Duration { return rtts[(len(rtts)-1)*p/100] }
	w.rotate(windowExact, w.pool(0, dnsHoldLookups))
	fresh := measure(windowExact)
	known := netip.MustParseAddr("198.51.100.77") // fixed.wild.test's, denied already
	w.dns.Set(windowExact, dnstest.A(known.String(), 60))
	held := measure(windowExact)
	w.copyReplies()
	w.rotate(windowExact, w.pool(1, dnsHoldLookups))
	copied := measure(windowExact)
	fmt.Printf("\nDNS lookups from a pod, %d each (round trip, query to answer):\n", dnsHoldLookups)
	fmt.Printf("  %-44s p50 %8v  p99 %8v\n", "held, every answer a new address", q(fresh, 50), q(fresh, 99))
	fmt.Printf("  %-44s p50 %8v  p99 %8v\n", "held, answer already in the flows", q(held, 50), q(held, 99))
	fmt.Printf("  %-44s p50 %8v  p99 %8v\n", "copied, no hold (before)", q(copied, 50), q(copied, 99))
	b.ReportMetric(float64(q(fresh, 50)-q(copied, 50))/1e6, "added-p50-ms")
	b.ReportMetric(float64(q(fresh, 99)-q(copied, 99))/1e6, "added-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// dnsHoldLookups is how many lookups each part of BenchmarkDNSReplyHold
// makes.
const dnsHoldLookups = 1000

// lookupAndSend, from inside pod's namespace, asks server for name's
// IPv4 address n times over network ("udp", or "tcp": a connection per
// lookup, each message after its two-byte length) and, the moment each
// answer arrives, sends a UDP datagram to the address it gave (port 9).
// It returns each lookup's round trip, query to answer.
func lookupAndSend(pod *topology.Pod, server netip.AddrPort, network, name string, n int) ([]time.Duration, error) {
	query, err := dnsquery.A(0x5eed, name)
	if err != nil {
		return nil, err
	}
	var rtts []time.Duration
	err = topology.InNetns(pod.Netns, func() error {
		var udp net.Conn
		if network == "udp" {
			if udp, err = net.Dial("udp4", server.String()); err != nil {
				return err
			}
			defer udp.Close()
		}
		out, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return err
		}
		defer out.Close()
		for i := range n {
			asked := time.Now()
			reply, err := exchange(udp, network, server, query)
			if err != nil {
				return fmt.Errorf("lookup %d of %s over %s: %w", i, name, network, err)
			}
			rtt := time.Since(asked)
			addr, _, err := dnsquery.FirstA(reply)
			if err != nil {
				return fmt.Errorf("lookup %d of %s: %w", i, name, err)
			}
			if _, err := out.WriteToUDPAddrPort([]byte("window"), netip.AddrPortFrom(addr, 9)); err != nil {
				return err
			}
			rtts = append(rtts, rtt)
		}
		return nil
	})
	return rtts, err
}

// exchange sends query and returns the reply: on udp, the open UDP
// connection; over "tcp", on a connection of its own, as a resolver
// asking again after a truncated answer does.
func exchange(udp net.Conn, network string, server netip.AddrPort, query []byte) ([]byte, error) {
	reply := make([]byte, 1500)
	if network == "udp" {
		_ = udp.SetDeadline(time.Now().Add(convergeTimeout))
		if _, err := udp.Write(query); err != nil {
			return nil, err
		}
		n, err := udp.Read(reply)
		return reply[:n], err
	}
	conn, err := net.DialTimeout("tcp4", server.String(), convergeTimeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(convergeTimeout))
	if _, err := conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(query))), query...)); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(conn, reply[:2]); err != nil {
		return nil, err
	}
	length := int(binary.BigEndian.Uint16(reply))
	if length > len(reply) {
		return nil, fmt.Errorf("a %d-byte reply", length)
	}
	_, err = io.ReadFull(conn, reply[:length])
	return reply[:length], err
}

// sendDatagram sends one UDP datagram of size bytes from inside pod's
// namespace to dst.
func sendDatagram(pod *topology.Pod, dst netip.AddrPort, size int) error {
	conn, err := pod.Connect("udp", dst)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write(make([]byte, size))
	return err
}

// TestDNSHoldAtStartAndStop: the holds at an agent's edges, on a real
// switch whose snoop flows pause the replies to a pod, with a snoop
// connection of the test's. At the start: a reply paused before the
// agent's first sync has told its resolver the names (which it then
// learns nothing from) waits for the names, is learned again and goes on
// once that generation is applied, never at once. At the stop: a reply
// still held when the agent stops, before the flows for its addresses
// are in, is dropped (the pod's resolver asks again, and the next agent
// holds the answer), never released without its flows. Either would hand
// the pod an address the firewall cannot judge yet; the Docker cluster's
// window test found the first across a rolling restart.
func TestDNSHoldAtStartAndStop(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	dns := e.externalDNS()
	e.dnsServers = []netip.AddrPort{dns.Addr()}
	app := e.addPod(n, "app")
	const name = "held.test"
	dns.Set(name, dnstest.A("198.51.100.80", 60))
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: name}},
		}},
	}
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(context.Background(), fw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent := e.startAgent(n)
	agent.waitHealthy(t)
	podLookup(t, app, dns.Addr(), name) // the snoop flows pause the pod's replies
	// The agent goes; its flows stay, pausing every reply to the pod.
	agent.stop()
	query, err := dnsquery.A(0x5eed, name)
	if err != nil {
		t.Fatal(err)
	}
	// snoop runs SnoopDNS with hold until the returned stop; learned
	// counts the replies hold.Learn was given.
	snoop := func(hold DNSHold, learned *atomic.Int64) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		hold.Learn = func([]byte) (int, error) { learned.Add(1); return 1, nil }
		hold.Generation = func() uint64 { return uint64(learned.Load()) }
		hold.Timeout = time.Minute
		hold.Ready = func() { close(ready) }
		done := make(chan error, 1)
		go func() { done <- SnoopDNS(ctx, "unix:"+n.MgmtSocket, hold) }()
		select {
		case <-ready:
		case <-time.After(convergeTimeout):
			t.Fatal("the snoop connection did not come up")
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	ask := func() *topology.Conn {
		conn, err := app.Connect("udp", dns.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(query); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	reply := func(conn *topology.Conn, within time.Duration) error {
		_ = conn.SetDeadline(time.Now().Add(within))
		_, err := conn.Read(make([]byte, 1500))
		return err
	}
	waitLearned := func(learned *atomic.Int64, want int64) {
		wait.Until(t, convergeTimeout, func() error {
			if got := learned.Load(); got < want {
				return fmt.Errorf("%d replies learned, want %d", got, want)
			}
			return nil
		})
	}

	// The start: the names come after the reply.
	var learned atomic.Int64
	named := make(chan struct{})
	stop := snoop(DNSHold{
		NamesSet: named,
		// The flows of what the second learning taught are in at once.
		Applied: func(ctx context.Context, generation uint64) error {
			if generation >= 2 {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}, &learned)
	conn := ask()
	waitLearned(&learned, 1)
	if err := reply(conn, 500*time.Millisecond); err == nil {
		t.Errorf("the pod got its reply before the resolver knew the names")
	}
	close(named)
	if err := reply(conn, 5*time.Second); err != nil {
		t.Errorf("the pod got no reply once the names were known and its reply learned again: %v", err)
	}
	if got := learned.Load(); got < 2 {
		t.Errorf("the reply was learned %d times; want it learned again once the names were known", got)
	}
	conn.Close()
	stop()

	// The stop: the flows never land, and the agent stops.
	learned.Store(0)
	stop = snoop(DNSHold{
		Applied: func(ctx context.Context, _ uint64) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}, &learned)
	conn = ask()
	defer conn.Close()
	waitLearned(&learned, 1)
	stop()
	if err := reply(conn, 2*time.Second); err == nil {
		t.Errorf("the pod got a reply that its stopping agent held without its flows; want it dropped")
	}
}
