package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// redirect is OpenShift's egress router pod, as the reference serves an
// EgressRouter: one pod of a replicas-1 Deployment that holds the reserved
// address on the node's network, DNATs each connection to a rule's port to
// its destination and target port with nftables, SNATs it to the reserved
// address, and announces the address with gratuitous ARP when it starts.
// The reference gives the pod a macvlan of the node's uplink; this one runs
// in the node's network namespace (hostNetwork) and puts the address on the
// uplink bridge, which costs the same start and reschedule. The node's own
// root is mounted at --host-root: nft and ip run from there (this image
// has no tools). On SIGTERM it takes its address and table away.
//
//	testapp redirect --link br-ex --address 172.31.5.70 udp/80=172.31.5.2:9999 ...
func redirect(args []string) error {
	fs := flag.NewFlagSet("redirect", flag.ContinueOnError)
	link := fs.String("link", "br-ex", "the interface that gets the reserved address")
	address := fs.String("address", "", "the reserved IPv4 address")
	hostRoot := fs.String("host-root", "/host", "where the node's root file system is mounted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr, err := netip.ParseAddr(*address)
	if err != nil || !addr.Is4() {
		return fmt.Errorf("--address %q: want an IPv4 address", *address)
	}
	table, err := redirectTable(addr, fs.Args())
	if err != nil {
		return err
	}
	onHost := func(stdin string, name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: *hostRoot}
		cmd.Dir = "/"
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
		}
		return nil
	}
	// A table left by an earlier run of this pod on the node goes first.
	_ = onHost("", "/usr/sbin/nft", "delete", "table", "ip", redirectTableName)
	if err := onHost(table, "/usr/sbin/nft", "-f", "-"); err != nil {
		return err
	}
	if err := onHost("", "/bin/ip", "address", "replace", addr.String()+"/32", "dev", *link); err != nil {
		return err
	}
	if err := gratuitousARP(*link, addr); err != nil {
		return err
	}
	fmt.Printf("redirect: %s on %s, %d rules\n", addr, *link, len(fs.Args()))
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	_ = onHost("", "/bin/ip", "address", "delete", addr.String()+"/32", "dev", *link)
	return onHost("", "/usr/sbin/nft", "delete", "table", "ip", redirectTableName)
}

// redirectTableName is the nftables table the redirect pod owns.
const redirectTableName = "egress_router_reference"

// redirectTable is the nftables script of the redirect for rules, each
// PROTO/PORT=DESTINATION:TARGETPORT. The SNAT chain runs before the
// node's own (kube-proxy's, flannel's) masquerading, so that the reserved
// address is the source.
func redirectTable(addr netip.Addr, rules []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n\tchain redirect_in {\n\t\ttype nat hook prerouting priority dstnat - 10; policy accept;\n", redirectTableName)
	for _, rule := range rules {
		match, to, ok := strings.Cut(rule, "=")
		proto, port, ok2 := strings.Cut(match, "/")
		dest, err := netip.ParseAddrPort(to)
		if !ok || !ok2 || err != nil || (proto != "udp" && proto != "tcp") {
			return "", fmt.Errorf("rule %q: want udp|tcp/PORT=IPV4:PORT", rule)
		}
		fmt.Fprintf(&b, "\t\tip daddr %s %s dport %s dnat to %s\n", addr, proto, port, dest)
	}
	fmt.Fprintf(&b, "\t}\n\tchain redirect_out {\n\t\ttype nat hook postrouting priority srcnat - 10; policy accept;\n")
	fmt.Fprintf(&b, "\t\tct original ip daddr %s snat to %s\n\t}\n}\n", addr, addr)
	return b.String(), nil
}

// gratuitousARP broadcasts three gratuitous ARP requests for addr from
// link's MAC, as the reference's macvlan plugin does when the pod starts.
func gratuitousARP(link string, addr netip.Addr) error {
	ifi, err := net.InterfaceByName(link)
	if err != nil {
		return err
	}
	const ethPARP = 0x0806
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(ethPARP)))
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var frame bytes.Buffer
	frame.Write(bytes.Repeat([]byte{0xff}, 6))
	frame.Write(ifi.HardwareAddr)
	ip := addr.As4()
	binary.Write(&frame, binary.BigEndian, []uint16{ethPARP, 1, 0x0800})
	frame.Write([]byte{6, 4, 0, 1}) // hardware and protocol sizes; a request
	frame.Write(ifi.HardwareAddr)
	frame.Write(ip[:])
	frame.Write(make([]byte, 6))
	frame.Write(ip[:])
	to := &syscall.SockaddrLinklayer{Protocol: htons(ethPARP), Ifindex: ifi.Index, Halen: 6}
	copy(to.Addr[:], bytes.Repeat([]byte{0xff}, 6))
	for i := range 3 {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err := syscall.Sendto(fd, frame.Bytes(), 0, to); err != nil {
			return err
		}
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
