package topology

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds one client exchange: on these veths a reply takes well
// under a millisecond; a second covers ARP and a loaded machine, and keeps a
// test that expects a drop from waiting long.
const dialTimeout = time.Second

// SourceServer is a TCP and UDP server in a host's namespace that answers
// each client with the source address it saw, and remembers every source.
type SourceServer struct {
	Addr  netip.AddrPort // on the host's IPv4 address; the same port for TCP and UDP
	Addr6 netip.AddrPort // on its IPv6 address, the same port

	mu      sync.Mutex
	sources []netip.Addr
	times   []time.Time      // when each source was seen
	locals  []netip.AddrPort // the server's address and port each was seen at
}

// At is the server's port on another of the addresses it serves.
func (s *SourceServer) At(addr netip.Addr) netip.AddrPort {
	return netip.AddrPortFrom(addr, s.Addr.Port())
}

// Sources returns the source addresses seen so far, in arrival order.
func (s *SourceServer) Sources() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]netip.Addr(nil), s.sources...)
}

// FirstFrom returns when the server first saw src as a source after since.
func (s *SourceServer) FirstFrom(src netip.Addr, since time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.sources {
		if a == src && s.times[i].After(since) {
			return s.times[i], true
		}
	}
	return time.Time{}, false
}

// SeenAt returns the server's addresses and ports at which it saw src
// after since, in arrival order.
func (s *SourceServer) SeenAt(src netip.Addr, since time.Time) []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.AddrPort
	for i, a := range s.sources {
		if a == src && s.times[i].After(since) {
			out = append(out, s.locals[i])
		}
	}
	return out
}

// record notes a client's address, seen at the server's local one, and
// returns what the server answers it.
func (s *SourceServer) record(addr, local netip.AddrPort) string {
	s.mu.Lock()
	s.sources = append(s.sources, addr.Addr().Unmap())
	s.times = append(s.times, time.Now())
	s.locals = append(s.locals, netip.AddrPortFrom(local.Addr().Unmap(), local.Port()))
	s.mu.Unlock()
	return addr.Addr().Unmap().String()
}

// Serve starts a SourceServer on the host's addresses, and on extra ones
// the host also holds, all on one free port; it stops when the test ends.
// Each address has its own sockets, so UDP answers leave from the address
// the client sent to.
func (h *Host) Serve(t testing.TB, extra ...netip.Addr) *SourceServer {
	t.Helper()
	return h.ServeAt(t, 0, extra...)
}

// ServeAt is Serve on a given port (0: a free one): a server that takes
// over addresses another host served, for clients that keep sending to
// the port they were given.
func (h *Host) ServeAt(t testing.TB, port uint16, extra ...netip.Addr) *SourceServer {
	t.Helper()
	s := &SourceServer{}
	for _, addr := range append([]netip.Addr{h.IP, h.IP6}, extra...) {
		var tcp net.Listener
		var udp net.PacketConn
		err := InNetns(h.Netns, func() error {
			var err error
			if tcp, err = net.Listen(family("tcp", addr), net.JoinHostPort(addr.String(), fmt.Sprint(port))); err != nil {
				return err
			}
			port = uint16(tcp.Addr().(*net.TCPAddr).Port)
			udp, err = net.ListenPacket(family("udp", addr), net.JoinHostPort(addr.String(), fmt.Sprint(port)))
			return err
		})
		if err != nil {
			t.Fatalf("topology: serve on %s of %s: %v", addr, h.Name, err)
		}
		t.Cleanup(func() { tcp.Close(); udp.Close() })
		go s.serveTCP(tcp)
		go s.serveUDP(udp)
	}
	s.Addr = netip.AddrPortFrom(h.IP, port)
	s.Addr6 = netip.AddrPortFrom(h.IP6, port)
	return s
}

func (s *SourceServer) serveTCP(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			source := s.record(conn.RemoteAddr().(*net.TCPAddr).AddrPort(), conn.LocalAddr().(*net.TCPAddr).AddrPort())
			// Answer every line, so one connection can be probed repeatedly.
			lines := bufio.NewScanner(conn)
			for lines.Scan() {
				if _, err := fmt.Fprintln(conn, source); err != nil {
					return
				}
			}
		}()
	}
}

func (s *SourceServer) serveUDP(conn net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		_, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		source := s.record(from.(*net.UDPAddr).AddrPort(), conn.LocalAddr().(*net.UDPAddr).AddrPort())
		_, _ = conn.WriteTo([]byte(source+"\n"), from)
	}
}

// family is network ("tcp", "udp") restricted to addr's family.
func family(network string, addr netip.Addr) string {
	if addr.Is4() {
		return network + "4"
	}
	return network + "6"
}

// Dial sends one line to a SourceServer from inside the pod's namespace over
// "tcp" or "udp" (of the server address's family) and returns the source address the server saw. An error
// means no answer arrived within dialTimeout.
func (p *Pod) Dial(network string, server netip.AddrPort) (netip.Addr, error) {
	conn, err := p.Connect(network, server)
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	return conn.Probe()
}

// Conn is an open connection from a pod to a SourceServer.
type Conn struct {
	net.Conn
	reader *bufio.Reader
}

// Connect opens a connection from the pod to the server, to be probed
// repeatedly (e.g. to check that an established TCP connection survives).
func (p *Pod) Connect(network string, server netip.AddrPort) (*Conn, error) {
	var conn net.Conn
	err := InNetns(p.Netns, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, family(network, server.Addr()), server.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s dial from pod %s to %s: %w", network, p.Name, server, err)
	}
	return &Conn{Conn: conn, reader: bufio.NewReader(conn)}, nil
}

// Probe sends a line and returns the source address the server reports.
func (c *Conn) Probe() (netip.Addr, error) {
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := fmt.Fprintln(c, "who am i"); err != nil {
		return netip.Addr{}, err
	}
	line, err := c.reader.ReadString('\n')
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no answer from %s: %w", c.RemoteAddr(), err)
	}
	return netip.ParseAddr(strings.TrimSpace(line))
}

// Ping sends count ICMP echo requests from the pod and reports whether any
// reply came back.
func (p *Pod) Ping(dst netip.Addr, count int) error {
	return InNetnsCommand(p.Netns, "ping", "-n", "-q", "-c", fmt.Sprint(count), "-W", "1", dst.String())
}

// InNetns runs f on an OS thread switched into the named network namespace;
// sockets f creates stay in that namespace after f returns. If the thread
// cannot be switched back, it is retired rather than reused.
func InNetns(name string, f func() error) error {
	target, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	original, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer original.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", name, err)
	}
	ferr := f()
	if err := unix.Setns(int(original.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it exits with this goroutine.
		return fmt.Errorf("restore network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// InNetnsCommand runs a command in the named namespace and returns an error
// with its output if it fails.
func InNetnsCommand(name string, command string, args ...string) error {
	out, err := execCommand("ip", append([]string{"netns", "exec", name, command}, args...)...)
	if err != nil {
		return fmt.Errorf("%s %s in %s: %v: %s", command, strings.Join(args, " "), name, err, out)
	}
	return nil
}
