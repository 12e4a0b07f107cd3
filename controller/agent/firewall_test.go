package agent

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
	"github.com/egressflow/egressflow/test/topology"
)

// expectDenied waits until pod's packets to dst over network get no
// answer and none of them reaches the external host (a capture there sees
// no packet to dst, from the pod's address or any other).
func (e *env) expectDenied(pod *topology.Pod, network string, dst netip.AddrPort) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("%s from %s to %s denied", network, pod.Name, dst), func() error {
		capture := e.topo.External.Capture(e.t)
		src, err := pod.Dial(network, dst)
		packets := capture.Stop()
		if err == nil {
			return fmt.Errorf("answered, seen as %s", src)
		}
		for _, p := range packets {
			if p.Dst == dst.Addr() {
				return fmt.Errorf("reached the external host: %s", p.Line)
			}
		}
		return nil
	})
}

// podLookup asks server, from inside pod's namespace, for name's IPv4
// addresses over UDP, as the pod's own resolver would, and returns them.
func podLookup(t testing.TB, pod *topology.Pod, server netip.AddrPort, name string) []netip.Addr {
	t.Helper()
	var b dnsmessage.Builder
	b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x5eed, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	query, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pod.Connect("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(convergeTimeout))
	if _, err := conn.Write(query); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 1500)
	n, err := conn.Read(reply)
	if err != nil {
		t.Fatalf("%s's lookup of %s: %v", pod.Name, name, err)
	}
	var p dnsmessage.Parser
	if _, err := p.Start(reply[:n]); err != nil {
		t.Fatal(err)
	}
	if err := p.SkipAllQuestions(); err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if h.Type != dnsmessage.TypeA {
			_ = p.SkipAnswer()
			continue
		}
		a, err := p.AResource()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, netip.AddrFrom4(a.A))
	}
	return out
}

// externalDNSAddr is where externalDNS serves, on the external host.
var externalDNSAddr = netip.MustParseAddr("198.51.100.53")

// externalDNS starts a DNS server on the external host at
// externalDNSAddr:53, which the nodes route to, as the pods' resolver
// outside the cluster; it stops with the test.
func (e *env) externalDNS() *dnstest.Server {
	e.t.Helper()
	e.topo.External.AddAddress(e.t, externalDNSAddr)
	e.routeToExternal(externalDNSAddr)
	var server *dnstest.Server
	if err := topology.InNetns(e.topo.External.Netns, func() error {
		var err error
		server, err = dnstest.Start(netip.AddrPortFrom(externalDNSAddr, 53).String())
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = server.Close() })
	return server
}

// expectServes opens a TCP connection from client to a server it starts
// in pod, on the pod's IPv4 address, and fails the test unless the pod's
// answer comes back.
func expectServes(t *testing.T, pod *topology.Pod, client *topology.Host) {
	t.Helper()
	var l net.Listener
	if err := topology.InNetns(pod.Netns, func() error {
		var err error
		l, err = net.Listen("tcp4", netip.AddrPortFrom(pod.IP, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(convergeTimeout))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		_, _ = conn.Write([]byte("served " + line))
	}()
	var conn net.Conn
	if err := topology.InNetns(client.Netns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp4", l.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("%s to %s's server: %v", client.Name, pod.Name, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || answer != "served hello\n" {
		t.Fatalf("%s to %s's server: answer %q, %v", client.Name, pod.Name, answer, err)
	}
}

// expectPing waits until a ping from pod to dst is answered (ok) or gets
// no answer (!ok).
func (e *env) expectPing(pod *topology.Pod, dst netip.Addr, ok bool) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("ping from %s to %s answered: %v", pod.Name, dst, ok), func() error {
		err := pod.Ping(dst, 1)
		switch {
		case ok && err != nil:
			return err
		case !ok && err == nil:
			return fmt.Errorf("answered")
		}
		return nil
	})
}

// TestAgentEgressFirewall judges real packets: two nodes, the dual-stack
// service web hosted on n1 with an endpoint on each node, a pod app on n1,
// all in namespace shop, and a pod in namespace open, which has no
// EgressFirewall. shop/default says, in order:
//
//	0: Allow TCP to the external host's IPv4 address, on the server's port
//	1: Deny everything else to that address
//	2: Deny nodes labelled role=infra
//	3: Deny 10.0.0.0/8 (which holds the pod and service CIDRs)
//	4: Deny UDP to ::/0 on the server's port
//	5: Deny dnsName Blocked.Test. (answered by the test's DNS server)
//
// It checks TCP allowed and UDP denied by rule order, port and protocol,
// in both families; the endpoints' denied packets never SNATed nor
// steered (no packet reaches the external host) while their allowed ones
// leave with the LB IP; a connection the external host opens to a pod
// answered though a rule denies the pod's packets to it; a name's address
// denied, and the name's new
// address once its answer changes (the old one allowed again once its TTL
// has run out), and kept across an agent restart; pod-to-pod and pod-to-service traffic never
// blocked, though rule 3 covers them; a node's label added, which denies
// it; an established TCP connection cut once the rule that allowed it
// goes (as the reference applies ACL changes to established connections);
// the agents' metrics and firewall watermark; and the object deleted,
// which allows everything again.
func TestAgentEgressFirewall(t *testing.T) {
	e := newEnv(t, 2)
	dns, err := dnstest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	dns.Set("blocked.test", dnstest.A(internet[0].String(), 1))
	e.dnsServers = []netip.AddrPort{dns.Addr()}
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	ep1, ep2, app := e.addPod(n1, "ep1"), e.addPod(n2, "ep2"), e.addPod(n1, "app")
	ctx := context.Background()
	if _, err := e.admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	open := n1.AddPod(t, "open")
	e.admin.CreatePod(t, "open", open, nil)
	lbs := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	e.hostWeb(n1, lbs, ep1, ep2)

	ext4, ext6 := e.server.Addr, e.server.Addr6
	port := []esv1.EgressFirewallPort{{Protocol: "TCP", Port: int32(ext4.Port())}}
	udpPort := []esv1.EgressFirewallPort{{Protocol: "UDP", Port: int32(ext4.Port())}}
	infra := esv1.LabelSelector{MatchLabels: map[string]string{"role": "infra"}}
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{CIDRSelector: ext4.Addr().String() + "/32"}, Ports: port},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: ext4.Addr().String() + "/32"}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{NodeSelector: &infra}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "10.0.0.0/8"}},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "::/0"}, Ports: udpPort},
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "Blocked.Test."}},
		}},
	}
	// Before: everything passes; n2 answers pings.
	e.expectSource(app, "udp", app.IP)
	e.expectPing(app, n2.IP, true)
	created, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(ctx, fw, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	e.expectDenied(app, "udp", ext4)                                  // rule 1
	e.expectSource(app, "tcp", app.IP)                                // rule 0 first
	e.expectDenied(app, "udp", ext6)                                  // rule 4: UDP on the port
	e.expectSourceAt(app, "tcp", ext6, app.IP6)                       // not TCP
	e.expectDenied(ep1, "udp", ext4)                                  // never SNATed on the host
	e.expectDenied(ep2, "udp", ext4)                                  // never steered from n2
	e.expectSource(ep1, "tcp", lbs[0])                                // allowed: SNATed
	e.expectSource(ep2, "tcp", lbs[0])                                // steered, SNATed
	e.expectSourceAt(ep2, "tcp", ext6, lbs[1])                        // in IPv6 too
	e.expectSource(open, "udp", open.IP)                              // another namespace
	e.expectPing(app, ep2.IP, true)                                   // pod to pod: exempt from rule 3
	e.expectPing(app, ep2.IP6, true)                                  // in IPv6 too
	e.expectSourceAt(app, "udp", e.server.At(clusterIPs[0]), app.IP)  // pod to service: exempt
	e.expectSourceAt(app, "udp", e.server.At(clusterIPs[1]), app.IP6) // rule 4 would match it
	e.expectPing(app, n2.IP, true)                                    // n2 is not infra yet
	// A connection the external host opens to app is answered, though
	// rule 1 denies app's packets to it: the firewall judges the
	// connections pods open, not their replies.
	expectServes(t, app, e.topo.External)
	// The internet addresses are the external host's too; the nodes route
	// to them over the underlay.
	e.routeInternet()
	internet4, internet6 := e.server.At(internet[0]), e.server.At(internet[1])
	e.expectDenied(app, "tcp", internet4)            // rule 5: the name's address
	e.expectSourceAt(app, "tcp", internet6, app.IP6) // not an answer of the name

	// The name's answer changes: its new address is denied once the
	// resolver has it, the old one allowed again once its TTL (at least
	// the resolver's floor) has run out since it was last seen.
	dns.Set("blocked.test", dnstest.AAAA(internet[1].String(), 1))
	e.expectDenied(app, "tcp", internet6)
	e.expectSourceAt(app, "tcp", internet4, app.IP)

	// n2 labelled infra: rule 2 denies its addresses.
	e.labelNode(n2, map[string]string{"role": "infra"})
	e.expectPing(app, n2.IP, false)
	e.expectPing(app, n2.IP6, false)
	e.expectPing(open, n2.IP, true) // open has no firewall

	for _, n := range []string{n1.Name, n2.Name} {
		eventually(t, n+" reports its firewall rules, denied packets and watermark", func() error {
			s := samples(t, e.agents[n].metrics, "egressflow_agent_firewall_rules", "egressflow_agent_firewall_denied_packets_total")
			if got := s["egressflow_agent_firewall_rules"]; got != 6 {
				return fmt.Errorf("egressflow_agent_firewall_rules = %v, want 6", got)
			}
			if got := s[`egressflow_agent_firewall_denied_packets_total{namespace="shop"}`]; got == 0 {
				return fmt.Errorf("no denied packet counted for shop")
			}
			return revisionAtLeast(e.agents[n].FirewallRevision(), created.ResourceVersion)
		})
	}

	// A restarted agent keeps the name's flows: its first sync waits for
	// its resolver's first answers instead of taking them away until then.
	before := n1.Ofctl(t, "dump-flows", n1.Bridge, "cookie=0xef10000000000000/0xffff000000000000", "--no-stats")
	e.agents[n1.Name].stop()
	restarted := e.startAgent(n1)
	restarted.waitHealthy(t)
	if mods := restarted.sw.mods.Load(); mods != 0 {
		after := n1.Ofctl(t, "dump-flows", n1.Bridge, "cookie=0xef10000000000000/0xffff000000000000", "--no-stats")
		t.Errorf("restart with nothing changed sent %d flow mods, want 0:\nbefore\n%s\nafter\n%s", mods, before, after)
	}
	e.expectDenied(app, "tcp", internet6)

	// A wildcard: its names cannot be looked up, so it fills only from
	// the DNS replies the pods receive, which the bridge copies to the
	// agent. app asks the external host's DNS server for a name under it.
	external := e.externalDNS() // no rule names its address
	external.Set("x.wild.test", dnstest.A(internet[0].String(), 30))
	current, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Get(ctx, esv1.EgressFirewallName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Spec.Egress = append(current.Spec.Egress, esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "*.wild.test"}})
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectSourceAt(app, "tcp", internet4, app.IP) // nothing learned yet
	if got := podLookup(t, app, external.Addr(), "x.wild.test"); !slices.Equal(got, []netip.Addr{internet[0]}) {
		t.Fatalf("app's lookup of x.wild.test: %v", got)
	}
	e.expectDenied(app, "tcp", internet4) // learned from the reply app received

	// An established connection that rule 0 allowed is cut once rule 0
	// goes: the next packet of every connection is judged by the rules.
	conn, err := app.Connect("tcp", ext4)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if src, err := conn.Probe(); err != nil || src != app.IP {
		t.Fatalf("the connection before the change: %v, %v", src, err)
	}
	current, err = e.admin.ES.K8sV1().EgressFirewalls("shop").Get(ctx, esv1.EgressFirewallName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Spec.Egress = current.Spec.Egress[1:]
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the established connection cut", func() error {
		if src, err := conn.Probe(); err == nil {
			return fmt.Errorf("still answered, seen as %s", src)
		}
		return nil
	})
	e.expectDenied(app, "tcp", ext4)

	// Deleted: everything passes again.
	if err := e.admin.ES.K8sV1().EgressFirewalls("shop").Delete(ctx, esv1.EgressFirewallName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectSource(app, "udp", app.IP)
	e.expectSource(ep2, "udp", lbs[0])
	e.expectSourceAt(app, "udp", ext6, app.IP6)
	e.expectPing(app, n2.IP, true)
	eventually(t, "n1's firewall rules gone", func() error {
		if got := samples(t, e.agents[n1.Name].metrics, "egressflow_agent_firewall_rules")["egressflow_agent_firewall_rules"]; got != 0 {
			return fmt.Errorf("egressflow_agent_firewall_rules = %v, want 0", got)
		}
		return nil
	})
}
