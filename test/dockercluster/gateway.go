package dockercluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// Gateway is an external gateway: a container on the cluster's network,
// outside the cluster, that forwards what the nodes send it (an
// AdminPolicyBasedExternalRoute's next hop, the administrator's router)
// and runs FRR's bfdd with a single-hop peer for every node address, at
// egressflow's default timers (100 ms x 3).
type Gateway struct {
	*topology.Host
	Container string
	c         *Cluster
}

// gatewayBFDConf is where the gateway's bfdd reads its configuration, and
// gatewayVty the directory of its vty socket.
const (
	gatewayBFDConf = "/etc/frr/bfdd.conf"
	gatewayVty     = "/var/run/frr"
)

// StartGateway runs gateway n (1-based) of the cluster at 172.31.<subnet>.(110+n)
// and fd00:172:31:<subnet>::(110+n): forwarding, without ICMP redirects
// (it forwards back out of the interface it received on), routing the pod
// CIDRs via their nodes as the external host does, its namespace
// registered for test/topology, bfdd running.
func (c *Cluster) StartGateway(n int) *Gateway {
	t := c.t
	name := fmt.Sprintf("gw%d", n)
	g := &Gateway{Container: c.Name + "-" + name, c: c}
	ip := netip.MustParseAddr(fmt.Sprintf("172.31.%d.%d", c.subnet, 110+n))
	ip6 := netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::%x", c.subnet, 0x110+n))
	t.Cleanup(func() { _, _ = run("docker", "rm", "-f", g.Container) })
	c.docker("run", "-d", "--label", ownerLabel(), "--name", g.Container, "--hostname", name,
		"--network", c.Network, "--ip", ip.String(), "--ip6", ip6.String(),
		"--sysctl", "net.ipv4.ip_forward=1", "--sysctl", "net.ipv6.conf.all.forwarding=1",
		"--sysctl", "net.ipv4.conf.all.send_redirects=0", "--sysctl", "net.ipv4.conf.default.send_redirects=0",
		// bfdd asks for CAP_SYS_ADMIN (for its VRFs' namespaces) and
		// exits without it.
		"--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", "--cap-add", "SYS_ADMIN", c.assets.nodeImage, "sleep", "infinity")
	pid := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.Pid}}", g.Container))
	if _, err := run("ip", "netns", "attach", g.Container, pid); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	t.Cleanup(func() { _, _ = run("ip", "netns", "delete", g.Container) })
	g.Host = &topology.Host{Name: name, Netns: g.Container, IP: ip, IP6: ip6}
	g.Exec(t, "ethtool", "-K", "eth0", "tx", "off")
	// IPv6 sends no redirects once forwarding (the kernel's rule); the
	// IPv4 one is per interface too.
	g.Exec(t, "sysctl", "-qw", "net.ipv4.conf.eth0.send_redirects=0")
	for _, node := range c.Nodes {
		g.Exec(t, "ip", "route", "add", node.PodCIDR4.String(), "via", node.IP.String())
		g.Exec(t, "ip", "-6", "route", "add", node.PodCIDR6.String(), "via", node.IP6.String())
	}
	var conf strings.Builder
	conf.WriteString("bfd\n")
	for _, node := range c.Nodes {
		for _, p := range [][2]netip.Addr{{node.IP, ip}, {node.IP6, ip6}} {
			fmt.Fprintf(&conf, " peer %s local-address %s\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n !\n", p[0], p[1])
		}
	}
	conf.WriteString("!\n")
	cmd := exec.Command("docker", "exec", "-i", g.Container, "sh", "-c", "mkdir -p "+gatewayVty+" && chown frr:frr "+gatewayVty+" && cat > "+gatewayBFDConf)
	cmd.Stdin = strings.NewReader(conf.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dockercluster: write %s's bfdd.conf: %v: %s", name, err, out)
	}
	c.docker("exec", "-d", g.Container, "/usr/lib/frr/bfdd", "-f", gatewayBFDConf, "--vty_socket", gatewayVty,
		"-A", "127.0.0.1", "-P", "0", "--log", "file:/var/log/bfdd.log")
	wait.Until(t, 10*time.Second, func() error {
		_, err := g.vtysh("show bfd peers json")
		return err
	})
	return g
}

// vtysh runs vtysh commands against the gateway's bfdd.
func (g *Gateway) vtysh(commands ...string) (string, error) {
	args := []string{"exec", g.Container, "vtysh", "--vty_socket", gatewayVty, "-d", "bfdd"}
	for _, cmd := range commands {
		args = append(args, "-c", cmd)
	}
	return run("docker", args...)
}

// PeersUp waits until the gateway's sessions to every node address are up.
func (g *Gateway) PeersUp() {
	g.c.t.Helper()
	wait.Until(g.c.t, convergeTimeout, func() error {
		out, err := g.vtysh("show bfd peers json")
		if err != nil {
			return err
		}
		var peers []struct {
			Peer   string `json:"peer"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &peers); err != nil {
			return fmt.Errorf("show bfd peers json: %v: %s", err, out)
		}
		var down []string
		for _, p := range peers {
			if p.Status != "up" {
				down = append(down, p.Peer+" "+p.Status)
			}
		}
		if len(peers) != 2*len(g.c.Nodes) || len(down) > 0 {
			return fmt.Errorf("%s: %d peers, not up: %v", g.Name, len(peers), down)
		}
		return nil
	})
}

// SetBFD shuts down (on false) or brings back every one of the gateway's
// BFD peers in its bfdd's configuration, as an operator would: the nodes
// see their sessions go AdminDown.
func (g *Gateway) SetBFD(on bool) {
	g.c.t.Helper()
	cmds := []string{"configure terminal", "bfd"}
	for _, node := range g.c.Nodes {
		for _, p := range [][2]netip.Addr{{node.IP, g.IP}, {node.IP6, g.IP6}} {
			shut := "shutdown"
			if on {
				shut = "no shutdown"
			}
			cmds = append(cmds, fmt.Sprintf("peer %s local-address %s", p[0], p[1]), shut, "exit")
		}
	}
	if out, err := g.vtysh(cmds...); err != nil {
		g.c.t.Fatalf("dockercluster: %s: %v: %s", g.Name, err, out)
	}
}

// Kill kills the gateway's container: it stops answering at once, without
// a BFD AdminDown.
func (g *Gateway) Kill() {
	g.c.t.Helper()
	g.c.docker("kill", g.Container)
}

// Remove removes the gateway's container and its registered namespace,
// so that StartGateway can start it again.
func (g *Gateway) Remove() {
	g.c.t.Helper()
	g.c.docker("rm", "-f", g.Container)
	if _, err := run("ip", "netns", "delete", g.Container); err != nil {
		g.c.t.Fatalf("dockercluster: %v", err)
	}
}
