//go:build e2e || demo

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	egressclient "github.com/egressflow/egressflow/controller/generated/clientset/versioned/typed/egressservice/v1"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// routeWindow is how long each look at the external host's capture lasts:
// a routed pod sends over a hundred datagrams per family in it (the plain
// pod about 30), each of a new flow, so that a select group over two
// gateways uses both.
const routeWindow = 1500 * time.Millisecond

// routeScenario is an AdminPolicyBasedExternalRoute on the cluster: two
// external gateways (StartGateway), a namespace er-routed (egress=gateways)
// with a probe pod on every node and another, er-plain, with one probe
// pod, all sending to the external host's server in both families; and
// the policy "gateways", which routes er-routed through both gateways'
// addresses of each family, with BFD. It returns once every node's BFD
// sessions to both gateways are up.
type routeScenario struct {
	gateways []*Gateway
	watch    *routeWatch
	routes   egressclient.AdminPolicyBasedExternalRouteInterface
	route    *esv1.AdminPolicyBasedExternalRoute
}

const routedNamespace, plainNamespace = "er-routed", "er-plain"

// routedProbe are the routed pods' probe flags: a datagram every 10 ms to
// each target, its answer waited for 10 ms at most, so that a datagram
// lost to a dead gateway holds the next one back by no more: the frames
// towards a gateway just killed (routeScenario.killGateway) come every few
// milliseconds until no node picks it any more.
var routedProbe = []string{"--interval=10ms", "--answer-timeout=10ms"}

func newRouteScenario(c *Cluster) *routeScenario {
	c.t.Helper()
	s := &routeScenario{gateways: []*Gateway{c.StartGateway(1), c.StartGateway(2)}}
	server := c.External.Serve(c.t)
	targets := []string{server.Addr.String(), server.Addr6.String()}
	c.CreateNamespace(routedNamespace)
	c.CreateNamespace(plainNamespace)
	c.labelNamespace(routedNamespace, map[string]string{"egress": "gateways"})
	s.watch = c.watchRoutes(s.gateways)
	for i, n := range c.Nodes {
		s.watch.routed(c.runProbePodWith(routedNamespace, fmt.Sprintf("routed-%d", i), n, nil, routedProbe, targets...))
	}
	s.watch.plain(c.RunProbePod(plainNamespace, "plain", c.Nodes[0], nil, targets...))
	s.routes = versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().AdminPolicyBasedExternalRoutes()
	var static []esv1.StaticHop
	for _, g := range s.gateways {
		static = append(static, esv1.StaticHop{IP: g.IP.String(), BFDEnabled: true}, esv1.StaticHop{IP: g.IP6.String(), BFDEnabled: true})
	}
	var err error
	s.route, err = s.routes.Create(context.Background(), &esv1.AdminPolicyBasedExternalRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "gateways"},
		Spec: esv1.AdminPolicyBasedExternalRouteSpec{
			From:     esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egress": "gateways"}}},
			NextHops: esv1.ExternalNextHops{StaticHops: static},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, g := range s.gateways {
		g.PeersUp() // every node has a routed pod: every node runs sessions to both
	}
	return s
}

// killGateway kills gateway i (docker kill) while the routed pods send,
// and returns how long after the kill the last routed frame any node sent
// towards it left, as the external host saw it: until a node takes the
// dead gateway out of its groups, the flows that pick it go to its MAC,
// which the network's bridge, having forgotten it with the container's
// port, floods past the external host. Zero: no such frame was seen.
func (s *routeScenario) killGateway(c *Cluster, i int) time.Duration {
	c.t.Helper()
	g := s.gateways[i]
	mac := g.MAC(c.t)
	capture := c.External.Capture(c.t)
	killed := time.Now()
	g.Kill()
	time.Sleep(2 * time.Second)
	var last time.Time
	for _, p := range capture.Stop() {
		if s.watch.routedPods[p.Src] != "" && p.DstMAC == mac && p.Time.After(last) {
			last = p.Time
		}
	}
	if last.IsZero() {
		return 0
	}
	return last.Sub(killed)
}

// routeWatch tells, from the external host's capture, which gateway each
// routed pod's packets came through (by their source MAC), and whether
// the plain pods' packets came directly.
type routeWatch struct {
	c          *Cluster
	gwByMAC    map[string]string
	routedPods map[netip.Addr]string
	plainPods  map[netip.Addr]bool
}

// watchRoutes watches the routes through gateways.
func (c *Cluster) watchRoutes(gateways []*Gateway) *routeWatch {
	w := &routeWatch{c: c, gwByMAC: map[string]string{}, routedPods: map[netip.Addr]string{}, plainPods: map[netip.Addr]bool{}}
	for _, g := range gateways {
		w.gwByMAC[g.MAC(c.t)] = g.Name
	}
	return w
}

// routed adds a pod whose egress the external routes select; plain, one
// they do not.
func (w *routeWatch) routed(pod *corev1.Pod) {
	for _, ip := range podIPs(pod) {
		w.routedPods[netip.MustParseAddr(ip)] = pod.Name
	}
}

func (w *routeWatch) plain(pod *corev1.Pod) {
	for _, ip := range podIPs(pod) {
		w.plainPods[netip.MustParseAddr(ip)] = true
	}
}

// look captures one window on the external host.
func (w *routeWatch) look(window time.Duration) routeLook {
	capture := w.c.External.Capture(w.c.t)
	time.Sleep(window)
	l := routeLook{via: map[netip.Addr]map[string]int{}}
	for _, p := range capture.Stop() {
		gw, viaGateway := w.gwByMAC[p.SrcMAC]
		switch {
		case w.routedPods[p.Src] != "" && viaGateway:
			if l.via[p.Src] == nil {
				l.via[p.Src] = map[string]int{}
			}
			l.via[p.Src][gw]++
		case w.routedPods[p.Src] != "" && w.gwByMAC[p.DstMAC] != "":
			l.towardGateway++
		case w.routedPods[p.Src] != "":
			l.leaked = append(l.leaked, p)
		case w.plainPods[p.Src] && viaGateway:
			l.plainViaGateway++
		case w.plainPods[p.Src]:
			l.plainDirect++
		}
	}
	return l
}

// routeLook is what one window of the external host's capture shows of
// the routed pods' and the plain pod's packets.
type routeLook struct {
	// via counts the routed pods' packets by pod address and by the
	// gateway they came through (its name).
	via map[netip.Addr]map[string]int
	// leaked are routed pods' packets that came through no gateway and
	// were not on their way to one either.
	leaked []topology.Packet
	// towardGateway counts routed pods' frames addressed to a gateway
	// that the network's bridge flooded past the external host: sent to a
	// gateway whose container is gone (its MAC no longer learnt) before
	// the node's BFD session noticed.
	towardGateway int
	// plainDirect and plainViaGateway count the plain pod's packets.
	plainDirect, plainViaGateway int
}

// gatewaysUsed are the gateways that carried some routed packet of the
// family of v6.
func (l routeLook) gatewaysUsed(v6 bool) []string {
	var out []string
	for addr, byGW := range l.via {
		if addr.Is6() != v6 {
			continue
		}
		for gw := range byGW {
			if !slices.Contains(out, gw) {
				out = append(out, gw)
			}
		}
	}
	slices.Sort(out)
	return out
}

// setPodCondition sets the pod's condition typ (a readiness gate's) to
// True or False in its status, as the controller a gate names would, and
// waits until the kubelet has made the pod Ready or not Ready accordingly.
func (c *Cluster) setPodCondition(namespace, name, typ string, value bool) {
	c.t.Helper()
	ctx := context.Background()
	pods := c.Kube.CoreV1().Pods(namespace)
	want := corev1.ConditionFalse
	if value {
		want = corev1.ConditionTrue
	}
	wait.Until(c.t, convergeTimeout, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conditions := pod.Status.Conditions
		i := slices.IndexFunc(conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodConditionType(typ) })
		if i < 0 {
			conditions = append(conditions, corev1.PodCondition{Type: corev1.PodConditionType(typ)})
			i = len(conditions) - 1
		}
		if conditions[i].Status != want {
			conditions[i].Status, conditions[i].LastTransitionTime = want, metav1.Now()
			pod.Status.Conditions = conditions
			if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
				return err
			}
			return fmt.Errorf("condition %s written %s", typ, want)
		}
		if ready := slices.IndexFunc(conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == want
		}); ready < 0 {
			return fmt.Errorf("pod Ready is not %s yet", want)
		}
		return nil
	})
}

// expectEvent waits for an Event of type and reason about the object of
// kind named name in namespace ns.
func (c *Cluster) expectEvent(ns, kind, name, eventType, reason string) {
	c.t.Helper()
	wait.Until(c.t, convergeTimeout, func() error {
		events, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fmt.Sprintf("involvedObject.kind=%s,involvedObject.name=%s,reason=%s,type=%s", kind, name, reason, eventType)})
		if err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return fmt.Errorf("no %s Event %s about %s %s", eventType, reason, kind, name)
		}
		return nil
	})
}
