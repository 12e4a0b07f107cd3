package openflow

// Sequence is a list of messages by index, as Client.BundleSequence sends
// them: a List, a *Batch, or several joined by Join.
type Sequence interface {
	Len() int
	// At returns message i, 0 <= i < Len().
	At(i int) Message
}

// List is a Sequence of messages held as themselves: List[Message] for any
// messages, List[*FlowMod] for a slice of flow mods as it is.
type List[M Message] []M

func (l List[M]) Len() int         { return len(l) }
func (l List[M]) At(i int) Message { return l[i] }

// Join returns the messages of seqs one after the other.
func Join(seqs ...Sequence) Sequence {
	j := joined{}
	for _, s := range seqs {
		if s != nil && s.Len() > 0 {
			j.parts = append(j.parts, s)
			j.n += s.Len()
		}
	}
	return j
}

type joined struct {
	parts []Sequence
	n     int
}

func (j joined) Len() int { return j.n }

func (j joined) At(i int) Message {
	for _, p := range j.parts {
		if i < p.Len() {
			return p.At(i)
		}
		i -= p.Len()
	}
	panic("openflow: Sequence index out of range")
}

// Batch holds messages encoded once, back to back in large buffers, until
// they are sent (as a Sequence, in a bundle). It is the compact way to hold
// a large transaction: a flow mod takes its wire size, about a hundred
// bytes, plus eight, several times less than the *FlowMod it came from.
// The buffers are fixed-size chunks that are filled, never grown by
// copying, so a 200,000-flow batch costs its bytes and not twice as much
// while it grows, and it is a few large allocations rather than one object
// per message. The zero Batch is empty and ready to use.
type Batch struct {
	chunks  [][]byte
	spans   []batchSpan
	scratch []byte // the message being encoded
	size    int
}

// batchChunk is the size of a Batch's buffers: large enough that a chunk
// holds thousands of flow mods and the chunk list stays short, small enough
// that the unused tail of the last one is negligible.
const batchChunk = 1 << 20

// batchSpan is where message i lies: in chunks[chunk][start:start+length].
type batchSpan struct {
	chunk  uint32
	start  uint32
	length uint16
	typ    MessageType
}

// Add encodes m's body and appends it. Messages whose body depends on
// their transaction id (BundleAdd) cannot be encoded in advance.
func (b *Batch) Add(m Message) error {
	if _, ok := m.(*BundleAdd); ok {
		return encodeErr("message", "a BundleAdd's body depends on its xid")
	}
	body, err := m.AppendBody(b.scratch[:0], 0)
	if err != nil {
		return err
	}
	b.scratch = body
	if len(body) > 0xffff-HeaderLen {
		return encodeErr("message", "body of %d bytes does not fit a message", len(body))
	}
	last := len(b.chunks) - 1
	if last < 0 || cap(b.chunks[last])-len(b.chunks[last]) < len(body) {
		b.chunks = append(b.chunks, make([]byte, 0, batchChunk))
		last++
	}
	start := len(b.chunks[last])
	b.chunks[last] = append(b.chunks[last], body...)
	b.spans = append(b.spans, batchSpan{chunk: uint32(last), start: uint32(start), length: uint16(len(body)), typ: m.MsgType()})
	b.size += len(body)
	return nil
}

// Len returns how many messages the batch holds.
func (b *Batch) Len() int { return len(b.spans) }

// At returns message i as a *RawMessage whose Body shares the batch's
// buffer: it sends the same bytes as the message added, and Decode turns it
// back into that message. It must not be modified.
func (b *Batch) At(i int) Message {
	sp := b.spans[i]
	end := sp.start + uint32(sp.length)
	return &RawMessage{Type: sp.typ, Body: b.chunks[sp.chunk][sp.start:end:end]}
}

// Reset empties the batch for reuse, keeping its first buffer: a batch
// filled and sent over and over allocates once.
func (b *Batch) Reset() {
	if len(b.chunks) > 0 {
		clear(b.chunks[1:])
		b.chunks = b.chunks[:1]
		b.chunks[0] = b.chunks[0][:0]
	}
	b.spans = b.spans[:0]
	b.size = 0
}

// Size returns the bytes the batch's message bodies take.
func (b *Batch) Size() int { return b.size }
