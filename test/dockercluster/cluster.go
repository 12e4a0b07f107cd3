// Package dockercluster runs a real Kubernetes cluster whose nodes are
// Docker containers, for the end-to-end tests, the demo and the failover
// benchmark: the control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler; test/kubetest) on the host,
// bound to the Docker network's gateway, and per node a container running
// Open vSwitch, containerd, the kubelet and kube-proxy, laid out as
// OVN-Kubernetes and OpenShift nodes are (node-setup.sh): the uplink eth0 is
// a port of br-ex and the node IP sits on br-ex's LOCAL port; pods use
// Debian's bridge CNI plugin without masquerade, or flannel with its VXLAN
// or host-gw backend (Config.PodNetwork), and reach br-ex routed through
// the host stack. An external host container stands outside the cluster
// on the same network; its network namespace is registered with
// `ip netns`, so test/topology's source servers and captures run there.
//
// Everything is built here and nothing is pulled: the node image by
// debootstrap (node-image.sh), the Kubernetes binaries from the module
// proxy (test/tools/build-binaries.sh), egressflow's image (make images) and
// the test images (testapp), all cached. Containers, volumes, the network,
// the registered namespace and the control-plane processes are removed when
// the test ends, also when it fails.
package dockercluster

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// Addressing of a cluster. The third octet (and IPv6 group) is chosen per
// cluster, so that two clusters on one machine do not collide.
const (
	// ClusterPodCIDR4 and ClusterPodCIDR6 hold every node's pod CIDR: node
	// N has 10.244.N.0/24 and fd00:10:244:N::/64.
	ClusterPodCIDR4 = "10.244.0.0/16"
	ClusterPodCIDR6 = "fd00:10:244::/48"
	// ServiceCIDRs are the ClusterIP ranges, one per family.
	ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"
)

// readyTimeout bounds a node's set-up and its Ready condition: about a
// minute on a loaded 2-core machine, most of it importing images.
const readyTimeout = 3 * time.Minute

// Config sizes a cluster.
type Config struct {
	// Nodes is how many node containers run (default 3).
	Nodes int
	// PodNetwork is the CNI the pods use (default BridgeNetwork).
	PodNetwork PodNetwork
	// NodeDNS: the node containers' resolver (their /etc/resolv.conf, and
	// so the pods' and the agents', by dnsPolicy Default or a kubelet
	// without cluster DNS) is Cluster.DNSAddr, an address of the external
	// host where the test serves DNS itself. Without it they use Docker's.
	NodeDNS bool
}

// PodNetwork is a CNI a cluster's pods can use, both dual-stack and
// without masquerade: egressflow needs the pods' own addresses on br-ex.
type PodNetwork string

const (
	// BridgeNetwork: Debian's bridge plugin with host-local addresses from
	// the node's pod CIDRs, and routes to the other nodes' pod CIDRs via
	// their addresses (host-gw style), which node-setup.sh writes.
	BridgeNetwork PodNetwork = ""
	// FlannelVXLAN: flannel, as its users run it, but for its masquerade
	// (off: flanneld --ip-masq=false, and the bridge it delegates to told
	// so): flanneld with the Kubernetes subnet manager on every node,
	// reading the Node's pod CIDRs (which Start assigns, as
	// kube-controller-manager's node IPAM would), its default VXLAN
	// backend over br-ex's addresses, and its CNI plugin, which hands the
	// pod to the bridge plugin with the subnet flanneld leased.
	FlannelVXLAN PodNetwork = "flannel-vxlan"
	// FlannelHostGW: flannel as FlannelVXLAN, with its host-gw backend:
	// flanneld routes the other nodes' pod CIDRs via their addresses on
	// br-ex.
	FlannelHostGW PodNetwork = "flannel-host-gw"
)

// flannel reports whether the pods use flannel, whichever its backend.
func (p PodNetwork) flannel() bool { return strings.HasPrefix(string(p), "flannel-") }

// Cluster is a running cluster in Docker.
type Cluster struct {
	t testing.TB
	// scraperToken is ScraperToken's, once read.
	scraperToken string
	// Name prefixes every container, volume and network it made.
	Name string
	// API is the control plane; Kubeconfig an admin kubeconfig for kubectl.
	API        *kubetest.Cluster
	Kubeconfig string
	Kube       kubernetes.Interface
	// Network is the Docker network every container is on; Gateway4 and
	// Gateway6 are the host's addresses on it, where the API server listens.
	Network            string
	Gateway4, Gateway6 netip.Addr
	Nodes              []*Node
	// External is the external host; its Netns is registered with ip netns.
	External *topology.Host
	// ExternalContainer is its container's name.
	ExternalContainer string
	// DNSAddr is the external host's address the nodes resolve names at,
	// with Config.NodeDNS; the test serves port 53 there (it holds the
	// address from the start).
	DNSAddr netip.Addr

	assets     *assets
	subnet     byte
	podNetwork PodNetwork
	// namespace is where egressflow is installed (InstallNamespace).
	namespace string
	// followed are the logs FollowLogs keeps for the failure dump.
	followed []*followedLogs
}

// followedLogs is what one `kubectl logs -f` printed.
type followedLogs struct {
	selector string
	mu       sync.Mutex
	buf      bytes.Buffer
}

func (f *followedLogs) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *followedLogs) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.String()
}

// FollowLogs follows the logs of egressflow's pods that selector selects,
// as they run, for the failure dump: the logs of pods that the test
// deletes (an uninstall, a rollout) are gone from the nodes by the time a
// failure is dumped. It stops with the test.
func (c *Cluster) FollowLogs(selector string) {
	c.t.Helper()
	path, err := c.kubectlPath()
	if err != nil {
		c.t.Fatalf("dockercluster: %v", err)
	}
	f := &followedLogs{selector: selector}
	cmd := exec.Command(path, "--kubeconfig", c.Kubeconfig, "logs", "-f", "--prefix", "--timestamps", "--max-log-requests=20",
		"-n", c.InstallNamespace(), "-l", selector)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("dockercluster: kubectl logs -f: %v", err)
	}
	c.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c.followed = append(c.followed, f)
}

// Node is one node container.
type Node struct {
	Name      string // the Node object's name, and the container's host name
	Container string
	IP, IP6   netip.Addr
	PodCIDR4  netip.Prefix
	PodCIDR6  netip.Prefix
}

// Start builds what is missing, starts the control plane and the node and
// external containers, and returns once every node is Ready.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if os.Geteuid() != 0 {
		t.Fatal("dockercluster: needs root (Docker, ip netns); run it through make e2e")
	}
	started := time.Now()
	sweep()
	c := &Cluster{t: t, subnet: byte(rand.IntN(200) + 20), podNetwork: cfg.PodNetwork}
	c.Name = fmt.Sprintf("ef%d", c.subnet)
	if cfg.NodeDNS {
		c.DNSAddr = netip.MustParseAddr(fmt.Sprintf("172.31.%d.53", c.subnet))
	}
	dir := t.TempDir()
	var err error
	if c.assets, err = clusterAssets(dir); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	t.Logf("dockercluster: images and binaries ready after %v", time.Since(started).Round(time.Second))
	c.createNetwork()
	for i := 1; i <= cfg.Nodes; i++ {
		c.Nodes = append(c.Nodes, c.node(i))
	}
	var users []kubetest.User
	for _, n := range c.Nodes {
		users = append(users, kubetest.NodeUser(n.Name))
	}
	if c.podNetwork.flannel() {
		users = append(users, flannelUser)
	}
	c.API, err = kubetest.LaunchWith(kubetest.Options{Address: c.Gateway4.String(), Users: users, Cluster: true, ServiceCIDRs: ServiceCIDRs})
	if err != nil {
		t.Fatalf("dockercluster: control plane: %v", err)
	}
	t.Cleanup(c.API.Stop)
	c.Kubeconfig = c.API.Kubeconfig
	c.Kube = kubernetes.NewForConfigOrDie(c.API.Config(kubetest.Admin))
	if err := c.writeNodeFiles(dir); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	if c.podNetwork.flannel() {
		c.authorizeFlannel()
	}
	for _, n := range c.Nodes {
		c.startNode(n, dir)
	}
	c.startExternal()
	// Registered after the nodes' own cleanups, so that it runs before
	// them: the dump reads the node containers' logs.
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpState()
		}
	})
	for _, n := range c.Nodes {
		c.setUpNode(n, false)
	}
	if c.podNetwork.flannel() {
		c.assignPodCIDRs()
	}
	c.routePodsFromHost()
	wait.Until(t, readyTimeout, func() error {
		for _, n := range c.Nodes {
			if err := c.notReady(n); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("dockercluster: %d nodes Ready %v after start; kubectl --kubeconfig %s", len(c.Nodes), time.Since(started).Round(time.Second), c.Kubeconfig)
	return c
}

// notReady says why n's Node is not Ready, or nil.
func (c *Cluster) notReady(n *Node) error {
	node, err := c.Kube.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !nodeReady(node) {
		return fmt.Errorf("node %s not Ready", n.Name)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// createNetwork makes the dual-stack Docker network, named bridge included
// (its checksum offload is turned off: OVS's userspace datapath would pass
// the host's unfinished checksums on to br-ex's tap, where the kernel drops
// them).
func (c *Cluster) createNetwork() {
	t := c.t
	c.Network = c.Name + "-net"
	bridge := "br-" + c.Name
	v4 := netip.MustParsePrefix(fmt.Sprintf("172.31.%d.0/24", c.subnet))
	v6 := netip.MustParsePrefix(fmt.Sprintf("fd00:172:31:%x::/64", c.subnet))
	c.Gateway4, c.Gateway6 = v4.Addr().Next(), v6.Addr().Next()
	c.docker("network", "create", "--label", ownerLabel(), "--ipv6", "--subnet", v4.String(), "--gateway", c.Gateway4.String(),
		"--subnet", v6.String(), "--gateway", c.Gateway6.String(),
		"-o", "com.docker.network.bridge.name="+bridge, c.Network)
	t.Cleanup(func() { _, _ = run("docker", "network", "rm", c.Network) })
	if _, err := run("ethtool", "-K", bridge, "tx", "off"); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
}

// node describes node i: its addresses on the network and its pod CIDRs.
func (c *Cluster) node(i int) *Node {
	return &Node{
		Name:      fmt.Sprintf("node-%d", i),
		Container: fmt.Sprintf("%s-node-%d", c.Name, i),
		IP:        netip.MustParseAddr(fmt.Sprintf("172.31.%d.%d", c.subnet, 10+i)),
		IP6:       netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::%x", c.subnet, 0x10+i)),
		PodCIDR4:  netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)),
		PodCIDR6:  netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", i)),
	}
}

// writeNodeFiles puts the nodes' kubeconfigs, the kubelet configuration and
// the set-up script beside the binaries and images.
func (c *Cluster) writeNodeFiles(dir string) error {
	for _, n := range c.Nodes {
		if err := c.API.WriteKubeconfig(filepath.Join(dir, n.Name+".kubeconfig"), kubetest.NodeUser(n.Name)); err != nil {
			return err
		}
	}
	if err := c.API.WriteKubeconfig(filepath.Join(dir, "kube-proxy.kubeconfig"), kubetest.KubeProxy); err != nil {
		return err
	}
	if c.podNetwork.flannel() {
		if err := c.API.WriteKubeconfig(filepath.Join(dir, "flannel.kubeconfig"), flannelUser); err != nil {
			return err
		}
	}
	root, err := kubetest.RepoRoot()
	if err != nil {
		return err
	}
	if err := copyFile(filepath.Join(root, "test", "dockercluster", "node-setup.sh"), filepath.Join(dir, "node-setup.sh"), 0o755); err != nil {
		return err
	}
	// The node recipe operators run (deploy/node), which node-setup.sh runs.
	if err := os.MkdirAll(filepath.Join(dir, "node"), 0o755); err != nil {
		return err
	}
	for _, script := range []string{"br-ex.sh", "cold-guard.sh"} {
		if err := copyFile(filepath.Join(root, "deploy", "node", script), filepath.Join(dir, "node", script), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(kubeletConfig), 0o644)
}

// kubeletConfig suits a node in a container on this kind of machine:
// cgroup v1 allowed, containerd's socket, no image ever collected (they
// exist only locally) and no eviction for the host's disk.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
# The API server has no client certificate for kubelets here; on this
# private network the kubelet API (logs, exec) is open.
authentication:
  anonymous: {enabled: true}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
resolvConf: /etc/resolv.conf
`

// startNode runs n's container: privileged but for CAP_SYS_RESOURCE, which
// this host's bounding set lacks, with /var on a volume (containerd's
// overlay snapshots need a real file system) and the assets at /egressflow.
func (c *Cluster) startNode(n *Node, dir string) {
	volume := n.Container + "-var"
	c.docker("volume", "create", "--label", ownerLabel(), volume)
	c.t.Cleanup(func() { _, _ = run("docker", "volume", "rm", "-f", volume) })
	c.t.Cleanup(func() { _, _ = run("docker", "rm", "-f", n.Container) })
	args := []string{"run", "-d", "--label", ownerLabel(), "--name", n.Container, "--hostname", n.Name,
		"--network", c.Network, "--ip", n.IP.String(), "--ip6", n.IP6.String(),
		"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
		"--device-cgroup-rule", "a *:* rwm", "--device", "/dev/net/tun", "--device", "/dev/kmsg", "--device", "/dev/fuse",
		"--cgroupns=private", "--tmpfs", "/run", "--tmpfs", "/tmp",
		"-v", volume + ":/var", "-v", dir + ":/egressflow:ro", "-e", "container=docker",
	}
	c.docker(append(args, c.assets.nodeImage, "sleep", "infinity")...)
	if c.DNSAddr.IsValid() {
		// Written, not --dns: on a user-defined network that only sets
		// the upstream of Docker's resolver at 127.0.0.11, which pods (in
		// namespaces of their own) cannot reach.
		c.docker("exec", n.Container, "sh", "-c", "echo nameserver "+c.DNSAddr.String()+" > /etc/resolv.conf")
	}
}

// setUpNode lays n out and starts its kubelet (node-setup.sh); with
// coldGuard (egressflow is installed), egressflow's cold guard first.
func (c *Cluster) setUpNode(n *Node, coldGuard bool) {
	var peers []string
	for _, o := range c.Nodes {
		if o != n {
			peers = append(peers, o.PodCIDR4.String()+"="+o.IP.String(), o.PodCIDR6.String()+"="+o.IP6.String())
		}
	}
	guard := ""
	if coldGuard {
		guard = "1"
	}
	c.docker("exec", "-e", "NODE_NAME="+n.Name, "-e", "POD_NETWORK="+string(c.podNetwork),
		"-e", "POD_CIDR4="+n.PodCIDR4.String(), "-e", "POD_CIDR6="+n.PodCIDR6.String(),
		"-e", "CLUSTER_CIDRS="+ClusterPodCIDR4+","+ClusterPodCIDR6, "-e", "SERVICE_CIDRS="+ServiceCIDRs,
		"-e", "PEER_ROUTES="+strings.Join(peers, " "), "-e", "EGRESSFLOW_COLD_GUARD="+guard,
		n.Container, "bash", "/egressflow/node-setup.sh")
}

// flannelUser is flanneld's identity: the ServiceAccount flannel's own
// manifests run it as (a static token here). A kubelet's identity would
// not do: the Node authorizer lets a node read only its own Node, and
// flanneld watches every Node for its peers' leases.
var flannelUser = kubetest.User{
	Name:   "system:serviceaccount:kube-flannel:flannel",
	Token:  "flannel-token",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-flannel", "system:authenticated"},
}

// authorizeFlannel grants flannelUser what flannel's manifests grant its
// ServiceAccount: read the Nodes (and pods), annotate its own Node with
// its lease, and clear the Node's NetworkUnavailable condition.
func (c *Cluster) authorizeFlannel() {
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "flannel"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flannel"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: flannelUser.Name}},
	}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("dockercluster: flannel's ClusterRole: %v", err)
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("dockercluster: flannel's ClusterRoleBinding: %v", err)
	}
}

// assignPodCIDRs writes each node's pod CIDRs into its Node, once the
// kubelet has registered it, as kube-controller-manager's node IPAM does
// for a cluster whose CNI reads them (flannel's Kubernetes subnet
// manager): the same CIDRs as Node.PodCIDR4 and PodCIDR6, which the host
// and the external host route to the node.
func (c *Cluster) assignPodCIDRs() {
	ctx := context.Background()
	for _, n := range c.Nodes {
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q,%q]}}`, n.PodCIDR4, n.PodCIDR4, n.PodCIDR6)
		wait.Until(c.t, readyTimeout, func() error {
			_, err := c.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		})
	}
}

// startExternal runs the external host: routes to every pod CIDR via its
// node (the pods are not masqueraded), its namespace registered for
// test/topology.
func (c *Cluster) startExternal() {
	t := c.t
	c.ExternalContainer = c.Name + "-external"
	ip := netip.MustParseAddr(fmt.Sprintf("172.31.%d.100", c.subnet))
	ip6 := netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::100", c.subnet))
	t.Cleanup(func() { _, _ = run("docker", "rm", "-f", c.ExternalContainer) })
	c.docker("run", "-d", "--label", ownerLabel(), "--name", c.ExternalContainer, "--hostname", "external",
		"--network", c.Network, "--ip", ip.String(), "--ip6", ip6.String(),
		"--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", c.assets.nodeImage, "sleep", "infinity")
	pid := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.Pid}}", c.ExternalContainer))
	netns := c.Name + "-external"
	if _, err := run("ip", "netns", "attach", netns, pid); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	t.Cleanup(func() { _, _ = run("ip", "netns", "delete", netns) })
	c.External = &topology.Host{Name: "external", Netns: netns, IP: ip, IP6: ip6}
	c.External.Exec(t, "ethtool", "-K", "eth0", "tx", "off")
	if c.DNSAddr.IsValid() {
		c.External.AddAddress(t, c.DNSAddr)
	}
	for _, n := range c.Nodes {
		c.External.Exec(t, "ip", "route", "add", n.PodCIDR4.String(), "via", n.IP.String())
		c.External.Exec(t, "ip", "-6", "route", "add", n.PodCIDR6.String(), "via", n.IP6.String())
	}
}

// Run runs f as t's subtest name, with the cluster's helpers (which fail
// the test the cluster was started with) failing the subtest instead while
// f runs: a failure inside stops that subtest, from its own goroutine.
func (c *Cluster) Run(t *testing.T, name string, f func(t *testing.T)) bool {
	return t.Run(name, func(sub *testing.T) {
		parent := c.t
		c.t = sub
		defer func() { c.t = parent }()
		f(sub)
	})
}

// HostNetwork registers n's network namespace (the node's host network,
// where br-ex's LOCAL port and its addresses are) with ip netns, under the
// container's name, and returns n as a test/topology host there: its
// servers and captures run as a host-networked process of the node would.
// The registration goes with the test.
func (c *Cluster) HostNetwork(n *Node) *topology.Host {
	t := c.t
	t.Helper()
	pid := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.Pid}}", n.Container))
	if _, err := run("ip", "netns", "attach", n.Container, pid); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	t.Cleanup(func() { _, _ = run("ip", "netns", "delete", n.Container) })
	return &topology.Host{Name: n.Name, Netns: n.Container, IP: n.IP, IP6: n.IP6}
}

// routePodsFromHost routes each node's pod CIDRs via the node on this
// machine, where the control plane runs, as a control-plane node of a
// routed pod network does: pods reach the API server with their own
// addresses, and its answers must find them.
func (c *Cluster) routePodsFromHost() {
	for _, n := range c.Nodes {
		for _, r := range [][2]string{{n.PodCIDR4.String(), n.IP.String()}, {n.PodCIDR6.String(), n.IP6.String()}} {
			if _, err := run("ip", "route", "add", r[0], "via", r[1]); err != nil {
				c.t.Fatalf("dockercluster: %v", err)
			}
			c.t.Cleanup(func() { _, _ = run("ip", "route", "del", r[0], "via", r[1]) })
		}
	}
}

// failureDumpDir is where dumpState writes, outside the test's temporary
// directory (which goes with the test): a CI run's dump stays to be read.
const failureDumpDir = "/tmp/egressflow-e2e-failures"

// dumpState writes what a failed test needs to be understood to a file of
// its own under failureDumpDir: the pods and events, egressflow's logs and
// each node's kubelet and agent logs. The test log gets only the file's
// name, so that the failure's own messages stay next to its --- FAIL line.
func (c *Cluster) dumpState() {
	var dump strings.Builder
	for _, args := range [][]string{
		{"get", "nodes,pods", "-A", "-o", "wide"},
		{"get", "leases", "-n", c.InstallNamespace(), "-o", "wide"},
		{"get", "egressservices", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"logs", "-n", c.InstallNamespace(), "-l", "app.kubernetes.io/name=egressflow-controller", "--tail=200", "--prefix"},
		{"logs", "-n", c.InstallNamespace(), "-l", "app.kubernetes.io/name=egressflow-agent", "--tail=200", "--prefix"},
	} {
		out, err := c.kubectl(args...)
		fmt.Fprintf(&dump, "=== kubectl %s\n%s%v\n", strings.Join(args, " "), out, errOrEmpty(err))
	}
	for _, f := range c.followed {
		fmt.Fprintf(&dump, "=== kubectl logs -f -l %s, followed during the test\n%s\n", f.selector, f.String())
	}
	for _, n := range c.Nodes {
		out, err := run("docker", "exec", n.Container, "tail", "-n", "60", "/var/log/kubelet.log")
		fmt.Fprintf(&dump, "=== %s kubelet log tail\n%s%v\n", n.Name, out, errOrEmpty(err))
		if c.podNetwork.flannel() {
			out, err = run("docker", "exec", n.Container, "tail", "-n", "40", "/var/log/flanneld.log")
			fmt.Fprintf(&dump, "=== %s flanneld log tail\n%s%v\n", n.Name, out, errOrEmpty(err))
		}
		// From the node's disk: kubectl logs needs the API server and the
		// kubelet, which the failure may have taken away.
		out, err = run("docker", "exec", n.Container, "bash", "-c", "tail -n 200 /var/log/pods/"+Namespace+"_*/*/*.log")
		fmt.Fprintf(&dump, "=== %s egressflow logs on disk\n%s%v\n", n.Name, out, errOrEmpty(err))
		// The test's own pods (probes log what each target saw).
		out, err = run("docker", "exec", n.Container, "bash", "-c", "tail -n 40 $(ls -d /var/log/pods/* | grep -v "+c.InstallNamespace()+"_)/*/*.log")
		fmt.Fprintf(&dump, "=== %s test pods' logs on disk\n%s%v\n", n.Name, out, errOrEmpty(err))
		out, err = run("docker", "exec", n.Container, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex")
		fmt.Fprintf(&dump, "=== %s flows\n%s%v\n", n.Name, out, errOrEmpty(err))
	}
	name := filepath.Join(failureDumpDir, fmt.Sprintf("%s-%s.log", strings.ReplaceAll(c.t.Name(), "/", "_"), time.Now().Format("20060102-150405")))
	if err := os.MkdirAll(failureDumpDir, 0o755); err != nil {
		c.t.Logf("dockercluster: state after the failure not written: %v", err)
		return
	}
	if err := os.WriteFile(name, []byte(dump.String()), 0o644); err != nil {
		c.t.Logf("dockercluster: state after the failure not written: %v", err)
		return
	}
	c.t.Logf("dockercluster: state after the failure (pods, events, Leases, logs, flows) in %s", name)
}

func errOrEmpty(err error) any {
	if err == nil {
		return ""
	}
	return err
}

// ownerKey labels every container, volume and network a cluster makes with
// the pid of the process that made it.
const ownerKey = "egressflow.dockercluster.owner"

func ownerLabel() string { return fmt.Sprintf("%s=%d", ownerKey, os.Getpid()) }

// sweep removes what clusters of processes that no longer run left behind
// (a test binary killed before its cleanup could run): their containers,
// volumes, networks and registered namespaces.
func sweep() {
	dead := func(pid string) bool {
		_, err := os.Stat("/proc/" + pid)
		return err != nil
	}
	for _, kind := range []struct {
		list, rm []string
		name     string // the format field of the object's name
	}{
		{[]string{"ps", "-a"}, []string{"rm", "-f"}, "{{.Names}}"},
		{[]string{"volume", "ls"}, []string{"volume", "rm", "-f"}, "{{.Name}}"},
		{[]string{"network", "ls"}, []string{"network", "rm"}, "{{.Name}}"},
	} {
		out, _ := run("docker", append(kind.list, "--filter", "label="+ownerKey, "--format", kind.name+` {{.Label "`+ownerKey+`"}}`)...)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if name, pid, ok := strings.Cut(line, " "); ok && dead(pid) {
				_, _ = run("docker", append(kind.rm, name)...)
			}
		}
	}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "ef") && (strings.HasSuffix(e.Name(), "-external") || strings.Contains(e.Name(), "-node-") || strings.Contains(e.Name(), "-gw")) {
			if _, err := run("docker", "inspect", e.Name()); err != nil { // the external, gateway and node containers have their namespaces' names
				_, _ = run("ip", "netns", "delete", e.Name())
			}
		}
	}
}

// docker runs a docker command and fails the test if it fails.
func (c *Cluster) docker(args ...string) string {
	c.t.Helper()
	out, err := run("docker", args...)
	if err != nil {
		c.t.Fatalf("dockercluster: %v", err)
	}
	return out
}

// Exec runs a command in n's container and fails the test if it fails.
func (c *Cluster) Exec(n *Node, args ...string) string {
	c.t.Helper()
	return c.docker(append([]string{"exec", n.Container}, args...)...)
}

// Kubectl runs kubectl against the cluster and fails the test if it fails.
func (c *Cluster) Kubectl(args ...string) string {
	c.t.Helper()
	out, err := c.kubectl(args...)
	if err != nil {
		c.t.Fatalf("dockercluster: %v", err)
	}
	return out
}

func (c *Cluster) kubectl(args ...string) (string, error) {
	path, err := c.kubectlPath()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(path, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// kubectlPath is the cached kubectl's path (build-binaries.sh builds it
// the first time).
func (c *Cluster) kubectlPath() (string, error) {
	out, err := run("bash", filepath.Join(mustRepoRoot(c.t), "test", "tools", "build-binaries.sh"), "--with-kubectl")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if name, path, ok := strings.Cut(line, "="); ok && name == "kubectl" {
			return path, nil
		}
	}
	return "", fmt.Errorf("build-binaries.sh did not report kubectl")
}

func mustRepoRoot(t testing.TB) string {
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// LeaderNode returns the node of the controller replica that holds the
// leader Lease.
func (c *Cluster) LeaderNode() *Node {
	c.t.Helper()
	var leader *Node
	wait.Until(c.t, convergeTimeout, func() error {
		ctx := context.Background()
		lease, err := c.Kube.CoordinationV1().Leases(c.InstallNamespace()).Get(ctx, "egressflow-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil {
			return fmt.Errorf("no leader yet")
		}
		podName, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_") // <pod>_<random>
		pod, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if n.Name == pod.Spec.NodeName {
				leader = n
				return nil
			}
		}
		return fmt.Errorf("leader %s on unknown node %q", pod.Name, pod.Spec.NodeName)
	})
	return leader
}

// ExternalMAC is the external host's MAC on the network.
func (c *Cluster) ExternalMAC() string {
	c.t.Helper()
	return strings.TrimSpace(c.External.Exec(c.t, "cat", "/sys/class/net/eth0/address"))
}

// RestartNode starts n's container again after a docker kill, as a node
// that lost power boots: a fresh network namespace and no process, with
// its /var (OVS's database, containerd's state) as it was. node-setup.sh
// lays it out again, and RestartNode returns once it is Ready and
// egressflow's agent runs Ready on it.
func (c *Cluster) RestartNode(n *Node) {
	c.t.Helper()
	restarted := time.Now().Truncate(time.Second) // pod times have seconds
	c.docker("start", n.Container)
	c.setUpNode(n, true)
	ctx := context.Background()
	wait.Until(c.t, readyTimeout, func() error {
		node, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(node) {
			return fmt.Errorf("node %s not Ready", n.Name)
		}
		pods, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=egressflow-agent", FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return err
		}
		// A container started since the restart, and Ready: the status
		// from before the power loss may still read Ready.
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready && cs.State.Running != nil && !cs.State.Running.StartedAt.Time.Before(restarted) {
					return nil
				}
			}
		}
		return fmt.Errorf("no agent started and Ready on %s since its restart", n.Name)
	})
}

// follow hands every event of the watch that start opens to handle, opening
// it again whenever it ends, until the test ends.
func (c *Cluster) follow(start func(context.Context) (watch.Interface, error), handle func(watch.Event)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := start(ctx)
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				handle(ev)
			}
			w.Stop()
		}
	}()
}
