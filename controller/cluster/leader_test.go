package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// snapshot is every service's host and every node's service labels.
func (f *fixture) snapshot(services []string, nodes []string) string {
	f.t.Helper()
	var b strings.Builder
	for _, s := range services {
		fmt.Fprintf(&b, "%s=%s ", s, f.GetEgressService(f.t, f.ns, s).Status.Host)
	}
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s%v ", n, f.NodeServiceLabels(f.t, n))
	}
	return b.String()
}

// TestLeaderHandover runs two replicas. Only the leader writes. Stopping it
// hands over to the other, which adopts every valid assignment and writes
// nothing; then it handles a failover. A watch on the nodes proves that no
// service label was ever on two nodes.
func TestLeaderHandover(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	f, agents := newFixtureWithAgents(t, nodes...)

	a := f.RunController(t, options("replica-a"))
	wait.Until(t, settle, func() error { return idle(a) })
	b := f.RunController(t, options("replica-b"))
	var services []string
	for i := range 6 {
		name := fmt.Sprintf("svc-%d", i)
		services = append(services, name)
		f.service(name, esv1.EgressServiceSpec{}, nodes...)
	}
	for _, s := range services {
		wait.Until(t, settle, func() error {
			if f.GetEgressService(t, f.ns, s).Status.Host == "" {
				return errNoHost
			}
			return nil
		})
	}
	wait.Until(t, settle, func() error { return idle(a) })
	for _, s := range services {
		host := f.GetEgressService(t, f.ns, s).Status.Host
		f.waitLabelOn(s, host)
	}
	if b.Leading() {
		t.Fatal("both replicas lead")
	}
	if w := clustertest.NotEvents(b.Writes.All()); len(w) != 0 {
		t.Fatalf("the standby wrote: %+v", w)
	}
	before := f.snapshot(services, nodes)

	// Graceful stop of the leader: it releases the Lease after its workers
	// stopped; the standby takes over within a retry period or so.
	stopped := time.Now()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	b.WaitLeading(t, settle)
	t.Logf("handover took %v", time.Since(stopped))
	if after := f.snapshot(services, nodes); after != before {
		t.Errorf("the new leader changed assignments:\nbefore %s\nafter  %s", before, after)
	}
	// Statuses were right: no status or label write at all.
	if w := clustertest.NotEvents(b.Writes.All()); len(w) != 0 {
		t.Errorf("the new leader wrote although everything was right: %+v", w)
	}

	// The new leader works: a host's agent dies, its services move.
	victim := f.GetEgressService(t, f.ns, services[0]).Status.Host
	var moved []string
	for _, s := range services {
		if f.GetEgressService(t, f.ns, s).Status.Host == victim {
			moved = append(moved, s)
		}
	}
	agents[victim].Stop()
	for _, s := range moved {
		wait.Until(t, settle, func() error {
			if h := f.GetEgressService(t, f.ns, s).Status.Host; h == victim || h == "" {
				return fmt.Errorf("%s still on %q", s, h)
			}
			return nil
		})
		f.waitLabelOn(s, f.GetEgressService(t, f.ns, s).Status.Host)
	}
	if got := f.NodeServiceLabels(t, victim); len(got) != 0 {
		t.Errorf("dead node %s still carries %v", victim, got)
	}
}

// TestStartupRepair seeds the state a crashed previous run could leave:
// labels of deleted services, a label on two nodes, hosts that no longer
// exist or are no longer valid. The controller fixes all of it before it
// assigns anything new, and keeps the valid assignment.
func TestStartupRepair(t *testing.T) {
	f := newFixture(t, "node-a", "node-b", "node-c")
	ctx := context.Background()
	empty := ""
	// kept: valid on node-b, but labelled on node-b and node-c.
	f.service("kept", esv1.EgressServiceSpec{}, "node-a", "node-b", "node-c")
	// lost: its host node-x does not exist.
	f.service("lost", esv1.EgressServiceSpec{}, "node-a")
	// dry: no endpoints any more, but still on node-a.
	f.CreateService(t, clustertest.Service{Namespace: f.ns, Name: "dry", IngressIPs: []string{"192.0.2.30"}})
	f.CreateEgressService(t, f.ns, "dry", esv1.EgressServiceSpec{})
	// net: Network mode, but a node host.
	f.service("net", esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork}, "node-a")
	for name, host := range map[string]string{"kept": "node-b", "lost": "node-x", "dry": "node-a", "net": "node-c"} {
		es := f.GetEgressService(t, f.ns, name)
		es.Status.Host = host
		if _, err := f.ES.K8sV1().EgressServices(f.ns).UpdateStatus(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ghost := assign.LabelKey(f.ns, "ghost")
	f.PatchNodeLabels(t, "node-a", map[string]*string{ghost: &empty, f.label("dry"): &empty, f.label("lost"): &empty})
	f.PatchNodeLabels(t, "node-c", map[string]*string{f.label("net"): &empty})
	f.PatchNodeLabels(t, "node-b", map[string]*string{f.label("kept"): &empty})
	// kept's label on a second node: what a broken previous run leaves. The
	// watcher records it; it is reset once the controller is running.
	f.PatchNodeLabels(t, "node-c", map[string]*string{f.label("kept"): &empty})
	// A new service, created while the controller was down.
	f.service("new", esv1.EgressServiceSpec{}, "node-a", "node-b", "node-c")

	r := f.run("replica-a")
	f.labels.Reset() // from here on, one label per service at any time
	// (The order check below covers the moments before.)

	f.waitStatus("kept", "node-b", reasons.Assigned)
	f.waitLabelOn("kept", "node-b")
	f.waitStatus("dry", "", reasons.NoEndpoints)
	f.waitLabelOn("dry")
	f.waitStatus("net", esv1.HostAll, reasons.AllNodes)
	f.waitLabelOn("net")
	var lost string
	wait.Until(t, settle, func() error {
		if lost = f.GetEgressService(t, f.ns, "lost").Status.Host; lost == "" || lost == "node-x" {
			return fmt.Errorf("lost's host is %q", lost)
		}
		return nil
	})
	f.waitStatus("lost", lost, reasons.Assigned)
	f.waitLabelOn("lost", lost)
	newHost := f.GetEgressService(t, f.ns, "new").Status.Host
	f.waitStatus("new", newHost, reasons.Assigned)
	f.waitLabelOn("new", newHost)
	if got := f.NodesWithLabel(t, ghost); len(got) != 0 {
		t.Errorf("ghost label still on %v", got)
	}

	// Order: every stale label removal and every stale host fix came before
	// any label was added and before the new service got a host.
	writes := clustertest.NotEvents(r.Writes.All())
	firstNew := len(writes)
	for i, w := range writes {
		isAdd := strings.Contains(w.Path, "/nodes/") && strings.Contains(w.Body, `":""`)
		isNew := strings.HasSuffix(w.Path, "/egressservices/new/status")
		if isAdd || isNew {
			firstNew = i
			break
		}
	}
	var repairs []string
	for i, w := range writes {
		stale := strings.Contains(w.Body, ghost) && strings.Contains(w.Body, "null") ||
			strings.Contains(w.Path, "/nodes/node-c") && strings.Contains(w.Body, f.label("kept")) ||
			strings.HasSuffix(w.Path, "/egressservices/lost/status") || strings.HasSuffix(w.Path, "/egressservices/dry/status") ||
			strings.HasSuffix(w.Path, "/egressservices/net/status")
		if stale {
			repairs = append(repairs, fmt.Sprintf("%d %s", i, w.Path))
			if i > firstNew {
				t.Errorf("repair write %d (%s %s) after the first new write %d", i, w.Path, w.Body, firstNew)
			}
		}
	}
	if len(repairs) < 5 {
		t.Errorf("expected at least 5 repair writes (2 node patches, 3 status fixes), got %v", repairs)
	}
	// kept's host was never written to anything else.
	for _, w := range writes {
		if strings.HasSuffix(w.Path, "/egressservices/kept/status") && !strings.Contains(w.Body, `"host":"node-b"`) {
			t.Errorf("kept's status rewritten: %s", w.Body)
		}
	}
}
