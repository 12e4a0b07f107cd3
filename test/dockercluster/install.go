package dockercluster

import (
	"context"
	"fmt"
	"path/filepath"
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
