package ofconn

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressflow/egressflow/openflow"
)

// A session is one connection to the switch, from handshake to death. The
// Client replaces it when it reconnects; everything waiting on a dead
// session fails at once with the reason it died.

// ErrConnectionLost wraps the reason when the connection to the switch
// dies while a call waits for its reply.
var ErrConnectionLost = errors.New("openflow: connection to the switch lost")

// VersionError reports a switch that does not offer OpenFlow 1.5.
type VersionError struct {
	Offered []uint8 // wire versions the switch offered
}

var versionNames = map[uint8]string{1: "1.0", 2: "1.1", 3: "1.2", 4: "1.3", 5: "1.4", 6: "1.5"}

func (e *VersionError) Error() string {
	var vs []string
	for _, v := range e.Offered {
		if n, ok := versionNames[v]; ok {
			vs = append(vs, "OpenFlow"+n)
		} else {
			vs = append(vs, fmt.Sprintf("version 0x%02x", v))
		}
	}
	return fmt.Sprintf("openflow: the switch does not offer OpenFlow 1.5 (it offers %s); "+
		"enable it on the bridge, e.g. ovs-vsctl set bridge br-ex protocols=OpenFlow13,OpenFlow15",
		strings.Join(vs, ", "))
}

// waiter is a call waiting for the reply (or replies) with its xid.
type waiter struct {
	multipart bool
	msgs      [][]byte // whole messages, header included
	err       error
	done      chan struct{}
	// more, if not nil, is signalled (never blocking) as each part of a
	// multipart reply arrives, for a caller that takes them as they come
	// (takeParts) rather than all at the end.
	more chan struct{}
}

// takeParts hands over the messages w has received so far.
func (s *session) takeParts(w *waiter) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := w.msgs
	w.msgs = nil
	return parts
}

// xidRange collects the errors the switch sends for a block of pipelined
// messages that have no reply of their own (bundle adds, flow mods).
type xidRange struct {
	first, n uint32 // n grows under the session's mu (extendRange)
	errs     *errorSink
}

func (r *xidRange) contains(xid uint32) bool { return xid-r.first < r.n }

// errorSink holds the errors the switch sent for one or more xid ranges.
type errorSink struct {
	mu   sync.Mutex
	errs map[uint32]*openflow.Error
}

func (e *errorSink) put(xid uint32, err *openflow.Error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.errs == nil {
		e.errs = map[uint32]*openflow.Error{}
	}
	e.errs[xid] = err
}

func (e *errorSink) any() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.errs) > 0
}

// refused turns the errors so far into MessageErrors in message order:
// as maps an xid and its error to one, or to nil when the xid is not one
// of the caller's messages.
func (e *errorSink) refused(as func(xid uint32, err *openflow.Error) *MessageError) []*MessageError {
	e.mu.Lock()
	errs := maps.Clone(e.errs) // more may still arrive
	e.mu.Unlock()
	var out []*MessageError
	for xid, err := range errs {
		if me := as(xid, err); me != nil {
			out = append(out, me)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

type session struct {
	c        *Client
	conn     net.Conn
	gen      uint64
	features openflow.FeaturesReply

	wsem chan struct{} // write lock; a channel so acquiring can honour contexts
	wbuf []byte        // encoding buffer, guarded by wsem

	mu      sync.Mutex
	pending map[uint32]*waiter
	ranges  []*xidRange

	dead     chan struct{}
	deadErr  error
	killOnce sync.Once

	lastRx  atomic.Int64 // unix nanoseconds of the last message received
	echoOut chan []byte  // echo replies for the keepalive goroutine to send
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("openflow: client closed")

// kill tears the session down once, failing every waiter with err.
func (s *session) kill(err error) {
	s.killOnce.Do(func() {
		// dead closes under mu, so that register either sees it or has
		// its waiter in the map failed below.
		s.mu.Lock()
		s.deadErr = err
		close(s.dead)
		pending := s.pending
		s.pending = map[uint32]*waiter{}
		s.mu.Unlock()
		s.conn.Close()
		for _, w := range pending {
			w.err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
			close(w.done)
		}
	})
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

func (s *session) register(xid uint32, multipart bool) *waiter {
	return s.add(xid, &waiter{multipart: multipart, done: make(chan struct{})})
}

// add registers w as the waiter for xid's reply.
func (s *session) add(xid uint32, w *waiter) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isDead() {
		w.err = fmt.Errorf("%w: %v", ErrConnectionLost, s.deadErr)
		close(w.done)
		return w
	}
	s.pending[xid] = w
	return w
}

func (s *session) unregister(xid uint32) {
	s.mu.Lock()
	delete(s.pending, xid)
	s.mu.Unlock()
}

func (s *session) addRange(r *xidRange) {
	s.mu.Lock()
	s.ranges = append(s.ranges, r)
	s.mu.Unlock()
}

// extendRange grows r by the n xids from first, if they follow it.
func (s *session) extendRange(r *xidRange, first uint32, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.first+r.n != first {
		return false
	}
	r.n += uint32(n)
	return true
}

func (s *session) removeRange(r *xidRange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.ranges {
		if x == r {
			s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
			return
		}
	}
}

// wait blocks until w completes, ctx ends or the session dies.
func (s *session) wait(ctx context.Context, xid uint32, w *waiter) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		s.unregister(xid)
		return ctx.Err()
	}
}

var longAgo = time.Unix(1, 0)

// lockWrite acquires the write lock, honouring ctx and session death.
func (s *session) lockWrite(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return fmt.Errorf("%w: %v", ErrConnectionLost, s.deadErr)
	}
}

func (s *session) unlockWrite() { <-s.wsem }

// writeLocked writes b whole; the caller holds the write lock. A failed or
// interrupted write leaves the stream corrupt, so it kills the session.
func (s *session) writeLocked(ctx context.Context, b []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.conn.SetWriteDeadline(dl)
	} else {
		_ = s.conn.SetWriteDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetWriteDeadline(longAgo) })
	n, err := s.conn.Write(b)
	stop()
	if err == nil {
		return nil
	}
	if n == 0 && ctx.Err() != nil {
		// Nothing went out: the stream is intact, only this call gives up.
		_ = s.conn.SetWriteDeadline(time.Time{})
		return ctx.Err()
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w after %d of %d bytes", ctx.Err(), n, len(b))
	}
	s.kill(fmt.Errorf("write: %w", err))
	return fmt.Errorf("%w: %w", ErrConnectionLost, err)
}

// encodeAndWrite encodes messages with their xids and writes them at once.
func (s *session) encodeAndWrite(ctx context.Context, xids []uint32, msgs []openflow.Message) error {
	if err := s.lockWrite(ctx); err != nil {
		return err
	}
	defer s.unlockWrite()
	b := s.wbuf[:0]
	var err error
	for i, m := range msgs {
		if b, err = openflow.AppendMessage(b, xids[i], m); err != nil {
			return err
		}
	}
	s.wbuf = b[:0]
	if cap(s.wbuf) > 1<<20 {
		s.wbuf = nil // do not keep a huge buffer around
	}
	return s.writeLocked(ctx, b)
}

// readLoop is the session's single reader. It never blocks on a consumer:
// replies go to buffered waiters, echo replies to a buffered channel, and
// unsolicited messages to the Client's bounded queue.
func (s *session) readLoop(r *bufio.Reader) {
	for {
		h, msg, err := readRaw(r)
		if err != nil {
			s.kill(fmt.Errorf("read: %w", err))
			return
		}
		s.lastRx.Store(time.Now().UnixNano())
		if h.Type == openflow.TypeEchoRequest {
			msg[1] = byte(openflow.TypeEchoReply)
			select {
			case s.echoOut <- msg:
			default: // the keepalive goroutine is behind; the peer will ask again
			}
			continue
		}
		if s.dispatch(h, msg) {
			continue
		}
		if h.Type != openflow.TypeEchoReply && h.Type != openflow.TypeHello { // keepalive answers need no one
			s.c.unsolicited(h, msg)
		}
	}
}

// readRaw reads one whole message into a new slice.
func readRaw(r *bufio.Reader) (openflow.Header, []byte, error) {
	hdr, err := r.Peek(openflow.HeaderLen)
	if err != nil {
		return openflow.Header{}, nil, err
	}
	h, err := openflow.ParseHeader(hdr)
	if err != nil {
		return h, nil, err
	}
	msg := make([]byte, h.Length)
	if _, err := io.ReadFull(r, msg); err != nil {
		return h, nil, err
	}
	return h, msg, nil
}

// dispatch hands a message to whoever waits for its xid.
func (s *session) dispatch(h openflow.Header, msg []byte) bool {
	s.mu.Lock()
	w := s.pending[h.Xid]
	if w == nil {
		for _, r := range s.ranges {
			if !r.contains(h.Xid) {
				continue
			}
			if h.Type == openflow.TypeError {
				if _, m, err := openflow.UnmarshalMessage(msg); err == nil {
					r.errs.put(h.Xid, m.(*openflow.Error))
				}
			}
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
		return false
	}
	complete := true
	if h.Type == openflow.TypeError {
		if _, m, err := openflow.UnmarshalMessage(msg); err == nil {
			w.err = m.(*openflow.Error)
		} else {
			w.err = err
		}
	} else {
		w.msgs = append(w.msgs, msg)
		if w.multipart && h.Type == openflow.TypeMultipartReply && len(msg) >= openflow.HeaderLen+4 &&
			binary.BigEndian.Uint16(msg[openflow.HeaderLen+2:])&openflow.MultipartMore != 0 {
			complete = false
		}
	}
	if complete {
		delete(s.pending, h.Xid)
	}
	s.mu.Unlock()
	if complete {
		close(w.done)
	} else if w.more != nil {
		select {
		case w.more <- struct{}{}:
		default: // already signalled: the caller takes every part so far
		}
	}
	return true
}

// keepalive sends echo replies for the reader, probes an idle switch with
// echo requests, and declares it dead when it stays silent too long.
func (s *session) keepalive() {
	o := s.c.o
	tick := o.echoInterval / 4
	if tick <= 0 || tick > time.Second {
		tick = time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastProbe time.Time
	for {
		select {
		case <-s.dead:
			return
		case b := <-s.echoOut:
			s.writeBackground(b)
		case now := <-t.C:
			if o.echoInterval <= 0 {
				continue
			}
			idle := now.Sub(time.Unix(0, s.lastRx.Load()))
			if idle >= o.echoInterval+o.echoTimeout {
				s.kill(fmt.Errorf("switch silent for %v (echo interval %v, timeout %v)", idle.Round(time.Millisecond), o.echoInterval, o.echoTimeout))
				return
			}
			if idle >= o.echoInterval && now.Sub(lastProbe) >= o.echoInterval {
				lastProbe = now
				b, _ := openflow.MarshalMessage(s.c.nextXid(), &openflow.EchoRequest{})
				s.writeBackground(b)
			}
		}
	}
}

// writeBackground writes a keepalive message, giving up if the connection
// stays blocked for the echo timeout.
func (s *session) writeBackground(b []byte) {
	timeout := s.c.o.echoTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if s.lockWrite(ctx) != nil {
		return
	}
	defer s.unlockWrite()
	_ = s.writeLocked(ctx, b)
}
