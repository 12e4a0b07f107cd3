package dataplane

import (
	"fmt"
	"maps"
	"slices"

	"github.com/egressflow/egressflow/openflow"
)

// Changes turn the flows on the bridge into the desired ones. Sent as one
// atomic bundle, they move only what differs: a flow already right is not
// touched, so its counters and the traffic through it are undisturbed.
type Changes struct {
	// Add holds new flows and flows whose cookie or actions changed (an ADD
	// with the same table, priority and match replaces the old flow).
	Add []*openflow.FlowMod
	// Delete holds strict deletes of egressflow's flows that are no longer
	// desired, each restricted to the cookie it had, so a foreign flow with
	// the same match is never removed, nor a flow that moved to another
	// service's group (same match, new cookie), whichever is sent first.
	Delete []*openflow.FlowMod
	// Stale holds flows no longer desired that were indexed from a dump,
	// by FlowID hash, with their cookie: such an index keeps no matches, so
	// their deletes are built from a second dump (DeleteStale).
	Stale map[uint64]uint64
	// AddGroups holds the groups to add or modify (GroupAdd, GroupModify),
	// sent before any flow: a flow may only name a group that exists.
	// DeleteGroups holds those to delete, sent after every flow: deleting
	// a group deletes the flows that use it.
	AddGroups, DeleteGroups []*openflow.GroupMod

	// Reused by every DiffFlows and DeleteRest.
	scratch []byte
	wanted  map[uint64]bool
	gone    []uint64
}

// Empty reports whether there is nothing to send.
func (c *Changes) Empty() bool {
	return len(c.Add)+len(c.Delete)+len(c.Stale)+len(c.AddGroups)+len(c.DeleteGroups) == 0
}

// DeleteStale returns the strict delete of a dumped flow if it is one of
// Stale, which it then forgets; otherwise nil. Fed a second dump of the
// bridge, it turns Stale into deletes without ever holding the dump. Only
// a stale flow's match is decoded, which fails only if the switch sent a
// malformed one.
func (c *Changes) DeleteStale(e openflow.FlowEntry) (*openflow.FlowMod, error) {
	if len(c.Stale) == 0 {
		return nil, nil
	}
	id := entryHash(e)
	if cookie, ok := c.Stale[id]; !ok || cookie != e.Cookie() {
		return nil, nil
	}
	m, _, err := openflow.ParseMatch(e.Match())
	if err != nil {
		return nil, fmt.Errorf("stale flow with cookie %#x: %w", e.Cookie(), err)
	}
	delete(c.Stale, id)
	return strictDelete(e.Table(), e.Priority(), m, e.Cookie()), nil
}

func strictDelete(table uint8, priority uint16, m openflow.Match, cookie uint64) *openflow.FlowMod {
	return &openflow.FlowMod{
		Command: openflow.FlowDeleteStrict, Table: table, Priority: priority, Match: m,
		Cookie: cookie, CookieMask: ^uint64(0),
	}
}

// Installed indexes egressflow's flows on the bridge by a 64-bit hash of
// their FlowID: a switch holds one flow per FlowID, so the hash names the
// flow. It keeps only what a diff needs, a cookie and a digest of the
// instructions per flow, in a map without pointers that the garbage
// collector never scans: some 32 bytes a flow, 7 MB for the 200,000 flows
// a restart indexes. Two of 200,000 FlowIDs share a hash with odds of about
// one in 10^9; those two would pass for one flow.
//
// A diff takes out of the index every flow it finds desired, so what
// remains once every desired flow was diffed is what must go (DeleteRest).
type Installed struct {
	flows map[uint64]flowState
	// sent holds the flows InstalledOf was given, which a delete is built
	// from; a dump's flows are not kept.
	sent map[uint64]*openflow.FlowMod
	// groups are egressflow's groups on the bridge, by ID (AddGroups).
	groups  map[uint32]*openflow.GroupMod
	scratch []byte
}

// flowState is what Installed remembers of one flow.
type flowState struct {
	cookie uint64
	// actions is an FNV-64a digest of the instructions' wire form. OVS
	// returns egressflow's instructions byte for byte as they were sent
	// (openflow's TestClientFlowsRoundTrip checks it on a real switch, the
	// agent's restart test counts zero flow mods), so equal digests mean
	// equal flows; were OVS to re-encode one, that flow would merely be
	// re-added on each full sync.
	actions uint64
}

// NewInstalled indexes flows dumped from the bridge, keeping only
// egressflow's (see AddDumped).
func NewInstalled(dump []openflow.FlowEntry) *Installed {
	in := &Installed{flows: map[uint64]flowState{}}
	for _, e := range dump {
		in.AddDumped(e)
	}
	return in
}

// AddDumped indexes one flow dumped from the bridge if it is egressflow's
// (by cookie prefix): the rest belong to someone else. It digests the
// entry's bytes in place and keeps nothing of it, so a dump is indexed as
// it arrives without being decoded.
func (in *Installed) AddDumped(e openflow.FlowEntry) {
	if e.Cookie()&CookiePrefixMask == CookiePrefix {
		in.flows[entryHash(e)] = flowState{cookie: e.Cookie(), actions: fnv64(fnvOffset64, e.Instructions())}
	}
}

// AddGroups records the groups read from the bridge that are egressflow's
// (by ID: GroupIDPrefix); the rest belong to someone else.
func (in *Installed) AddGroups(groups []openflow.GroupDesc) {
	if in.groups == nil {
		in.groups = map[uint32]*openflow.GroupMod{}
	}
	for i := range groups {
		if g := &groups[i]; g.GroupID&GroupIDMask == GroupIDPrefix {
			in.groups[g.GroupID] = g.GroupMod()
		}
	}
}

// GroupDeletes returns the deletes of egressflow's groups among groups (by
// ID: GroupIDPrefix), in the order of their IDs.
func GroupDeletes(groups []openflow.GroupDesc) []*openflow.GroupMod {
	var in Installed
	in.AddGroups(groups)
	var c Changes
	c.diffOpenFlowGroups(nil, in.groups) // deletes only: nothing to encode
	return c.DeleteGroups
}

// InstalledOf indexes flows known to be on the bridge because they were
// sent and acknowledged: the agent diffs a changed service against its
// flows as last applied, re-rendered, instead of keeping an index of every
// flow of the node.
func InstalledOf(flows []*openflow.FlowMod) *Installed {
	in := &Installed{flows: make(map[uint64]flowState, len(flows)), sent: make(map[uint64]*openflow.FlowMod, len(flows))}
	for _, fm := range flows {
		var id uint64
		var st flowState
		id, in.scratch = flowHash(in.scratch, fm.Table, fm.Priority, &fm.Match)
		if _, repeat := in.flows[id]; repeat {
			continue // as the switch would hold it: the first one stands
		}
		st, in.scratch = stateOf(in.scratch, fm.Cookie, fm.Instructions)
		in.flows[id], in.sent[id] = st, fm
	}
	return in
}

// Len returns how many flows are indexed.
func (in *Installed) Len() int { return len(in.flows) }

// Diff compares every desired flow with every installed one. It leaves
// installed as it was.
func Diff(desired []*openflow.FlowMod, installed *Installed) Changes {
	rest := &Installed{flows: maps.Clone(installed.flows), sent: installed.sent}
	var c Changes
	c.DiffFlows(desired, rest)
	c.DeleteRest(rest)
	return c
}

// DiffFlows adds to c the desired flows the bridge lacks or holds
// otherwise, and takes every desired flow out of installed: what remains
// there once every desired flow was diffed is what must go (DeleteRest).
// The desired flows may come in parts, in any number of calls (the agent
// diffs group by group); a FlowID repeated within one call counts once,
// the first one standing.
func (c *Changes) DiffFlows(desired []*openflow.FlowMod, installed *Installed) {
	if c.wanted == nil {
		c.wanted = map[uint64]bool{}
	}
	wanted := c.wanted
	clear(wanted)
	for _, fm := range desired {
		var id uint64
		id, c.scratch = flowHash(c.scratch, fm.Table, fm.Priority, &fm.Match)
		if wanted[id] {
			continue
		}
		wanted[id] = true
		var st flowState
		st, c.scratch = stateOf(c.scratch, fm.Cookie, fm.Instructions)
		old, ok := installed.flows[id]
		delete(installed.flows, id)
		// A flow found under another cookie (it moved to this service's
		// group) is replaced by the add, which sets the new cookie.
		if ok && old == st {
			continue
		}
		c.Add = append(c.Add, fm)
	}
}

// DeleteRest turns the flows left in installed after DiffFlows, those no
// longer desired, into strict deletes if installed holds them as sent, or
// else into Stale; installed is empty afterwards.
func (c *Changes) DeleteRest(installed *Installed) {
	gone := c.gone[:0]
	for id := range installed.flows {
		gone = append(gone, id)
	}
	// Map order is random; a stable order makes bundles reproducible.
	slices.Sort(gone)
	c.gone = gone
	for _, id := range gone {
		st := installed.flows[id]
		if f := installed.sent[id]; f != nil {
			c.Delete = append(c.Delete, strictDelete(f.Table, f.Priority, f.Match, st.cookie))
			continue
		}
		if c.Stale == nil {
			c.Stale = map[uint64]uint64{}
		}
		c.Stale[id] = st.cookie
	}
	clear(installed.flows)
}

// stateOf digests a flow's cookie and instructions, using scratch for the
// wire form and returning it for reuse.
func stateOf(scratch []byte, cookie uint64, insts []openflow.Instruction) (flowState, []byte) {
	scratch, _ = openflow.AppendInstructions(scratch[:0], insts) // ours encode
	return flowState{cookie: cookie, actions: fnv64(fnvOffset64, scratch)}, scratch
}

// FNV-1a, 64 bits (hash/fnv's constants; inlined to keep the per-flow
// digest free of allocations).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// flowHash is the FNV-64a hash of a flow's FlowID, using scratch for the
// match's wire form and returning it for reuse.
func flowHash(scratch []byte, table uint8, priority uint16, m *openflow.Match) (uint64, []byte) {
	scratch, _ = m.AppendBinary(scratch[:0]) // only unencodable values fail; ours encode
	return idHash(table, priority, scratch), scratch
}

// entryHash is flowHash of a dumped flow, read in place: the switch holds
// egressflow's matches in the wire form it was sent them in (openflow's
// TestClientFlowsRoundTrip checks it on a real switch).
func entryHash(e openflow.FlowEntry) uint64 { return idHash(e.Table(), e.Priority(), e.Match()) }

// idHash hashes the bytes of a FlowID (appendFlowID) without gathering
// them.
func idHash(table uint8, priority uint16, match []byte) uint64 {
	prefix := flowIDPrefix(table, priority)
	return fnv64(fnv64(fnvOffset64, prefix[:]), match)
}

// fnv64 continues the FNV-1a hash h over b.
func fnv64(h uint64, b []byte) uint64 {
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime64
	}
	return h
}
