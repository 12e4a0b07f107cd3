package cluster_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// routeSpec selects the namespaces labelled egress=gw and sends them
// through two static hops, one followed by BFD.
var routeSpec = esv1.AdminPolicyBasedExternalRouteSpec{
	From: esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egress": "gw"}}},
	NextHops: esv1.ExternalNextHops{StaticHops: []esv1.StaticHop{
		{IP: "172.18.0.5", BFDEnabled: true}, {IP: "172.18.0.6"},
	}},
}

// waitRoute waits until the policy name says status (the reference's
// Success, Fail or "") and messages (egressflow's summary, problems and
// notes), and returns it.
func (f *rolloutFixture) waitRoute(name, status string, messages ...string) *esv1.AdminPolicyBasedExternalRoute {
	f.t.Helper()
	var route *esv1.AdminPolicyBasedExternalRoute
	wait.Until(f.t, settle, func() error {
		route = f.GetExternalRoute(f.t, name)
		if route.Status.Status != status || !slices.Equal(route.Status.Messages, messages) {
			return fmt.Errorf("%s: status %q messages %q, want %q %q", name, route.Status.Status, route.Status.Messages, status, messages)
		}
		return nil
	})
	return route
}

func (f *rolloutFixture) routeWatermark(rv string, nodes ...string) {
	for _, n := range nodes {
		f.agents[n].SetExternalRouteRevision(rv)
	}
}

// routeEvents are the Events about the policy name with reason, their
// messages.
func (f *rolloutFixture) routeEvents(name string, reason reasons.Reason) []string {
	var out []string
	for _, e := range f.Events(f.t, metav1.NamespaceDefault, name) {
		if e.InvolvedObject.Kind == "AdminPolicyBasedExternalRoute" && e.Reason == string(reason) {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestExternalRouteStatusFollowsAgents: an AdminPolicyBasedExternalRoute
// (cluster-scoped, of any name) is Pending, status.status empty, on the
// nodes whose agents have not published an external route watermark at
// or past its generation's revision, and Success once all have, with one
// Applied Event and status.lastTransitionTime set. The other APIs'
// watermarks do not count. What the agents note (a next hop down on their
// node, a gateway pod that is no hop) follows the summary, one message per
// note (in the notes' order) naming the nodes; status.status stays Success; a NextHopsDegraded
// Warning lists them and a NextHopsRecovered Event says when none is left.
// Each change is one status write; renewals write nothing. A dead agent's
// notes go with it.
func TestExternalRouteStatusFollowsAgents(t *testing.T) {
	f := newRolloutFixture(t, true, nil, "node-a", "node-b", "node-c")
	created := f.CreateExternalRoute(t, "via-gw", routeSpec)
	rv := created.ResourceVersion
	f.waitRoute("via-gw", "", "Pending on 3 of 3 nodes: node-a, node-b, node-c")
	f.qosWatermark(rv, "node-a", "node-b", "node-c")
	f.firewallWatermark(rv, "node-a", "node-b", "node-c")
	f.routeWatermark(rv, "node-a", "node-b")
	f.waitRoute("via-gw", "", "Pending on 1 of 3 nodes: node-c")
	f.routeWatermark(rv, "node-c")
	route := f.waitRoute("via-gw", esv1.ExternalRouteApplied, "Applied on 3/3 nodes")
	f.eventOn(metav1.NamespaceDefault, "AdminPolicyBasedExternalRoute", "via-gw", normal, reasons.Applied, "generation 1 applied on 3/3 nodes")
	if route.Status.LastTransitionTime.IsZero() {
		t.Error("status.lastTransitionTime not set")
	}
	if got := stateGauge(t, f.reg, "egressflow_controller_externalroute", "applied"); got != 1 {
		t.Errorf("egressflow_controller_externalroute{state=applied} = %v, want 1", got)
	}
	wait.Until(t, settle, func() error { return idle(f.r) })

	step := func(what string, notes map[string]map[string][]string, messages ...string) *esv1.AdminPolicyBasedExternalRoute {
		t.Helper()
		mark := f.r.Writes.Len()
		for node, n := range notes {
			f.agents[node].SetExternalRouteNotes(n)
		}
		route := f.waitRoute("via-gw", esv1.ExternalRouteApplied, append([]string{"Applied on 3/3 nodes"}, messages...)...)
		wait.Until(t, settle, func() error { return idle(f.r) })
		time.Sleep(4 * clustertest.AgentRenew) // renewals, which must write nothing
		wait.Until(t, settle, func() error { return idle(f.r) })
		writes, _ := f.r.Writes.Since(mark)
		if got := statusWrites(writes, "adminpolicybasedexternalroutes", "via-gw"); len(got) != 1 {
			t.Errorf("%s: %d status writes, want 1", what, len(got))
		}
		return route
	}
	down := "next hop 172.18.0.5: BFD session down"
	before := route.Status.LastTransitionTime
	time.Sleep(time.Second) // lastTransitionTime has a resolution of a second
	degraded := step("a hop down on one node", map[string]map[string][]string{
		"node-b": {"via-gw": {down}, "another-policy": {"next hop 192.0.2.1: BFD session down"}}},
		"node-b note: "+down)
	if !degraded.Status.LastTransitionTime.After(before.Time) {
		t.Errorf("status.lastTransitionTime %v after a change, was %v", degraded.Status.LastTransitionTime, before)
	}
	f.eventOn(metav1.NamespaceDefault, "AdminPolicyBasedExternalRoute", "via-gw", warning, reasons.NextHopsDegraded, "node-b note: "+down)
	noARP := "next hop 172.18.0.6: no neighbour answer (ARP or NDP)"
	step("the same hop on another node, and another note", map[string]map[string][]string{
		"node-c": {"via-gw": {down, noARP}}},
		"node-b, node-c note: "+down, "node-c note: "+noARP)
	step("up again on node-b", map[string]map[string][]string{"node-b": nil},
		"node-c note: "+down, "node-c note: "+noARP)
	step("up again everywhere", map[string]map[string][]string{"node-c": {}})
	f.eventOn(metav1.NamespaceDefault, "AdminPolicyBasedExternalRoute", "via-gw", normal, reasons.NextHopsRecovered, "every node")
	if got := len(f.routeEvents("via-gw", reasons.NextHopsDegraded)); got < 2 {
		t.Errorf("%d NextHopsDegraded Events for 3 changes with hops down, want one each (the recorder may fold repeats, not drop changes)", got)
	}
	for _, m := range f.routeEvents("via-gw", reasons.Invalid) {
		t.Errorf("a hop down sent an Invalid Event: %s", m)
	}

	// The agent with a note dies: its note goes with it.
	f.agents["node-a"].SetExternalRouteNotes(map[string][]string{"via-gw": {down}})
	f.waitRoute("via-gw", esv1.ExternalRouteApplied, "Applied on 3/3 nodes", "node-a note: "+down)
	f.agents["node-a"].Stop()
	f.waitRoute("via-gw", esv1.ExternalRouteApplied, "Applied on 2/2 nodes")
}

// TestExternalRouteInvalid: what the API server lets through and no agent
// can apply (label values that are not label values, in the selectors of
// two dynamic hops) is in status.messages, one message each, with
// status.status Fail and an Invalid Warning; the rest of the policy
// applies. Fixing it brings Success back.
func TestExternalRouteInvalid(t *testing.T) {
	f := newRolloutFixture(t, true, nil, "node-a")
	spec := routeSpec
	spec.NextHops.DynamicHops = []esv1.DynamicHop{
		{PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "not valid"}},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "yes"}}},
		{PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "gw"}},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "not valid"}}},
	}
	rv := f.CreateExternalRoute(t, "broken", spec).ResourceVersion
	f.routeWatermark(rv, "node-a")
	var route *esv1.AdminPolicyBasedExternalRoute
	wait.Until(t, settle, func() error {
		route = f.GetExternalRoute(t, "broken")
		if route.Status.Status != esv1.ExternalRouteNotApplied || len(route.Status.Messages) != 3 {
			return fmt.Errorf("status %q messages %q, want Fail and 3 messages", route.Status.Status, route.Status.Messages)
		}
		return nil
	})
	if m := route.Status.Messages; !strings.HasPrefix(m[0], "Invalid: spec.nextHops.dynamic[0].podSelector: ") ||
		!strings.HasPrefix(m[1], "spec.nextHops.dynamic[0].podSelector: ") || !strings.HasPrefix(m[2], "spec.nextHops.dynamic[1].namespaceSelector: ") {
		t.Errorf("messages %q: want the summary, then each selector", m)
	}
	f.eventOn(metav1.NamespaceDefault, "AdminPolicyBasedExternalRoute", "broken", warning, reasons.Invalid, "spec.nextHops.dynamic[1].namespaceSelector")
	if got := stateGauge(t, f.reg, "egressflow_controller_externalroute", "invalid"); got != 1 {
		t.Errorf("egressflow_controller_externalroute{state=invalid} = %v, want 1", got)
	}

	fixed := f.UpdateExternalRoute(t, "broken", func(r *esv1.AdminPolicyBasedExternalRoute) { r.Spec = routeSpec })
	f.routeWatermark(fixed.ResourceVersion, "node-a")
	f.waitRoute("broken", esv1.ExternalRouteApplied, "Applied on 1/1 nodes")
}
