package ofconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressflow/egressflow/openflow"
)

// Client is a connection to one OpenFlow 1.5 switch, typically an Open
// vSwitch bridge's management socket. It is safe for concurrent use.
//
// A single goroutine reads from the switch and hands each reply to the
// call waiting for its transaction id; it never blocks on a caller. Echo
// keepalives detect a dead switch. When the connection dies, every call
// waiting on it fails at once, and the Client reconnects by itself with
// capped exponential backoff; after each reconnection it signals
// Reconnected, because the switch may have restarted with empty tables and
// the owner must replay its flows. While disconnected, calls fail fast
// with ErrNotConnected.
type Client struct {
	target string
	o      options
	log    *slog.Logger

	xid      atomic.Uint32
	bundleID atomic.Uint32

	mu      sync.Mutex
	cur     *session
	lastErr error
	gens    uint64
	closed  bool

	reconnected  chan struct{}
	disconnected chan struct{}
	closing      chan struct{}
	loopDone     chan struct{}
	unsol        chan unsolicitedMsg
	dropped      atomic.Uint64
}

type unsolicitedMsg struct {
	h   openflow.Header
	msg []byte
}

// Defaults. Each is a trade-off; see the options.
const (
	// DefaultEchoInterval: how long the switch may be silent before we
	// probe it with an echo request. Shorter finds a dead switch sooner but
	// sends more probes to an idle one.
	DefaultEchoInterval = 5 * time.Second
	// DefaultEchoTimeout: how much longer we wait after the interval
	// before declaring the switch dead. The switch answers an echo only
	// after the messages queued before it, so this must exceed the time it
	// needs for the largest batch we send (Open vSwitch: about 1.2 s per
	// 100k flow mods on a small machine). Too short kills healthy but busy
	// connections; too long leaves callers waiting on a dead one.
	DefaultEchoTimeout = 15 * time.Second
	// DefaultHandshakeTimeout bounds connecting, HELLO and FEATURES, so
	// that a reconnect never hangs on a half-open switch.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait between
	// reconnection attempts, which doubles from the minimum up to the
	// maximum (with jitter). A small minimum recovers quickly from a
	// switch restart; the cap keeps a down switch from being hammered
	// while bounding how stale the switch can get once it is back.
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// DefaultLocalBackoff is the wait between reconnection attempts to a
	// unix socket (a local switch, unless WithReconnectBackoff says
	// otherwise): a failed attempt there is one connect(2) that fails at
	// once, so trying every 20 ms costs nothing measurable, while a
	// doubling backoff would leave a restarted vswitchd without its flows
	// for up to DefaultMaxBackoff.
	DefaultLocalBackoff = 20 * time.Millisecond
	// unsolicitedQueue bounds the messages waiting for the unsolicited
	// handler; beyond it they are dropped (and counted), never blocking
	// the reader.
	unsolicitedQueue = 1024
)

type options struct {
	echoInterval     time.Duration
	echoTimeout      time.Duration
	handshakeTimeout time.Duration
	minBackoff       time.Duration
	maxBackoff       time.Duration
	backoffSet       bool
	logger           *slog.Logger
	onUnsolicited    func(openflow.Header, openflow.Message)
	dialer           func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Option configures a Client.
type Option func(*options)

// WithEchoInterval sets how long the switch may stay silent before it is
// probed with an echo request (DefaultEchoInterval). Zero disables
// keepalives and dead-peer detection.
func WithEchoInterval(d time.Duration) Option { return func(o *options) { o.echoInterval = d } }

// WithEchoTimeout sets how long after the echo interval a silent switch is
// declared dead (DefaultEchoTimeout).
func WithEchoTimeout(d time.Duration) Option { return func(o *options) { o.echoTimeout = d } }

// WithHandshakeTimeout bounds each connection attempt, HELLO and
// FEATURES_REQUEST included (DefaultHandshakeTimeout).
func WithHandshakeTimeout(d time.Duration) Option {
	return func(o *options) { o.handshakeTimeout = d }
}

// WithReconnectBackoff sets the minimum and maximum wait between
// reconnection attempts (DefaultMinBackoff, DefaultMaxBackoff; for a unix
// socket DefaultLocalBackoff for both).
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff, o.backoffSet = min, max, true }
}

// WithLogger sets where the client logs connection changes (none by default).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithUnsolicited sets a handler for messages that answer no call: port
// status, flow removed, packet-in, and errors for messages sent with Send.
// It runs on its own goroutine; if it falls behind by more than 1024
// messages, further ones are dropped rather than stalling the connection.
func WithUnsolicited(fn func(openflow.Header, openflow.Message)) Option {
	return func(o *options) { o.onUnsolicited = fn }
}

// WithDialer replaces net.Dialer's DialContext, e.g. to reach a switch in
// another network namespace.
func WithDialer(fn func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = fn }
}

// ErrNotConnected is returned (wrapped with the last connection error) by
// calls made while the client is reconnecting.
var ErrNotConnected = errors.New("openflow: not connected to the switch")

// Dial connects to target, "unix:/path" (an Open vSwitch bridge's
// <rundir>/<bridge>.mgmt socket) or "tcp:host:port", negotiates OpenFlow
// 1.5 and reads the switch features. It fails if the first connection
// fails (a *VersionError if the switch lacks OpenFlow 1.5); after that the
// client reconnects by itself until Close.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	o := options{
		echoInterval: DefaultEchoInterval, echoTimeout: DefaultEchoTimeout,
		handshakeTimeout: DefaultHandshakeTimeout, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.dialer == nil {
		var d net.Dialer
		o.dialer = d.DialContext
	}
	network, _, err := splitTarget(target)
	if err != nil {
		return nil, err
	}
	if network == "unix" && !o.backoffSet {
		o.minBackoff, o.maxBackoff = DefaultLocalBackoff, DefaultLocalBackoff
	}
	if o.maxBackoff < o.minBackoff {
		o.maxBackoff = o.minBackoff
	}
	c := &Client{
		target: target, o: o, log: o.logger,
		reconnected: make(chan struct{}, 1), disconnected: make(chan struct{}, 1),
		closing: make(chan struct{}), loopDone: make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if o.onUnsolicited != nil {
		c.unsol = make(chan unsolicitedMsg, unsolicitedQueue)
		go c.deliverUnsolicited()
	}
	s, err := c.connect(ctx)
	if err != nil {
		close(c.closing) // stops the unsolicited goroutine
		return nil, err
	}
	c.cur = s
	go c.run(s)
	return c, nil
}

func splitTarget(target string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(target, ":")
	if !ok || addr == "" || (network != "unix" && network != "tcp") {
		return "", "", fmt.Errorf("openflow: bad target %q: want unix:/path or tcp:host:port", target)
	}
	return network, addr, nil
}

func (c *Client) nextXid() uint32 { return c.xid.Add(1) }

// reserveXids returns the first of n consecutive transaction ids.
func (c *Client) reserveXids(n int) uint32 { return c.xid.Add(uint32(n)) - uint32(n) + 1 }

// connect dials and performs the handshake, within the handshake timeout.
func (c *Client) connect(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.handshakeTimeout)
	defer cancel()
	network, addr, _ := splitTarget(c.target)
	conn, err := c.o.dialer(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("openflow: dial %s: %w", c.target, err)
	}
	s := &session{
		c: c, conn: conn, wsem: make(chan struct{}, 1), pending: map[uint32]*waiter{},
		dead: make(chan struct{}), echoOut: make(chan []byte, 16),
	}
	r := bufio.NewReaderSize(conn, 256<<10)
	if err := s.handshake(ctx, r); err != nil {
		conn.Close()
		return nil, err
	}
	s.lastRx.Store(time.Now().UnixNano())
	c.mu.Lock()
	c.gens++
	s.gen = c.gens
	c.mu.Unlock()
	go s.readLoop(r)
	go s.keepalive()
	c.log.Info("openflow: connected", "target", c.target, "datapath", fmt.Sprintf("%016x", s.features.DatapathID), "generation", s.gen)
	return s, nil
}

// handshake exchanges HELLO and FEATURES before the reader starts.
func (s *session) handshake(ctx context.Context, r *bufio.Reader) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = s.conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetDeadline(longAgo) })
	defer stop()
	defer s.conn.SetDeadline(time.Time{})
	fail := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("openflow: handshake with %s: %w (%v)", s.c.target, ctx.Err(), err)
		}
		return fmt.Errorf("openflow: handshake with %s: %w", s.c.target, err)
	}
	hello, _ := openflow.MarshalMessage(s.c.nextXid(), &openflow.Hello{Versions: []uint8{openflow.Version}})
	if _, err := s.conn.Write(hello); err != nil {
		return fail(err)
	}
	h, msg, err := readRaw(r)
	if err != nil {
		return fail(err)
	}
	if h.Type == openflow.TypeError {
		_, m, _ := openflow.UnmarshalMessage(msg)
		return fail(fmt.Errorf("switch refused the connection: %v", m))
	}
	if h.Type != openflow.TypeHello {
		return fail(fmt.Errorf("expected HELLO, got %v", h.Type))
	}
	_, m, err := openflow.UnmarshalMessage(msg)
	if err != nil {
		return fail(err)
	}
	// With a version bitmap, OpenFlow 1.5 must be in it; without one, the
	// peer's header version is the highest it speaks (OpenFlow 1.3.1+
	// negotiation), so it must be at least 1.5.
	offered := m.(*openflow.Hello).Versions
	ok := m.(*openflow.Hello).Supports(openflow.Version)
	if len(offered) == 0 {
		offered = []uint8{h.Version}
		ok = h.Version >= openflow.Version
	}
	if !ok {
		e, _ := openflow.MarshalMessage(h.Xid, &openflow.Error{Type: openflow.ErrHelloFailed, Code: 0, Data: []byte("OpenFlow 1.5 required")})
		_, _ = s.conn.Write(e)
		return &VersionError{Offered: offered}
	}
	xid := s.c.nextXid()
	fr, _ := openflow.MarshalMessage(xid, &openflow.FeaturesRequest{})
	if _, err := s.conn.Write(fr); err != nil {
		return fail(err)
	}
	for {
		h, msg, err := readRaw(r)
		if err != nil {
			return fail(err)
		}
		switch {
		case h.Type == openflow.TypeEchoRequest:
			msg[1] = byte(openflow.TypeEchoReply)
			if _, err := s.conn.Write(msg); err != nil {
				return fail(err)
			}
		case h.Type == openflow.TypeError && h.Xid == xid:
			_, m, _ := openflow.UnmarshalMessage(msg)
			return fail(fmt.Errorf("FEATURES_REQUEST refused: %v", m))
		case h.Type == openflow.TypeFeaturesReply && h.Xid == xid:
			_, m, err := openflow.UnmarshalMessage(msg)
			if err != nil {
				return fail(err)
			}
			s.features = *m.(*openflow.FeaturesReply)
			return nil
		}
	}
}

// run watches the current session and reconnects when it dies.
func (c *Client) run(s *session) {
	defer close(c.loopDone)
	for {
		select {
		case <-s.dead:
		case <-c.closing:
			s.kill(ErrClosed)
			return
		}
		c.mu.Lock()
		c.cur, c.lastErr = nil, s.deadErr
		c.mu.Unlock()
		c.log.Warn("openflow: connection lost; reconnecting", "target", c.target, "error", s.deadErr)
		select {
		case c.disconnected <- struct{}{}:
		default: // a notification is already pending
		}
		backoff := c.o.minBackoff
		for {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-c.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			ns, err := c.connect(ctx)
			cancel()
			if err == nil {
				c.mu.Lock()
				if c.closed {
					c.mu.Unlock()
					ns.kill(ErrClosed)
					return
				}
				c.cur = ns
				c.mu.Unlock()
				s = ns
				select {
				case c.reconnected <- struct{}{}:
				default: // a notification is already pending
				}
				break
			}
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			c.log.Debug("openflow: reconnect failed", "target", c.target, "error", err, "retry_in", backoff)
			// Full jitter in [backoff/2, backoff): reconnecting nodes spread out.
			wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
			select {
			case <-c.closing:
				return
			case <-time.After(wait):
			}
			if backoff *= 2; backoff > c.o.maxBackoff {
				backoff = c.o.maxBackoff
			}
		}
	}
}

// Reconnected receives a value after each successful reconnection. The
// switch may have lost its flows (Open vSwitch starts with empty tables
// after a restart), so the owner should replay everything it installed.
// Notifications coalesce: a slow reader sees one pending value, never a
// blocked client.
func (c *Client) Reconnected() <-chan struct{} { return c.reconnected }

// Disconnected receives a value each time the connection is lost, before
// the client tries to reconnect: the switch may be restarting, and an
// owner that must prepare for that (see controller/ovsdb) learns it at
// once. Notifications coalesce, as Reconnected's do.
func (c *Client) Disconnected() <-chan struct{} { return c.disconnected }

// Generation counts successful connections, starting at 1.
func (c *Client) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens
}

// Connected reports whether the client currently has a connection.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur != nil
}

// Features returns the FEATURES_REPLY of the current (or last) connection:
// the datapath id and table count.
func (c *Client) Features() openflow.FeaturesReply {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return c.cur.features
	}
	return openflow.FeaturesReply{}
}

// DroppedUnsolicited counts unsolicited messages dropped because the
// WithUnsolicited handler fell behind.
func (c *Client) DroppedUnsolicited() uint64 { return c.dropped.Load() }

// Close closes the connection and stops reconnecting. Calls in progress
// fail.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.closing)
	<-c.loopDone
	return nil
}

// session returns the live session or an ErrNotConnected error.
func (c *Client) session() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cur == nil || c.cur.isDead() {
		if c.lastErr != nil {
			return nil, fmt.Errorf("%w (last error: %v)", ErrNotConnected, c.lastErr)
		}
		return nil, ErrNotConnected
	}
	return c.cur, nil
}

func (c *Client) unsolicited(h openflow.Header, msg []byte) {
	if c.unsol == nil {
		return
	}
	select {
	case c.unsol <- unsolicitedMsg{h, msg}:
	default:
		c.dropped.Add(1)
	}
}

func (c *Client) deliverUnsolicited() {
	for {
		select {
		case <-c.closing:
			return
		case u := <-c.unsol:
			_, m, err := openflow.UnmarshalMessage(u.msg)
			if err != nil {
				m = &openflow.RawMessage{Type: u.h.Type, Body: u.msg[openflow.HeaderLen:]}
			}
			c.o.onUnsolicited(u.h, m)
		}
	}
}
