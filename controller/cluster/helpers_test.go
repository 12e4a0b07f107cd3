package cluster_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// Timings of the tests' controllers: leader election shortened so that a
// handover takes a fraction of a second.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 100 * time.Millisecond
	// settle bounds every wait for the controller to converge. It only
	// matters when a test fails; convergence takes milliseconds.
	settle = 15 * time.Second
)

func options(identity string) cluster.Options {
	return cluster.Options{
		Identity: identity, LeaderElection: true,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ServiceWorkers: 2, NodeWorkers: 2,
	}
}

// fixture is one test's API server, namespace and controller.
type fixture struct {
	*clustertest.Env
	t      *testing.T
	ns     string
	labels *clustertest.LabelWatcher
	// reg holds the metrics of the replica started last by run.
	reg *prometheus.Registry
}

// newFixture starts an API server with the deploy/ RBAC, the given Ready
// nodes with live agents (name or name=k:v,k:v for labels), and a label
// watcher. The controller is started by run.
func newFixture(t *testing.T, nodes ...string) *fixture {
	env := clustertest.Start(t)
	f := &fixture{Env: env, t: t, ns: env.Namespace(t)}
	for _, spec := range nodes {
		name, labels := parseNode(spec)
		env.Node(t, name, labels)
	}
	f.labels = env.WatchLabels(t)
	return f
}

// newFixtureWithAgents is newFixture for plain nodes whose agents the test
// stops or restarts: it returns them by node.
func newFixtureWithAgents(t *testing.T, nodes ...string) (*fixture, map[string]*clustertest.Agent) {
	env := clustertest.Start(t)
	f := &fixture{Env: env, t: t, ns: env.Namespace(t)}
	agents := map[string]*clustertest.Agent{}
	for _, n := range nodes {
		agents[n] = env.Node(t, n, nil)
	}
	f.labels = env.WatchLabels(t)
	return f, agents
}

func parseNode(spec string) (string, map[string]string) {
	name, rest, _ := strings.Cut(spec, "=")
	labels := map[string]string{}
	for _, kv := range strings.Split(rest, ",") {
		if k, v, ok := strings.Cut(kv, ":"); ok {
			labels[k] = v
		}
	}
	return name, labels
}

// run starts a leader-elected controller replica and waits until it leads
// and has processed what exists.
func (f *fixture) run(identity string) *clustertest.Replica {
	return f.runWith(options(identity))
}

// runWith is run with other options.
func (f *fixture) runWith(opts cluster.Options) *clustertest.Replica {
	f.reg = prometheus.NewRegistry()
	opts.Registerer = f.reg
	r := f.RunController(f.t, opts)
	r.WaitLeading(f.t, settle)
	return r
}

// service creates a LoadBalancer Service with ingress IP 192.0.2.<n>, pod
// endpoints on the given nodes, and an EgressService with spec.
func (f *fixture) service(name string, spec esv1.EgressServiceSpec, endpointNodes ...string) {
	f.t.Helper()
	f.loadBalancer(name, endpointNodes...)
	f.CreateEgressService(f.t, f.ns, name, spec)
}

// loadBalancer creates the LoadBalancer Service name with an endpoint on
// each of endpointNodes (in its EndpointSlice), and no EgressService.
func (f *fixture) loadBalancer(name string, endpointNodes ...string) {
	f.t.Helper()
	var eps []clustertest.Endpoint
	for i, n := range endpointNodes {
		eps = append(eps, clustertest.Endpoint{IP: fmt.Sprintf("10.128.%d.%d", i/200, 10+i%200), Node: n})
	}
	f.CreateService(f.t, clustertest.Service{Namespace: f.ns, Name: name, IngressIPs: []string{"192.0.2.10"}, Endpoints: eps})
}

func (f *fixture) label(name string) string { return assign.LabelKey(f.ns, name) }

// waitStatus waits until the EgressService says host, with a Ready
// condition of that reason for its current generation, and returns it.
func (f *fixture) waitStatus(name, host string, reason reasons.Reason) *esv1.EgressService {
	f.t.Helper()
	var es *esv1.EgressService
	wait.Until(f.t, settle, func() error {
		es = f.GetEgressService(f.t, f.ns, name)
		cond := meta.FindStatusCondition(es.Status.Conditions, cluster.ConditionReady)
		switch {
		case es.Status.Host != host:
			return fmt.Errorf("host %q, want %q (conditions %+v)", es.Status.Host, host, es.Status.Conditions)
		case cond == nil || cond.Reason != string(reason):
			return fmt.Errorf("ready condition %+v, want reason %s", cond, reason)
		case cond.ObservedGeneration != es.Generation:
			return fmt.Errorf("observedGeneration %d, generation %d", cond.ObservedGeneration, es.Generation)
		}
		wantStatus := metav1.ConditionFalse
		if host != "" {
			wantStatus = metav1.ConditionTrue
		}
		if cond.Status != wantStatus {
			return fmt.Errorf("ready status %s, want %s", cond.Status, wantStatus)
		}
		return nil
	})
	return es
}

// waitLabelOn waits until exactly the given nodes carry the label of name.
func (f *fixture) waitLabelOn(name string, nodes ...string) {
	f.t.Helper()
	key := f.label(name)
	wait.Until(f.t, settle, func() error {
		if got := f.NodesWithLabel(f.t, key); !slices.Equal(got, nodes) {
			return fmt.Errorf("label %s on %v, want %v", key, got, nodes)
		}
		return nil
	})
}

// waitEvent waits for an Event about name with reason and a message
// containing text.
func (f *fixture) waitEvent(name string, eventType string, reason reasons.Reason, text string) {
	f.t.Helper()
	wait.Until(f.t, settle, func() error {
		evs := f.Events(f.t, f.ns, name)
		for _, e := range evs {
			if e.Type == eventType && e.Reason == string(reason) && strings.Contains(e.Message, text) {
				return nil
			}
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Type+" "+e.Reason+": "+e.Message)
		}
		return fmt.Errorf("no %s event %s containing %q among %q", eventType, reason, text, got)
	})
}

// waitEventOn waits for an Event about the object of kind named name in
// ns (default for a cluster-scoped one), of eventType with reason and a
// message containing text.
func waitEventOn(t *testing.T, env *clustertest.Env, ns, kind, name, eventType string, reason reasons.Reason, text string) {
	t.Helper()
	wait.Until(t, settle, func() error {
		var got []string
		for _, e := range env.Events(t, ns, name) {
			if e.InvolvedObject.Kind == kind && e.Type == eventType && e.Reason == string(reason) && strings.Contains(e.Message, text) {
				return nil
			}
			got = append(got, e.Type+" "+e.Reason+": "+e.Message)
		}
		return fmt.Errorf("no %s Event %s containing %q on %s %s among %q", eventType, reason, text, kind, name, got)
	})
}

// otherThan returns the one node of nodes that is not n.
func otherThan(n string, nodes ...string) string {
	for _, o := range nodes {
		if o != n {
			return o
		}
	}
	return ""
}

var (
	normal  = corev1.EventTypeNormal
	warning = corev1.EventTypeWarning
)

var errNoHost = errors.New("no host yet")

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func idle(r *clustertest.Replica) error {
	if !r.Idle() {
		return errors.New("controller busy")
	}
	return nil
}

// statusWriteAt is when replica r first wrote host into name's status.
func statusWriteAt(t *testing.T, r *clustertest.Replica, name, host string) time.Time {
	t.Helper()
	for _, w := range r.Writes.All() {
		if strings.HasSuffix(w.Path, "/egressservices/"+name+"/status") && strings.Contains(w.Body, `"host":"`+host+`"`) {
			return w.At
		}
	}
	t.Fatalf("replica never wrote host %s for %s", host, name)
	return time.Time{}
}

// eventsEmitted is how many Events the replica of reg emitted (counted when
// emitted, before they are written asynchronously).
func eventsEmitted(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return eventsCounted(t, reg, "emitted")
}

// eventsCounted sums egressflow_controller_events_total of one result
// over types and reasons.
func eventsCounted(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	return eventsWhere(t, reg, map[string]string{"result": result})
}

// eventsWhere sums egressflow_controller_events_total over the series
// whose labels have the values of want.
func eventsWhere(t *testing.T, reg *prometheus.Registry, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range families {
		if mf.GetName() != "egressflow_controller_events_total" {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
