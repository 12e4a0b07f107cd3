//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/hostfirewall"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// TestEgressServiceOnTheCluster: egressflow installed with kubectl apply -k
// on a three-node cluster whose pod network is flannel (VXLAN, dual-stack:
// a CNI written elsewhere, where the other tests run Debian's bridge
// plugin); an EgressService's endpoints on the host node and on the two
// others reach the external host with the LB IP of each family, their
// replies come back (the probes read the answers: the host un-SNATs them
// and its host stack sends them to the other nodes' endpoints through
// flannel's VXLAN devices), a pod that is no endpoint keeps its own
// addresses, and a capture on the external host sees no endpoint's pod IP
// once the service has a host. Every agent serves its probes on the node's
// address in plain HTTP, and its metrics there over TLS to the
// PodMonitors' token alone (deploy/monitoring).
func TestEgressServiceOnTheCluster(t *testing.T) {
	c := Start(t, Config{Nodes: 3, PodNetwork: FlannelVXLAN})
	c.Install()
	expectFlannelRoutes(t, c)
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	s.expectLBIPs()
	capture := c.External.Capture(t)
	time.Sleep(5 * time.Second) // 100 datagrams per endpoint and family
	s.expectLBIPs()
	fromLB, flooded := s.checkNoPodIP(t, capture.Stop())
	if fromLB == 0 || flooded > 0 {
		t.Errorf("%d packets from the LB IPs, %d pod-IP frames flooded past the external host: want some and none", fromLB, flooded)
	}
	t.Logf("host %s; %d packets from the LB IPs in 5 s, none from a pod IP", s.host().Name, fromLB)

	// The agents run hardened (deploy/agent/daemonset.yaml: no capability
	// but NET_ADMIN, read-only root, RuntimeDefault seccomp). Their probes'
	// port answers on the node's address in plain HTTP; their metrics
	// there too, over TLS, to the scraper's token (the Secret the cluster's
	// token controller filled for deploy/monitoring's PodMonitors): 401
	// without a token or with one the API server does not know, 403 for a
	// user without get on /metrics.
	client := topology.HTTPClient(c.External.Netns)
	tokens := kubetest.MetricsTokens{Invalid: "not-a-token", Unauthorized: kubetest.Stranger.Token, Scraper: c.ScraperToken()}
	for _, n := range c.Nodes {
		resp, err := client.Get("http://" + netip.AddrPortFrom(n.IP, 9102).String() + "/readyz")
		if err != nil {
			t.Errorf("%s: agent probes' port: %v", n.Name, err)
		} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: agent /readyz: %s", n.Name, resp.Status)
		}
		t.Run("metrics of "+n.Name, func(t *testing.T) {
			kubetest.CheckMetricsAuth(t, c.agentMetricsTransport(), netip.AddrPortFrom(n.IP, AgentMetricsPort).String(), tokens,
				"egressflow_agent_openflow_connected 1")
		})
	}
}

// expectFlannelRoutes fails the test unless every node routes the other
// nodes' pod CIDRs as flannel's backend does (flanneld leased each node its
// Node's pod CIDRs and wrote the routes; node-setup.sh wrote none):
// through its VXLAN devices, or, with host-gw, via the other node's
// addresses. Its pods' replies from another host node travel there.
func expectFlannelRoutes(t *testing.T, c *Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		for _, o := range c.Nodes {
			if o == n {
				continue
			}
			routes := []struct{ family, cidr, want string }{{"-4", o.PodCIDR4.String(), "flannel.1"}, {"-6", o.PodCIDR6.String(), "flannel-v6.1"}}
			if c.podNetwork == FlannelHostGW {
				routes[0].want, routes[1].want = o.IP.String(), o.IP6.String()
			}
			for _, r := range routes {
				wait.Until(t, convergeTimeout, func() error {
					route := strings.TrimSpace(c.Exec(n, "ip", r.family, "route", "show", r.cidr))
					if !slices.Contains(strings.Fields(route), r.want) {
						return fmt.Errorf("%s routes %s as %q, want through %s", n.Name, r.cidr, route, r.want)
					}
					return nil
				})
			}
		}
	}
}

// TestHostFailures: the host node freezes (docker pause) and later, once it
// is back, the next host loses power (docker kill), while the endpoints on
// the other nodes send in both families. Each time another node takes over
// and the LB IPs leave through it, and a capture on the external host never
// sees an endpoint's pod IP. Three EgressRouters, one per node, redirect a
// client's datagrams in both families to the external host: those of the
// failed node resume through their new holders within the same bound, the
// external host's neighbour entries follow the takeover's announcements,
// and the capture sees the redirected datagrams only from the reserved
// addresses, never from the client's pod IP or a node's IP. The EgressService keeps off the node of the
// leading controller, whose own failure is another story (leader election).
// The pods use flannel with its host-gw backend.
func TestHostFailures(t *testing.T) {
	c := Start(t, Config{Nodes: 3, PodNetwork: FlannelHostGW})
	c.Install()
	expectFlannelRoutes(t, c)
	s := newEgressScenario(t, c, offLeader(c))
	s.expectLBIPs()
	routers := newRouterScenario(t, c, s.server)
	capture := c.captureFlowing(t, s.server, append(routers.reserved(), lbIPs...)...)
	holders := routers.awaitAvailable(t, func(map[string]string) error { return nil })
	frozen, took := s.failHostWithin(t, "pause")
	frozenAt, afterFreeze := s.faultAt, s.host()
	t.Logf("%s frozen: LB-IP traffic through %s %v later", frozen.Name, s.host().Name, took.Round(time.Millisecond))
	routers.expectResumed(t, frozen, s.faultAt, holders)
	c.docker("unpause", frozen.Container)
	// Back from its freeze, its switch first forwards what it had queued
	// meanwhile through its old flows, answers to neighbour requests for
	// its old routers' addresses among them; its agent then fences, and
	// hands those addresses back to their holders once it unfences. No
	// router's traffic stays with it: the next fault's outage is read
	// after that.
	c.waitAgentRenewing(frozen)
	routers.expectFlowing(t, time.Now().Add(staleFlowsSettle), e2eFailoverBound)
	holders = routers.awaitAvailable(t, func(map[string]string) error { return nil })
	killed, took := s.failHostWithin(t, "kill")
	killedAt, afterKill := s.faultAt, s.host()
	t.Logf("%s killed: LB-IP traffic through %s %v later", killed.Name, s.host().Name, took.Round(time.Millisecond))
	routers.expectResumed(t, killed, s.faultAt, holders)
	// The node back from its freeze is a candidate again: it is the host
	// after the kill, or was already before it. (On two cores, the burst of
	// the unfrozen node's resuming processes has kept another node's agent
	// from answering the probes for their 0.5 s, and the host moved to the
	// unfrozen node then.)
	switch {
	case killed == frozen:
		t.Logf("the host had moved back to %s before the kill, without a fault (see the Events: HostLost, AgentUnreachable)", frozen.Name)
	case s.host() != frozen:
		t.Errorf("after %s was killed the host is %s, want %s, back from its freeze", killed.Name, s.host().Name, frozen.Name)
	}
	for _, ep := range s.endpoints {
		if ep.Spec.NodeName != killed.Name {
			s.c.ExpectSources(ep, s.targets, []string{lbIPs[0].String(), lbIPs[1].String()})
		}
	}
	packets := capture.Stop()
	fromLB, flooded := s.checkNoPodIP(t, packets)
	t.Logf("%d packets from the LB IPs, none from a pod IP received; %d frames steered towards the killed host were flooded past the external host", fromLB, flooded)
	allowed := slices.Clone(lbIPs)
	for _, ip := range podIPs(s.bystander) {
		allowed = append(allowed, netip.MustParseAddr(ip))
	}
	t.Logf("%d datagrams from the routers' reserved addresses, none to their destination from a pod or node IP", routers.checkSources(t, packets, allowed...))
	routers.checkFailovers(t, packets)
	s.expectOutageWithin(t, packets, routers.macs, frozen, afterFreeze, frozenAt)
	s.expectOutageWithin(t, packets, routers.macs, killed, afterKill, killedAt)
}

// TestLeaderCrash: the leading controller's container is killed (SIGKILL
// through the node's containerd, as a crash or an OOM kill would). Another
// process takes the leader Lease once it runs out (a restarted container is
// a new identity, no faster than the standby), and the EgressService keeps
// its host and its label throughout, with LB-IP traffic on both families.
func TestLeaderCrash(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	s.expectLBIPs()
	host, routedAt := s.announcer.Current()
	ctx := context.Background()
	holder := func() string {
		lease, err := c.Kube.CoordinationV1().Leases(Namespace).Get(ctx, "egressflow-controller", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	leader := holder()
	podName, _, _ := strings.Cut(leader, "_")
	pod, err := c.Kube.CoreV1().Pods(Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil || len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("leader pod %s: %v", podName, err)
	}
	_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	var node *Node
	for _, n := range c.Nodes {
		if n.Name == pod.Spec.NodeName {
			node = n
		}
	}
	c.Exec(node, "ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	killed := time.Now()
	wait.Until(t, convergeTimeout, func() error {
		if h := holder(); h == "" || h == leader {
			return fmt.Errorf("leader Lease still held by %q", h)
		}
		return nil
	})
	t.Logf("leader %s killed on %s; %s leads %v later", leader, node.Name, holder(), time.Since(killed).Round(time.Millisecond))
	s.expectLBIPs()
	if now, at := s.announcer.Current(); now != host || !at.Equal(routedAt) {
		t.Errorf("the host moved from %s to %s across the leader's crash", host.Name, now.Name)
	}
	es, err := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || es.Status.Host != host.Name {
		t.Errorf("status.host after the crash: %v, %v; want %s", es.Status.Host, err, host.Name)
	}
}

// TestHostPartition: the host is cut off the network (docker network
// disconnect) while the endpoints on the other nodes send. Another node
// takes over. The cut-off node, unable to renew its Lease, fences itself:
// its SNAT and reply flows go, so it can never send with the LB IP beside
// the new host. Reconnected, it stays fenced until its caches agree with
// the API server, then steers to the new host: its own endpoint leaves
// with the LB IP through the new host. After the reconnection the external
// host sees LB-IP packets from the new host's uplink only, and it never
// receives a pod IP. Last, two of the three nodes are killed at once, the
// host among them: the service moves to the survivor as fast as after one
// death (two in three is no disruption).
func TestHostPartition(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	s := newEgressScenario(t, c, offLeader(c))
	s.expectLBIPs()
	capture := c.External.Capture(t)
	cut, took := s.failHostWithin(t, "disconnect")
	t.Logf("%s cut off: LB-IP traffic through %s %v later", cut.Name, s.host().Name, took.Round(time.Millisecond))
	wait.Until(t, convergeTimeout, func() error {
		if flows := c.Exec(cut, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex"); strings.Contains(flows, "nat(src=") {
			return fmt.Errorf("%s still has SNAT flows", cut.Name)
		}
		return nil
	})
	t.Logf("%s fenced itself: no SNAT flow left", cut.Name)
	c.Reconnect(cut)
	reconnected := time.Now()
	newHost := s.host()
	for _, ep := range s.endpoints {
		if ep.Spec.NodeName == cut.Name {
			c.ExpectSources(ep, s.targets, []string{lbIPs[0].String(), lbIPs[1].String()})
		}
	}
	t.Logf("%s reconnected: its endpoint leaves through %s %v later", cut.Name, newHost.Name, time.Since(reconnected).Round(time.Millisecond))
	packets := capture.Stop()
	hostMAC := strings.TrimSpace(c.Exec(newHost, "cat", "/sys/class/net/br-ex/address"))
	for _, p := range packets {
		if (p.Src == lbIPs[0] || p.Src == lbIPs[1]) && p.Time.After(reconnected) && p.SrcMAC != hostMAC {
			t.Errorf("after the reconnection, an LB-IP packet not from the new host %s (%s): from %s: %s", newHost.Name, hostMAC, p.SrcMAC, p)
		}
	}
	fromLB, flooded := s.checkNoPodIP(t, packets)
	t.Logf("%d packets from the LB IPs, none from a pod IP received; %d pod-IP frames flooded past", fromLB, flooded)

	// Two of the three nodes lose power at once, the host among them:
	// two deaths in three is no disruption, so the service moves to the
	// survivor (the leader's node, allowed to host from now on) at once.
	es := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace)
	web, err := es.Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.NodeSelector = metav1.LabelSelector{}
	if _, err := es.Update(context.Background(), web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	survivor := c.LeaderNode()
	var victims []string
	for _, n := range c.Nodes {
		if n != survivor {
			victims = append(victims, n.Container)
		}
	}
	capture = c.External.Capture(t)
	c.docker(append([]string{"kill"}, victims...)...)
	took = s.awaitLBIPs(t, time.Now(), func(host *Node) error {
		if host != survivor {
			return fmt.Errorf("the LB IPs go to %v, want the survivor %s", host, survivor.Name)
		}
		return nil
	})
	if took > e2eFailoverBound {
		t.Errorf("two of three nodes killed: LB-IP traffic through %s %v later, want within %v", survivor.Name, took, e2eFailoverBound)
	}
	t.Logf("two of three nodes killed: LB-IP traffic through %s %v later", survivor.Name, took.Round(time.Millisecond))
	fromLB, flooded = s.checkNoPodIP(t, capture.Stop())
	t.Logf("%d packets from the LB IPs, none from a pod IP received; %d pod-IP frames flooded past", fromLB, flooded)
}

// TestUninstall: kubectl delete -k deploy/, under traffic, removes
// egressflow from the cluster and from every node: no flow with its cookie,
// no ip rule of its own, no egress-service label and no hold of
// ovs-vswitchd remain, and the pods leave with their own addresses again
// (the pod guard is gone with the rest). An EgressService in Network mode
// gives the bystander's node ip rules to remove.
func TestUninstall(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	s.expectLBIPs()
	ctx := context.Background()
	routed := c.CreateLoadBalancer(scenarioNamespace, "net", map[string]string{"app": "other"}, netip.MustParseAddr("198.51.100.20"))
	es := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace)
	if _, err := es.Create(ctx, &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: scenarioNamespace, Name: routed.Name},
		Spec: esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "100"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bystanderNode := c.Nodes[len(c.Nodes)-1]
	wait.Until(t, convergeTimeout, func() error {
		if rules := c.Exec(bystanderNode, "ip", "rule", "show"); !strings.Contains(rules, "lookup 100") {
			return fmt.Errorf("no rule of shop/net on %s:\n%s", bystanderNode.Name, rules)
		}
		return nil
	})

	c.FollowLogs("app.kubernetes.io/name=egressflow-controller")
	started := time.Now()
	c.Uninstall()
	t.Logf("kubectl delete -k deploy/ returned after %v", time.Since(started).Round(time.Millisecond))
	expectEgressflowGone(t, c)
	t.Logf("every node clean %v after kubectl delete -k", time.Since(started).Round(time.Millisecond))
	for _, ep := range s.endpoints {
		c.ExpectSources(ep, s.targets, podIPs(ep))
	}
	// The workloads' uninstall leaves the API and the users' objects.
	c.ExpectAPIKept("egressservice/"+scenarioNamespace+"/web", "egressservice/"+scenarioNamespace+"/"+routed.Name)
}

// expectEgressflowGone waits until egressflow is gone from the cluster and
// from every node: no flow with its cookie, no ip rule of its own, no hold
// of ovs-vswitchd and no egress-service label.
func expectEgressflowGone(t *testing.T, c *Cluster) {
	t.Helper()
	ctx := context.Background()
	wait.Until(t, convergeTimeout, func() error {
		var left []string
		for _, n := range c.Nodes {
			if flows := strings.TrimSpace(c.Exec(n, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex", "cookie=0xef10000000000000/0xffff000000000000", "--no-stats")); strings.Contains(flows, "cookie=") {
				left = append(left, fmt.Sprintf("%s flows:\n%s", n.Name, flows))
			}
			for _, family := range []string{"-4", "-6"} {
				for _, line := range strings.Split(c.Exec(n, "ip", family, "rule", "show"), "\n") {
					if p, _, _ := strings.Cut(line, ":"); p == "4999" || p == "5000" || p == "5001" {
						left = append(left, fmt.Sprintf("%s ip rule %s", n.Name, line))
					}
				}
			}
			// The node's own netdev guard (node-setup.sh) is not the agent's.
			tables := c.Exec(n, "nft", "list", "tables")
			if slices.Contains(strings.Split(tables, "\n"), "table "+string(hostfirewall.Family)+" "+hostfirewall.TableName) {
				left = append(left, fmt.Sprintf("%s nftables:\n%s", n.Name, tables))
			}
			if config := c.Exec(n, "ovs-vsctl", "get", "Open_vSwitch", ".", "other_config"); strings.Contains(config, "flow-restore-wait") {
				left = append(left, fmt.Sprintf("%s other_config %s", n.Name, config))
			}
			node, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for k := range node.Labels {
				if strings.HasPrefix(k, "egress-service.k8s.ovn.org/") {
					left = append(left, fmt.Sprintf("%s label %s", n.Name, k))
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("egressflow left:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
}
