//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/test/wait"
)

// referenceRouterName is the reference's egress router: the Deployment,
// its pods' label, and the redirect they serve.
const referenceRouterName = "reference-router"

// referenceFailoverTimeout bounds the wait for the reference's redirect
// after its node is killed: the node is marked unreachable after the node
// monitor's grace period (50 s), and its pods are evicted after the
// toleration the API server gives every pod (300 s), then rescheduled.
const referenceFailoverTimeout = 10 * time.Minute

// BenchmarkEgressRouterFailover (make bench-egressrouter): an EgressRouter's
// failover against the reference's, side by side on one cluster in Docker.
// The reference serves a router with one pod of a replicas-1 Deployment
// (testapp redirect: the reserved address on the node's network, nftables
// DNAT and SNAT, a gratuitous ARP at start); egressflow serves one from
// OpenFlow on a holder node. A client pod on the leading controller's node
// (never failed) sends a UDP datagram to port 80 of each reserved address
// every 50 ms; both redirect it to the external host's server, which
// records the source, the reserved address.
//
// Each round puts egressflow's router on the victim node and kills it
// (docker kill; it is started again and rejoins after the round), and
// times, for each reserved address, the outage the server saw in a capture:
// from the last datagram that came through the victim (its MAC) to the
// first that came through another node (the probe's 50 ms interval bounds
// what that adds). In the first BENCH_REFERENCE_ROUNDS rounds
// (default 3) the victim is the reference pod's node, so one kill measures
// both; in the others it is the third node and only egressflow is timed.
// The reference pod has the tolerations the API server gives every pod
// unless BENCH_REFERENCE_TOLERATION_SECONDS sets both (not-ready and
// unreachable) to that many seconds. -benchtime Nx gives N rounds.
func BenchmarkEgressRouterFailover(b *testing.B) {
	rounds := 0
	for b.Loop() { // the rounds are counted here and run below
		rounds++
	}
	referenceRounds := min(rounds, envInt(b, "BENCH_REFERENCE_ROUNDS", 3))
	c := Start(b, Config{Nodes: 3})
	c.Install()
	server := c.External.Serve(b)
	c.CreateNamespace(routerNamespace)
	leader := c.LeaderNode()
	ours := netip.MustParseAddr(fmt.Sprintf("172.31.%d.70", c.subnet))
	theirs := netip.MustParseAddr(fmt.Sprintf("172.31.%d.71", c.subnet))
	dest := netip.AddrPortFrom(c.External.IP, server.Addr.Port())
	c.startReferenceRouter(b, theirs, dest, leader)
	c.RunProbePod(routerNamespace, "client", leader, nil, netip.AddrPortFrom(ours, 80).String(), netip.AddrPortFrom(theirs, 80).String())
	var oursTook, theirsTook []time.Duration
	for round := range rounds {
		withReference := round < referenceRounds
		refNode := c.referenceRouterNode(b, nil, readyTimeout)
		victim := refNode
		if !withReference {
			victim = c.Nodes[slices.IndexFunc(c.Nodes, func(n *Node) bool { return n != leader && n != refNode })]
		}
		name := c.routerOn(b, routerNamespace, fmt.Sprintf("bench-%d", round), victim, udpRouter(ours, dest))
		serving := time.Now()
		awaitSeen(b, server, ours, serving, convergeTimeout)
		awaitSeen(b, server, theirs, serving, convergeTimeout)
		capture := c.captureFlowing(b, server, ours, theirs)
		victimMAC := c.bridgeMAC(victim)
		killedAt := time.Now()
		c.docker("kill", victim.Container)
		// Wait until both serve from elsewhere; the capture then tells
		// when the victim's last datagram and the new node's first came.
		holder := c.awaitRouterAvailable(b, routerNamespace, name, victim.Name)
		awaitSeen(b, server, ours, time.Now(), convergeTimeout)
		if withReference {
			refNode = c.referenceRouterNode(b, victim, referenceFailoverTimeout)
			awaitSeen(b, server, theirs, time.Now(), convergeTimeout)
		}
		packets := capture.Stop()
		oursTook = append(oursTook, outageThrough(b, packets, ours, dest.Addr(), victimMAC, c.bridgeMAC(c.nodeNamed(holder)), killedAt))
		b.Logf("round %d: %s killed: egressflow's redirect out for %v, then through %s (router %s)", round, victim.Name, oursTook[len(oursTook)-1].Round(time.Millisecond), holder, name)
		if withReference {
			theirsTook = append(theirsTook, outageThrough(b, packets, theirs, dest.Addr(), victimMAC, c.bridgeMAC(refNode), killedAt))
			b.Logf("round %d: the reference's redirect out for %v, then through %s", round, theirsTook[len(theirsTook)-1].Round(time.Millisecond), refNode.Name)
		}
		c.RestartNode(victim)
		c.waitAgentRenewing(victim)
		c.deleteRouter(b, routerNamespace, name)
	}
	report := func(who string, took []time.Duration) (p50, p99 time.Duration) {
		slices.Sort(took)
		p50, p99 = took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
		b.Logf("%s: docker kill of the router's node, %d rounds: the destination's outage (last datagram through the killed node -> first through the new one) p50 %v, p99 %v, max %v",
			who, len(took), p50.Round(time.Millisecond), p99.Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		b.ReportMetric(float64(p50.Milliseconds()), who+"-p50-ms")
		b.ReportMetric(float64(p99.Milliseconds()), who+"-p99-ms")
		return p50, p99
	}
	oursP50, oursP99 := report("egressflow", oursTook)
	if len(theirsTook) > 0 {
		theirsP50, theirsP99 := report("reference", theirsTook)
		b.Logf("egressflow's failover takes %.4fx the reference's at p50, %.4fx at p99", oursP50.Seconds()/theirsP50.Seconds(), oursP99.Seconds()/theirsP99.Seconds())
	}
}

// startReferenceRouter runs the reference's egress router for addr: a
// replicas-1 Deployment of testapp redirect that redirects UDP port 80 to
// dest, kept off the node avoid (the client's), and waits until its pod
// runs.
func (c *Cluster) startReferenceRouter(t testing.TB, addr netip.Addr, dest netip.AddrPort, avoid *Node) {
	t.Helper()
	labels := map[string]string{"app": referenceRouterName}
	pod := corev1.PodSpec{
		HostNetwork: true,
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{avoid.Name}},
			}}},
		}}},
		Containers: []corev1.Container{{
			Name: "redirect", Image: TestAppImage, ImagePullPolicy: corev1.PullNever,
			Command:         []string{"/testapp", "redirect", "--address", addr.String(), "udp/80=" + dest.String()},
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_CHROOT"}}},
			VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: "/host"}},
		}},
		Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
	}
	if os.Getenv("BENCH_REFERENCE_TOLERATION_SECONDS") != "" {
		seconds := int64(envInt(t, "BENCH_REFERENCE_TOLERATION_SECONDS", 0))
		for _, taint := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
			pod.Tolerations = append(pod.Tolerations, corev1.Toleration{Key: taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds})
		}
	}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: referenceRouterName, Namespace: routerNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
	if _, err := c.Kube.AppsV1().Deployments(routerNamespace).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.referenceRouterNode(t, nil, readyTimeout)
}

// referenceRouterNode waits up to timeout until a reference router pod
// runs, not being deleted, on a node other than notOn (nil: any), and
// returns its node.
func (c *Cluster) referenceRouterNode(t testing.TB, notOn *Node, timeout time.Duration) *Node {
	t.Helper()
	var node *Node
	wait.Until(t, timeout, func() error {
		pods, err := c.Kube.CoreV1().Pods(routerNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + referenceRouterName})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				if i := slices.IndexFunc(c.Nodes, func(n *Node) bool { return n.Name == p.Spec.NodeName && n != notOn }); i >= 0 {
					node = c.Nodes[i]
					return nil
				}
			}
		}
		return fmt.Errorf("no reference router pod running but on %v (%d pods)", notOn, len(pods.Items))
	})
	return node
}

// envInt reads the environment variable name as an integer, def when it
// is unset.
func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}
