//go:build demo

// Package demo is `make demo`, egressflow's main job on one machine: a real
// kube-apiserver and etcd, three Open vSwitch "nodes" in network namespaces
// with pods and an external host, the cluster component and one node agent
// per node running as the real binaries, and an EgressService whose pods'
// packets are shown leaving with the LB IP, before and after its host node
// fails. It is a test only so that it can reuse the test harnesses (and
// clean up everything they start); the demo build tag keeps it out of
// `go test ./...`.
//
// With DEMO_HOLD=0 it exits after the scenario; otherwise it keeps the
// cluster up, printing how to look at it, until interrupted.
package demo

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

const (
	// nodeCount is how many OVS nodes the demo cluster has.
	nodeCount = 3
	// Heartbeat timing of the demo's agents: a dead node is replaced about
	// leaseDuration after its last renewal, at one Lease write per node per
	// renewInterval (the defaults trade faster failover for fewer writes).
	renewInterval = 500 * time.Millisecond
	leaseDuration = 2 * time.Second
	// stepTimeout bounds each step of the scenario; they take well under a
	// second, failover about leaseDuration.
	stepTimeout = 60 * time.Second
	namespace   = "shop"
	serviceName = "web"
)

var (
	loadBalancerIPs = []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	podCIDRs        = topology.ClusterPodPrefix.String() + "," + topology.ClusterPodPrefix6.String()
)

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func TestDemo(t *testing.T) {
	ctx := context.Background()
	say("== Building egressflow-controller and egressflow-agent")
	controllerBin, agentBin := proc.Build(t, "cmd/egressflow-controller"), proc.Build(t, "cmd/egressflow-agent")

	say("== Starting etcd and kube-apiserver")
	api := kubetest.Start(t)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"deploy/controller/namespace.yaml", "deploy/controller/rbac.yaml", "deploy/agent/rbac.yaml", "deploy/agent/rbac-dataplane.yaml"} {
		kubetest.Apply(t, api.Config(kubetest.Admin), filepath.Join(root, m))
	}
	kube := kubernetes.NewForConfigOrDie(api.Config(kubetest.Admin))
	egress := versioned.NewForConfigOrDie(api.Config(kubetest.Admin))
	dir := t.TempDir()
	kubeconfig := func(name string, user kubetest.User) string {
		path := filepath.Join(dir, name+".kubeconfig")
		if err := api.WriteKubeconfig(path, user); err != nil {
			t.Fatal(err)
		}
		return path
	}

	say("== Building %d Open vSwitch nodes, pods and an external host in network namespaces", nodeCount)
	topo := topology.New(t, nodeCount)
	server := topo.External.Serve(t)
	var pods []*topology.Pod
	for i, n := range topo.Nodes {
		createNode(t, kube, n)
		pods = append(pods, n.AddPod(t, fmt.Sprintf("web-%d", i+1)))
		say("   %s: br-ex in netns %s (node IP %s, %s), pod %s %s %s", n.Name, n.Netns, n.IP, n.IP6, pods[i].Name, pods[i].IP, pods[i].IP6)
	}
	var others []*topology.Pod // one pod per node that is not an endpoint
	for _, n := range topo.Nodes {
		others = append(others, n.AddPod(t, "other-"+strings.TrimPrefix(n.Name, "node-")))
	}

	say("== Starting the cluster component and one node agent per node (the real binaries)")
	proc.Start(t, controllerBin, "--kubeconfig="+kubeconfig("controller", kubetest.Controller), "--identity=demo",
		"--pod-cidrs="+podCIDRs, "--metrics-bind-address=")
	for _, n := range topo.Nodes {
		// The agent runs in the node's namespace (hostNetwork) and reaches
		// the API server on the machine's loopback through a forwarder.
		agentKubeconfig := filepath.Join(dir, n.Name+".kubeconfig")
		apiAddr := strings.TrimPrefix(api.URL, "https://")
		if err := api.WriteKubeconfigVia(agentKubeconfig, kubetest.Agent, "https://"+topology.Forward(t, n.Netns, apiAddr)); err != nil {
			t.Fatal(err)
		}
		proc.Start(t, "ip", "netns", "exec", n.Netns, agentBin, "--kubeconfig="+agentKubeconfig, "--node-name="+n.Name,
			"--ovs-rundir="+n.Dir, "--uplink="+topology.UplinkPort, "--pod-cidrs="+podCIDRs, "--service-cidrs=10.96.0.0/16",
			"--metrics-bind-address=", fmt.Sprintf("--heartbeat-renew-interval=%v", renewInterval),
			fmt.Sprintf("--heartbeat-lease-duration=%v", leaseDuration))
	}

	say("== Creating LoadBalancer Service %s/%s (ingress %s, %s), its endpoints and its EgressService", namespace, serviceName, loadBalancerIPs[0], loadBalancerIPs[1])
	createService(t, &clustertest.Env{Cluster: api, Kube: kube, ES: egress}, pods)
	announcer := startAnnouncer(t, kube, topo)

	host := waitForHost(t, egress, topo, "")
	say("   status.host = %s; node label %s set; the announcer routes the LB IPs to it", host.Name, assign.LabelKey(namespace, serviceName))
	say("== What the external host sees")
	showSources(t, server, pods, others)
	say("== %s's flows: ovs-ofctl -O OpenFlow15 dump-flows br-ex cookie=%#x/%#x", host.Name, dataplane.CookiePrefix, dataplane.CookiePrefixMask)
	say("%s", host.Ofctl(t, "dump-flows", host.Bridge, fmt.Sprintf("cookie=%#x/%#x", dataplane.CookiePrefix, dataplane.CookiePrefixMask), "--no-stats"))

	say("== %s fails: its ovs-vswitchd stops, so its agent stops renewing its Lease", host.Name)
	failed := time.Now()
	host.StopVswitchd(t)
	newHost := waitForHost(t, egress, topo, host.Name)
	announcer.waitFor(t, newHost)
	say("   status.host = %s, %v after the failure", newHost.Name, time.Since(failed).Round(10*time.Millisecond))
	survivors := func(pods []*topology.Pod) []*topology.Pod {
		return slices.DeleteFunc(slices.Clone(pods), func(p *topology.Pod) bool { return p.Node == host })
	}
	showSources(t, server, survivors(pods), survivors(others))

	say("== %s's ovs-vswitchd is back (empty): its agent replays its flows", host.Name)
	host.StartVswitchd(t)
	showSources(t, server, pods, others)

	if os.Getenv("DEMO_HOLD") == "0" {
		say("== Done (DEMO_HOLD=0); cleaning up")
		return
	}
	say(`== The demo cluster stays up until you press Ctrl-C. To look at it:
   kubeconfig (admin):   %s
   a node's flows:       OVS_RUNDIR=%s ovs-ofctl -O OpenFlow15 dump-flows br-ex
   a pod's traffic:      ip netns exec %s ping %s
   the external host:    ip netns exec %s tcpdump -n -i eth0`,
		api.Kubeconfig, newHost.Dir, pods[len(pods)-1].Netns, topo.External.IP, topo.External.Netns)
	held, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-held.Done()
	say("== Cleaning up")
}

// createNode registers a topology node as a Ready Node with its addresses,
// as its kubelet would.
func createNode(t *testing.T, kube kubernetes.Interface, n *topology.Node) {
	ctx := context.Background()
	node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()}, {Type: corev1.NodeInternalIP, Address: n.IP6.String()}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createService writes what a load-balancer provider and the EndpointSlice
// controller would (the Service's ingress IPs, one slice per family), and
// the EgressService a user would.
func createService(t *testing.T, objects *clustertest.Env, pods []*topology.Pod) {
	if _, err := objects.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := clustertest.Service{Namespace: namespace, Name: serviceName, Endpoints: clustertest.PodEndpoints(pods...)}
	for _, lb := range loadBalancerIPs {
		svc.IngressIPs = append(svc.IngressIPs, lb.String())
	}
	objects.CreateService(t, svc)
	objects.CreateEgressService(t, namespace, serviceName, esv1.EgressServiceSpec{})
}

// waitForHost waits until the EgressService has a host other than not and
// returns its node.
func waitForHost(t *testing.T, egress versioned.Interface, topo *topology.Topology, not string) *topology.Node {
	var host string
	wait.Until(t, stepTimeout, func() error {
		es, err := egress.K8sV1().EgressServices(namespace).Get(context.Background(), serviceName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if host = es.Status.Host; host == "" || host == not {
			return fmt.Errorf("status.host is %q", host)
		}
		return nil
	})
	return nodeNamed(t, topo, host)
}

func nodeNamed(t *testing.T, topo *topology.Topology, name string) *topology.Node {
	for _, n := range topo.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}

// announcer plays the load-balancer announcer (MetalLB and the like): it
// follows the node label the cluster component sets and routes the LB IPs
// from the external host to that node.
type announcer struct{ current chan string }

func startAnnouncer(t *testing.T, kube kubernetes.Interface, topo *topology.Topology) *announcer {
	a := &announcer{current: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	label := assign.LabelKey(namespace, serviceName)
	go func() {
		defer close(done)
		routed := ""
		for ctx.Err() == nil {
			nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: label})
			if err == nil && len(nodes.Items) == 1 && nodes.Items[0].Name != routed {
				routed = nodes.Items[0].Name
				n := nodeNamed(t, topo, routed)
				for _, lb := range loadBalancerIPs {
					via := n.IP
					if lb.Is6() {
						via = n.IP6
					}
					if err := topology.InNetnsCommand(topo.External.Netns, "ip", "route", "replace", lb.String(), "via", via.String()); err != nil {
						t.Errorf("announce %s: %v", lb, err)
					}
				}
				select {
				case <-a.current:
				default:
				}
				a.current <- routed
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return a
}

// waitFor waits until the LB IPs are routed to n.
func (a *announcer) waitFor(t *testing.T, n *topology.Node) {
	deadline := time.After(stepTimeout)
	for {
		select {
		case name := <-a.current:
			if name == n.Name {
				return
			}
		case <-deadline:
			t.Fatalf("the LB IPs were not routed to %s within %v", n.Name, stepTimeout)
		}
	}
}

// showSources has each endpoint and each other pod reach the external host
// over UDP in both families, waits until the host sees the LB IP of the
// family for endpoints and the pod's own IP for the others, and prints what
// it saw.
func showSources(t *testing.T, server *topology.SourceServer, endpoints, others []*topology.Pod) {
	for _, p := range slices.Concat(endpoints, others) {
		for i, dst := range []netip.AddrPort{server.Addr, server.Addr6} {
			want := loadBalancerIPs[i]
			if slices.Contains(others, p) {
				want = p.Addrs()[i]
			}
			var seen netip.Addr
			wait.Until(t, stepTimeout, func() error {
				var err error
				if seen, err = p.Dial("udp", dst); err != nil || seen != want {
					return fmt.Errorf("%s to %s: seen as %v (%v), want %s", p.Name, dst, seen, err, want)
				}
				return nil
			})
			say("   %-16s %-18s -> external host saw %s", p.Name, p.Addrs()[i], seen)
		}
	}
}
