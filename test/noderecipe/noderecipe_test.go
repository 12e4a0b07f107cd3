// Package noderecipe checks the node recipe operators install from
// deploy/node: its systemd units are valid and order the bridge and the
// cold guard after Open vSwitch and before the kubelet. The scripts
// themselves run on every node of the cluster in Docker (test/dockercluster
// node-setup.sh runs br-ex.sh and cold-guard.sh).
package noderecipe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/test/kubetest"
)

// units are the recipe's systemd units; scripts what they run, installed
// where the units' ExecStart says (/usr/local/lib/egressflow).
var (
	units   = []string{"egressflow-node-bridge.service", "egressflow-cold-guard.service"}
	scripts = []string{"br-ex.sh", "cold-guard.sh"}
)

// standInTargets are the targets the units reach through their own lines
// and systemd's default dependencies of a service.
var standInTargets = []string{"sysinit.target", "basic.target", "shutdown.target", "multi-user.target", "network-online.target"}

// TestUnitsVerify installs the units and scripts into a root of their own,
// beside stand-ins for the units they order against (Open vSwitch's and the
// kubelet's), and has systemd-analyze verify them: no unknown key, no
// missing dependency or command, no warning at all.
func TestUnitsVerify(t *testing.T) {
	repo, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	unitDir := filepath.Join(root, "etc", "systemd", "system")
	libDir := filepath.Join(root, "usr", "local", "lib", "egressflow")
	for _, d := range []string{unitDir, libDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(src, dst string, mode os.FileMode) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range units {
		copyFile(filepath.Join(repo, "deploy", "node", u), filepath.Join(unitDir, u), 0o644)
	}
	for _, s := range scripts {
		copyFile(filepath.Join(repo, "deploy", "node", s), filepath.Join(libDir, s), 0o755)
	}
	for _, standIn := range []string{"openvswitch-switch.service", "kubelet.service", "ovs-vswitchd.service"} {
		unit := "[Unit]\nDescription=stand-in\n[Service]\nExecStart=/bin/true\n"
		if err := os.WriteFile(filepath.Join(unitDir, standIn), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The targets every service's default dependencies name.
	for _, target := range standInTargets {
		if err := os.WriteFile(filepath.Join(unitDir, target), []byte("[Unit]\nDescription=stand-in\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"verify", "--man=no", "--root=" + root}, units...)
	out, err := exec.Command("systemd-analyze", args...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnitsOrder checks the order the recipe promises: the bridge after
// Open vSwitch, the cold guard after the bridge, both before the kubelet.
func TestUnitsOrder(t *testing.T) {
	repo, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"egressflow-node-bridge.service": {"After=openvswitch-switch.service", "Requires=openvswitch-switch.service", "Before=kubelet.service"},
		"egressflow-cold-guard.service":  {"After=egressflow-node-bridge.service", "Requires=egressflow-node-bridge.service", "Before=kubelet.service"},
	}
	for unit, lines := range want {
		b, err := os.ReadFile(filepath.Join(repo, "deploy", "node", unit))
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			key, values, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			for _, v := range strings.Fields(values) {
				have[key+"="+v] = true
			}
		}
		for _, l := range lines {
			if !have[l] {
				t.Errorf("%s lacks %s", unit, l)
			}
		}
	}
}
