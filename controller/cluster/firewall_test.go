package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// firewallRules allow a DNS name (which no resolver here answers: the
// cluster component does not report that) and deny everything else.
var firewallRules = esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
	{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "api.example.com"},
		Ports: []esv1.EgressFirewallPort{{Protocol: "TCP", Port: 443}}},
	{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}},
}}

// waitFirewall waits until the EgressFirewall name of ns says state:
// status.status in the reference's words, and status.messages egressflow's
// summary, then problems. It returns the object.
func (f *rolloutFixture) waitFirewall(ns, name string, state reasons.Reason, summary string, problems ...string) *esv1.EgressFirewall {
	f.t.Helper()
	var fw *esv1.EgressFirewall
	status, messages := wantReferenceStatus("EgressFirewall", state), append([]string{summary}, problems...)
	wait.Until(f.t, settle, func() error {
		fw = f.GetEgressFirewall(f.t, ns, name)
		if fw.Status.Status != status || !slices.Equal(fw.Status.Messages, messages) {
			return fmt.Errorf("%s/%s: status %q messages %q, want %q %q", ns, name, fw.Status.Status, fw.Status.Messages, status, messages)
		}
		return nil
	})
	return fw
}

// firewallEvent waits for an Event about the EgressFirewall name of ns.
func (f *rolloutFixture) firewallEvent(ns, name, eventType string, reason reasons.Reason, text string) {
	f.t.Helper()
	f.eventOn(ns, "EgressFirewall", name, eventType, reason, text)
}

// firewallState is egressflow_controller_egressfirewall{state}.
func firewallState(t *testing.T, f *rolloutFixture, state string) float64 {
	t.Helper()
	return stateGauge(t, f.reg, "egressflow_controller_egressfirewall", state)
}

// TestFirewallStatusFollowsAgents: an EgressFirewall is Pending on the
// nodes whose agents have not published a firewall watermark at or past
// the revision of its current generation, and Applied once all have, with
// one Applied Event per generation. The EgressQoS watermark does not
// count. Once Applied, the object's resourceVersion stays put: the
// controller's status writes do not bump the generation, so nothing makes
// it write again, not a resync nor renewals; another writer's status-only
// write is put right once, never Pending. A spec change is Pending until
// the agents catch up.
func TestFirewallStatusFollowsAgents(t *testing.T) {
	f := newRolloutFixture(t, false, nil, "node-a", "node-b", "node-c")
	ns := f.Namespace(t)
	created := f.CreateEgressFirewall(t, ns, esv1.EgressFirewallName, firewallRules)
	rv1 := created.ResourceVersion

	f.waitFirewall(ns, "default", reasons.Pending, "Pending on 3 of 3 nodes: node-a, node-b, node-c")
	// Another API's watermark is not this one's.
	f.qosWatermark(rv1, "node-a", "node-b", "node-c")
	f.firewallWatermark(rv1, "node-a", "node-b")
	f.waitFirewall(ns, "default", reasons.Pending, "Pending on 1 of 3 nodes: node-c")
	f.firewallWatermark(rv1, "node-c")
	fw := f.waitFirewall(ns, "default", reasons.Applied, "Applied on 3/3 nodes")
	f.firewallEvent(ns, "default", normal, reasons.Applied, "generation 1 applied on 3/3 nodes")
	if fw.Generation != 1 || !newerRV(fw.ResourceVersion, rv1) {
		t.Fatalf("generation %d, resourceVersion %s after the status writes; want 1, past %s", fw.Generation, fw.ResourceVersion, rv1)
	}

	// No write loop: a resync and renewals (and watermarks moving on)
	// leave the object as it is.
	wait.Until(t, settle, func() error { return idle(f.r) })
	applied, mark := fw.ResourceVersion, f.r.Writes.Len()
	f.r.Resync()
	f.firewallWatermark(applied, "node-a", "node-b", "node-c")
	time.Sleep(4 * steadyAgentRenew)
	wait.Until(t, settle, func() error { return idle(f.r) })
	if got := f.GetEgressFirewall(t, ns, "default").ResourceVersion; got != applied {
		t.Errorf("resourceVersion %s once Applied, then %s: something wrote the object", applied, got)
	}
	writes, _ := f.r.Writes.Since(mark)
	if got := statusWrites(writes, "egressfirewalls", "default"); len(got) != 0 {
		t.Errorf("status written while nothing changed: %v", got)
	}

	// Another writer's status-only write: put right, never Pending.
	mark = f.r.Writes.Len()
	fw = f.GetEgressFirewall(t, ns, "default")
	fw.Status = esv1.EgressFirewallStatus{Status: "tampered", Messages: []string{"tampered"}}
	if _, err := f.ES.K8sV1().EgressFirewalls(ns).UpdateStatus(context.Background(), fw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFirewall(ns, "default", reasons.Applied, "Applied on 3/3 nodes")
	f.checkPutRightOnce(mark, func(reqs []clustertest.Request) []clustertest.Request {
		return statusWrites(reqs, "egressfirewalls", "default")
	})

	// A spec change: Pending until the agents have taken it in.
	updated := f.UpdateEgressFirewall(t, ns, func(fw *esv1.EgressFirewall) { fw.Spec.Egress[1].To.CIDRSelector = "198.51.100.0/24" })
	if updated.Generation != 2 {
		t.Fatalf("generation %d after a spec change, want 2", updated.Generation)
	}
	f.waitFirewall(ns, "default", reasons.Pending, "Pending on 3 of 3 nodes: node-a, node-b, node-c")
	f.firewallWatermark(updated.ResourceVersion, "node-a", "node-b", "node-c")
	f.waitFirewall(ns, "default", reasons.Applied, "Applied on 3/3 nodes")
	f.firewallEvent(ns, "default", normal, reasons.Applied, "generation 2 applied on 3/3 nodes")
	if got := firewallState(t, f, "applied"); got != 1 {
		t.Errorf("egressflow_controller_egressfirewall{state=applied} = %v, want 1", got)
	}
	if got := firewallState(t, f, "pending"); got != 0 {
		t.Errorf("egressflow_controller_egressfirewall{state=pending} = %v, want 0", got)
	}
	if got := histogramCount(t, f.reg, "egressflow_controller_egressfirewall_apply_seconds"); got != 2 {
		t.Errorf("egressfirewall_apply_seconds has %d samples, want 2 (one per generation)", got)
	}
	var appliedEvents int
	for _, e := range f.Events(t, ns, "default") {
		if e.InvolvedObject.Kind == "EgressFirewall" && e.Reason == string(reasons.Applied) {
			appliedEvents += int(e.Count)
		}
	}
	if appliedEvents != 2 {
		t.Errorf("%d Applied Events, want 2 (one per generation)", appliedEvents)
	}
}

// TestFirewallLivenessAndPendingWarning: past the threshold a Warning
// names the lagging node; a dead agent is not waited for.
func TestFirewallLivenessAndPendingWarning(t *testing.T) {
	f := newRolloutFixture(t, true, func(o *cluster.Options) { o.FirewallPendingWarning = 500 * time.Millisecond }, "node-a", "node-b", "node-c")
	ns := f.Namespace(t)
	rv := f.CreateEgressFirewall(t, ns, esv1.EgressFirewallName, firewallRules).ResourceVersion
	f.firewallWatermark(rv, "node-a", "node-b")
	f.waitFirewall(ns, "default", reasons.Pending, "Pending on 1 of 3 nodes: node-c")
	f.firewallEvent(ns, "default", warning, reasons.Pending, "generation 1 not applied after")
	f.firewallEvent(ns, "default", warning, reasons.Pending, "on 1 of 3 nodes: node-c")
	if got := firewallState(t, f, "pending"); got != 1 {
		t.Errorf("egressflow_controller_egressfirewall{state=pending} = %v, want 1", got)
	}

	f.agents["node-c"].Stop()
	f.waitFirewall(ns, "default", reasons.Applied, "Applied on 2/2 nodes")
	f.firewallEvent(ns, "default", normal, reasons.Applied, "applied on 2/2 nodes")
}

// TestFirewallUnresolvedDNS: the dnsNames an agent publishes as
// unresolved on its node (heartbeat.Facts.FirewallUnresolvedDNS) are in
// status.messages after the summary, one message per name naming the
// nodes, while status.status and the summary keep saying where the rules
// are applied: no Invalid Event, no state change. Names of another
// namespace, or that no rule has, are left out. Each change of what the
// agents publish is one status write; renewals and a resync are none. An
// agent that dies no longer counts.
func TestFirewallUnresolvedDNS(t *testing.T) {
	f := newRolloutFixture(t, true, nil, "node-a", "node-b", "node-c")
	ns := f.Namespace(t)
	rules := esv1.EgressFirewallSpec{Egress: append([]esv1.EgressFirewallRule{
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "DB.Example.com."}}}, firewallRules.Egress...)}
	rv := f.CreateEgressFirewall(t, ns, esv1.EgressFirewallName, rules).ResourceVersion
	f.firewallWatermark(rv, "node-a", "node-b", "node-c")
	f.waitFirewall(ns, "default", reasons.Applied, "Applied on 3/3 nodes")
	wait.Until(t, settle, func() error { return idle(f.r) })

	// step publishes names (nil: none) on nodes, waits for the messages
	// after the summary, and checks that it took exactly one status write.
	step := func(what string, names map[string][]string, messages ...string) {
		t.Helper()
		mark := f.r.Writes.Len()
		for node, n := range names {
			f.agents[node].SetFirewallUnresolvedDNS(n...)
		}
		f.waitFirewall(ns, "default", reasons.Applied, "Applied on 3/3 nodes", messages...)
		wait.Until(t, settle, func() error { return idle(f.r) })
		time.Sleep(4 * clustertest.AgentRenew) // renewals, which must write nothing
		wait.Until(t, settle, func() error { return idle(f.r) })
		writes, _ := f.r.Writes.Since(mark)
		if got := statusWrites(writes, "egressfirewalls", "default"); len(got) != 1 {
			for _, w := range got {
				t.Logf("%s %s", w.At.Format(time.StampMicro), w.Body)
			}
			t.Errorf("%s: %d status writes, want 1", what, len(got))
		}
	}
	step("one name on one node", map[string][]string{"node-b": {ns + "/api.example.com"}},
		"node-b: dnsName api.example.com is not resolved yet")
	step("names no rule has and of other namespaces", map[string][]string{
		"node-a": {ns + "/db.example.com", ns + "/gone.example.com", "elsewhere/api.example.com"}},
		"node-b: dnsName api.example.com is not resolved yet",
		"node-a: dnsName db.example.com is not resolved yet")
	step("both names on another node", map[string][]string{"node-c": {ns + "/api.example.com", ns + "/db.example.com"}},
		"node-b, node-c: dnsName api.example.com is not resolved yet",
		"node-a, node-c: dnsName db.example.com is not resolved yet")
	step("resolved on node-b", map[string][]string{"node-b": nil},
		"node-c: dnsName api.example.com is not resolved yet",
		"node-a, node-c: dnsName db.example.com is not resolved yet")
	step("resolved on node-c", map[string][]string{"node-c": nil},
		"node-a: dnsName db.example.com is not resolved yet")

	// Nothing written on a resync; no Invalid Event on the way.
	mark := f.r.Writes.Len()
	f.r.Resync()
	time.Sleep(4 * clustertest.AgentRenew)
	wait.Until(t, settle, func() error { return idle(f.r) })
	writes, _ := f.r.Writes.Since(mark)
	if got := statusWrites(writes, "egressfirewalls", "default"); len(got) != 0 {
		t.Errorf("status written on a resync: %v", got)
	}
	for _, e := range f.Events(t, ns, "default") {
		if e.Reason == string(reasons.Invalid) {
			t.Errorf("an unresolved name sent an Invalid Event: %s", e.Message)
		}
	}

	// The agent that has names unresolved dies: they go with it.
	f.agents["node-a"].Stop()
	f.waitFirewall(ns, "default", reasons.Applied, "Applied on 2/2 nodes")
}

// TestFirewallInvalid: rules the CRD lets through and the agents cannot
// apply are named in status.messages, one message each (a cidrSelector of
// a family the cluster has no pod of, a nodeSelector that does not
// parse), with a Warning; status.status is Invalid with the first. A
// dnsName rule, which no resolver has answered, gives no message. The
// valid rules' progress is not reported in status.status while invalid.
func TestFirewallInvalid(t *testing.T) {
	f := newRolloutFixture(t, false, nil, "node-a")
	ns := f.Namespace(t) // the test cluster's pod CIDR is IPv4 only
	rv := f.CreateEgressFirewall(t, ns, esv1.EgressFirewallName, esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "api.example.com"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "2001:db8::/32"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{NodeSelector: &esv1.LabelSelector{MatchLabels: map[string]string{"role": "not valid"}}}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}},
	}}).ResourceVersion

	family := "rule 1: cidrSelector 2001:db8::/32 is IPv6, and the cluster has no pod of that family"
	text := "Invalid: " + family + "; and 1 more"
	var fw *esv1.EgressFirewall
	notApplied := wantReferenceStatus("EgressFirewall", reasons.Invalid)
	wait.Until(t, settle, func() error {
		fw = f.GetEgressFirewall(t, ns, "default")
		if fw.Status.Status != notApplied || len(fw.Status.Messages) == 0 || fw.Status.Messages[0] != text {
			return fmt.Errorf("status %q messages %q, want %q and the summary %q", fw.Status.Status, fw.Status.Messages, notApplied, text)
		}
		return nil
	})
	if len(fw.Status.Messages) != 3 || fw.Status.Messages[1] != family || !strings.HasPrefix(fw.Status.Messages[2], "rule 2: nodeSelector: ") {
		t.Errorf("messages %q, want the summary, the family of rule 1, then rule 2's nodeSelector", fw.Status.Messages)
	}
	f.firewallEvent(ns, "default", warning, reasons.Invalid, family+"; rule 2: nodeSelector: ")
	if got := firewallState(t, f, "invalid"); got != 1 {
		t.Errorf("egressflow_controller_egressfirewall{state=invalid} = %v, want 1", got)
	}

	// Applied on the node or not, it stays Invalid and says the same.
	mark := f.r.Writes.Len()
	f.firewallWatermark(rv, "node-a")
	time.Sleep(4 * steadyAgentRenew)
	wait.Until(t, settle, func() error { return idle(f.r) })
	if got := f.GetEgressFirewall(t, ns, "default"); got.Status.Status != notApplied || !slices.Equal(got.Status.Messages, fw.Status.Messages) {
		t.Errorf("once applied: status %q messages %q, want them unchanged", got.Status.Status, got.Status.Messages)
	}
	writes, _ := f.r.Writes.Since(mark)
	if got := statusWrites(writes, "egressfirewalls", "default"); len(got) != 0 {
		t.Errorf("status written though it says the same: %v", got)
	}

	// Fixed: the messages go, and it is Applied (the agent's watermark
	// must pass the fix's revision).
	fixed := f.UpdateEgressFirewall(t, ns, func(fw *esv1.EgressFirewall) {
		fw.Spec.Egress = slices.Delete(fw.Spec.Egress, 1, 3)
	})
	f.waitFirewall(ns, "default", reasons.Pending, "Pending on 1 of 1 nodes: node-a")
	f.firewallWatermark(fixed.ResourceVersion, "node-a")
	f.waitFirewall(ns, "default", reasons.Applied, "Applied on 1/1 nodes")
	f.firewallEvent(ns, "default", normal, reasons.Applied, "generation 2 applied on 1/1 nodes")
}

// TestFirewallMisnamed: an EgressFirewall not named default, stored while
// the CRD let it be, is applied by no agent, and the controller says so.
// Under a CRD that refuses the name (the current one), its status cannot
// be written: the Invalid Warning and the metric say it, and the refused
// write is not tried again until the object changes. Under one that lets
// it be, its status says it too.
func TestFirewallMisnamed(t *testing.T) {
	f := startAgents(t, false, "node-a")
	refused, written := f.Namespace(t), f.Namespace(t)
	f.SetFirewallNameRule(t, false)
	f.CreateEgressFirewall(t, refused, "other", firewallRules)
	f.SetFirewallNameRule(t, true)
	f.run(nil)

	const why = "EgressFirewall must be named default"
	f.firewallEvent(refused, "other", warning, reasons.Invalid, why)
	wait.Until(t, settle, func() error {
		if got := firewallState(t, f, "invalid"); got != 1 {
			return fmt.Errorf("egressflow_controller_egressfirewall{state=invalid} = %v, want 1", got)
		}
		return idle(f.r)
	})
	f.r.Resync()
	time.Sleep(4 * steadyAgentRenew)
	wait.Until(t, settle, func() error { return idle(f.r) })
	if got := statusWrites(f.r.Writes.All(), "egressfirewalls", "other"); len(got) != 1 {
		t.Errorf("%d status writes of the refused object after a resync, want the one refused", len(got))
	}

	f.SetFirewallNameRule(t, false)
	f.CreateEgressFirewall(t, written, "other", firewallRules)
	f.waitFirewall(written, "other", reasons.Invalid, "Invalid: "+why, why)
	f.firewallEvent(written, "other", warning, reasons.Invalid, why)
	if got := firewallState(t, f, "invalid"); got != 2 {
		t.Errorf("egressflow_controller_egressfirewall{state=invalid} = %v, want 2", got)
	}
	if got := firewallState(t, f, "pending"); got != 0 {
		t.Errorf("egressflow_controller_egressfirewall{state=pending} = %v, want 0: no agent is waited for", got)
	}
}
