//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// The LB IPs the tests write into the Service's status, as a cloud's load
// balancer would (documentation ranges, held by no host but announced to
// the external host by the test).
var lbIPs = []netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8:5::10")}

// egressScenario is a dual-stack LoadBalancer Service whose endpoints run
// on every node, a pod that is no endpoint, and their EgressService.
type egressScenario struct {
	c         *Cluster
	targets   []string // the external host's source server, per family
	endpoints []*corev1.Pod
	bystander *corev1.Pod
	host      *Node
}

const scenarioNamespace = "shop"

func newEgressScenario(t *testing.T, c *Cluster) *egressScenario {
	ctx := context.Background()
	server := c.External.Serve(t)
	s := &egressScenario{c: c, targets: []string{server.Addr.String(), server.Addr6.String()}}
	c.CreateNamespace(scenarioNamespace)
	for i, n := range c.Nodes {
		s.endpoints = append(s.endpoints, c.RunProbePod(scenarioNamespace, fmt.Sprintf("web-%d", i+1), n, map[string]string{"app": "web"}, s.targets...))
	}
	s.bystander = c.RunProbePod(scenarioNamespace, "other", c.Nodes[len(c.Nodes)-1], map[string]string{"app": "other"}, s.targets...)

	dualStack := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: scenarioNamespace, Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			IPFamilyPolicy: &dualStack, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	created, err := c.Kube.CoreV1().Services(scenarioNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range lbIPs {
		created.Status.LoadBalancer.Ingress = append(created.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	if _, err := c.Kube.CoreV1().Services(scenarioNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace)
	if _, err := es.Create(ctx, &esv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: scenarioNamespace, Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller picks a host and labels it; the test plays the LB
	// announcer and routes the LB IPs to that node.
	wait.Until(t, convergeTimeout, func() error {
		got, err := es.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if n.Name == got.Status.Host {
				s.host = n
				return nil
			}
		}
		return fmt.Errorf("EgressService host %q", got.Status.Host)
	})
	node, err := c.Kube.CoreV1().Nodes().Get(ctx, s.host.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels["egress-service.k8s.ovn.org/shop-web"]; !ok {
		t.Fatalf("host %s lacks the egress-service.k8s.ovn.org/shop-web label: %v", s.host.Name, node.Labels)
	}
	s.announce(s.host)
	return s
}

// announce routes the LB IPs to n from the external host.
func (s *egressScenario) announce(n *Node) {
	s.c.External.Exec(s.c.t, "ip", "route", "replace", lbIPs[0].String(), "via", n.IP.String())
	s.c.External.Exec(s.c.t, "ip", "-6", "route", "replace", lbIPs[1].String(), "via", n.IP6.String())
}

// expectLBIPs waits until every endpoint is seen with the LB IP of each
// family, and the bystander with its own addresses.
func (s *egressScenario) expectLBIPs() {
	want := []string{lbIPs[0].String(), lbIPs[1].String()}
	for _, ep := range s.endpoints {
		s.c.ExpectSources(ep, s.targets, want)
	}
	s.c.ExpectSources(s.bystander, s.targets, podIPs(s.bystander))
}

func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

// TestEgressServiceOnTheCluster: egressflow installed with kubectl apply -k
// on a three-node cluster; an EgressService's endpoints on the host node and
// on the two others reach the external host with the LB IP of each family,
// their replies come back (the probes read the answers), a pod that is no
// endpoint keeps its own addresses, and a capture on the external host sees
// no endpoint's pod IP once the service has a host.
func TestEgressServiceOnTheCluster(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	s := newEgressScenario(t, c)
	s.expectLBIPs()
	capture := c.External.Capture(t)
	time.Sleep(5 * time.Second) // 100 datagrams per endpoint and family
	s.expectLBIPs()
	endpointIPs := map[netip.Addr]bool{}
	for _, ep := range s.endpoints {
		for _, ip := range podIPs(ep) {
			endpointIPs[netip.MustParseAddr(ip)] = true
		}
	}
	fromLB, leaked := 0, 0
	for _, p := range capture.Stop() {
		switch {
		case endpointIPs[p.Src]:
			leaked++
			t.Logf("leaked: %s", p.Line)
		case p.Src == lbIPs[0] || p.Src == lbIPs[1]:
			fromLB++
		}
	}
	if leaked > 0 || fromLB == 0 {
		t.Fatalf("the external host saw %d packets from endpoint pod IPs and %d from the LB IPs (want 0 and some)", leaked, fromLB)
	}
	t.Logf("host %s; %d packets from the LB IPs in 5 s, none from a pod IP", s.host.Name, fromLB)
}
