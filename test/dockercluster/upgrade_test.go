//go:build e2e

package dockercluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
)

// previousImage is the image TestUpgrade builds from the previous commit.
const previousImage = "egressflow-previous:dev"

// TestUpgrade: egressflow upgraded under traffic from the previous commit's
// release (its deploy/ and its image, built here) to this one, one
// workload at a time as a rolling `kubectl apply` may leave them, and the
// controller then rolled back (docs/upgrades.md):
//  1. the previous release installed; the scenario's EgressService gets a
//     host and its endpoints leave with the LB IPs;
//  2. this release's API and every object but the agents' DaemonSet: the
//     new controller with the old agents (skew, one direction);
//  3. this release's DaemonSet: every agent replaced;
//  4. the previous release's controller Deployment: the new agents with
//     the old controller (skew, the other direction).
//
// In each step the service keeps its host (no HostLost, the announcer
// never moves), no pod IP reaches the external host, the EgressService's
// status stays as it was, and an endpoint pod started in that step leaves
// with the LB IPs: the skewed pair still acts on a change.
func TestUpgrade(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	root := mustRepoRoot(t)
	previous := c.previousRelease()
	previousDeploy := filepath.Join(previous, "deploy")

	c.Kubectl("apply", "-k", filepath.Join(previousDeploy, "crds"))
	c.applyObjects(c.renderRelease(previousDeploy, previousImage), nil)
	c.WaitInstalled()
	s := newEgressScenario(t, c, offLeader(c))
	s.expectLBIPs()
	host, routedAt := s.announcer.Current()
	status := s.status()
	t.Logf("previous release installed; %s hosts the service", host.Name)

	current := c.renderRelease(filepath.Join(root, "deploy"), EgressflowImage)
	step := func(index int, label string, apply func(), rollout string) {
		t.Helper()
		capture := c.External.Capture(t)
		began := time.Now()
		apply()
		c.Kubectl("rollout", "status", "-n", c.InstallNamespace(), rollout, "--timeout=5m")
		c.WaitInstalled()
		t.Logf("%s: rolled out in %v", label, time.Since(began).Round(time.Second))
		added := c.RunProbePod(scenarioNamespace, fmt.Sprintf("web-upgrade-%d", index), c.Nodes[index%len(c.Nodes)], map[string]string{"app": "web"}, s.targets...)
		c.ExpectSources(added, s.targets, []string{lbIPs[0].String(), lbIPs[1].String()})
		s.expectUndisturbed(t, label, host, routedAt, began, capture)
		if now := s.status(); now != status {
			t.Errorf("%s: the EgressService's status went from %q to %q", label, status, now)
		}
	}
	step(1, "new controller, old agents", func() {
		c.Kubectl("apply", "-k", filepath.Join(root, "deploy", "crds"))
		c.applyObjects(current, func(kind string) bool { return kind != "DaemonSet" })
	}, "deployment/egressflow-controller")
	step(2, "new agents", func() {
		c.applyObjects(current, func(kind string) bool { return kind == "DaemonSet" })
	}, "daemonset/egressflow-agent")
	step(3, "old controller, new agents", func() {
		c.applyObjects(c.renderRelease(previousDeploy, previousImage), func(kind string) bool { return kind == "Deployment" })
	}, "deployment/egressflow-controller")
}

// previousRelease checks the previous commit (HEAD's first parent, or the
// revision UPGRADE_FROM names: the release an upgrade starts from) out
// into a directory of the test's and builds its image as previousImage
// with that tree's own `make images`, imports it on every node, and
// returns the directory.
func (c *Cluster) previousRelease() string {
	c.t.Helper()
	root := mustRepoRoot(c.t)
	revision := cmp.Or(os.Getenv("UPGRADE_FROM"), "HEAD~1")
	dir := filepath.Join(c.t.TempDir(), "previous")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", "git -C \"$1\" archive \"$3\" | tar -x -C \"$2\"", "sh", root, dir, revision)
	if out, err := archive.CombinedOutput(); err != nil {
		c.t.Fatalf("check out %s: %v\n%s", revision, err, out)
	}
	version, err := run("git", "-C", root, "describe", "--tags", "--always", revision)
	if err != nil {
		c.t.Fatal(err)
	}
	repository, tag, _ := strings.Cut(previousImage, ":")
	if out, err := run("make", "-C", dir, "images", "IMAGE="+repository, "VERSION="+strings.TrimSpace(version), "IMAGE_ARCHS="+runtime.GOARCH); err != nil {
		c.t.Fatalf("make images of %s: %v\n%s", revision, err, out)
	}
	if tag != "dev" {
		c.t.Fatalf("previousImage %s: make images tags :dev", previousImage)
	}
	tarball := filepath.Join(c.t.TempDir(), "previous.tar")
	if _, err := run("docker", "save", "-o", tarball, previousImage); err != nil {
		c.t.Fatal(err)
	}
	for _, n := range c.Nodes {
		f, err := os.Open(tarball)
		if err != nil {
			c.t.Fatal(err)
		}
		imp := exec.Command("docker", "exec", "-i", n.Container, "ctr", "-n", "k8s.io", "images", "import", "-")
		imp.Stdin = f
		out, err := imp.CombinedOutput()
		f.Close()
		if err != nil {
			c.t.Fatalf("import %s on %s: %v\n%s", previousImage, n.Name, err, out)
		}
	}
	c.t.Logf("previous commit %s built as %s and imported on every node", strings.TrimSpace(version), previousImage)
	return dir
}

// renderRelease renders the kustomization of a release's deploy/ with its
// image set to image, as an operator's overlay with an `images:` entry
// does, and returns its objects as YAML documents.
func (c *Cluster) renderRelease(deploy, image string) []string {
	c.t.Helper()
	var docs []string
	for _, doc := range strings.Split(c.Kubectl("kustomize", c.overlayOf(deploy, "", nil, image)), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, doc)
		}
	}
	return docs
}

// applyObjects applies the documents whose kind keep accepts (all, when
// keep is nil) with kubectl apply.
func (c *Cluster) applyObjects(docs []string, keep func(kind string) bool) {
	c.t.Helper()
	var kept []string
	for _, doc := range docs {
		if keep == nil || keep(documentKind(doc)) {
			kept = append(kept, doc)
		}
	}
	if len(kept) == 0 {
		c.t.Fatal("applyObjects: no object of the kinds asked for")
	}
	file := filepath.Join(c.t.TempDir(), "objects.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(kept, "\n---\n")+"\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.Kubectl("apply", "-f", file)
}

// documentKind is the top-level kind of a YAML document.
func documentKind(doc string) string {
	for _, line := range strings.Split(doc, "\n") {
		if kind, ok := strings.CutPrefix(line, "kind: "); ok {
			return strings.TrimSpace(kind)
		}
	}
	return ""
}

// status is the scenario's EgressService's status, as JSON: what an
// upgrade must leave as it was.
func (s *egressScenario) status() string {
	s.c.t.Helper()
	es, err := versioned.NewForConfigOrDie(s.c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		s.c.t.Fatal(err)
	}
	raw, err := json.Marshal(es.Status)
	if err != nil {
		s.c.t.Fatal(err)
	}
	return string(raw)
}
