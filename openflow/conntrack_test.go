package openflow_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/test/ovstest"
)

// host is a network namespace with one veth whose peer is a port of the
// switch's bridge, for sending real packets through the switch.
type host struct {
	ns, dev, port string // namespace, its interface, the bridge port's name
	addr          string
	mac           string
	ofport        uint32
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addHost creates a namespace with address addr (CIDR) on a veth plugged
// into the bridge. Everything is removed by t.Cleanup, also on failure.
func addHost(t testing.TB, sw *ovstest.Switch, addr string) *host {
	t.Helper()
	ovstest.RequireRoot(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	h := &host{ns: "ofh-" + id, dev: "ofh" + id, port: "ofp" + id, addr: addr}
	run(t, "ip", "netns", "add", h.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", h.ns).Run() })
	run(t, "ip", "link", "add", h.dev, "netns", h.ns, "type", "veth", "peer", "name", h.port, "netns", sw.Netns)
	in := func(args ...string) string { return run(t, "ip", append([]string{"netns", "exec", h.ns}, args...)...) }
	in("ip", "link", "set", "lo", "up")
	in("ip", "addr", "add", addr, "dev", h.dev)
	in("ip", "link", "set", h.dev, "up")
	sw.Exec(t, "ip", "link", "set", h.port, "up")
	sw.Vsctl(t, "add-port", sw.Bridge, h.port)
	t.Cleanup(func() {
		cmd := exec.Command("ovs-vsctl", "--timeout=5", "--if-exists", "del-port", sw.Bridge, h.port)
		cmd.Env = sw.Env()
		cmd.Run()
	})
	h.mac = strings.TrimSpace(in("cat", "/sys/class/net/"+h.dev+"/address"))
	port, err := strconv.ParseUint(strings.TrimSpace(sw.Vsctl(t, "get", "Interface", h.port, "ofport")), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	h.ofport = uint32(port)
	return h
}

func (h *host) ip() string { return strings.Split(h.addr, "/")[0] }

// sendUDP sends one datagram from the host, from its address and port
// sport to dst:dport. It opens the socket inside the host's namespace on a
// locked thread (setns) and sends with a zero UDP checksum (SO_NO_CHECK):
// with a checksum, the veth would leave it to offload, and the userspace
// datapath's conntrack drops packets whose checksum it cannot verify.
func (h *host) sendUDP(t testing.TB, sport uint16, dst string, dport uint16) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, err := inNetns(h.ns, func() error {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer syscall.Close(fd)
			if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_NO_CHECK, 1); err != nil {
				return err
			}
			if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(sport), Addr: netip.MustParseAddr(h.ip()).As4()}); err != nil {
				return err
			}
			return syscall.Sendto(fd, []byte("hello"), 0, &syscall.SockaddrInet4{Port: int(dport), Addr: netip.MustParseAddr(dst).As4()})
		})
		if restored {
			runtime.UnlockOSThread() // else the thread dies with this goroutine
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("send UDP from %s: %v", h.ns, err)
	}
}

// inNetns runs fn with the calling (locked) thread in network namespace
// ns, then moves the thread back; restored reports whether that worked.
func inNetns(ns string, fn func() error) (restored bool, err error) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return true, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return true, err
	}
	defer target.Close()
	if err := setns(target.Fd()); err != nil {
		return true, fmt.Errorf("setns %s: %w", ns, err)
	}
	err = fn()
	if rerr := setns(orig.Fd()); rerr != nil {
		return false, fmt.Errorf("setns back: %w", rerr)
	}
	return true, err
}

// setns(2) is not in package syscall for every architecture.
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268, "386": 346, "arm": 375}[runtime.GOARCH]

const cloneNewNet = 0x40000000

func setns(fd uintptr) error {
	if sysSetns == 0 {
		return fmt.Errorf("setns: unknown syscall number on %s", runtime.GOARCH)
	}
	if _, _, e := syscall.RawSyscall(sysSetns, fd, cloneNewNet, 0); e != 0 {
		return e
	}
	return nil
}

type ctEntry struct {
	src, dst     string
	sport, dport uint16
	zone         int
}

var ctLine = regexp.MustCompile(`^udp,orig=\(src=([0-9.]+),dst=([0-9.]+),sport=(\d+),dport=(\d+)\),reply=\([^)]*\)(?:,zone=(\d+))?`)

// conntrack lists the switch's UDP conntrack entries.
func conntrack(t testing.TB, sw *ovstest.Switch) []ctEntry {
	t.Helper()
	var out []ctEntry
	for _, l := range strings.Split(sw.Appctl(t, "dpctl/dump-conntrack"), "\n") {
		m := ctLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		sp, _ := strconv.Atoi(m[3])
		dp, _ := strconv.Atoi(m[4])
		z, _ := strconv.Atoi(m[5])
		out = append(out, ctEntry{m[1], m[2], uint16(sp), uint16(dp), z})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dport < out[j].dport })
	return out
}

// waitConntrack polls the conntrack table until ok; poke, if not nil,
// runs before each poll (to resend traffic a starting port may have lost).
func waitConntrack(t testing.TB, sw *ovstest.Switch, what string, poke func(), ok func([]ctEntry) bool) []ctEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if poke != nil {
			poke()
		}
		e := conntrack(t, sw)
		if ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("conntrack never reached %s; now %+v\n%s\n%s", what, e,
				sw.Appctl(t, "dpctl/dump-conntrack"), sw.Ofctl(t, "dump-flows", sw.Bridge))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dports(es []ctEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, fmt.Sprintf("%d@zone%d", e.dport, e.zone))
	}
	return strings.Join(s, " ")
}

// TestConntrackFlush sends real UDP traffic through ct(commit,nat) flows
// into zones 5 and 6, then flushes by 5-tuple and by zone and checks with
// ovs-appctl dpctl/dump-conntrack that exactly the intended entries go.
func TestConntrackFlush(t *testing.T) {
	sw := ovstest.Start(t)
	a := addHost(t, sw, "10.200.0.1/24")
	b := addHost(t, sw, "10.200.0.2/24")
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 60*time.Second)

	if p, err := c.PortByName(ctx, b.port); err != nil || p != b.ofport {
		t.Fatalf("PortByName(%s) = %d, %v; ovs-vsctl says %d", b.port, p, err, b.ofport)
	}
	var flows []openflow.Message
	for _, f := range []struct {
		port int
		zone uint16
	}{{5000, 5}, {5001, 5}, {6000, 6}} {
		flows = append(flows, oftest.MustParseFlow(t, fmt.Sprintf(
			"cookie=0x7, priority=100,udp,in_port=%d,tp_dst=%d actions=ct(commit,zone=%d,nat(src=10.200.0.100)),output:%d",
			a.ofport, f.port, f.zone, b.ofport)))
	}
	if err := c.Bundle(ctx, flows...); err != nil {
		t.Fatal(err)
	}
	// Same ports each time: resending refreshes the same three entries.
	send := func() {
		for i, port := range []uint16{5000, 5001, 6000} {
			a.sendUDP(t, 40000+uint16(i), b.ip(), port)
		}
	}
	all := waitConntrack(t, sw, "three entries", send, func(e []ctEntry) bool { return len(e) == 3 })
	if dports(all) != "5000@zone5 5001@zone5 6000@zone6" || all[0].sport != 40000 || all[0].src != a.ip() {
		t.Fatalf("unexpected entries: %+v", all)
	}

	// A tuple without a zone means zone 0 to Open vSwitch: nothing in
	// zone 5 goes.
	e5000 := all[0]
	tuple := openflow.CTTuple{Src: netip.MustParseAddr(e5000.src), Dst: netip.MustParseAddr(e5000.dst),
		SrcPort: e5000.sport, DstPort: e5000.dport}
	if err := c.FlushConntrack(ctx, &openflow.CTFlush{Proto: 17, Orig: tuple}); err != nil {
		t.Fatal(err)
	}
	if got := dports(conntrack(t, sw)); got != "5000@zone5 5001@zone5 6000@zone6" {
		t.Fatalf("flush of a zone-0 tuple removed entries of other zones: left %s", got)
	}

	// The 5-tuple in zone 5 removes exactly that entry.
	if err := c.FlushConntrack(ctx, &openflow.CTFlush{Proto: 17, Zone: 5, HasZone: true, Orig: tuple}); err != nil {
		t.Fatal(err)
	}
	left := waitConntrack(t, sw, "two entries", nil, func(e []ctEntry) bool { return len(e) == 2 })
	if got := dports(left); got != "5001@zone5 6000@zone6" {
		t.Fatalf("after flushing the 5000 tuple: %s", got)
	}

	// Zone 6 goes whole; zone 5 stays.
	if err := c.FlushConntrackZone(ctx, 6); err != nil {
		t.Fatal(err)
	}
	left = waitConntrack(t, sw, "one entry", nil, func(e []ctEntry) bool { return len(e) == 1 })
	if got := dports(left); got != "5001@zone5" {
		t.Fatalf("after flushing zone 6: %s", got)
	}
}
