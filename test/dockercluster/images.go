package dockercluster

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/egressflow/egressflow/test/kubetest"
)

// Images the cluster runs, all built here with nothing pulled.
const (
	// EgressflowImage is deploy/'s image (make images).
	EgressflowImage = "egressflow:dev"
	// PauseImage is the pods' sandbox (testapp pause).
	PauseImage = "egressflow-pause:dev"
	// TestAppImage runs test pods (testapp probe).
	TestAppImage = "egressflow-testapp:dev"
)

// assets are what Start puts into every node: binaries and image tarballs,
// in one directory mounted read-only at /egressflow.
type assets struct {
	dir       string // on the host
	nodeImage string // the node containers' image tag
}

// shared are the assets of every cluster of this test process, built once
// (prepareAssets) in a directory of their own, which TestMain removes.
var shared struct {
	once   sync.Once
	dir    string
	assets *assets
	err    error
}

// clusterAssets puts the process's assets into dir, a cluster's own
// directory, building them on the first call: hard links, so that each
// cluster after the first starts without building or saving an image.
func clusterAssets(dir string) (*assets, error) {
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "egressflow-assets-"); shared.err == nil {
			shared.assets, shared.err = prepareAssets(shared.dir)
		}
	})
	if shared.err != nil {
		return nil, shared.err
	}
	err := filepath.WalkDir(shared.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(shared.dir, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return os.Link(path, target)
	})
	if err != nil {
		return nil, fmt.Errorf("link the assets into %s: %w", dir, err)
	}
	return &assets{dir: dir, nodeImage: shared.assets.nodeImage}, nil
}

// removeSharedAssets removes the process's assets, if it built them.
func removeSharedAssets() {
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}

// prepareAssets builds what is missing (the node image, the Kubernetes
// binaries, egressflow's and the test images), all cached but the
// tarballs, which go to dir.
func prepareAssets(dir string) (*assets, error) {
	root, err := kubetest.RepoRoot()
	if err != nil {
		return nil, err
	}
	a := &assets{dir: dir}
	out, err := run("bash", filepath.Join(root, "test", "dockercluster", "node-image.sh"))
	if err != nil {
		return nil, err
	}
	a.nodeImage = strings.TrimSpace(out)
	out, err = run("bash", filepath.Join(root, "test", "tools", "build-binaries.sh"), "--with-cluster")
	if err != nil {
		return nil, err
	}
	// What runs inside the nodes: flannel's daemon and CNI plugin only on
	// the clusters whose pods use flannel (node-setup.sh).
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, path, _ := strings.Cut(line, "=")
		if slices.Contains([]string{"kubelet", "kube-proxy", "flanneld", "cni-flannel"}, name) {
			if err := copyFile(path, filepath.Join(dir, name), 0o755); err != nil {
				return nil, err
			}
		}
	}
	// The machine's own architecture only: the nodes run it (TestImage
	// builds every one).
	if _, err := run("make", "-C", root, "images", "IMAGE_ARCHS="+runtime.GOARCH); err != nil {
		return nil, err
	}
	// The agent's binary itself, for the nodes' boot (--cold-guard).
	if err := buildStatic(root, "./cmd/egressflow-agent", filepath.Join(dir, "egressflow-agent")); err != nil {
		return nil, err
	}
	if err := buildTestImages(root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return nil, err
	}
	for _, image := range []string{EgressflowImage, PauseImage, TestAppImage} {
		name := strings.NewReplacer(":", "_", "/", "_").Replace(image) + ".tar"
		if _, err := run("docker", "save", "-o", filepath.Join(dir, "images", name), image); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// buildTestImages builds testapp statically and makes its two images.
func buildTestImages(root string) error {
	ctx, err := os.MkdirTemp("", "testapp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ctx)
	if err := buildStatic(root, "./test/dockercluster/testapp", filepath.Join(ctx, "testapp")); err != nil {
		return err
	}
	for image, entrypoint := range map[string]string{PauseImage: `["/testapp", "pause"]`, TestAppImage: `["/testapp", "probe"]`} {
		dockerfile := "FROM scratch\nCOPY testapp /\nENTRYPOINT " + entrypoint + "\n"
		if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			return err
		}
		cmd := exec.Command("docker", "build", "-q", "-t", image, ctx)
		cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v: %s", image, err, out)
		}
	}
	return nil
}

// buildStatic builds the repo's package pkg into out as a static, stripped
// binary, for the nodes and FROM scratch images.
func buildStatic(root, pkg, out string) error {
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if output, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v: %s", pkg, err, output)
	}
	return nil
}

// run runs a command and returns its standard output; on failure the error
// carries its standard error.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, mode)
}
