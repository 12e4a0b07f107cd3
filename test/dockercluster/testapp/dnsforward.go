package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// dnsForwardTimeout is how long dnsforward waits for the upstream's reply
// to one query: longer than the hold a reply may wait on its node, shorter
// than a client's patience across a few attempts.
const dnsForwardTimeout = 2 * time.Second

// dnsForward is `testapp dnsforward [--listen ADDR] UPSTREAM`: a DNS
// resolver pod as the cluster's CoreDNS is one with its forward plugin and
// no cache. Each UDP query that arrives on --listen (":53") is sent on to
// UPSTREAM (host:port) from a socket of its own, and the upstream's reply
// is sent back to the client from the listening socket, unchanged. It
// prints "dnsforward listening" once it takes queries, and runs until
// SIGTERM or SIGINT.
func dnsForward(args []string) error {
	fs := flag.NewFlagSet("dnsforward", flag.ContinueOnError)
	listen := fs.String("listen", ":53", "the UDP address to take queries on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: dnsforward [--listen ADDR] UPSTREAM")
	}
	upstream, err := net.ResolveUDPAddr("udp", fs.Arg(0))
	if err != nil {
		return fmt.Errorf("upstream %q: %w", fs.Arg(0), err)
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { <-ctx.Done(); conn.Close() }()
	fmt.Println("dnsforward listening")
	buf := make([]byte, 65535)
	for {
		n, client, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		query := append([]byte(nil), buf[:n]...)
		go func() {
			if err := forwardOnce(conn, client, upstream, query); err != nil {
				fmt.Fprintln(os.Stderr, "dnsforward:", err)
			}
		}()
	}
}

// forwardOnce sends query to upstream and its reply to client over conn.
func forwardOnce(conn net.PacketConn, client net.Addr, upstream *net.UDPAddr, query []byte) error {
	up, err := net.DialUDP("udp", nil, upstream)
	if err != nil {
		return err
	}
	defer up.Close()
	if _, err := up.Write(query); err != nil {
		return err
	}
	if err := up.SetReadDeadline(time.Now().Add(dnsForwardTimeout)); err != nil {
		return err
	}
	reply := make([]byte, 65535)
	n, err := up.Read(reply)
	if err != nil {
		return fmt.Errorf("upstream %s: %w", upstream, err)
	}
	_, err = conn.WriteTo(reply[:n], client)
	return err
}
