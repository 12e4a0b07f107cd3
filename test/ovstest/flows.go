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

// WriteBundleFile writes groups and then flows to a file for
// Switch.Bundle, one "group ..." or "flow ..." line each (ovs-ofctl's
// bundle file syntax), and returns its path. The groups come first: a
// flow may name a group only once it exists.
func WriteBundleFile[G, F fmt.Stringer](t testing.TB, groups []G, flows []F) string {
	t.Helper()
	var b strings.Builder
	for _, g := range groups {
		b.WriteString("group " + g.String() + "\n")
	}
	for _, f := range flows {
		b.WriteString("flow add " + f.String() + "\n")
	}
	path := filepath.Join(t.TempDir(), "bundle.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Bundle applies the group and flow mods of file (see WriteBundleFile)
// with `ovs-ofctl -O OpenFlow15 bundle`, one atomic transaction, and
// returns how long ovs-ofctl took.
func (s *Switch) Bundle(t testing.TB, file string) time.Duration {
	t.Helper()
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "bundle", s.Bridge, file)
	cmd.Env = s.Env()
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ovs-ofctl bundle %s: %v\n%s", file, err, out)
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

// Settle's tunables. Deleting many flows leaves ovs-vswitchd's RCU thread
// (urcu<N>) freeing them after the delete has been answered: 100k flows
// keep it busy for about a second here, and a benchmark round started
// meanwhile measures that cleanup along with itself.
const (
	// settleQuiet is how long the RCU thread must use no CPU at all
	// (the kernel counts thread CPU time in 10 ms ticks) to count as idle:
	// long enough to span several of its wakeups, short enough to add
	// little to a benchmark round.
	settleQuiet = 200 * time.Millisecond
	// settlePoll is how often its CPU time is read.
	settlePoll = 20 * time.Millisecond
	// settleTimeout bounds the wait on a switch that never goes idle
	// (a busy machine); the benchmark then fails rather than measure
	// garbage.
	settleTimeout = 30 * time.Second
)

// Settle waits until ovs-vswitchd's RCU thread has used no CPU for
// settleQuiet, and returns how long that took. Benchmarks call it after
// deleting many flows, so that the next round measures the switch and not
// the previous round's deferred frees.
func (s *Switch) Settle(t testing.TB) time.Duration {
	t.Helper()
	s.mu.Lock()
	d := s.vswitchd
	s.mu.Unlock()
	if d == nil {
		t.Fatal("ovstest: ovs-vswitchd is not running")
	}
	task := rcuThread(t, d.cmd.Process.Pid)
	start := time.Now()
	last, quietSince := threadCPUTicks(t, task), time.Now()
	for time.Since(quietSince) < settleQuiet {
		if time.Since(start) > settleTimeout {
			t.Fatalf("ovstest: ovs-vswitchd's RCU thread still busy after %v", settleTimeout)
		}
		time.Sleep(settlePoll)
		if now := threadCPUTicks(t, task); now != last {
			last, quietSince = now, time.Now()
		}
	}
	return time.Since(start)
}

// rcuThread returns the /proc path of ovs-vswitchd's RCU thread.
func rcuThread(t testing.TB, pid int) string {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	for _, task := range tasks {
		comm, err := os.ReadFile(filepath.Join(dir, task.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(comm), "urcu") {
			return filepath.Join(dir, task.Name())
		}
	}
	t.Fatalf("ovstest: ovs-vswitchd (pid %d) has no urcu thread", pid)
	return ""
}

// threadCPUTicks returns a thread's user plus system CPU time, in clock
// ticks (fields 14 and 15 of /proc/.../stat).
func threadCPUTicks(t testing.TB, task string) uint64 {
	stat, err := os.ReadFile(filepath.Join(task, "stat"))
	if err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis, where field 3 (the state) is first.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("ovstest: short %s/stat: %q", task, stat)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("ovstest: bad %s/stat: %q", task, stat)
	}
	return utime + stime
}
