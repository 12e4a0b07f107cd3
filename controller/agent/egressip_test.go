package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
)

// Egress IPs of the tests: on the underlay segment, where the external
// host resolves them by ARP and neighbour discovery.
var (
	egressIP4  = netip.MustParseAddr("172.18.0.50")
	egressIP6  = netip.MustParseAddr("fd00:172:18::50")
	egressIP4b = netip.MustParseAddr("172.18.0.51")
)

// setEgressIP creates or updates the EgressIP name with spec and, as the
// cluster component would, status.items holding each address on a node
// (holders: address → node name; absent: unheld).
func (e *env) setEgressIP(name string, spec esv1.EgressIPSpec, holders map[netip.Addr]string) {
	e.t.Helper()
	ctx := context.Background()
	status := esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{}}
	for _, s := range spec.EgressIPs {
		if n, ok := holders[netip.MustParseAddr(s)]; ok {
			status.Items = append(status.Items, esv1.EgressIPStatusItem{EgressIP: s, Node: n})
		}
	}
	eips := e.admin.ES.K8sV1().EgressIPs()
	current, err := eips.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if _, err := eips.Create(ctx, &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec, Status: status}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	current.Spec, current.Status = spec, status
	if _, err := eips.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// labelNamespace sets namespace shop's labels.
func (e *env) labelNamespace(labels map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	ns, err := e.admin.Kube.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ns.Labels = labels
	if _, err := e.admin.Kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// relabelPod sets a pod's labels in namespace shop.
func (e *env) relabelPod(pod *topology.Pod, labels map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	p, err := e.admin.Kube.CoreV1().Pods("shop").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	p.Labels = labels
	if _, err := e.admin.Kube.CoreV1().Pods("shop").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// externalNeighbour is the MAC the external host's neighbour table has for
// addr ("" without an entry).
func (e *env) externalNeighbour(addr netip.Addr) string {
	out := e.topo.External.Exec(e.t, "ip", "neigh", "show", addr.String())
	if f := strings.Fields(out); len(f) >= 5 && f[3] == "lladdr" {
		return f[4]
	}
	return ""
}

// TestAgentEgressIP moves real packets through two nodes with agents: the
// EgressIP billing (172.18.0.50 held by n1, fd00:172:18::50 by n2) selects
// the pods labelled app=web of namespaces labelled team=billing. It checks
// that a selected pod on each node leaves with the address of each family
// (SNATed on the holder, steered there from the other node), replies
// reach it, and an unselected pod keeps its IP; that the external host
// learns each address's holder from the holder's own answers, and moves to
// the new holder when the address moves without sending it anything (the
// takeover's announcement); that with no holder the pods' egress is
// dropped, never sent with their pod IPs; that pod and namespace labels
// take and release pods; that an older EgressIP keeps a pod a newer one
// also selects; that an EgressService endpoint leaves with its LB IP; and
// that deleting the object leaves no EgressIP flow. A capture on the
// external host, from when both pods first leave with the egress IPs,
// sees no packet from a selected pod's IP while it is selected.
// podRequest is what one request for pods asked the API server.
type podRequest struct {
	Namespace, LabelSelector, FieldSelector string
	Watch                                   bool
}

// podRequests records an agent's requests for pods.
type podRequests struct {
	mu   sync.Mutex
	seen []podRequest
}

// client is a Kubernetes client of cfg that records its pod requests in r.
func (r *podRequests) client(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if path := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); path[len(path)-1] == "pods" {
				q := req.URL.Query()
				seen := podRequest{LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector"), Watch: q.Get("watch") == "true"}
				if i := slices.Index(path, "namespaces"); i >= 0 && i+1 < len(path) {
					seen.Namespace = path[i+1]
				}
				r.mu.Lock()
				r.seen = append(r.seen, seen)
				r.mu.Unlock()
			}
			return next.RoundTrip(req)
		})
	})
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// all returns the distinct requests so far.
func (r *podRequests) all() []podRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []podRequest
	for _, s := range r.seen {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestAgentEgressIP(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	web := map[string]string{"app": "web"}
	a, b := e.addLabelledPod(n1, "a", web), e.addLabelledPod(n2, "b", web)
	other := e.addLabelledPod(n2, "other", map[string]string{"app": "other"})
	// The agents record Events as their main has them do.
	scheme := runtime.NewScheme()
	_ = kubescheme.AddToScheme(scheme)
	_ = esv1.AddToScheme(scheme)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// What each agent asks the API server about pods.
	asked := map[string]*podRequests{}
	for _, n := range e.topo.Nodes {
		emitter := events.New(e.agentKube.CoreV1(), scheme, events.Options{Component: "egressflow-agent", Host: n.Name, QPS: 10, Burst: 10})
		go emitter.Run(ctx)
		asked[n.Name] = &podRequests{}
		kube := asked[n.Name].client(t, e.admin.Cluster.Config(kubetest.Agent))
		e.startAgent(n, func(c *Config) { c.Recorder = emitter; c.Kube = kube }).waitHealthy(t)
	}
	e.labelNamespace(map[string]string{"team": "billing"})
	spec := esv1.EgressIPSpec{
		EgressIPs:         []string{egressIP4.String(), egressIP6.String()},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}},
		PodSelector:       esv1.LabelSelector{MatchLabels: web},
	}
	e.setEgressIP("billing", spec, map[netip.Addr]string{egressIP4: n1.Name, egressIP6: n2.Name})
	// Until the agents have seen the new EgressIP, its pods still leave
	// with their own addresses, as before it existed: the capture that
	// must see none starts once both leave with both egress IPs.
	for _, p := range []*topology.Pod{a, b} {
		e.expectSource(p, "udp", egressIP4)
		e.expectSource(p, "udp", egressIP6)
	}

	capture := e.topo.External.Capture(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, p := range []*topology.Pod{a, b} {
			e.expectSource(p, network, egressIP4)
			e.expectSource(p, network, egressIP6)
		}
		e.expectSource(other, network, other.IP)
		e.expectSource(other, network, other.IP6)
	}
	if err := b.Ping(e.topo.External.IP, 1); err != nil {
		t.Errorf("ICMP from b, steered to n1: %v", err)
	}
	// The holders answered for their addresses with their bridge MACs.
	if got, want := e.externalNeighbour(egressIP4), n1.BridgeMAC(t); got != want {
		t.Errorf("external host's neighbour entry for %s: %q, want n1's bridge MAC %s", egressIP4, got, want)
	}
	if got, want := e.externalNeighbour(egressIP6), n2.BridgeMAC(t); got != want {
		t.Errorf("external host's neighbour entry for %s: %q, want n2's bridge MAC %s", egressIP6, got, want)
	}
	// Pod to pod stays inside the cluster.
	if err := a.Ping(b.IP, 1); err != nil {
		t.Errorf("pod to pod: %v", err)
	}

	// n1 holds the SNAT of a's and b's IPv4 connections.
	// (TCP and UDP: enough to see the flush.)
	snatEntries := func(n *topology.Node, pod *topology.Pod) int {
		dump := n.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", conntrack.SNATZone))
		count := 0
		for _, line := range strings.Split(dump, "\n") {
			if (strings.HasPrefix(line, "tcp,") || strings.HasPrefix(line, "udp,")) && strings.Contains(line, "src="+pod.IP.String()+",") {
				count++
			}
		}
		return count
	}
	for _, p := range []*topology.Pod{a, b} {
		if snatEntries(n1, p) == 0 {
			t.Fatalf("no SNAT zone entry of %s on n1 before the move", p.Name)
		}
	}

	// The IPv4 address moves to n2. The external host sends nothing to it
	// meanwhile: only n2's announcement can move its neighbour entry, long
	// before the entry would be probed again (it is fresh).
	moved := time.Now()
	e.setEgressIP("billing", spec, map[netip.Addr]string{egressIP4: n2.Name, egressIP6: n2.Name})
	eventually(t, "the external host's entry for "+egressIP4.String()+" moved to n2", func() error {
		if got, want := e.externalNeighbour(egressIP4), n2.BridgeMAC(t); got != want {
			return fmt.Errorf("entry %q", got)
		}
		return nil
	})
	t.Logf("external host's neighbour entry moved %v after the status update", time.Since(moved).Round(time.Millisecond))
	// n1's translations of them are flushed: their connections' replies
	// no longer come to n1.
	for _, p := range []*topology.Pod{a, b} {
		eventually(t, "n1's SNAT entries of "+p.Name+" flushed", func() error {
			if n := snatEntries(n1, p); n > 0 {
				return fmt.Errorf("%d left", n)
			}
			return nil
		})
	}
	for _, p := range []*topology.Pod{a, b} {
		e.expectSource(p, "udp", egressIP4)
	}
	// And the IPv6 one to n1, announced by an unsolicited advertisement.
	e.setEgressIP("billing", spec, map[netip.Addr]string{egressIP4: n2.Name, egressIP6: n1.Name})
	eventually(t, "the external host's entry for "+egressIP6.String()+" moved to n1", func() error {
		if got, want := e.externalNeighbour(egressIP6), n1.BridgeMAC(t); got != want {
			return fmt.Errorf("entry %q", got)
		}
		return nil
	})
	for _, p := range []*topology.Pod{a, b} {
		e.expectSource(p, "tcp", egressIP6)
	}

	// No holder: dropped, not sent with the pod IPs.
	e.setEgressIP("billing", spec, nil)
	for _, p := range []*topology.Pod{a, b} {
		e.expectDenied(p, "udp", e.server.Addr)
		e.expectDenied(p, "udp", e.server.Addr6)
	}
	e.setEgressIP("billing", spec, map[netip.Addr]string{egressIP4: n1.Name, egressIP6: n1.Name})
	e.expectSource(b, "udp", egressIP4)

	// Labels take and release pods.
	e.relabelPod(other, web)
	e.expectSource(other, "udp", egressIP4)
	e.relabelPod(other, map[string]string{"app": "other"})
	e.expectSource(other, "udp", other.IP)

	// An older EgressIP keeps its pods; the newer one gets them when it
	// goes.
	time.Sleep(1100 * time.Millisecond) // creation times have seconds
	newer := esv1.EgressIPSpec{EgressIPs: []string{egressIP4b.String()},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}}}
	e.setEgressIP("a-newer", newer, map[netip.Addr]string{egressIP4b: n2.Name})
	e.expectSource(other, "udp", egressIP4b) // only the newer one selects it
	for _, p := range []*topology.Pod{a, b} {
		e.expectSource(p, "udp", egressIP4) // the older one's, though "a-newer" sorts first
	}
	eventually(t, "a PodClaimed Event on a-newer", func() error {
		events, err := e.admin.Kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == "a-newer" && ev.Reason == "PodClaimed" && strings.Contains(ev.Message, "billing") {
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(events.Items))
	})

	// The namespace unlabelled: its pods are released by both.
	stop := capture.Stop()
	for _, p := range stop {
		for _, pod := range []*topology.Pod{a, b} {
			// A pod's neighbour solicitations for its gateway are flooded
			// on the segment, as every pod's are: not egress.
			if slices.Contains(pod.Addrs(), p.Src) && !p.Dst.IsMulticast() {
				t.Errorf("the external host saw a selected pod's IP: %s", p)
			}
		}
	}
	t.Logf("%d packets captured while a and b were selected: none from their pod IPs", len(stop))
	e.labelNamespace(nil)
	for _, p := range []*topology.Pod{a, b, other} {
		e.expectSource(p, "udp", p.IP)
	}
	e.labelNamespace(map[string]string{"team": "billing"})
	e.expectSource(a, "udp", egressIP4)

	// An EgressService endpoint leaves with its LB IP.
	lb := netip.MustParseAddr("192.0.2.10")
	e.announce(lb, n1)
	e.createEgressService("web", []netip.Addr{lb}, esv1.EgressServiceSpec{}, n1.Name, a)
	e.expectSource(a, "udp", lb)
	e.expectSource(b, "udp", egressIP4)

	// Each agent asked for its node's pods, and for the pods of what it
	// held (n1: billing's app=web pods; n2: also a-newer's, every pod of
	// the namespace), never for every pod of the cluster.
	holderWatch := func(selector string) podRequest {
		return podRequest{Namespace: "shop", LabelSelector: selector, Watch: true}
	}
	for node, want := range map[string][]podRequest{
		n1.Name: {holderWatch("app=web")},
		n2.Name: {holderWatch("app=web"), holderWatch("")},
	} {
		seen := asked[node].all()
		own := podRequest{FieldSelector: "spec.nodeName=" + node, Watch: true}
		for _, r := range append(want, own) {
			if !slices.Contains(seen, r) {
				t.Errorf("%s's agent never watched %+v; it asked for %+v", node, r, seen)
			}
		}
		for _, r := range seen {
			if (r.Watch && r != own && !slices.Contains(want, r)) || (r.Namespace == "" && r.FieldSelector == "") {
				t.Errorf("%s's agent asked for pods it serves none of: %+v", node, r)
			}
		}
	}

	// Deleted: no EgressIP flow is left on either node, and the pods leave
	// as they are.
	for _, name := range []string{"billing", "a-newer"} {
		if err := e.admin.ES.K8sV1().EgressIPs().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.expectSource(b, "udp", b.IP)
	for _, n := range e.topo.Nodes {
		eventually(t, n.Name+" without EgressIP flows", func() error {
			if dump := n.Ofctl(t, "dump-flows", n.Bridge, "cookie=0xef10200000000000/0xfffff00000000000", "--no-stats"); strings.Contains(dump, "cookie") {
				return fmt.Errorf("left:\n%s", dump)
			}
			return nil
		})
	}
}

// TestAgentEgressIPUnheld moves real packets through two nodes whose
// agents make the two choices for a selected pod whose EgressIP holds no
// address of its family (EGRESSIP_UNHELD is one value for a whole cluster;
// the two agents differ here so that one set of packets shows both): n1
// drops (the default), n2 lets the pod leave as its other pods do, which
// on this layout (pods routed by their node, not masqueraded) is with the
// pod's own IP. The EgressIP billing selects a on n1 and b on n2; its
// addresses are held one family after the other: each family of each pod
// leaves with its egress IP once one of its family is held, and until then
// a's is dropped and b's leaves with b's address. A capture on the
// external host sees no packet from a's addresses from the moment n1
// first drops them.
func TestAgentEgressIPUnheld(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	web := map[string]string{"app": "web"}
	a, b := e.addLabelledPod(n1, "a", web), e.addLabelledPod(n2, "b", web)
	e.startAgent(n1).waitHealthy(t)
	e.startAgent(n2, func(c *Config) { c.Node.EgressIPUnheld = dataplane.EgressIPUnheldNodeIP }).waitHealthy(t)
	e.labelNamespace(map[string]string{"team": "billing"})
	for _, p := range []*topology.Pod{a, b} { // not selected yet: the pod IPs
		e.expectSource(p, "udp", p.IP)
		e.expectSource(p, "udp", p.IP6)
	}

	spec := esv1.EgressIPSpec{
		EgressIPs:         []string{egressIP4.String(), egressIP6.String()},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}},
		PodSelector:       esv1.LabelSelector{MatchLabels: web},
	}
	// Nothing held: n1 drops a's egress, n2 lets b's leave with its IPs.
	e.setEgressIP("billing", spec, nil)
	e.expectDenied(a, "udp", e.server.Addr)
	e.expectDenied(a, "udp", e.server.Addr6)
	// Until n1's agent has applied the EgressIP, a is not selected yet as
	// far as its node knows, and leaves with its own IPs: the capture
	// starts once n1 drops them.
	capture := e.topo.External.Capture(t)
	for _, network := range []string{"udp", "tcp"} {
		e.expectSource(b, network, b.IP)
		e.expectSource(b, network, b.IP6)
	}

	// IPv6 held by n1: both pods' IPv6 leaves with it (b's steered to n1);
	// IPv4 is still unheld: a's dropped, b's with its IP.
	e.setEgressIP("billing", spec, map[netip.Addr]string{egressIP6: n1.Name})
	for _, p := range []*topology.Pod{a, b} {
		e.expectSource(p, "tcp", egressIP6)
	}
	e.expectDenied(a, "udp", e.server.Addr)
	e.expectSource(b, "udp", b.IP)

	// IPv4 held by n2: every family of both pods leaves with its egress IP.
	e.setEgressIP("billing", spec, map[netip.Addr]string{egressIP4: n2.Name, egressIP6: n1.Name})
	for _, network := range []string{"udp", "tcp"} {
		for _, p := range []*topology.Pod{a, b} {
			e.expectSource(p, network, egressIP4)
			e.expectSource(p, network, egressIP6)
		}
	}

	// Unheld again: back to dropping on n1, leaving with b's IPs on n2.
	e.setEgressIP("billing", spec, nil)
	e.expectDenied(a, "udp", e.server.Addr)
	e.expectDenied(a, "udp", e.server.Addr6)
	e.expectSource(b, "udp", b.IP)
	e.expectSource(b, "udp", b.IP6)

	packets := capture.Stop()
	fromB := 0
	for _, p := range packets {
		// A pod's neighbour solicitations for its gateway are flooded on
		// the segment, as every pod's are: not egress.
		if slices.Contains(a.Addrs(), p.Src) && !p.Dst.IsMulticast() {
			t.Errorf("the external host saw a's IP while n1 drops unheld pods: %s", p)
		}
		if slices.Contains(b.Addrs(), p.Src) && !p.Dst.IsMulticast() {
			fromB++
		}
	}
	if fromB == 0 {
		t.Error("the external host saw no packet from b's IPs, though n2 lets them leave while unheld")
	}
	t.Logf("%d packets captured: none from a's IPs, %d from b's", len(packets), fromB)
}
