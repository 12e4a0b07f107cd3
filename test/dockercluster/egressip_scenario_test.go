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
	"k8s.io/apimachinery/pkg/types"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// egressAssignable is the label that makes a node an egress node.
const egressAssignable = "k8s.ovn.org/egress-assignable"

// egressIPs are the EgressIP addresses of the tests and the demo: on the
// cluster's segment, where the external host resolves them.
func (c *Cluster) egressIPs() [2]netip.Addr {
	return [2]netip.Addr{netip.MustParseAddr(fmt.Sprintf("172.31.%d.50", c.subnet)), netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::50", c.subnet))}
}

// secondEgressIP4 is another IPv4 address of the segment for the EgressIP
// tests, beside egressIPs'.
func (c *Cluster) secondEgressIP4() netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("172.31.%d.51", c.subnet))
}

// expectSpread waits until probe pod's log shows, since since, target
// seeing each of want as the pod's source (a probe's datagrams are a new
// flow each), and no other.
func (c *Cluster) expectSpread(pod *corev1.Pod, target string, since time.Time, want ...netip.Addr) {
	c.t.Helper()
	wait.Until(c.t, convergeTimeout, func() error {
		tail := int64(400)
		raw, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background())
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, line := range strings.Split(string(raw), "\n") {
			words := strings.Fields(line)
			if len(words) < 3 || words[1] != "target="+target {
				continue
			}
			if at, err := time.Parse(time.RFC3339Nano, words[0]); err != nil || !at.After(since) {
				continue
			}
			if source, ok := strings.CutPrefix(words[2], "source="); ok && source != "" {
				seen[source]++
			}
		}
		var wanted []string
		for _, a := range want {
			wanted = append(wanted, a.String())
		}
		for _, w := range wanted {
			if seen[w] == 0 {
				return fmt.Errorf("%s to %s seen as %v since %v, want each of %v", pod.Name, target, seen, since.Format(time.StampMilli), wanted)
			}
		}
		for source := range seen {
			if !slices.Contains(wanted, source) {
				return fmt.Errorf("%s to %s seen as %s since %v, not one of %v", pod.Name, target, source, since.Format(time.StampMilli), wanted)
			}
		}
		return nil
	})
}

// expectKeptFlows waits until probe pod's log shows, for each of its
// flows flows to target (RunKeptFlowsProbePod), a line logged since since,
// and fails unless the last of each says want.
func (c *Cluster) expectKeptFlows(pod *corev1.Pod, target string, flows int, since time.Time, want netip.Addr) {
	c.t.Helper()
	var last map[string]string
	wait.Until(c.t, convergeTimeout, func() error {
		tail := int64(100 * flows)
		raw, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background())
		if err != nil {
			return err
		}
		last = map[string]string{}
		for _, line := range strings.Split(string(raw), "\n") {
			words := strings.Fields(line)
			if len(words) < 3 || words[1] != "target="+target {
				continue
			}
			if at, err := time.Parse(time.RFC3339Nano, words[0]); err != nil || !at.After(since) {
				continue
			}
			if flow := words[len(words)-1]; strings.HasPrefix(flow, "flow=") {
				last[flow], _ = strings.CutPrefix(words[2], "source=")
			}
		}
		if len(last) < flows {
			return fmt.Errorf("%s: %d of %d flows to %s logged since %v", pod.Name, len(last), flows, target, since.Format(time.StampMilli))
		}
		return nil
	})
	for flow, source := range last {
		if source != want.String() {
			c.t.Errorf("%s's %s to %s seen as %q, want %s: the flow did not keep its address", pod.Name, flow, target, source, want)
		}
	}
}

// labelEgressNode adds (on) or removes the egress-assignable label of n.
func (c *Cluster) labelEgressNode(t testing.TB, n *Node, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, egressAssignable)
	if !on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, egressAssignable)
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createEgressIPNamespace creates namespace ns labelled team=billing with
// a probe pod labelled app=web on each node, sending to targets.
func (c *Cluster) createEgressIPNamespace(t testing.TB, ns string, targets []string) []*corev1.Pod {
	c.CreateNamespace(ns)
	c.labelNamespace(ns, map[string]string{"team": "billing"})
	var pods []*corev1.Pod
	for i, n := range c.Nodes {
		pods = append(pods, c.RunProbePod(ns, fmt.Sprintf("api-%d", i+1), n, map[string]string{"app": "web"}, targets...))
	}
	return pods
}

// createEgressIP creates the EgressIP billing with c.egressIPs(),
// selecting the pods labelled app=web of namespaces labelled team=billing.
func (c *Cluster) createEgressIP(t testing.TB) {
	addrs := c.egressIPs()
	eips := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressIPs()
	_, err := eips.Create(context.Background(), &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "billing"}, Spec: esv1.EgressIPSpec{
		EgressIPs:         []string{addrs[0].String(), addrs[1].String()},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}},
		PodSelector:       esv1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// bridgeMAC is node n's br-ex MAC, as its neighbours learn it.
func (c *Cluster) bridgeMAC(n *Node) string {
	return strings.TrimSpace(c.Exec(n, "cat", "/sys/class/net/br-ex/address"))
}

// bridgeMACs are every node's bridgeMAC, read before a fault: a failed
// node cannot be asked.
func (c *Cluster) bridgeMACs() map[*Node]string {
	macs := map[*Node]string{}
	for _, n := range c.Nodes {
		macs[n] = c.bridgeMAC(n)
	}
	return macs
}

// externalNeighbour is the MAC the external host's neighbour table has
// for addr ("" without an entry).
func (c *Cluster) externalNeighbour(addr netip.Addr) string {
	out := c.External.Exec(c.t, "ip", "neigh", "show", addr.String())
	if f := strings.Fields(out); len(f) >= 5 && f[3] == "lladdr" {
		return f[4]
	}
	return ""
}
