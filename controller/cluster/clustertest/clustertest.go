// Package clustertest is the test kit of the cluster component: a real API
// server with the deploy/ RBAC applied, fake nodes with heartbeating agents
// (through the heartbeat package's agent side), Services, EndpointSlices and
// EgressServices, controller replicas running as the controller's service
// account, a watcher that proves no two nodes ever carry one service label,
// and a transport that counts the controller's API writes. Tests and the
// benchmark use it; production code must not.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/nodeview"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// Short heartbeat timings for tests: a stopped agent's node stops being a
// candidate 600 ms after its last renewal.
const (
	AgentRenew  = 200 * time.Millisecond
	AgentExpire = 600 * time.Millisecond
)

// PodCIDR is the cluster network of the test clusters.
const PodCIDR = "10.128.0.0/14"

// Manifests are the deploy/ files every test cluster gets: the
// controller's admission policies on EgressIPs, on the agents' input
// label, on Nodes and on CloudPrivateIPConfig status among them, so that
// every test fails if the controller changes anything it may not.
// (The Deployment and the API Priority and Fairness objects are applied
// for their validation by the API server; this one runs no controller and
// no priority and fairness.)
var Manifests = []string{"deploy/controller/namespace.yaml", "deploy/controller/rbac.yaml", "deploy/controller/deployment.yaml", "deploy/controller/pdb.yaml", "deploy/agent/rbac.yaml",
	"deploy/admission/controller-egressip-policy.yaml", "deploy/admission/controller-input-label-policy.yaml", "deploy/admission/controller-node-policy.yaml",
	"deploy/admission/cloudprivateipconfig-status-policy.yaml", "deploy/flowcontrol/liveness.yaml"}

// Env is a test API server with the deploy/ RBAC applied and admin clients.
type Env struct {
	Cluster *kubetest.Cluster
	Kube    kubernetes.Interface
	ES      versioned.Interface
}

// Start launches an API server for the test and applies Manifests.
func Start(t testing.TB) *Env {
	t.Helper()
	return NewEnv(t, kubetest.Start(t))
}

// NewEnv applies Manifests to c and returns admin clients.
func NewEnv(t testing.TB, c *kubetest.Cluster) *Env {
	t.Helper()
	cfg := c.Config(kubetest.Admin)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Manifests {
		kubetest.Apply(t, cfg, filepath.Join(root, m))
	}
	return &Env{Cluster: c, Kube: kubernetes.NewForConfigOrDie(cfg), ES: versioned.NewForConfigOrDie(cfg)}
}

// Namespace creates a namespace for one test's services.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns, err := e.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "es-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// WaitNodeViews waits until each of nodes has its node view (nodeview),
// as the leading controller publishes it.
func (e *Env) WaitNodeViews(t testing.TB, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		name, _ := nodeview.Name(n)
		wait.Until(t, 30*time.Second, func() error {
			_, err := e.Kube.CoreV1().ConfigMaps(kubetest.SystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
			return err
		})
	}
}

// CreateNode creates a Node with the given labels and Ready condition.
func (e *Env) CreateNode(t testing.TB, name string, labels map[string]string, ready bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.SetNodeReady(t, name, ready)
}

// SetNodeReady sets a Node's Ready condition.
func (e *Env) SetNodeReady(t testing.TB, name string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	e.SetNodeReadyStatus(t, name, status)
}

// SetNodeReadyStatus sets a Node's Ready condition to status (Unknown: as
// the node lifecycle controller marks a node it heard nothing from).
func (e *Env) SetNodeReadyStatus(t testing.TB, name string, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	n, err := e.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := e.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// PatchNodeLabels merge-patches a Node's labels (nil value: remove).
func (e *Env) PatchNodeLabels(t testing.TB, name string, labels map[string]*string) {
	t.Helper()
	e.patchNodeMetadata(t, name, "labels", labels)
}

// PatchNodeAnnotations merge-patches a Node's annotations (nil value:
// remove).
func (e *Env) PatchNodeAnnotations(t testing.TB, name string, annotations map[string]*string) {
	t.Helper()
	e.patchNodeMetadata(t, name, "annotations", annotations)
}

// patchNodeMetadata merge-patches one map of a Node's metadata, labels or
// annotations.
func (e *Env) patchNodeMetadata(t testing.TB, name, field string, values map[string]*string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `{"metadata":{%q:{`, field)
	i := 0
	for k, v := range values {
		if i > 0 {
			b.WriteString(",")
		}
		i++
		if v == nil {
			fmt.Fprintf(&b, "%q:null", k)
		} else {
			fmt.Fprintf(&b, "%q:%q", k, *v)
		}
	}
	b.WriteString("}}}")
	if _, err := e.Kube.CoreV1().Nodes().Patch(context.Background(), name, "application/merge-patch+json", []byte(b.String()), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// NodeServiceLabels returns the service labels of a node.
func (e *Env) NodeServiceLabels(t testing.TB, name string) []string {
	t.Helper()
	n, err := e.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range n.Labels {
		if assign.IsLabelKey(k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// NodesWithLabel lists the nodes that carry a label key.
func (e *Env) NodesWithLabel(t testing.TB, key string) []string {
	t.Helper()
	list, err := e.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: key})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// Endpoint is one endpoint of an EndpointSlice.
type Endpoint struct {
	IP   string
	Node string
}

// Service describes a LoadBalancer Service with its endpoints.
type Service struct {
	Namespace, Name string
	// Type defaults to LoadBalancer.
	Type        corev1.ServiceType
	IngressIPs  []string
	TrafficPol  corev1.ServiceExternalTrafficPolicy
	Endpoints   []Endpoint
	NoEndpoints bool // create no EndpointSlice at all
	// Selector selects the Service's pods; the test's EndpointSlices list
	// its endpoints all the same (no controller maintains them).
	Selector map[string]string
	// Labels are the Service's, which its EndpointSlices copy.
	Labels map[string]string
}

// CreateService creates the Service, sets its ingress IPs, and creates one
// EndpointSlice with its endpoints.
func (e *Env) CreateService(t testing.TB, s Service) {
	t.Helper()
	ctx := context.Background()
	typ := s.Type
	if typ == "" {
		typ = corev1.ServiceTypeLoadBalancer
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			Selector: s.Selector,
			// Both families, as the tests' endpoints have: the pod guard
			// holds a selected pod's address only in the Service's families.
			IPFamilyPolicy: ptr(corev1.IPFamilyPolicyPreferDualStack),
		},
	}
	if typ == corev1.ServiceTypeLoadBalancer || typ == corev1.ServiceTypeNodePort {
		svc.Spec.ExternalTrafficPolicy = s.TrafficPol
		if svc.Spec.ExternalTrafficPolicy == "" {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
	}
	created, err := e.Kube.CoreV1().Services(s.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.IngressIPs) > 0 {
		e.setIngress(t, created, s.IngressIPs)
	}
	if !s.NoEndpoints {
		e.SetEndpoints(t, s.Namespace, s.Name, s.Endpoints)
	}
}

// SetIngress replaces a Service's load-balancer ingress IPs.
func (e *Env) SetIngress(t testing.TB, ns, name string, ips ...string) {
	t.Helper()
	svc, err := e.Kube.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.setIngress(t, svc, ips)
}

func (e *Env) setIngress(t testing.TB, svc *corev1.Service, ips []string) {
	t.Helper()
	svc.Status.LoadBalancer.Ingress = nil
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if _, err := e.Kube.CoreV1().Services(svc.Namespace).UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// SetEndpoints creates or replaces the Service's EndpointSlices with the
// given endpoints, one slice per family as the EndpointSlice controller
// writes them: the IPv4 slice is named after the Service and always written
// (empty when there is no endpoint), the IPv6 one ("<name>-ipv6") once an
// endpoint has an IPv6 address; with the Service's labels, as it copies
// them.
func (e *Env) SetEndpoints(t testing.TB, ns, name string, eps []Endpoint) {
	t.Helper()
	ctx := context.Background()
	client := e.Kube.DiscoveryV1().EndpointSlices(ns)
	labels := map[string]string{}
	if svc, err := e.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		maps.Copy(labels, svc.Labels)
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	labels[discoveryv1.LabelServiceName] = name
	for _, family := range []struct {
		sliceName   string
		addressType discoveryv1.AddressType
		is4         bool
	}{
		{name, discoveryv1.AddressTypeIPv4, true},
		{name + "-ipv6", discoveryv1.AddressTypeIPv6, false},
	} {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: family.sliceName, Labels: labels},
			AddressType: family.addressType,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
		}
		for _, ep := range eps {
			if addr, err := netip.ParseAddr(ep.IP); err != nil {
				t.Fatalf("endpoint %q: %v", ep.IP, err)
			} else if addr.Is4() != family.is4 {
				continue
			}
			endpoint := discoveryv1.Endpoint{Addresses: []string{ep.IP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}
			if ep.Node != "" {
				endpoint.NodeName = ptr(ep.Node)
			}
			slice.Endpoints = append(slice.Endpoints, endpoint)
		}
		cur, err := client.Get(ctx, slice.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && !family.is4 && len(slice.Endpoints) == 0:
			continue // no IPv6 endpoint, ever
		case apierrors.IsNotFound(err):
			_, err = client.Create(ctx, slice, metav1.CreateOptions{})
		case err == nil:
			slice.ResourceVersion = cur.ResourceVersion
			_, err = client.Update(ctx, slice, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// PodEndpoints are the test pods as endpoints: each of their addresses (IPv4
// and IPv6) on their node.
func PodEndpoints(pods ...*topology.Pod) []Endpoint {
	var out []Endpoint
	for _, p := range pods {
		for _, ip := range []netip.Addr{p.IP, p.IP6} {
			if ip.IsValid() {
				out = append(out, Endpoint{IP: ip.String(), Node: p.Node.Name})
			}
		}
	}
	return out
}

// CreatePod makes the Pod object of a test pod, as its kubelet would
// report it: bound to its node, running, with both its addresses. A node
// agent lets a pod's traffic out of the cluster only once it knows the pod
// (the pod guard).
func (e *Env) CreatePod(t testing.TB, namespace string, pod *topology.Pod, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pod.Name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: pod.Node.Name,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	created, err := e.Kube.CoreV1().Pods(namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = corev1.PodRunning
	for _, ip := range []netip.Addr{pod.IP, pod.IP6} {
		if ip.IsValid() {
			created.Status.PodIPs = append(created.Status.PodIPs, corev1.PodIP{IP: ip.String()})
		}
	}
	created.Status.PodIP = created.Status.PodIPs[0].IP
	if _, err := e.Kube.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// CreateEgressService creates an EgressService.
func (e *Env) CreateEgressService(t testing.TB, ns, name string, spec esv1.EgressServiceSpec) {
	t.Helper()
	es := &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if _, err := e.ES.K8sV1().EgressServices(ns).Create(context.Background(), es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// CreateHostedService creates the Service s, its EgressService with spec
// and status.host host: what a user, the load-balancer provider and the
// cluster component would write, for tests of the node side alone.
func (e *Env) CreateHostedService(t testing.TB, s Service, spec esv1.EgressServiceSpec, host string) {
	t.Helper()
	// The agents' label, as the cluster component puts it on the Service
	// of an EgressService (and its slices copy it).
	s.Labels = maps.Clone(s.Labels)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[endpoints.EgressServiceLabel] = endpoints.EgressServiceLabelValue
	e.CreateService(t, s)
	e.CreateEgressService(t, s.Namespace, s.Name, spec)
	e.SetHost(t, s.Namespace, s.Name, host)
}

// SetHost writes an EgressService's status.host, as the cluster component
// would.
func (e *Env) SetHost(t testing.TB, ns, name, host string) {
	t.Helper()
	es := e.GetEgressService(t, ns, name)
	es.Status.Host = host
	if _, err := e.ES.K8sV1().EgressServices(ns).UpdateStatus(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// GetEgressService reads an EgressService.
func (e *Env) GetEgressService(t testing.TB, ns, name string) *esv1.EgressService {
	t.Helper()
	es, err := e.ES.K8sV1().EgressServices(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// UpdateEgressService reads, modifies and writes back an EgressService.
func (e *Env) UpdateEgressService(t testing.TB, ns, name string, modify func(*esv1.EgressService)) {
	t.Helper()
	es := e.GetEgressService(t, ns, name)
	modify(es)
	if _, err := e.ES.K8sV1().EgressServices(ns).Update(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Events lists the Events about an object, oldest first.
func (e *Env) Events(t testing.TB, ns, name string) []corev1.Event {
	t.Helper()
	list, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return list.Items
}

// objectClient is a generated clientset's client of one kind in one
// namespace, as far as the helpers below use it.
type objectClient[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

func createObject[T any](t testing.TB, c objectClient[T], obj T) T {
	t.Helper()
	created, err := c.Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func getObject[T any](t testing.TB, c objectClient[T], name string) T {
	t.Helper()
	obj, err := c.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// updateObject reads, modifies and writes back the object name, and
// returns it as written.
func updateObject[T any](t testing.TB, c objectClient[T], name string, modify func(T)) T {
	t.Helper()
	obj := getObject(t, c, name)
	modify(obj)
	updated, err := c.Update(context.Background(), obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

// CreateEgressQoS creates the EgressQoS of namespace ns (named default)
// and returns it as created.
func (e *Env) CreateEgressQoS(t testing.TB, ns string, spec esv1.EgressQoSSpec) *esv1.EgressQoS {
	t.Helper()
	return createObject(t, e.ES.K8sV1().EgressQoSes(ns), &esv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: esv1.EgressQoSName}, Spec: spec})
}

// GetEgressQoS reads the EgressQoS of namespace ns.
func (e *Env) GetEgressQoS(t testing.TB, ns string) *esv1.EgressQoS {
	t.Helper()
	return getObject(t, e.ES.K8sV1().EgressQoSes(ns), esv1.EgressQoSName)
}

// UpdateEgressQoS reads, modifies and writes back the EgressQoS of
// namespace ns, and returns it as written.
func (e *Env) UpdateEgressQoS(t testing.TB, ns string, modify func(*esv1.EgressQoS)) *esv1.EgressQoS {
	t.Helper()
	return updateObject(t, e.ES.K8sV1().EgressQoSes(ns), esv1.EgressQoSName, modify)
}

// CreateEgressFirewall creates the EgressFirewall name of namespace ns
// and returns it as created (the CRD refuses any name but default).
func (e *Env) CreateEgressFirewall(t testing.TB, ns, name string, spec esv1.EgressFirewallSpec) *esv1.EgressFirewall {
	t.Helper()
	return createObject(t, e.ES.K8sV1().EgressFirewalls(ns), &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})
}

// GetEgressFirewall reads the EgressFirewall name of namespace ns.
func (e *Env) GetEgressFirewall(t testing.TB, ns, name string) *esv1.EgressFirewall {
	t.Helper()
	return getObject(t, e.ES.K8sV1().EgressFirewalls(ns), name)
}

// UpdateEgressFirewall reads, modifies and writes back the EgressFirewall
// of namespace ns (named default), and returns it as written.
func (e *Env) UpdateEgressFirewall(t testing.TB, ns string, modify func(*esv1.EgressFirewall)) *esv1.EgressFirewall {
	t.Helper()
	return updateObject(t, e.ES.K8sV1().EgressFirewalls(ns), esv1.EgressFirewallName, modify)
}

// firewallCRD is the EgressFirewall CRD's name.
const firewallCRD = "egressfirewalls.k8s.ovn.org"

// SetFirewallNameRule removes (on false) or puts back (on true) the
// EgressFirewall CRD's rule that an object be named default, and waits
// until the API server applies the change. Without it, objects of another
// name can be stored, as they could under a CRD from before the rule.
func (e *Env) SetFirewallNameRule(t testing.TB, on bool) {
	t.Helper()
	ctx := context.Background()
	cfg := e.Cluster.Config(kubetest.Admin)
	crds := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := crds.Get(ctx, firewallCRD, metav1.GetOptions{})
		if err != nil {
			return err
		}
		versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if err != nil {
			return err
		}
		for _, v := range versions {
			root, _, err := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema")
			if err != nil {
				return err
			}
			rules, _, _ := unstructured.NestedSlice(root, "x-kubernetes-validations")
			rules = slices.DeleteFunc(rules, func(r any) bool { return r.(map[string]any)["rule"] == firewallNameRule["rule"] })
			if on {
				rules = append(rules, maps.Clone(firewallNameRule))
			}
			if err := unstructured.SetNestedSlice(root, rules, "x-kubernetes-validations"); err != nil {
				return err
			}
			if err := unstructured.SetNestedMap(v.(map[string]any), root, "schema", "openAPIV3Schema"); err != nil {
				return err
			}
		}
		if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
			return err
		}
		_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A dry-run create of an object of another name tells when the API
	// server's validation has caught up.
	probe := &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: kubetest.SystemNamespace, Name: "name-rule-probe"},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}}}}}
	wait.Until(t, 30*time.Second, func() error {
		_, err := e.ES.K8sV1().EgressFirewalls(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case on && apierrors.IsInvalid(err), !on && err == nil:
			return nil
		case err != nil && !apierrors.IsInvalid(err):
			return err
		}
		return fmt.Errorf("name rule on: %v; a create of another name: %v", on, err)
	})
}

// firewallNameRule is the CRD's rule (controller/apis/egressservice/v1,
// EgressFirewall's XValidation marker).
var firewallNameRule = map[string]any{
	"rule":    "self.metadata.name == 'default'",
	"message": "EgressFirewall must be named default: only the object named default in a namespace counts",
}

// Agent is a node agent's heartbeat, written as the agent's service account
// through heartbeat.Renewer. It publishes SyncState Synced and the EgressQoS
// and EgressFirewall watermarks the test sets (SetQoSRevision,
// SetFirewallRevision): it plays the agent's side of the status contract of
// both APIs, which the agent's own tests check.
type Agent struct {
	Node                                         string
	qosRevision, firewallRevision, routeRevision atomic.Pointer[string]
	routerRevision, uplink                       atomic.Pointer[string]
	egressSubnets                                atomic.Pointer[[]netip.Prefix]
	unresolvedDNS                                atomic.Pointer[[]string]
	routeNotes                                   atomic.Pointer[map[string][]string]
	renewer                                      *heartbeat.Renewer
	cancel                                       context.CancelFunc
	done                                         chan struct{}
	// probes answers the probe protocol (StartProbedAgent), nil if not.
	probes *ProbeRelay
}

// SetQoSRevision makes the agent publish rv as its EgressQoS watermark
// (heartbeat.Facts.QoSRevision) from its next renewal on.
func (a *Agent) SetQoSRevision(rv string) { a.qosRevision.Store(&rv) }

// SetFirewallRevision makes the agent publish rv as its EgressFirewall
// watermark (heartbeat.Facts.FirewallRevision) from its next renewal on.
func (a *Agent) SetFirewallRevision(rv string) { a.firewallRevision.Store(&rv) }

// SetExternalRouteRevision makes the agent publish rv as its
// AdminPolicyBasedExternalRoute watermark
// (heartbeat.Facts.ExternalRouteRevision) from its next renewal on.
func (a *Agent) SetExternalRouteRevision(rv string) { a.routeRevision.Store(&rv) }

// SetRouterRevision makes the agent publish rv as its EgressRouter
// watermark (heartbeat.Facts.RouterRevision) from its next renewal on.
func (a *Agent) SetRouterRevision(rv string) { a.routerRevision.Store(&rv) }

// SetUplink makes the agent publish name as its node's uplink
// (heartbeat.Facts.Uplink) from its next renewal on.
func (a *Agent) SetUplink(name string) { a.uplink.Store(&name) }

// SetExternalRouteNotes makes the agent publish notes (policy name →
// messages; nil: none) as what it says of the external routes
// (heartbeat.Facts.ExternalRouteNotes) from its next renewal on.
func (a *Agent) SetExternalRouteNotes(notes map[string][]string) {
	n := maps.Clone(notes)
	if n == nil {
		n = map[string][]string{}
	}
	a.routeNotes.Store(&n)
}

// SetFirewallUnresolvedDNS makes the agent publish names
// ("<namespace>/<dnsName>"; none: an empty list) as the dnsNames it has no
// answer for (heartbeat.Facts.FirewallUnresolvedDNS) from its next renewal
// on.
func (a *Agent) SetFirewallUnresolvedDNS(names ...string) {
	n := append([]string{}, names...)
	a.unresolvedDNS.Store(&n)
}

// SetEgressSubnets makes the agent publish subnets (CIDRs) as its node's
// uplink subnets (heartbeat.Facts.EgressSubnets) from its next renewal on.
func (a *Agent) SetEgressSubnets(subnets ...string) {
	p := mustPrefixes(subnets...)
	a.egressSubnets.Store(&p)
}

// StartAgent starts heartbeating for node with AgentRenew and AgentExpire;
// the test's end stops it.
func (e *Env) StartAgent(t testing.TB, node string) *Agent {
	t.Helper()
	return e.StartAgentEvery(t, node, AgentRenew, AgentExpire)
}

// StartAgentEvery is StartAgent with another renew interval and Lease
// duration.
func (e *Env) StartAgentEvery(t testing.TB, node string, renew, expire time.Duration) *Agent {
	t.Helper()
	return e.StartAgentWith(t, node, renew, expire)
}

// StartAgentWith is StartAgentEvery whose agent publishes subnets (CIDRs)
// from its first renewal on.
func (e *Env) StartAgentWith(t testing.TB, node string, renew, expire time.Duration, subnets ...string) *Agent {
	t.Helper()
	a := &Agent{Node: node}
	if len(subnets) > 0 {
		a.SetEgressSubnets(subnets...)
	}
	return e.startAgent(t, a, renew, expire)
}

// StartProbedAgent is StartAgentEvery whose agent also answers the probe
// protocol (a real heartbeat.Responder on loopback) through a ProbeRelay
// (Probes), and publishes the relay's address as its probe address.
func (e *Env) StartProbedAgent(t testing.TB, node string, renew, expire time.Duration) *Agent {
	t.Helper()
	return e.startAgent(t, &Agent{Node: node, probes: StartProbeRelay(t)}, renew, expire)
}

// Probes is the agent's probe relay (StartProbedAgent); nil otherwise.
func (a *Agent) Probes() *ProbeRelay { return a.probes }

func (e *Env) startAgent(t testing.TB, a *Agent, renew, expire time.Duration) *Agent {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(e.Cluster.Config(kubetest.Agent))
	node := a.Node
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	r, err := heartbeat.NewRenewer(client.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: node, RenewInterval: renew, LeaseDuration: expire,
		Facts: func() heartbeat.Facts {
			f := heartbeat.Facts{SyncState: heartbeat.SyncStateSynced}
			if a.probes != nil {
				f.ProbeAddress = a.probes.Addr()
			}
			if rv := a.qosRevision.Load(); rv != nil {
				f.QoSRevision = *rv
			}
			if rv := a.firewallRevision.Load(); rv != nil {
				f.FirewallRevision = *rv
			}
			if s := a.egressSubnets.Load(); s != nil {
				f.EgressSubnets = *s
			}
			if n := a.unresolvedDNS.Load(); n != nil {
				f.FirewallUnresolvedDNS = *n
			}
			if rv := a.routeRevision.Load(); rv != nil {
				f.ExternalRouteRevision = *rv
			}
			if n := a.routeNotes.Load(); n != nil {
				f.ExternalRouteNotes = *n
			}
			if rv := a.routerRevision.Load(); rv != nil {
				f.RouterRevision = *rv
			}
			if u := a.uplink.Load(); u != nil {
				f.Uplink = *u
			}
			return f
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// The first renewal is synchronous, so the Lease exists on return.
	if err := r.RenewOnce(context.Background()); err != nil {
		cancel()
		t.Fatal(err)
	}
	a.renewer = r
	go func() {
		defer close(a.done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(a.Stop)
	return a
}

// HandOver stops renewing as an agent stopping for a restart does: one
// last renewal valid for grace, marked restarting (Renewer.Handover).
func (a *Agent) HandOver(t testing.TB, grace time.Duration) {
	t.Helper()
	a.Stop()
	if err := a.renewer.Handover(context.Background(), grace); err != nil {
		t.Fatal(err)
	}
}

// Stop stops renewing; the Lease then expires. Safe to call twice.
func (a *Agent) Stop() {
	a.cancel()
	<-a.done
}

// EgressNode creates a Ready node labelled egress-assignable (plus
// labels) whose heartbeating agent publishes subnets from its first
// renewal on.
func (e *Env) EgressNode(t testing.TB, name string, labels map[string]string, subnets ...string) *Agent {
	t.Helper()
	l := map[string]string{assign.EgressAssignableLabel: ""}
	maps.Copy(l, labels)
	e.CreateNode(t, name, l, true)
	return e.StartAgentWith(t, name, AgentRenew, AgentExpire, subnets...)
}

// CreateExternalRoute creates an AdminPolicyBasedExternalRoute and returns
// it as created.
func (e *Env) CreateExternalRoute(t testing.TB, name string, spec esv1.AdminPolicyBasedExternalRouteSpec) *esv1.AdminPolicyBasedExternalRoute {
	t.Helper()
	return createObject(t, e.ES.K8sV1().AdminPolicyBasedExternalRoutes(), &esv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
}

// GetExternalRoute reads an AdminPolicyBasedExternalRoute.
func (e *Env) GetExternalRoute(t testing.TB, name string) *esv1.AdminPolicyBasedExternalRoute {
	t.Helper()
	return getObject(t, e.ES.K8sV1().AdminPolicyBasedExternalRoutes(), name)
}

// UpdateExternalRoute reads, modifies and writes back an
// AdminPolicyBasedExternalRoute, and returns it as written.
func (e *Env) UpdateExternalRoute(t testing.TB, name string, modify func(*esv1.AdminPolicyBasedExternalRoute)) *esv1.AdminPolicyBasedExternalRoute {
	t.Helper()
	return updateObject(t, e.ES.K8sV1().AdminPolicyBasedExternalRoutes(), name, modify)
}

// CreateEgressIP creates an EgressIP of the given addresses that selects
// every namespace, and returns it as created.
func (e *Env) CreateEgressIP(t testing.TB, name string, addresses ...string) *esv1.EgressIP {
	t.Helper()
	return createObject(t, e.ES.K8sV1().EgressIPs(), &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: esv1.EgressIPSpec{EgressIPs: addresses}})
}

// GetEgressIP reads an EgressIP.
func (e *Env) GetEgressIP(t testing.TB, name string) *esv1.EgressIP {
	t.Helper()
	return getObject(t, e.ES.K8sV1().EgressIPs(), name)
}

// UpdateEgressIP reads, modifies and writes back an EgressIP (spec and
// status alike: it has no status subresource), and returns it as written.
func (e *Env) UpdateEgressIP(t testing.TB, name string, modify func(*esv1.EgressIP)) *esv1.EgressIP {
	t.Helper()
	return updateObject(t, e.ES.K8sV1().EgressIPs(), name, modify)
}

// DeleteEgressIP deletes an EgressIP.
func (e *Env) DeleteEgressIP(t testing.TB, name string) {
	t.Helper()
	if err := e.ES.K8sV1().EgressIPs().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Node creates a Ready node with labels and a heartbeating agent.
func (e *Env) Node(t testing.TB, name string, labels map[string]string) *Agent {
	t.Helper()
	e.CreateNode(t, name, labels, true)
	return e.StartAgent(t, name)
}

func ptr[T any](v T) *T { return &v }

// Replica is one running controller.
type Replica struct {
	*cluster.Controller
	Writes *WriteLog
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// RunController starts a controller as the controller's service account,
// with the test pod CIDR; opts' zero fields take the defaults. The test's
// end stops it.
func (e *Env) RunController(t testing.TB, opts cluster.Options) *Replica {
	t.Helper()
	cfg := e.Cluster.Config(kubetest.Controller)
	log := &WriteLog{}
	cfg.Wrap(log.wrap)
	if opts.PodCIDRs == nil {
		opts.PodCIDRs = mustPrefixes(PodCIDR)
	}
	c, err := cluster.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{Controller: c, Writes: log, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("controller %s: %v", opts.Identity, err)
		}
	})
	return r
}

// Stop cancels the controller and waits for Run to return its error.
func (r *Replica) Stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			r.err = errors.New("did not stop within 30s")
		}
	})
	return r.err
}

// WaitLeading waits until the replica leads and its first sync pass is done.
func (r *Replica) WaitLeading(t testing.TB, timeout time.Duration) {
	t.Helper()
	wait.Until(t, timeout, func() error {
		if !r.Idle() {
			return errors.New("not leading, or still busy")
		}
		return nil
	})
}

func mustPrefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// Request is one API request the controller sent.
type Request struct {
	At     time.Time
	Method string
	Path   string
	Body   string
}

// WriteLog records the controller's API writes (every method but GET).
type WriteLog struct {
	mu   sync.Mutex
	reqs []Request
}

func (l *WriteLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			var body []byte
			if req.GetBody != nil {
				if rc, err := req.GetBody(); err == nil {
					body, _ = io.ReadAll(rc)
					rc.Close()
				}
			}
			l.mu.Lock()
			l.reqs = append(l.reqs, Request{At: time.Now(), Method: req.Method, Path: req.URL.Path, Body: string(body)})
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// All returns the writes so far.
func (l *WriteLog) All() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// Since returns the writes from index i on, and the next index.
func (l *WriteLog) Since(i int) ([]Request, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs[min(i, len(l.reqs)):]), len(l.reqs)
}

// Len is the number of writes so far.
func (l *WriteLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// NotEvents drops writes of Events and of the leader Lease, leaving those
// that change assignments (status, node labels).
func NotEvents(reqs []Request) []Request {
	return slices.DeleteFunc(NotLeases(reqs), func(r Request) bool { return strings.Contains(r.Path, "/events") })
}

// NotLeases drops writes of the leader Lease (periodic renewals).
func NotLeases(reqs []Request) []Request {
	return slices.DeleteFunc(slices.Clone(reqs), func(r Request) bool { return strings.Contains(r.Path, "/leases") })
}

// LabelWatcher follows every Node through a watch and records any moment
// (any etcd revision) at which one service label is on more than one node.
type LabelWatcher struct {
	mu         sync.Mutex
	labels     map[string]map[string]bool // node -> service labels
	violations []string
	cancel     context.CancelFunc
}

// WatchLabels starts a LabelWatcher; the test's end stops it and fails the
// test if it saw a violation.
func (e *Env) WatchLabels(t testing.TB) *LabelWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &LabelWatcher{labels: map[string]map[string]bool{}, cancel: cancel}
	lw := cache.NewListWatchFromClient(e.Kube.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observe(o.(*corev1.Node), false) },
		UpdateFunc: func(_, o any) { w.observe(o.(*corev1.Node), false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				w.observe(n, true)
			}
		},
	})
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("label watcher did not sync")
	}
	t.Cleanup(func() {
		cancel()
		if v := w.Violations(); len(v) > 0 {
			t.Errorf("a service label was on two nodes at once: %v", v)
		}
	})
	return w
}

func (w *LabelWatcher) observe(n *corev1.Node, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := map[string]bool{}
	if !deleted {
		for k := range n.Labels {
			if assign.IsLabelKey(k) {
				set[k] = true
			}
		}
	}
	w.labels[n.Name] = set
	for k := range set {
		var carriers []string
		for node, l := range w.labels {
			if l[k] {
				carriers = append(carriers, node)
			}
		}
		if len(carriers) > 1 {
			slices.Sort(carriers)
			w.violations = append(w.violations, fmt.Sprintf("%s on %v at rv %s", k, carriers, n.ResourceVersion))
		}
	}
}

// Violations are the moments one label was on several nodes.
func (w *LabelWatcher) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.violations)
}

// Reset forgets the violations seen so far (for tests that seed a broken
// state on purpose).
func (w *LabelWatcher) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = nil
}

// Carriers returns, per service label, the nodes that carry it now.
func (w *LabelWatcher) Carriers() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for node, set := range w.labels {
		for k := range set {
			out[k] = append(out[k], node)
		}
	}
	return out
}
