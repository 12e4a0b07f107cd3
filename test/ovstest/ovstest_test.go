package ovstest

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelloOverMgmtSocket speaks raw OpenFlow to the bridge the harness made:
// a HELLO offering only OpenFlow 1.5 must be answered by a HELLO whose
// version-bitmap includes 1.5, and a FEATURES_REQUEST by a FEATURES_REPLY.
func TestHelloOverMgmtSocket(t *testing.T) {
	s := Start(t)
	conn, err := net.DialTimeout("unix", s.MgmtSocket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))

	const of15 = 0x06
	// HELLO: header(8) + version-bitmap element: type 1, len 8, bitmap with bit 6.
	hello := []byte{of15, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 1 << of15}
	if _, err := conn.Write(hello); err != nil {
		t.Fatal(err)
	}
	version, msgType, body := readMessage(t, conn)
	if version != of15 || msgType != 0 {
		t.Fatalf("want HELLO version 6, got version %d type %d", version, msgType)
	}
	if len(body) < 8 || binary.BigEndian.Uint16(body[0:2]) != 1 || body[7]&(1<<of15) == 0 {
		t.Fatalf("HELLO reply has no version bitmap offering OpenFlow 1.5: % x", body)
	}

	// FEATURES_REQUEST (type 5) -> FEATURES_REPLY (type 6) with a datapath id.
	if _, err := conn.Write([]byte{of15, 5, 0, 8, 0, 0, 0, 2}); err != nil {
		t.Fatal(err)
	}
	for {
		version, msgType, body = readMessage(t, conn)
		if msgType == 6 {
			break
		}
		if msgType != 2 { // skip any ECHO_REQUEST in between
			t.Fatalf("unexpected message type %d while waiting for FEATURES_REPLY", msgType)
		}
	}
	if version != of15 || len(body) < 8 || binary.BigEndian.Uint64(body[0:8]) == 0 {
		t.Fatalf("bad FEATURES_REPLY: version %d body % x", version, body)
	}
}

func readMessage(t *testing.T, r io.Reader) (version, msgType byte, body []byte) {
	t.Helper()
	header := make([]byte, 8)
	if _, err := io.ReadFull(r, header); err != nil {
		t.Fatalf("read OpenFlow header: %v", err)
	}
	length := binary.BigEndian.Uint16(header[2:4])
	if length < 8 {
		t.Fatalf("bad OpenFlow length %d", length)
	}
	body = make([]byte, length-8)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("read OpenFlow body: %v", err)
	}
	return header[0], header[1], body
}

// TestToolsTalkToTheInstance checks that ovs-ofctl, ovs-vsctl and ovs-appctl
// reach this instance (not the host's), that the bridge uses the userspace
// datapath, and that the bridge's port lives in the instance's namespace.
func TestToolsTalkToTheInstance(t *testing.T) {
	s := Start(t)
	if got := strings.TrimSpace(s.Vsctl(t, "get", "bridge", BridgeName, "datapath_type")); got != "netdev" {
		t.Fatalf("datapath_type = %q, want netdev", got)
	}
	s.Ofctl(t, "add-flow", BridgeName, "table=3,priority=7,ip,nw_src=10.9.8.7,actions=drop")
	if flows := s.Ofctl(t, "dump-flows", BridgeName, "table=3"); !strings.Contains(flows, "nw_src=10.9.8.7") {
		t.Fatalf("flow not on the bridge:\n%s", flows)
	}
	if !strings.Contains(s.Appctl(t, "version"), "Open vSwitch") {
		t.Fatal("ovs-appctl did not reach ovs-vswitchd")
	}
	if out := s.Exec(t, "ip", "link", "show", BridgeName); !strings.Contains(out, BridgeName) {
		t.Fatalf("br-ex is not in namespace %s:\n%s", s.Netns, out)
	}
}

// TestTwoInstancesAreIsolated starts two switches side by side: a flow added
// to one is not on the other.
func TestTwoInstancesAreIsolated(t *testing.T) {
	a, b := Start(t), Start(t)
	a.Ofctl(t, "add-flow", BridgeName, "table=1,priority=1,actions=drop")
	if flows := b.Ofctl(t, "dump-flows", BridgeName, "table=1"); strings.Contains(flows, "priority=1") {
		t.Fatalf("flow of one instance seen on the other:\n%s", flows)
	}
}

// TestVswitchdRestart kills ovs-vswitchd and starts it again: the bridge comes
// back, its flows do not.
func TestVswitchdRestart(t *testing.T) {
	s := Start(t)
	s.Ofctl(t, "add-flow", BridgeName, "table=2,priority=5,actions=drop")
	s.StopVswitchd(t)
	if _, err := s.run("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", BridgeName); err == nil {
		t.Fatal("ovs-ofctl still reaches the bridge after ovs-vswitchd was killed")
	}
	s.StartVswitchd(t)
	// The killed vswitchd left its socket file behind: the bridge is back
	// once the new one answers on it, not once the file exists.
	s.waitFor(t, "br-ex after restart", func() error {
		_, err := s.run("ovs-ofctl", "-O", "OpenFlow15", "show", BridgeName)
		return err
	})
	if flows := s.Ofctl(t, "dump-flows", BridgeName, "table=2"); strings.Contains(flows, "priority=5") {
		t.Fatalf("flows survived a vswitchd restart:\n%s", flows)
	}
}

// TestCleanupRemovesEverything runs a Switch in a subtest and checks that,
// once the subtest is over, its daemons, namespace and directory are gone.
func TestCleanupRemovesEverything(t *testing.T) {
	var s *Switch
	var pids []int
	t.Run("instance", func(t *testing.T) {
		s = Start(t)
		pids = []int{s.ovsdb.cmd.Process.Pid, s.vswitchd.cmd.Process.Pid}
	})
	if s == nil {
		t.Fatal("subtest did not start a switch")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("daemon pid %d still alive after cleanup", pid)
		}
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), s.Netns) {
		t.Errorf("namespace %s still exists", s.Netns)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("run directory %s still exists (stat: %v)", s.Dir, err)
	}
}
