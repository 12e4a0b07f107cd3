//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// routerScenario is one EgressRouter per node of the cluster (the
// controller spreads them), each with an IPv4 and an IPv6 address of the
// cluster's segment and a UDP rule per family to the external host's
// server, and a probe pod on the leading controller's node (which the
// tests never fail) that sends to every router.
type routerScenario struct {
	c       *Cluster
	server  *topology.SourceServer
	routers []string
	addrs   map[string][2]netip.Addr // by router: IPv4, IPv6
	probe   *corev1.Pod
	targets []string // per router, IPv4 then IPv6
	want    []string // the source each target must see: the reserved address
	macs    map[*Node]string
	// failovers are the addresses that moved off a failed node, for
	// checkFailovers to time in the capture.
	failovers []routerFailover
}

// routerFailover is a reserved address whose holder failed.
type routerFailover struct {
	router       string
	addr         netip.Addr
	failed, next *Node // the failed holder, and the new one
	at           time.Time
}

// newRouterScenario creates the routers and the probe pod, and waits until
// every router is Available on a node of its own and the server sees each
// of the probe's datagrams from the reserved address it was sent to.
func newRouterScenario(t testing.TB, c *Cluster, server *topology.SourceServer) *routerScenario {
	ctx := context.Background()
	s := &routerScenario{c: c, server: server, addrs: map[string][2]netip.Addr{}, macs: c.bridgeMACs()}
	c.CreateNamespace(routerNamespace)
	routers := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).NetworkOperatorV1().EgressRouters(routerNamespace)
	port := int32(server.Addr.Port())
	for i := range c.Nodes {
		name := fmt.Sprintf("router-%d", i)
		v4 := netip.MustParseAddr(fmt.Sprintf("172.31.%d.%d", c.subnet, 60+i))
		v6 := netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::%x", c.subnet, 0x60+i))
		r := &nov1.EgressRouter{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: routerNamespace},
			Spec: nov1.EgressRouterSpec{
				Mode:             nov1.EgressRouterModeRedirect,
				NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
				Addresses:        []nov1.EgressRouterAddress{{IP: netip.PrefixFrom(v4, 24).String()}, {IP: netip.PrefixFrom(v6, 64).String()}},
				Redirect: &nov1.RedirectConfig{RedirectRules: []nov1.L4RedirectRule{
					{DestinationIP: c.External.IP.String(), Port: 80, Protocol: nov1.ProtocolTypeUDP, TargetPort: port},
					{DestinationIP: c.External.IP6.String(), Port: 81, Protocol: nov1.ProtocolTypeUDP, TargetPort: port},
				}},
			},
		}
		if _, err := routers.Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		s.routers = append(s.routers, name)
		s.addrs[name] = [2]netip.Addr{v4, v6}
		s.targets = append(s.targets, netip.AddrPortFrom(v4, 80).String(), netip.AddrPortFrom(v6, 81).String())
		s.want = append(s.want, v4.String(), v6.String())
	}
	holders := s.awaitAvailable(t, func(h map[string]string) error {
		seen := map[string]bool{}
		for _, n := range h {
			seen[n] = true
		}
		if len(seen) != len(c.Nodes) {
			return fmt.Errorf("holders %v: not one router per node", h)
		}
		return nil
	})
	t.Logf("routers' holders: %v", holders)
	s.probe = c.RunProbePod(routerNamespace, "client", c.LeaderNode(), nil, s.targets...)
	c.ExpectSources(s.probe, s.targets, s.want)
	return s
}

// awaitAvailable waits until every router is Available and check accepts
// their holders, and returns them by router.
func (s *routerScenario) awaitAvailable(t testing.TB, check func(map[string]string) error) map[string]string {
	t.Helper()
	routers := versioned.NewForConfigOrDie(s.c.API.Config(kubetest.Admin)).NetworkOperatorV1().EgressRouters(routerNamespace)
	var holders map[string]string
	wait.UntilEvery(t, convergeTimeout, 10*time.Millisecond, func() error {
		holders = map[string]string{}
		for _, name := range s.routers {
			r, err := routers.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !routerAvailable(r) {
				return fmt.Errorf("%s not Available: %+v", name, r.Status)
			}
			holders[name] = r.Status.Holder
		}
		return check(holders)
	})
	return holders
}

// expectResumed checks, after node failed at failedAt, that the routers it
// held (before) moved to live nodes, which redirect the probe's datagrams
// again, and that the external host's neighbour entries name the new
// holders. It records each moved address for checkFailovers, which times
// its failover in the capture.
func (s *routerScenario) expectResumed(t *testing.T, failed *Node, failedAt time.Time, before map[string]string) {
	t.Helper()
	var moved []string
	for name, n := range before {
		if n == failed.Name {
			moved = append(moved, name)
		}
	}
	if len(moved) == 0 {
		t.Fatalf("%s held no router (%v): nothing to fail over", failed.Name, before)
	}
	reassigned := time.Now()
	holders := s.awaitAvailable(t, func(h map[string]string) error {
		for _, name := range moved {
			if h[name] == failed.Name {
				return fmt.Errorf("%s still held by %s", name, failed.Name)
			}
		}
		return nil
	})
	for _, name := range moved {
		next := s.c.nodeNamed(holders[name])
		for _, addr := range s.addrs[name] {
			awaitSeen(t, s.server, addr, time.Now(), convergeTimeout)
			s.failovers = append(s.failovers, routerFailover{router: name, addr: addr, failed: failed, next: next, at: failedAt})
			s.c.expectNeighbour(t, addr, next, reassigned)
		}
	}
	s.c.ExpectSources(s.probe, s.targets, s.want)
}

// staleFlowsSettle is how long after a node back from a freeze has its
// agent renew again its old flows may still forward what reaches them (the
// agent fences, then syncs): expectFlowing's since is that much later, to
// exclude them. A few syncs of the agent, with room for a loaded machine.
const staleFlowsSettle = 500 * time.Millisecond

// expectFlowing fails the test unless the destination receives a
// datagram from each reserved address within bound of since: no router's
// traffic is left black-holed, by a node back from a freeze whose switch
// answered neighbour requests with its old flows, say.
func (s *routerScenario) expectFlowing(t testing.TB, since time.Time, bound time.Duration) {
	t.Helper()
	for _, addr := range s.reserved() {
		if took := awaitSeen(t, s.server, addr, since, convergeTimeout); took > bound {
			t.Errorf("no datagram from %s for %v, want one within %v", addr, took.Round(time.Millisecond), bound)
		}
	}
}

// checkFailovers finds in the external host's capture, for each address
// expectResumed saw move, the outage the destination saw (outageAfter),
// and fails the test unless it is within e2eFailoverBound.
func (s *routerScenario) checkFailovers(t *testing.T, packets []topology.Packet) {
	t.Helper()
	for _, f := range s.failovers {
		gap := outageThrough(t, packets, f.addr, s.c.externalIP(f.addr), s.macs[f.failed], s.macs[f.next], f.at)
		t.Logf("%s's %s: %v from the last datagram through %s to the first through %s", f.router, f.addr, gap.Round(time.Millisecond), f.failed.Name, f.next.Name)
		if gap > e2eFailoverBound {
			t.Errorf("%s's %s: no datagram for %v after %s failed, want a new holder within %v", f.router, f.addr, gap, f.failed.Name, e2eFailoverBound)
		}
	}
}

// checkSources fails the test for any captured packet to the server's port
// that the external host received from a source other than a reserved
// address or allowed: the redirect never lets a client's pod IP, nor a
// node's IP, through.
func (s *routerScenario) checkSources(t testing.TB, packets []topology.Packet, allowed ...netip.Addr) (fromRouters int) {
	t.Helper()
	mac := s.c.ExternalMAC()
	reserved := s.reserved()
	port := fmt.Sprintf(".%d: UDP", s.server.Addr.Port())
	for _, p := range packets {
		toServer := (strings.Contains(p.Line, "> "+s.c.External.IP.String()+port) || strings.Contains(p.Line, "> "+s.c.External.IP6.String()+port)) &&
			(p.DstMAC == mac || strings.HasPrefix(p.DstMAC, "ff:ff:ff:ff:ff:ff"))
		switch {
		case slices.Contains(reserved, p.Src):
			fromRouters++
		case !toServer || slices.Contains(allowed, p.Src):
		default:
			t.Errorf("the external host received a datagram to the routers' destination from %s, neither a reserved address nor allowed: %s", p.Src, p)
		}
	}
	return fromRouters
}

// reserved are the routers' reserved addresses.
func (s *routerScenario) reserved() []netip.Addr {
	var out []netip.Addr
	for _, a := range s.addrs {
		out = append(out, a[0], a[1])
	}
	return out
}
