package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// The EgressIP assignment on a real API server: egress nodes are Nodes
// labelled k8s.ovn.org/egress-assignable whose agents (heartbeat.Renewer,
// as the agent identity) publish their subnets on their Leases.

const (
	subnet4 = "192.0.2.0/24"
	subnet6 = "2001:db8::/64"
	// eipFailoverBound is how long after an egress node's Lease expiry its
	// addresses must be written to other nodes (the agents' Leases last
	// clustertest.AgentExpire here; 3 s in production).
	eipFailoverBound = time.Second
)

type eipFixture struct {
	*clustertest.Env
	t      *testing.T
	agents map[string]*clustertest.Agent
	r      *clustertest.Replica
	reg    *prometheus.Registry
}

// newEIPFixture starts an API server with the given egress nodes (name or
// name=cidr,cidr for their subnets; IPv4 subnet4 by default).
func newEIPFixture(t *testing.T, nodes ...string) *eipFixture {
	f := &eipFixture{Env: clustertest.Start(t), t: t, agents: map[string]*clustertest.Agent{}}
	for _, spec := range nodes {
		f.egressNode(spec)
	}
	return f
}

func (f *eipFixture) egressNode(spec string) {
	f.t.Helper()
	name, rest, _ := strings.Cut(spec, "=")
	subnets := []string{subnet4}
	if rest != "" {
		subnets = strings.Split(rest, ",")
	}
	f.agents[name] = f.EgressNode(f.t, name, nil, subnets...)
}

// run starts a leader-elected replica with its own registry and waits
// until it leads and is idle.
func (f *eipFixture) run(identity string) *clustertest.Replica {
	f.t.Helper()
	return f.runWith(options(identity))
}

// runWith is run with opts.
func (f *eipFixture) runWith(opts cluster.Options) *clustertest.Replica {
	f.t.Helper()
	f.reg = prometheus.NewRegistry()
	opts.Registerer = f.reg
	f.r = f.RunController(f.t, opts)
	f.r.WaitLeading(f.t, settle)
	return f.r
}

// items is status.items in short: "address=node" each, in order.
func items(eip *esv1.EgressIP) []string {
	var out []string
	for _, it := range eip.Status.Items {
		out = append(out, it.EgressIP+"="+it.Node)
	}
	return out
}

// waitItems waits until name's status.items are want (in order) and its
// Assigned condition has reason, and returns the object.
func (f *eipFixture) waitItems(name string, reason reasons.Reason, want ...string) *esv1.EgressIP {
	f.t.Helper()
	var eip *esv1.EgressIP
	wait.Until(f.t, settle, func() error {
		eip = f.GetEgressIP(f.t, name)
		cond := meta.FindStatusCondition(eip.Status.Conditions, cluster.ConditionAssigned)
		switch {
		case !slices.Equal(items(eip), want):
			return fmt.Errorf("items %q, want %q (conditions %+v)", items(eip), want, eip.Status.Conditions)
		case cond == nil || cond.Reason != string(reason):
			return fmt.Errorf("condition %+v, want reason %s", cond, reason)
		case (cond.Status == metav1.ConditionTrue) != (reason == reasons.Assigned):
			return fmt.Errorf("condition status %s with reason %s", cond.Status, reason)
		}
		return nil
	})
	return eip
}

// message is name's Assigned condition message.
func (f *eipFixture) message(name string) string {
	f.t.Helper()
	cond := meta.FindStatusCondition(f.GetEgressIP(f.t, name).Status.Conditions, cluster.ConditionAssigned)
	if cond == nil {
		f.t.Fatalf("%s has no Assigned condition", name)
	}
	return cond.Message
}

// waitEvent waits for an Event about EgressIP name (cluster-scoped: its
// Events are in default) with reason and a message containing text.
func (f *eipFixture) waitEvent(name, eventType string, reason reasons.Reason, text string) {
	f.t.Helper()
	waitEventOn(f.t, f.Env, metav1.NamespaceDefault, "EgressIP", name, eventType, reason, text)
}

// eipWrites are the replica's writes of EgressIPs.
func eipWrites(reqs []clustertest.Request) []clustertest.Request {
	return slices.DeleteFunc(slices.Clone(reqs), func(r clustertest.Request) bool { return !strings.Contains(r.Path, "/egressips/") })
}

func (f *eipFixture) idle() {
	f.t.Helper()
	wait.Until(f.t, settle, func() error { return idle(f.r) })
}

// holders counts addresses per node over every EgressIP.
func (f *eipFixture) holders() map[string]int {
	f.t.Helper()
	list, err := f.ES.K8sV1().EgressIPs().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for _, eip := range list.Items {
		for _, it := range eip.Status.Items {
			out[it.Node]++
		}
	}
	return out
}

func (f *eipFixture) waitAllHeld(names ...string) {
	f.t.Helper()
	for _, name := range names {
		wait.Until(f.t, settle, func() error {
			eip := f.GetEgressIP(f.t, name)
			if len(eip.Status.Items) != len(eip.Spec.EgressIPs) {
				return fmt.Errorf("%s: items %q", name, items(eip))
			}
			return nil
		})
	}
}

// TestEgressIPSpread: addresses go to egress nodes only, fewest first; two
// addresses of one EgressIP never share a node; an address more than the
// nodes can take is reported; each EgressIP costs one write, a resync
// none, and the metrics and Events say what happened.
func TestEgressIPSpread(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b", "node-c")
	f.Node(t, "plain", nil) // Ready, live agent, no label
	r := f.run("replica-a")

	for i := range 6 {
		f.CreateEgressIP(t, fmt.Sprintf("single-%d", i), fmt.Sprintf("192.0.2.%d", 10+i))
	}
	names := []string{"single-0", "single-1", "single-2", "single-3", "single-4", "single-5"}
	f.waitAllHeld(names...)
	if got := f.holders(); !mapsEqual(got, map[string]int{"node-a": 2, "node-b": 2, "node-c": 2}) {
		t.Errorf("6 addresses on 3 nodes: %v, want 2 each", got)
	}

	// Three addresses: one per node.
	f.CreateEgressIP(t, "triple", "192.0.2.20", "192.0.2.21", "192.0.2.22")
	f.waitAllHeld("triple")
	nodes := map[string]bool{}
	for _, it := range f.GetEgressIP(t, "triple").Status.Items {
		nodes[it.Node] = true
	}
	if len(nodes) != 3 {
		t.Errorf("triple's addresses share nodes: %q", items(f.GetEgressIP(t, "triple")))
	}
	if got := f.holders(); !mapsEqual(got, map[string]int{"node-a": 3, "node-b": 3, "node-c": 3}) {
		t.Errorf("loads %v, want 3 each", got)
	}

	// Four addresses on three nodes: the fourth is not held, and says why.
	f.CreateEgressIP(t, "quad", "192.0.2.30", "192.0.2.31", "192.0.2.32", "192.0.2.33")
	wait.Until(t, settle, func() error {
		if n := len(f.GetEgressIP(t, "quad").Status.Items); n != 3 {
			return fmt.Errorf("%d items", n)
		}
		return nil
	})
	quad := f.waitItems("quad", reasons.AllNodesTaken, items(f.GetEgressIP(t, "quad"))...)
	if slices.ContainsFunc(quad.Status.Items, func(it esv1.EgressIPStatusItem) bool { return it.EgressIP == "192.0.2.33" }) {
		t.Errorf("the last address is held, an earlier one not: %q", items(quad))
	}
	if msg := f.message("quad"); !strings.HasPrefix(msg, "not held: 192.0.2.33 (AllNodesTaken: every egress node that could hold it holds another address of this EgressIP); held: 192.0.2.30 on ") {
		t.Errorf("quad's message: %q", msg)
	}
	f.waitEvent("quad", warning, reasons.AllNodesTaken, "192.0.2.33")
	f.waitEvent("triple", normal, reasons.Assigned, "192.0.2.20 on ")
	if msg := f.message("triple"); !strings.HasPrefix(msg, "every address is held: 192.0.2.20 on ") {
		t.Errorf("triple's message: %q", msg)
	}

	// One write per EgressIP; the plain node holds nothing.
	f.idle()
	writes := eipWrites(r.Writes.All())
	if len(writes) != 8 {
		t.Errorf("%d EgressIP writes for 8 EgressIPs: %+v", len(writes), writes)
	}
	for _, w := range writes {
		if w.Method != "PUT" {
			t.Errorf("EgressIP written with %s %s", w.Method, w.Path)
		}
	}
	if f.holders()["plain"] != 0 {
		t.Error("a node without the label holds an address")
	}
	if got := counter(t, f.reg, "egressflow_controller_api_writes_total", map[string]string{"kind": "egressip_status", "result": "ok"}); got != 8 {
		t.Errorf("api_writes_total{kind=egressip_status,result=ok} = %v, want 8", got)
	}
	if got := eipGauge(t, f.reg, "held"); got != 12 {
		t.Errorf("addresses{state=held} = %v, want 12", got)
	}
	if got := eipGauge(t, f.reg, "unheld"); got != 1 {
		t.Errorf("addresses{state=unheld} = %v, want 1", got)
	}
	if got := histogramCount(t, f.reg, "egressflow_controller_egressip_assign_latency_seconds"); got != 12 {
		t.Errorf("assign latency has %d samples, want 12", got)
	}

	// A new egress node takes the address no node could hold, and nothing
	// else; a resync then writes nothing and emits nothing.
	f.egressNode("node-d")
	f.waitItems("quad", reasons.Assigned, append(items(quad), "192.0.2.33=node-d")...)
	f.waitEvent("quad", normal, reasons.Assigned, "192.0.2.33 on node-d")
	if got := f.holders(); !mapsEqual(got, map[string]int{"node-a": 4, "node-b": 4, "node-c": 4, "node-d": 1}) {
		t.Errorf("loads %v after node-d came", got)
	}
	f.idle()
	before, events := r.Writes.Len(), eventsEmitted(t, f.reg)
	r.Resync()
	f.idle()
	if got, _ := r.Writes.Since(before); len(clustertest.NotLeases(got)) != 0 {
		t.Errorf("writes after a new node and a resync: %+v", clustertest.NotLeases(got))
	}
	if got := eventsEmitted(t, f.reg); got != events {
		t.Errorf("a resync emitted %v Events", got-events)
	}
	// The next address goes to node-d, the emptiest.
	f.CreateEgressIP(t, "next", "192.0.2.40")
	f.waitItems("next", reasons.Assigned, "192.0.2.40=node-d")
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func eipGauge(t *testing.T, reg *prometheus.Registry, state string) float64 {
	t.Helper()
	if m := metric(t, reg, "egressflow_controller_egressip_addresses", map[string]string{"state": state}); m != nil {
		return m.GetGauge().GetValue()
	}
	return -1
}

// TestEgressIPReasons: each reason an address is not held, in turn, as
// the nodes change, with its Warning; then held.
func TestEgressIPReasons(t *testing.T) {
	f := newEIPFixture(t)
	f.Node(t, "node-a", nil) // its agent publishes no subnets
	f.run("replica-a")
	f.CreateEgressIP(t, "web", "192.0.2.10")
	f.waitItems("web", reasons.NoEgressNode)
	if msg := f.message("web"); msg != "not held: 192.0.2.10 (NoEgressNode: no node is labelled k8s.ovn.org/egress-assignable)" {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("web", warning, reasons.NoEgressNode, "no node is labelled")

	// Labelled, but its agent publishes no subnets yet.
	label := ""
	f.PatchNodeLabels(t, "node-a", map[string]*string{assign.EgressAssignableLabel: &label})
	f.waitItems("web", reasons.NoNodeInSubnet)
	if msg := f.message("web"); msg != "not held: 192.0.2.10 (NoNodeInSubnet: no egress node has it in a subnet (some egress nodes' agents have published no subnets))" {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("web", warning, reasons.NoNodeInSubnet, "no egress node has it in a subnet")

	// An egress node of another subnet.
	f.egressNode("node-b=198.51.100.0/24")
	wait.Until(t, settle, func() error {
		if msg := f.message("web"); msg != "not held: 192.0.2.10 (NoNodeInSubnet: no egress node has it in a subnet (some egress nodes' agents have published no subnets))" {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})

	// An egress node of its subnet, not Ready.
	f.EgressNode(t, "node-c", nil, subnet4)
	f.SetNodeReady(t, "node-c", false)
	// node-c may have taken it while Ready: it loses it.
	f.waitItems("web", reasons.NodesUnavailable)
	if msg := f.message("web"); msg != "not held: 192.0.2.10 (NodesUnavailable: the egress nodes with it in a subnet are not Ready)" {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("web", warning, reasons.NodesUnavailable, "are not Ready")

	// Ready again: held.
	f.SetNodeReady(t, "node-c", true)
	f.waitItems("web", reasons.Assigned, "192.0.2.10=node-c")
	f.waitEvent("web", normal, reasons.Assigned, "192.0.2.10 on node-c")
}

// TestEgressIPCapacity: the cluster's limit, a node's annotation and the
// cloud's annotation bound how many addresses a node takes; an address no
// node has room for says so, and is placed once room is made, by a raised
// limit or an address given up; a lowered limit moves nothing; an
// unreadable annotation gets an Event on the Node and takes nothing new.
func TestEgressIPCapacity(t *testing.T) {
	f := newEIPFixture(t, "node-a")
	opts := options("replica-a")
	opts.MaxEgressIPsPerNode = 1
	f.runWith(opts)
	f.CreateEgressIP(t, "one", "192.0.2.10")
	f.waitItems("one", reasons.Assigned, "192.0.2.10=node-a")
	f.CreateEgressIP(t, "two", "192.0.2.11")
	f.waitItems("two", reasons.NodesAtCapacity)
	if msg := f.message("two"); msg != "not held: 192.0.2.11 (NodesAtCapacity: the available egress nodes with it in a subnet that hold no other address of this EgressIP hold as many addresses as their capacity allows)" {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("two", warning, reasons.NodesAtCapacity, "as many addresses as their capacity allows")

	// node-b's agent publishes another subnet; the cloud's annotation
	// gives it subnet4 and room for one IPv4 address.
	f.egressNode("node-b=198.51.100.0/24")
	cloud := `[{"interface":"eni-0b","ifaddr":{"ipv4":"192.0.2.0/24"},"capacity":{"ipv4":1,"ipv6":0}}]`
	f.PatchNodeAnnotations(t, "node-b", map[string]*string{cloudv1.EgressIPConfigAnnotation: &cloud})
	f.waitItems("two", reasons.Assigned, "192.0.2.11=node-b")

	// Every node full; node-a's own annotation raises its limit.
	f.CreateEgressIP(t, "three", "192.0.2.12")
	f.waitItems("three", reasons.NodesAtCapacity)
	two := "2"
	f.PatchNodeAnnotations(t, "node-a", map[string]*string{assign.MaxEgressIPsAnnotation: &two})
	f.waitItems("three", reasons.Assigned, "192.0.2.12=node-a")

	// Full again; an address given up makes room.
	f.CreateEgressIP(t, "four", "192.0.2.13")
	f.waitItems("four", reasons.NodesAtCapacity)
	f.DeleteEgressIP(t, "one")
	f.waitItems("four", reasons.Assigned, "192.0.2.13=node-a")

	// A lowered limit moves nothing.
	zero := "0"
	f.PatchNodeAnnotations(t, "node-a", map[string]*string{assign.MaxEgressIPsAnnotation: &zero})
	f.CreateEgressIP(t, "five", "192.0.2.14")
	f.waitItems("five", reasons.NodesAtCapacity)
	f.waitItems("three", reasons.Assigned, "192.0.2.12=node-a")
	f.waitItems("four", reasons.Assigned, "192.0.2.13=node-a")
	f.DeleteEgressIP(t, "five") // "two" alone waits for node-b's room below

	// Unreadable: an Event on the Node. With its own limit unreadable,
	// node-b keeps what it holds; with the cloud's, it has only its
	// agent's subnets, where "two" is not, until the annotation is fixed.
	for _, bad := range []struct {
		key, value, says string
		two              reasons.Reason
		twoItems         []string
	}{
		{assign.MaxEgressIPsAnnotation, "lots", `egressflow.io/max-egress-ips "lots" is not a number of addresses`, reasons.Assigned, []string{"192.0.2.11=node-b"}},
		{cloudv1.EgressIPConfigAnnotation, `[{"ifaddr":{"ipv4":"2001:db8::/64"}}]`, `ifaddr.ipv4 "2001:db8::/64" is not an ipv4 prefix`, reasons.NodesAtCapacity, nil},
	} {
		nodeB, err := f.Kube.CoreV1().Nodes().Get(context.Background(), "node-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		good, hadGood := nodeB.Annotations[bad.key]
		f.PatchNodeAnnotations(t, "node-b", map[string]*string{bad.key: &bad.value})
		waitEventOn(t, f.Env, metav1.NamespaceDefault, "Node", "node-b", warning, reasons.InvalidEgressCapacity, bad.says)
		f.waitItems("two", bad.two, bad.twoItems...)
		restore := &good
		if !hadGood {
			restore = nil
		}
		f.PatchNodeAnnotations(t, "node-b", map[string]*string{bad.key: restore})
		f.waitItems("two", reasons.Assigned, "192.0.2.11=node-b")
	}
}

// TestEgressIPLabelRemoved: an address follows the label: removed from
// its node, it moves to another egress node, counted as a rebalance.
func TestEgressIPLabelRemoved(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b")
	f.run("replica-a")
	f.CreateEgressIP(t, "web", "192.0.2.10")
	f.waitAllHeld("web")
	host := f.GetEgressIP(t, "web").Status.Items[0].Node
	other := otherThan(host, "node-a", "node-b")
	f.PatchNodeLabels(t, host, map[string]*string{assign.EgressAssignableLabel: nil})
	f.waitItems("web", reasons.Assigned, "192.0.2.10="+other)
	f.waitEvent("web", normal, reasons.Assigned, "192.0.2.10 moved from "+host+" (NotEgressAssignable) to "+other)
	if got := counter(t, f.reg, "egressflow_controller_egressip_rebalance_total", nil); got != 1 {
		t.Errorf("rebalance_total = %v, want 1", got)
	}
	// Labelled again: nothing moves back.
	label := "true"
	f.PatchNodeLabels(t, host, map[string]*string{assign.EgressAssignableLabel: &label})
	f.idle()
	f.waitItems("web", reasons.Assigned, "192.0.2.10="+other)
}

// TestEgressIPAgentLeaseExpired: an egress node whose agent stops loses
// its addresses within the Lease's duration plus eipFailoverBound, as an
// EgressService host does; the node counts as unreachable.
func TestEgressIPAgentLeaseExpired(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b", "node-c")
	r := f.run("replica-a")
	f.CreateEgressIP(t, "web", "192.0.2.10", "192.0.2.11")
	f.waitAllHeld("web")
	eip := f.GetEgressIP(t, "web")
	victim := eip.Status.Items[0].Node
	kept := eip.Status.Items[1]
	spare := ""
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if n != victim && n != kept.Node {
			spare = n
		}
	}
	f.agents[victim].Stop()
	lease, err := f.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(context.Background(), victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expiry := lease.Spec.RenewTime.Add(clustertest.AgentExpire)
	f.waitItems("web", reasons.Assigned, "192.0.2.10="+spare, kept.EgressIP+"="+kept.Node)
	var at time.Time
	for _, w := range eipWrites(r.Writes.All()) {
		if strings.Contains(w.Body, `"egressIP":"192.0.2.10","node":"`+spare+`"`) || strings.Contains(w.Body, `"node":"`+spare+`","egressIP":"192.0.2.10"`) {
			at = w.At
			break
		}
	}
	if at.IsZero() {
		t.Fatal("no write names the new node")
	}
	took := at.Sub(expiry)
	t.Logf("moved %v after the Lease expired", took)
	if took > eipFailoverBound {
		t.Errorf("the address moved %v after the Lease expired, want <= %v", took, eipFailoverBound)
	}
	f.waitEvent("web", normal, reasons.Assigned, "192.0.2.10 moved from "+victim+" (AgentLeaseExpired) to "+spare)
	if got := counter(t, f.reg, "egressflow_controller_egressip_node_unreachable_total", map[string]string{"cause": "AgentLeaseExpired"}); got != 1 {
		t.Errorf("node_unreachable_total{AgentLeaseExpired} = %v, want 1", got)
	}
	if got := histogramCount(t, f.reg, "egressflow_controller_egressip_unassign_latency_seconds"); got != 1 {
		t.Errorf("unassign latency has %d samples, want 1", got)
	}

	// Not Ready: the same, by another cause; with no spare node left the
	// address is not held.
	f.SetNodeReady(t, spare, false)
	f.waitItems("web", reasons.AllNodesTaken, kept.EgressIP+"="+kept.Node)
	if msg := f.message("web"); !strings.HasPrefix(msg, "not held: 192.0.2.10 (AllNodesTaken") {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("web", warning, reasons.AllNodesTaken, "192.0.2.10 left "+spare+" (NodeNotReady)")
	if got := counter(t, f.reg, "egressflow_controller_egressip_node_unreachable_total", map[string]string{"cause": "NodeNotReady"}); got != 1 {
		t.Errorf("node_unreachable_total{NodeNotReady} = %v, want 1", got)
	}

	// The first agent comes back: the address is held again.
	f.agents[victim] = f.StartAgentWith(t, victim, clustertest.AgentRenew, clustertest.AgentExpire, subnet4)
	f.waitItems("web", reasons.Assigned, "192.0.2.10="+victim, kept.EgressIP+"="+kept.Node)
}

// TestEgressIPNodeDeletedAndSubnets: the holder deleted, then the holder's
// agent publishing subnets without the address: each time it moves.
func TestEgressIPNodeDeletedAndSubnets(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b", "node-c")
	f.run("replica-a")
	f.CreateEgressIP(t, "web", "192.0.2.10")
	f.waitAllHeld("web")
	first := f.GetEgressIP(t, "web").Status.Items[0].Node
	f.agents[first].Stop()
	if err := f.Kube.CoreV1().Nodes().Delete(context.Background(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, settle, func() error {
		if it := f.GetEgressIP(t, "web").Status.Items; len(it) != 1 || it[0].Node == first {
			return fmt.Errorf("items %+v", it)
		}
		return nil
	})
	second := f.GetEgressIP(t, "web").Status.Items[0].Node
	f.waitEvent("web", normal, reasons.Assigned, "moved from "+first+" (")

	f.agents[second].SetEgressSubnets("198.51.100.0/24")
	third := otherThan(second, slices.DeleteFunc([]string{"node-a", "node-b", "node-c"}, func(n string) bool { return n == first })...)
	f.waitItems("web", reasons.Assigned, "192.0.2.10="+third)
	f.waitEvent("web", normal, reasons.Assigned, "192.0.2.10 moved from "+second+" (NotInSubnet) to "+third)
}

// TestEgressIPDualStack: an IPv4 and an IPv6 address, with one node that
// has both subnets and IPv4-only nodes: both held, on different nodes,
// the IPv6 one on the dual-stack node, whatever the order of the
// addresses. The dual-stack node being the emptiest, the IPv4 address
// first placed there makes room (assign's augmenting path).
func TestEgressIPDualStack(t *testing.T) {
	other := "198.51.100.0/24"
	f := newEIPFixture(t, "dual-a="+subnet4+","+subnet6, "v4-b="+subnet4+","+other, "v4-c="+subnet4+","+other)
	f.run("replica-a")
	// The IPv4-only nodes hold one address each.
	f.CreateEgressIP(t, "filler", "198.51.100.1", "198.51.100.2")
	f.waitAllHeld("filler")
	f.CreateEgressIP(t, "four-six", "192.0.2.10", "2001:DB8::10")
	f.waitAllHeld("four-six")
	f.CreateEgressIP(t, "six-four", "2001:db8::11", "192.0.2.11")
	f.waitAllHeld("six-four")
	for _, name := range []string{"four-six", "six-four"} {
		eip := f.GetEgressIP(t, name)
		if eip.Status.Items[0].Node == eip.Status.Items[1].Node {
			t.Errorf("%s: both on one node: %q", name, items(eip))
		}
		for _, it := range eip.Status.Items {
			if strings.Contains(it.EgressIP, ":") && it.Node != "dual-a" {
				t.Errorf("%s: IPv6 address on %s", name, it.Node)
			}
			if !slices.Contains(eip.Spec.EgressIPs, it.EgressIP) {
				t.Errorf("%s: status spells %s, the spec does not", name, it.EgressIP)
			}
		}
	}
	// The spec's spelling, in spec order.
	if got := items(f.GetEgressIP(t, "four-six")); got[0][:len("192.0.2.10=")] != "192.0.2.10=" || !strings.HasPrefix(got[1], "2001:DB8::10=") {
		t.Errorf("four-six items %q", got)
	}
}

// TestEgressIPRestartAdopts: a new controller (another replica after the
// first stops) adopts every valid assignment and writes nothing, even
// where a new node would be emptier; one a status names wrongly (a node
// without the label, the address spelled otherwise) is put right with one
// write.
func TestEgressIPRestartAdopts(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b", "node-c")
	first := f.run("replica-a")
	for i := range 5 {
		f.CreateEgressIP(t, fmt.Sprintf("eip-%d", i), fmt.Sprintf("192.0.2.%d", 10+i), fmt.Sprintf("192.0.2.%d", 110+i))
	}
	names := []string{"eip-0", "eip-1", "eip-2", "eip-3", "eip-4"}
	f.waitAllHeld(names...)
	f.idle()
	want := map[string][]string{}
	for _, n := range names {
		want[n] = items(f.GetEgressIP(t, n))
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	// An empty egress node, and a status another writer made: the address
	// spelled otherwise than in the spec, on a node without the label.
	f.egressNode("node-d")
	f.Node(t, "plain", nil)
	f.CreateEgressIP(t, "manual", "2001:DB8::5", "192.0.2.50")
	f.UpdateEgressIP(t, "manual", func(eip *esv1.EgressIP) {
		eip.Status.Items = []esv1.EgressIPStatusItem{{EgressIP: "2001:db8::5", Node: "node-a"}, {EgressIP: "192.0.2.50", Node: "plain"}}
	})
	f.agents["node-a"].SetEgressSubnets(subnet4, subnet6)
	wait.Until(t, settle, func() error {
		l, err := f.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(context.Background(), "node-a", metav1.GetOptions{})
		if err != nil || !strings.Contains(l.Annotations["egressflow.io/egress-subnets"], "2001:db8::/64") {
			return fmt.Errorf("node-a's subnets not published yet (%v)", err)
		}
		return nil
	})

	second := f.run("replica-b")
	f.idle()
	for _, n := range names {
		if got := items(f.GetEgressIP(t, n)); !slices.Equal(got, want[n]) {
			t.Errorf("%s moved: %q, was %q", n, got, want[n])
		}
	}
	manual := f.waitItems("manual", reasons.Assigned, "2001:DB8::5=node-a", "192.0.2.50=node-d")
	writes := eipWrites(second.Writes.All())
	if len(writes) != 1 || !strings.HasSuffix(writes[0].Path, "/egressips/manual") {
		t.Errorf("the new controller's EgressIP writes: %+v, want the one of manual", writes)
	}
	_ = manual
	f.waitEvent("manual", normal, reasons.Assigned, "192.0.2.50 moved from plain")
}

// TestEgressIPSpecChangeAndDelete: an address added is assigned, one
// removed leaves the status; a deleted EgressIP's addresses count as
// unassigned.
func TestEgressIPSpecChangeAndDelete(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b")
	f.run("replica-a")
	f.CreateEgressIP(t, "web", "192.0.2.10")
	f.waitAllHeld("web")
	f.UpdateEgressIP(t, "web", func(eip *esv1.EgressIP) { eip.Spec.EgressIPs = append(eip.Spec.EgressIPs, "192.0.2.11") })
	f.waitAllHeld("web")
	eip := f.GetEgressIP(t, "web")
	if eip.Status.Items[0].Node == eip.Status.Items[1].Node {
		t.Errorf("items %q", items(eip))
	}
	kept := eip.Status.Items[1]
	f.UpdateEgressIP(t, "web", func(eip *esv1.EgressIP) { eip.Spec.EgressIPs = []string{"192.0.2.11"} })
	f.waitItems("web", reasons.Assigned, kept.EgressIP+"="+kept.Node)
	// The controller records the latency after its status write returns,
	// so a reader can see the status first.
	wait.Until(t, settle, func() error {
		if got := histogramCount(t, f.reg, "egressflow_controller_egressip_unassign_latency_seconds"); got != 1 {
			return fmt.Errorf("unassign latency has %d samples after an address was removed, want 1", got)
		}
		return nil
	})
	f.DeleteEgressIP(t, "web")
	wait.Until(t, settle, func() error {
		if got := histogramCount(t, f.reg, "egressflow_controller_egressip_unassign_latency_seconds"); got != 2 {
			return fmt.Errorf("unassign latency has %d samples after the delete, want 2", got)
		}
		if got := eipGauge(t, f.reg, "held"); got != 0 {
			return fmt.Errorf("addresses{held} = %v", got)
		}
		return nil
	})
}

// TestEgressIPAddressConflict: two EgressIPs list one address: the older
// holds it, the other says AddressConflict, and takes it once the older
// is gone.
func TestEgressIPAddressConflict(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b")
	f.run("replica-a")
	f.CreateEgressIP(t, "older", "192.0.2.10")
	f.waitAllHeld("older")
	holder := f.GetEgressIP(t, "older").Status.Items[0].Node
	// creationTimestamp has whole seconds: make "newer" newer.
	time.Sleep(time.Until(f.GetEgressIP(t, "older").CreationTimestamp.Add(1100 * time.Millisecond)))
	f.CreateEgressIP(t, "newer", "192.0.2.10", "192.0.2.11")
	f.waitItems("newer", reasons.AddressConflict, "192.0.2.11="+otherThan(holder, "node-a", "node-b"))
	if msg := f.message("newer"); !strings.HasPrefix(msg, "not held: 192.0.2.10 (AddressConflict: the older EgressIP older lists it)") {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("newer", warning, reasons.AddressConflict, "the older EgressIP older lists it")
	f.waitItems("older", reasons.Assigned, "192.0.2.10="+holder)

	f.DeleteEgressIP(t, "older")
	eip := f.waitItems("newer", reasons.Assigned, "192.0.2.10="+holder, "192.0.2.11="+otherThan(holder, "node-a", "node-b"))
	_ = eip
}

// TestEgressIPControllerChangesOnlyStatus: the controller's identity may
// update an EgressIP's status, and nothing else of it (RBAC grants update
// of the object; deploy/admission's policy narrows it), nor create or
// delete one.
func TestEgressIPControllerChangesOnlyStatus(t *testing.T) {
	f := newEIPFixture(t, "node-a")
	f.CreateEgressIP(t, "web", "192.0.2.10")
	ctx := context.Background()
	es := versioned.NewForConfigOrDie(f.Cluster.Config(kubetest.Controller)).K8sV1().EgressIPs()
	update := func(modify func(*esv1.EgressIP)) error {
		cur, err := es.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		modify(cur)
		_, err = es.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	// The policy is in force once a spec change is refused.
	wait.Until(t, settle, func() error {
		err := update(func(eip *esv1.EgressIP) { eip.Spec.EgressIPs = []string{"192.0.2.99"} })
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			if !strings.Contains(err.Error(), "may change nothing of EgressIP web but its status") {
				t.Errorf("refusal says %v", err)
			}
			return nil
		}
		return fmt.Errorf("a spec change by the controller: %v", err)
	})
	for what, modify := range map[string]func(*esv1.EgressIP){
		"a label":       func(eip *esv1.EgressIP) { eip.Labels = map[string]string{"x": "y"} },
		"an annotation": func(eip *esv1.EgressIP) { eip.Annotations = map[string]string{"x": "y"} },
		"a finalizer":   func(eip *esv1.EgressIP) { eip.Finalizers = []string{"example.com/x"} },
	} {
		if err := update(modify); err == nil {
			t.Errorf("the controller could change %s", what)
		}
	}
	if err := update(func(eip *esv1.EgressIP) {
		eip.Status.Items = []esv1.EgressIPStatusItem{{EgressIP: "192.0.2.10", Node: "node-a"}}
	}); err != nil {
		t.Errorf("the controller could not write the status: %v", err)
	}
	_, err := es.Create(ctx, &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "forged"}, Spec: esv1.EgressIPSpec{EgressIPs: []string{"192.0.2.1"}}}, metav1.CreateOptions{})
	forbidden(t, "create an EgressIP", err)
	forbidden(t, "delete an EgressIP", es.Delete(ctx, "web", metav1.DeleteOptions{}))
}

// TestEgressIPNodeAddress: an address that is a node's own is never held
// (holding it would answer ARP for the node and take its traffic): the
// condition says whose it is; an address held when a node takes it as its
// own is given up, and held again once the node no longer has it.
func TestEgressIPNodeAddress(t *testing.T) {
	f := newEIPFixture(t, "node-a", "node-b")
	f.run("replica-a")
	setAddresses := func(node string, addrs ...string) {
		t.Helper()
		ctx := context.Background()
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = nil
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		if _, err := f.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setAddresses("node-b", "192.0.2.20")
	f.CreateEgressIP(t, "web", "192.0.2.20", "192.0.2.10")
	// onlyTenHeld waits until 192.0.2.10 alone is held, with reason
	// NodeAddress for the other.
	onlyTenHeld := func() {
		t.Helper()
		wait.Until(t, settle, func() error {
			eip := f.GetEgressIP(t, "web")
			cond := meta.FindStatusCondition(eip.Status.Conditions, cluster.ConditionAssigned)
			if got := items(eip); len(got) != 1 || !strings.HasPrefix(got[0], "192.0.2.10=") || cond == nil || cond.Reason != string(reasons.NodeAddress) {
				return fmt.Errorf("items %q, condition %+v; want 192.0.2.10 alone held, reason NodeAddress", got, cond)
			}
			return nil
		})
	}
	onlyTenHeld()
	if msg := f.message("web"); !strings.HasPrefix(msg, "not held: 192.0.2.20 (NodeAddress: it is node node-b's address)") {
		t.Errorf("message %q", msg)
	}
	f.waitEvent("web", warning, reasons.NodeAddress, "it is node node-b's address")

	// A node takes 192.0.2.10 as its own: it is given up.
	setAddresses("node-a", "192.0.2.10")
	f.waitItems("web", reasons.NodeAddress)
	// Both held once no node has either.
	setAddresses("node-a")
	setAddresses("node-b")
	f.waitAllHeld("web")
}

// TestEgressIPRestartingAgentChosenLast: a new address goes to a node
// whose agent is restarting (its Lease handed over) only when no other
// node can hold it, though it holds the fewest; the addresses it holds
// stay.
func TestEgressIPRestartingAgentChosenLast(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	f := newEIPFixture(t, nodes...)
	f.run("replica-a")
	f.CreateEgressIP(t, "web", "192.0.2.10", "192.0.2.11")
	f.waitAllHeld("web")
	web := f.GetEgressIP(t, "web")
	restarting := ""
	for _, n := range nodes {
		if !slices.ContainsFunc(web.Status.Items, func(it esv1.EgressIPStatusItem) bool { return it.Node == n }) {
			restarting = n // the one that holds nothing
		}
	}
	f.agents[restarting].HandOver(t, time.Minute)
	waitGauge(t, f.reg, "egressflow_controller_agents_restarting", 1)

	// By load alone it would go to the restarting agent's node.
	f.CreateEgressIP(t, "one", "192.0.2.20")
	f.waitAllHeld("one")
	if it := f.GetEgressIP(t, "one").Status.Items[0]; it.Node == restarting {
		t.Errorf("%s went to %s, whose agent is restarting, while other nodes could hold it", it.EgressIP, it.Node)
	}
	// Three addresses of one EgressIP need all three nodes.
	f.CreateEgressIP(t, "three", "192.0.2.30", "192.0.2.31", "192.0.2.32")
	f.waitAllHeld("three")
	f.waitItems("web", reasons.Assigned, items(web)...)
}
