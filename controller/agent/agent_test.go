package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dnsresolve"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/hostfirewall"
	"github.com/egressflow/egressflow/controller/iprule"
	"github.com/egressflow/egressflow/controller/ovsdb"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// convergeTimeout bounds every wait for the agents to converge; they
// normally take tens of milliseconds.
const convergeTimeout = 20 * time.Second

// serviceCIDRs are the cluster's ClusterIP ranges, one per family, and
// clusterIPs an address in each.
var (
	serviceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")}
	clusterIPs   = []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:10:96::10")}
)

// countingSwitch counts the flow mods an agent sends.
type countingSwitch struct {
	Switch
	mods atomic.Int64
}

func (s *countingSwitch) BeginBundle(ctx context.Context) (Bundle, error) {
	b, err := s.Switch.BeginBundle(ctx)
	if err != nil {
		return nil, err
	}
	return countingBundle{Bundle: b, mods: &s.mods}, nil
}

// countingBundle counts the flow mods added to a bundle (sent, whether or
// not it commits).
type countingBundle struct {
	Bundle
	mods *atomic.Int64
}

func (b countingBundle) Add(ctx context.Context, msgs openflow.Sequence) error {
	b.mods.Add(int64(msgs.Len()))
	return b.Bundle.Add(ctx, msgs)
}

// env is a cluster: an API server, nodes with OVS, pods, an external host.
type env struct {
	t      testing.TB
	topo   *topology.Topology
	admin  *clustertest.Env // admin clients, and the test objects' helpers
	server *topology.SourceServer
	// rtTables names routing table 100 "blue", as /etc/iproute2/rt_tables would.
	rtTables string
	// agentKube and agentEgress are the agents' clients: the agent's service
	// account, with only the deploy/agent RBAC.
	agentKube   kubernetes.Interface
	agentEgress versioned.Interface
	// unguarded starts agents as before the restart guard: no hold of a
	// restarting vswitchd, and the remote reconnect backoff (100 ms
	// doubling to 5 s) on the local socket. For comparison only.
	unguarded bool
	// configureAgents, if not nil, changes the Config of every agent
	// started, before startAgent's own configure functions.
	configureAgents func(*Config)
	// dnsServers, if any, are where each agent started resolves
	// EgressFirewall's names (a resolver of its own, which also learns the
	// DNS replies its bridge copies: SnoopDNS); none: no resolver.
	dnsServers []netip.AddrPort
	// agents are the agents started last on each node, by node name.
	agents map[string]*runningAgent
}

// agentManifests are applied to every test API server: the agent runs with
// exactly these permissions (and the DaemonSet is validated by the server),
// and the cluster component's node-view publisher with its own.
var agentManifests = []string{"deploy/controller/namespace.yaml", "deploy/agent/rbac.yaml", "deploy/agent/rbac-dataplane.yaml", "deploy/agent/daemonset.yaml",
	"deploy/controller/rbac.yaml"}

func newEnv(t testing.TB, nodes int) *env {
	api := kubetest.Start(t)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range agentManifests {
		kubetest.Apply(t, api.Config(kubetest.Admin), filepath.Join(root, m))
	}
	kubetest.PublishNodeViews(t, api.Config(kubetest.Controller), nil)
	e := &env{
		t:    t,
		topo: topology.New(t, nodes),
		admin: &clustertest.Env{Cluster: api, Kube: kubernetes.NewForConfigOrDie(api.Config(kubetest.Admin)),
			ES: versioned.NewForConfigOrDie(api.Config(kubetest.Admin))},
		agentKube:   kubernetes.NewForConfigOrDie(api.Config(kubetest.Agent)),
		agentEgress: versioned.NewForConfigOrDie(api.Config(kubetest.Agent)),
		agents:      map[string]*runningAgent{},
	}
	// A ClusterIP of each family lives on the external host, as a service
	// whose backend is reached through the nodes' routes would: packets to
	// it must keep the pod's source.
	for i, ip := range clusterIPs {
		e.topo.External.AddAddress(t, ip)
		via := e.topo.External.IP
		if ip.Is6() {
			via = e.topo.External.IP6
		}
		for _, n := range e.topo.Nodes {
			n.Exec(t, "ip", "route", "add", serviceCIDRs[i].String(), "via", via.String())
		}
	}
	// The external host also holds the internet addresses (see internet).
	for _, dst := range internet {
		e.topo.External.AddAddress(t, dst)
	}
	e.server = e.topo.External.Serve(t, append(slices.Clone(clusterIPs), internet...)...)
	// On failure, what the bridges did: every flow with its packet counts,
	// and the SNAT zone's connections.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range e.topo.Nodes {
			t.Logf("%s flows:\n%s\n%s conntrack zone %d:\n%s", n.Name, n.Ofctl(t, "dump-flows", n.Bridge),
				n.Name, conntrack.SNATZone, n.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", conntrack.SNATZone)))
		}
	})
	e.rtTables = filepath.Join(t.TempDir(), "rt_tables")
	if err := os.WriteFile(e.rtTables, []byte("100 blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range e.topo.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
		created, err := e.admin.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.IP.String()},
			{Type: corev1.NodeInternalIP, Address: n.IP6.String()},
		}
		if _, err := e.admin.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The heartbeat, as the agent's main publishes it: the bridge MAC.
		mac := n.BridgeMAC(t)
		renewer, err := heartbeat.NewRenewer(e.agentKube.CoordinationV1(), heartbeat.RenewerConfig{
			Namespace: kubetest.SystemNamespace, NodeName: n.Name, LeaseDuration: time.Hour, RenewInterval: time.Minute,
			Facts: func() heartbeat.Facts { return heartbeat.Facts{BridgeMAC: mac} },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := renewer.RenewOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// addPod adds a pod to node n and its Pod object, in namespace shop.
func (e *env) addPod(n *topology.Node, name string) *topology.Pod {
	pod := n.AddPod(e.t, name)
	e.admin.CreatePod(e.t, "shop", pod, nil)
	return pod
}

// labelNode sets the labels of n's Node object.
func (e *env) labelNode(n *topology.Node, labels map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	node, err := e.admin.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	node.Labels = labels
	if _, err := e.admin.Kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// runningAgent is an agent started by startAgent.
type runningAgent struct {
	*Agent
	// metrics is the agent's registry, as its main serves it.
	metrics *prometheus.Registry
	sw      *countingSwitch
	client  *ofconn.Client
	stop    func()
}

// startAgent runs an agent for node as the agent's main does, and stops it
// when the test ends (or earlier through stop). Each of configure, if any,
// changes its Config first.
func (e *env) startAgent(n *topology.Node, configure ...func(*Config)) *runningAgent {
	t := e.t
	ctx, cancel := context.WithCancel(context.Background())
	var forwarding ForwardingGate = ovsdb.Database{Target: "unix:" + filepath.Join(n.Dir, "db.sock")}
	var opts []ofconn.Option
	if e.unguarded {
		forwarding = nil
		opts = append(opts, ofconn.WithReconnectBackoff(ofconn.DefaultMinBackoff, ofconn.DefaultMaxBackoff))
	}
	client, err := ofconn.Dial(ctx, "unix:"+n.MgmtSocket, opts...)
	if err != nil {
		t.Fatal(err)
	}
	nsHandle, err := netns.GetFromName(n.Netns)
	if err != nil {
		t.Fatal(err)
	}
	handle, err := netlink.NewHandleAt(nsHandle)
	if err != nil {
		t.Fatal(err)
	}
	sw := &countingSwitch{Switch: OpenFlowSwitch{Client: client}}
	reg := prometheus.NewPedanticRegistry()
	cfg := Config{
		Node: dataplane.NodeConfig{
			Name:            n.Name,
			ClusterPodCIDRs: []netip.Prefix{topology.ClusterPodPrefix, topology.ClusterPodPrefix6},
			ServiceCIDRs:    serviceCIDRs,
		},
		UplinkPort:   topology.UplinkPort,
		Namespace:    kubetest.SystemNamespace,
		Kube:         e.agentKube,
		Egress:       e.agentEgress,
		Switch:       sw,
		Forwarding:   forwarding,
		Disconnected: client.Disconnected(),
		Rules:        iprule.NewManager(handle, n.Bridge),
		HostFirewall: hostfirewall.New(n.NFTables(t, hostfirewall.Family, hostfirewall.TableName)),
		Tables:       iprule.TableResolver{Files: []string{e.rtTables}}.Resolve,
		Metrics:      NewMetrics(reg),
	}
	if len(e.dnsServers) > 0 {
		resolver, err := dnsresolve.New(dnsresolve.Config{Servers: e.dnsServers})
		if err != nil {
			t.Fatal(err)
		}
		resolverDone := make(chan struct{})
		go func() { defer close(resolverDone); _ = resolver.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-resolverDone })
		cfg.DNS = resolver
	}
	if e.configureAgents != nil {
		e.configureAgents(&cfg)
	}
	for _, f := range configure {
		f(&cfg)
	}
	a := New(cfg)
	if resolver, ok := cfg.DNS.(*dnsresolve.Resolver); ok {
		snoopDone, snoopReady := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(snoopDone)
			hold := DNSHold{Learn: resolver.LearnFrame, Generation: resolver.Generation, Applied: a.WaitDNSApplied, NamesSet: a.DNSNamesSet(), Metrics: cfg.Metrics,
				Ready: func() { close(snoopReady) }}
			if err := SnoopDNS(ctx, "unix:"+n.MgmtSocket, hold); err != nil {
				t.Errorf("DNS snoop of %s: %v", n.Name, err)
			}
		}()
		t.Cleanup(func() { cancel(); <-snoopDone })
		select {
		case <-snoopReady:
		case <-time.After(convergeTimeout):
			t.Fatalf("the DNS snoop connection of %s did not come up", n.Name)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx, client.Reconnected()); err != nil {
			t.Errorf("agent %s: %v", n.Name, err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			client.Close()
			handle.Close()
			nsHandle.Close()
		})
	}
	t.Cleanup(stop)
	r := &runningAgent{Agent: a, metrics: reg, sw: sw, client: client, stop: stop}
	e.agents[n.Name] = r
	return r
}

// waitHealthy waits until the agent has synced successfully.
func (r *runningAgent) waitHealthy(t testing.TB) {
	t.Helper()
	eventually(t, "agent healthy", func() error { return r.Healthy(context.Background()) })
}

func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	wait.Until(t, convergeTimeout, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// createService makes a LoadBalancer Service with an ingress IP, its
// EndpointSlice with the pods, and its EgressService with status.host.
func (e *env) createService(name string, lb netip.Addr, host string, pods ...*topology.Pod) {
	e.createEgressService(name, []netip.Addr{lb}, esv1.EgressServiceSpec{}, host, pods...)
}

// createEgressService is createService with any LB IPs (none: an LB Service
// without ingress IP) and spec.
func (e *env) createEgressService(name string, lbs []netip.Addr, spec esv1.EgressServiceSpec, host string, pods ...*topology.Pod) {
	svc := clustertest.Service{Namespace: "shop", Name: name, Endpoints: clustertest.PodEndpoints(pods...)}
	for _, lb := range lbs {
		svc.IngressIPs = append(svc.IngressIPs, lb.String())
	}
	e.admin.CreateHostedService(e.t, svc, spec, host)
}

// setEndpoints makes the pods the service's endpoints, each with both its
// addresses.
func (e *env) setEndpoints(name string, pods ...*topology.Pod) {
	e.admin.SetEndpoints(e.t, "shop", name, clustertest.PodEndpoints(pods...))
}

// announce routes the LB IP to a node from the external host, as an LB
// announcer would.
func (e *env) announce(lb netip.Addr, n *topology.Node) {
	via := n.IP
	if lb.Is6() {
		via = n.IP6
	}
	e.topo.External.Exec(e.t, "ip", "route", "replace", lb.String(), "via", via.String())
}

// expectSource waits until pod's packets reach the external host with want
// as source, over network, in want's family.
func (e *env) expectSource(pod *topology.Pod, network string, want netip.Addr) {
	e.t.Helper()
	server := e.server.Addr
	if want.Is6() {
		server = e.server.Addr6
	}
	e.expectSourceAt(pod, network, server, want)
}

// expectSourceAt is expectSource towards any address the server holds.
func (e *env) expectSourceAt(pod *topology.Pod, network string, server netip.AddrPort, want netip.Addr) {
	e.t.Helper()
	e.expectSourceVia(pod, network, server, e.server, want)
}

// expectSourceVia waits until pod's packets to dst are answered by server
// (and not some other host holding dst) seeing want as their source.
func (e *env) expectSourceVia(pod *topology.Pod, network string, dst netip.AddrPort, server *topology.SourceServer, want netip.Addr) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("%s from %s to %s seen as %s", network, pod.Name, dst, want), func() error {
		before := len(server.Sources())
		got, err := pod.Dial(network, dst)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("seen as %s", got)
		}
		if len(server.Sources()) == before {
			return fmt.Errorf("answered by another host than the expected one")
		}
		return nil
	})
}

// TestAgentsSNATAndSteer: two nodes, an endpoint on each, the dual-stack
// service hosted on node 1. Both endpoints leave with the LB IP of each
// family (TCP, UDP, ICMP) and the replies reach them; a pod that is not an
// endpoint, pod to pod, pod to node and pod to a ClusterIP keep their
// source. Then the host moves to node 2 and back while both endpoints send
// in both families: a capture on the external host sees no packet from an
// endpoint's pod IP from the first convergence to the end, and traffic
// resumes through each new host.
func TestAgentsSNATAndSteer(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	a, b := e.addPod(n1, "a"), e.addPod(n2, "b")
	bystander := e.addPod(n2, "c")
	lbs := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	e.hostWeb(n1, lbs, a, b)

	// From here on the service has a host, and its flows are in place: the
	// external host must never see an endpoint's pod IP again.
	capture := e.topo.External.Capture(t)
	for i, lb := range lbs {
		for _, network := range []string{"udp", "tcp"} {
			e.expectSource(a, network, lb)
			e.expectSource(b, network, lb)
			e.expectSource(bystander, network, bystander.Addrs()[i])
			// A ClusterIP is inside the cluster: never rewritten.
			e.expectSourceAt(a, network, e.server.At(clusterIPs[i]), a.Addrs()[i])
			e.expectSourceAt(b, network, e.server.At(clusterIPs[i]), b.Addrs()[i])
		}
		external := []netip.Addr{e.topo.External.IP, e.topo.External.IP6}[i]
		for _, p := range []*topology.Pod{a, b} {
			if err := p.Ping(external, 1); err != nil {
				t.Errorf("ICMP from %s to %s: %v", p.Name, external, err)
			}
		}
		if err := a.Ping(b.Addrs()[i], 1); err != nil {
			t.Errorf("pod to pod: %v", err)
		}
		if err := b.Ping([]netip.Addr{n1.IP, n1.IP6}[i], 1); err != nil {
			t.Errorf("pod to node: %v", err)
		}
	}
	// What an operator sees: every egressflow flow, by cookie, belongs to
	// shop/web or to the shared set.
	for _, n := range e.topo.Nodes {
		dump := n.Ofctl(t, "dump-flows", n.Bridge, "cookie=0xef10000000000000/0xffff000000000000", "--no-stats")
		t.Logf("ovs-ofctl -O OpenFlow15 dump-flows br-ex on %s (host %s):\n%s", n.Name, n1.Name, dump)
		for _, line := range strings.Split(strings.TrimSpace(dump), "\n")[1:] {
			text, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cookie="), ",")
			cookie, err := strconv.ParseUint(text, 0, 64)
			if err != nil {
				t.Fatalf("unreadable flow line %q: %v", line, err)
			}
			if hash := uint32(cookie >> 8); hash != 0 && hash != dataplane.ServiceHash("shop/web") {
				t.Errorf("flow of an unknown service on %s: %s", n.Name, line)
			}
		}
	}

	// Move the host to node 2 and back while both endpoints keep sending.
	stopProbes := e.probe(a, b)
	for _, host := range []*topology.Node{n2, n1} {
		e.admin.SetHost(e.t, "shop", "web", host.Name)
		for _, lb := range lbs {
			e.announce(lb, host)
		}
		// Both nodes switched roles: the new host SNATs, the other steers
		// to it.
		eventually(t, "roles switched to host "+host.Name, func() error {
			for _, n := range e.topo.Nodes {
				flows := n.Ofctl(t, "dump-flows", n.Bridge)
				snat, steer := strings.Contains(flows, "nat(src="), strings.Contains(flows, "set_field:"+host.BridgeMAC(t)+"->eth_dst,output:")
				if (n == host) != snat || (n == host) == steer {
					return fmt.Errorf("%s: SNAT flows %v, steering to %s %v", n.Name, snat, host.Name, steer)
				}
			}
			return nil
		})
		for _, lb := range lbs {
			e.expectSource(a, "udp", lb)
			e.expectSource(b, "udp", lb)
		}
	}
	sent := stopProbes()

	endpointIPs := map[netip.Addr]bool{a.IP: true, a.IP6: true, b.IP: true, b.IP6: true}
	external := map[netip.Addr]bool{e.topo.External.IP: true, e.topo.External.IP6: true}
	icmpFromLB := map[netip.Addr]bool{}
	var leaked []topology.Packet
	packets := capture.Stop()
	for _, p := range packets {
		if !external[p.Dst] {
			continue // ClusterIP traffic keeps the pod's source, rightly
		}
		if endpointIPs[p.Src] {
			leaked = append(leaked, p)
		}
		if slices.Contains(lbs, p.Src) && strings.Contains(p.Line, "echo request") {
			icmpFromLB[p.Src] = true
		}
	}
	if len(leaked) > 0 {
		for _, p := range leaked[:min(len(leaked), 10)] {
			t.Logf("leaked: %v", p)
		}
		t.Fatalf("the external host received %d packets from endpoint pod IPs while the service had a host", len(leaked))
	}
	if len(icmpFromLB) != len(lbs) {
		t.Errorf("the capture saw ICMP echo requests from LB IPs %v, want both families' (%v)", icmpFromLB, lbs)
	}
	t.Logf("%d packets captured on the external host, %d probes sent across two host changes: no pod IP among their sources", len(packets), sent)
}

// TestAgentRedirectedEndpointsStayClosed: pods attached to br-ex send
// their packets to the node, which routes them back out of br-ex and so
// sends them ICMP redirects; a pod that accepts one sends straight to the
// external host's MAC, past the host stack and past table 0's flows for
// LOCAL. With the pods set to accept redirects in both families, an
// endpoint on the host and one steered from another node (with a foreign
// flow on the host's bridge) must still leave only with the LB IP, for TCP,
// UDP and ICMP: the capture on the external host sees no pod IP.
func TestAgentRedirectedEndpointsStayClosed(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	a, b := e.addPod(n1, "a"), e.addPod(n2, "b")
	lbs := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	n1.Ofctl(t, "add-flow", n1.Bridge, "cookie=0x1234,priority=10,arp,actions=NORMAL") // another controller's
	for _, p := range []*topology.Pod{a, b} {
		// IPv6 pods accept redirects by default; IPv4 ones here only once
		// the "all" switch is on too (a new namespace has it off).
		p.Exec(t, "sysctl", "-qw", "net.ipv4.conf.all.accept_redirects=1", "net.ipv4.conf.eth0.accept_redirects=1", "net.ipv6.conf.eth0.accept_redirects=1")
	}
	e.hostWeb(n1, lbs, a, b)

	capture := e.topo.External.Capture(t)
	externals := []netip.Addr{e.topo.External.IP, e.topo.External.IP6}
	// Long-lived connections keep the route a redirect installs.
	var conns []*topology.Conn
	for _, p := range []*topology.Pod{a, b} {
		for _, server := range []netip.AddrPort{e.server.Addr, e.server.Addr6} {
			conn, err := p.Connect("tcp", server)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			conns = append(conns, conn)
		}
	}
	// redirected reports whether p's route to dst has lost its gateway:
	// it accepted a redirect to the external host itself.
	redirected := func(p *topology.Pod, dst netip.Addr) bool {
		gateway := p.Node.Gateway
		if dst.Is6() {
			gateway = p.Node.Gateway6
		}
		return !strings.Contains(p.Exec(t, "ip", "route", "get", dst.String()), "via "+gateway.String())
	}
	eventually(t, "every pod redirected in both families", func() error {
		for _, c := range conns {
			if _, err := c.Probe(); err != nil {
				return err
			}
		}
		for _, p := range []*topology.Pod{a, b} {
			for _, dst := range externals {
				if !redirected(p, dst) {
					return fmt.Errorf("%s to %s still via its gateway: %s", p.Name, dst, p.Exec(t, "ip", "route", "get", dst.String()))
				}
			}
		}
		return nil
	})
	for i, c := range conns {
		if got, err := c.Probe(); err != nil || got != lbs[i%2] {
			t.Errorf("TCP connection %d after the redirect: seen as %v, %v; want %s", i, got, err, lbs[i%2])
		}
	}
	for i, lb := range lbs {
		for _, p := range []*topology.Pod{a, b} {
			if !redirected(p, externals[i]) {
				t.Fatalf("%s's redirect to %s expired during the test", p.Name, externals[i])
			}
			for _, network := range []string{"udp", "tcp"} {
				if got, err := p.Dial(network, netip.AddrPortFrom(externals[i], e.server.Addr.Port())); err != nil || got != lb {
					t.Errorf("%s from redirected %s: seen as %v, %v; want %s", network, p.Name, got, err, lb)
				}
			}
			if err := p.Ping(externals[i], 1); err != nil {
				t.Errorf("ICMP from redirected %s to %s: %v", p.Name, externals[i], err)
			}
		}
	}
	endpointIPs := map[netip.Addr]bool{a.IP: true, a.IP6: true, b.IP: true, b.IP6: true}
	var leaked []topology.Packet
	icmp := 0
	packets := capture.Stop()
	for _, p := range packets {
		if endpointIPs[p.Src] && (p.Dst == externals[0] || p.Dst == externals[1]) {
			leaked = append(leaked, p)
		}
		if slices.Contains(lbs, p.Src) && strings.Contains(p.Line, "echo request") {
			icmp++
		}
	}
	for _, p := range leaked[:min(len(leaked), 10)] {
		t.Logf("leaked: %v", p)
	}
	if len(leaked) > 0 || icmp < 4 {
		t.Fatalf("after redirects: %d packets from endpoint pod IPs, %d ICMP echo requests from LB IPs (want 0 and 4)", len(leaked), icmp)
	}
	t.Logf("%d packets captured with both pods redirected in both families: none from a pod IP", len(packets))
}

// hostWeb starts an agent on every node and makes the dual-stack service
// shop/web with lbs and the pods as endpoints, hosted on host (whom the
// outside routes the LB IPs to), and waits until the pods leave with them.
func (e *env) hostWeb(host *topology.Node, lbs []netip.Addr, pods ...*topology.Pod) {
	e.t.Helper()
	for _, n := range e.topo.Nodes {
		e.startAgent(n).waitHealthy(e.t)
	}
	for _, lb := range lbs {
		e.announce(lb, host)
	}
	e.createEgressService("web", lbs, esv1.EgressServiceSpec{}, host.Name, pods...)
	for _, lb := range lbs {
		for _, p := range pods {
			e.expectSource(p, "udp", lb)
		}
	}
}

// probe sends a UDP datagram from each pod, in each family, every few
// milliseconds, without waiting for answers, until the returned function is
// called; that function returns how many datagrams were sent.
func (e *env) probe(pods ...*topology.Pod) func() int {
	return e.probeEvery(2*time.Millisecond, pods...)
}

// probeEvery is probe with datagrams every interval.
func (e *env) probeEvery(interval time.Duration, pods ...*topology.Pod) func() int {
	done := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for _, p := range pods {
		for _, server := range []netip.AddrPort{e.server.Addr, e.server.Addr6} {
			conn, err := p.Connect("udp", server)
			if err != nil {
				e.t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				for {
					select {
					case <-done:
						return
					case <-time.After(interval):
					}
					if _, err := conn.Write([]byte("probe\n")); err == nil { // losses are fine; leaks are not
						sent.Add(1)
					}
				}
			}()
		}
	}
	return func() int { close(done); wg.Wait(); return int(sent.Load()) }
}

// TestAgentRestartAndRepair: an agent restarted with nothing changed sends
// zero flow mods and an open TCP connection through the LB IP keeps working;
// an endpoint removed loses its flows and its conntrack entries, other
// services untouched; after ovs-vswitchd restarts empty, the agent replays
// its flows and traffic flows again.
func TestAgentRestartAndRepair(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	a, b, other := e.addPod(n, "a"), e.addPod(n, "b"), e.addPod(n, "o")
	lb, lbOther := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20")
	first := e.startAgent(n)
	first.waitHealthy(t)
	e.announce(lb, n)
	e.announce(lbOther, n)
	e.createService("web", lb, n.Name, a, b)
	e.createService("other", lbOther, n.Name, other)
	e.expectSource(a, "tcp", lb)
	e.expectSource(b, "udp", lb)
	e.expectSource(other, "udp", lbOther)

	// Restart with nothing changed.
	conn, err := a.Connect("tcp", e.server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if src, err := conn.Probe(); err != nil || src != lb {
		t.Fatalf("open connection before the restart: %v %v", src, err)
	}
	before := n.Ofctl(t, "dump-flows", n.Bridge, "cookie=0xef10000000000000/0xffff000000000000", "--no-stats")
	first.stop()
	second := e.startAgent(n)
	second.waitHealthy(t)
	if mods := second.sw.mods.Load(); mods != 0 {
		t.Errorf("restart with nothing changed sent %d flow mods, want 0", mods)
	}
	if after := n.Ofctl(t, "dump-flows", n.Bridge, "cookie=0xef10000000000000/0xffff000000000000", "--no-stats"); after != before {
		t.Errorf("flows changed across the restart:\nbefore\n%s\nafter\n%s", before, after)
	}
	if src, err := conn.Probe(); err != nil || src != lb {
		t.Fatalf("open connection after the restart: %v %v", src, err)
	}

	// Endpoint b removed: its flows and its conntrack entries go.
	hasEntries := func(ip netip.Addr) bool {
		return strings.Contains(n.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", conntrack.SNATZone)), "src="+ip.String()+",")
	}
	if !hasEntries(b.IP) || !hasEntries(other.IP) {
		t.Fatal("expected conntrack entries for b and the other service's endpoint before the removal")
	}
	modsBefore := second.sw.mods.Load()
	e.setEndpoints("web", a)
	eventually(t, "b's flows and conntrack entries gone", func() error {
		if flows := serviceFlowsNaming(t, n, b.IP); len(flows) > 0 {
			return fmt.Errorf("flows of b remain: %s", flows)
		}
		if hasEntries(b.IP) {
			return fmt.Errorf("conntrack entries of b remain")
		}
		return nil
	})
	if !hasEntries(other.IP) {
		t.Error("flushing b removed another service's conntrack entries")
	}
	// Only b's flows moved: its redirect and its SNAT flow, deleted.
	if mods := second.sw.mods.Load() - modsBefore; mods != 2 {
		t.Errorf("removing one endpoint sent %d flow mods, want 2", mods)
	}
	e.expectSource(b, "udp", b.IP) // no longer an endpoint: its own source
	e.expectSource(other, "udp", lbOther)

	// The incremental syncs (diffed against the flows as last sent) left
	// the bridge as a full sync computes it: a fresh agent changes nothing.
	second.stop()
	third := e.startAgent(n)
	third.waitHealthy(t)
	if mods := third.sw.mods.Load(); mods != 0 {
		t.Errorf("a restart after incremental syncs sent %d flow mods, want 0", mods)
	}

	// A service deleted while no agent runs leaves stale flows: the next
	// agent deletes exactly those (the second dump finds them) and leaves
	// a foreign flow on the same match alone.
	third.stop()
	ours := "cookie=0xef10000000000000/0xffff000000000000"
	countOurs := func() int {
		return len(strings.Split(strings.TrimSpace(n.Ofctl(t, "dump-flows", n.Bridge, ours, "--no-stats")), "\n")) - 1
	}
	foreign := fmt.Sprintf("cookie=0x1234,table=60,priority=1,ip,nw_src=%s", other.IP)
	n.Ofctl(t, "add-flow", n.Bridge, foreign+",actions=drop")
	if err := e.admin.ES.K8sV1().EgressServices("shop").Delete(context.Background(), "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	withOther := countOurs()
	fourth := e.startAgent(n)
	fourth.waitHealthy(t)
	eventually(t, "the deleted service's flows gone", func() error {
		if flows := slices.Concat(serviceFlowsNaming(t, n, other.IP), serviceFlowsNaming(t, n, lbOther)); len(flows) > 0 {
			return fmt.Errorf("flows of the deleted service remain:\n%s", strings.Join(flows, "\n"))
		}
		return nil
	})
	if mods, deleted := fourth.sw.mods.Load(), withOther-countOurs(); mods == 0 || mods != int64(deleted) {
		t.Errorf("restart after a deletion: %d flow mods for %d flows gone; want one delete per stale flow", mods, deleted)
	}
	if !strings.Contains(n.Ofctl(t, "dump-flows", n.Bridge, "table=60"), "nw_src="+other.IP.String()) {
		t.Error("the foreign flow was removed")
	}
	e.expectSource(other, "udp", other.IP) // no longer an endpoint: its own source

	// ovs-vswitchd restarts with an empty flow table.
	n.StopVswitchd(t)
	restarted := time.Now()
	n.StartVswitchd(t)
	e.expectSource(a, "udp", lb)
	t.Logf("traffic SNATed again %v after ovs-vswitchd was started again", time.Since(restarted).Round(time.Millisecond))
}

// internet is a destination outside the cluster that both external hosts
// hold, one family each: the node's main table reaches it over the
// underlay, table 100 over the second segment. Which host answers tells
// which table a packet followed.
var internet = []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:100::1")}

// routeInternet routes the internet addresses, which the external host
// holds, from every node over the underlay, as a default route would.
func (e *env) routeInternet() { e.routeToExternal(internet...) }

// routeToExternal routes addresses the external host holds from every
// node over the underlay.
func (e *env) routeToExternal(addrs ...netip.Addr) {
	for _, n := range e.topo.Nodes {
		for _, a := range addrs {
			via := e.topo.External.IP
			if a.Is6() {
				via = e.topo.External.IP6
			}
			n.Exec(e.t, "ip", "route", "replace", netip.PrefixFrom(a, a.BitLen()).String(), "via", via.String())
		}
	}
}

// serviceFlowsNaming are egressflow's flows on n that name addr, but the
// pod guard's admission of it (a pod stays admitted when it stops being an
// endpoint).
func serviceFlowsNaming(t testing.TB, n *topology.Node, addr netip.Addr) []string {
	var out []string
	dump := n.Ofctl(t, "dump-flows", n.Bridge, "cookie=0xef10000000000000/0xffff000000000000", "--no-stats")
	for _, line := range strings.Split(dump, "\n") {
		if strings.Contains(line, "="+addr.String()+" ") && !strings.Contains(line, "priority=175,") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// TestAgentPodGuard: the agent lets a pod of its node out of the cluster
// only once it knows the pod. A pod whose Pod object does not say its
// addresses yet (it sends before its kubelet has reported them) reaches no
// outside host, until its addresses are reported; then it leaves with its
// own IP. A pod that an EgressService's Service selects, whose addresses
// the Service's EndpointSlice does not list yet, leaves with nothing until
// it is listed, and then with the LB IP, in both families. Pod to pod and
// pod to node are never held. A capture on the external host sees neither
// pod's IP while it is held, and never the selected pod's.
func TestAgentPodGuard(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	a := e.addPod(n, "a")
	late := n.AddPod(t, "late")
	next := n.AddPod(t, "next")
	web := map[string]string{"app": "web"}
	e.admin.CreatePod(t, "shop", next, web)
	lbs := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	e.startAgent(n).waitHealthy(t)
	for _, lb := range lbs {
		e.announce(lb, n)
	}
	svc := clustertest.Service{Namespace: "shop", Name: "web", Selector: web, Endpoints: clustertest.PodEndpoints(a)}
	for _, lb := range lbs {
		svc.IngressIPs = append(svc.IngressIPs, lb.String())
	}
	e.admin.CreateHostedService(t, svc, esv1.EgressServiceSpec{}, n.Name)
	for _, lb := range lbs {
		e.expectSource(a, "udp", lb)
	}

	capture := e.topo.External.Capture(t)
	stopProbes := e.probe(late, next)
	time.Sleep(time.Second) // a second of the held pods' traffic
	for _, p := range []*topology.Pod{late, next} {
		for i, server := range []netip.AddrPort{e.server.Addr, e.server.Addr6} {
			if got, err := p.Dial("udp", server); err == nil {
				t.Errorf("held pod %s reached %s as %s", p.Name, server, got)
			}
			if err := p.Ping(a.Addrs()[i], 1); err != nil {
				t.Errorf("held pod %s to pod: %v", p.Name, err)
			}
			if err := p.Ping([]netip.Addr{n.IP, n.IP6}[i], 1); err != nil {
				t.Errorf("held pod %s to node: %v", p.Name, err)
			}
		}
	}
	sentHeld := stopProbes()
	held := capture.Stop()

	capture = e.topo.External.Capture(t)
	e.admin.CreatePod(t, "shop", late, nil)
	e.admin.SetEndpoints(t, "shop", "web", clustertest.PodEndpoints(a, next))
	for i, lb := range lbs {
		e.expectSource(late, "udp", late.Addrs()[i])
		e.expectSource(next, "udp", lb)
		e.expectSource(next, "tcp", lb)
	}
	after := capture.Stop()
	// A pod's neighbour solicitations to link-scope groups flood the
	// segment (pods are ports of this bridge): they are not its egress.
	for _, pkt := range held {
		if pkt.Dst.IsMulticast() {
			continue
		}
		if slices.Contains(late.Addrs(), pkt.Src) || slices.Contains(next.Addrs(), pkt.Src) {
			t.Errorf("the external host saw a held pod's address: %s", pkt.Line)
		}
	}
	for _, pkt := range after {
		if !pkt.Dst.IsMulticast() && slices.Contains(next.Addrs(), pkt.Src) {
			t.Errorf("the external host saw the selected pod's address: %s", pkt.Line)
		}
	}
	t.Logf("held pods sent %d datagrams; the external host saw %d packets while they were held", sentHeld, len(held))
}

// TestAgentNetworkMode: sourceIPBy Network routes the local endpoints'
// traffic, IPv4 and IPv6, through the table spec.network names, by number
// and by name (rt_tables): it leaves through the second segment, where the
// node masquerades it, while a pod that is not an endpoint still leaves
// through the underlay with its own IP. A blackhole route in that table
// cuts the endpoints off (and only them); removing it restores the
// traffic. Back to LoadBalancerIP, the rules go.
func TestAgentNetworkMode(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	byNumber, byName, bystander := e.addPod(n, "num"), e.addPod(n, "name"), e.addPod(n, "by")
	segment := e.topo.AddSegment()
	// toSegment points table 100 at the segment for dst.
	toSegment := func(i int, dst netip.Addr) {
		n.Exec(t, "ip", "route", "replace", netip.PrefixFrom(dst, dst.BitLen()).String(),
			"via", []netip.Addr{segment.Host.IP, segment.Host.IP6}[i].String(), "dev", topology.SegmentInterface, "table", "100")
	}
	for i, dst := range internet {
		bits := netip.PrefixFrom(dst, dst.BitLen()).String()
		segment.Host.AddAddress(t, dst)
		n.Exec(t, "ip", "route", "add", bits, "via", []netip.Addr{e.topo.External.IP, e.topo.External.IP6}[i].String())
		toSegment(i, dst)
	}
	viaSegment := segment.Host.Serve(t, internet...)

	e.startAgent(n).waitHealthy(t)
	e.createEgressService("num", nil, esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "100"}, esv1.HostAll, byNumber)
	e.createEgressService("name", nil, esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "blue"}, esv1.HostAll, byName)
	eventually(t, "ip rules for both endpoints, both families", func() error {
		for _, family := range []string{"-4", "-6"} {
			rules := n.Exec(t, "ip", family, "rule", "show")
			for _, p := range []*topology.Pod{byNumber, byName} {
				for _, ip := range p.Addrs() {
					if (family == "-6") == ip.Is6() && !strings.Contains(rules, fmt.Sprintf("from %s lookup 100", ip)) {
						return fmt.Errorf("no rule for %s in:\n%s", ip, rules)
					}
				}
			}
		}
		return nil
	})
	for i, dst := range internet {
		for _, p := range []*topology.Pod{byNumber, byName} {
			e.expectSourceVia(p, "udp", viaSegment.At(dst), viaSegment, segment.NodeIP(n, dst))
			e.expectSourceVia(p, "tcp", viaSegment.At(dst), viaSegment, segment.NodeIP(n, dst))
		}
		e.expectSourceVia(bystander, "udp", e.server.At(dst), e.server, bystander.Addrs()[i])
	}

	for i, dst := range internet {
		n.Exec(t, "ip", "route", "replace", "blackhole", netip.PrefixFrom(dst, dst.BitLen()).String(), "table", "100")
		for _, p := range []*topology.Pod{byNumber, byName} {
			if got, err := p.Dial("udp", viaSegment.At(dst)); err == nil {
				t.Errorf("%s reached %s (as %s) despite a blackhole in its table", p.Name, dst, got)
			}
		}
		e.expectSourceVia(bystander, "udp", e.server.At(dst), e.server, bystander.Addrs()[i]) // main table: unaffected
		toSegment(i, dst)
		e.expectSourceVia(byNumber, "tcp", viaSegment.At(dst), viaSegment, segment.NodeIP(n, dst))
		e.expectSourceVia(byName, "tcp", viaSegment.At(dst), viaSegment, segment.NodeIP(n, dst))
	}

	// Back to LoadBalancerIP: the rules go, and the endpoints leave through
	// the underlay again.
	e.admin.SetHost(e.t, "shop", "num", "")
	e.admin.SetHost(e.t, "shop", "name", "")
	eventually(t, "rules removed", func() error {
		for _, family := range []string{"-4", "-6"} {
			if rules := n.Exec(t, "ip", family, "rule", "show"); strings.Contains(rules, "lookup 100") {
				return fmt.Errorf("rules remain:\n%s", rules)
			}
		}
		return nil
	})
	e.expectSourceVia(byNumber, "udp", e.server.At(internet[0]), e.server, byNumber.IP)
}

// TestAgentNetworkModeKeepsClusterTraffic: an endpoint whose table holds
// nothing but a default route through the second segment still reaches
// what is inside the cluster through the node's own routes, in both
// families: a pod on another node, a ClusterIP (keeping its pod IP as
// source) and another node's IP; only the rest leaves through the table.
func TestAgentNetworkModeKeepsClusterTraffic(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	ep, peer := e.addPod(n1, "ep"), e.addPod(n2, "peer")
	segment := e.topo.AddSegment()
	for _, via := range []netip.Addr{segment.Host.IP, segment.Host.IP6} {
		n1.Exec(t, "ip", "route", "add", "default", "via", via.String(), "dev", topology.SegmentInterface, "table", "100")
	}
	viaSegment := segment.Host.Serve(t)
	e.startAgent(n1).waitHealthy(t)
	e.createEgressService("net", nil, esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "100"}, esv1.HostAll, ep)
	eventually(t, "the endpoint's rules, both families", func() error {
		for i, family := range []string{"-4", "-6"} {
			if rules := n1.Exec(t, "ip", family, "rule", "show"); !strings.Contains(rules, fmt.Sprintf("from %s lookup 100", ep.Addrs()[i])) {
				return fmt.Errorf("no rule for %s in:\n%s", ep.Addrs()[i], rules)
			}
		}
		return nil
	})
	for i, family := range []netip.Addr{segment.Host.IP, segment.Host.IP6} {
		// The table is in force: the outside is reached through the segment.
		e.expectSourceVia(ep, "udp", netip.AddrPortFrom(family, viaSegment.Addr.Port()), viaSegment, segment.NodeIP(n1, family))
		// Inside the cluster, the node's own routes.
		for _, dst := range []netip.Addr{peer.Addrs()[i], []netip.Addr{n2.IP, n2.IP6}[i]} {
			if err := ep.Ping(dst, 1); err != nil {
				t.Errorf("endpoint to %s inside the cluster: %v", dst, err)
			}
		}
		e.expectSourceAt(ep, "tcp", e.server.At(clusterIPs[i]), ep.Addrs()[i])
	}
}

// TestHeartbeatFollowsDataplane: the agent's Lease is renewed only while its
// dataplane is healthy. Killing ovs-vswitchd lets the Lease expire, so the
// cluster component fails the node over; once OVS is back and the agent has
// replayed its flows, renewals resume.
func TestHeartbeatFollowsDataplane(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	a := e.startAgent(n)
	a.waitHealthy(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const renew, expire = 200 * time.Millisecond, 600 * time.Millisecond
	renewer, err := heartbeat.NewRenewer(e.agentKube.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: n.Name, RenewInterval: renew, LeaseDuration: expire,
		Healthy: a.Healthy,
		Facts:   func() heartbeat.Facts { return heartbeat.Facts{SyncState: a.SyncState()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = renewer.Run(ctx) }()
	defer func() { cancel(); <-done }()

	fresh := func() (bool, error) {
		l, err := e.admin.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return heartbeat.Fresh(l, time.Now()), nil
	}
	waitFresh := func(want bool) {
		t.Helper()
		eventually(t, fmt.Sprintf("Lease fresh=%v", want), func() error {
			got, err := fresh()
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("fresh=%v", got)
			}
			return nil
		})
	}
	waitFresh(true)
	n.StopVswitchd(t)
	waitFresh(false)
	if err := a.Healthy(ctx); err == nil {
		t.Fatal("agent reports healthy with ovs-vswitchd down")
	}
	n.StartVswitchd(t)
	waitFresh(true)
}

// TestAgentWatchesOnlyLabelledServices: the agent reads the Services and
// EndpointSlices of EgressServices only once they carry the label the
// cluster component puts on them (endpoints.EgressServiceLabel): an
// EgressService whose Service lacks it gets nothing, while one created
// after it is rendered; labelled, it is rendered too.
func TestAgentWatchesOnlyLabelledServices(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	hidden, seen := e.addPod(n, "hidden"), e.addPod(n, "seen")
	segment := e.topo.AddSegment()
	for _, via := range []netip.Addr{segment.Host.IP, segment.Host.IP6} {
		n.Exec(t, "ip", "route", "add", "default", "via", via.String(), "dev", topology.SegmentInterface, "table", "100")
	}
	e.startAgent(n).waitHealthy(t)
	spec := esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "100"}
	// No label: a Service and slices as a cluster without egressflow's
	// controller would have them.
	e.admin.CreateService(t, clustertest.Service{Namespace: "shop", Name: "hidden", Endpoints: clustertest.PodEndpoints(hidden)})
	e.admin.CreateEgressService(t, "shop", "hidden", spec)
	e.admin.SetHost(t, "shop", "hidden", esv1.HostAll)
	e.createEgressService("seen", nil, spec, esv1.HostAll, seen)
	hasRule := func(p *topology.Pod) error {
		if rules := n.Exec(t, "ip", "-4", "rule", "show"); !strings.Contains(rules, fmt.Sprintf("from %s lookup 100", p.Addrs()[0])) {
			return fmt.Errorf("no rule for %s (%s) in:\n%s", p.Name, p.Addrs()[0], rules)
		}
		return nil
	}
	eventually(t, "the labelled service's rule", func() error { return hasRule(seen) })
	if hasRule(hidden) == nil {
		t.Fatalf("the agent rendered the EgressService whose Service carries no %s label", endpoints.EgressServiceLabel)
	}

	// The label, as the cluster component sets it on the Service and the
	// EndpointSlice controller copies it onto the slices.
	svc, err := e.admin.Kube.CoreV1().Services("shop").Get(context.Background(), "hidden", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Labels = map[string]string{endpoints.EgressServiceLabel: endpoints.EgressServiceLabelValue}
	if _, err := e.admin.Kube.CoreV1().Services("shop").Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.setEndpoints("hidden", hidden)
	eventually(t, "the newly labelled service's rule", func() error { return hasRule(hidden) })
}
