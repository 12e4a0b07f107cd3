package openflow

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// BundleFlags used for every message of a transaction: Open vSwitch
// requires identical flags on OPEN, every ADD, CLOSE and COMMIT.
const bundleFlags = BundleAtomic | BundleOrdered

// discardTimeout bounds the best-effort DISCARD sent when a transaction
// is abandoned (its context ended). The switch also drops the bundle when
// the connection closes, so a lost discard leaves nothing behind for long.
const discardTimeout = 2 * time.Second

// BundleError reports a bundle transaction that did not commit.
type BundleError struct {
	// Phase is where it failed: "open", "add", "close", "commit", or
	// "write" (before the switch had everything).
	Phase string
	// Failed lists the messages the switch refused, in order (phase "add").
	Failed []*MessageError
	// Err is the switch's error, a context error or the connection error.
	Err error
	// Discarded reports that the switch dropped the bundle: nothing changed.
	Discarded bool
	// Uncertain reports that the connection died after COMMIT was sent and
	// before its reply: the changes may or may not be in place.
	Uncertain bool
}

func (e *BundleError) Error() string {
	var s string
	switch {
	case len(e.Failed) > 0:
		s = "openflow: bundle rejected: the switch refused " + e.Failed[0].Error()
		if e.Phase == "commit" {
			s = "openflow: bundle commit failed: the switch refused " + e.Failed[0].Error()
		}
		if len(e.Failed) > 1 {
			s += fmt.Sprintf(" (and %d more)", len(e.Failed)-1)
		}
	default:
		s = fmt.Sprintf("openflow: bundle failed at %s: %v", e.Phase, e.Err)
	}
	switch {
	case e.Uncertain:
		s += "; the connection died after COMMIT, so whether it applied is unknown: reconcile (dump or replay)"
	case e.Discarded:
		s += "; bundle discarded, nothing changed"
	}
	return s
}

func (e *BundleError) Unwrap() error {
	if len(e.Failed) > 0 {
		return e.Failed[0]
	}
	return e.Err
}

// Bundle applies msgs (usually *FlowMod) as one atomic, ordered
// transaction: either all take effect or none does.
//
// It sends OPEN, every ADD and CLOSE pipelined (without waiting per
// message), then waits for the CLOSE reply: the switch checks each message
// as it arrives and reports failures before answering CLOSE. Only if none
// failed does it COMMIT; otherwise it DISCARDs and returns a *BundleError
// naming every refused message and why. If the connection dies first, the
// switch drops the bundle and nothing changes; the error says so.
func (c *Client) Bundle(ctx context.Context, msgs ...Message) error {
	return c.BundleSequence(ctx, List[Message](msgs))
}

// BundleSequence is Bundle for messages held in a Sequence, such as a
// Batch encoded in advance; a *MessageError's Index counts in msgs.
func (c *Client) BundleSequence(ctx context.Context, msgs Sequence) error {
	if msgs.Len() == 0 {
		return nil
	}
	s, err := c.session()
	if err != nil {
		return &BundleError{Phase: "open", Err: err, Discarded: true}
	}
	id := c.bundleID.Add(1)
	n := msgs.Len()
	first := c.reserveXids(n + 3)
	openX, closeX, finX := first, first+1+uint32(n), first+2+uint32(n)
	r := &xidRange{first: first + 1, n: uint32(n)}
	s.addRange(r)
	defer s.removeRange(r)
	wOpen := s.register(openX, false)
	wClose := s.register(closeX, false)

	open := BundleControl{BundleID: id, Type: BundleOpenRequest, Flags: bundleFlags}
	closeMsg := BundleControl{BundleID: id, Type: BundleCloseRequest, Flags: bundleFlags}
	add := BundleAdd{BundleID: id, Flags: bundleFlags}
	written, err := s.writeBatched(ctx, first, n+2, func(b []byte, xid uint32, i int) ([]byte, error) {
		switch i {
		case 0:
			return AppendMessage(b, xid, &open)
		case n + 1:
			return AppendMessage(b, xid, &closeMsg)
		}
		add.Message = msgs.At(i - 1)
		out, err := AppendMessage(b, xid, &add)
		if err != nil {
			return b, &MessageError{Index: i - 1, Message: add.Message, Err: nil}
		}
		return out, nil
	})
	if err != nil {
		s.unregister(openX)
		s.unregister(closeX)
		if written > 0 {
			c.abandon(s, id)
		}
		var me *MessageError
		if errors.As(err, &me) {
			return &BundleError{Phase: "write", Err: fmt.Errorf("cannot encode message %d (%s)", me.Index, describe(me.Message)), Discarded: true}
		}
		return &BundleError{Phase: "write", Err: err, Discarded: true}
	}
	if err := s.wait(ctx, openX, wOpen); err != nil {
		s.unregister(closeX)
		return c.bundleFailure(s, id, "open", err)
	}
	if err := s.wait(ctx, closeX, wClose); err != nil {
		return c.bundleFailure(s, id, "close", err)
	}
	// Every add error arrived before the CLOSE reply.
	if failed := rangeErrors(r, msgs); len(failed) > 0 {
		c.finish(ctx, s, id, finX, BundleDiscardRequest)
		return &BundleError{Phase: "add", Failed: failed, Discarded: true}
	}
	if err := c.finish(ctx, s, id, finX, BundleCommitRequest); err != nil {
		// Open vSwitch reports the message that failed at commit under
		// its own xid, before the COMMIT error.
		be := &BundleError{Phase: "commit", Err: err, Failed: rangeErrors(r, msgs)}
		switch {
		case errors.Is(err, ErrConnectionLost), ctx.Err() != nil:
			be.Uncertain = true
		default:
			be.Discarded = true // an atomic bundle that fails to commit changes nothing
		}
		return be
	}
	return nil
}

// finish sends COMMIT or DISCARD and waits for its reply.
func (c *Client) finish(ctx context.Context, s *session, id, xid uint32, typ BundleControlType) error {
	if typ == BundleDiscardRequest {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
		defer cancel()
	}
	w := s.register(xid, false)
	if err := s.encodeAndWrite(ctx, []uint32{xid}, []Message{&BundleControl{BundleID: id, Type: typ, Flags: bundleFlags}}); err != nil {
		s.unregister(xid)
		return err
	}
	return s.wait(ctx, xid, w)
}

// bundleFailure turns a failed OPEN or CLOSE into a BundleError, after a
// best-effort DISCARD if the connection is still up.
func (c *Client) bundleFailure(s *session, id uint32, phase string, err error) error {
	be := &BundleError{Phase: phase, Err: err, Discarded: true}
	if !errors.Is(err, ErrConnectionLost) {
		c.abandon(s, id)
	}
	return be
}

// abandon discards, in the background, a bundle that will not be
// committed, so that the caller's error returns at once.
func (c *Client) abandon(s *session, id uint32) {
	if s.isDead() {
		return // the switch dropped the bundle with the connection
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
		defer cancel()
		_ = c.finish(ctx, s, id, c.nextXid(), BundleDiscardRequest)
	}()
}
