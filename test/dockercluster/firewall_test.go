//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// firewallTTL is the TTL of the test's DNS answers: short, so that an
// answer's change is followed within seconds, and above the resolver's
// floor, so that it is honoured as given.
const firewallTTL = 6

// firewallWindow is how long a look at the external host's capture lasts
// when it must see no packet of a denied flow.
const firewallWindow = 1500 * time.Millisecond

// TestEgressFirewall: an EgressFirewall `default` on the real cluster,
// whose nodes and pods resolve names at a DNS server the test runs in the
// external host's namespace. The namespace holds the scenario's
// EgressService (endpoints on every node, SNATed on the host and steered
// from the others) and a probe pod that sends UDP to the external host on
// two ports of its main IPv4 address, to a second address of each family,
// to its main IPv6 address, and to a name; a pod of another namespace
// sends the same. The rules, in order:
//
//	0: Allow UDP to the main IPv4 address, on the scenario's port and the first probe port
//	1: Deny the main IPv4 address (its second probe port)
//	2: Deny dnsName blocked.test (answered with the second IPv4 address)
//	3: Deny the main IPv6 address
//	4: Deny dnsName *.wild.test (x.wild.test answered with a third IPv4 address)
//	5: Deny UDP to node 0 (by its hostname label), on a host-networked server's port
//
// It checks what each target answered (the probe pods' logs) and that no
// denied packet reaches the external host (a capture): rule order, port,
// the name and the address it resolves to, a wildcard (filled only from
// the DNS replies the pods receive, which the bridge copies to the agent),
// IPv6, node 0's addresses from a pod on node 0 (the agent's nftables
// table) and from one on node 1 (TableFirewall), the endpoints' allowed
// packets leaving with the LB IP and their denied ones never SNATed nor
// steered, the other namespace untouched, the status the leader writes
// (Applied on every node) and its Event;
// then the name's answer changes to the second IPv6 address (the old one
// is allowed again once its TTL has run out, the new one denied), the
// object is deleted (everything answered), a namespace at the 8,000-rule
// limit is enforced, and an object not named default is refused. Last,
// the window test (noDNSWindow): 1,000 lookups of a name whose answer
// is a new address each time, denied, by a pod that sends to each answer
// at once: none reaches the external host, for an exact name, a wildcard
// and across an agent restart; the same with the replies copied rather
// than held is counted for comparison.
func TestEgressFirewall(t *testing.T) {
	c := Start(t, Config{Nodes: 3, NodeDNS: true})
	var dns *dnstest.Server
	err := topology.InNetns(c.External.Netns, func() error {
		var err error
		dns, err = dnstest.Start(netip.AddrPortFrom(c.DNSAddr, 53).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	extra4 := netip.MustParseAddr(fmt.Sprintf("172.31.%d.101", c.subnet))
	extra6 := netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::101", c.subnet))
	wild4 := netip.MustParseAddr(fmt.Sprintf("172.31.%d.102", c.subnet))
	dns.Set("blocked.test", dnstest.A(extra4.String(), firewallTTL))
	dns.Set("x.wild.test", dnstest.A(wild4.String(), firewallTTL))

	c.Install()
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	s.expectLBIPs()
	ctx := context.Background()

	c.External.AddAddress(t, extra4)
	c.External.AddAddress(t, extra6)
	c.External.AddAddress(t, wild4)
	first := c.External.Serve(t, extra4, extra6, wild4)
	second := c.External.Serve(t)
	onNode0 := c.HostNetwork(c.Nodes[0]).Serve(t) // a host-networked server of node 0
	main4, main6 := first.Addr.Addr(), first.Addr6.Addr()
	name := fmt.Sprintf("blocked.test:%d", first.Addr.Port())
	wildName := fmt.Sprintf("x.wild.test:%d", first.Addr.Port())
	targets := []string{first.Addr.String(), second.Addr.String(), first.At(extra4).String(), first.At(extra6).String(), first.Addr6.String(), name,
		wildName, first.At(wild4).String()}
	probe := c.RunProbePod(scenarioNamespace, "fa", c.Nodes[0], map[string]string{"app": "fa"}, targets...)
	c.CreateNamespace("free")
	free := c.RunProbePod("free", "fb", c.Nodes[1], nil, targets...)
	ip4, ip6 := podIPs(probe)[0], podIPs(probe)[1]
	free4, free6 := podIPs(free)[0], podIPs(free)[1]
	everything := func(v4, v6 string) []string { return []string{v4, v4, v4, v6, v6, v4, v4, v4} }
	c.ExpectSources(probe, targets, everything(ip4, ip6))
	c.ExpectSources(free, targets, everything(free4, free6))

	firewalls := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressFirewalls(scenarioNamespace)
	udp := func(port uint16) esv1.EgressFirewallPort {
		return esv1.EgressFirewallPort{Protocol: "UDP", Port: int32(port)}
	}
	rules := []esv1.EgressFirewallRule{
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{CIDRSelector: main4.String() + "/32"},
			Ports: []esv1.EgressFirewallPort{udp(s.server.Addr.Port()), udp(first.Addr.Port())}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: main4.String() + "/32"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "blocked.test"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: main6.String() + "/128"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: "*.wild.test"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{NodeSelector: &esv1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelHostname: c.Nodes[0].Name}}}, Ports: []esv1.EgressFirewallPort{udp(onNode0.Addr.Port())}},
	}
	if _, err := firewalls.Create(ctx, &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: esv1.EgressFirewallSpec{Egress: rules}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	c.ExpectSources(probe, targets, []string{ip4, "", "", ip6, "", "", "", ""})
	// Rule 5, from a pod on the denied node itself (its packets to the
	// node's addresses never cross br-ex: the agent's nftables table judges
	// them) and from a pod on another node (TableFirewall there).
	toNode0 := []string{onNode0.Addr.String(), onNode0.Addr6.String()}
	onOwnNode := c.RunProbePod(scenarioNamespace, "fo", c.Nodes[0], nil, toNode0...)
	onOtherNode := c.RunProbePod(scenarioNamespace, "fp", c.Nodes[1], nil, toNode0...)
	c.ExpectSources(onOwnNode, toNode0, []string{"", ""})
	c.ExpectSources(onOtherNode, toNode0, []string{"", ""})
	t.Logf("rules enforced on the probe pod within %v", time.Since(started).Round(100*time.Millisecond))
	lb4 := lbIPs[0].String()
	for _, ep := range s.endpoints {
		c.ExpectSources(ep, s.targets, []string{lb4, ""}) // IPv4 allowed and SNATed; IPv6 denied
	}
	c.ExpectSources(free, targets, everything(free4, free6))
	// No denied packet reaches the external host, from any address: the
	// endpoints' IPv6 is neither SNATed to the LB IP nor steered out.
	denied := map[netip.Addr]bool{main6: true, extra4: true, wild4: true}
	expectNothingTo(t, c, "rules applied", denied, append(podIPs(probe), append(endpointIPs(s), lbIPs[1].String())...))

	// Every agent reports it through its watermark; the leader writes it:
	// status.status in the reference's words (what its clients compare),
	// egressflow's summary as the one message (no rule is invalid).
	const wantStatus = "EgressFirewall Rules applied"
	wantSummary := fmt.Sprintf("Applied on %d/%d nodes", len(c.Nodes), len(c.Nodes))
	wait.Until(t, convergeTimeout, func() error {
		got, err := firewalls.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Status != wantStatus || len(got.Status.Messages) != 1 || got.Status.Messages[0] != wantSummary {
			return fmt.Errorf("status %q, messages %q; want %q and only %q", got.Status.Status, got.Status.Messages, wantStatus, wantSummary)
		}
		return nil
	})
	events, err := c.Kube.CoreV1().Events(scenarioNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=EgressFirewall,reason=Applied"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no Applied Event for the EgressFirewall: %v", err)
	} else {
		t.Logf("status %q, %q; Event %s: %s", wantStatus, wantSummary, events.Items[0].Reason, events.Items[0].Message)
	}

	// The name's answer changes: the new address is denied once the
	// resolver has it; the old one is allowed again once its TTL has run
	// out since it was last seen (an answer a pod may still hold).
	dns.Set("blocked.test", dnstest.AAAA(extra6.String(), firewallTTL))
	changed := time.Now()
	c.ExpectSources(probe, targets, []string{ip4, "", ip4, "", "", "", "", ""})
	t.Logf("the name's new answer followed within %v (TTL %d s)", time.Since(changed).Round(100*time.Millisecond), firewallTTL)

	if err := firewalls.Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.ExpectSources(probe, targets, []string{ip4, ip4, ip4, ip6, ip6, ip6, ip4, ip4})
	c.ExpectSources(onOwnNode, toNode0, podIPs(onOwnNode))
	c.ExpectSources(onOtherNode, toNode0, podIPs(onOtherNode))
	for _, ep := range s.endpoints {
		c.ExpectSources(ep, s.targets, []string{lb4, lbIPs[1].String()})
	}

	// A namespace at the limit: 7,999 rules that match nothing here, and
	// a last one that denies the second IPv4 address.
	var limit []esv1.EgressFirewallRule
	for i := range esv1.MaxEgressFirewallRules - 1 {
		cidr := fmt.Sprintf("100.%d.%d.%d/32", 64+i/65536, i/256%256, i%256)
		limit = append(limit, esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: cidr}})
	}
	limit = append(limit, esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: extra4.String() + "/32"}})
	if _, err := firewalls.Create(ctx, &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: esv1.EgressFirewallSpec{Egress: limit}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started = time.Now()
	c.ExpectSources(probe, targets, []string{ip4, ip4, "", ip6, ip6, ip6, ip4, ip4})
	t.Logf("%d rules enforced within %v", len(limit), time.Since(started).Round(100*time.Millisecond))

	_, err = firewalls.Create(ctx, &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "strict"},
		Spec: esv1.EgressFirewallSpec{Egress: rules}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("an EgressFirewall named strict: %v; want a refusal that names `default`", err)
	}

	// No window: a pod that sends to each answer of a denied name the
	// moment it has it never reaches it (firewall_window_test.go).
	started = time.Now()
	noDNSWindow(t, c, dns)
	t.Logf("window test: %v", time.Since(started).Round(100*time.Millisecond))
}

// endpointIPs are the addresses of the scenario's endpoints.
func endpointIPs(s *egressScenario) []string {
	var out []string
	for _, ep := range s.endpoints {
		out = append(out, podIPs(ep)...)
	}
	return out
}

// expectNothingTo looks at the external host's capture for
// firewallWindow, once the rules are known to be enforced (the probes'
// denied targets go unanswered), and fails the test for each packet from
// any of sources to any of denied that reached it.
func expectNothingTo(t *testing.T, c *Cluster, stage string, denied map[netip.Addr]bool, sources []string) {
	t.Helper()
	from := map[netip.Addr]bool{}
	for _, s := range sources {
		from[netip.MustParseAddr(s)] = true
	}
	capture := c.External.Capture(t)
	time.Sleep(firewallWindow)
	seen := 0
	for _, p := range capture.Stop() {
		if denied[p.Dst] && from[p.Src] {
			t.Errorf("%s: a denied packet reached the external host: %s", stage, p.Line)
		}
		if from[p.Src] {
			seen++
		}
	}
	if seen == 0 {
		t.Errorf("%s: the capture saw no packet from the sources at all", stage)
	}
}
