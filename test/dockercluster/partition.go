package dockercluster

import "strings"

// Disconnect cuts n off the network (docker network disconnect): its
// uplink disappears, OVS keeps a dead port.
func (c *Cluster) Disconnect(n *Node) {
	c.t.Helper()
	c.docker("network", "disconnect", c.Network, n.Container)
}

// Reconnect joins n to the network again with its addresses (and so its
// MAC), and puts the returning interface (eth1, eth2, ...) where eth0 was:
// renamed eth0 (the uplink the agent is configured with) before OVS opens
// it, in br-ex with OpenFlow port 1 so that the flows stay valid, behind
// the same guard, its addresses moved to br-ex.
func (c *Cluster) Reconnect(n *Node) {
	c.t.Helper()
	// Docker refuses to connect while br-ex holds the addresses. Until the
	// returning interface is in br-ex, it is a plain kernel interface with
	// the node's addresses and default route: nothing may be forwarded
	// through it (a real node's NIC never leaves its bridge), so forwarding
	// is held to br-ex and the pods' bridge meanwhile.
	c.Exec(n, "bash", "-c", `set -e
nft add table inet egressflow-reconnect
nft add chain inet egressflow-reconnect forward "{ type filter hook forward priority 0; policy drop; }"
nft add rule inet egressflow-reconnect forward oifname "{ br-ex, cni0 }" accept
ip addr flush dev br-ex scope global
ip -6 route del default 2>/dev/null || true
ip route del default 2>/dev/null || true`)
	c.docker("network", "connect", "--ip", n.IP.String(), "--ip6", n.IP6.String(), c.Network, n.Container)
	links := c.Exec(n, "bash", "-c", "ls /sys/class/net")
	uplink := ""
	for _, name := range strings.Fields(links) {
		if strings.HasPrefix(name, "eth") {
			uplink = name
		}
	}
	if uplink == "" {
		c.t.Fatalf("dockercluster: no uplink on %s after reconnecting: %s", n.Name, links)
	}
	script := `set -e
u=` + uplink + `
v4=$(ip -4 -o addr show dev $u scope global | awk '{print $4; exit}')
v6=$(ip -6 -o addr show dev $u scope global | awk '{print $4; exit}')
gw4=$(ip -4 route show default | awk '{print $3; exit}')
gw6=$(ip -6 route show default | awk '{print $3; exit}')
ovs-vsctl --if-exists del-port br-ex eth0
ip link set $u down
ip link set $u name eth0
ip link set eth0 up
ovs-vsctl add-port br-ex eth0 -- set interface eth0 ofport_request=1
ip addr flush dev eth0 scope global
ip addr add $v4 dev br-ex
ip -6 addr add $v6 dev br-ex nodad
ip route replace default via $gw4 dev br-ex
ip -6 route replace default via $gw6 dev br-ex
nft delete table netdev egressflow-guard 2>/dev/null || true
nft add table netdev egressflow-guard
nft add chain netdev egressflow-guard in "{ type filter hook ingress device eth0 priority 0; policy drop; }"
`
	// The routes to the other nodes' pods went with the addresses.
	for _, o := range c.Nodes {
		if o != n {
			script += "ip route replace " + o.PodCIDR4.String() + " via " + o.IP.String() + "\n"
			script += "ip -6 route replace " + o.PodCIDR6.String() + " via " + o.IP6.String() + "\n"
		}
	}
	script += "nft delete table inet egressflow-reconnect\n"
	c.Exec(n, "bash", "-c", script)
}
