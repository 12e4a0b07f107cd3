package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/egressflow/egressflow/test/dnsquery"
)

// dnsWindow is `testapp dnswindow [flags] SERVER NAME COUNT PORT`: COUNT
// lookups of NAME's A record at SERVER (host:port) over UDP (or, with
// --tcp, over a TCP connection per attempt), one after
// the other, and the moment each answer arrives a datagram to the
// answer's first address on PORT, from one socket. A lookup unanswered
// within --timeout is asked again with a new ID, as a stub resolver does,
// up to --attempts times; a late reply to an earlier attempt is
// discarded. With --go, the lookups start only once that name has an A
// record (asked every --timeout), so that a test can prepare the node
// first. It prints "dnswindow started", a progress line every 100
// lookups, and one summary line:
//
//	dnswindow summary name=N lookups=1000 sent=1000 retries=3 failed=0 elapsed=4.1s p50=3.2ms p99=9.8ms max=1.5s
//
// where p50, p99 and max are of each lookup's time to its answer, retries
// included. It fails if a lookup got no answer with an address. With
// --linger it stays that long after the summary (or until SIGTERM): a pod
// that ended would take its flows with it.
func dnsWindow(args []string) error {
	fs := flag.NewFlagSet("dnswindow", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 500*time.Millisecond, "how long one attempt waits for its reply")
	attempts := fs.Int("attempts", 4, "attempts per lookup")
	gate := fs.String("go", "", "a name whose A record, once it has one, starts the lookups")
	overTCP := fs.Bool("tcp", false, "ask over TCP, a connection per attempt (as a resolver does after a truncated answer), instead of UDP")
	linger := fs.Duration("linger", 0, "how long to stay after the summary (or until SIGTERM), so that the pod stays and its flows with it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 4 {
		return errors.New("dnswindow takes SERVER NAME COUNT PORT")
	}
	server, err := netip.ParseAddrPort(fs.Arg(0))
	if err != nil {
		return err
	}
	name := fs.Arg(1)
	count, err := strconv.Atoi(fs.Arg(2))
	if err != nil || count < 1 {
		return fmt.Errorf("COUNT %q: not a positive number", fs.Arg(2))
	}
	port, err := strconv.ParseUint(fs.Arg(3), 10, 16)
	if err != nil {
		return fmt.Errorf("PORT %q: %v", fs.Arg(3), err)
	}
	dns, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		return err
	}
	defer dns.Close()
	out, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return err
	}
	defer out.Close()
	l := &lookups{conn: dns, server: server, tcp: *overTCP, timeout: *timeout, buf: make([]byte, 1500)}
	if *gate != "" {
		until := time.Now().Add(gateTimeout)
		for {
			_, _, err := l.lookup(*gate, 1)
			if err == nil {
				break
			}
			if time.Now().After(until) {
				return fmt.Errorf("%s had no address within %v: %w", *gate, gateTimeout, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	fmt.Println("dnswindow started")
	var took []time.Duration
	sent, retries, failed := 0, 0, 0
	start := time.Now()
	var lastErr error
	for i := range count {
		began := time.Now()
		addr, tries, err := l.lookup(name, *attempts)
		retries += tries - 1
		if err != nil {
			failed++
			lastErr = fmt.Errorf("lookup %d: %w", i, err)
			continue
		}
		if _, err := out.WriteToUDPAddrPort([]byte("window\n"), netip.AddrPortFrom(addr, uint16(port))); err != nil {
			return err
		}
		took = append(took, time.Since(began))
		sent++
		if (i+1)%100 == 0 {
			fmt.Printf("dnswindow progress lookups=%d\n", i+1)
		}
	}
	elapsed := time.Since(start)
	slices.Sort(took)
	quantile := func(q float64) time.Duration {
		if len(took) == 0 {
			return 0
		}
		return took[min(len(took)-1, int(q*float64(len(took))))]
	}
	var longest time.Duration
	if len(took) > 0 {
		longest = took[len(took)-1]
	}
	fmt.Printf("dnswindow summary name=%s lookups=%d sent=%d retries=%d failed=%d elapsed=%v p50=%v p99=%v max=%v\n",
		name, count, sent, retries, failed, elapsed.Round(time.Millisecond), quantile(0.5).Round(10*time.Microsecond),
		quantile(0.99).Round(10*time.Microsecond), longest.Round(time.Millisecond))
	if lastErr != nil {
		fmt.Fprintln(os.Stderr, "dnswindow: last failure:", lastErr)
	}
	if *linger > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		select {
		case <-ctx.Done():
		case <-time.After(*linger):
		}
	}
	if lastErr != nil {
		return fmt.Errorf("%d of %d lookups got no address", failed, count)
	}
	return nil
}

// gateTimeout bounds the wait for --go's name: the test sets it within
// seconds of the pod's start.
const gateTimeout = 5 * time.Minute

// lookups asks one server over one connected UDP socket, or over a TCP
// connection per query.
type lookups struct {
	conn    *net.UDPConn
	server  netip.AddrPort
	tcp     bool
	timeout time.Duration
	buf     []byte
}

// lookup asks for name's A record, up to attempts times, and returns the
// first address of the answer and how many attempts it took.
func (l *lookups) lookup(name string, attempts int) (netip.Addr, int, error) {
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		var addr netip.Addr
		addr, err = l.ask(name)
		if err == nil {
			return addr, attempt, nil
		}
	}
	return netip.Addr{}, attempts, err
}

// ask sends one query with a fresh ID and waits, up to the timeout, for
// its reply, discarding replies to other queries.
func (l *lookups) ask(name string) (netip.Addr, error) {
	id := uint16(rand.Uint32())
	query, err := dnsquery.A(id, name)
	if err != nil {
		return netip.Addr{}, err
	}
	if l.tcp {
		return l.askTCP(id, query)
	}
	if _, err := l.conn.Write(query); err != nil {
		return netip.Addr{}, err
	}
	deadline := time.Now().Add(l.timeout)
	for {
		_ = l.conn.SetReadDeadline(deadline)
		n, err := l.conn.Read(l.buf)
		if err != nil {
			return netip.Addr{}, err
		}
		addr, replyID, err := dnsquery.FirstA(l.buf[:n])
		if replyID != id {
			continue // a late reply to an earlier attempt
		}
		return addr, err
	}
}

// askTCP sends query over a new TCP connection, each message after its
// length in two bytes, and reads the reply within the timeout.
func (l *lookups) askTCP(id uint16, query []byte) (netip.Addr, error) {
	conn, err := net.DialTimeout("tcp", l.server.String(), l.timeout)
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(l.timeout))
	framed := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
	if _, err := conn.Write(append(framed, query...)); err != nil {
		return netip.Addr{}, err
	}
	var length [2]byte
	if _, err := io.ReadFull(conn, length[:]); err != nil {
		return netip.Addr{}, err
	}
	reply := make([]byte, binary.BigEndian.Uint16(length[:]))
	if _, err := io.ReadFull(conn, reply); err != nil {
		return netip.Addr{}, err
	}
	addr, replyID, err := dnsquery.FirstA(reply)
	if err == nil && replyID != id {
		err = fmt.Errorf("reply ID %d, want %d", replyID, id)
	}
	return addr, err
}
