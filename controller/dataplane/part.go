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

// Part is one API object's part of the node's dataplane: what the Ledger
// diffs, commits and flushes by the object's key, whatever its API. Every
// member of the family has one kind of part (Service, EgressIPPart,
// FirewallNamespace, QoSNamespace); what else a part does, it says by
// implementing the optional interfaces below.
type Part interface {
	// AppendFlows renders the part into b for ports and appends its flows
	// to dst. Every flow carries the cookie of the part's key.
	AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, ports Ports) []*openflow.FlowMod
	// FlowRole is what its flows are counted under (DiffOutput.Count).
	FlowRole() Role
}

// Translator is a part whose flows SNAT (an EgressService's on its host,
// an EgressIP's): once its flows change or go, the translations they no
// longer make are flushed from conntrack (Ledger.StaleSources).
type Translator interface {
	Part
	// AddTranslations adds the SNAT the part's flows make to out.
	AddTranslations(out conntrack.Translations)
}

// Redirector is a part whose flows redirect connections to reserved
// addresses (an EgressRouter's on its holder): once it stops serving an
// address, the connections redirected through it are flushed from
// conntrack (Ledger.StaleRedirects), so that none carries the redirect on
// a node that no longer serves it, nor back into it should the address
// return.
type Redirector interface {
	Part
	// Redirected are the addresses whose connections the part redirects.
	Redirected() []netip.Addr
}

// Announcer is a part that answers for addresses on the node's segment
// (an EgressIP's held addresses, an EgressRouter's reserved ones): the
// node announces each when it takes it over (Planner.Announced).
type Announcer interface {
	Part
	Announced() []netip.Addr
}

// Grouper is a part whose flows use OpenFlow groups (ECMP next hops, say).
// The Ledger diffs its groups as it diffs flows, in the same bundle: a
// group is added or modified before any flow that uses it, and deleted
// after every flow that used it.
type Grouper interface {
	Part
	// AppendGroups appends the part's groups, each as the GroupMod that
	// adds it, to dst. Their IDs are within GroupIDPrefix, and no two
	// parts share one: the member that plans the part gives the IDs out.
	// Each bucket is stated as the switch describes it back (its ID, a
	// select bucket's weight): a group the bridge describes otherwise is
	// modified again on every full sync.
	AppendGroups(dst []*openflow.GroupMod, ports Ports) []*openflow.GroupMod
}

// GroupIDPrefix marks the OpenFlow groups egressflow owns on the bridge:
// every ID g with g&GroupIDMask == GroupIDPrefix. The rest of the group
// table is other controllers', and never touched. Its 24 free bits give
// 16 million IDs, well below OFPG_MAX.
const (
	GroupIDPrefix uint32 = 0xef000000
	GroupIDMask   uint32 = 0xff000000
)

// GroupID returns the ID of group id of API a's parts: each member gives
// the IDs of its parts' groups out within its own 2^20 (the API in the
// four bits above them, as in cookies), so that two members never want
// one. Only id's low 20 bits count.
func (a API) GroupID(id uint32) uint32 {
	return GroupIDPrefix | uint32(a&0xf)<<20 | id&groupIDsPerAPI
}

// groupIDsPerAPI masks the IDs an API gives out (API.GroupID).
const groupIDsPerAPI = 1<<20 - 1

// FlowRole is the service's role: its flows are counted under it.
func (s Service) FlowRole() Role { return s.Role }

// AppendFlows renders the service into b (FlowBuffer.AppendService).
func (s Service) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, ports Ports) []*openflow.FlowMod {
	return b.AppendService(dst, s, ports)
}

// openFlowGroupsOf puts in into the OpenFlow groups of the parts that
// part returns for keys (nil: none), by ID; an ID two keys want is an
// error: the plan gave it twice.
func openFlowGroupsOf(into map[uint32]*openflow.GroupMod, keys func(func(string) bool), part func(string) Part, ports Ports) error {
	owner := map[uint32]string{}
	var scratch []*openflow.GroupMod
	for k := range keys {
		g, ok := part(k).(Grouper)
		if !ok {
			continue
		}
		scratch = g.AppendGroups(scratch[:0], ports)
		for _, gm := range scratch {
			if gm.GroupID&GroupIDMask != GroupIDPrefix {
				return fmt.Errorf("%s wants group %#x, outside egressflow's (%#x/%#x)", k, gm.GroupID, GroupIDPrefix, GroupIDMask)
			}
			if o, taken := owner[gm.GroupID]; taken && o != k {
				return fmt.Errorf("group %#x is wanted by both %s and %s", gm.GroupID, min(o, k), max(o, k))
			}
			owner[gm.GroupID] = k
			into[gm.GroupID] = gm
		}
	}
	return nil
}

// diffOpenFlowGroups fills c.AddGroups with the groups of want that has
// lacks or holds otherwise (an add or a modify), and c.DeleteGroups with
// those of has that want lacks, in the order of their IDs.
func (c *Changes) diffOpenFlowGroups(want, has map[uint32]*openflow.GroupMod) error {
	for _, id := range slices.Sorted(maps.Keys(want)) {
		gm := want[id]
		old, ok := has[id]
		if ok {
			same, err := sameGroup(gm, old)
			if err != nil {
				return err
			}
			if same {
				continue
			}
		}
		mod := *gm
		mod.Command = openflow.GroupAdd
		if ok {
			mod.Command = openflow.GroupModify
		}
		c.AddGroups = append(c.AddGroups, &mod)
	}
	for _, id := range slices.Sorted(maps.Keys(has)) {
		if _, ok := want[id]; !ok {
			c.DeleteGroups = append(c.DeleteGroups, &openflow.GroupMod{Command: openflow.GroupDelete, GroupID: id})
		}
	}
	return nil
}

// sameGroup reports whether two groups say the same: type, buckets and
// properties, byte for byte on the wire.
func sameGroup(a, b *openflow.GroupMod) (bool, error) {
	ea, err := groupBytes(a)
	if err != nil {
		return false, err
	}
	eb, err := groupBytes(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ea, eb), nil
}

// groupBytes is g's wire form as the GroupMod that adds it.
func groupBytes(g *openflow.GroupMod) ([]byte, error) {
	add := *g
	add.Command, add.CommandBucketID = openflow.GroupAdd, 0
	b, err := add.AppendBody(nil, 0)
	if err != nil {
		return nil, fmt.Errorf("encode group %#x: %w", g.GroupID, err)
	}
	return b, nil
}
