//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// expectAdmissionPolicies checks deploy/admission's policies on the real
// cluster, wherever egressflow is installed, with the credentials the
// components' pods really hold: tokens of their ServiceAccounts bound to
// their pods (what the kubelet projects into them, with the node's name in
// them). An agent renews its own Lease, but another node's Lease or the
// leader Lease is refused with a message that says why; a token not bound
// to a pod writes no Lease at all. The controller adds and removes a
// service label on a Node, but cannot change another label, an annotation
// or the spec.
func expectAdmissionPolicies(t *testing.T, c *Cluster) {
	ctx := context.Background()
	self, other := c.Nodes[0], c.Nodes[1]

	agent := c.componentClient("egressflow-agent", "app.kubernetes.io/name=egressflow-agent", self)
	leases := agent.CoordinationV1().Leases(c.InstallNamespace())
	wait.Until(t, convergeTimeout, func() error {
		own, err := leases.Get(ctx, self.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		own.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = leases.Update(ctx, own, metav1.UpdateOptions{})
		return err // a conflict with the agent's own renewal: try again
	})
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: admitted", what)
		} else if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want a refusal that says %q", what, err, want)
		} else {
			t.Logf("%s: refused: %v", what, err)
		}
	}
	// Each agent keeps its peer-facts Lease beside its heartbeat Lease.
	wait.Until(t, convergeTimeout, func() error {
		for _, n := range []*Node{self, other} {
			l, err := c.Kube.CoordinationV1().Leases(c.InstallNamespace()).Get(ctx, n.Name+".facts", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Labels["egressflow.io/heartbeat"] != "node-facts" || l.Annotations["egressflow.io/bridge-mac"] == "" {
				return fmt.Errorf("peer-facts Lease of %s: labels %v, annotations %v", n.Name, l.Labels, l.Annotations)
			}
		}
		return nil
	})
	for _, name := range []string{other.Name, other.Name + ".facts", "egressflow-controller"} {
		// The leader renews its Lease every 250 ms, and the agents theirs:
		// an update from a stale read conflicts before admission judges
		// it, so read again until it is judged.
		var err error
		for range 20 {
			var l *coordinationv1.Lease
			if l, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
				break
			}
		}
		refused("agent on "+self.Name+" renews Lease "+name, err, fmt.Sprintf("may write only its own heartbeat Lease %q and peer-facts Lease %q, not %q", self.Name, self.Name+".facts", name))
		// RBAC grants no delete: refused before admission.
		refused("agent on "+self.Name+" deletes Lease "+name, leases.Delete(ctx, name, metav1.DeleteOptions{}), "forbidden")
	}
	forged := &coordinationLease{name: "forged", node: self.Name}
	_, err := leases.Create(ctx, forged.lease(), metav1.CreateOptions{})
	refused("agent on "+self.Name+" creates Lease forged", err, "may write only its own heartbeat Lease")

	unbound := c.componentClientWith("egressflow-agent", nil)
	own, err := unbound.CoordinationV1().Leases(c.InstallNamespace()).Get(ctx, self.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = unbound.CoordinationV1().Leases(c.InstallNamespace()).Update(ctx, own, metav1.UpdateOptions{})
	refused("an agent token bound to no pod renews "+self.Name, err, "pod-bound service-account token")

	controller := c.componentClient("egressflow-controller", "app.kubernetes.io/name=egressflow-controller", nil)
	nodes := controller.CoreV1().Nodes()
	patch := func(p string) error {
		_, err := nodes.Patch(ctx, other.Name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	if err := patch(`{"metadata":{"labels":{"egress-service.k8s.ovn.org/admission-test":""}}}`); err != nil {
		t.Errorf("controller adds a service label: %v", err)
	}
	if err := patch(`{"metadata":{"labels":{"egress-service.k8s.ovn.org/admission-test":null}}}`); err != nil {
		t.Errorf("controller removes a service label: %v", err)
	}
	refused("controller adds label team=x", patch(`{"metadata":{"labels":{"team":"x"}}}`), "may change only the labels under egress-service.k8s.ovn.org/")
	refused("controller removes label kubernetes.io/hostname", patch(`{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`), "may change only the labels under egress-service.k8s.ovn.org/")
	refused("controller annotates", patch(`{"metadata":{"annotations":{"x":"y"}}}`), "may change no annotation of Node")
	for _, value := range []string{`"[]"`, "null"} {
		if err := patch(`{"metadata":{"annotations":{"cloud.network.openshift.io/egress-ipconfig":` + value + `}}}`); err != nil {
			t.Errorf("controller writes the cloud capacity annotation (%s): %v", value, err)
		}
	}
	refused("controller cordons", patch(`{"spec":{"unschedulable":true}}`), "may change nothing of Node")
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, other.Name, metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable || n.Labels["team"] != "" || n.Labels[corev1.LabelHostname] == "" {
		t.Errorf("node %s after the refused patches: %v, %v", other.Name, n, err)
	}
}

type coordinationLease struct{ name, node string }

func (l coordinationLease) lease() *coordinationv1.Lease {
	holder := l.node
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Labels: map[string]string{heartbeat.LeaseLabel: heartbeat.LeaseLabelValue}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

// componentClient is a client with a token of serviceAccount bound to its
// pod (selected by selector, on node if not nil), as the kubelet projects.
func (c *Cluster) componentClient(serviceAccount, selector string, node *Node) kubernetes.Interface {
	c.t.Helper()
	return kubernetes.NewForConfigOrDie(c.componentConfig(serviceAccount, selector, node))
}

// componentConfig is componentClient's client configuration.
func (c *Cluster) componentConfig(serviceAccount, selector string, node *Node) *rest.Config {
	c.t.Helper()
	opts := metav1.ListOptions{LabelSelector: selector}
	if node != nil {
		opts.FieldSelector = "spec.nodeName=" + node.Name
	}
	pods, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).List(context.Background(), opts)
	if err != nil || len(pods.Items) == 0 {
		c.t.Fatalf("pods %s: %v (%d)", selector, err, len(pods.Items))
	}
	pod := pods.Items[0]
	return c.componentConfigWith(serviceAccount, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
}

func (c *Cluster) componentClientWith(serviceAccount string, bound *authenticationv1.BoundObjectReference) kubernetes.Interface {
	c.t.Helper()
	return kubernetes.NewForConfigOrDie(c.componentConfigWith(serviceAccount, bound))
}

func (c *Cluster) componentConfigWith(serviceAccount string, bound *authenticationv1.BoundObjectReference) *rest.Config {
	c.t.Helper()
	expiry := int64(600)
	tr, err := c.Kube.CoreV1().ServiceAccounts(c.InstallNamespace()).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("token for %s: %v", serviceAccount, err)
	}
	return &rest.Config{Host: c.API.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.API.CAData()}}
}

// expectLivenessPriority checks deploy/flowcontrol on the real cluster,
// wherever egressflow is installed, with the tokens the components' pods
// hold: API Priority and Fairness classifies an agent's and the
// controller's Lease reads and writes by the FlowSchema
// egressflow-liveness into its own priority level, and the agent's other
// requests (a list of its node's pods) where they were. The API server
// names both in every response (X-Kubernetes-PF-FlowSchema-UID and
// X-Kubernetes-PF-PriorityLevel-UID).
func expectLivenessPriority(t *testing.T, c *Cluster) {
	ctx := context.Background()
	schema, err := c.Kube.FlowcontrolV1().FlowSchemas().Get(ctx, "egressflow-liveness", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	level, err := c.Kube.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "egressflow-liveness", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// classified makes the request do with the configuration of a
	// component's pod and returns the FlowSchema and priority level that
	// classified it.
	classified := func(cfg *rest.Config, do func(kubernetes.Interface) error) (flowSchema, priorityLevel string) {
		t.Helper()
		var seen http.Header
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return kubetest.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if err == nil {
					seen = resp.Header
				}
				return resp, err
			})
		}
		if err := do(kubernetes.NewForConfigOrDie(cfg)); err != nil {
			t.Fatal(err)
		}
		return seen.Get("X-Kubernetes-PF-FlowSchema-UID"), seen.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	node := c.Nodes[0]
	agent := c.componentConfig("egressflow-agent", "app.kubernetes.io/name=egressflow-agent", node)
	controller := c.componentConfig("egressflow-controller", "app.kubernetes.io/name=egressflow-controller", nil)
	for _, req := range []struct {
		what     string
		cfg      *rest.Config
		do       func(kubernetes.Interface) error
		liveness bool
	}{
		{"the agent reads its Lease", agent, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(c.InstallNamespace()).Get(ctx, node.Name, metav1.GetOptions{})
			return err
		}, true},
		{"the controller reads its leader-election Lease", controller, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(c.InstallNamespace()).Get(ctx, "egressflow-controller", metav1.GetOptions{})
			return err
		}, true},
		{"the agent lists its node's pods", agent, func(k kubernetes.Interface) error {
			_, err := k.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
			return err
		}, false},
	} {
		fs, pl := classified(rest.CopyConfig(req.cfg), req.do)
		switch {
		case req.liveness && (fs != string(schema.UID) || pl != string(level.UID)):
			t.Errorf("%s: classified by FlowSchema %q into priority level %q, want egressflow-liveness (%s, %s)", req.what, fs, pl, schema.UID, level.UID)
		case !req.liveness && (fs == "" || fs == string(schema.UID)):
			t.Errorf("%s: classified by FlowSchema %q, want another than egressflow-liveness", req.what, fs)
		}
	}
}

// TestAPIServerOutage: the API server is down for 10 s under traffic. The
// leader loses its Lease meanwhile (2 s), the agents cannot renew, and the
// probes, which do not go through the API server, go on until the leader
// stops leading. Once it is back: the service keeps its host and its label
// (the announcer never moved), no agent fenced itself or sent a flow mod
// (the counters of every agent are unchanged), LB-IP packets kept leaving
// during the outage, and no pod IP reached the external host. (An outage
// longer than the Lease duration, in which every Lease runs out in
// everyone's eyes, is the Judge's and the peer protocol's tests'.)
func TestAPIServerOutage(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	s.expectLBIPs()
	host, routedAt := s.announcer.Current()
	capture := c.External.Capture(t)
	before := c.flowMods()

	c.API.StopAPIServer()
	stopped := time.Now()
	time.Sleep(apiOutage)
	if err := c.API.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("API server down for %v", back.Sub(stopped).Round(time.Millisecond))
	for _, n := range c.Nodes {
		c.waitAgentRenewing(n)
	}
	// The leader Lease is retaken within seconds; what the probes would
	// move, they move within a second of that, and the agents have all
	// renewed (waited for above). Watch two renewal intervals more.
	time.Sleep(2 * heartbeat.DefaultRenewInterval)
	packets := capture.Stop()

	if now, at := s.announcer.Current(); now != host || !at.Equal(routedAt) {
		t.Errorf("the LB IPs moved from %s to %v across the outage", host.Name, now)
	}
	es, err := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || es.Status.Host != host.Name {
		t.Errorf("status.host after the outage: %q, %v; want %s", es.Status.Host, err, host.Name)
	}
	if after := c.flowMods(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("flow mods per node: before the outage %v, after %v: want no change", before, after)
	}
	during := map[string]int{}
	for _, p := range packets {
		if (p.Src == lbIPs[0] || p.Src == lbIPs[1]) && p.Time.After(stopped.Add(apiOutage/2)) && p.Time.Before(back) {
			during[p.Src.String()]++
		}
	}
	if len(during) != 2 {
		t.Errorf("LB-IP packets in the second half of the API server's outage: %v; want both families", during)
	}
	fromLB, flooded := s.checkNoPodIP(t, packets)
	t.Logf("host %s kept; LB-IP packets during the outage %v; %d in all, %d pod-IP frames flooded past", host.Name, during, fromLB, flooded)
}

// apiOutage is how long TestAPIServerOutage keeps the API server down:
// 10 s, five leader Lease durations.
const apiOutage = 10 * time.Second

var flowModsLine = regexp.MustCompile(`(?m)^egressflow_agent_flow_mods_total (\S+)$`)

// flowMods reads every agent's egressflow_agent_flow_mods_total, as
// Prometheus scrapes it (AgentMetrics).
func (c *Cluster) flowMods() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, n := range c.Nodes {
		metrics, err := c.AgentMetrics(n)
		if err != nil {
			c.t.Fatalf("%s: agent metrics: %v", n.Name, err)
		}
		m := flowModsLine.FindStringSubmatch(metrics)
		if m == nil {
			c.t.Fatalf("%s: no egressflow_agent_flow_mods_total in %.300s", n.Name, metrics)
		}
		out[n.Name] = m[1]
	}
	return out
}
