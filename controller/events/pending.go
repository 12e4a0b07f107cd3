package events

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// MaxDistinctWarnings bounds the pending Warnings of one object with
	// distinct messages. Past it, a new Warning is folded into the pending
	// Warning of its reason: the Event then says the reason, the newest
	// message and how many occurred. Only an object whose Events cannot be
	// written for a long time (API server unreachable) while its problem
	// keeps changing reaches it; more keeps more messages of such an object
	// at the cost of memory.
	MaxDistinctWarnings = 16
	// MaxWrittenPerObject bounds the Events of one object remembered after
	// they were written, so that a repeat raises their count instead of
	// creating another Event. An object whose messages keep changing (a
	// host lost to one node, then to another) loses the oldest record: a
	// repeat of that one is then a new Event, not a higher count.
	MaxWrittenPerObject = 16
	// EventTTL is how long a written Event is remembered: the API server's
	// default --event-ttl, after which it deletes the Event, so a count
	// patch would find nothing. A cluster with a shorter TTL costs a failed
	// patch before the create; a longer one, Events created anew where a
	// count could have been raised.
	EventTTL = time.Hour
)

// objectKey names an involved object. The UID tells apart an object from
// one of the same name created after it was deleted.
type objectKey struct {
	kind, namespace, name string
	uid                   types.UID
}

func keyOf(ref *corev1.ObjectReference) objectKey {
	return objectKey{kind: ref.Kind, namespace: ref.Namespace, name: ref.Name, uid: ref.UID}
}

// eventKey identifies an Event of an object, as the API's count does:
// occurrences with the same key are one Event with a count.
type eventKey struct {
	eventType, reason, message string
}

// occurrence is one Event not yet written: one emission, or several
// identical ones folded into its count.
type occurrence struct {
	eventKey
	annotations map[string]string
	count       int32
	first, last time.Time
	// seq orders occurrences by their first emission; they are written in
	// that order.
	seq uint64
}

// merge folds src, an occurrence of the same object, into o: the counts
// add up, the first and last timestamps span both, and the newer one's
// message and annotations stay (they differ only when a Warning is folded
// into another of its reason).
func (o *occurrence) merge(src *occurrence) {
	o.count += src.count
	if src.seq < o.seq {
		o.seq, o.first = src.seq, src.first
	}
	if src.last.After(o.last) {
		o.last = src.last
		o.message, o.annotations = src.message, src.annotations
	}
}

// written is an Event on the API server that this Emitter wrote.
type written struct {
	name  string
	count int32
	first time.Time
	// at is when it was last written: the API server's TTL runs from then.
	at time.Time
}

// object is what is known of one involved object: its Events still to
// write and the ones written.
type object struct {
	ref corev1.ObjectReference
	// normal is the latest Normal Event not yet written, if any.
	normal *occurrence
	// warnings are the Warnings not yet written, distinct by key, ordered by
	// seq.
	warnings []*occurrence
	written  map[eventKey]*written
	// busy: a worker is writing one of its occurrences (taken from normal or
	// warnings), so the object's state must stay; inflight is that
	// occurrence's count.
	busy     bool
	inflight int32
}

// add records a new emission (or puts back one whose write failed). It
// returns the occurrence that no longer needs writing because a newer
// Normal replaced it, or nil.
func (o *object) add(occ *occurrence) (superseded *occurrence) {
	if occ.eventType != corev1.EventTypeWarning {
		switch {
		case o.normal == nil:
			o.normal = occ
		case o.normal.eventKey == occ.eventKey:
			o.normal.merge(occ)
		case o.normal.seq < occ.seq:
			superseded, o.normal = o.normal, occ
		default: // occ was taken before the pending Normal was emitted
			superseded = occ
		}
		return superseded
	}
	if i := slices.IndexFunc(o.warnings, func(w *occurrence) bool { return w.eventKey == occ.eventKey }); i >= 0 {
		o.merge(i, occ)
		return nil
	}
	if len(o.warnings) >= MaxDistinctWarnings {
		// Fold into the newest pending Warning of the same reason.
		for i, w := range slices.Backward(o.warnings) {
			if w.reason == occ.reason {
				o.merge(i, occ)
				return nil
			}
		}
	}
	i, _ := slices.BinarySearchFunc(o.warnings, occ.seq, func(w *occurrence, seq uint64) int { return cmpUint(w.seq, seq) })
	o.warnings = slices.Insert(o.warnings, i, occ)
	return nil
}

// merge folds occ into the pending Warning i and keeps the order by seq.
func (o *object) merge(i int, occ *occurrence) {
	w := o.warnings[i]
	w.merge(occ)
	slices.SortStableFunc(o.warnings, func(a, b *occurrence) int { return cmpUint(a.seq, b.seq) })
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// take detaches the oldest pending occurrence, to be written; nil if none.
func (o *object) take() *occurrence {
	var occ *occurrence
	if len(o.warnings) > 0 {
		occ = o.warnings[0]
	}
	if o.normal != nil && (occ == nil || o.normal.seq < occ.seq) {
		occ, o.normal = o.normal, nil
		return occ
	}
	if occ != nil {
		o.warnings = o.warnings[1:]
		if len(o.warnings) == 0 {
			o.warnings = nil
		}
	}
	return occ
}

// pending is how many occurrences (emissions) wait to be written, or are
// being written.
func (o *object) pending() int {
	n := int(o.inflight)
	if o.normal != nil {
		n += int(o.normal.count)
	}
	for _, w := range o.warnings {
		n += int(w.count)
	}
	return n
}

// previous is the written Event that occurrences of key add to, if any.
func (o *object) previous(key eventKey) *written {
	w := o.written[key]
	if w == nil {
		return nil
	}
	cp := *w
	return &cp
}

// wrote records that the Event of key is on the API server as w, and
// forgets the oldest record past MaxWrittenPerObject.
func (o *object) wrote(key eventKey, w written) {
	if o.written == nil {
		o.written = map[eventKey]*written{}
	}
	o.written[key] = &w
	for len(o.written) > MaxWrittenPerObject {
		var oldest eventKey
		var at time.Time
		for k, w := range o.written {
			if at.IsZero() || w.at.Before(at) {
				oldest, at = k, w.at
			}
		}
		delete(o.written, oldest)
	}
}

// expire forgets the written Events the API server has deleted by now.
func (o *object) expire(now time.Time) {
	for k, w := range o.written {
		if now.Sub(w.at) >= EventTTL {
			delete(o.written, k)
		}
	}
}

// idle says whether the object's state can go: nothing to write, nothing
// being written, no record.
func (o *object) idle() bool {
	return o.normal == nil && len(o.warnings) == 0 && len(o.written) == 0 && !o.busy
}
