// Package proc runs egressflow's own commands as child processes of a test
// (or of the demo): built from this repository, logging to a file, stopped
// by pid when the test ends (and killed with the test binary if it dies).
package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, "./"+pkg)
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
	Log    string
	exited chan error
	err    error
	done   bool
}

// Start runs name with args, its output going to a new file in the test's
// temporary directory. The process is killed when the test ends unless it
// was stopped before, and its log is printed if the test failed.
func Start(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(name, args...), exited: make(chan error, 1)}
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
	go func() { p.exited <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		if !p.done {
			_ = p.Cmd.Process.Kill()
			p.wait()
		}
		if t.Failed() {
			t.Logf("proc: log of %s (pid %d):\n%s", filepath.Base(name), p.Cmd.Process.Pid, p.Output())
		}
	})
	return p
}

func (p *Process) wait() error {
	if !p.done {
		p.err, p.done = <-p.exited, true
	}
	return p.err
}

// Stop sends sig and waits for the process to exit, killing it after
// stopGrace; it returns how the process ended.
func (p *Process) Stop(sig os.Signal) error {
	if p.done {
		return p.err
	}
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case err := <-p.exited:
		p.err, p.done = err, true
		return err
	case <-time.After(stopGrace):
		_ = p.Cmd.Process.Kill()
		_ = p.wait()
		return fmt.Errorf("proc: no exit within %v of %v; killed", stopGrace, sig)
	}
}

// Output is what the process logged so far.
func (p *Process) Output() string {
	data, _ := os.ReadFile(p.Log)
	return string(data)
}
