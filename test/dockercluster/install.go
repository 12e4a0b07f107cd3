package dockercluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// installTimeout bounds egressflow's rollout: the agents and both
// controller replicas Ready. Seconds here; the rest is slack for CI.
const installTimeout = 3 * time.Minute

// Namespace is where deploy/ installs egressflow.
const Namespace = "egressflow-system"

// Install installs egressflow as a user does, `kubectl apply -k
// deploy/crds` and then `kubectl apply -k deploy/` (this cluster uses
// deploy/cluster.env's values as they are, and the images are already in
// every node's containerd), and waits until an agent is Ready on every node
// and both controller replicas are available.
func (c *Cluster) Install() {
	c.t.Helper()
	c.InstallFrom(filepath.Join(mustRepoRoot(c.t), "deploy"), Namespace)
}

// InstallFrom installs the API (deploy/crds), then the workloads of the
// kustomization in dir, which installs them into namespace (deploy/ or an
// overlay of it), and waits until they are Ready. The cluster's helpers
// (LeaderNode, RestartNode, the failure dump) follow that namespace.
func (c *Cluster) InstallFrom(dir, namespace string) {
	c.t.Helper()
	start := time.Now()
	c.Kubectl("apply", "-k", filepath.Join(mustRepoRoot(c.t), "deploy", "crds"))
	c.Kubectl("apply", "-k", dir)
	c.namespace = namespace
	c.WaitInstalled()
	c.t.Logf("dockercluster: egressflow installed in %s and Ready %v after kubectl apply -k", namespace, time.Since(start).Round(time.Second))
}

// Overlay writes a kustomization of deploy/, as an operator's overlay:
// it installs into namespace (deploy/'s own when empty), and merges
// values into the egressflow-cluster ConfigMap (README, "Values"). It
// returns the overlay's directory, for InstallFrom and UninstallFrom.
func (c *Cluster) Overlay(namespace string, values map[string]string) string {
	c.t.Helper()
	return c.overlayOf(filepath.Join(mustRepoRoot(c.t), "deploy"), namespace, values, "")
}

// overlayOf is Overlay of the kustomization in deploy (this tree's deploy/
// or another release's), with its image set to image ("": as it is), as
// an overlay's `images:` entry sets it.
func (c *Cluster) overlayOf(deploy, namespace string, values map[string]string, image string) string {
	c.t.Helper()
	dir := c.t.TempDir()
	// Kustomize takes a base only by a path relative to the overlay.
	base, err := filepath.Rel(dir, deploy)
	if err != nil {
		c.t.Fatal(err)
	}
	lines := []string{"apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization"}
	if namespace != "" {
		lines = append(lines, "namespace: "+namespace)
	}
	lines = append(lines, "resources:", "- "+base)
	lines = append(lines, sortOptionsOf(c.t, deploy)...)
	if image != "" {
		name, tag, _ := strings.Cut(image, ":")
		lines = append(lines, "images:", "- name: egressflow", "  newName: "+name, "  newTag: "+tag)
	}
	if len(values) > 0 {
		lines = append(lines, "configMapGenerator:", "- name: egressflow-cluster", "  namespace: "+Namespace, "  behavior: merge", "  literals:")
		for _, k := range slices.Sorted(maps.Keys(values)) {
			lines = append(lines, fmt.Sprintf("  - %s=%s", k, values[k]))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return dir
}

// sortOptionsOf are the lines of the sortOptions of the kustomization in
// deploy (none if it has none), as an overlay copies them: kustomize reads
// the field only in the kustomization it builds, and deploy/'s order is
// what lets its uninstall remove every label (deploy/kustomization.yaml).
func sortOptionsOf(t testing.TB, deploy string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deploy, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", deploy, err)
	}
	if k["sortOptions"] == nil {
		return nil
	}
	out, err := yaml.Marshal(map[string]any{"sortOptions": k["sortOptions"]})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

// InstallWithValues installs egressflow as a user whose cluster differs
// from deploy/cluster.env in values does: `kubectl apply -k` of an overlay
// of deploy/ that merges them into the egressflow-cluster ConfigMap.
func (c *Cluster) InstallWithValues(values map[string]string) {
	c.t.Helper()
	c.InstallFrom(c.Overlay("", values), Namespace)
}

// Uninstall removes egressflow's workloads as a user does, `kubectl delete
// -k deploy/`, which waits until every object is gone. The API (the CRDs)
// and every user's object stay.
func (c *Cluster) Uninstall() {
	c.t.Helper()
	c.UninstallFrom(filepath.Join(mustRepoRoot(c.t), "deploy"))
}

// UninstallFrom is Uninstall for the kustomization in dir.
func (c *Cluster) UninstallFrom(dir string) {
	c.t.Helper()
	c.Kubectl("delete", "-k", dir, "--timeout=3m")
}

// ExpectAPIKept fails the test unless every egressflow CRD is still
// established and every EgressService, EgressIP, EgressQoS and
// EgressFirewall in want (kind/namespace/name) still exists: the
// workloads' uninstall keeps the users' objects.
func (c *Cluster) ExpectAPIKept(want ...string) {
	c.t.Helper()
	crds := c.Kubectl("get", "crd", "-o", "name")
	for _, crd := range []string{"egressservices", "egressips", "egressqoses", "egressfirewalls"} {
		if !strings.Contains(crds, "customresourcedefinition.apiextensions.k8s.io/"+crd+".k8s.ovn.org") {
			c.t.Errorf("CRD %s.k8s.ovn.org is gone:\n%s", crd, crds)
		}
	}
	for _, object := range want {
		kind, rest, _ := strings.Cut(object, "/")
		namespace, name, namespaced := strings.Cut(rest, "/")
		args := []string{"get", kind, namespace}
		if namespaced {
			args = []string{"get", kind, "-n", namespace, name}
		}
		if _, err := c.kubectl(args...); err != nil {
			c.t.Errorf("%s is gone after the uninstall: %v", object, err)
		}
	}
}

// WaitInstalled waits until an agent is Ready on every node and both
// controller replicas are available.
func (c *Cluster) WaitInstalled() {
	c.t.Helper()
	ctx := context.Background()
	wait.Until(c.t, installTimeout, func() error {
		ds, err := c.Kube.AppsV1().DaemonSets(c.InstallNamespace()).Get(ctx, "egressflow-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if int(ds.Status.NumberReady) != len(c.Nodes) || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("agents: %d of %d Ready, %d updated", ds.Status.NumberReady, len(c.Nodes), ds.Status.UpdatedNumberScheduled)
		}
		d, err := c.Kube.AppsV1().Deployments(c.InstallNamespace()).Get(ctx, "egressflow-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas != 2 {
			return fmt.Errorf("controller: %d of 2 replicas available", d.Status.AvailableReplicas)
		}
		return nil
	})
}

// InstallNamespace is where egressflow was last installed (Namespace
// before any install).
func (c *Cluster) InstallNamespace() string {
	if c.namespace == "" {
		return Namespace
	}
	return c.namespace
}

// ChartDir is egressflow's Helm chart, relative to the repository.
const ChartDir = "deploy/charts/egressflow"

// Helm runs helm (built from the module proxy into the cache, like
// kubectl) against the cluster and fails the test if it fails. Its own
// repositories, cache and plugins are the test's, not the user's.
func (c *Cluster) Helm(args ...string) string {
	c.t.Helper()
	bin, err := kubetest.Binary("helm")
	if err != nil {
		c.t.Fatalf("dockercluster: helm (make test-deps builds it): %v", err)
	}
	home := c.t.TempDir()
	cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Dir = mustRepoRoot(c.t)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("dockercluster: helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// HelmInstall installs the chart as release into namespace, as an
// operator does (`helm install --create-namespace`; the CRDs come from
// the chart's crds/), with extra helm arguments (--set, --values), and
// waits until the workloads are Ready. The cluster's helpers follow that
// namespace.
func (c *Cluster) HelmInstall(release, namespace string, args ...string) {
	c.t.Helper()
	start := time.Now()
	c.Helm(append([]string{"install", release, ChartDir, "--namespace", namespace, "--create-namespace"}, args...)...)
	c.namespace = namespace
	c.WaitInstalled()
	c.t.Logf("dockercluster: egressflow installed in %s and Ready %v after helm install", namespace, time.Since(start).Round(time.Second))
}
