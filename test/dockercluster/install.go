package dockercluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/test/wait"
)

// installTimeout bounds egressflow's rollout: the agents and both
// controller replicas Ready. Seconds here; the rest is slack for CI.
const installTimeout = 3 * time.Minute

// Install installs egressflow as a user does, `kubectl apply -k deploy/`
// (this cluster uses deploy/cluster.env's values as they are, and the
// images are already in every node's containerd), and waits until an agent
// is Ready on every node and both controller replicas are available.
func (c *Cluster) Install() {
	c.t.Helper()
	start := time.Now()
	c.Kubectl("apply", "-k", filepath.Join(mustRepoRoot(c.t), "deploy"))
	c.WaitInstalled()
	c.t.Logf("dockercluster: egressflow installed and Ready %v after kubectl apply -k deploy/", time.Since(start).Round(time.Second))
}

// InstallWithValues installs egressflow as a user whose cluster differs
// from deploy/cluster.env in values does: `kubectl apply -k` of an overlay
// of deploy/ that merges values into the egressflow-cluster ConfigMap
// (README, "Values"); then it waits as Install does. Uninstall still
// removes everything (the objects' names are deploy/'s).
func (c *Cluster) InstallWithValues(values map[string]string) {
	c.t.Helper()
	overlay := c.t.TempDir()
	var literals strings.Builder
	for _, k := range slices.Sorted(maps.Keys(values)) {
		fmt.Fprintf(&literals, "  - %s=%s\n", k, values[k])
	}
	// Kustomize takes a base only by a path relative to the overlay.
	base, err := filepath.Rel(overlay, filepath.Join(mustRepoRoot(c.t), "deploy"))
	if err != nil {
		c.t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
configMapGenerator:
- name: egressflow-cluster
  namespace: egressflow-system
  behavior: merge
  literals:
%s`, base, literals.String())
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		c.t.Fatal(err)
	}
	start := time.Now()
	c.Kubectl("apply", "-k", overlay)
	c.WaitInstalled()
	c.t.Logf("dockercluster: egressflow installed with %v and Ready %v after kubectl apply -k", values, time.Since(start).Round(time.Second))
}

// Uninstall removes egressflow as a user does, `kubectl delete -k
// deploy/`, which waits until every object is gone.
func (c *Cluster) Uninstall() {
	c.t.Helper()
	c.Kubectl("delete", "-k", filepath.Join(mustRepoRoot(c.t), "deploy"), "--timeout=3m")
}

// WaitInstalled waits until an agent is Ready on every node and both
// controller replicas are available.
func (c *Cluster) WaitInstalled() {
	c.t.Helper()
	ctx := context.Background()
	wait.Until(c.t, installTimeout, func() error {
		ds, err := c.Kube.AppsV1().DaemonSets(Namespace).Get(ctx, "egressflow-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if int(ds.Status.NumberReady) != len(c.Nodes) || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("agents: %d of %d Ready, %d updated", ds.Status.NumberReady, len(c.Nodes), ds.Status.UpdatedNumberScheduled)
		}
		d, err := c.Kube.AppsV1().Deployments(Namespace).Get(ctx, "egressflow-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas != 2 {
			return fmt.Errorf("controller: %d of 2 replicas available", d.Status.AvailableReplicas)
		}
		return nil
	})
}

// Namespace is where deploy/ installs egressflow.
const Namespace = "egressflow-system"
