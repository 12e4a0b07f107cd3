package topology

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// captureStartTimeout bounds how long tcpdump may take to open the
// interface; it takes milliseconds, the rest is slack for a loaded machine.
const captureStartTimeout = 10 * time.Second

// Packet is one IPv4 or IPv6 packet a capture saw.
type Packet struct {
	Time     time.Time
	Src, Dst netip.Addr
	// SrcMAC is the frame's source: for a routed packet, the interface of
	// the node that sent it out.
	SrcMAC string
	// DstMAC is the frame's destination: the host's own MAC, a broadcast
	// or multicast one, or another host's (a frame a switch floods past it,
	// which its IP stack never takes).
	DstMAC string
	// Line is tcpdump's one-line summary ("IP 192.0.2.10 > 172.18.0.100:
	// ICMP echo request, ...").
	Line string
	// DSCP is the packet's DSCP: the upper six bits of IPv4's TOS byte or
	// of IPv6's traffic class, read from the capture file itself.
	DSCP uint8
}

// Capture is a tcpdump running on a host's interface.
type Capture struct {
	t    testing.TB
	cmd  *exec.Cmd
	file string
	done chan error
}

// Capture starts recording the IPv4 and IPv6 packets the host receives on
// its underlay interface, as the host's own stack would: tcpdump runs
// without promiscuous mode (-p), so frames the underlay bridge merely
// floods past the host (between nodes, before it learned their MACs) are
// not counted. It returns once tcpdump is listening; Stop ends it. The
// process is killed when the test ends, if Stop was not called.
func (h *Host) Capture(t testing.TB) *Capture {
	t.Helper()
	c := &Capture{t: t, file: filepath.Join(t.TempDir(), "capture.pcap"), done: make(chan error, 1)}
	// --immediate-mode hands each packet over as it arrives (by default
	// libpcap waits up to a second to fill a buffer block, and a capture
	// stopped within that second loses the block); -U writes it to the
	// file at once; -Z root keeps the right to write into the test's
	// directory.
	c.cmd = exec.Command("ip", "netns", "exec", h.Netns, "tcpdump", "-p", "-n", "--immediate-mode", "-U", "-Z", "root", "-i", "eth0", "-w", c.file, "ip or ip6")
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("topology: start tcpdump on %s: %v", h.Name, err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	listening := make(chan struct{})
	var output strings.Builder
	go func() {
		lines := bufio.NewScanner(stderr)
		signalled := false
		for lines.Scan() {
			output.WriteString(lines.Text() + "\n")
			if !signalled && strings.Contains(lines.Text(), "listening on") {
				close(listening)
				signalled = true
			}
		}
		c.done <- c.cmd.Wait()
	}()
	select {
	case <-listening:
		return c
	case <-c.done:
		c.done <- nil // for the cleanup
		t.Fatalf("topology: tcpdump on %s exited before listening:\n%s", h.Name, output.String())
	case <-time.After(captureStartTimeout):
		t.Fatalf("topology: tcpdump on %s not listening after %v", h.Name, captureStartTimeout)
	}
	return nil
}

// Stop ends the capture and returns every packet it saw, in order.
func (c *Capture) Stop() []Packet {
	t := c.t
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	err := <-c.done
	c.done <- err // for the cleanup
	out, rerr := exec.Command("tcpdump", "-n", "-q", "-e", "-tt", "-r", c.file).Output()
	if rerr != nil {
		t.Fatalf("topology: read the capture (tcpdump exited with %v): %v", err, rerr)
	}
	var packets []Packet
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		p, ok := parsePacketLine(line)
		if !ok {
			t.Fatalf("topology: unreadable tcpdump line %q", line)
		}
		packets = append(packets, p)
	}
	dscps, err := readDSCPs(c.file)
	if err != nil {
		t.Fatalf("topology: read the capture's DSCPs: %v", err)
	}
	if len(dscps) != len(packets) {
		t.Fatalf("topology: the capture holds %d IP packets, tcpdump listed %d", len(dscps), len(packets))
	}
	for i := range packets {
		packets[i].DSCP = dscps[i]
	}
	return packets
}

// readDSCPs reads a pcap file of Ethernet frames (what tcpdump -w writes
// for a veth) and returns the DSCP of each IPv4 or IPv6 packet in order:
// the capture's filter ("ip or ip6") keeps no other, so they line up with
// tcpdump's lines.
func readDSCPs(file string) ([]uint8, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("%d bytes: no pcap header", len(b))
	}
	var order binary.ByteOrder
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4, 0xa1b23c4d: // microseconds, nanoseconds
		order = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		order = binary.BigEndian
	default:
		return nil, fmt.Errorf("not a pcap file (magic %#x)", b[:4])
	}
	if link := order.Uint32(b[20:]); link != 1 {
		return nil, fmt.Errorf("link type %d, want Ethernet (1)", link)
	}
	var out []uint8
	for rest := b[24:]; len(rest) > 0; {
		if len(rest) < 16 {
			return nil, fmt.Errorf("a truncated record header")
		}
		n := int(order.Uint32(rest[8:]))
		if len(rest) < 16+n {
			return nil, fmt.Errorf("a truncated record")
		}
		frame := rest[16 : 16+n]
		rest = rest[16+n:]
		if len(frame) < 16 {
			continue
		}
		ethType, ip := binary.BigEndian.Uint16(frame[12:]), frame[14:]
		if ethType == 0x8100 && len(frame) >= 20 { // one VLAN tag
			ethType, ip = binary.BigEndian.Uint16(frame[16:]), frame[18:]
		}
		switch ethType {
		case 0x0800:
			out = append(out, ip[1]>>2)
		case 0x86dd:
			out = append(out, (ip[0]&0x0f)<<2|ip[1]>>6)
		}
	}
	return out, nil
}

// parsePacketLine reads tcpdump -n -q -e -tt output: "<seconds>.<micros>
// <src MAC> > <dst MAC>, IPv4, length N: src[.port] > dst[.port]: ..."
// (or IPv6).
func parsePacketLine(line string) (Packet, bool) {
	head, rest, ok := strings.Cut(line, ": ")
	fields, body := strings.Fields(head), strings.Fields(rest)
	if !ok || len(fields) < 6 || fields[2] != ">" || len(body) < 3 || body[1] != ">" {
		return Packet{}, false
	}
	family := map[string]string{"IPv4,": "IP", "IPv6,": "IP6"}[fields[4]]
	if family == "" {
		return Packet{}, false
	}
	seconds, err := strconv.ParseFloat(fields[0], 64)
	src, ok1 := parseEndpoint(body[0])
	dst, ok2 := parseEndpoint(strings.TrimSuffix(body[2], ":"))
	p := Packet{Time: time.UnixMicro(int64(seconds * 1e6)), Src: src, Dst: dst, SrcMAC: fields[1], DstMAC: strings.TrimSuffix(fields[3], ","),
		Line: family + " " + rest}
	return p, err == nil && ok1 && ok2
}

// parseEndpoint reads an address with or without tcpdump's ".port" suffix.
func parseEndpoint(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	if i := strings.LastIndexByte(s, '.'); i > 0 {
		if a, err := netip.ParseAddr(s[:i]); err == nil {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// String is the packet's summary with its arrival time.
func (p Packet) String() string { return p.Time.Format("15:04:05.000000 ") + p.Line }
