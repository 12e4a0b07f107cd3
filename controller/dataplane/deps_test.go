package dataplane

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoSystemDependencies: the dataplane is a pure model, testable and
// usable without a kernel to talk to. Nothing it links may be netlink, and
// no package of this module it links may make system calls of its own
// (golang.org/x/sys/unix): controller/iprule, which applies the rule model
// through netlink, imports dataplane, never the reverse. (x/sys/unix itself
// is linked, through client-go's typed coordination client that
// controller/heartbeat's Renewer uses; that is client-go's, not ours.)
func TestNoSystemDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/egressflow/egressflow/"
	forbidden := func(imp string) bool {
		return strings.HasPrefix(imp, "github.com/vishvananda/") || imp == "golang.org/x/sys/unix"
	}
	packages := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		packages++
		if strings.HasPrefix(pkg, "github.com/vishvananda/") {
			t.Errorf("controller/dataplane links %s", pkg)
		}
		if !strings.HasPrefix(pkg, module) {
			continue
		}
		for _, imp := range imports {
			if forbidden(imp) {
				t.Errorf("%s, linked by controller/dataplane, imports %s", pkg, imp)
			}
		}
	}
	if packages < 10 {
		t.Fatalf("go list found %d packages; the check read nothing:\n%s", packages, out)
	}
}
