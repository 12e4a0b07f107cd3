package dataplane

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/endpoints"
)

// The Planner's part for EgressFirewall: each namespace's TableFirewall
// part is recomputed (computeFirewallNamespace, as ComputeFirewall does)
// when one of its inputs changes: its object, its namespace's local pods,
// the nodes (only for an object with a nodeSelector rule) or the answers
// of its DNS names (only for the names it has). A namespace's part costs
// its rules' destinations, so one namespace's change costs that
// namespace's work, not the node's.

// plannedFirewall is one EgressFirewall's part (its namespace's
// TableFirewall).
type plannedFirewall struct {
	fw       *esv1.EgressFirewall
	ns       FirewallNamespace // with its Sources and ID
	problems []Problem
	// names are the esv1.DNSNameKey of its dnsName rules, sorted;
	// selectsNodes: it has a nodeSelector rule.
	names        []string
	selectsNodes bool
}

// firewallInputs are the Planner's inputs that only EgressFirewall reads.
type firewallInputs struct {
	// firewalls holds every EgressFirewall named default given, by key.
	firewalls map[string]*plannedFirewall
	// firewallByNamespace is the key of each namespace's EgressFirewall.
	firewallByNamespace map[string]string
	// nodes are the cluster's Nodes as last given (nodeSelector rules);
	// nodeView is what the rules read of them, to tell a change.
	nodes    []*corev1.Node
	nodeView []nodeView
	// resolved are the DNS names' addresses as last given (SetResolved).
	resolved map[string][]netip.Addr
	// firewallExempt are TableFirewall's exemptions (Firewall.Exempt).
	firewallExempt []netip.Prefix
	// unresolved is UnresolvedDNS's answer, recomputed only after a
	// firewall's part changed (unresolvedStale): a sync asks every time.
	unresolved      []UnresolvedDNSName
	unresolvedStale bool
	// readRules is the slice every object's rules are read into
	// (computeFirewallNamespace), empty between two readings.
	readRules []esv1.FirewallRule
}

// nodeView is what a nodeSelector rule reads of a Node.
type nodeView struct {
	name   string
	labels map[string]string
	addrs  []netip.Addr
}

func newFirewallInputs(node NodeConfig) firewallInputs {
	return firewallInputs{
		firewalls:           map[string]*plannedFirewall{},
		firewallByNamespace: map[string]string{},
		firewallExempt:      firewallExemptions(node),
	}
}

// UpdateFirewall takes the EgressFirewall of key (ObjectKey(
// APIEgressFirewall, namespace, name); nil when it is gone) and returns
// the keys of the EgressFirewall objects whose part or Problems may have
// changed: key, and those whose namespace ID moved. An object not named
// default counts as none, as in the reference.
func (p *Planner) UpdateFirewall(key string, fw *esv1.EgressFirewall) []string {
	if fw != nil && fw.Name != esv1.EgressFirewallName {
		fw = nil
	}
	old := p.firewalls[key]
	switch {
	case fw == nil && old == nil:
		return nil
	case fw == nil:
		delete(p.firewallByNamespace, old.fw.Namespace)
		delete(p.firewalls, key)
		p.unresolvedStale = true
		p.admittedStale = true
		return p.assignFirewallIDs([]string{key}, len(old.ns.Sources) > 0)
	case old == nil:
		p.firewalls[key] = &plannedFirewall{fw: fw}
		p.firewallByNamespace[fw.Namespace] = key
		p.admittedStale = true
	default:
		old.fw = fw
	}
	return p.replanFirewalls([]string{key})
}

// replanFirewalls recomputes the parts of keys from their objects and the
// Planner's inputs, and returns them with those whose ID moved.
func (p *Planner) replanFirewalls(keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	p.unresolvedStale = true
	membership := false // whether the namespaces with local pods changed
	for _, k := range keys {
		pl := p.firewalls[k]
		had := len(pl.ns.Sources) > 0
		id := pl.ns.ID
		pl.ns, pl.problems = computeFirewallNamespace(p.node, pl.fw, p.nodes, p.resolved, &p.readRules)
		var sources []netip.Addr
		for _, pod := range p.podsByNamespace[pl.fw.Namespace] {
			sources = append(sources, podAddresses(pod, p.node.ClusterPodCIDRs)...)
		}
		pl.ns.Sources = slices.Compact(slices.SortedFunc(slices.Values(sources), netip.Addr.Compare))
		pl.ns.ID = id
		membership = membership || had != (len(pl.ns.Sources) > 0)
		pl.names, pl.selectsNodes = nil, false
		for _, r := range pl.fw.Spec.Egress {
			switch {
			case r.To.DNSName != "":
				pl.names = append(pl.names, esv1.DNSNameKey(r.To.DNSName))
			case r.To.NodeSelector != nil:
				pl.selectsNodes = true
			}
		}
		slices.Sort(pl.names)
		pl.names = slices.Compact(pl.names)
	}
	return p.assignFirewallIDs(keys, membership)
}

// assignFirewallIDs gives the namespaces with local pods their IDs, as
// ComputeFirewall does (by key, each its hash or the next free value),
// when which namespaces have local pods changed, and returns changed with
// the keys whose ID moved.
func (p *Planner) assignFirewallIDs(changed []string, membership bool) []string {
	if !membership {
		return changed
	}
	taken := map[uint32]bool{0: true}
	for _, k := range slices.Sorted(maps.Keys(p.firewalls)) {
		pl := p.firewalls[k]
		id := uint32(0)
		if len(pl.ns.Sources) > 0 {
			id = takeID(taken, ServiceHash(k))
		}
		if id != pl.ns.ID {
			pl.ns.ID = id
			if !slices.Contains(changed, k) {
				changed = append(changed, k)
			}
		}
	}
	return changed
}

// setFirewallNodes takes the cluster's Nodes and returns the keys of the
// EgressFirewall objects with a nodeSelector rule, if what such rules read
// of the nodes (names, labels, addresses) changed.
func (p *Planner) setFirewallNodes(nodes []*corev1.Node) []string {
	p.nodes = nodes
	view := make([]nodeView, 0, len(nodes))
	for _, n := range nodes {
		view = append(view, nodeView{name: n.Name, labels: n.Labels, addrs: endpoints.NodeAddresses(n)})
	}
	slices.SortFunc(view, func(a, b nodeView) int { return strings.Compare(a.name, b.name) })
	if slices.EqualFunc(view, p.nodeView, func(a, b nodeView) bool {
		return a.name == b.name && maps.Equal(a.labels, b.labels) && slices.Equal(a.addrs, b.addrs)
	}) {
		return nil
	}
	p.nodeView = view
	var keys []string
	for k, pl := range p.firewalls {
		if pl.selectsNodes {
			keys = append(keys, k)
		}
	}
	return p.replanFirewalls(keys)
}

// SetResolved takes the addresses of the firewalls' DNS names, by
// esv1.DNSNameKey (a name absent has no answer yet), and returns the keys
// of the EgressFirewall objects with a name whose answer changed.
func (p *Planner) SetResolved(resolved map[string][]netip.Addr) []string {
	old := p.resolved
	p.resolved = resolved
	var keys []string
	for k, pl := range p.firewalls {
		for _, name := range pl.names {
			before, had := old[name]
			after, has := resolved[name]
			if had != has || !slices.Equal(before, after) {
				keys = append(keys, k)
				break
			}
		}
	}
	return p.replanFirewalls(keys)
}

// DNSNames returns the esv1.DNSNameKey of the dnsName rules of the
// EgressFirewall objects of namespaces with local pods, sorted: the names
// this node needs answers for.
func (p *Planner) DNSNames() []string {
	var out []string
	for _, pl := range p.firewalls {
		if len(pl.ns.Sources) > 0 {
			out = append(out, pl.names...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Firewall returns key's part of TableFirewall; false when the node does
// nothing for it (no such EgressFirewall, or no local pod in its
// namespace).
func (p *Planner) Firewall(key string) (FirewallNamespace, bool) {
	pl := p.firewalls[key]
	if pl == nil || len(pl.ns.Sources) == 0 {
		return FirewallNamespace{}, false
	}
	return pl.ns, true
}

// FirewallRules returns how many rules TableFirewall applies: of each
// EgressFirewall with local pods, the rules not skipped for a problem.
func (p *Planner) FirewallRules() int {
	n := 0
	for _, pl := range p.firewalls {
		if len(pl.ns.Sources) > 0 {
			n += len(pl.ns.Rules)
		}
	}
	return n
}

// FirewallState is State.Firewall, as ComputeFirewall returns it: what
// TableFirewall holds, and the agent's nftables table judges by
// (controller/hostfirewall).
func (p *Planner) FirewallState() Firewall {
	out := Firewall{Exempt: p.firewallExempt, Resolvers: p.firewallResolvers()}
	for _, k := range slices.Sorted(maps.Keys(p.firewalls)) {
		pl := p.firewalls[k]
		out.Problems = append(out.Problems, pl.problems...)
		if ns, ok := p.Firewall(k); ok {
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	return out
}

// firewallResolvers is Firewall.Resolvers: of the local pods of the
// resolvers' namespace, those NodeConfig.DNSResolvers selects, unless no
// namespace here snoops DNS replies.
func (p *Planner) firewallResolvers() []netip.Addr {
	var snooping []FirewallNamespace
	for _, pl := range p.firewalls {
		if pl.ns.SnoopDNS && len(pl.ns.Sources) > 0 {
			snooping = append(snooping, pl.ns)
		}
	}
	var resolvers []*corev1.Pod
	for _, pod := range p.podsByNamespace[p.node.DNSResolvers.Namespace] {
		if p.node.DNSResolvers.Selects(pod) {
			resolvers = append(resolvers, pod)
		}
	}
	return snoopedResolvers(p.node, resolvers, snooping)
}

// UnresolvedDNSName is an exact dnsName of a namespace's EgressFirewall
// that this node has no answer for (DNSNameUnresolved).
type UnresolvedDNSName struct {
	Namespace string
	// Name is the dnsName's esv1.DNSNameKey.
	Name string
}

// UnresolvedDNS returns the exact dnsNames (wildcards left out) of the
// EgressFirewall objects of namespaces with local pods that have no
// answer yet, sorted by namespace and name: what this node's pods of
// those namespaces cannot reach by name, or are not kept from, while
// it lasts. A wildcard is left out: it has no answer until a pod looks
// up one of its names (dnsresolve's "Wildcards"), which is no fault. A
// namespace without a local pod is left out too: this node resolves
// none of its names.
func (p *Planner) UnresolvedDNS() []UnresolvedDNSName {
	if !p.unresolvedStale {
		return p.unresolved
	}
	p.unresolvedStale = false
	var out []UnresolvedDNSName
	for _, pl := range p.firewalls {
		if len(pl.ns.Sources) == 0 {
			continue
		}
		for _, name := range pl.names {
			if _, ok := p.resolved[name]; !ok && !strings.HasPrefix(name, "*.") {
				out = append(out, UnresolvedDNSName{Namespace: pl.fw.Namespace, Name: name})
			}
		}
	}
	slices.SortFunc(out, func(a, b UnresolvedDNSName) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	p.unresolved = out
	return out
}
