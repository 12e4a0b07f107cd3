package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// windowLookups is how many lookups each phase of TestAgentFirewallWindow
// makes; every one answers an address never given before.
const windowLookups = 300

// TestAgentFirewallWindow: a Deny for a name whose answer is a new address
// at every query, and a pod that sends to each answer the moment it has
// it. With the agent holding each DNS reply until the flows for its
// address are in the bridge, no packet reaches a denied address: for an
// exact name, for a wildcard, and after the agent restarts. The same
// lookups with the snoop flows copying instead (the agent before the
// hold), in the same run, are counted for comparison.
func TestAgentFirewallWindow(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	resolverAddr := netip.MustParseAddr("198.51.100.53")
	e.topo.External.AddAddress(t, resolverAddr)
	e.routeToExternal(resolverAddr)
	var dns *dnstest.Server
	if err := topology.InNetns(e.topo.External.Netns, func() error {
		var err error
		dns, err = dnstest.Start(netip.AddrPortFrom(resolverAddr, 53).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	e.dnsServers = []netip.AddrPort{dns.Addr()}
	app := e.addPod(n, "app")
	// Each phase's answers: windowLookups addresses of its own /16, routed
	// to the external host, where a capture sees whatever reaches them.
	pool := func(phase int) []netip.Addr {
		base := netip.AddrFrom4([4]byte{198, byte(18 + phase/2), byte(phase%2) * 128, 0})
		out := make([]netip.Addr, windowLookups)
		for i := range out {
			out[i] = base
			base = base.Next()
		}
		for _, node := range e.topo.Nodes {
			node.Exec(t, "ip", "route", "replace", netip.PrefixFrom(out[0], 17).String(), "via", e.topo.External.IP.String())
		}
		return out
	}
	rotate := func(name string, addrs []netip.Addr) {
		records := make([]dnstest.Record, 0, len(addrs)+1)
		for _, a := range addrs {
			records = append(records, dnstest.A(a.String(), 60))
		}
		dns.Set(name, append(records, dnstest.RoundRobin(1))...)
	}
	const exact, wildName = "rotate.test", "a.wild.test"
	exactPool, wildPool := pool(0), pool(1)
	rotate(exact, exactPool)
	rotate(wildName, wildPool)

	ctx := context.Background()
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: exact}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "*.wild.test"}},
		}},
	}
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(ctx, fw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent := e.startAgent(n)
	agent.waitHealthy(t)
	// The firewall is in place once a fixed address of its own is denied.
	fixed := netip.MustParseAddr("198.51.100.77")
	e.topo.External.AddAddress(t, fixed)
	e.routeToExternal(fixed)
	dns.Set("fixed.wild.test", dnstest.A(fixed.String(), 60))
	podLookup(t, app, dns.Addr(), "fixed.wild.test")
	e.expectDenied(app, "udp", e.server.At(fixed))

	reached := func(phase string, name string, addrs []netip.Addr) int {
		t.Helper()
		denied := map[netip.Addr]bool{}
		for _, a := range addrs {
			denied[a] = true
		}
		capture := e.topo.External.Capture(t)
		sent, err := lookupAndSend(app, dns.Addr(), name, windowLookups)
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
		t.Logf("%s: %d lookups, %d datagrams sent to their answers, %d reached a denied address", phase, windowLookups, sent, count)
		return count
	}
	if got := reached("held, exact name", exact, exactPool[:windowLookups]); got != 0 {
		t.Errorf("held, exact name: %d packets reached a denied address", got)
	}
	if got := reached("held, wildcard", wildName, wildPool); got != 0 {
		t.Errorf("held, wildcard: %d packets reached a denied address", got)
	}
	// After a restart: the new agent's first sync, then the same.
	agent.stop()
	agent = e.startAgent(n)
	agent.waitHealthy(t)
	restartPool := pool(2)
	rotate(exact, restartPool)
	if got := reached("held, after a restart", exact, restartPool); got != 0 {
		t.Errorf("held, after a restart: %d packets reached a denied address", got)
	}
	metrics := samples(t, agent.metrics, "egressflow_agent_dns_replies_total")
	if metrics[`egressflow_agent_dns_replies_total{outcome="applied"}`] < windowLookups {
		t.Errorf("the restarted agent counted %v replies released with their flows; want at least %d", metrics[`egressflow_agent_dns_replies_total{outcome="applied"}`], windowLookups)
	}

	// For comparison: the snoop flows copying the replies and letting them
	// go on at once, as before the hold.
	sendCtx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	if err := agent.client.SendFlowMods(sendCtx, dataplane.SnoopCopyingFlowMods()...); err != nil {
		t.Fatal(err)
	}
	copyPool := pool(3)
	rotate(exact, copyPool)
	reached("copied (no hold), exact name", exact, copyPool)
}

// lookupAndSend, from inside pod's namespace, asks server for name's
// IPv4 address n times over UDP and, the moment each answer arrives,
// sends a datagram to the address it gave (port 9). It returns how many
// datagrams it sent.
func lookupAndSend(pod *topology.Pod, server netip.AddrPort, name string, n int) (int, error) {
	query, err := aQuery(name)
	if err != nil {
		return 0, err
	}
	sent := 0
	err = topology.InNetns(pod.Netns, func() error {
		dnsConn, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(server))
		if err != nil {
			return err
		}
		defer dnsConn.Close()
		out, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return err
		}
		defer out.Close()
		reply := make([]byte, 1500)
		for i := range n {
			_ = dnsConn.SetDeadline(time.Now().Add(convergeTimeout))
			if _, err := dnsConn.Write(query); err != nil {
				return err
			}
			m, err := dnsConn.Read(reply)
			if err != nil {
				return fmt.Errorf("lookup %d of %s: %w", i, name, err)
			}
			addr, err := firstA(reply[:m])
			if err != nil {
				return fmt.Errorf("lookup %d of %s: %w", i, name, err)
			}
			if _, err := out.WriteToUDPAddrPort([]byte("window"), netip.AddrPortFrom(addr, 9)); err != nil {
				return err
			}
			sent++
		}
		return nil
	})
	return sent, err
}

// aQuery is a DNS query for name's A records.
func aQuery(name string) ([]byte, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x5eed, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// firstA is the first A record of a DNS reply.
func firstA(reply []byte) (netip.Addr, error) {
	var p dnsmessage.Parser
	if _, err := p.Start(reply); err != nil {
		return netip.Addr{}, err
	}
	if err := p.SkipAllQuestions(); err != nil {
		return netip.Addr{}, err
	}
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return netip.Addr{}, fmt.Errorf("no A record: %w", err)
		}
		if h.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return netip.Addr{}, err
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return netip.Addr{}, err
		}
		return netip.AddrFrom4(a.A), nil
	}
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
	resolverAddr := netip.MustParseAddr("198.51.100.53")
	e.topo.External.AddAddress(t, resolverAddr)
	e.routeToExternal(resolverAddr)
	var dns *dnstest.Server
	if err := topology.InNetns(e.topo.External.Netns, func() error {
		var err error
		dns, err = dnstest.Start(netip.AddrPortFrom(resolverAddr, 53).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
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
	query, err := aQuery(name)
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
