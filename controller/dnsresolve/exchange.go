package dnsresolve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// maxMessageSize is the largest DNS message over TCP (a 16-bit length),
// and the read buffer for UDP: no EDNS(0) is offered, so a server keeps
// its UDP replies to 512 bytes and truncates larger ones, but a reply that
// is larger anyway is read whole rather than cut.
const maxMessageSize = 65535

// exchanger asks nameservers, in order, one question at a time.
type exchanger struct {
	servers []netip.AddrPort
	timeout time.Duration
}

// query asks the servers in order for q until one answers (addresses,
// NXDOMAIN or NODATA); a timeout, a network error, a malformed reply or an
// error code moves on to the next server. It returns the last server's
// error with every server's when none answers.
func (x exchanger) query(ctx context.Context, q dnsmessage.Question) (answer, error) {
	var errs []error
	for _, server := range x.servers {
		ans, err := x.queryServer(ctx, server, q)
		if err == nil {
			return ans, nil
		}
		if ctx.Err() != nil {
			return answer{}, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%v: %w", server, err))
	}
	if len(errs) == 0 {
		return answer{}, errors.New("no nameserver")
	}
	return answer{}, errors.Join(errs...)
}

// queryServer asks one server over UDP, and again over TCP when the UDP
// reply is truncated.
func (x exchanger) queryServer(ctx context.Context, server netip.AddrPort, q dnsmessage.Question) (answer, error) {
	id := uint16(rand.Uint32())
	msg, err := buildQuery(id, q)
	if err != nil {
		return answer{}, err
	}
	ans, err := x.exchangeUDP(ctx, server, msg, id, q)
	if errors.Is(err, errTruncated) {
		ans, err = x.exchangeTCP(ctx, server, msg, id, q)
		if err != nil {
			err = fmt.Errorf("over TCP after a truncated UDP reply: %w", err)
		}
	}
	return ans, err
}

// dial connects to server within x.timeout; the connection's deadline is
// the timeout, and ctx's end cuts it short.
func (x exchanger) dial(ctx context.Context, network string, server netip.AddrPort) (net.Conn, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, x.timeout)
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, server.String())
	if err != nil {
		cancel()
		return nil, nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return conn, func() { stop(); cancel(); _ = conn.Close() }, nil
}

// exchangeUDP sends msg and waits for the reply with our ID and question,
// ignoring any other datagram (a late reply to an earlier query).
func (x exchanger) exchangeUDP(ctx context.Context, server netip.AddrPort, msg []byte, id uint16, q dnsmessage.Question) (answer, error) {
	conn, done, err := x.dial(ctx, "udp", server)
	if err != nil {
		return answer{}, err
	}
	defer done()
	if _, err := conn.Write(msg); err != nil {
		return answer{}, err
	}
	buf := make([]byte, maxMessageSize)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return answer{}, timeoutError(err, x.timeout)
		}
		ans, err := parseAnswer(buf[:n], id, q)
		if errors.Is(err, errNotOurs) {
			continue
		}
		return ans, err
	}
}

// exchangeTCP sends msg with its two-byte length and reads one reply.
func (x exchanger) exchangeTCP(ctx context.Context, server netip.AddrPort, msg []byte, id uint16, q dnsmessage.Question) (answer, error) {
	conn, done, err := x.dial(ctx, "tcp", server)
	if err != nil {
		return answer{}, err
	}
	defer done()
	framed := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(msg)), uint16(len(msg)))
	if _, err := conn.Write(append(framed, msg...)); err != nil {
		return answer{}, timeoutError(err, x.timeout)
	}
	var length [2]byte
	if _, err := io.ReadFull(conn, length[:]); err != nil {
		return answer{}, timeoutError(err, x.timeout)
	}
	reply := make([]byte, binary.BigEndian.Uint16(length[:]))
	if _, err := io.ReadFull(conn, reply); err != nil {
		return answer{}, timeoutError(err, x.timeout)
	}
	return parseAnswer(reply, id, q)
}

// timeoutError says "no reply within" for a deadline, and passes other
// errors on.
func timeoutError(err error, timeout time.Duration) error {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return fmt.Errorf("no reply within %v", timeout)
	}
	return err
}
