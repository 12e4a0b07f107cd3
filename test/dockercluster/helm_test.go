//go:build e2e

package dockercluster

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

const (
	// helmRelease and helmNamespace: where TestHelm installs the chart,
	// another namespace than deploy/'s.
	helmRelease   = "egressflow"
	helmNamespace = "egress-helm"
)

// TestHelm: egressflow installed, upgraded and uninstalled with Helm
// (deploy/charts/egressflow) in another namespace than deploy/'s:
//   - `helm install --create-namespace` (the CRDs from the chart's crds/,
//     the image the nodes already hold): the admission policies hold
//     there, an EgressService gets a host and its endpoints leave with the
//     LB IPs;
//   - `helm upgrade` of a value that rolls the agents (a pod annotation),
//     under traffic: every agent is replaced, the host does not move, no
//     HostLost, and no pod IP reaches the external host;
//   - `helm uninstall`, which deletes the workloads and keeps the
//     namespace: every node is clean (no flow, ip rule, hold or label:
//     the controller's labels go on its Deployment's deletion, the agents'
//     flows on their DaemonSet's), and the CRDs and the EgressService stay.
func TestHelm(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	repository, tag, _ := strings.Cut(EgressflowImage, ":")
	c.HelmInstall(helmRelease, helmNamespace,
		"--set", "image.repository="+repository, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never")
	expectAdmissionPolicies(t, c)
	expectLivenessPriority(t, c)

	s := newEgressScenario(t, c, offLeader(c))
	s.expectLBIPs()
	host, routedAt := s.announcer.Current()
	capture := c.External.Capture(t)

	// The upgrade: a value that changes the agents' pod template.
	before := c.agentPodUIDs()
	upgrade := time.Now()
	c.Helm("upgrade", helmRelease, ChartDir, "--namespace", helmNamespace, "--reuse-values",
		"--set", "agent.podAnnotations.egressflow\\.io/upgraded="+upgrade.UTC().Format("20060102T150405Z"))
	c.Kubectl("rollout", "status", "-n", helmNamespace, "daemonset/egressflow-agent", "--timeout=5m")
	c.WaitInstalled()
	if after := c.agentPodUIDs(); after.HasAny(before.UnsortedList()...) || after.Len() != len(c.Nodes) {
		t.Errorf("helm upgrade did not replace every agent: before %v, after %v", before.UnsortedList(), after.UnsortedList())
	}
	t.Logf("helm upgrade rolled %d agents in %v", len(c.Nodes), time.Since(upgrade).Round(time.Second))
	if history := c.Helm("history", helmRelease, "--namespace", helmNamespace); !strings.Contains(history, "Upgrade complete") {
		t.Errorf("helm history shows no completed upgrade:\n%s", history)
	}
	s.expectUndisturbed(t, "the upgrade", host, routedAt, upgrade, capture)

	// The uninstall: the namespace stays (Helm never deletes the release's
	// namespace), so only the workloads' deletion tells egressflow.
	started := time.Now()
	c.Helm("uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout=3m")
	expectEgressflowGone(t, c)
	t.Logf("every node clean %v after helm uninstall", time.Since(started).Round(time.Millisecond))
	if ns, err := c.Kube.CoreV1().Namespaces().Get(context.Background(), helmNamespace, metav1.GetOptions{}); err != nil {
		t.Errorf("namespace %s after helm uninstall: %v; helm uninstall keeps it", helmNamespace, err)
	} else if ns.DeletionTimestamp != nil {
		t.Errorf("namespace %s is being deleted after helm uninstall; helm uninstall keeps it", helmNamespace)
	}
	for _, ep := range s.endpoints {
		c.ExpectSources(ep, s.targets, podIPs(ep))
	}
	c.ExpectAPIKept("egressservice/" + scenarioNamespace + "/web")
}

// agentPodUIDs are the UIDs of egressflow's agent Pods.
func (c *Cluster) agentPodUIDs() sets.Set[types.UID] {
	c.t.Helper()
	pods, err := c.Kube.CoreV1().Pods(c.InstallNamespace()).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=egressflow-agent"})
	if err != nil {
		c.t.Fatal(err)
	}
	uids := sets.New[types.UID]()
	for _, p := range pods.Items {
		uids.Insert(p.UID)
	}
	return uids
}
