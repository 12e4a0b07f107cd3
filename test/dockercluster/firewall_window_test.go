//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dnsresolve/dnstest"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// windowLookups is how many lookups each phase of the window test makes
// (issue 34, item 5).
const windowLookups = 1000

// windowPool is how many addresses each phase's name rotates over: more
// than its lookups, with room for the agent's own lookups of an exact
// name and the pod's retries, so that every answer the pod acts on is an
// address it was never given before.
const windowPool = 2048

// windowTTL is the TTL of the rotating answers: longer than a phase, so
// that no address a phase taught expires (and leaves the bridge) during
// it.
const windowTTL = 300

// windowNamespace holds the window test's pods and its EgressFirewall.
const windowNamespace = "window"

// windowPhaseTimeout bounds one phase's lookups: seconds when held, a few
// more across an agent restart; the rest is slack for a loaded machine.
const windowPhaseTimeout = 3 * time.Minute

// windowResult is what one phase of the window test saw.
type windowResult struct {
	reached int           // packets to a denied address the external host received
	denied  int64         // how much the counters of the namespace's Deny flows on the pod's node rose (less any flows removed)
	summary string        // testapp dnswindow's summary line
	took    time.Duration // from the pod's go to the end of its lookups
	retries int
	sent    int
	leaks   []string // the first packets that reached a denied address
}

// noDNSWindow is issue 34's window test on the cluster in Docker,
// run by TestEgressFirewall on its cluster and DNS server: a name whose
// answer is a new address at every query, denied by the pod's
// namespace's EgressFirewall, and a pod (testapp dnswindow) that sends a
// UDP datagram to each answer the moment it arrives, windowLookups times.
// The external host, to which the nodes route every address of the pools,
// must receive none of those datagrams: for an exact name, for a wildcard,
// over TCP (a connection per lookup), and with the pod's node's agent deleted (as a rolling update does)
// while the lookups run, whose replies paused while no agent was there are
// lost and asked again. Then, for comparison, the same lookups with the
// node's snoop flows turned to copying (the agent before the hold): that
// count is logged, not judged.
//
// Last, the same through a resolver pod on the pod's own node (testapp
// dnsforward), whose answers reach the pod without crossing br-ex: held,
// then, for comparison, with the resolver's snoop flows removed.
func noDNSWindow(t *testing.T, c *Cluster, dns *dnstest.Server) {
	ctx := context.Background()
	node := c.Nodes[len(c.Nodes)-1]
	c.CreateNamespace(windowNamespace)
	// Each phase's answers come from a /21 of 198.18.0.0/16 (RFC 2544's
	// benchmarking range), which the pod's node routes to the external
	// host: its capture sees whatever reaches any of them.
	const pools = "198.18.0.0/16"
	c.Exec(node, "ip", "route", "replace", pools, "via", c.External.IP.String())
	t.Cleanup(func() { _, _ = run("docker", "exec", node.Container, "ip", "route", "del", pools) })
	pool := func(phase int) []netip.Addr {
		a := netip.AddrFrom4([4]byte{198, 18, byte(8 * phase), 0})
		out := make([]netip.Addr, windowPool)
		for i := range out {
			out[i] = a
			a = a.Next()
		}
		return out
	}
	rotate := func(name string, addrs []netip.Addr) {
		records := make([]dnstest.Record, 0, len(addrs)+1)
		for _, a := range addrs {
			records = append(records, dnstest.A(a.String(), windowTTL))
		}
		dns.Set(name, append(records, dnstest.RoundRobin(1))...)
	}
	const (
		exact, wildcard, wildName = "exact.test", "*.window.test", "a.window.test"
		restart, copied           = "restart.test", "copied.test"
		viaResolver, unlearned    = "resolver.test", "unlearned.test"
		overTCP                   = "tcp.test"
	)
	firewalls := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressFirewalls(windowNamespace)
	deny := func(name string) esv1.EgressFirewallRule {
		return esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{DNSName: name}}
	}
	if _, err := firewalls.Create(ctx, &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{deny(exact), deny(wildcard), deny(restart), deny(copied), deny(viaResolver), deny(unlearned), deny(overTCP)}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantSummary := fmt.Sprintf("Applied on %d/%d nodes", len(c.Nodes), len(c.Nodes))
	wait.Until(t, convergeTimeout, func() error {
		got, err := firewalls.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Messages) == 0 || got.Status.Messages[0] != wantSummary {
			return fmt.Errorf("%s's EgressFirewall: messages %q, want %q", windowNamespace, got.Status.Messages, wantSummary)
		}
		return nil
	})
	key := dataplane.ObjectKey(dataplane.APIEgressFirewall, windowNamespace, esv1.EgressFirewallName)
	externalMAC := c.ExternalMAC()

	// phase runs one pod's lookups of name at server, whose answers rotate
	// over addrs: prepare runs once the pod's DNS replies are snooped on
	// its node, during once its lookups have begun; flags go to testapp
	// dnswindow.
	external := netip.AddrPortFrom(c.DNSAddr, 53)
	phase := func(index int, label string, server netip.AddrPort, name string, addrs []netip.Addr, attempts int, prepare func(pod *corev1.Pod), during func(pod *corev1.Pod), flags ...string) windowResult {
		t.Helper()
		rotate(name, addrs)
		gate := fmt.Sprintf("go%d.gate.test", index)
		args := append([]string{"--go=" + gate, "--linger=10m", "--timeout=500ms", fmt.Sprintf("--attempts=%d", attempts)}, flags...)
		pod := c.runWindowPod(fmt.Sprintf("window-%d", index), node,
			append(args, server.String(), name, strconv.Itoa(windowLookups), "9")...)
		defer func() {
			_ = c.Kube.CoreV1().Pods(windowNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}()
		// The pod's replies are paused (or copied) once its snoop flow is
		// in its node's bridge: its lookups begin after that.
		wait.Until(t, convergeTimeout, func() error {
			flows := c.nodeFlows(node, dataplane.TableClassify, dataplane.Cookie(dataplane.KindFirewallSnoop, key))
			if !strings.Contains(flows, "nw_dst="+podIPs(pod)[0]+",") {
				return fmt.Errorf("no snoop flow for %s on %s:\n%s", podIPs(pod)[0], node.Name, flows)
			}
			return nil
		})
		if prepare != nil {
			prepare(pod)
		}
		denied := map[netip.Addr]bool{}
		for _, a := range addrs {
			denied[a] = true
		}
		dropsBefore := c.deniedPackets(node, key)
		capture := c.External.Capture(t)
		dns.Set(gate, dnstest.A("192.0.2.1", 5))
		if during != nil {
			during(pod)
		}
		// The pod stays once its lookups are done (--linger): a pod that
		// ended would take its flows, and their counters, with it.
		var log string
		wait.UntilEvery(t, windowPhaseTimeout, 200*time.Millisecond, func() error {
			log = c.podLog(pod)
			if strings.Contains(log, "dnswindow summary ") {
				return nil
			}
			p, err := c.Kube.CoreV1().Pods(windowNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err == nil && p.Status.Phase != corev1.PodRunning {
				t.Fatalf("%s: pod %s %s before its summary:\n%s", label, pod.Name, p.Status.Phase, log)
			}
			return fmt.Errorf("%s: no summary in %s's log yet", label, pod.Name)
		})
		time.Sleep(300 * time.Millisecond) // the last datagrams' way to the capture
		packets := capture.Stop()
		// The flows' counters reach the dump within a revalidation or two.
		r := windowResult{}
		for polled := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			r.denied = int64(c.deniedPackets(node, key)) - int64(dropsBefore)
			if r.denied >= windowLookups || time.Since(polled) > 3*time.Second {
				break
			}
		}
		for _, p := range packets {
			if denied[p.Dst] && p.DstMAC == externalMAC {
				r.reached++
				if r.reached <= 5 {
					r.leaks = append(r.leaks, p.String())
				}
			}
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.HasPrefix(line, "dnswindow summary ") {
				r.summary = line
			}
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(r.summary) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		r.sent, _ = strconv.Atoi(fields["sent"])
		r.retries, _ = strconv.Atoi(fields["retries"])
		r.took, _ = time.ParseDuration(fields["elapsed"])
		if r.sent != windowLookups {
			t.Errorf("%s: %d of %d lookups answered and acted on:\n%s", label, r.sent, windowLookups, log)
		}
		t.Logf("window %s: %d lookups of %s, %d datagrams sent to their answers, %d reached a denied address (Deny flows' counters +%d); %s",
			label, windowLookups, name, r.sent, r.reached, r.denied, strings.TrimPrefix(r.summary, "dnswindow summary "))
		if len(r.leaks) > 0 {
			t.Logf("window %s: the first packets to a denied address at the external host:\n%s", label, strings.Join(r.leaks, "\n"))
		}
		return r
	}
	const attempts = 4
	held := func(index int, label string, server netip.AddrPort, name string, addrs []netip.Addr, prepare func(pod *corev1.Pod), flags ...string) {
		t.Helper()
		r := phase(index, label, server, name, addrs, attempts, prepare, nil, flags...)
		if r.reached != 0 {
			t.Errorf("window %s: %d packets reached a denied address; want 0", label, r.reached)
		}
		// Not vacuous: every datagram the pod sent was judged by a Deny
		// flow of its namespace. (The counters can say more than was
		// dropped, never less: OVS credits a datapath flow's packets to
		// the rules of its latest translation, so packets that went out
		// before a Deny flow came count for it once it is there, as the
		// copied phase's figure shows.)
		if r.denied < int64(r.sent) {
			t.Errorf("window %s: the Deny flows counted %d packets; want at least the %d datagrams sent", label, r.denied, r.sent)
		}
	}
	held(0, "held, exact name", external, exact, pool(0), nil)
	held(1, "held, wildcard", external, wildName, pool(1), nil)
	held(6, "held, over TCP", external, overTCP, pool(6), nil, "--tcp")

	// Across a restart: the node's agent is deleted as a rolling update
	// deletes it, once the lookups are under way. Replies paused while no
	// agent is there are lost (--dns-replies-while-away=hold); the pod
	// asks again every 500 ms, for up to a minute, until the new agent
	// resumes them.
	var deleted time.Time
	lastWords := make(chan string, 1)
	restarted := phase(2, "held, across an agent restart", external, restart, pool(2), 120, nil, func(pod *corev1.Pod) {
		wait.UntilEvery(t, windowPhaseTimeout, 50*time.Millisecond, func() error {
			if !strings.Contains(c.podLog(pod), "dnswindow progress lookups=") {
				return fmt.Errorf("the pod's lookups have not reached 100")
			}
			return nil
		})
		agents, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=egressflow-agent", FieldSelector: "spec.nodeName=" + node.Name})
		if err != nil || len(agents.Items) != 1 {
			t.Fatalf("the agent of %s: %v, %d pods", node.Name, err, len(agents.Items))
		}
		// Its last words, for the log.
		since := int64(5)
		stream, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).GetLogs(agents.Items[0].Name,
			&corev1.PodLogOptions{Follow: true, SinceSeconds: &since}).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer stream.Close()
			raw, _ := io.ReadAll(stream)
			lastWords <- string(raw)
		}()
		if err := c.Kube.CoreV1().Pods(c.InstallNamespace()).Delete(ctx, agents.Items[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted = time.Now()
		if strings.Contains(c.podLog(pod), "dnswindow summary") {
			t.Errorf("window across a restart: the lookups ended before the agent was deleted")
		}
	})
	t.Logf("window: the agent of %s deleted at %s", node.Name, deleted.Format("15:04:05.000000"))
	if restarted.reached != 0 {
		t.Errorf("window held, across an agent restart: %d packets reached a denied address; want 0", restarted.reached)
	}
	select {
	case words := <-lastWords:
		var dnsLines []string
		for _, line := range strings.Split(words, "\n") {
			if strings.Contains(line, "DNS repl") {
				dnsLines = append(dnsLines, line)
			}
		}
		t.Logf("window: the deleted agent's last words on DNS replies (%d lines):\n%s", len(dnsLines), strings.Join(dnsLines, "\n"))
	case <-time.After(5 * time.Second):
		t.Logf("window: the deleted agent's log did not end within 5 s")
	}
	if restarted.retries == 0 {
		t.Errorf("window held, across an agent restart: no lookup was asked again; the lookups did not span the agent's absence")
	}
	c.WaitInstalled()
	t.Logf("window: the agent of %s deleted during the lookups; its successor Ready %v later", node.Name, time.Since(deleted).Round(100*time.Millisecond))

	// For comparison: the node's snoop flows copying the replies and
	// letting them go on at once, as the agent did before the hold.
	phase(3, "copied (no hold), exact name", external, copied, pool(3), attempts, func(pod *corev1.Pod) {
		for _, fm := range dataplane.SnoopCopyingFlowMods() {
			text, ok := strings.CutPrefix(fm.String(), "modify ")
			if !ok {
				t.Fatalf("SnoopCopyingFlowMods: %q is not a modify", fm.String())
			}
			c.Exec(node, "ovs-ofctl", "-O", "OpenFlow15", "mod-flows", "br-ex", text)
		}
		flows := c.nodeFlows(node, dataplane.TableClassify, dataplane.Cookie(dataplane.KindFirewallSnoop, key))
		if strings.Contains(flows, "pause") || !strings.Contains(flows, "CONTROLLER:65535,NORMAL") {
			t.Fatalf("the snoop flows of %s still hold the replies:\n%s", windowNamespace, flows)
		}
	}, nil)

	// A resolver on the pod's own node, as CoreDNS with its forward plugin
	// (and no cache): its answers reach the pod through the node's pod
	// bridge, never through br-ex; its own upstream's replies cross br-ex,
	// and are snooped and held as the resolver pod's (the agent's default
	// --dns-resolver-pods selects it). After the copied phase the node's
	// namespace snoop flows copy; the resolver's are the agent's own, and
	// the pod's are not on the replies' way.
	resolver := c.runResolverPod(node, external)
	resolverAddr := netip.AddrPortFrom(netip.MustParseAddr(podIPs(resolver)[0]), 53)
	resolverSnooped := func(pod *corev1.Pod) {
		wait.Until(t, convergeTimeout, func() error {
			flows := c.nodeFlows(node, dataplane.TableClassify, dataplane.Cookie(dataplane.KindFirewallSnoop, ""))
			if !strings.Contains(flows, "nw_dst="+resolverAddr.Addr().String()+",") || !strings.Contains(flows, "pause") {
				return fmt.Errorf("no holding snoop flow for the resolver %s on %s:\n%s", resolverAddr.Addr(), node.Name, flows)
			}
			return nil
		})
	}
	held(4, "held, resolver on the pod's own node", resolverAddr, viaResolver, pool(4), resolverSnooped)
	// For comparison: the same without the resolver's snoop flows (the
	// agent before it learned the resolvers' replies).
	phase(5, "resolver on the pod's own node, its replies not learned", resolverAddr, unlearned, pool(5), attempts, func(pod *corev1.Pod) {
		resolverSnooped(pod)
		c.Exec(node, "ovs-ofctl", "-O", "OpenFlow15", "del-flows", "br-ex",
			fmt.Sprintf("table=%d,cookie=0x%x/-1", dataplane.TableClassify, dataplane.Cookie(dataplane.KindFirewallSnoop, "")))
	}, nil)
}

// runResolverPod runs testapp dnsforward, forwarding to upstream, as a
// resolver pod of the cluster (kube-system, k8s-app=kube-dns) on node, and
// returns it once it takes queries.
func (c *Cluster) runResolverPod(node *Node, upstream netip.AddrPort) *corev1.Pod {
	c.t.Helper()
	const namespace, name = "kube-system", "window-resolver"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "dnsforward", Image: TestAppImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/testapp", "dnsforward"}, Args: []string{upstream.String()},
			}},
		},
	}
	c.t.Cleanup(func() {
		_ = c.Kube.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return c.runPod(pod, 1, func(p *corev1.Pod) error {
		if !strings.Contains(c.podLog(p), "dnsforward listening") {
			return fmt.Errorf("resolver pod %s does not take queries yet", p.Name)
		}
		return nil
	})
}

// runWindowPod runs testapp dnswindow with args in a pod of the window
// namespace on node, and returns it once it runs, with its addresses.
func (c *Cluster) runWindowPod(name string, node *Node, args ...string) *corev1.Pod {
	c.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: windowNamespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "dnswindow", Image: TestAppImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/testapp", "dnswindow"}, Args: args,
			}},
		},
	}
	return c.runPod(pod, 1, nil)
}

// podLog is pod's whole log ("" when it cannot be read).
func (c *Cluster) podLog(pod *corev1.Pod) string {
	raw, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return ""
	}
	return string(raw)
}

// nodeFlows are the flows of table with exactly cookie in node's br-ex,
// as ovs-ofctl dumps them.
func (c *Cluster) nodeFlows(node *Node, table uint8, cookie uint64) string {
	c.t.Helper()
	return c.Exec(node, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex", fmt.Sprintf("table=%d,cookie=0x%x/-1", table, cookie))
}

var nPackets = regexp.MustCompile(`n_packets=(\d+)`)

// deniedPackets sums the packet counters of the Deny flows of the
// EgressFirewall with key in node's bridge.
func (c *Cluster) deniedPackets(node *Node, key string) uint64 {
	c.t.Helper()
	var sum uint64
	for _, m := range nPackets.FindAllStringSubmatch(c.nodeFlows(node, dataplane.TableFirewall, dataplane.Cookie(dataplane.KindFirewallDeny, key)), -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		sum += n
	}
	return sum
}
