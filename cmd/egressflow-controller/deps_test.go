package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoDataplane: the cluster component decides who holds what and
// writes status; it renders no flow. It reads the API objects' rules as
// the agents do through the API package (controller/apis), so it links
// neither the dataplane model nor the OpenFlow codec nor conntrack.
func TestLinksNoDataplane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/egressflow/egressflow/"
	ours := 0
	for pkg := range strings.Lines(string(out)) {
		pkg = strings.TrimSpace(pkg)
		if !strings.HasPrefix(pkg, module) {
			continue
		}
		ours++
		switch strings.TrimPrefix(pkg, module) {
		case "openflow", "conntrack", "controller/dataplane":
			t.Errorf("egressflow-controller links %s", pkg)
		}
	}
	if ours < 5 {
		t.Fatalf("go list found %d packages of the module; the check read nothing:\n%s", ours, out)
	}
}
