package cluster_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// wantReferenceStatus is status.status of kind ("EgressFirewall",
// "EgressQoS") in a state (a Ready reason), as the reference's clients
// compare it: written out here, not taken from the code under test.
func wantReferenceStatus(kind string, state reasons.Reason) string {
	switch state {
	case reasons.Applied:
		return kind + " Rules applied"
	case reasons.Invalid:
		return kind + " Rules not correctly applied"
	}
	return "" // Pending, RevisionUnknown: the reference leaves it empty until every zone has reported
}

// rolloutFixture is an API server, nodes with agents whose EgressQoS and
// EgressFirewall watermarks the test sets (the agent's side of the status
// contract), and a controller: what the tests of both node-local APIs'
// status need.
type rolloutFixture struct {
	*clustertest.Env
	t      *testing.T
	agents map[string]*clustertest.Agent
	reg    *prometheus.Registry
	r      *clustertest.Replica
}

// Agent timings of the tests that do not test liveness: a renewal as
// often as the harness's, but a Lease that outlives a loaded machine's late
// renewals, so that no agent dies in the middle of a count of syncs.
const (
	steadyAgentRenew  = clustertest.AgentRenew
	steadyAgentExpire = 5 * time.Second
)

// newRolloutFixture starts nodes with agents (clustertest's short Leases
// if short, else steady ones) and a controller, opts applied to its
// options.
func newRolloutFixture(t *testing.T, short bool, opts func(*cluster.Options), nodes ...string) *rolloutFixture {
	f := startAgents(t, short, nodes...)
	f.run(opts)
	return f
}

// startAgents starts nodes with agents, and no controller yet (see run).
func startAgents(t *testing.T, short bool, nodes ...string) *rolloutFixture {
	env := clustertest.Start(t)
	f := &rolloutFixture{Env: env, t: t, agents: map[string]*clustertest.Agent{}}
	for _, n := range nodes {
		if short {
			f.agents[n] = env.Node(t, n, nil)
			continue
		}
		env.CreateNode(t, n, nil, true)
		f.agents[n] = env.StartAgentEvery(t, n, steadyAgentRenew, steadyAgentExpire)
	}
	return f
}

// run starts the controller, opts applied to its options, and waits until
// it leads and has processed what exists.
func (f *rolloutFixture) run(opts func(*cluster.Options)) {
	o := options("replica-a")
	f.reg = prometheus.NewRegistry()
	o.Registerer = f.reg
	if opts != nil {
		opts(&o)
	}
	f.r = f.RunController(f.t, o)
	f.r.WaitLeading(f.t, settle)
}

// qosWatermark makes the agents of nodes publish rv as their EgressQoS
// watermark; firewallWatermark, as their EgressFirewall one.
func (f *rolloutFixture) qosWatermark(rv string, nodes ...string) {
	for _, n := range nodes {
		f.agents[n].SetQoSRevision(rv)
	}
}

func (f *rolloutFixture) firewallWatermark(rv string, nodes ...string) {
	for _, n := range nodes {
		f.agents[n].SetFirewallRevision(rv)
	}
}

// statusWrites are the status writes among reqs of the objects of
// resource (plural) named name.
func statusWrites(reqs []clustertest.Request, resource, name string) []clustertest.Request {
	suffix := "/" + resource + "/" + name + "/status"
	return slices.DeleteFunc(reqs, func(r clustertest.Request) bool { return !strings.HasSuffix(r.Path, suffix) })
}

// checkPutRightOnce checks, once the controller is idle, that the status
// writes among those since mark (of one object: ofObject picks them) are
// the one write that puts another writer's status-only write right, and
// that it does not make the object Pending.
func (f *rolloutFixture) checkPutRightOnce(mark int, ofObject func([]clustertest.Request) []clustertest.Request) {
	f.t.Helper()
	wait.Until(f.t, settle, func() error { return idle(f.r) })
	writes, _ := f.r.Writes.Since(mark)
	writes = ofObject(writes)
	if len(writes) != 1 {
		f.t.Errorf("%d status writes to undo a status-only write, want 1", len(writes))
	}
	for _, w := range writes {
		if strings.Contains(w.Body, "Pending") {
			f.t.Errorf("a status-only write made the object Pending: %s", w.Body)
		}
	}
}

// queueSyncs is egressflow_controller_syncs_total{queue}, both results.
func queueSyncs(t *testing.T, reg *prometheus.Registry, queue string) float64 {
	t.Helper()
	return counter(t, reg, "egressflow_controller_syncs_total", map[string]string{"queue": queue, "result": "ok"}) +
		counter(t, reg, "egressflow_controller_syncs_total", map[string]string{"queue": queue, "result": "error"})
}

// eventOn waits for an Event about the object of kind named name in ns.
func (f *rolloutFixture) eventOn(ns, kind, name, eventType string, reason reasons.Reason, text string) {
	f.t.Helper()
	waitEventOn(f.t, f.Env, ns, kind, name, eventType, reason, text)
}

// stateGauge is the gauge name{state}.
func stateGauge(t *testing.T, reg *prometheus.Registry, name, state string) float64 {
	t.Helper()
	m := metric(t, reg, name, map[string]string{"state": state})
	if m == nil {
		t.Fatalf("no %s{state=%q}", name, state)
	}
	return m.GetGauge().GetValue()
}

// newerRV: resourceVersion a is past b, as integers.
func newerRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}
