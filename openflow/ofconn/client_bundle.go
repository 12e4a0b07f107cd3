package ofconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/egressflow/egressflow/openflow"
)

// TransactionFlags are the bundle flags of every message of a transaction: Open vSwitch
// requires identical flags on OPEN, every ADD, CLOSE and COMMIT.
const TransactionFlags = openflow.BundleAtomic | openflow.BundleOrdered

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
func (c *Client) Bundle(ctx context.Context, msgs ...openflow.Message) error {
	return c.BundleSequence(ctx, openflow.List[openflow.Message](msgs))
}

// BundleSequence is Bundle for messages held in a Sequence, such as a
// Batch encoded in advance; a *MessageError's Index counts in msgs and its
// Message is msgs.At(Index).
func (c *Client) BundleSequence(ctx context.Context, msgs openflow.Sequence) error {
	if msgs.Len() == 0 {
		return nil
	}
	t, err := c.BeginBundle(ctx)
	if err != nil {
		return err
	}
	if err = t.Add(ctx, msgs); err == nil {
		err = t.Commit(ctx)
	}
	// Name the refused messages as the caller holds them rather than as
	// the switch echoed them.
	var be *BundleError
	if errors.As(err, &be) {
		for _, f := range be.Failed {
			if f.Index < msgs.Len() {
				f.Message = msgs.At(f.Index)
			}
		}
	}
	return err
}

// Transaction is an atomic bundle built on the switch in parts: each Add
// sends its messages at once, and the switch holds them until Commit
// applies them all or none. A caller that computes a large change in
// pieces (a full sync of hundreds of thousands of flows) sends each piece
// as it is ready, so the whole change is never held in memory, and its
// computing overlaps with the switch's checking.
//
// Open vSwitch discards a bundle left idle for long (its
// bundle-idle-timeout, 10 s by default): Add the parts without long pauses.
// A Transaction is not safe for concurrent use.
type Transaction struct {
	c      *Client
	s      *session
	id     uint32
	open   uint32  // OPEN's xid
	opened *waiter // OPEN's reply
	// parts holds each Add's xid range with the index of its first message
	// in the transaction; adjacent Adds share a part.
	parts []transactionPart
	errs  *errorSink // what the switch refused, by xid
	added int
	// over is set once the transaction committed, failed or was
	// discarded: Add and Commit return it from then on.
	over error
}

type transactionPart struct {
	xids  *xidRange
	first int // index of the part's first message
}

// errTransactionDone is what a finished Transaction's calls return.
var errTransactionDone = errors.New("openflow: the bundle transaction is over (committed or discarded)")

// BeginBundle opens an atomic, ordered bundle transaction on the switch.
// It does not wait for the switch's answer: a refused OPEN fails Commit.
func (c *Client) BeginBundle(ctx context.Context) (*Transaction, error) {
	s, err := c.session()
	if err != nil {
		return nil, &BundleError{Phase: "open", Err: err, Discarded: true}
	}
	t := &Transaction{c: c, s: s, id: c.bundleID.Add(1), open: c.nextXid(), errs: &errorSink{}}
	t.opened = s.register(t.open, false)
	if err := s.encodeAndWrite(ctx, []uint32{t.open}, []openflow.Message{t.control(openflow.BundleOpenRequest)}); err != nil {
		s.unregister(t.open)
		return nil, &BundleError{Phase: "open", Err: err, Discarded: true}
	}
	return t, nil
}

func (t *Transaction) control(typ openflow.BundleControlType) *openflow.BundleControl {
	return &openflow.BundleControl{BundleID: t.id, Type: typ, Flags: TransactionFlags}
}

// Len returns how many messages were added so far.
func (t *Transaction) Len() int { return t.added }

// Add sends msgs as the transaction's next messages; it returns once they
// are written, without waiting for the switch, and keeps no reference to
// msgs. A *MessageError's Index counts from the transaction's first
// message.
//
// An error ends the transaction (the switch discards the bundle): the
// connection failed, a message does not encode, or the switch has already
// refused a message added before.
func (t *Transaction) Add(ctx context.Context, msgs openflow.Sequence) error {
	if t.over != nil {
		return t.over
	}
	n := msgs.Len()
	if n == 0 {
		return nil
	}
	first := t.c.reserveXids(n)
	if last := len(t.parts) - 1; last >= 0 && t.s.extendRange(t.parts[last].xids, first, n) {
		// No other call took an xid since the last Add: one range.
	} else {
		r := &xidRange{first: first, n: uint32(n), errs: t.errs}
		t.s.addRange(r)
		t.parts = append(t.parts, transactionPart{xids: r, first: t.added})
	}
	add := openflow.BundleAdd{BundleID: t.id, Flags: TransactionFlags}
	base := t.added
	_, err := t.s.writeBatched(ctx, first, n, func(b []byte, xid uint32, i int) ([]byte, error) {
		add.Message = msgs.At(i)
		out, err := openflow.AppendMessage(b, xid, &add)
		if err != nil {
			return b, fmt.Errorf("cannot encode message %d (%s): %w", base+i, openflow.Describe(add.Message), err)
		}
		return out, nil
	})
	if err != nil {
		return t.end(&BundleError{Phase: "write", Err: err, Discarded: true})
	}
	t.added += n
	if t.errs.any() {
		return t.end(&BundleError{Phase: "add", Failed: t.failed(), Discarded: true})
	}
	return nil
}

// Commit closes the bundle, waits until the switch has checked every
// message, and commits it if it refused none; otherwise it discards it and
// returns a *BundleError naming every refused message and why.
func (t *Transaction) Commit(ctx context.Context) error {
	if t.over != nil {
		return t.over
	}
	s := t.s
	closeX := t.c.nextXid()
	wClose := s.register(closeX, false)
	if err := s.encodeAndWrite(ctx, []uint32{closeX}, []openflow.Message{t.control(openflow.BundleCloseRequest)}); err != nil {
		s.unregister(closeX)
		return t.end(&BundleError{Phase: "write", Err: err, Discarded: true})
	}
	if err := s.wait(ctx, t.open, t.opened); err != nil {
		s.unregister(closeX)
		return t.end(&BundleError{Phase: "open", Err: err, Discarded: true})
	}
	if err := s.wait(ctx, closeX, wClose); err != nil {
		return t.end(&BundleError{Phase: "close", Err: err, Discarded: true})
	}
	defer t.release()
	t.over = errTransactionDone
	// Every add error arrived before the CLOSE reply.
	if t.errs.any() {
		t.c.finish(ctx, s, t.id, t.c.nextXid(), openflow.BundleDiscardRequest)
		return &BundleError{Phase: "add", Failed: t.failed(), Discarded: true}
	}
	if err := t.c.finish(ctx, s, t.id, t.c.nextXid(), openflow.BundleCommitRequest); err != nil {
		// Open vSwitch reports the message that failed at commit under
		// its own xid, before the COMMIT error.
		be := &BundleError{Phase: "commit", Err: err, Failed: t.failed()}
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

// Discard abandons the transaction: the switch drops the bundle (a
// DISCARD is sent in the background). It does nothing once the
// transaction is over.
func (t *Transaction) Discard() {
	if t.over == nil {
		t.end(errTransactionDone)
	}
}

// end finishes a transaction that will not commit and returns err, which
// its calls return from then on.
func (t *Transaction) end(err error) error {
	t.over = err
	t.s.unregister(t.open)
	t.release()
	if !errors.Is(err, ErrConnectionLost) {
		t.c.abandon(t.s, t.id)
	}
	return err
}

// release stops collecting errors for the transaction's messages.
func (t *Transaction) release() {
	for _, p := range t.parts {
		t.s.removeRange(p.xids)
	}
	t.parts = nil
}

// failed lists the refused messages in order. As the transaction keeps
// none of its messages, each is decoded from the switch's error, which
// echoes it (Open vSwitch echoes it whole).
func (t *Transaction) failed() []*MessageError {
	return t.errs.refused(func(xid uint32, e *openflow.Error) *MessageError {
		for _, p := range t.parts {
			if p.xids.contains(xid) {
				return &MessageError{Index: p.first + int(xid-p.xids.first), Message: echoed(e), Err: e}
			}
		}
		return nil
	})
}

// echoed returns the message a bundle add error echoes, or nil.
func echoed(e *openflow.Error) openflow.Message {
	if _, m, err := openflow.UnmarshalMessage(e.Data); err == nil {
		if add, ok := m.(*openflow.BundleAdd); ok {
			return add.Message
		}
	}
	return nil
}

// finish sends COMMIT or DISCARD and waits for its reply.
func (c *Client) finish(ctx context.Context, s *session, id, xid uint32, typ openflow.BundleControlType) error {
	if typ == openflow.BundleDiscardRequest {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
		defer cancel()
	}
	w := s.register(xid, false)
	if err := s.encodeAndWrite(ctx, []uint32{xid}, []openflow.Message{&openflow.BundleControl{BundleID: id, Type: typ, Flags: TransactionFlags}}); err != nil {
		s.unregister(xid)
		return err
	}
	return s.wait(ctx, xid, w)
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
		_ = c.finish(ctx, s, id, c.nextXid(), openflow.BundleDiscardRequest)
	}()
}
