//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/test/wait"
)

// overlayNamespace is where TestAnotherNamespace's overlay installs
// egressflow.
const overlayNamespace = "net-egress"

// TestAnotherNamespace: egressflow installed by an operator's overlay into
// another namespace (kustomize's `namespace:`, nothing else changed):
//   - the admission policies hold there (expectAdmissionPolicies);
//   - an EgressService gets a host and its endpoints leave with the LB IPs;
//   - the host's agent stopped by a signal, as a liveness restart or a
//     crash stops it: it keeps the node's flows (its log says so), the
//     kubelet starts it again, and no endpoint's packet leaves with its pod
//     IP meanwhile;
//   - a rolling update of the agents moves no host: each agent whose Pod
//     is deleted hands its Lease over for the restart grace, and its
//     successor finds its flows in place (no HostLost, the announcer never
//     moves, no pod IP reaches the external host);
//   - `kubectl delete -k` of the overlay removes egressflow from every
//     node and keeps the CRDs and the users' objects.
//
// Every one of these fails when a name in the manifests is tied to
// egressflow-system: the agents' permissions refused on exit would read as
// an uninstall, and the policies would not apply.
func TestAnotherNamespace(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	overlay := c.Overlay(overlayNamespace, nil)
	c.InstallFrom(overlay, overlayNamespace)
	expectAdmissionPolicies(t, c)
	expectLivenessPriority(t, c)

	s := newEgressScenario(t, c, offLeader(c))
	s.expectLBIPs()
	host, _ := s.announcer.Current()
	capture := c.External.Capture(t)

	// A restart that is no uninstall: the agent on the host stopped by
	// SIGTERM (no Pod deleted, so no handover either).
	before := c.agentPod(host)
	c.Exec(host, "pkill", "-TERM", "-f", "^/egressflow-agent ")
	wait.Until(t, installTimeout, func() error {
		pod := c.agentPod(host)
		if restarts(pod) <= restarts(before) || !ready(pod) {
			return fmt.Errorf("agent on %s: %d restarts, ready %v", host.Name, restarts(pod), ready(pod))
		}
		return nil
	})
	previous := c.Kubectl("logs", "-n", overlayNamespace, c.agentPod(host).Name, "--previous")
	if !strings.Contains(previous, "the dataplane stays") || strings.Contains(previous, "egressflow is being removed") {
		t.Errorf("the stopped agent on %s did not keep its dataplane; its log:\n%s", host.Name, lastLines(previous, 20))
	}
	s.expectLBIPs()
	t.Logf("agent on %s stopped by SIGTERM and restarted; the dataplane stayed", host.Name)
	// (Such a restart hands no Lease over: the host may move if the
	// restart takes longer than the Lease, as for any agent that stops.)

	// A rolling update: every agent deleted through the API, one after
	// another, each handing its Lease over for the restart grace to a
	// successor that starts slowly (an init container sleeps 6 s) and
	// finds its flows in place.
	host, routedAt := s.announcer.Current()
	rollout := time.Now()
	c.Kubectl("patch", "-n", overlayNamespace, "daemonset/egressflow-agent", "--type=json", "-p",
		`[{"op": "add", "path": "/spec/template/spec/initContainers", "value": [{"name": "slow-start", "image": "`+TestAppImage+
			`", "imagePullPolicy": "Never", "command": ["/testapp", "sleep", "6s"]}]}]`)
	c.Kubectl("rollout", "status", "-n", overlayNamespace, "daemonset/egressflow-agent", "--timeout=5m")
	c.WaitInstalled()
	t.Logf("rolled out %d agents in %v", len(c.Nodes), time.Since(rollout).Round(time.Second))
	s.expectUndisturbed(t, "the rollout (the capture spans the restart too)", host, routedAt, rollout, capture)

	// The uninstall, from the overlay.
	started := time.Now()
	c.UninstallFrom(overlay)
	expectEgressflowGone(t, c)
	t.Logf("every node clean %v after kubectl delete -k of the overlay", time.Since(started).Round(time.Millisecond))
	for _, ep := range s.endpoints {
		c.ExpectSources(ep, s.targets, podIPs(ep))
	}
	c.ExpectAPIKept("egressservice/" + scenarioNamespace + "/web")
}

// agentPod is the egressflow agent's Pod on n.
func (c *Cluster) agentPod(n *Node) *corev1.Pod {
	c.t.Helper()
	pods, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=egressflow-agent", FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil || len(pods.Items) != 1 {
		c.t.Fatalf("agent pods on %s: %v (%d)", n.Name, err, len(pods.Items))
	}
	return &pods.Items[0]
}

func restarts(pod *corev1.Pod) int32 {
	var n int32
	for _, cs := range pod.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

func ready(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return len(pod.Status.ContainerStatuses) > 0
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
