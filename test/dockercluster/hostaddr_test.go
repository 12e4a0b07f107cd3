//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// TestHostAddresses: one node gets a secondary address of each family on
// its br-ex, beside its node IPs, as a VIP or a management address would
// be, and a host-networked server listens on them. On the real cluster in
// Docker, with an EgressService (endpoints on every node, hosted on another
// node) and an EgressIP (selected pods on every node, its addresses held
// by the other nodes):
//
//   - published: every endpoint and every selected pod reaches the server
//     with its own pod IPs, IPv4 and IPv6, while reaching the external host
//     with the LB IPs and the egress IPs;
//   - withdrawn: the addresses leave the node for the external host, and
//     traffic to them is egress again: SNATed to the LB IPs and the egress
//     IPs.
func TestHostAddresses(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	ctx := context.Background()
	external := c.External.Serve(t)
	toExternal := []string{external.Addr.String(), external.Addr6.String()}

	// The secondary addresses on the last node's br-ex, routed there from
	// every other node, and a server on them in its host network. That
	// node neither hosts the EgressService nor holds an egress IP: a
	// packet SNATed or steered there would reach its own address with the
	// pod's IP all the same.
	owner := c.Nodes[len(c.Nodes)-1]
	secondary := []netip.Addr{
		netip.MustParseAddr(fmt.Sprintf("192.168.%d.77", c.subnet)),
		netip.MustParseAddr(fmt.Sprintf("fd00:192:168:%x::77", c.subnet)),
	}
	added := time.Now()
	for _, addr := range secondary {
		args := []string{"ip", "addr", "add", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", "br-ex"}
		if addr.Is6() {
			args = append(args, "nodad")
		}
		c.Exec(owner, args...)
		for _, n := range c.Nodes {
			if n != owner {
				c.Exec(n, "ip", "route", "add", addr.String(), "via", nodeIP(owner, addr).String())
			}
		}
	}
	wait.Until(t, convergeTimeout, func() error { return c.publishes(owner, secondary, true) })
	t.Logf("%s published %v %v after they were added", owner.Name, secondary, time.Since(added).Round(time.Millisecond))
	onNode := c.HostNetwork(owner)
	onNode.IP, onNode.IP6 = secondary[0], secondary[1]
	server := onNode.Serve(t)
	toSecondary := []string{server.Addr.String(), server.Addr6.String()}
	targets := append(slices.Clone(toExternal), toSecondary...)

	// The EgressService web, endpoints on every node.
	const shop = "shop"
	c.CreateNamespace(shop)
	announcer := c.Announce("egress-service.k8s.ovn.org/shop-web", lbIPs...)
	var endpoints []*corev1.Pod
	for i, n := range c.Nodes {
		endpoints = append(endpoints, c.RunProbePod(shop, fmt.Sprintf("web-%d", i+1), n, map[string]string{"app": "web"}, targets...))
	}
	c.CreateLoadBalancer(shop, "web", map[string]string{"app": "web"}, lbIPs...)
	ess := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(shop)
	offOwner := esv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpNotIn, Values: []string{owner.Name}}}}}
	if _, err := ess.Create(ctx, &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: shop, Name: "web"}, Spec: offOwner}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The EgressIP billing, its pods on every node, the other nodes egress
	// nodes.
	for _, n := range c.Nodes {
		if n != owner {
			c.labelEgressNode(t, n, true)
		}
	}
	selected := c.createEgressIPNamespace(t, "billing", targets)
	c.createEgressIP(t)
	eips := c.egressIPs()

	lbSources := []string{lbIPs[0].String(), lbIPs[1].String()}
	eipSources := []string{eips[0].String(), eips[1].String()}
	if !c.Run(t, "published", func(t *testing.T) {
		for _, p := range endpoints {
			c.ExpectSources(p, toExternal, lbSources)
			c.ExpectSources(p, toSecondary, podIPs(p))
		}
		for _, p := range selected {
			c.ExpectSources(p, toExternal, eipSources)
			c.ExpectSources(p, toSecondary, podIPs(p))
		}
		host, _ := announcer.Current()
		if host == owner {
			t.Fatalf("the EgressService is hosted on %s, which holds the addresses", owner.Name)
		}
		t.Logf("EgressService host %s; every endpoint and selected pod reached %s's secondary addresses with its own IPs", host.Name, owner.Name)
	}) {
		return // the addresses are not known to be exempt: their withdrawal would prove nothing
	}

	c.Run(t, "withdrawn", func(t *testing.T) {
		// The addresses leave the node for the external host, which serves
		// them on the same port: the probes keep sending there.
		removed := time.Now()
		outside := &topology.Host{Name: "external", Netns: c.External.Netns, IP: secondary[0], IP6: secondary[1]}
		for _, addr := range secondary {
			c.Exec(owner, "ip", "addr", "del", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", "br-ex")
			c.External.AddAddress(t, addr)
			via := c.External.IP
			if addr.Is6() {
				via = c.External.IP6
			}
			for _, n := range c.Nodes {
				c.Exec(n, "ip", "route", "replace", addr.String(), "via", via.String())
			}
		}
		outside.ServeAt(t, server.Addr.Port())
		wait.Until(t, convergeTimeout, func() error { return c.publishes(owner, secondary, false) })
		for _, p := range endpoints {
			c.ExpectSources(p, toSecondary, lbSources)
		}
		for _, p := range selected {
			c.ExpectSources(p, toSecondary, eipSources)
		}
		t.Logf("traffic to the withdrawn addresses SNATed again %v after they left %s", time.Since(removed).Round(time.Millisecond), owner.Name)
	})
}

// nodeIP is n's node IP of addr's family.
func nodeIP(n *Node, addr netip.Addr) netip.Addr {
	if addr.Is6() {
		return n.IP6
	}
	return n.IP
}

// publishes checks that n's agent publishes its node IPs on its heartbeat
// Lease, and the addresses (want) or none of them.
func (c *Cluster) publishes(n *Node, addrs []netip.Addr, want bool) error {
	l, err := c.Kube.CoordinationV1().Leases(Namespace).Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	got := heartbeat.ReadFacts(l).HostAddresses
	if !slices.Contains(got, n.IP) || !slices.Contains(got, n.IP6) {
		return fmt.Errorf("%s publishes %v, without its node IPs", n.Name, got)
	}
	for _, addr := range addrs {
		if slices.Contains(got, addr) != want {
			return fmt.Errorf("%s publishes %v", n.Name, got)
		}
	}
	return nil
}
