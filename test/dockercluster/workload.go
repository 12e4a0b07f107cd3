package dockercluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/egressflow/egressflow/test/wait"
)

// probeInterval is how often a probe pod sends to each target.
const probeInterval = 50 * time.Millisecond

// CreateNamespace creates a namespace for test workloads.
func (c *Cluster) CreateNamespace(name string) {
	c.t.Helper()
	_, err := c.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		c.t.Fatal(err)
	}
}

// labelNamespace sets labels on namespace name (a merge patch: the
// others stay).
func (c *Cluster) labelNamespace(name string, labels map[string]string) {
	c.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Namespaces().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// CreateLoadBalancer creates a dual-stack LoadBalancer Service of the pods
// selector selects and writes lbIPs into its status, as a cloud's load
// balancer would.
func (c *Cluster) CreateLoadBalancer(namespace, name string, selector map[string]string, lbIPs ...netip.Addr) *corev1.Service {
	c.t.Helper()
	ctx := context.Background()
	dualStack := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: selector,
			IPFamilyPolicy: &dualStack, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	created, err := c.Kube.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ip := range lbIPs {
		created.Status.LoadBalancer.Ingress = append(created.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	updated, err := c.Kube.CoreV1().Services(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return updated
}

// RunProbePod runs a pod of the test image on node that probes targets
// (testapp probe) and returns it once it runs, with its addresses.
func (c *Cluster) RunProbePod(namespace, name string, node *Node, labels map[string]string, targets ...string) *corev1.Pod {
	c.t.Helper()
	return c.RunKeptFlowsProbePod(namespace, name, node, labels, 0, targets...)
}

// RunKeptFlowsProbePod is RunProbePod whose probe sends to each target
// over flows flows kept for the pod's life (testapp probe --flows), each
// logged apart; 0: a new flow for each datagram.
func (c *Cluster) RunKeptFlowsProbePod(namespace, name string, node *Node, labels map[string]string, flows int, targets ...string) *corev1.Pod {
	c.t.Helper()
	args := []string{"--interval=" + probeInterval.String()}
	if flows > 0 {
		args = append(args, fmt.Sprintf("--flows=%d", flows))
	}
	return c.runProbePodWith(namespace, name, node, labels, args, targets...)
}

// runProbePodWith is RunProbePod whose probe takes args (testapp probe's
// flags).
func (c *Cluster) runProbePodWith(namespace, name string, node *Node, labels map[string]string, args []string, targets ...string) *corev1.Pod {
	c.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "probe", Image: TestAppImage, ImagePullPolicy: corev1.PullNever,
				Args: append(args, targets...),
			}},
		},
	}
	return c.runPod(pod, 2, nil)
}

// runPod creates pod and returns it once it runs with at least ips
// addresses and, if ready is not nil, ready accepts it.
func (c *Cluster) runPod(pod *corev1.Pod, ips int, ready func(*corev1.Pod) error) *corev1.Pod {
	c.t.Helper()
	ctx := context.Background()
	pods := c.Kube.CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	var running *corev1.Pod
	wait.Until(c.t, readyTimeout, func() error {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) < ips {
			return fmt.Errorf("pod %s/%s: %s, IPs %v", p.Namespace, p.Name, p.Status.Phase, p.Status.PodIPs)
		}
		if ready != nil {
			if err := ready(p); err != nil {
				return err
			}
		}
		running = p
		return nil
	})
	return running
}

// ProbeSources reads, from the pod's log (testapp probe's lines), what each
// target last saw as the source of pod's datagrams and when the pod logged
// it; "" while its datagrams go unanswered.
func (c *Cluster) ProbeSources(pod *corev1.Pod) (map[string]ProbeSource, error) {
	tail := int64(20)
	raw, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background())
	if err != nil {
		return nil, err
	}
	sources := map[string]ProbeSource{}
	lines := bufio.NewScanner(strings.NewReader(string(raw)))
	for lines.Scan() {
		words := strings.Fields(lines.Text())
		if len(words) == 0 {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, words[0])
		if err != nil {
			continue
		}
		fields := map[string]string{}
		for _, f := range words[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		if fields["target"] == "" {
			continue
		}
		src := fields["source"]
		if fields["error"] != "" {
			src = ""
		}
		sources[fields["target"]] = ProbeSource{Source: src, At: at}
	}
	return sources, nil
}

// ProbeSource is what a probe pod last logged for a target.
type ProbeSource struct {
	Source string // as the target saw the pod; "" while unanswered
	At     time.Time
}

// ExpectSources waits until pod has logged, after the call began, that
// every target saw want as its source (want[i] for targets[i]).
func (c *Cluster) ExpectSources(pod *corev1.Pod, targets, want []string) {
	c.t.Helper()
	since := time.Now() // the pods run on this machine: one clock
	wait.Until(c.t, convergeTimeout, func() error {
		got, err := c.ProbeSources(pod)
		if err != nil {
			return err
		}
		for i, target := range targets {
			if s := got[target]; s.Source != want[i] || !s.At.After(since) {
				return fmt.Errorf("%s to %s last seen as %q at %v, want %s since %v", pod.Name, target, s.Source, s.At.Format(time.StampMilli), want[i], since.Format(time.StampMilli))
			}
		}
		return nil
	})
}

// convergeTimeout bounds how long a test waits for egressflow to converge:
// seconds here, the rest is slack for a loaded CI machine.
const convergeTimeout = time.Minute

// ipOwners records which pod of a namespace held which address since when,
// as the API server reported it (a watch on the namespace's pods).
type ipOwners struct {
	mu     sync.Mutex
	owners map[netip.Addr][]ipOwner
}

type ipOwner struct {
	pod   *corev1.Pod
	since time.Time // when the API server's watch first showed it
}

// followPodIPs starts recording the addresses of namespace's pods; it stops
// with the test.
func (c *Cluster) followPodIPs(namespace string) *ipOwners {
	o := &ipOwners{owners: map[netip.Addr][]ipOwner{}}
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		if pod, ok := ev.Object.(*corev1.Pod); ok {
			o.record(pod)
		}
	})
	return o
}

func (o *ipOwners) record(pod *corev1.Pod) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ip := range pod.Status.PodIPs {
		addr, err := netip.ParseAddr(ip.IP)
		if err != nil {
			continue
		}
		list := o.owners[addr]
		if len(list) == 0 || list[len(list)-1].pod.UID != pod.UID {
			o.owners[addr] = append(list, ipOwner{pod: pod, since: time.Now()})
		}
	}
}

// at returns the pod that held addr at t, and whether the API server had
// listed it by then: the last one listed before t, or else the first one
// listed after it. Nil if no pod of the namespace ever had addr.
func (o *ipOwners) at(addr netip.Addr, t time.Time) (*corev1.Pod, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	list := o.owners[addr]
	for i := len(list) - 1; i >= 0; i-- {
		if !list[i].since.After(t) {
			return list[i].pod, true
		}
	}
	if len(list) > 0 {
		return list[0].pod, false
	}
	return nil, false
}
