// Package proc runs egressflow's own commands as child processes of a test
// (or of the demo): built from this repository, logging to a file, stopped
// by pid when the test ends (and killed with the test binary if it dies).
package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/kubetest"
)

// stopGrace is how long Stop waits for a process to exit after its signal
// before killing it: the commands shut down in well under a second.
const stopGrace = 20 * time.Second

// Build compiles the command in the repository directory pkg (e.g.
// "cmd/egressflow-agent") into the test's temporary directory and returns
// the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	return build(t, pkg)
}

// BuildVersion is Build with the version the binary reports (--version,
// build_info) set to version, as `make build` sets it from git describe.
func BuildVersion(t testing.TB, pkg, version string) string {
	t.Helper()
	return build(t, pkg, "-ldflags", "-X github.com/egressflow/egressflow/cmd/internal/cli.Version="+version)
}

func build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), "./"+pkg)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("proc: go build ./%s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Process is a running command.
type Process struct {
	Cmd *exec.Cmd
	// Log is the file holding its standard output and error.
	Log  string
	done chan struct{}
	err  error // how it ended, once done is closed
}

// Start runs name with args, its output going to a new file in the test's
// temporary directory. The process is killed when the test ends unless it
// has exited, and its log is printed if the test failed.
func Start(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(name, args...), done: make(chan struct{})}
	log, err := os.CreateTemp(t.TempDir(), filepath.Base(name)+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	p.Log = log.Name()
	p.Cmd.Stdout, p.Cmd.Stderr = log, log
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("proc: start %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("proc: log of %s (pid %d):\n%s", filepath.Base(name), p.Cmd.Process.Pid, p.Output())
		}
	})
	return p
}

// Exited is closed once the process has exited; Err then tells how.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err is how the process ended (nil: exit status 0); call it once Exited
// is closed.
func (p *Process) Err() error { return p.err }

// Stop sends sig and waits for the process to exit, killing it after
// stopGrace; it returns how the process ended.
func (p *Process) Stop(sig os.Signal) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(stopGrace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("proc: no exit within %v of %v; killed", stopGrace, sig)
	}
}

// Output is what the process logged so far.
func (p *Process) Output() string {
	data, _ := os.ReadFile(p.Log)
	return string(data)
}

// Sample returns the value of one sample in a Prometheus text exposition,
// as our commands serve it on /metrics: sample is the metric name with its
// labels as exposed, e.g. `egressflow_agent_service_flows{service="shop/web"}`, or
// the bare name of an unlabelled metric.
func Sample(exposition, sample string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
