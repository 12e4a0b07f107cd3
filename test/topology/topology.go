// Package topology builds, out of network namespaces, the network of a small
// cluster whose nodes run Open vSwitch, for tests that need real packets:
//
//	pod ns ──veth── br-ex (OVS, node ns) ──eth0══ underlay bridge ══ external host
//	10.244.N.x      LOCAL: node IP 172.18.0.(10+N)      (underlay ns)      172.18.0.100
//	fd00:10:244:N::x       fd00:172:18::1N                                 fd00:172:18::100
//	                       pod gateway 10.244.N.1, fd00:10:244:N::1
//
// Every link is dual-stack: each node, pod and host has an IPv4 and an IPv6
// address (IP and IP6), and both families are routed the same way.
//
// Each node is an ovstest.Switch (its own ovsdb-server, ovs-vswitchd and
// network namespace) whose br-ex has the uplink port eth0 on the underlay
// segment and carries the node IP and the pods' gateway on its LOCAL port.
// Pods are namespaces attached to their node's br-ex with addresses from the
// node's pod CIDR. The pod network is routed, as host-gw CNIs do it: every
// node and the external host route each pod CIDR via its node's IP. Until a
// test installs flows of its own, br-ex forwards with OVS's default NORMAL
// flow.
//
// The external host runs in-process servers (Serve) that tell each client the
// source address they saw; pods dial them (Dial) from inside their namespace.
// All addresses live only inside namespaces the topology made, and everything
// is removed by t.Cleanup, also when the test fails.
package topology

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/test/ovstest"
)

// Addressing. These ranges exist only inside the test's namespaces.
var (
	// UnderlayPrefix is the segment joining node uplinks and the external host.
	UnderlayPrefix = netip.MustParsePrefix("172.18.0.0/24")
	// ExternalIP is the external host's address on the underlay.
	ExternalIP = netip.MustParseAddr("172.18.0.100")
	// ClusterPodPrefix holds every node's pod CIDR: node N has 10.244.N.0/24.
	ClusterPodPrefix = netip.MustParsePrefix("10.244.0.0/16")

	// The IPv6 counterparts: node N's pod CIDR is fd00:10:244:N::/64.
	UnderlayPrefix6   = netip.MustParsePrefix("fd00:172:18::/64")
	ExternalIP6       = netip.MustParseAddr("fd00:172:18::100")
	ClusterPodPrefix6 = netip.MustParsePrefix("fd00:10:244::/48")
)

// UplinkPort is the name of each node's uplink, as an interface and OVS port.
const UplinkPort = "eth0"

// Topology is the whole test network.
type Topology struct {
	t        testing.TB
	Underlay string // namespace holding the underlay Linux bridge
	Nodes    []*Node
	External *Host
}

// Node is one cluster node: an OVS instance and its namespace.
type Node struct {
	Name string
	*ovstest.Switch
	Index   int
	IP      netip.Addr   // node IP, on br-ex's LOCAL port
	PodCIDR netip.Prefix // 10.244.Index.0/24
	Gateway netip.Addr   // the pods' default gateway, on br-ex's LOCAL port
	// IPv6: fd00:172:18::1<Index>, fd00:10:244:<Index>::/64 and its ::1.
	IP6, Gateway6 netip.Addr
	PodCIDR6      netip.Prefix
	pods          int
}

// Pod is a network namespace attached to its node's br-ex.
type Pod struct {
	Name  string
	Netns string
	IP    netip.Addr
	IP6   netip.Addr
	Node  *Node
	Port  string // its OVS port (and interface in the node namespace)
}

// Addrs are the pod's addresses, IPv4 first.
func (p *Pod) Addrs() []netip.Addr { return []netip.Addr{p.IP, p.IP6} }

// Host is a namespace outside the cluster.
type Host struct {
	Name  string
	Netns string
	IP    netip.Addr
	IP6   netip.Addr
}

// New builds the underlay, the external host and n nodes (numbered from 1).
func New(t testing.TB, nodes int) *Topology {
	t.Helper()
	ovstest.RequireRoot(t)
	topo := &Topology{t: t, Underlay: newBridgeNetns(t, "ul")}

	topo.External = &Host{Name: "external", Netns: ovstest.NewNetns(t, "ext"), IP: ExternalIP, IP6: ExternalIP6}
	topo.connectToUnderlay(topo.External.Netns, "eth0")
	topo.External.exec(t, "ip", addrAdd(ExternalIP, UnderlayPrefix, "eth0")...)
	topo.External.exec(t, "ip", addrAdd(ExternalIP6, UnderlayPrefix6, "eth0")...)

	for i := 1; i <= nodes; i++ {
		topo.addNode(i)
	}
	// Routed pod network: everyone reaches each pod CIDR via its node.
	for _, n := range topo.Nodes {
		topo.External.exec(t, "ip", "route", "add", n.PodCIDR.String(), "via", n.IP.String())
		topo.External.exec(t, "ip", "route", "add", n.PodCIDR6.String(), "via", n.IP6.String())
		for _, other := range topo.Nodes {
			if other != n {
				n.Exec(t, "ip", "route", "add", other.PodCIDR.String(), "via", other.IP.String())
				n.Exec(t, "ip", "route", "add", other.PodCIDR6.String(), "via", other.IP6.String())
			}
		}
	}
	return topo
}

func (topo *Topology) addNode(index int) {
	t := topo.t
	sw := ovstest.Start(t)
	n := &Node{
		Name:    fmt.Sprintf("node-%d", index),
		Switch:  sw,
		Index:   index,
		IP:      nthAddr(UnderlayPrefix, 10+index),
		PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(index), 0}), 24),
	}
	n.Gateway = nthAddr(n.PodCIDR, 1)
	n.IP6 = nthAddr(UnderlayPrefix6, 0x10+index) // fd00:172:18::11 for node 1
	podNet6 := ClusterPodPrefix6.Addr().As16()
	binary.BigEndian.PutUint16(podNet6[6:], uint16(index)) // the 4th group
	n.PodCIDR6 = netip.PrefixFrom(netip.AddrFrom16(podNet6), 64)
	n.Gateway6 = nthAddr(n.PodCIDR6, 1)
	topo.connectToUnderlay(sw.Netns, UplinkPort)
	sw.Vsctl(t, "add-port", sw.Bridge, UplinkPort)
	for _, cmd := range [][]string{
		append([]string{"ip"}, addrAdd(n.IP, UnderlayPrefix, sw.Bridge)...),
		append([]string{"ip"}, addrAdd(n.Gateway, n.PodCIDR, sw.Bridge)...),
		append([]string{"ip"}, addrAdd(n.IP6, UnderlayPrefix6, sw.Bridge)...),
		append([]string{"ip"}, addrAdd(n.Gateway6, n.PodCIDR6, sw.Bridge)...),
		{"ip", "link", "set", sw.Bridge, "up"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"},
		{"sysctl", "-qw", "net.ipv4.conf.default.rp_filter=0"},
	} {
		sw.Exec(t, cmd[0], cmd[1:]...)
	}
	topo.Nodes = append(topo.Nodes, n)
}

// AddPod creates a pod namespace on the node with the next free address of
// each of its pod CIDRs and default routes via the node.
func (n *Node) AddPod(t testing.TB, name string) *Pod {
	t.Helper()
	n.pods++
	p := &Pod{
		Name:  name,
		Netns: ovstest.NewNetns(t, "pod"),
		IP:    nthAddr(n.PodCIDR, 1+n.pods),
		IP6:   nthAddr(n.PodCIDR6, 1+n.pods),
		Node:  n,
		Port:  fmt.Sprintf("pod%d", n.pods),
	}
	link(t, p.Netns, "eth0", n.Netns, p.Port)
	// The node's end of the veth belongs to OVS alone: without this, the
	// node's kernel also answers the pod's ARP and neighbour solicitations
	// for the gateway on it, with the veth's own MAC, and the pod's frames
	// to that MAC are flooded by br-ex out of the uplink as well as routed.
	// (A real node has no such second path to its pods.)
	n.Exec(t, "sysctl", "-qw", "net.ipv4.conf."+p.Port+".arp_ignore=8", "net.ipv6.conf."+p.Port+".disable_ipv6=1")
	n.Vsctl(t, "add-port", n.Bridge, p.Port)
	p.Exec(t, "ip", addrAdd(p.IP, n.PodCIDR, "eth0")...)
	run(t, "ip", "netns", "exec", p.Netns, "ip", "route", "add", "default", "via", n.Gateway.String())
	p.Exec(t, "ip", addrAdd(p.IP6, n.PodCIDR6, "eth0")...)
	run(t, "ip", "netns", "exec", p.Netns, "ip", "route", "add", "default", "via", n.Gateway6.String())
	return p
}

// OFPort is the pod's OpenFlow port number on its node's br-ex.
func (p *Pod) OFPort(t testing.TB) int {
	t.Helper()
	return int(p.Node.PortNumber(t, p.Port))
}

// PortNumber is the OpenFlow port number of the named port on the node's br-ex.
func (n *Node) PortNumber(t testing.TB, name string) uint32 {
	t.Helper()
	var port uint32
	out := strings.TrimSpace(n.Vsctl(t, "get", "interface", name, "ofport"))
	if _, err := fmt.Sscan(out, &port); err != nil || port == 0 {
		t.Fatalf("topology: ofport of %s on %s is %q", name, n.Name, out)
	}
	return port
}

// BridgeMAC is the MAC address of the node's br-ex (its LOCAL port), the
// address other nodes steer to.
func (n *Node) BridgeMAC(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(n.Exec(t, "cat", "/sys/class/net/"+n.Bridge+"/address"))
}

// Exec runs a command in the pod's namespace and returns its output.
func (p *Pod) Exec(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", p.Netns, name}, args...)...)
}

// Exec runs a command in the host's namespace and returns its output.
func (h *Host) Exec(t testing.TB, name string, args ...string) string {
	t.Helper()
	return h.exec(t, name, args...)
}

func (h *Host) exec(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", h.Netns, name}, args...)...)
}

// AddGateway attaches a router to the underlay at its index-th addresses
// (172.18.0.<index>, fd00:172:18::<index in hex>): it forwards what it is
// sent, as an external gateway does, without ICMP redirects, and routes
// the pod CIDRs through their nodes, as the external host does. Call it
// after New.
func (topo *Topology) AddGateway(t testing.TB, name string, index int) *Host {
	t.Helper()
	h := &Host{Name: name, Netns: ovstest.NewNetns(t, "gw"), IP: nthAddr(UnderlayPrefix, index), IP6: nthAddr(UnderlayPrefix6, index)}
	topo.connectToUnderlay(h.Netns, "eth0")
	h.exec(t, "ip", addrAdd(h.IP, UnderlayPrefix, "eth0")...)
	h.exec(t, "ip", addrAdd(h.IP6, UnderlayPrefix6, "eth0")...)
	h.exec(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0")
	for _, n := range topo.Nodes {
		h.exec(t, "ip", "route", "add", n.PodCIDR.String(), "via", n.IP.String())
		h.exec(t, "ip", "route", "add", n.PodCIDR6.String(), "via", n.IP6.String())
	}
	return h
}

// MAC is the MAC address of the host's underlay interface.
func (h *Host) MAC(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(h.exec(t, "cat", "/sys/class/net/eth0/address"))
}

// connectToUnderlay links namespace ns (interface ifname) to the underlay bridge.
func (topo *Topology) connectToUnderlay(ns, ifname string) {
	connectToBridge(topo.t, topo.Underlay, ns, ifname)
}

// newBridgeNetns makes a namespace holding a Linux bridge br0: a segment.
func newBridgeNetns(t testing.TB, prefix string) string {
	ns := ovstest.NewNetns(t, prefix)
	run(t, "ip", "netns", "exec", ns, "ip", "link", "add", "br0", "type", "bridge")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "br0", "up")
	return ns
}

// connectToBridge links namespace ns (interface ifname) to the bridge br0
// in namespace bridgeNs.
func connectToBridge(t testing.TB, bridgeNs, ns, ifname string) {
	peer := ovstest.UniqueName("u")
	link(t, ns, ifname, bridgeNs, peer)
	run(t, "ip", "netns", "exec", bridgeNs, "ip", "link", "set", peer, "master", "br0")
}

// Addressing of the segment AddSegment builds.
var (
	SegmentPrefix  = netip.MustParsePrefix("172.19.0.0/24")
	SegmentPrefix6 = netip.MustParsePrefix("fd00:172:19::/64")
)

// SegmentInterface is each node's interface on the second segment.
const SegmentInterface = "eth1"

// Segment is a second network outside the cluster, as an EgressService's
// `network` leads to: its own bridge and external host (172.19.0.100,
// fd00:172:19::100), and an interface eth1 on every node (172.19.0.(10+N),
// fd00:172:19::1N) through which the node masquerades what it sends,
// as nodes do on a secondary network. Nothing routes to it by default: a
// test points a routing table at it.
type Segment struct {
	Netns string // the namespace of its bridge
	Host  *Host
	nodes map[*Node][2]netip.Addr
}

// NodeIP is n's address on the segment, of addr's family.
func (s *Segment) NodeIP(n *Node, family netip.Addr) netip.Addr {
	if family.Is4() {
		return s.nodes[n][0]
	}
	return s.nodes[n][1]
}

// AddSegment builds the second segment and joins every node to it.
func (topo *Topology) AddSegment() *Segment {
	t := topo.t
	t.Helper()
	seg := &Segment{Netns: newBridgeNetns(t, "seg"), nodes: map[*Node][2]netip.Addr{}}
	seg.Host = &Host{Name: "external-2", Netns: ovstest.NewNetns(t, "ext2"),
		IP: nthAddr(SegmentPrefix, 100), IP6: nthAddr(SegmentPrefix6, 0x100)}
	connectToBridge(t, seg.Netns, seg.Host.Netns, "eth0")
	seg.Host.exec(t, "ip", addrAdd(seg.Host.IP, SegmentPrefix, "eth0")...)
	seg.Host.exec(t, "ip", addrAdd(seg.Host.IP6, SegmentPrefix6, "eth0")...)
	for _, n := range topo.Nodes {
		ip, ip6 := nthAddr(SegmentPrefix, 10+n.Index), nthAddr(SegmentPrefix6, 0x10+n.Index)
		seg.nodes[n] = [2]netip.Addr{ip, ip6}
		connectToBridge(t, seg.Netns, n.Netns, SegmentInterface)
		n.Exec(t, "ip", addrAdd(ip, SegmentPrefix, SegmentInterface)...)
		n.Exec(t, "ip", addrAdd(ip6, SegmentPrefix6, SegmentInterface)...)
		for _, iptables := range []string{"iptables", "ip6tables"} {
			n.Exec(t, iptables, "-t", "nat", "-A", "POSTROUTING", "-o", SegmentInterface, "-j", "MASQUERADE")
		}
	}
	return seg
}

// link creates a veth pair with end a (named aName) in namespace nsA and end b
// (named bName) in nsB, both up, with transmit checksum offload off: the
// userspace datapath forwards the veth's partial checksums unfinished, and
// the receiver would drop TCP and UDP segments.
func link(t testing.TB, nsA, aName, nsB, bName string) {
	t.Helper()
	tmpA, tmpB := ovstest.UniqueName("va"), ovstest.UniqueName("vb")
	run(t, "ip", "link", "add", tmpA, "type", "veth", "peer", "name", tmpB)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", tmpA).Run() }) // only if still in the root namespace
	for _, end := range []struct{ tmp, ns, name string }{{tmpA, nsA, aName}, {tmpB, nsB, bName}} {
		run(t, "ip", "link", "set", end.tmp, "netns", end.ns)
		run(t, "ip", "netns", "exec", end.ns, "ip", "link", "set", end.tmp, "name", end.name)
		run(t, "ip", "netns", "exec", end.ns, "ethtool", "-K", end.name, "tx", "off")
		run(t, "ip", "netns", "exec", end.ns, "ip", "link", "set", end.name, "up")
	}
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := execCommand(name, args...)
	if err != nil {
		t.Fatalf("topology: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func execCommand(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// nthAddr is the n-th address of a prefix of either family.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr().As16()
	low := binary.BigEndian.Uint64(a[8:]) + uint64(n)
	binary.BigEndian.PutUint64(a[8:], low)
	if p.Addr().Is4() {
		return netip.AddrFrom16(a).Unmap()
	}
	return netip.AddrFrom16(a)
}

// addrAdd is the `ip` command line that puts addr, with the length of prefix, on dev;
// IPv6 addresses skip duplicate address detection (nodad), which would
// leave them unusable ("tentative") for a second or more.
func addrAdd(addr netip.Addr, prefix netip.Prefix, dev string) []string {
	cmd := []string{"addr", "add", prefixed(addr, prefix), "dev", dev}
	if addr.Is6() {
		cmd = append(cmd, "nodad")
	}
	return cmd
}

// AddAddress gives the host one more address of its own (a /32 or /128 on
// eth0), e.g. one that other hosts also hold, for tests of routing.
func (h *Host) AddAddress(t testing.TB, addr netip.Addr) {
	t.Helper()
	h.exec(t, "ip", addrAdd(addr, netip.PrefixFrom(addr, addr.BitLen()), "eth0")...)
}

// prefixed writes addr with the length of prefix, as `ip addr add` wants it.
func prefixed(addr netip.Addr, prefix netip.Prefix) string {
	return netip.PrefixFrom(addr, prefix.Bits()).String()
}
