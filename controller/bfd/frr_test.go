package bfd

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/topology"
)

// bfddBinary is FRR's BFD daemon, from Debian's frr package.
const bfddBinary = "/usr/lib/frr/bfdd"

// frrBFD is FRR's bfdd running in a namespace, as on an external gateway,
// configured with one peer per address.
type frrBFD struct {
	ns, dir string
	cmd     *exec.Cmd
}

func startFRR(t testing.TB, ns string, local []netip.Addr, peers []netip.Addr) *frrBFD {
	t.Helper()
	if _, err := os.Stat(bfddBinary); err != nil {
		t.Fatalf("%s not found: install Debian's frr package (make test-deps does)", bfddBinary)
	}
	// Not t.TempDir: its parent is private to root, and bfdd runs as frr.
	dir, err := os.MkdirTemp("", "bfdd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var conf strings.Builder
	conf.WriteString("bfd\n")
	for i, p := range peers {
		// FRR's own defaults are 300 ms x 3; the gateways in these tests
		// run as fast as ours.
		fmt.Fprintf(&conf, " peer %s local-address %s\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n !\n", p, local[i])
	}
	conf.WriteString("!\n")
	if err := os.WriteFile(filepath.Join(dir, "bfdd.conf"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// bfdd drops to the frr user, which must reach its sockets' directory.
	run(t, "chown", "-R", "frr:frr", dir)
	f := &frrBFD{ns: ns, dir: dir}
	f.cmd = exec.Command("ip", "netns", "exec", ns, bfddBinary,
		"-f", filepath.Join(dir, "bfdd.conf"), "-i", filepath.Join(dir, "bfdd.pid"),
		"--vty_socket", dir, "--bfdctl", filepath.Join(dir, "bfdd.sock"), "-z", filepath.Join(dir, "zserv.api"),
		"-A", "127.0.0.1", "-P", "0", "--log", "file:"+filepath.Join(dir, "bfdd.log"))
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.kill)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "bfdd.log"))
			t.Logf("bfdd's log:\n%s", log)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := f.vtysh("show bfd peers json"); err == nil {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatal("bfdd did not open its vty socket in 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops bfdd at once, as a gateway that dies: no AdminDown is sent.
func (f *frrBFD) kill() {
	if f.cmd.Process == nil || f.cmd.ProcessState != nil {
		return
	}
	// ip netns exec execs bfdd in place, so the pid is bfdd's.
	_ = f.cmd.Process.Signal(syscall.SIGKILL)
	_ = f.cmd.Wait()
}

func (f *frrBFD) vtysh(commands ...string) (string, error) {
	args := []string{"netns", "exec", f.ns, "vtysh", "--vty_socket", f.dir, "-d", "bfdd"}
	for _, c := range commands {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("vtysh %s: %v: %s", strings.Join(commands, "; "), err, out)
	}
	return string(out), nil
}

// frrPeer is what `show bfd peers json` says of one peer.
type frrPeer struct {
	Peer             string `json:"peer"`
	Status           string `json:"status"`
	RemoteDiagnostic string `json:"remote-diagnostic"`
}

func (f *frrBFD) peer(t testing.TB, addr netip.Addr) frrPeer {
	t.Helper()
	out, err := f.vtysh("show bfd peers json")
	if err != nil {
		t.Fatal(err)
	}
	var peers []frrPeer
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		t.Fatalf("show bfd peers json: %v: %s", err, out)
	}
	for _, p := range peers {
		if p.Peer == addr.String() {
			return p
		}
	}
	t.Fatalf("bfdd has no peer %s: %s", addr, out)
	return frrPeer{}
}

func (f *frrBFD) waitPeer(t testing.TB, addr netip.Addr, status string, within time.Duration) frrPeer {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p := f.peer(t, addr)
		if p.Status == status {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("bfdd's peer %s is %q after %v, want %q", addr, p.Status, within, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInteroperatesWithFRR runs our sessions against FRR's bfdd, the
// daemon an external gateway runs, over IPv4 and IPv6: both sides come
// Up; FRR shutting a peer down takes ours Down as the neighbour's
// decision and bringing it back takes ours Up; our removing a session
// shows in FRR as administratively down; and a bfdd that dies is
// detected as a silent peer.
func TestInteroperatesWithFRR(t *testing.T) {
	p := topology.NewPair(t)
	ours, _ := listenIn(t, p.NsA, Config{})
	frr := startFRR(t, p.NsB, []netip.Addr{p.B4, p.B6}, []netip.Addr{p.A4, p.A6})
	addIn(t, p.NsA, ours, p.B4, p.B6)
	for _, gw := range []netip.Addr{p.B4, p.B6} {
		waitState(t, ours, gw, Up, sessionSetUp)
	}
	for _, us := range []netip.Addr{p.A4, p.A6} {
		frr.waitPeer(t, us, "up", sessionSetUp)
	}

	if _, err := frr.vtysh("configure terminal", "bfd", "peer "+p.A4.String()+" local-address "+p.B4.String(), "shutdown"); err != nil {
		t.Fatal(err)
	}
	if d := waitState(t, ours, p.B4, Down, 5*time.Second); d != DiagNeighborSignaledDown {
		t.Fatalf("FRR's shutdown took our session down with %v, want %v", d, DiagNeighborSignaledDown)
	}
	if _, err := frr.vtysh("configure terminal", "bfd", "peer "+p.A4.String()+" local-address "+p.B4.String(), "no shutdown"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ours, p.B4, Up, sessionSetUp)

	ours.Remove(p.B6)
	if got := frr.waitPeer(t, p.A6, "down", 5*time.Second); !strings.Contains(got.RemoteDiagnostic, "administratively") {
		t.Errorf("FRR sees our removed session as %+v, want the remote diagnostic administratively down", got)
	}

	frr.kill()
	if d := waitState(t, ours, p.B4, Down, 5*time.Second); d != DiagControlDetectionExpired {
		t.Fatalf("a dead bfdd took our session down with %v, want %v", d, DiagControlDetectionExpired)
	}
}
