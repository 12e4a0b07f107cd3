package ovstest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WriteFlowFile writes flows in ovs-ofctl's text form (their String), one
// per line, to a new file under t.TempDir() for `ovs-ofctl add-flows`, and
// returns its path.
func WriteFlowFile[F fmt.Stringer](t testing.TB, flows []F) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for _, fl := range flows {
		fmt.Fprintln(w, fl.String())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// BundleAddFlows installs the flows of file (see WriteFlowFile) with
// `ovs-ofctl -O OpenFlow15 --bundle add-flows`, one atomic transaction, and
// returns how long ovs-ofctl took: the reference our client is measured
// against.
func (s *Switch) BundleAddFlows(t testing.TB, file string) time.Duration {
	t.Helper()
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "--bundle", "add-flows", s.Bridge, file)
	cmd.Env = s.Env()
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ovs-ofctl --bundle add-flows %s: %v\n%s", file, err, out)
	}
	return time.Since(start)
}

// FlowCount returns how many flows of the bridge the filter selects (for
// example "cookie=0x1/-1"), from `ovs-ofctl dump-aggregate`.
func (s *Switch) FlowCount(t testing.TB, filter string) int {
	t.Helper()
	out := s.Ofctl(t, "dump-aggregate", s.Bridge, filter)
	_, rest, found := strings.Cut(out, "flow_count=")
	n, err := strconv.Atoi(strings.TrimSpace(rest))
	if !found || err != nil {
		t.Fatalf("dump-aggregate printed no flow count: %s", out)
	}
	return n
}
