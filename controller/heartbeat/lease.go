package heartbeat

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

const (
	// DefaultRenewInterval is how often an agent renews its Lease, as the
	// kubelet renews its node Lease: one API write per node per interval
	// (500 writes/s at 5,000 nodes), and one watch event per write to the
	// cluster component. Fast failover does not come from the Lease but
	// from the probe protocol; the Lease is the slow path (a node cut off
	// from the API server only, an agent whose probes no one answers) and
	// carries the facts. Shorter finds those sooner at a higher write rate.
	DefaultRenewInterval = 10 * time.Second
	// DefaultLeaseDuration is how long a renewal is valid, as kubelet's
	// node Lease (40 s): four renewal intervals, so that three lost or late
	// renewals (API server hiccups) do not declare a live node dead.
	DefaultLeaseDuration = 40 * time.Second
	// DefaultRestartGrace is how long the last renewal of an agent that
	// stops for a restart (its Pod deleted through the API: a rolling
	// update) is valid at least: long enough for its successor to start,
	// sync and renew (a few seconds with the image on the node), so that a
	// rollout moves no service. While it runs, the probe protocol's
	// observer does not judge the node (AnnotationRestarting); a successor
	// that never comes fails the node over when the renewal runs out. A
	// node that dies, or shuts down (the kubelet stops its pods without
	// deleting them), fails over by the probes, at once.
	DefaultRestartGrace = 20 * time.Second
)

const (
	// LeaseLabel marks agent Leases, so that readers watch only them (the
	// namespace also holds the controller's leader-election Lease).
	LeaseLabel = "egressflow.io/heartbeat"
	// LeaseLabelValue is LeaseLabel's value on agent Leases.
	LeaseLabelValue = "node-agent"

	// AnnotationDuration is the Lease's exact validity as a Go duration
	// ("600ms", "3s"); Spec.LeaseDurationSeconds only has whole seconds.
	AnnotationDuration = "egressflow.io/lease-duration"
	// AnnotationBridgeMAC is the MAC address of the node's br-ex.
	AnnotationBridgeMAC = "egressflow.io/bridge-mac"
	// AnnotationSteerAddresses are the addresses, comma-separated, at most one
	// per IP family, to which other nodes steer the traffic of a service
	// hosted on this node.
	AnnotationSteerAddresses = "egressflow.io/steer-addresses"
	// AnnotationSyncState is the agent's dataplane sync state (see SyncState).
	AnnotationSyncState = "egressflow.io/sync-state"
	// AnnotationQoSRevision is the agent's EgressQoS watermark (see
	// Facts.QoSRevision).
	AnnotationQoSRevision = "egressflow.io/qos-revision"
	// AnnotationFirewallRevision is the agent's EgressFirewall watermark
	// (see Facts.FirewallRevision).
	AnnotationFirewallRevision = "egressflow.io/firewall-revision"
	// AnnotationFirewallUnresolvedDNS are the exact dnsNames of
	// EgressFirewall rules that the node has no answer for,
	// comma-separated <namespace>/<name> (see Facts.FirewallUnresolvedDNS).
	AnnotationFirewallUnresolvedDNS = "egressflow.io/firewall-unresolved-dns"
	// AnnotationExternalRouteRevision is the agent's
	// AdminPolicyBasedExternalRoute watermark (see
	// Facts.ExternalRouteRevision).
	AnnotationExternalRouteRevision = "egressflow.io/externalroute-revision"
	// AnnotationRouterRevision is the agent's EgressRouter watermark (see
	// Facts.RouterRevision).
	AnnotationRouterRevision = "egressflow.io/egressrouter-revision"
	// AnnotationUplink is the name of the node's uplink interface (see
	// Facts.Uplink).
	AnnotationUplink = "egressflow.io/uplink"
	// AnnotationExternalRouteNotes is what the node says of the
	// AdminPolicyBasedExternalRoutes it applies, a JSON object of policy
	// name to messages (see Facts.ExternalRouteNotes).
	AnnotationExternalRouteNotes = "egressflow.io/externalroute-notes"
	// AnnotationEgressSubnets are the node's uplink subnets, comma-separated
	// masked prefixes (see Facts.EgressSubnets).
	AnnotationEgressSubnets = "egressflow.io/egress-subnets"
	// AnnotationHostAddresses are the node's host addresses,
	// comma-separated (see Facts.HostAddresses).
	AnnotationHostAddresses = "egressflow.io/host-addresses"
	// AnnotationPeerKey is the agent's key in the peer protocol (see
	// Facts.PeerKey).
	AnnotationPeerKey = "egressflow.io/peer-key"
	// AnnotationProbeAddress is where the agent answers the probe protocol
	// (see Facts.ProbeAddress).
	AnnotationProbeAddress = "egressflow.io/probe-address"
	// AnnotationRestarting marks the last renewal of an agent that stops
	// for a restart (Renewer.Handover): the observer of the probe protocol
	// does not judge its silence until the successor renews.
	AnnotationRestarting = "egressflow.io/restarting"
)

// ProbeAddress reads Facts.ProbeAddress alone from l (invalid if l
// publishes none), for readers that need nothing else of the facts.
func ProbeAddress(l *coordinationv1.Lease) netip.AddrPort {
	ap, err := netip.ParseAddrPort(l.Annotations[AnnotationProbeAddress])
	if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Restarting says whether l is the handover of an agent that stopped for a
// restart, not yet renewed by its successor.
func Restarting(l *coordinationv1.Lease) bool {
	return l.Annotations[AnnotationRestarting] == "true"
}

// MaxHostAddresses bounds how many host addresses one agent publishes
// (Facts.HostAddresses), the lowest first: enough for a node's InternalIPs,
// VIPs, management and storage addresses many times over, while the Lease
// that every agent watches stays a few kilobytes (at most about 10 KB of
// IPv6 text). An address past the bound is not published, so it is treated
// as outside the cluster, as every address was before agents published
// them. Higher lets nodes with very many addresses keep them all internal,
// at the cost of a larger Lease written every renewal.
const MaxHostAddresses = 256

// MaxFirewallUnresolvedDNS bounds how many unresolved dnsNames one agent
// publishes (Facts.FirewallUnresolvedDNS), the first in namespace and name
// order: names a node cannot resolve are few (a typo, a name gone, a
// resolver down: then all of them), and the controller writes them into
// the EgressFirewalls' status, where a handful per object is what a person
// reads. The Lease that every agent watches stays small (at most about
// 50 KB of the longest names, 1-2 KB typically). Higher publishes more of a
// mass failure, at the cost of a larger Lease written every renewal; the
// agent's metric (egressflow_agent_firewall_dns_unresolved) counts them
// all.
const MaxFirewallUnresolvedDNS = 100

// MaxExternalRouteNotes bounds how many notes one agent publishes about the
// AdminPolicyBasedExternalRoutes (Facts.ExternalRouteNotes), the first in
// policy and message order, and MaxExternalRouteNoteLength each note: a
// node's down hops are a handful (a policy lists a few gateways), and the
// controller writes them into the policies' status, where a handful is
// what a person reads. The Lease stays small (at most about 20 KB, under
// 1 KB typically). Higher publishes more of a mass failure at the cost of a
// larger Lease written every renewal; the agent's metrics
// (egressflow_agent_externalroute_hops) count every hop.
const (
	MaxExternalRouteNotes      = 100
	MaxExternalRouteNoteLength = 200
)

// SyncState says whether an agent's dataplane matches its desired state.
type SyncState string

const (
	// SyncStateSynced: every flow and rule the agent wants is installed.
	SyncStateSynced SyncState = "Synced"
	// SyncStateSyncing: the agent is still converging (start-up, OVS restart).
	SyncStateSyncing SyncState = "Syncing"
	// SyncStateFailed: the last sync failed and is being retried.
	SyncStateFailed SyncState = "Failed"
)

// Facts is what other components need to know about a node's dataplane. The
// agent publishes it with every renewal; zero fields are not written.
type Facts struct {
	// BridgeMAC is the MAC address of the node's br-ex, e.g. "02:00:00:00:00:01".
	BridgeMAC string
	// SteerAddresses are the addresses other nodes steer to.
	SteerAddresses []netip.Addr
	// SyncState is the agent's dataplane sync state.
	SyncState SyncState
	// QoSRevision is the agent's EgressQoS watermark: the resourceVersion
	// of the newest EgressQoS list or event the agent had taken in when its
	// last successful sync began. Every EgressQoS object at that revision
	// or before is applied on this node as it was then; the cluster
	// component compares it with the revision at which it first saw each
	// object's current generation to report where the object is applied.
	// Empty until the first sync after the EgressQoS informer has synced.
	QoSRevision string
	// FirewallRevision is the agent's EgressFirewall watermark, as
	// QoSRevision is its EgressQoS one.
	FirewallRevision string
	// FirewallUnresolvedDNS are the exact dnsNames of the EgressFirewall
	// rules of namespaces with a pod on this node that the node had no
	// answer for after its last successful sync, as
	// "<namespace>/<name>" (the name's esv1.DNSNameKey), sorted,
	// at most MaxFirewallUnresolvedDNS. Nil is "not known yet" (before the
	// first sync): nothing is written and the predecessor's list stays, as
	// the watermarks do; empty is "none", written as "". The cluster
	// component puts them in the EgressFirewalls' status.messages.
	FirewallUnresolvedDNS []string
	// ExternalRouteRevision is the agent's AdminPolicyBasedExternalRoute
	// watermark, as QoSRevision is its EgressQoS one.
	ExternalRouteRevision string
	// RouterRevision is the agent's EgressRouter watermark, as QoSRevision
	// is its EgressQoS one: the cluster component reports a router
	// Available once its holder's watermark has passed the revision that
	// made it the holder.
	RouterRevision string
	// Uplink is the name of the interface that joins the node's bridge to
	// its network: an EgressRouter whose macvlan.master names an
	// interface is held only by a node whose uplink it is.
	Uplink string
	// ExternalRouteNotes are what the node says of the
	// AdminPolicyBasedExternalRoutes it applies after its last successful
	// sync, by policy name: the next hops its pods cannot use (BFD session
	// down, no neighbour answer) and the gateway pods that are no hop.
	// Nil is "not known yet" (before the first sync): nothing is written
	// and the predecessor's notes stay; empty is "none". At most
	// MaxExternalRouteNotes notes of MaxExternalRouteNoteLength bytes are
	// written. The cluster component puts them in the policies' status.
	ExternalRouteNotes map[string][]string
	// EgressSubnets are the subnets of the node's uplink (the global
	// unicast addresses on its bridge, masked; see EgressSubnets): the
	// cluster component gives the node only egress IPs inside one of them.
	EgressSubnets []netip.Prefix
	// HostAddresses are the node's host addresses (see HostAddresses):
	// every agent treats them as cluster-internal destinations, as it does
	// the addresses of the Node objects. Sorted, each once.
	HostAddresses []netip.Addr
	// PeerKey is the public key that signs the agent's questions to its
	// peers and its answers (PeerIdentity.PublicKey): peers believe
	// nothing else on PeerPath.
	PeerKey string
	// ProbeAddress is where the agent answers the probe protocol (UDP): the
	// cluster component probes it there, and peers ask it whether they are
	// cut off. Invalid (not published) for an agent that does not answer,
	// which the cluster component then judges by its Lease alone.
	ProbeAddress netip.AddrPort
}

// Equal says whether f and g are the same facts. Compare Facts with it,
// not with reflection: netip's types have unexported fields, on which
// apimachinery's equality.Semantic.DeepEqual panics.
func (f Facts) Equal(g Facts) bool {
	return f.BridgeMAC == g.BridgeMAC && f.SyncState == g.SyncState && f.QoSRevision == g.QoSRevision &&
		f.FirewallRevision == g.FirewallRevision && f.PeerKey == g.PeerKey && slices.Equal(f.SteerAddresses, g.SteerAddresses) &&
		(f.FirewallUnresolvedDNS == nil) == (g.FirewallUnresolvedDNS == nil) && slices.Equal(f.FirewallUnresolvedDNS, g.FirewallUnresolvedDNS) &&
		f.ExternalRouteRevision == g.ExternalRouteRevision && f.RouterRevision == g.RouterRevision && f.Uplink == g.Uplink && (f.ExternalRouteNotes == nil) == (g.ExternalRouteNotes == nil) &&
		maps.EqualFunc(f.ExternalRouteNotes, g.ExternalRouteNotes, slices.Equal) &&
		slices.Equal(f.EgressSubnets, g.EgressSubnets) && slices.Equal(f.HostAddresses, g.HostAddresses) && f.ProbeAddress == g.ProbeAddress
}

// annotations returns the annotations that carry f and d.
func (f Facts) annotations(d time.Duration) map[string]string {
	a := map[string]string{AnnotationDuration: d.String()}
	if f.BridgeMAC != "" {
		a[AnnotationBridgeMAC] = f.BridgeMAC
	}
	if len(f.SteerAddresses) > 0 {
		a[AnnotationSteerAddresses] = joinComma(f.SteerAddresses)
	}
	if f.SyncState != "" {
		a[AnnotationSyncState] = string(f.SyncState)
	}
	if f.QoSRevision != "" {
		a[AnnotationQoSRevision] = f.QoSRevision
	}
	if f.FirewallRevision != "" {
		a[AnnotationFirewallRevision] = f.FirewallRevision
	}
	if f.FirewallUnresolvedDNS != nil {
		a[AnnotationFirewallUnresolvedDNS] = strings.Join(f.FirewallUnresolvedDNS[:min(len(f.FirewallUnresolvedDNS), MaxFirewallUnresolvedDNS)], ",")
	}
	if f.ExternalRouteRevision != "" {
		a[AnnotationExternalRouteRevision] = f.ExternalRouteRevision
	}
	if f.RouterRevision != "" {
		a[AnnotationRouterRevision] = f.RouterRevision
	}
	if f.Uplink != "" {
		a[AnnotationUplink] = f.Uplink
	}
	if f.ExternalRouteNotes != nil {
		a[AnnotationExternalRouteNotes] = writeExternalRouteNotes(f.ExternalRouteNotes)
	}
	if len(f.EgressSubnets) > 0 {
		a[AnnotationEgressSubnets] = joinComma(f.EgressSubnets)
	}
	if f.PeerKey != "" {
		a[AnnotationPeerKey] = f.PeerKey
	}
	if len(f.HostAddresses) > 0 {
		a[AnnotationHostAddresses] = joinComma(f.HostAddresses)
	}
	if f.ProbeAddress.IsValid() {
		a[AnnotationProbeAddress] = f.ProbeAddress.String()
	}
	return a
}

// joinComma is the comma-separated text of xs, as the annotations carry
// lists.
func joinComma[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// ReadFacts returns the facts a Lease carries. Addresses and prefixes that
// do not parse are left out; prefixes are read masked (192.0.2.7/24 is
// 192.0.2.0/24).
func ReadFacts(l *coordinationv1.Lease) Facts {
	a := l.Annotations
	f := Facts{BridgeMAC: a[AnnotationBridgeMAC], SyncState: SyncState(a[AnnotationSyncState]), QoSRevision: a[AnnotationQoSRevision],
		FirewallRevision: a[AnnotationFirewallRevision], ExternalRouteRevision: a[AnnotationExternalRouteRevision], PeerKey: a[AnnotationPeerKey],
		RouterRevision: a[AnnotationRouterRevision], Uplink: a[AnnotationUplink]}
	for _, s := range strings.Split(a[AnnotationSteerAddresses], ",") {
		if addr, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			f.SteerAddresses = append(f.SteerAddresses, addr)
		}
	}
	f.EgressSubnets = ParseEgressSubnets(a[AnnotationEgressSubnets])
	f.ProbeAddress = ProbeAddress(l)
	f.HostAddresses = parseHostAddresses(a[AnnotationHostAddresses])
	if v, ok := a[AnnotationFirewallUnresolvedDNS]; ok {
		f.FirewallUnresolvedDNS = parseUnresolvedDNS(v)
	}
	if v, ok := a[AnnotationExternalRouteNotes]; ok {
		f.ExternalRouteNotes = parseExternalRouteNotes(v)
	}
	return f
}

// boundExternalRouteNotes keeps at most MaxExternalRouteNotes of notes,
// the first by policy name and then message, each message cut to
// MaxExternalRouteNoteLength bytes, each once; never nil.
func boundExternalRouteNotes(notes map[string][]string) map[string][]string {
	out := map[string][]string{}
	budget := MaxExternalRouteNotes
	for _, policy := range slices.Sorted(maps.Keys(notes)) {
		var kept []string
		for _, m := range notes[policy] {
			if len(m) > MaxExternalRouteNoteLength {
				m = strings.ToValidUTF8(m[:MaxExternalRouteNoteLength], "")
			}
			if m != "" {
				kept = append(kept, m)
			}
		}
		slices.Sort(kept)
		kept = slices.Compact(kept)
		kept = kept[:min(len(kept), budget)]
		if policy == "" || len(kept) == 0 {
			continue
		}
		out[policy] = kept
		if budget -= len(kept); budget == 0 {
			break
		}
	}
	return out
}

// writeExternalRouteNotes is the AnnotationExternalRouteNotes value of
// notes, bounded.
func writeExternalRouteNotes(notes map[string][]string) string {
	b, err := json.Marshal(boundExternalRouteNotes(notes))
	if err != nil {
		return "{}" // a map of strings always marshals
	}
	return string(b)
}

// parseExternalRouteNotes reads an AnnotationExternalRouteNotes value
// tolerantly: a value that is not a JSON object of string lists reads as
// no notes; the rest is bounded as a writer bounds it. Never nil.
func parseExternalRouteNotes(v string) map[string][]string {
	var notes map[string][]string
	if json.Unmarshal([]byte(v), &notes) != nil {
		return map[string][]string{}
	}
	return boundExternalRouteNotes(notes)
}

// parseUnresolvedDNS reads an AnnotationFirewallUnresolvedDNS value
// tolerantly: entries that are not <namespace>/<name> are skipped; the
// rest sorted, each once, MaxFirewallUnresolvedDNS at most; never nil.
func parseUnresolvedDNS(v string) []string {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		ns, name, ok := strings.Cut(strings.TrimSpace(s), "/")
		if ok && ns != "" && name != "" && !strings.Contains(name, "/") {
			out = append(out, ns+"/"+name)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(len(out), MaxFirewallUnresolvedDNS)]
}

// parseHostAddresses reads an AnnotationHostAddresses value tolerantly:
// entries that are not addresses, or that HostAddresses would not publish
// (loopback, link-local, multicast, unspecified, zoned), are skipped; the
// rest is sorted, each once, MaxHostAddresses at most. So a reader gets the
// same list from any writer, whatever it wrote.
func parseHostAddresses(v string) []netip.Addr {
	if v == "" {
		return nil
	}
	var addrs []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		if addr, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			addrs = append(addrs, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	return HostAddresses(addrs, nil)
}

// HostAddresses are the host addresses an agent publishes, from the
// addresses on its node's interfaces: each that is global unicast (not
// loopback, link-local, multicast or unspecified) and in none of excluded
// (the cluster's pod and service CIDRs, which are no host's, and the
// egress IPs egressflow serves), unmapped; sorted, each once, the lowest
// MaxHostAddresses. Only the address counts, not its prefix length: the
// rest of its subnet is other hosts'.
func HostAddresses(addrs []netip.Prefix, excluded []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range addrs {
		a := p.Addr().Unmap()
		if !p.IsValid() || !a.IsGlobalUnicast() || a.Zone() != "" ||
			slices.ContainsFunc(excluded, func(x netip.Prefix) bool { return x.Contains(a) }) {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	out = slices.Compact(out)
	return out[:min(len(out), MaxHostAddresses)]
}

// ParseEgressSubnets reads an AnnotationEgressSubnets value tolerantly:
// entries that are not prefixes (or carry a zone) are skipped, the others
// masked; nil when none is left.
func ParseEgressSubnets(v string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

// EgressSubnets are the subnets an agent publishes for the addresses on
// its bridge: of each global unicast address (not loopback, link-local,
// multicast or unspecified), its prefix masked; sorted, each once.
func EgressSubnets(addrs []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range addrs {
		a := p.Addr().Unmap()
		if !p.IsValid() || !a.IsGlobalUnicast() || a.Zone() != "" {
			continue
		}
		out = append(out, netip.PrefixFrom(a, p.Bits()).Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return slices.Compact(out)
}

// Duration returns how long a renewal of l is valid: the AnnotationDuration
// annotation if it parses to a positive duration, else
// Spec.LeaseDurationSeconds. ok is false if neither is set.
func Duration(l *coordinationv1.Lease) (d time.Duration, ok bool) {
	if d, err := time.ParseDuration(l.Annotations[AnnotationDuration]); err == nil && d > 0 {
		return d, true
	}
	if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second, true
	}
	return 0, false
}

// Expiry returns the instant l stops being fresh: renewTime + duration. ok is
// false for a Lease that was never renewed or has no duration, which is
// never fresh.
func Expiry(l *coordinationv1.Lease) (t time.Time, ok bool) {
	d, ok := Duration(l)
	if !ok || l.Spec.RenewTime == nil {
		return time.Time{}, false
	}
	return l.Spec.RenewTime.Add(d), true
}

// Fresh says whether l is valid at now: renewTime + duration > now. See the
// package doc about clock skew between the agent and the reader.
func Fresh(l *coordinationv1.Lease, now time.Time) bool {
	exp, ok := Expiry(l)
	return ok && exp.After(now)
}

// durationSeconds is d in whole seconds, rounded up, for
// Spec.LeaseDurationSeconds.
func durationSeconds(d time.Duration) int32 {
	return int32(math.Ceil(d.Seconds()))
}

// ParseRevision reads a resourceVersion as an etcd revision; false when it
// is not one. It is the one place egressflow reads resourceVersions of
// different writes in order to compare them (the agent for its QoS
// watermark, the cluster component against it), which the API calls
// opaque strings. What it relies on is what kube-apiserver's etcd3
// storage does: an object's resourceVersion is the etcd revision of its last
// write (mod_revision), a list's or a watch event's is the etcd revision it
// was served at, and etcd's revision is one counter for the whole keyspace
// that only grows, written as a decimal uint64. Both sides of every
// comparison here are EgressQoS resourceVersions (the agent's watermark is
// one it read from its EgressQoS list or watch), so they come from the same
// storage (an --etcd-servers-overrides for egressqoses moves both).
// apimachinery's util/resourceversion orders well-formed resourceVersions of
// one resource the same way (as decimal integers); this reads them into
// integers once, so that the comparisons on every watermark change are
// integer comparisons. Anything else, "0" included (never a live object's),
// is unknown.
func ParseRevision(rv string) (uint64, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	return n, err == nil && n != 0
}
