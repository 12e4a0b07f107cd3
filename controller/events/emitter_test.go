package events_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// settle bounds each wait for Events to reach the API server; it matters
// only when a test fails.
const settle = 30 * time.Second

// Events are written as the agent's service account, with the deploy/
// RBAC: create and patch, nothing else.
const (
	component = "egressflow-test"
	host      = "node-a"
)

// env is a real API server, a namespace, and an admin client to read the
// Events back.
type env struct {
	cluster *kubetest.Cluster
	admin   kubernetes.Interface
	ns      string
}

func start(t *testing.T) *env {
	t.Helper()
	c := kubetest.Start(t)
	cfg := c.Config(kubetest.Admin)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Apply(t, cfg, filepath.Join(root, "deploy/agent/rbac-dataplane.yaml"))
	admin := kubernetes.NewForConfigOrDie(cfg)
	ns, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "events-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{cluster: c, admin: admin, ns: ns.Name}
}

// emitter is an Emitter writing as the agent, through wrap if not nil, and
// its counter.
type emitter struct {
	*events.Emitter
	counter *prometheus.CounterVec
	reg     *prometheus.Registry
}

func (e *env) emitter(t *testing.T, opts events.Options, wrap func(http.RoundTripper) http.RoundTripper) *emitter {
	t.Helper()
	cfg := e.cluster.Config(kubetest.Agent)
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	opts.Component, opts.Host = component, host
	opts.Counter = events.NewCounter("test")
	reg := prometheus.NewRegistry()
	reg.MustRegister(opts.Counter)
	em, err := events.NewForConfig(cfg, kubescheme.Scheme, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &emitter{Emitter: em, counter: opts.Counter, reg: reg}
}

// run runs the emitter until the test ends (or stop is called) and returns
// stop, which waits for Run to return.
func (em *emitter) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		em.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// counted sums the counter of one result (and one type, if not empty).
func (em *emitter) counted(t *testing.T, result, eventType string) float64 {
	t.Helper()
	families, err := em.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == result && (eventType == "" || labels["type"] == eventType) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// configMap is an involved object; Events do not need it to exist.
func configMap(ns string, i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("obj-%04d", i), UID: types.UID(fmt.Sprintf("uid-%04d", i))}}
}

// list returns the Events of the namespace.
func (e *env) list(t *testing.T) []corev1.Event {
	t.Helper()
	list, err := e.admin.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// occurrences sums, per object name and "type reason: message", the counts
// of the Events on the API server.
func occurrences(evs []corev1.Event) map[string]map[string]int32 {
	out := map[string]map[string]int32{}
	for _, e := range evs {
		name := e.InvolvedObject.Name
		if out[name] == nil {
			out[name] = map[string]int32{}
		}
		out[name][e.Type+" "+e.Reason+": "+e.Message] += e.Count
	}
	return out
}

// checkShape checks that an Event says who wrote it about what, as
// client-go's recorder did.
func checkShape(t *testing.T, e corev1.Event) {
	t.Helper()
	o := e.InvolvedObject
	var problems []string
	if o.Kind != "ConfigMap" || o.APIVersion != "v1" || o.Namespace != e.Namespace || !strings.HasPrefix(string(o.UID), "uid-") ||
		strings.TrimPrefix(string(o.UID), "uid-") != strings.TrimPrefix(o.Name, "obj-") {
		problems = append(problems, fmt.Sprintf("involvedObject %+v", o))
	}
	if e.Source.Component != component || e.Source.Host != host || e.ReportingController != component || e.ReportingInstance != host {
		problems = append(problems, fmt.Sprintf("source %+v, reporting %s/%s", e.Source, e.ReportingController, e.ReportingInstance))
	}
	if e.Count < 1 || e.FirstTimestamp.IsZero() || e.LastTimestamp.Before(&e.FirstTimestamp) {
		problems = append(problems, fmt.Sprintf("count %d, first %v, last %v", e.Count, e.FirstTimestamp, e.LastTimestamp))
	}
	if !strings.HasPrefix(e.Name, o.Name+".") {
		problems = append(problems, "name "+e.Name)
	}
	if len(problems) > 0 {
		t.Errorf("Event %s: %s", e.Name, strings.Join(problems, "; "))
	}
}

// TestLatestNormalAndEveryWarningReachTheAPI: objects change many times
// in a burst, from several goroutines at once, while the Emitter writes.
// Every Warning reaches the API server with its full count, and so does
// each object's latest Normal; older Normals may be superseded, and the
// counter accounts for every emission.
func TestLatestNormalAndEveryWarningReachTheAPI(t *testing.T) {
	e := start(t)
	em := e.emitter(t, events.Options{}, nil)
	em.run(t)

	const (
		objects = 300
		steps   = 8 // Normals per object: "step 0" .. "step 7"
		repeats = 4 // of one Warning per object
	)
	want := map[string]map[string]int32{} // object -> Warning -> count
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < objects; i += 4 {
				obj := configMap(e.ns, i)
				w := map[string]int32{}
				warn := func(reason, message string) {
					em.Event(obj, corev1.EventTypeWarning, reason, message)
					w[corev1.EventTypeWarning+" "+reason+": "+message]++
				}
				for s := range steps {
					em.Eventf(obj, corev1.EventTypeNormal, "Assigned", "step %d", s)
					switch s {
					case 1:
						warn("HostLost", "host node-a lost")
					case 3:
						warn("HostLost", "host node-b lost")
					case 5:
						warn("NoEndpoints", "no endpoint")
					}
					if s%2 == 0 {
						warn("UnknownNetwork", "no table")
					}
				}
				mu.Lock()
				want[obj.Name] = w
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	emitted := float64(objects * (steps + 3 + repeats))
	if got := em.counted(t, "emitted", ""); got != emitted {
		t.Fatalf("counted %v emitted, want %v", got, emitted)
	}

	latest := corev1.EventTypeNormal + " Assigned: step 7"
	wait.Until(t, settle, func() error {
		got := occurrences(e.list(t))
		for name, warnings := range want {
			for w, count := range warnings {
				if got[name][w] != count {
					return fmt.Errorf("%s: %q has count %d on the API server, want %d", name, w, got[name][w], count)
				}
			}
			if got[name][latest] != 1 {
				return fmt.Errorf("%s: the latest Normal %q has count %d on the API server, want 1", name, latest, got[name][latest])
			}
		}
		return nil
	})
	evs := e.list(t)
	for _, ev := range evs {
		checkShape(t, ev)
		if ev.Type == corev1.EventTypeNormal && (ev.Reason != "Assigned" || !strings.HasPrefix(ev.Message, "step ")) {
			t.Errorf("unexpected Event %s %s: %s", ev.Type, ev.Reason, ev.Message)
		}
	}
	for name, got := range occurrences(evs) {
		for w, count := range got {
			if strings.HasPrefix(w, corev1.EventTypeWarning) && want[name][w] != count {
				t.Errorf("%s: %q has count %d, want %d", name, w, count, want[name][w])
			}
		}
	}

	// Every emission is accounted for: written or (a Normal) superseded.
	wait.Until(t, settle, func() error {
		written, superseded := em.counted(t, "written", ""), em.counted(t, "superseded", "")
		if written+superseded != emitted {
			return fmt.Errorf("%v written + %v superseded, want %v emitted", written, superseded, emitted)
		}
		return nil
	})
	if n := em.counted(t, "superseded", corev1.EventTypeWarning); n != 0 {
		t.Errorf("%v Warnings superseded", n)
	}
	if n := em.counted(t, "abandoned", "") + em.counted(t, "error", ""); n != 0 {
		t.Errorf("%v Events abandoned or failed", n)
	}
	t.Logf("%v emitted: %v written (%d Events on the API server), %v Normals superseded",
		emitted, em.counted(t, "written", ""), len(evs), em.counted(t, "superseded", ""))
}

// failing answers 503 to the first n Event writes, as an overloaded or
// restarting API server does, and passes everything else on.
type failing struct {
	left   atomic.Int64
	failed atomic.Int64
}

func (f *failing) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/events") && f.left.Add(-1) >= 0 {
			f.failed.Add(1)
			body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected: unavailable","reason":"ServiceUnavailable","code":503}`
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
		}
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestFailedWritesAreRetried: while the API server refuses Event writes,
// nothing is given up: every Warning and the latest Normal arrive once it
// accepts them again, each exactly once.
func TestFailedWritesAreRetried(t *testing.T) {
	e := start(t)
	f := &failing{}
	f.left.Store(60)
	em := e.emitter(t, events.Options{RetryBaseDelay: 10 * time.Millisecond, RetryMaxDelay: 200 * time.Millisecond}, f.wrap)
	em.run(t)
	const objects = 20
	for i := range objects {
		obj := configMap(e.ns, i)
		em.Event(obj, corev1.EventTypeWarning, "NoMatchingNode", "no node")
		em.Event(obj, corev1.EventTypeNormal, "Assigned", "first")
		em.Event(obj, corev1.EventTypeNormal, "Assigned", "second")
	}
	wait.Until(t, settle, func() error {
		got := occurrences(e.list(t))
		for i := range objects {
			name := configMap(e.ns, i).Name
			if got[name]["Warning NoMatchingNode: no node"] != 1 || got[name]["Normal Assigned: second"] != 1 {
				return fmt.Errorf("%s: %v on the API server", name, got[name])
			}
		}
		return nil
	})
	for _, ev := range e.list(t) {
		checkShape(t, ev)
	}
	if f.failed.Load() != 60 {
		t.Errorf("%d writes refused, want 60", f.failed.Load())
	}
	if n := em.counted(t, "error", ""); n == 0 {
		t.Error("no failed write counted")
	}
	if n := em.counted(t, "abandoned", ""); n != 0 {
		t.Errorf("%v Events abandoned", n)
	}
}

// TestRepeatRaisesTheCount: an Event identical to one written before
// raises that Event's count; once the API server has deleted it (its TTL),
// a repeat is a new Event.
func TestRepeatRaisesTheCount(t *testing.T) {
	e := start(t)
	em := e.emitter(t, events.Options{}, nil)
	em.run(t)
	obj := configMap(e.ns, 0)
	only := func(count int32) corev1.Event {
		t.Helper()
		var ev corev1.Event
		wait.Until(t, settle, func() error {
			evs := e.list(t)
			if len(evs) != 1 || evs[0].Count != count {
				return fmt.Errorf("%d Events (%+v), want one of count %d", len(evs), evs, count)
			}
			ev = evs[0]
			return nil
		})
		checkShape(t, ev)
		return ev
	}
	em.Event(obj, corev1.EventTypeWarning, "HostLost", "host node-a lost")
	first := only(1)
	time.Sleep(1100 * time.Millisecond) // lastTimestamp has a resolution of a second
	em.Event(obj, corev1.EventTypeWarning, "HostLost", "host node-a lost")
	em.Event(obj, corev1.EventTypeWarning, "HostLost", "host node-a lost")
	again := only(3)
	if again.Name != first.Name || !again.FirstTimestamp.Equal(&first.FirstTimestamp) || !again.LastTimestamp.After(first.LastTimestamp.Time) {
		t.Errorf("repeat: %s first %v last %v; before: %s first %v last %v", again.Name, again.FirstTimestamp, again.LastTimestamp,
			first.Name, first.FirstTimestamp, first.LastTimestamp)
	}

	if err := e.admin.CoreV1().Events(e.ns).Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	em.Event(obj, corev1.EventTypeWarning, "HostLost", "host node-a lost")
	if anew := only(1); anew.Name == first.Name {
		t.Errorf("the repeat after deletion reused the name %s", anew.Name)
	}
}

// TestQueuedEventsAreWrittenOnStop: what is emitted before the Emitter
// stops is written during its drain.
func TestQueuedEventsAreWrittenOnStop(t *testing.T) {
	e := start(t)
	em := e.emitter(t, events.Options{}, nil)
	stop := em.run(t)
	const objects = 50
	for i := range objects {
		em.Event(configMap(e.ns, i), corev1.EventTypeWarning, "NoEndpoints", "no endpoint")
	}
	stop()
	if n := len(e.list(t)); n != objects {
		t.Errorf("%d Events after the stop, want %d", n, objects)
	}
	if n := em.counted(t, "written", ""); n != objects {
		t.Errorf("%v written, want %d", n, objects)
	}
	if n := em.counted(t, "abandoned", ""); n != 0 {
		t.Errorf("%v abandoned at the stop", n)
	}
}

// TestGoneNamespaceIsGivenUp: an Event the API server refuses for good
// (its namespace does not exist) is dropped at once, not retried, and
// does not hold up the others.
func TestGoneNamespaceIsGivenUp(t *testing.T) {
	e := start(t)
	em := e.emitter(t, events.Options{}, nil)
	em.run(t)
	em.Event(configMap("no-such-namespace", 0), corev1.EventTypeWarning, "NoEndpoints", "no endpoint")
	em.Event(configMap(e.ns, 1), corev1.EventTypeWarning, "NoEndpoints", "no endpoint")
	wait.Until(t, settle, func() error {
		if n := em.counted(t, "abandoned", ""); n != 1 {
			return fmt.Errorf("%v abandoned", n)
		}
		if n := len(e.list(t)); n != 1 {
			return fmt.Errorf("%d Events in the namespace", n)
		}
		return nil
	})
	if n := em.counted(t, "error", ""); n != 0 {
		t.Errorf("%v retried failures, want none", n)
	}
	if n := em.Pending(); n != 0 {
		t.Errorf("%d pending", n)
	}
}
