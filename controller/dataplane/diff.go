package dataplane

import (
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

	scratch []byte
}

// Empty reports whether there is nothing to send.
func (c *Changes) Empty() bool { return len(c.Add)+len(c.Delete)+len(c.Stale) == 0 }

// DeleteStale returns the strict delete of a dumped flow if it is one of
// Stale, which it then forgets; otherwise nil. Fed a second dump of the
// bridge, it turns Stale into deletes without ever holding the dump.
func (c *Changes) DeleteStale(f *openflow.Flow) *openflow.FlowMod {
	if len(c.Stale) == 0 {
		return nil
	}
	var id uint64
	id, c.scratch = flowHash(c.scratch, f.Table, f.Priority, &f.Match)
	if cookie, ok := c.Stale[id]; !ok || cookie != f.Cookie {
		return nil
	}
	delete(c.Stale, id)
	return strictDelete(f.Table, f.Priority, f.Match, f.Cookie)
}

func strictDelete(table uint8, priority uint16, m openflow.Match, cookie uint64) *openflow.FlowMod {
	return &openflow.FlowMod{
		Command: openflow.FlowDeleteStrict, Table: table, Priority: priority, Match: m,
		Cookie: cookie, CookieMask: ^uint64(0),
	}
}

// Installed indexes egressflow's flows on the bridge by the service hash of
// their cookie (0: the shared flows) and by a 64-bit hash of their FlowID.
// It keeps only what a diff needs, a cookie and a digest of the
// instructions per flow (and, for flows it was given as sent, the flow, to
// delete it by): about 30 bytes a flow, so a restart indexes 200,000 flows
// in some 6 MB. Two FlowIDs of one group with equal hashes would pass for
// one flow; at tens of flows a group, that takes luck of about one in 10^17.
type Installed struct {
	groups  map[uint32]map[uint64]installedFlow
	scratch []byte
}

// installedFlow is what Installed remembers of one flow.
type installedFlow struct {
	state flowState
	// sent is the flow as sent (InstalledOf), which a delete is built from;
	// nil for a flow read from a dump, whose match is not kept.
	sent *openflow.FlowMod
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

// NewInstalled indexes the flows dumped from the bridge, keeping only
// egressflow's (see AddDumped).
func NewInstalled(flows []*openflow.Flow) *Installed {
	in := &Installed{groups: map[uint32]map[uint64]installedFlow{}}
	for _, f := range flows {
		in.AddDumped(f)
	}
	return in
}

// AddDumped indexes one flow dumped from the bridge if it is egressflow's
// (by cookie prefix): the rest belong to someone else. It keeps nothing of
// f, so a dump can be indexed as it arrives.
func (in *Installed) AddDumped(f *openflow.Flow) {
	if f.Cookie&CookiePrefixMask == CookiePrefix {
		in.add(f.Table, f.Priority, &f.Match, f.Cookie, f.Instructions, nil)
	}
}

// InstalledOf indexes flows known to be on the bridge because they were
// sent and acknowledged: the agent diffs a changed service against its
// flows as last applied, re-rendered, instead of keeping an index of every
// flow of the node.
func InstalledOf(flows []*openflow.FlowMod) *Installed {
	in := &Installed{groups: map[uint32]map[uint64]installedFlow{}}
	for _, fm := range flows {
		in.add(fm.Table, fm.Priority, &fm.Match, fm.Cookie, fm.Instructions, fm)
	}
	return in
}

// add indexes one flow.
func (in *Installed) add(table uint8, priority uint16, m *openflow.Match, cookie uint64, insts []openflow.Instruction, sent *openflow.FlowMod) {
	var id uint64
	id, in.scratch = flowHash(in.scratch, table, priority, m)
	g := in.groups[cookieGroup(cookie)]
	if g == nil {
		g = map[uint64]installedFlow{}
		in.groups[cookieGroup(cookie)] = g
	} else if _, ok := g[id]; ok {
		return // a repeat, as DiffGroup treats it: the first one stands
	}
	f := installedFlow{sent: sent}
	f.state, in.scratch = stateOf(in.scratch[:0], cookie, insts)
	g[id] = f
}

// Len returns how many flows are indexed.
func (in *Installed) Len() int {
	n := 0
	for _, g := range in.groups {
		n += len(g)
	}
	return n
}

// Groups returns the service hashes that have flows.
func (in *Installed) Groups() []uint32 { return slices.Sorted(maps.Keys(in.groups)) }

// Diff compares every desired flow with every installed one.
func Diff(desired []*openflow.FlowMod, installed *Installed) Changes {
	byGroup := map[uint32][]*openflow.FlowMod{}
	for _, fm := range desired {
		g := cookieGroup(fm.Cookie)
		byGroup[g] = append(byGroup[g], fm)
	}
	var c Changes
	for _, g := range installed.Groups() {
		if _, ok := byGroup[g]; !ok {
			c.DiffGroup(g, nil, installed)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		c.DiffGroup(g, byGroup[g], installed)
	}
	return c
}

// DiffGroup adds to c what turns the installed flows of one service hash
// group (see ServiceHash; 0 for the shared flows) into desired, the whole
// of that group's desired flows. Other groups are not looked at, so a sync
// that changed one service costs that service's flows only.
func (c *Changes) DiffGroup(group uint32, desired []*openflow.FlowMod, installed *Installed) {
	have := installed.groups[group]
	wanted := make(map[uint64]bool, len(desired))
	for _, fm := range desired {
		var id uint64
		id, c.scratch = flowHash(c.scratch, fm.Table, fm.Priority, &fm.Match)
		if wanted[id] {
			continue // a repeat within the group: the first one stands
		}
		wanted[id] = true
		var st flowState
		st, c.scratch = stateOf(c.scratch[:0], fm.Cookie, fm.Instructions)
		if old, ok := have[id]; ok && old.state == st {
			continue
		}
		c.Add = append(c.Add, fm)
	}
	var gone []uint64
	for id := range have {
		if !wanted[id] {
			gone = append(gone, id)
		}
	}
	// Map order is random; a stable order makes bundles reproducible.
	slices.Sort(gone)
	for _, id := range gone {
		f := have[id]
		if f.sent == nil {
			if c.Stale == nil {
				c.Stale = map[uint64]uint64{}
			}
			c.Stale[id] = f.state.cookie
			continue
		}
		c.Delete = append(c.Delete, strictDelete(f.sent.Table, f.sent.Priority, f.sent.Match, f.state.cookie))
	}
}

// cookieGroup is the service hash a cookie carries.
func cookieGroup(cookie uint64) uint32 { return uint32(cookie >> 8) }

// stateOf digests a flow's cookie and instructions, using scratch for the
// wire form and returning it for reuse.
func stateOf(scratch []byte, cookie uint64, insts []openflow.Instruction) (flowState, []byte) {
	scratch, _ = openflow.AppendInstructions(scratch, insts) // ours encode
	return flowState{cookie: cookie, actions: fnv64(scratch)}, scratch
}

// FNV-1a, 64 bits (hash/fnv's constants; inlined to keep the per-flow
// digest free of allocations).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// flowHash is the FNV-64a hash of a flow's FlowID, using scratch for its
// bytes and returning it for reuse.
func flowHash(scratch []byte, table uint8, priority uint16, m *openflow.Match) (uint64, []byte) {
	scratch = appendFlowID(scratch[:0], table, priority, m)
	return fnv64(scratch), scratch
}

func fnv64(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime64
	}
	return h
}
