package dataplane

import (
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// Member is one API of the egress family as a node's Planner keeps it: it
// takes its objects one at a time, keeps their parts current, and says
// which keys each change touched. The Planner's Part, Problems, Keys and
// UpdateObject loop over the members, and the Ledger diffs whatever Part
// they give, so an API that registers a Member (RegisterMember) is
// planned, rendered, diffed and applied with no other change.
//
// A member's parts are checked against a whole-cluster specification
// written apart (as Compute is for the built-in members), through random
// histories of its objects.
type Member interface {
	// API is the member's: the keys of its objects are ObjectKey(API(),
	// namespace, name), the cookies of its flows carry its kinds.
	API() API
	// Update takes the object of key, nil when it is gone, and returns
	// the keys whose part or problems may have changed: key itself, and
	// any other the change moved. The object is of the member's own type:
	// as its informer holds it, or the inputs gathered for it
	// (EgressService's ServiceInputs).
	Update(key string, obj any) []string
	// Part returns key's part; false (and a nil Part) when the node does
	// nothing for it.
	Part(key string) (Part, bool)
	// Problems returns why key is not programmed as asked, if it is not.
	Problems(key string) []Problem
	// Keys yields the key of every object the member was given.
	Keys() iter.Seq[string]
}

// PodReader is a member whose parts read this node's pods (a pod
// selector, a pod named in its objects): the Planner gives it the local
// pods whenever they change.
type PodReader interface {
	Member
	// SetLocalPods takes the pods bound to this node by namespace, each
	// namespace's sorted by name, and the namespaces whose pods changed (a
	// pod added, gone, or replaced by a newer version), and returns the
	// keys whose part or problems may have changed. It must not modify
	// pods.
	SetLocalPods(pods map[string][]*corev1.Pod, changed []string) []string
}

// FenceFollower is a member whose parts change when the node is fenced
// (NodeConfig.Fenced): the Planner tells it, and takes the keys it
// returns as changed.
type FenceFollower interface {
	Member
	SetFenced(fenced bool) []string
}

// members are a Planner's members, in the order of their APIs.
type members struct {
	list []Member
	// byPrefix holds each member but EgressService's by its keys' prefix
	// (its API's name and a slash, ObjectKey).
	byPrefix map[string]Member
	// egressService is the member whose keys have no prefix.
	egressService Member
}

// register adds m; an API registered twice is an error.
func (ms *members) register(m Member) error {
	if slices.ContainsFunc(ms.list, func(o Member) bool { return o.API() == m.API() }) {
		return fmt.Errorf("the API %s already has a member", m.API())
	}
	if m.API() == APIEgressService {
		ms.egressService = m
	} else {
		if ms.byPrefix == nil {
			ms.byPrefix = map[string]Member{}
		}
		ms.byPrefix[m.API().String()+"/"] = m
	}
	ms.list = append(ms.list, m)
	slices.SortFunc(ms.list, func(a, b Member) int { return int(a.API()) - int(b.API()) })
	return nil
}

// of returns the member whose key key is; nil if none is registered.
func (ms *members) of(key string) Member {
	if prefix, _, ok := strings.Cut(key, "/"); ok {
		if m := ms.byPrefix[prefix+"/"]; m != nil {
			return m
		}
	}
	return ms.egressService
}

// RegisterMember adds a member of the family to the Planner, beside the
// built-in ones (EgressService, EgressIP, EgressQoS, EgressFirewall,
// AdminPolicyBasedExternalRoute).
func (p *Planner) RegisterMember(m Member) error { return p.members.register(m) }

// MemberOf returns the member whose object key is; nil when no member
// has its API.
func (p *Planner) MemberOf(key string) Member { return p.members.of(key) }

// UpdateObject takes the object of key (nil when it is gone) and gives it
// to the key's member, returning the keys whose part or problems may have
// changed (Member.Update).
func (p *Planner) UpdateObject(key string, obj any) []string {
	m := p.members.of(key)
	if m == nil {
		return nil
	}
	return m.Update(key, obj)
}

// Part returns key's part of the node's dataplane, of whichever member;
// false, and a nil Part, when the node does nothing for it.
func (p *Planner) Part(key string) (Part, bool) {
	if m := p.members.of(key); m != nil {
		return m.Part(key)
	}
	return nil, false
}

// Problems returns why key, of whichever member, is not programmed as
// asked, if it is not.
func (p *Planner) Problems(key string) []Problem {
	if m := p.members.of(key); m != nil {
		return m.Problems(key)
	}
	return nil
}

// Keys returns the key of every object every member was given, sorted.
func (p *Planner) Keys() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for _, m := range p.members.list {
			for k := range m.Keys() {
				if !yield(k) {
					return
				}
			}
		}
	})
}

// Announced returns every address this node answers for on its segment,
// of every member's parts (Announcer), sorted.
func (p *Planner) Announced() []netip.Addr {
	var out []netip.Addr
	for _, m := range p.members.list {
		for k := range m.Keys() {
			if part, ok := m.Part(k); ok {
				if a, ok := part.(Announcer); ok {
					out = append(out, a.Announced()...)
				}
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// The built-in members, over the Planner's indexes.
type (
	serviceMember  struct{ p *Planner }
	egressIPMember struct{ p *Planner }
	qosMember      struct{ p *Planner }
	firewallMember struct{ p *Planner }
)

// asPart is a typed part as a Part: nil when there is none, never a
// typed zero in the interface.
func asPart[P Part](part P, ok bool) (Part, bool) {
	if !ok {
		return nil, false
	}
	return part, true
}

// builtInMembers are the members every Planner has.
func builtInMembers(p *Planner) []Member {
	return []Member{serviceMember{p}, egressIPMember{p}, qosMember{p}, firewallMember{p}, p.externalRoute}
}

func (serviceMember) API() API { return APIEgressService }

// Update takes key's ServiceInputs (Planner.Update).
func (m serviceMember) Update(key string, obj any) []string {
	in, _ := obj.(ServiceInputs)
	return m.p.Update(key, in)
}

func (m serviceMember) Part(key string) (Part, bool) {
	if pl := m.p.services[key]; pl != nil && pl.inState() {
		return pl.part, true
	}
	return nil, false
}

func (m serviceMember) Problems(key string) []Problem {
	if pl := m.p.services[key]; pl != nil {
		return pl.problems
	}
	return nil
}

func (m serviceMember) Keys() iter.Seq[string] { return maps.Keys(m.p.services) }

func (egressIPMember) API() API { return APIEgressIP }

// Update takes key's EgressIP (*esv1.EgressIP; nil when it is gone), and
// returns the keys whose part changed since the last TakeEgressIPChanges.
func (m egressIPMember) Update(key string, obj any) []string {
	eip, _ := obj.(*esv1.EgressIP)
	m.p.updateEgressIP(key, eip)
	return m.p.TakeEgressIPChanges()
}

func (m egressIPMember) Part(key string) (Part, bool) { return asPart(m.p.EgressIP(key)) }

func (m egressIPMember) Problems(key string) []Problem { return m.p.egressIPProblems(key) }

func (m egressIPMember) Keys() iter.Seq[string] { return maps.Keys(m.p.egressIP.byKey) }

func (qosMember) API() API { return APIEgressQoS }

// Update takes key's EgressQoS (*esv1.EgressQoS; Planner.UpdateQoS).
func (m qosMember) Update(key string, obj any) []string {
	q, _ := obj.(*esv1.EgressQoS)
	return m.p.UpdateQoS(key, q)
}

func (m qosMember) Part(key string) (Part, bool) { return asPart(m.p.QoS(key)) }

func (m qosMember) Problems(key string) []Problem {
	if pl := m.p.qos[key]; pl != nil {
		return pl.problems
	}
	return nil
}

func (m qosMember) Keys() iter.Seq[string] { return maps.Keys(m.p.qos) }

func (firewallMember) API() API { return APIEgressFirewall }

// Update takes key's EgressFirewall (*esv1.EgressFirewall;
// Planner.UpdateFirewall).
func (m firewallMember) Update(key string, obj any) []string {
	fw, _ := obj.(*esv1.EgressFirewall)
	return m.p.UpdateFirewall(key, fw)
}

func (m firewallMember) Part(key string) (Part, bool) { return asPart(m.p.Firewall(key)) }

func (m firewallMember) Problems(key string) []Problem {
	if pl := m.p.firewalls[key]; pl != nil {
		return pl.problems
	}
	return nil
}

func (m firewallMember) Keys() iter.Seq[string] { return maps.Keys(m.p.firewalls) }
