//go:build e2e || demo

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

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// The LB IPs the tests write into the Service's status, as a cloud's load
// balancer would (documentation ranges, held by no host but announced to
// the external host by the test).
var lbIPs = []netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8:5::10")}

// egressScenario is a dual-stack LoadBalancer Service whose endpoints run
// on every node, a pod that is no endpoint, and their EgressService.
type egressScenario struct {
	c         *Cluster
	owners    *ipOwners              // which scenario pod held which address, when
	server    *topology.SourceServer // on the external host
	targets   []string               // the server, per family
	endpoints []*corev1.Pod
	bystander *corev1.Pod
	announcer *Announcer
	// faultAt is when the last fault failHost put a host through took
	// effect (docker had applied it).
	faultAt time.Time
}

const scenarioNamespace = "shop"

func newEgressScenario(t testing.TB, c *Cluster, spec esv1.EgressServiceSpec) *egressScenario {
	ctx := context.Background()
	server := c.External.Serve(t)
	s := &egressScenario{c: c, server: server, targets: []string{server.Addr.String(), server.Addr6.String()}, owners: c.followPodIPs(scenarioNamespace)}
	s.announcer = c.Announce("egress-service.k8s.ovn.org/shop-web", lbIPs...)
	c.CreateNamespace(scenarioNamespace)
	for i, n := range c.Nodes {
		s.endpoints = append(s.endpoints, c.RunProbePod(scenarioNamespace, fmt.Sprintf("web-%d", i+1), n, map[string]string{"app": "web"}, s.targets...))
	}
	s.bystander = c.RunProbePod(scenarioNamespace, "other", c.Nodes[len(c.Nodes)-1], map[string]string{"app": "other"}, s.targets...)

	c.CreateLoadBalancer(scenarioNamespace, "web", map[string]string{"app": "web"}, lbIPs...)
	es := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace)
	if _, err := es.Create(ctx, &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: scenarioNamespace, Name: "web"}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller picks a host and labels it (status.host names it);
	// the announcer routes the LB IPs there.
	wait.Until(t, convergeTimeout, func() error {
		got, err := es.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n, _ := s.announcer.Current(); n == nil || n.Name != got.Status.Host {
			return fmt.Errorf("EgressService host %q, LB IPs routed to %v", got.Status.Host, n)
		}
		return nil
	})
	return s
}

// offLeader is the EgressService spec that keeps its host off the node of
// the leading controller, so that a fault of the host measures the
// agents' Lease, not leader election (whose own failure is another story).
func offLeader(c *Cluster) esv1.EgressServiceSpec {
	return esv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpNotIn, Values: []string{c.LeaderNode().Name}}},
	}}
}

// host is the node the LB IPs are routed to: the one labelled.
func (s *egressScenario) host() *Node {
	n, _ := s.announcer.Current()
	return n
}

// expectLBIPs waits until every endpoint is seen with the LB IP of each
// family, and the bystander with its own addresses.
func (s *egressScenario) expectLBIPs() {
	want := []string{lbIPs[0].String(), lbIPs[1].String()}
	for _, ep := range s.endpoints {
		s.c.ExpectSources(ep, s.targets, want)
	}
	s.c.ExpectSources(s.bystander, s.targets, podIPs(s.bystander))
}

// checkNoPodIP fails the test for every packet of the capture that the
// external host received (its MAC, or a broadcast or multicast one) from an
// endpoint's pod IP. Frames a switch floods past it towards another MAC are
// not received; they are counted and returned: steered packets carry the
// pod IP between nodes, and towards a host that has just died the Docker
// bridge, like any switch, floods them until the steering moves.
func (s *egressScenario) checkNoPodIP(t testing.TB, packets []topology.Packet) (fromLB, floodedPast int) {
	t.Helper()
	mac := s.c.ExternalMAC()
	for _, p := range packets {
		if p.Src == lbIPs[0] || p.Src == lbIPs[1] {
			fromLB++
			continue
		}
		// The pod that had the address then: a pod restarted on a node back
		// from a power loss gets another, and an address may pass to
		// another pod. One not listed yet is the next to have it (it sent
		// before the API server knew its address).
		owner, listed := s.owners.at(p.Src, p.Time)
		switch {
		case owner == nil || owner.Labels["app"] != "web":
		case p.DstMAC != mac && !strings.HasPrefix(p.DstMAC, "ff:ff:ff:ff:ff:ff") && !strings.HasPrefix(p.DstMAC, "33:33:") && !strings.HasPrefix(p.DstMAC, "01:00:5e:"):
			floodedPast++
		default:
			t.Errorf("the external host received a packet from endpoint %s's pod IP (listed by then: %v): %s", owner.Name, listed, p)
		}
	}
	return fromLB, floodedPast
}

func podPointers(pods []corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		out = append(out, &pods[i])
	}
	return out
}

func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

// failHost puts the current host through fault ("kill": power loss,
// "pause": a frozen node, "disconnect": a partition) and returns the time
// from the moment it issued the fault (s.faultAt) to the first packet with
// each family's LB IP at the external host since, the later of the two,
// once the LB IPs are routed to another host. That packet may still have
// come through the failed host before the fault took effect: the capture's
// outage (outageAfter) is the failover's measure.
func (s *egressScenario) failHost(t testing.TB, fault string) (failed *Node, took time.Duration) {
	failed = s.host()
	at := time.Now() // the fault cannot take effect earlier
	if fault == "disconnect" {
		s.c.Disconnect(failed)
	} else {
		s.c.docker(fault, failed.Container)
	}
	s.faultAt = at
	if fault == "pause" {
		t.Cleanup(func() { _, _ = run("docker", "unpause", failed.Container) })
	}
	took = s.awaitLBIPs(t, at, func(host *Node) error {
		if host == failed {
			return fmt.Errorf("the LB IPs still go to %s", failed.Name)
		}
		return nil
	})
	return failed, took
}

// awaitLBIPs waits until the LB IPs are routed to a host that routed
// accepts and the external host has received a packet from each since
// at, and returns the time from at to the later of the two first packets.
func (s *egressScenario) awaitLBIPs(t testing.TB, at time.Time, routed func(host *Node) error) (took time.Duration) {
	t.Helper()
	wait.Until(t, convergeTimeout, func() error {
		if err := routed(s.host()); err != nil {
			return err
		}
		for _, lb := range lbIPs {
			first, ok := s.server.FirstFrom(lb, at)
			if !ok {
				return fmt.Errorf("no packet from %s since %v", lb, at.Format(time.StampMilli))
			}
			took = max(took, first.Sub(at))
		}
		return nil
	})
	return took
}

// failHostWithin is failHost for a test: it fails the test unless the
// LB-IP traffic went through the new host within e2eFailoverBound.
func (s *egressScenario) failHostWithin(t testing.TB, fault string) (failed *Node, took time.Duration) {
	t.Helper()
	failed, took = s.failHost(t, fault)
	if took > e2eFailoverBound {
		t.Errorf("%s of the host %s: LB-IP traffic through %s %v later, want within %v", fault, failed.Name, s.host().Name, took, e2eFailoverBound)
	}
	return failed, took
}

// e2eFailoverBound is what the tests allow from a host's fault (docker
// kill, pause, network disconnect) to the first LB-IP packet through the
// new host. The probe protocol's own bound is about 0.7 s (make
// bench-failover measures it, p99 at most 1 s); the rest is room for a
// machine that runs three node containers on two cores. A Lease-only
// failover (40 s) cannot meet it.
const e2eFailoverBound = 2 * time.Second

// expectUndisturbed fails the test unless, since a change of egressflow's
// own (a rolling update, a helm upgrade) began at since, the service kept
// host, routed there at routedAt (the announcer never moved, no HostLost
// Event), and the capture saw no pod IP from an endpoint nor a pod-IP
// frame flooded past the external host; it stops the capture.
func (s *egressScenario) expectUndisturbed(t *testing.T, during string, host *Node, routedAt, since time.Time, capture *topology.Capture) {
	t.Helper()
	s.expectLBIPs()
	if now, at := s.announcer.Current(); now != host || !at.Equal(routedAt) {
		t.Errorf("the host moved from %s to %s during %s", host.Name, now.Name, during)
	}
	expectNoHostLost(t, s.c, since)
	fromLB, flooded := s.checkNoPodIP(t, capture.Stop())
	if flooded > 0 {
		t.Errorf("%d pod-IP frames flooded past the external host during %s", flooded, during)
	}
	t.Logf("%d packets from the LB IPs during %s, none from a pod IP", fromLB, during)
}

// expectNoHostLost fails the test for every HostLost Event of the
// scenario's namespace since then: no service lost its host.
func expectNoHostLost(t *testing.T, c *Cluster, since time.Time) {
	t.Helper()
	events, err := c.Kube.CoreV1().Events(scenarioNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=HostLost"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		last := e.LastTimestamp.Time // core/v1's; events.k8s.io's below
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		} else if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.Before(since.Truncate(time.Second)) { // LastTimestamp has whole seconds
			continue
		}
		t.Errorf("%s: %s", e.Reason, e.Message)
	}
}

// faultLookback and deathSlack bound where outageAfter looks for the
// failed node's last packet: from faultLookback before the moment the
// fault was issued to deathSlack after it. The fault takes effect a little
// after that moment: docker kill returns only once the container is gone
// (0.38 s for an idle one on these machines), when it has stopped
// forwarding for a while.
//
// lastSendSlack is how long before that moment the failed node's last
// packet may come: the senders send every probeInterval, and a loaded
// machine may delay one. An earlier last packet means that another node
// took the traffic while the failed one was still up: two nodes served
// the address, or the failed one stopped for another reason.
const (
	faultLookback = 5 * time.Second
	deathSlack    = time.Second
	lastSendSlack = 4 * probeInterval
)

// outageAfter returns the outage that dest saw in a capture when the
// packets from addr (an LB IP, an egress IP, a router's reserved address)
// moved off a node whose fault was issued at faultAt: from the last that
// came from the failed node's MAC around faultAt (faultLookback,
// deathSlack) to the first that came from another node's after faultAt,
// and that node's MAC. The probes' interval (probeInterval) bounds what it
// adds. Packets of the failed node's after that first one do not count: a
// frozen node sends what it had queued once unfrozen, which may be within
// deathSlack. It fails the test if the failed node's last packet came more
// than lastSendSlack before faultAt: the traffic left the node before its
// fault.
func outageAfter(t testing.TB, packets []topology.Packet, addr, dest netip.Addr, failedMAC string, faultAt time.Time) (gap time.Duration, nextMAC string) {
	t.Helper()
	ours := func(p topology.Packet) bool { return p.Src == addr && p.Dst == dest }
	var next topology.Packet
	for _, p := range packets {
		if ours(p) && p.SrcMAC != failedMAC && p.Time.After(faultAt) {
			next = p
			break
		}
	}
	if next.Time.IsZero() {
		t.Fatalf("the capture holds no packet from %s to %s through another node than the failed one (%s) after its fault at %v", addr, dest, failedMAC, faultAt.Format(time.StampMilli))
	}
	var last time.Time
	for _, p := range packets {
		if ours(p) && p.SrcMAC == failedMAC && !p.Time.Before(faultAt.Add(-faultLookback)) && !p.Time.After(faultAt.Add(deathSlack)) && p.Time.Before(next.Time) {
			last = p.Time
		}
	}
	if last.IsZero() {
		t.Fatalf("the capture holds no packet from %s to %s through the failed node (%s) around its fault at %v, before the first through %s", addr, dest, failedMAC, faultAt.Format(time.StampMilli), next.SrcMAC)
	}
	if early := faultAt.Sub(last); early > lastSendSlack {
		t.Errorf("%s: the last packet through the failed node (%s) came %v before its fault: the traffic had left it while it was up", addr, failedMAC, early.Round(time.Millisecond))
	}
	return next.Time.Sub(last), next.SrcMAC
}

// outageThrough is outageAfter, and fails the test unless the packets
// after the outage came through nextMAC ("": any node's).
func outageThrough(t testing.TB, packets []topology.Packet, addr, dest netip.Addr, failedMAC, nextMAC string, faultAt time.Time) time.Duration {
	t.Helper()
	gap, next := outageAfter(t, packets, addr, dest, failedMAC, faultAt)
	if nextMAC != "" && next != nextMAC {
		t.Errorf("%s: the first packet after the outage came through %s, not %s", addr, next, nextMAC)
	}
	return gap
}

// nodeNamed is the node of that name.
func (c *Cluster) nodeNamed(name string) *Node {
	c.t.Helper()
	if i := slices.IndexFunc(c.Nodes, func(n *Node) bool { return n.Name == name }); i >= 0 {
		return c.Nodes[i]
	}
	c.t.Fatalf("no node %q", name)
	return nil
}

// externalIP is the external host's address of addr's family.
func (c *Cluster) externalIP(addr netip.Addr) netip.Addr {
	if addr.Is6() {
		return c.External.IP6
	}
	return c.External.IP
}

// lbOutage is the longer of the LB IPs' outages that the external host
// saw in packets (outageAfter) when the host failed at faultAt; the test
// fails unless the packets after it came through nextMAC ("": any).
func (s *egressScenario) lbOutage(t testing.TB, packets []topology.Packet, failedMAC, nextMAC string, faultAt time.Time) time.Duration {
	t.Helper()
	var worst time.Duration
	for _, lb := range lbIPs {
		worst = max(worst, outageThrough(t, packets, lb, s.c.externalIP(lb), failedMAC, nextMAC, faultAt))
	}
	return worst
}

// expectOutageWithin fails the test unless the LB IPs' outage after the
// host failed at faultAt (lbOutage) was within e2eFailoverBound and ended
// through the new host.
func (s *egressScenario) expectOutageWithin(t *testing.T, packets []topology.Packet, macs map[*Node]string, failed, next *Node, faultAt time.Time) {
	t.Helper()
	gap := s.lbOutage(t, packets, macs[failed], macs[next], faultAt)
	t.Logf("LB IPs: %v from the last packet through %s to the first through %s", gap.Round(time.Millisecond), failed.Name, next.Name)
	if gap > e2eFailoverBound {
		t.Errorf("LB IPs: no packet for %v after the host %s failed, want a new host within %v", gap, failed.Name, e2eFailoverBound)
	}
}
