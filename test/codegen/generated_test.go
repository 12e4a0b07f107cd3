// Package codegen checks that the generated code and manifests in the repo
// are what `make generate manifests` makes from the current API types.
package codegen

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egressflow/egressflow/test/kubetest"
)

// generated reports whether a repo-relative path is written by the generators.
func generated(path string) bool {
	return strings.HasPrefix(path, "controller/generated/") ||
		(strings.HasPrefix(path, "deploy/crds/") && filepath.Base(path) != "kustomization.yaml") ||
		strings.HasPrefix(path, "deploy/charts/egressflow/crds/") ||
		(strings.HasPrefix(path, "controller/apis/") && strings.HasPrefix(filepath.Base(path), "zz_generated."))
}

// TestGeneratedFilesAreCurrent regenerates into a copy of the repository and
// fails if any generated file differs, is missing, or is left over.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	if err := copyTree(root, scratch); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "generate", "manifests")
	cmd.Dir = scratch
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make generate manifests: %v\n%s", err, out)
	}
	want, got := generatedFiles(t, scratch), generatedFiles(t, root)
	for path, content := range want {
		current, ok := got[path]
		switch {
		case !ok:
			t.Errorf("%s is missing: run make generate manifests", path)
		case !bytes.Equal(current, content):
			t.Errorf("%s is stale: run make generate manifests", path)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("%s is no longer generated: delete it (make generate does)", path)
		}
	}
}

func generatedFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if generated(filepath.ToSlash(rel)) {
			files[filepath.ToSlash(rel)], err = os.ReadFile(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// copyTree copies the module's files (not .git) so that generation can run
// without touching the working tree.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
}

// TestCRDKustomizationListsEveryCRD: deploy/crds/kustomization.yaml, which
// operators apply to install the API apart from the workloads, lists
// exactly the CRDs that make manifests generates, so that a new API's CRD
// cannot be left out of an install.
func TestCRDKustomizationListsEveryCRD(t *testing.T) {
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "crds", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &kustomization); err != nil {
		t.Fatal(err)
	}
	files, err := kubetest.CRDFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var generated []string
	for _, f := range files {
		generated = append(generated, filepath.Base(f))
	}
	listed := slices.Sorted(slices.Values(kustomization.Resources))
	if len(generated) == 0 || !slices.Equal(listed, generated) {
		t.Errorf("deploy/crds/kustomization.yaml lists %v; the CRDs are %v", listed, generated)
	}
}
