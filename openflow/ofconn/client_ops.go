package ofconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/egressflow/egressflow/openflow"
)

// Request sends msg, which must be a message the switch answers (echo,
// barrier, features, get-config, bundle control, multipart), and returns
// the reply with the same xid. A multipart request returns its first part
// only; use DumpFlows or Ports for complete dumps. An OFPT_ERROR reply is
// returned as an *Error.
func (c *Client) Request(ctx context.Context, msg openflow.Message) (openflow.Message, error) {
	s, err := c.session()
	if err != nil {
		return nil, err
	}
	xid := c.nextXid()
	w := s.register(xid, false)
	if err := s.encodeAndWrite(ctx, []uint32{xid}, []openflow.Message{msg}); err != nil {
		s.unregister(xid)
		return nil, err
	}
	if err := s.wait(ctx, xid, w); err != nil {
		return nil, err
	}
	_, reply, err := openflow.UnmarshalMessage(w.msgs[0])
	return reply, err
}

// Send writes messages without waiting for anything. Errors the switch
// reports for them go to the WithUnsolicited handler; follow with Barrier
// to know they were processed.
func (c *Client) Send(ctx context.Context, msgs ...openflow.Message) error {
	s, err := c.session()
	if err != nil {
		return err
	}
	xids := make([]uint32, len(msgs))
	first := c.reserveXids(len(msgs))
	for i := range xids {
		xids[i] = first + uint32(i)
	}
	return s.encodeAndWrite(ctx, xids, msgs)
}

// Barrier returns once the switch has finished every message sent before it.
func (c *Client) Barrier(ctx context.Context) error {
	reply, err := c.Request(ctx, &openflow.BarrierRequest{})
	if err != nil {
		return err
	}
	if _, ok := reply.(*openflow.BarrierReply); !ok {
		return fmt.Errorf("openflow: barrier answered with %v", reply.MsgType())
	}
	return nil
}

// Echo sends an echo request and returns the round-trip time.
func (c *Client) Echo(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Request(ctx, &openflow.EchoRequest{Data: []byte("egressflow")}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// MessageError says which of several pipelined messages the switch refused.
type MessageError struct {
	Index   int              // position in the caller's list
	Message openflow.Message // the message
	Err     *openflow.Error  // the switch's error
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("message %d (%s): %v", e.Index, openflow.Describe(e.Message), e.Err)
}

func (e *MessageError) Unwrap() error { return e.Err }

// SendPacketOut has the switch run a packet through po's actions, and
// returns once it has (a barrier follows), with the switch's error if it
// refused the message.
func (c *Client) SendPacketOut(ctx context.Context, po *openflow.PacketOut) error {
	failed, err := c.SendThenBarrier(ctx, []openflow.Message{po})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return failed[0]
	}
	return nil
}

// FlowModsError reports the flow mods of SendFlowMods that failed.
type FlowModsError struct {
	Failed []*MessageError // in the order sent
}

func (e *FlowModsError) Error() string {
	s := "openflow: switch refused " + e.Failed[0].Error()
	if len(e.Failed) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(e.Failed)-1)
	}
	return s
}

func (e *FlowModsError) Unwrap() error { return e.Failed[0] }

// SendThenBarrier pipelines msgs and a barrier, waits for the barrier
// reply, and returns the errors the switch reported for msgs (which it
// sends before the barrier reply).
func (c *Client) SendThenBarrier(ctx context.Context, msgs []openflow.Message) ([]*MessageError, error) {
	s, err := c.session()
	if err != nil {
		return nil, err
	}
	n := len(msgs)
	first := c.reserveXids(n + 1)
	r := &xidRange{first: first, n: uint32(n), errs: &errorSink{}}
	s.addRange(r)
	defer s.removeRange(r)
	bxid := first + uint32(n)
	w := s.register(bxid, false)
	if _, err := s.writeBatched(ctx, first, n+1, encodeList(msgs, &openflow.BarrierRequest{})); err != nil {
		s.unregister(bxid)
		return nil, err
	}
	if err := s.wait(ctx, bxid, w); err != nil {
		return nil, err
	}
	return rangeErrors(r, openflow.List[openflow.Message](msgs)), nil
}

func rangeErrors(r *xidRange, msgs openflow.Sequence) []*MessageError {
	return r.errs.refused(func(xid uint32, e *openflow.Error) *MessageError {
		i := int(xid - r.first)
		if i < 0 || i >= msgs.Len() {
			return nil
		}
		return &MessageError{Index: i, Message: msgs.At(i), Err: e}
	})
}

// writeBatched encodes count messages, message i by encode(b, xid, i)
// with xid first+i, and writes them in chunks, releasing the write lock
// between chunks so that keepalives and other calls get through a long
// batch.
// It returns the number of messages fully written.
func (s *session) writeBatched(ctx context.Context, first uint32, count int,
	encode func(b []byte, xid uint32, i int) ([]byte, error)) (int, error) {
	const chunk = 256 << 10
	written := 0
	for i := 0; i < count; {
		if err := s.lockWrite(ctx); err != nil {
			return written, err
		}
		b := s.wbuf[:0]
		var err error
		for ; i < count && len(b) < chunk; i++ {
			if b, err = encode(b, first+uint32(i), i); err != nil {
				s.unlockWrite()
				return written, err
			}
		}
		s.wbuf = b[:0]
		if cap(s.wbuf) > 4*chunk {
			s.wbuf = nil // do not keep a huge buffer around
		}
		err = s.writeLocked(ctx, b)
		s.unlockWrite()
		if err != nil {
			return written, err
		}
		written = i
	}
	return written, nil
}

func encodeList(msgs []openflow.Message, tail openflow.Message) func([]byte, uint32, int) ([]byte, error) {
	return func(b []byte, xid uint32, i int) ([]byte, error) {
		m := tail
		if i < len(msgs) {
			m = msgs[i]
		}
		out, err := openflow.AppendMessage(b, xid, m)
		if err != nil {
			return b, fmt.Errorf("openflow: cannot encode message %d (%s): %w", i, openflow.Describe(m), err)
		}
		return out, nil
	}
}

// SendFlowMods sends flow mods pipelined, followed by a barrier, and waits
// for the barrier: when it returns, the switch has processed every one of
// them. Flow mods the switch refused are reported in a *FlowModsError;
// the others took effect. Use Bundle for all-or-nothing changes.
func (c *Client) SendFlowMods(ctx context.Context, fms ...*openflow.FlowMod) error {
	msgs := make([]openflow.Message, len(fms))
	for i, fm := range fms {
		msgs[i] = fm
	}
	failed, err := c.SendThenBarrier(ctx, msgs)
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return &FlowModsError{Failed: failed}
	}
	return nil
}

// multipart sends a multipart request and returns every part of the reply.
func (c *Client) multipart(ctx context.Context, req openflow.Message) ([][]byte, error) {
	var parts [][]byte
	err := c.multipartEach(ctx, req, func(part []byte) error {
		parts = append(parts, part)
		return nil
	})
	return parts, err
}

// multipartEach sends a multipart request and calls fn with each part of
// the reply, in order, as it arrives: a large reply is never held whole.
// An error from fn stops it (the rest of the reply is dropped).
func (c *Client) multipartEach(ctx context.Context, req openflow.Message, fn func(part []byte) error) error {
	s, err := c.session()
	if err != nil {
		return err
	}
	xid := c.nextXid()
	w := s.add(xid, &waiter{multipart: true, done: make(chan struct{}), more: make(chan struct{}, 1)})
	if err := s.encodeAndWrite(ctx, []uint32{xid}, []openflow.Message{req}); err != nil {
		s.unregister(xid)
		return err
	}
	each := func() error {
		for _, p := range s.takeParts(w) {
			if err := fn(p); err != nil {
				s.unregister(xid)
				return err
			}
		}
		return nil
	}
	for {
		if err := each(); err != nil {
			return err
		}
		select {
		case <-w.more:
		case <-w.done:
			if w.err != nil {
				return w.err
			}
			return each() // the parts that came with the last one
		case <-ctx.Done():
			s.unregister(xid)
			return ctx.Err()
		}
	}
}

// DumpFlows returns the flows matching req (nil: every flow in every
// table), collecting every part of the multipart reply.
//
// To dump one owner's flows, filter by cookie: Cookie and CookieMask. To
// dump one table, set Table (TableAll for all).
func (c *Client) DumpFlows(ctx context.Context, req *openflow.FlowDescRequest) ([]openflow.Flow, error) {
	var flows []openflow.Flow
	err := c.DumpFlowsFunc(ctx, req, func(f *openflow.Flow) error {
		flows = append(flows, *f)
		return nil
	})
	return flows, err
}

// DumpFlowsFunc is DumpFlows calling fn with each flow as its part of the
// reply arrives, so that a dump of any size is never held whole: a caller
// that keeps a digest of each flow needs memory for the digests only. fn
// may keep f; an error from it stops the dump and is returned.
func (c *Client) DumpFlowsFunc(ctx context.Context, req *openflow.FlowDescRequest, fn func(f *openflow.Flow) error) error {
	return c.DumpFlowEntries(ctx, req, func(e openflow.FlowEntry) error {
		f, err := e.Decode()
		if err != nil {
			return err
		}
		return fn(&f)
	})
}

// DumpFlowEntries is DumpFlowsFunc without decoding: fn reads each flow in
// place, in its wire form, as its part of the reply arrives. Walking a dump
// this way allocates nothing per flow, which matters to a caller that
// digests hundreds of thousands of them. fn must not keep e past its
// return; an error from it stops the dump and is returned.
func (c *Client) DumpFlowEntries(ctx context.Context, req *openflow.FlowDescRequest, fn func(e openflow.FlowEntry) error) error {
	if req == nil {
		req = &openflow.FlowDescRequest{Table: openflow.TableAll}
	}
	return c.multipartEach(ctx, req, func(part []byte) error { return openflow.EachFlowEntry(part, fn) })
}

// Ports returns the switch's port descriptions.
func (c *Client) Ports(ctx context.Context) ([]openflow.Port, error) {
	return dumpItems(ctx, c, &openflow.PortDescRequest{}, "port", func(r *openflow.PortDescReply) []openflow.Port { return r.Ports })
}

// Groups returns every group on the switch (dump-groups).
func (c *Client) Groups(ctx context.Context) ([]openflow.GroupDesc, error) {
	return dumpItems(ctx, c, &openflow.GroupDescRequest{}, "group", func(r *openflow.GroupDescReply) []openflow.GroupDesc { return r.Groups })
}

// dumpItems sends a multipart request whose every reply part is an R, and
// gathers the items of the parts.
func dumpItems[R openflow.Message, T any](ctx context.Context, c *Client, req openflow.Message, what string, items func(R) []T) ([]T, error) {
	parts, err := c.multipart(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, p := range parts {
		_, m, err := openflow.UnmarshalMessage(p)
		if err != nil {
			return nil, err
		}
		r, ok := m.(R)
		if !ok {
			return nil, fmt.Errorf("openflow: %s dump answered with %T", what, m)
		}
		out = append(out, items(r)...)
	}
	return out, nil
}

// ErrNoSuchPort is returned by PortByName for a name the switch lacks.
var ErrNoSuchPort = errors.New("openflow: no such port")

// PortByName returns the OpenFlow port number of the named port (the name
// ovs-vsctl add-port used; the bridge's own port is LOCAL).
func (c *Client) PortByName(ctx context.Context, name string) (uint32, error) {
	ports, err := c.Ports(ctx)
	if err != nil {
		return 0, err
	}
	var names []string
	for _, p := range ports {
		if p.Name == name {
			return p.PortNo, nil
		}
		names = append(names, p.Name)
	}
	return 0, fmt.Errorf("%w %q on the switch (it has %s)", ErrNoSuchPort, name, strings.Join(names, ", "))
}

// FlushConntrackZone deletes every conntrack entry in zone. The switch
// acknowledges nothing, so a barrier follows; an error for the flush is
// returned.
func (c *Client) FlushConntrackZone(ctx context.Context, zone uint16) error {
	return c.flush(ctx, &openflow.CTFlushZone{Zone: zone})
}

// FlushConntrack deletes the conntrack entries matching f (Open vSwitch
// 3.1+), followed by a barrier. See CTFlush for how zones and partial
// tuples behave.
func (c *Client) FlushConntrack(ctx context.Context, f *openflow.CTFlush) error {
	return c.flush(ctx, f)
}

func (c *Client) flush(ctx context.Context, m openflow.Message) error {
	failed, err := c.SendThenBarrier(ctx, []openflow.Message{m})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("openflow: conntrack flush refused: %w", failed[0].Err)
	}
	return nil
}
