package agent

import (
	"context"
	"fmt"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
)

// Bundle is an atomic transaction on the bridge that a sync's flow mods
// are added to in parts (ofconn.Transaction).
type Bundle interface {
	// Add sends msgs as the bundle's next messages and keeps no reference
	// to them. An error ends the bundle: nothing of it will apply.
	Add(ctx context.Context, msgs openflow.Sequence) error
	// Commit applies every message added, or none of them.
	Commit(ctx context.Context) error
	// Discard drops the bundle.
	Discard()
}

// bundlePartBytes is how many bytes of encoded flow mods a sync gathers
// before it sends them to the bridge as one part of its bundle. Smaller
// parts hold less memory during a full sync and let the switch check
// flows while the next groups are diffed; larger ones mean fewer writes.
// At 1 MiB, about 8,000 flow mods, a full sync of 200,000 flows takes some
// 25 parts and holds one of them at a time.
const bundlePartBytes = 1 << 20

// bundleStream sends a sync's changes to the bridge as the diff produces
// them, group by group, as one atomic bundle: the bundle is opened with the
// first part, so a sync that changes nothing sends nothing.
//
// Within a group the deletes go first. Across groups the order does not
// matter: every delete is restricted to the cookie the flow had, so a flow
// that moved to another group (same match, new cookie) and was re-added
// there first is not deleted by its old group's delete.
type bundleStream struct {
	sw      Switch
	bundle  Bundle // nil until the first part is sent
	pending openflow.Batch
	sent    int // messages sent in parts so far
}

// add encodes c's changes and empties c: the groups added or modified,
// then the flows deleted, the flows added, and the groups deleted, so that
// a flow never names a group the bundle has not made yet (the Ledger sends
// group deletes only after every flow). It sends them once a part's worth
// has gathered.
func (s *bundleStream) add(ctx context.Context, c *dataplane.Changes) error {
	if err := addAll(&s.pending, c.AddGroups); err != nil {
		return err
	}
	for _, mods := range [][]*openflow.FlowMod{c.Delete, c.Add} {
		if err := addAll(&s.pending, mods); err != nil {
			return err
		}
	}
	if err := addAll(&s.pending, c.DeleteGroups); err != nil {
		return err
	}
	empty(&c.Delete, &c.Add)
	empty(&c.AddGroups, &c.DeleteGroups)
	if s.pending.Size() >= bundlePartBytes {
		return s.flush(ctx)
	}
	return nil
}

// addAll encodes msgs into b.
func addAll[M interface {
	openflow.Message
	fmt.Stringer
}](b *openflow.Batch, msgs []M) error {
	for _, m := range msgs {
		if err := b.Add(m); err != nil {
			return fmt.Errorf("encode %s: %w", m, err)
		}
	}
	return nil
}

// empty empties lists, keeping their room and no reference.
func empty[T any](lists ...*[]T) {
	for _, l := range lists {
		clear(*l)
		*l = (*l)[:0]
	}
}

// flush sends what has gathered as the bundle's next part.
func (s *bundleStream) flush(ctx context.Context) error {
	if s.pending.Len() == 0 {
		return nil
	}
	if s.bundle == nil {
		b, err := s.sw.BeginBundle(ctx)
		if err != nil {
			return err
		}
		s.bundle = b
	}
	err := s.bundle.Add(ctx, &s.pending)
	s.sent += s.pending.Len()
	s.pending.Reset()
	return err
}

// commit sends the last part and commits the bundle, if anything was
// sent.
func (s *bundleStream) commit(ctx context.Context) error {
	if err := s.flush(ctx); err != nil {
		return err
	}
	if s.bundle == nil {
		return nil
	}
	return s.bundle.Commit(ctx)
}

// opened reports whether a bundle was begun: whether the bridge may have
// been touched, were its commit's outcome unknown.
func (s *bundleStream) opened() bool { return s.bundle != nil }

// discard drops the bundle, if one was begun.
func (s *bundleStream) discard() {
	if s.bundle != nil {
		s.bundle.Discard()
	}
}

// applyOnce sends c to sw as one atomic bundle, committed, or discarded on
// failure, and returns how many messages it sent: for the changes that are
// whole at once (the cold guard, the uninstall), not streamed by a sync.
func applyOnce(ctx context.Context, sw Switch, c *dataplane.Changes) (int, error) {
	stream := bundleStream{sw: sw}
	err := stream.add(ctx, c)
	if err == nil {
		err = stream.commit(ctx)
	}
	if err != nil {
		stream.discard()
	}
	return stream.sent, err
}
