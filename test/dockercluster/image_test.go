//go:build e2e

package dockercluster

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/test/kubetest"
)

// TestImage builds the image as an operator does (make images) and reads
// it back: the OCI labels name the version `git describe` gives (the one
// the binaries print with --version) and the commit, and the nft binary
// the agent's nftables table needs runs inside it, FROM scratch as it is.
func TestImage(t *testing.T) {
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run("make", "-C", root, "images"); err != nil {
		t.Fatalf("make images: %v\n%s", err, out)
	}
	raw, err := run("docker", "image", "inspect", "--format", "{{json .Config.Labels}}", EgressflowImage)
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string
	if err := json.Unmarshal([]byte(raw), &labels); err != nil {
		t.Fatalf("labels %q: %v", raw, err)
	}
	version, err := run("git", "-C", root, "describe", "--tags", "--always", "--dirty")
	if err != nil {
		t.Fatal(err)
	}
	revision, err := run("git", "-C", root, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	printed, err := run("docker", "run", "--rm", "--entrypoint", "/egressflow-agent", EgressflowImage, "--version")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"org.opencontainers.image.title":    "egressflow",
		"org.opencontainers.image.version":  strings.TrimSpace(version),
		"org.opencontainers.image.revision": strings.TrimSpace(revision),
		"org.opencontainers.image.source":   "https://github.com/egressflow/egressflow",
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	if labels["org.opencontainers.image.created"] == "" {
		t.Errorf("no org.opencontainers.image.created label: %v", labels)
	}
	if !strings.Contains(printed, strings.TrimSpace(version)) {
		t.Errorf("egressflow-agent --version in the image printed %q; want the label's version %q", printed, strings.TrimSpace(version))
	}
	nft, err := run("docker", "run", "--rm", "--entrypoint", "/usr/sbin/nft", EgressflowImage, "--version")
	if err != nil || !strings.HasPrefix(nft, "nftables v1.") {
		t.Errorf("nft in the image: %q, %v; want nftables v1.x", nft, err)
	}
}
