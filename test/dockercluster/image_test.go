//go:build e2e

package dockercluster

import (
	"debug/elf"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/test/kubetest"
)

// TestImage builds the images as an operator does (make images: amd64 and
// arm64) and reads them back: the OCI labels name the version `git
// describe` gives (the one the binaries print with --version) and the
// commit, and the nft binary the agent's nftables table needs runs inside
// the machine's own, FROM scratch as it is. The other architecture's image,
// which this machine cannot run, says it is that architecture's, and so
// do the ELF headers of its commands, its nft and its dynamic loader.
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

	other := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for arch, machine := range other {
		if arch == runtime.GOARCH {
			continue
		}
		image := "egressflow:" + strings.TrimSpace(version) + "-" + arch
		got, err := run("docker", "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image)
		if err != nil || strings.TrimSpace(got) != "linux/"+arch {
			t.Errorf("%s: platform %q, %v; want linux/%s", image, strings.TrimSpace(got), err, arch)
			continue
		}
		container, err := run("docker", "create", image)
		if err != nil {
			t.Fatal(err)
		}
		container = strings.TrimSpace(container)
		t.Cleanup(func() { _, _ = run("docker", "rm", container) })
		dir := t.TempDir()
		for _, path := range []string{"/egressflow-agent", "/egressflow-controller", "/usr/sbin/nft", "/lib/ld-linux-aarch64.so.1", "/lib64/ld-linux-x86-64.so.2"} {
			if (strings.Contains(path, "aarch64") && arch != "arm64") || (strings.Contains(path, "x86-64") && arch != "amd64") {
				continue
			}
			local := filepath.Join(dir, filepath.Base(path))
			if _, err := run("docker", "cp", "-L", container+":"+path, local); err != nil {
				t.Errorf("%s: %v", image, err)
				continue
			}
			f, err := elf.Open(local)
			if err != nil {
				t.Errorf("%s %s: %v", image, path, err)
				continue
			}
			if f.Machine != machine {
				t.Errorf("%s %s: ELF machine %v, want %v", image, path, f.Machine, machine)
			}
			f.Close()
		}
	}
}
