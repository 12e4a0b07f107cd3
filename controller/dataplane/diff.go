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
}

// Empty reports whether there is nothing to send.
func (c *Changes) Empty() bool { return len(c.Add)+len(c.Delete) == 0 }

// Installed indexes egressflow's flows on the bridge by the service hash of
// their cookie (0: the shared flows) and by FlowID. It keeps only what a
// diff needs, a cookie and a digest of the instructions per flow.
type Installed struct {
	groups  map[uint32]map[string]flowState
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

// NewInstalled indexes the flows dumped from the bridge, keeping only
// egressflow's (see AddDumped).
func NewInstalled(flows []*openflow.Flow) *Installed {
	in := &Installed{groups: map[uint32]map[string]flowState{}}
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
		in.add(f.Table, f.Priority, &f.Match, f.Cookie, f.Instructions)
	}
}

// InstalledOf indexes flows known to be on the bridge because they were
// sent and acknowledged: the agent diffs a changed service against its
// flows as last applied, re-rendered, instead of keeping an index of every
// flow of the node.
func InstalledOf(flows []*openflow.FlowMod) *Installed {
	in := &Installed{groups: map[uint32]map[string]flowState{}}
	for _, fm := range flows {
		in.add(fm.Table, fm.Priority, &fm.Match, fm.Cookie, fm.Instructions)
	}
	return in
}

// add indexes one flow.
func (in *Installed) add(table uint8, priority uint16, m *openflow.Match, cookie uint64, insts []openflow.Instruction) {
	in.scratch = appendFlowID(in.scratch[:0], table, priority, m)
	g := in.groups[cookieGroup(cookie)]
	if g == nil {
		g = map[string]flowState{}
		in.groups[cookieGroup(cookie)] = g
	} else if _, ok := g[string(in.scratch)]; ok {
		return // a repeat, as DiffGroup treats it: the first one stands
	}
	id := string(in.scratch)
	g[id], in.scratch = stateOf(in.scratch[:0], cookie, insts)
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
	wanted := make(map[string]bool, len(desired))
	var scratch []byte
	for _, fm := range desired {
		scratch = appendFlowID(scratch[:0], fm.Table, fm.Priority, &fm.Match)
		if wanted[string(scratch)] {
			continue // a repeat within the group: the first one stands
		}
		id := string(scratch)
		wanted[id] = true
		var st flowState
		st, scratch = stateOf(scratch[:0], fm.Cookie, fm.Instructions)
		if old, ok := have[id]; ok && old == st {
			continue
		}
		c.Add = append(c.Add, fm)
	}
	var gone []string
	for id := range have {
		if !wanted[id] {
			gone = append(gone, id)
		}
	}
	// Map order is random; a stable order makes bundles reproducible.
	slices.Sort(gone)
	for _, id := range gone {
		table, priority, match := parseFlowID(id)
		st := have[id]
		c.Delete = append(c.Delete, &openflow.FlowMod{
			Command: openflow.FlowDeleteStrict, Table: table, Priority: priority, Match: match,
			Cookie: st.cookie, CookieMask: ^uint64(0),
		})
	}
}

// cookieGroup is the service hash a cookie carries.
func cookieGroup(cookie uint64) uint32 { return uint32(cookie >> 8) }

// stateOf digests a flow's cookie and instructions, using scratch for the
// wire form and returning it for reuse.
func stateOf(scratch []byte, cookie uint64, insts []openflow.Instruction) (flowState, []byte) {
	scratch, _ = openflow.AppendInstructions(scratch, insts) // ours encode
	h := uint64(fnvOffset64)
	for _, c := range scratch {
		h = (h ^ uint64(c)) * fnvPrime64
	}
	return flowState{cookie: cookie, actions: h}, scratch
}

// FNV-1a, 64 bits (hash/fnv's constants; inlined to keep the per-flow
// digest free of allocations).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// parseFlowID is the inverse of FlowID. The match was marshalled by this
// package, so it parses.
func parseFlowID(id string) (table uint8, priority uint16, m openflow.Match) {
	b := []byte(id)
	if err := m.UnmarshalBinary(b[3:]); err != nil {
		panic("dataplane: unparseable FlowID: " + err.Error())
	}
	return b[0], uint16(b[1])<<8 | uint16(b[2]), m
}
