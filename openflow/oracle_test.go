package openflow

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Oracles: Open vSwitch's own tools, run inside the tests, decide whether
// our bytes and text are right. None of them needs a running switch.

// requireOVSTools fails (never skips) when the Open vSwitch tools are
// missing: CI installs them, and a silently skipped oracle proves nothing.
func requireOVSTools(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Fatal("ovs-ofctl not found: install Debian's openvswitch-switch (make test does); the golden tests use it as their oracle")
	}
}

// ofpPrint decodes a whole message with `ovs-ofctl ofp-print`.
func ofpPrint(t testing.TB, msg []byte) string {
	t.Helper()
	requireOVSTools(t)
	cmd := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(msg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ovs-ofctl ofp-print %x: %v\n%s%s", msg, err, out, stderr.Bytes())
	}
	return strings.TrimRight(string(out), "\n")
}

// ovsParseActions decodes OpenFlow 1.5 action bytes with `ovs-ofctl
// parse-actions OpenFlow15` and returns the text after "actions=". It
// fails if Open vSwitch re-encodes the actions to different bytes.
func ovsParseActions(t testing.TB, acts []byte) string {
	return ovsParseList(t, "parse-actions", acts)
}

// ovsParseInstructions is the same for instruction lists.
func ovsParseInstructions(t testing.TB, insts []byte) string {
	return ovsParseList(t, "parse-instructions", insts)
}

func ovsParseList(t testing.TB, cmd string, b []byte) string {
	t.Helper()
	requireOVSTools(t)
	c := exec.Command("ovs-ofctl", cmd, "OpenFlow15")
	c.Stdin = strings.NewReader(hex.EncodeToString(b) + "\n")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl %s OpenFlow15 <<< %x: %v\n%s", cmd, b, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "actions=") {
		t.Fatalf("ovs-ofctl %s %x: unexpected output (Open vSwitch rejected or re-encoded differently):\n%s", cmd, b, out)
	}
	return strings.TrimPrefix(lines[0], "actions=")
}

// fakeSwitch is a minimal OpenFlow 1.5 switch on a unix socket that
// records what ovs-ofctl sends it, so the tests can compare ovs-ofctl's
// encoding of a flow with ours.
type fakeSwitch struct {
	path   string
	ln     net.Listener
	mu     sync.Mutex
	msgs   [][]byte
	conns  []net.Conn
	silent bool // stop answering anything, as a hung switch would
}

// setSilent makes the switch stop (or resume) answering.
func (fs *fakeSwitch) setSilent(v bool) {
	fs.mu.Lock()
	fs.silent = v
	fs.mu.Unlock()
}

// push writes a message to every connection.
func (fs *fakeSwitch) push(msg []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, c := range fs.conns {
		c.Write(msg)
	}
}

// closeConns drops every connection, as a restarting switch would.
func (fs *fakeSwitch) closeConns() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, c := range fs.conns {
		c.Close()
	}
	fs.conns = nil
}

func (fs *fakeSwitch) isSilent() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.silent
}

func startFakeSwitch(t testing.TB) *fakeSwitch {
	t.Helper()
	dir, err := os.MkdirTemp("", "offake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fs := &fakeSwitch{path: filepath.Join(dir, "sw.sock")}
	if fs.ln, err = net.Listen("unix", fs.path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.ln.Close() })
	go fs.serve()
	return fs
}

func (fs *fakeSwitch) serve() {
	for {
		c, err := fs.ln.Accept()
		if err != nil {
			return
		}
		go fs.handle(c)
	}
}

func (fs *fakeSwitch) handle(c net.Conn) {
	defer c.Close()
	fs.mu.Lock()
	fs.conns = append(fs.conns, c)
	fs.mu.Unlock()
	c.Write([]byte{6, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 1 << 6})
	for {
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		n := binary.BigEndian.Uint16(hdr[2:])
		if n < 8 {
			return
		}
		msg := append(hdr, make([]byte, n-8)...)
		if _, err := io.ReadFull(c, msg[8:]); err != nil {
			return
		}
		xid := msg[4:8]
		if fs.isSilent() {
			continue
		}
		switch MessageType(msg[1]) {
		case TypeHello:
			continue
		case TypeEchoRequest:
			r := append([]byte(nil), msg...)
			r[1] = byte(TypeEchoReply)
			c.Write(r)
			continue
		case TypeFeaturesRequest:
			c.Write(append([]byte{6, 6, 0, 32, xid[0], xid[1], xid[2], xid[3]}, make([]byte, 24)...))
			continue
		case TypeBarrierRequest:
			c.Write([]byte{6, byte(TypeBarrierReply), 0, 8, xid[0], xid[1], xid[2], xid[3]})
		case TypeBundleControl:
			r := append([]byte(nil), msg...)
			binary.BigEndian.PutUint16(r[12:], binary.BigEndian.Uint16(r[12:])+1)
			c.Write(r)
		case TypeMultipartRequest:
			// An empty reply of the requested type.
			r := append([]byte(nil), msg[:16]...)
			r[1] = byte(TypeMultipartReply)
			r[10], r[11] = 0, 0
			binary.BigEndian.PutUint16(r[2:], 16)
			c.Write(r)
		}
		fs.mu.Lock()
		fs.msgs = append(fs.msgs, msg)
		fs.mu.Unlock()
	}
}

// ofctl runs ovs-ofctl against the fake switch (the word SWITCH in args is
// replaced by its address) and returns the messages it sent, barriers
// excluded.
func (fs *fakeSwitch) ofctl(t testing.TB, args ...string) [][]byte {
	t.Helper()
	msgs, out, err := fs.tryOfctl(t, args...)
	if err != nil {
		t.Fatalf("ovs-ofctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return msgs
}

// tryOfctl is ofctl returning ovs-ofctl's failure (and its output, which
// holds its error or log messages) instead of failing the test.
func (fs *fakeSwitch) tryOfctl(t testing.TB, args ...string) (msgs [][]byte, output []byte, err error) {
	t.Helper()
	requireOVSTools(t)
	fs.mu.Lock()
	fs.msgs = nil
	fs.mu.Unlock()
	full := []string{"-O", "OpenFlow15", "--no-names", "-t", "10"}
	for _, a := range args {
		if a == "SWITCH" {
			a = "unix:" + fs.path
		}
		full = append(full, a)
	}
	output, err = exec.Command("ovs-ofctl", full...).CombinedOutput()
	if err != nil {
		return nil, output, err
	}
	// ovs-ofctl waits for the barrier reply, so everything has arrived.
	deadline := time.Now().Add(2 * time.Second)
	for {
		fs.mu.Lock()
		recorded := fs.msgs
		fs.mu.Unlock()
		if len(recorded) > 0 || time.Now().After(deadline) {
			for _, m := range recorded {
				if MessageType(m[1]) != TypeBarrierRequest {
					msgs = append(msgs, m)
				}
			}
			return msgs, output, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ofctlFlowMod returns the FLOW_MOD ovs-ofctl sends for a flow text.
func (fs *fakeSwitch) ofctlFlowMod(t testing.TB, verb, flow string) []byte {
	t.Helper()
	msgs := fs.ofctl(t, verb, "SWITCH", flow)
	if len(msgs) != 1 || MessageType(msgs[0][1]) != TypeFlowMod {
		t.Fatalf("ovs-ofctl %s %q sent %d messages, want one FLOW_MOD: %x", verb, flow, len(msgs), msgs)
	}
	return msgs[0]
}

// sameExceptXid compares two messages ignoring their transaction ids.
func sameExceptXid(a, b []byte) bool {
	if len(a) < 8 || len(b) < 8 {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(a[:4], b[:4]) && bytes.Equal(a[8:], b[8:])
}

func hexDiff(a, b []byte) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "ours   %x\ntheirs %x\n", a, b)
	return sb.String()
}

func errorsIs(err, target error) bool {
	type iser interface{ Is(error) bool }
	if x, ok := err.(iser); ok {
		return x.Is(target)
	}
	return false
}
