package dataplane

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/openflow"
)

// Desired is the desired state a Ledger diffs the bridge against: the
// Planner's.
type Desired interface {
	// Part returns the part of the object of key, of whichever API;
	// false (and a nil Part) when the node does nothing for it.
	Part(key string) (Part, bool)
	// Keys returns the key of every object there is, of every API.
	Keys() []string
	// Shared returns what the shared flows depend on.
	Shared() Shared
}

// Ledger is the node agent's account of what egressflow holds on the
// bridge: which objects' flows (and groups) are there as rendered from
// which part, the shared flows as sent, the bridge's ports they name, and
// the objects whose part changed since their flows were last committed and
// their stale conntrack translations flushed. It diffs every API's parts
// alike (Part), by their object's key. It is the seam between the desired
// state and the apply step (as Antrea keeps one between its flow cache and
// its bridge client): Diff says what to send, the agent sends it as one
// atomic bundle, and only once the bundle committed does Commit make it
// the ledger's; a bundle that fails leaves the ledger as it was, so the
// next Diff sends the same again.
//
// It keeps no flow, only each object's part (a few addresses): a changed
// object is diffed against its flows as last committed, re-rendered, so no
// index of the node's hundreds of thousands of flows is held between syncs.
//
// A Ledger is pure: it does no I/O, and is not safe for concurrent use.
type Ledger struct {
	// known: the bridge holds, of egressflow's flows, exactly those of
	// onBridge and sharedOnBridge, as the last committed bundle left it.
	// False: unknown (first sync, reconnection, a bundle whose outcome is
	// unknown), so the next Diff needs the bridge as read.
	known bool
	// ports are the bridge's facts the committed flows name.
	ports Ports
	// unapplied holds the keys whose desired part may differ from what the
	// node holds: changed, and not yet converged (flows committed and
	// stale translations flushed).
	unapplied map[string]bool
	// onBridge is each object's part as its flows on the bridge render it.
	onBridge map[string]Part
	// sharedOnBridge are the shared flows as last committed.
	sharedOnBridge []*openflow.FlowMod
	// unflushed holds the part of each unapplied object that translates
	// or redirects (a Translator, a Redirector) as it was before its flows
	// last changed, until its stale connections are flushed.
	unflushed map[string]Part
	// byGroup holds the keys that have a desired part, by the service hash
	// of their flows' cookies.
	byGroup groupKeys
}

// NewLedger returns the ledger of a bridge whose content is unknown.
func NewLedger() *Ledger {
	return &Ledger{
		unapplied: map[string]bool{},
		onBridge:  map[string]Part{},
		unflushed: map[string]Part{},
		byGroup:   groupKeys{},
	}
}

// Changed records that the desired parts of keys may have changed (the
// keys a Planner update returns); desired is the state after the change.
func (l *Ledger) Changed(desired Desired, keys []string) {
	for _, k := range keys {
		l.unapplied[k] = true
		group := ServiceHash(k)
		if _, ok := desired.Part(k); ok {
			l.byGroup.add(group, k)
		} else {
			l.byGroup.remove(group, k)
		}
	}
}

// Forget records that what the bridge holds is unknown: the connection to
// it was lost, or a bundle's outcome is unknown. The next Diff needs the
// bridge as read.
func (l *Ledger) Forget() { l.known = false }

// NeedsRead reports whether the next Diff with ports needs the bridge as
// read: what it holds is unknown, its uplink moved (every SNAT, steer
// and reply flow names it), or its MAC changed (EgressIP's responders
// answer with it).
func (l *Ledger) NeedsRead(ports Ports) bool {
	return !l.known || ports.Uplink != l.ports.Uplink || !bytes.Equal(ports.BridgeMAC, l.ports.BridgeMAC)
}

// DiffOutput receives what Ledger.Diff finds, as it goes.
type DiffOutput struct {
	// Send takes the changes found so far and empties them: the agent
	// encodes them into its bundle group by group, so that a full sync
	// never holds every new flow at once.
	Send func(*Changes) error
	// Dump calls fn with each of egressflow's flows on the bridge
	// (Switch.DumpFlows), for a Diff against the bridge as read: the
	// flows no longer desired are deleted as this second dump finds them
	// (Changes.DeleteStale), since the index of the first keeps no match.
	Dump func(fn func(openflow.FlowEntry) error) error
	// Count, if not nil, is told how many flows each object that Diff
	// renders wants, with the role they were rendered for; that a key
	// diffed has no part any more (role "", 0 flows); and how many shared
	// flows there are (key "").
	Count func(key string, role Role, flows int)
}

func (o DiffOutput) count(key string, role Role, flows int) {
	if o.Count != nil {
		o.Count(key, role, flows)
	}
}

// Diffed is what one Diff found, to Commit once the bridge took it.
type Diffed struct {
	desired Desired
	ports   Ports
	// unapplied is the ledger's unapplied set (Diff only reads it); after
	// a read of the bridge, others holds every other object there is or
	// was. Both are the objects diffed.
	unapplied, others map[string]bool
	shared            []*openflow.FlowMod
}

// keys yields the objects diffed.
func (d Diffed) keys(yield func(string) bool) {
	for _, set := range []map[string]bool{d.unapplied, d.others} {
		for k := range set {
			if !yield(k) {
				return
			}
		}
	}
}

// Diff finds what turns the bridge into desired, rendered for ports: the
// flows of every unapplied object, and the shared flows. With bridge nil,
// each is diffed against its flows as committed; with the bridge as read
// (NeedsRead; Diff takes its flows out of it), every object is, and what
// is left of the bridge once every one was diffed goes. It sends the
// changes to out as it finds them, group by group, in a stable order.
//
// It changes nothing in the ledger: what it found becomes the ledger's only
// when Commit is given it, once the bridge has taken every change. desired
// must not change until then.
func (l *Ledger) Diff(desired Desired, ports Ports, bridge *Installed, out DiffOutput) (Diffed, error) {
	d := Diffed{desired: desired, ports: ports, unapplied: l.unapplied}
	if bridge != nil {
		d.others = l.appliedKeys(desired)
	}
	changed := map[uint32][]string{} // the keys diffed, by group
	for k := range d.keys {
		g := ServiceHash(k)
		changed[g] = append(changed[g], k)
	}
	var changes Changes
	// The groups go first, before any flow that may use them, but for
	// their deletes, which go last.
	openFlowGroupDeletes, err := l.diffOpenFlowGroups(&changes, d, bridge)
	if err != nil {
		return Diffed{}, err
	}
	if len(changes.AddGroups) > 0 {
		if err := out.Send(&changes); err != nil {
			return Diffed{}, err
		}
	}
	// diffGroup diffs a group's flows against the bridge as read (what is
	// left of it once every group is diffed must go), or else against the
	// group's flows as committed (what is left of those goes now).
	diffGroup := func(want, sent []*openflow.FlowMod) {
		if bridge != nil {
			changes.DiffFlows(want, bridge)
			return
		}
		installed := InstalledOf(sent)
		changes.DiffFlows(want, installed)
		changes.DeleteRest(installed)
	}
	// Each group is rendered into these, diffed, and its changes encoded
	// before the next group reuses them.
	var wantBuf, sentBuf FlowBuffer
	var want, sent []*openflow.FlowMod
	// In a stable order, so that the same sync sends the same bundle.
	for _, g := range slices.Sorted(maps.Keys(changed)) {
		if g == 0 {
			continue
		}
		// Every key with flows in the group, desired or committed: a key
		// whose flows were committed but that has no part any more is
		// among those diffed.
		keys := slices.Clone(l.byGroup[g])
		for _, k := range changed[g] {
			if !slices.Contains(l.byGroup[g], k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		wantBuf.Reset()
		sentBuf.Reset()
		want, sent = want[:0], sent[:0]
		for _, k := range keys {
			if part, ok := desired.Part(k); ok {
				n := len(want)
				want = part.AppendFlows(&wantBuf, want, ports)
				out.count(k, part.FlowRole(), len(want)-n)
			}
			if part, ok := l.onBridge[k]; ok && bridge == nil {
				sent = part.AppendFlows(&sentBuf, sent, ports)
			}
		}
		diffGroup(want, sent)
		// Encodes the group's changes: the buffers are free again.
		if err := out.Send(&changes); err != nil {
			return Diffed{}, err
		}
	}
	for k := range d.keys {
		if _, ok := desired.Part(k); !ok {
			out.count(k, "", 0)
		}
	}
	d.shared = SharedFlows(desired.Shared(), ports)
	out.count("", "", len(d.shared))
	diffGroup(d.shared, l.sharedOnBridge)
	if err := out.Send(&changes); err != nil {
		return Diffed{}, err
	}
	if bridge != nil {
		changes.DeleteRest(bridge) // flows of no object any more, to Stale
	}
	if err := deleteStale(&changes, out); err != nil {
		return Diffed{}, err
	}
	if len(openFlowGroupDeletes) > 0 {
		changes.DeleteGroups = openFlowGroupDeletes
		if err := out.Send(&changes); err != nil {
			return Diffed{}, err
		}
	}
	return d, nil
}

// diffOpenFlowGroups puts in changes the OpenFlow groups to add or modify
// for the parts of the keys diffed, and returns the deletes, to send after
// every flow: the groups of those keys' parts against the groups of their
// parts as committed, or, against the bridge as read, every desired group
// against egressflow's groups on the bridge. (The cookie groups Diff
// walks are another thing: the keys whose flows share a cookie hash.)
func (l *Ledger) diffOpenFlowGroups(changes *Changes, d Diffed, bridge *Installed) ([]*openflow.GroupMod, error) {
	want, had := map[uint32]*openflow.GroupMod{}, map[uint32]*openflow.GroupMod{}
	desired := func(k string) Part { part, _ := d.desired.Part(k); return part }
	if err := openFlowGroupsOf(want, d.keys, desired, d.ports); err != nil {
		return nil, err
	}
	if bridge != nil {
		had = bridge.groups
	} else if err := openFlowGroupsOf(had, d.keys, func(k string) Part { return l.onBridge[k] }, l.ports); err != nil {
		return nil, err
	}
	if err := changes.diffOpenFlowGroups(want, had); err != nil {
		return nil, err
	}
	deletes := changes.DeleteGroups
	changes.DeleteGroups = nil
	return deletes, nil
}

// appliedKeys are the keys, desired or on the bridge, that are not
// unapplied.
func (l *Ledger) appliedKeys(desired Desired) map[string]bool {
	applied := map[string]bool{}
	for _, k := range desired.Keys() {
		if !l.unapplied[k] {
			applied[k] = true
		}
	}
	for k := range l.onBridge {
		if !l.unapplied[k] {
			applied[k] = true
		}
	}
	return applied
}

// deleteStale sends the deletes of changes' stale flows. The index of a
// dump keeps no matches: the flows no longer desired are deleted as a
// second dump finds them.
func deleteStale(changes *Changes, out DiffOutput) error {
	if len(changes.Stale) == 0 {
		return nil
	}
	err := out.Dump(func(e openflow.FlowEntry) error {
		del, err := changes.DeleteStale(e)
		if del == nil || err != nil {
			return err
		}
		changes.Delete = append(changes.Delete, del)
		return out.Send(changes)
	})
	if err != nil {
		return fmt.Errorf("read the stale flows from the bridge: %w", err)
	}
	// Any left went from the bridge between the dumps: nothing to do.
	return nil
}

// Commit makes what Diff found the ledger's, once the bridge has taken
// every change it sent: the bridge now holds the desired flows of the
// objects diffed, and the shared ones. Those objects stay unapplied
// until their stale translations are flushed (Flushed).
func (l *Ledger) Commit(d Diffed) {
	l.known, l.ports, l.sharedOnBridge = true, d.ports, d.shared
	for k := range d.keys {
		if _, pending := l.unflushed[k]; !pending {
			switch old := l.onBridge[k].(type) {
			case Translator, Redirector:
				l.unflushed[k] = old
			}
		}
		if part, ok := d.desired.Part(k); ok {
			l.onBridge[k] = part
		} else {
			delete(l.onBridge, k)
		}
	}
	// The objects diffed are unapplied until flushed: the smaller set is
	// added to the larger (after a restart, the unapplied set is every
	// object; after a reconnection, the others are).
	into, from := d.unapplied, d.others
	if len(from) > len(into) {
		into, from = from, into
	}
	for k := range from {
		into[k] = true
	}
	l.unapplied = into
}

// StaleSources returns the endpoints whose conntrack translations (their
// SNAT to an LB IP or an egress IP) no committed flow makes any more:
// those each unapplied object's part made before its flows changed, that
// its part as committed does not. Only once no flow SNATs them any more
// (or SNATs them to another address) can their old translations go: a
// connection flushed before would be re-created with the old mapping.
// Sorted.
//
// Each object is compared as it was when its flows first changed after
// the last flush: a translation its flows made only in between (committed
// and changed again while the flush kept failing, or applied by a bundle
// whose reply was lost and changed before the next sync) is not flushed.
func (l *Ledger) StaleSources() []netip.Addr {
	before, after := conntrack.Translations{}, conntrack.Translations{}
	for _, part := range l.unflushed {
		if t, ok := part.(Translator); ok {
			t.AddTranslations(before)
		}
	}
	if len(before) == 0 {
		return nil // nothing is stale: a first sync has no past
	}
	for k := range l.unapplied {
		if part, ok := l.onBridge[k].(Translator); ok {
			part.AddTranslations(after)
		}
	}
	return conntrack.Stale(before, after)
}

// StaleRedirects returns the reserved addresses whose redirected
// connections no committed flow serves any more: those each unapplied
// object's part redirected before its flows changed, that no part on the
// bridge redirects now (a router that left the node, or was fenced, or
// lost an address). Only once no flow redirects them can their
// connections go, as for StaleSources. Sorted.
func (l *Ledger) StaleRedirects() []netip.Addr {
	gone := map[netip.Addr]bool{}
	for _, part := range l.unflushed {
		if r, ok := part.(Redirector); ok {
			for _, addr := range r.Redirected() {
				gone[addr] = true
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	// Another router on the node may serve an address now: rare (only
	// while a router leaves), so every part is looked at.
	for _, part := range l.onBridge {
		if r, ok := part.(Redirector); ok {
			for _, addr := range r.Redirected() {
				delete(gone, addr)
			}
		}
	}
	return slices.SortedFunc(maps.Keys(gone), netip.Addr.Compare)
}

// Flushed records that the stale translations are gone: every unapplied
// object has converged.
func (l *Ledger) Flushed() {
	// New maps rather than cleared ones: after a full sync these held
	// every object, and a cleared map keeps its room (and is walked over
	// all of it) for as long as the agent runs.
	l.unflushed = map[string]Part{}
	l.unapplied = map[string]bool{}
}

// groupKeys holds keys by the service hash of their flows' cookies, each
// group's sorted. Two keys share a group only when their hashes collide,
// so nearly every group is one key: a slice of them costs a tenth of a set.
type groupKeys map[uint32][]string

// add puts key in group, if it is not there yet.
func (g groupKeys) add(group uint32, key string) {
	if i, found := slices.BinarySearch(g[group], key); !found {
		g[group] = slices.Insert(g[group], i, key)
	}
}

// remove takes key out of group, and drops the group once it is empty.
func (g groupKeys) remove(group uint32, key string) {
	i, found := slices.BinarySearch(g[group], key)
	switch {
	case !found:
	case len(g[group]) == 1:
		delete(g, group)
	default:
		g[group] = slices.Delete(g[group], i, i+1)
	}
}
