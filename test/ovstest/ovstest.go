// Package ovstest starts real, isolated Open vSwitch instances for tests.
//
// Each Switch has its own ovsdb-server and ovs-vswitchd, its own run directory
// (database, sockets, pid and log files) and its own network namespace, so
// several "nodes" can live side by side on one machine and a test never touches
// the host's own OVS or links. The bridge br-ex uses the userspace (netdev)
// datapath, because these machines have no openvswitch kernel module, and
// speaks OpenFlow 1.3 and 1.5 on its passive management socket
// <Dir>/br-ex.mgmt.
//
// Everything Start creates is removed by t.Cleanup, also when the test fails:
// the daemons are stopped by pid, the namespace deleted, the directory removed.
// Starting a Switch needs root and the Debian openvswitch-switch package; the
// test fails (it never skips) when they are missing, since `make test` installs
// them.
package ovstest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BridgeName is the bridge every Switch creates, as on a real node.
const BridgeName = "br-ex"

// vswitchSchema is where Debian's openvswitch-common installs the database schema.
const vswitchSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// readyTimeout bounds how long Start waits for each daemon and the bridge. The
// daemons are normally ready in well under a second; the slack covers a loaded
// two-core CI machine without letting a broken install hang a test for long.
const readyTimeout = 20 * time.Second

// stopGrace is how long a daemon gets to exit after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Switch is one running Open vSwitch instance with its bridge br-ex.
type Switch struct {
	// Dir is the run directory: conf.db, db.sock, pid files, unixctl sockets,
	// logs and the bridge's management socket.
	Dir string
	// Bridge is the bridge's name, always BridgeName.
	Bridge string
	// MgmtSocket is the bridge's passive OpenFlow socket; dial "unix:"+MgmtSocket.
	MgmtSocket string
	// Netns is the network namespace the daemons run in (and so where the
	// bridge's LOCAL port and every port added to it live).
	Netns string

	mu       sync.Mutex
	ovsdb    *daemon
	vswitchd *daemon
}

// daemon is a process Start launched; done is closed once it has been reaped.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Option adjusts Start.
type Option func(*config)

type config struct {
	protocols string
}

// WithProtocols sets the bridge's `protocols` column (default
// "OpenFlow13,OpenFlow15"), e.g. to test a switch that lacks OpenFlow 1.5.
func WithProtocols(protocols string) Option {
	return func(c *config) { c.protocols = protocols }
}

// Start launches an isolated Open vSwitch in a new network namespace, creates
// br-ex with the userspace datapath, waits until its management socket
// answers, and registers cleanup of everything it made.
func Start(t testing.TB, opts ...Option) *Switch {
	t.Helper()
	cfg := config{protocols: "OpenFlow13,OpenFlow15"}
	for _, o := range opts {
		o(&cfg)
	}
	RequireRoot(t)
	for _, bin := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("ovstest: %s not found: install Debian's openvswitch-switch and iproute2 (make test does)", bin)
		}
	}

	// A short directory name: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "ovs-")
	if err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	s := &Switch{
		Dir:        dir,
		Bridge:     BridgeName,
		MgmtSocket: filepath.Join(dir, BridgeName+".mgmt"),
		// Registered first, so deleted after the daemons are stopped.
		Netns: NewNetns(t, "ovs"),
	}
	t.Cleanup(func() { s.teardown(t) })
	s.mustRun(t, "ovsdb-tool", "create", filepath.Join(dir, "conf.db"), vswitchSchema)

	s.ovsdb = s.launch(t, "ovsdb-server", filepath.Join(dir, "conf.db"),
		"--remote=punix:"+filepath.Join(dir, "db.sock"),
		"--pidfile="+filepath.Join(dir, "ovsdb-server.pid"),
		"--log-file="+filepath.Join(dir, "ovsdb-server.log"))
	s.waitFor(t, "ovsdb-server", func() error {
		_, err := s.run("ovs-vsctl", "--no-wait", "init")
		return err
	})
	s.StartVswitchd(t)
	s.Vsctl(t, "add-br", s.Bridge, "--", "set", "bridge", s.Bridge,
		"datapath_type=netdev", "protocols="+cfg.protocols)
	s.waitFor(t, "br-ex management socket", func() error {
		_, err := os.Stat(s.MgmtSocket)
		return err
	})
	return s
}

// RequireRoot fails the test unless it runs as root: OVS, namespaces and
// veths need it, and `make test` runs the integration tests as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces and Open vSwitch); run it through `make test` as root")
	}
}

// StartVswitchd starts ovs-vswitchd against this instance's database and waits
// until it answers on its control socket. After StopVswitchd the bridge comes
// back as configured, but with no flows but OVS's defaults.
func (s *Switch) StartVswitchd(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.vswitchd = s.launch(t, "ovs-vswitchd", "unix:"+filepath.Join(s.Dir, "db.sock"),
		"--pidfile="+filepath.Join(s.Dir, "ovs-vswitchd.pid"),
		"--log-file="+filepath.Join(s.Dir, "ovs-vswitchd.log"))
	s.mu.Unlock()
	s.waitFor(t, "ovs-vswitchd", func() error {
		_, err := s.run("ovs-appctl", "-t", "ovs-vswitchd", "version")
		return err
	})
}

// StopVswitchd kills ovs-vswitchd with SIGKILL, as a crash would, and waits
// until it is gone. The database, and so the bridge's configuration, survive.
func (s *Switch) StopVswitchd(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	d := s.vswitchd
	s.vswitchd = nil
	s.mu.Unlock()
	if d == nil {
		t.Fatal("ovstest: ovs-vswitchd is not running")
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}

// Env is the environment that points OVS's command-line tools at this
// instance: with it, `ovs-ofctl dump-flows br-ex`, `ovs-vsctl show` and
// `ovs-appctl -t ovs-vswitchd ...` talk to this Switch.
func (s *Switch) Env() []string {
	return append(os.Environ(),
		"OVS_RUNDIR="+s.Dir, "OVS_DBDIR="+s.Dir, "OVS_LOGDIR="+s.Dir)
}

// Ofctl runs `ovs-ofctl -O OpenFlow15 ARGS...` against this instance and
// returns its standard output; it fails t if the command fails.
func (s *Switch) Ofctl(t testing.TB, args ...string) string {
	t.Helper()
	return s.mustRun(t, "ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...)
}

// Vsctl runs ovs-vsctl against this instance's database.
func (s *Switch) Vsctl(t testing.TB, args ...string) string {
	t.Helper()
	return s.mustRun(t, "ovs-vsctl", append([]string{"--timeout=20"}, args...)...)
}

// Appctl runs `ovs-appctl -t ovs-vswitchd ARGS...` against this instance.
func (s *Switch) Appctl(t testing.TB, args ...string) string {
	t.Helper()
	return s.mustRun(t, "ovs-appctl", append([]string{"-t", "ovs-vswitchd"}, args...)...)
}

// Exec runs a command inside the switch's network namespace and returns its
// combined output; it fails t if the command fails.
func (s *Switch) Exec(t testing.TB, name string, args ...string) string {
	t.Helper()
	return s.mustRun(t, "ip", append([]string{"netns", "exec", s.Netns, name}, args...)...)
}

// launch starts a daemon inside the namespace, in the foreground so that its
// pid is ours to stop, with its output going to a file in Dir.
func (s *Switch) launch(t testing.TB, name string, args ...string) *daemon {
	t.Helper()
	out, err := os.OpenFile(filepath.Join(s.Dir, name+".stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	defer out.Close()
	// `ip netns exec` execs the daemon, so cmd's pid is the daemon's pid.
	cmd := exec.Command("ip", append([]string{"netns", "exec", s.Netns, name}, args...)...)
	cmd.Env = s.Env()
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C of `go test` reaches us, and we stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("ovstest: start %s: %v", name, err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	return d
}

// waitFor polls ready until it succeeds, failing t with the daemon logs after
// readyTimeout.
func (s *Switch) waitFor(t testing.TB, what string, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ovstest: %s not ready after %v: %v\n%s", what, readyTimeout, err, s.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Switch) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = s.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (s *Switch) mustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := s.run(name, args...)
	if err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	return out
}

// logs returns the tail of the daemons' logs, for failure messages.
func (s *Switch) logs() string {
	var b strings.Builder
	for _, f := range []string{"ovsdb-server.log", "ovs-vswitchd.log", "ovsdb-server.stderr", "ovs-vswitchd.stderr"} {
		data, err := os.ReadFile(filepath.Join(s.Dir, f))
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// teardown stops the daemons by pid and removes the directory (NewNetns's
// cleanup deletes the namespace afterwards).
// On a failed test it first prints the daemons' logs.
func (s *Switch) teardown(t testing.TB) {
	if t.Failed() {
		t.Logf("ovstest: logs of %s:\n%s", s.Dir, s.logs())
	}
	s.mu.Lock()
	daemons := []*daemon{s.vswitchd, s.ovsdb}
	s.vswitchd, s.ovsdb = nil, nil
	s.mu.Unlock()
	for _, d := range daemons {
		stop(d)
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		t.Errorf("ovstest: %v", err)
	}
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for the exit.
func stop(d *daemon) {
	if d == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(stopGrace):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// NewNetns creates a network namespace named prefix-<random> with loopback
// up and IPv6 duplicate address detection off, and deletes it when the test
// ends. Deleting a namespace also deletes
// the veth ends inside it.
func NewNetns(t testing.TB, prefix string) string {
	t.Helper()
	name := UniqueName(prefix + "-")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ovstest: ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ovstest: ip netns delete %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ovstest: loopback up in %s: %v: %s", name, err, out)
	}
	// No IPv6 duplicate address detection on the interfaces that will be
	// created in or moved into the namespace: nothing else shares these
	// links, and DAD would leave new addresses tentative (unusable) for a
	// second or more.
	if out, err := exec.Command("ip", "netns", "exec", name, "sysctl", "-qw",
		"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0").CombinedOutput(); err != nil {
		t.Fatalf("ovstest: IPv6 DAD off in %s: %v: %s", name, err, out)
	}
	return name
}

// UniqueName appends 8 random hex digits to prefix: short enough for an
// interface name (15 bytes) with a prefix of up to 7.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
