package dataplane

import (
	"bytes"
	"cmp"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
)

// EgressIP's part of a node's desired state (docs/egressip.md,
// "Dataplane"). The cluster component gives each address of an EgressIP a
// node (status.items); every agent reads the same objects and decides the
// same way, for every selected pod of the cluster, which of the object's
// held addresses the pod leaves with (egressIPVia). On the node that holds
// that address the pod's packets are SNATed to it and committed in
// conntrack.SNATZone, wherever the pod runs; the pod's own node steers
// them there (to the holder's bridge MAC), as an EgressService's endpoint
// is steered to its host. The holder answers ARP and neighbour
// solicitations for the address from the uplink with flows of its own
// (no address on any interface), so that the answer comes and goes in the
// same bundle as the SNAT.
//
// ComputeEgressIP is the specification; the Planner keeps the same parts
// (replanEgressIPs) from its indexes.

// Flow kinds of EgressIP.
var (
	// KindEgressIPSNAT, in TableEgress, SNATs a selected pod's packet to
	// the address of the object that this node holds, and sends it on to
	// TableUplink. The object's hash.
	KindEgressIPSNAT = APIEgressIP.Kind(1)
	// KindEgressIPSteer, in TableEgress, sends a local selected pod's
	// packet to the bridge MAC of the node holding its address.
	KindEgressIPSteer = APIEgressIP.Kind(2)
	// KindEgressIPReply, in TableClassify, un-NATs the packets from the
	// uplink to a held address and delivers them (TableReply).
	KindEgressIPReply = APIEgressIP.Kind(3)
	// KindEgressIPARP, in TableClassify, answers an ARP request for a held
	// IPv4 address from the uplink with the bridge's MAC.
	KindEgressIPARP = APIEgressIP.Kind(4)
	// KindEgressIPND answers a neighbour solicitation for a held IPv6
	// address from the uplink with the bridge's MAC: in TableClassify the
	// solicitation becomes an advertisement, in TableNeighbour it gets its
	// target link-layer address and goes back out. Duplicate address
	// detection's solicitations (from ::) are passed on instead.
	KindEgressIPND = APIEgressIP.Kind(5)
)

// RoleEgressIP is no EgressService's: the role an EgressIP part's flows
// are counted under (DiffOutput.Count).
const RoleEgressIP Role = "EgressIP"

// ndAdvertFlags are the reserved word of the advertisements the responder
// sends: Solicited and Override (RFC 4861 §4.4), as a router's neighbour
// would answer for an address it owns.
const ndAdvertFlags = 0x60000000

// ndOptionTargetLinkAddr is the type of the advertisement's option
// (RFC 4861 §4.6.1).
const ndOptionTargetLinkAddr = 2

// EgressIPUnheld is the cluster's choice for a selected pod whose
// EgressIP holds no address of its family (esv1.EgressIPUnheld).
type EgressIPUnheld = esv1.EgressIPUnheld

// The choices of EgressIPUnheld.
const (
	EgressIPUnheldDrop   = esv1.EgressIPUnheldDrop
	EgressIPUnheldNodeIP = esv1.EgressIPUnheldNodeIP
)

// EgressIPPod is what a node does with one selected pod address.
type EgressIPPod struct {
	Pod netip.Addr
	// Via is the egress IP the pod leaves with.
	Via netip.Addr
	// HolderMAC is the bridge MAC of the node that holds Via, when another
	// node does (steer); nil when this node does (SNAT).
	HolderMAC net.HardwareAddr
}

// EgressIPPart is one EgressIP's part of a node's dataplane.
type EgressIPPart struct {
	// Key is ObjectKey(APIEgressIP, "", name).
	Key string
	// Held are the object's addresses this node holds, sorted: it answers
	// for them on the uplink and un-NATs their replies.
	Held []netip.Addr
	// Pods are the selected pod addresses the node acts on, sorted: every
	// pod whose address this node holds, wherever it runs (SNAT), and each
	// local pod whose address another node holds, while that node's
	// bridge MAC is known (steer). A local selected pod without either
	// has no flow here, and the pod guard drops its egress.
	Pods []EgressIPPod
}

// FlowRole is RoleEgressIP.
func (p EgressIPPart) FlowRole() Role { return RoleEgressIP }

// Equal reports whether two parts render the same flows.
func (p EgressIPPart) Equal(o EgressIPPart) bool {
	return p.Key == o.Key && slices.Equal(p.Held, o.Held) &&
		slices.EqualFunc(p.Pods, o.Pods, func(a, b EgressIPPod) bool {
			return a.Pod == b.Pod && a.Via == b.Via && bytes.Equal(a.HolderMAC, b.HolderMAC)
		})
}

// AddTranslations adds the SNAT the part's flows make on this node to out.
func (p EgressIPPart) AddTranslations(out conntrack.Translations) {
	for _, pod := range p.Pods {
		if pod.HolderMAC == nil {
			out[pod.Pod] = pod.Via
		}
	}
}

// AppendFlows renders the part into b and appends its flows to dst. The
// responders need the bridge's MAC: without it the node does not answer
// for its addresses (their traffic cannot reach it anyway).
func (p EgressIPPart) AppendFlows(b *FlowBuffer, dst []*openflow.FlowMod, ports Ports) []*openflow.FlowMod {
	add := func(kind FlowKind, table uint8, priority uint16, insts []openflow.Instruction) *openflow.Match {
		fm := b.Add(Cookie(kind, p.Key), table, priority, insts)
		dst = append(dst, fm)
		return &fm.Match
	}
	for _, addr := range p.Held {
		m := add(KindEgressIPReply, TableClassify, priorityEgressIP, replyThroughCT)
		setIP(m, addr, dstField(addr))
		m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
		if ports.BridgeMAC == nil {
			continue
		}
		if addr.Is4() {
			m := add(KindEgressIPARP, TableClassify, priorityEgressIP, arpResponder(addr, ports.BridgeMAC))
			m.SetUint(openflow.FieldEthType, 0x0806)
			m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
			m.SetUint(openflow.FieldARPOp, 1)
			m.SetAddr(openflow.FieldARPTPA, addr)
			continue
		}
		solicitation := func(priority uint16, insts []openflow.Instruction) *openflow.Match {
			m := add(KindEgressIPND, TableClassify, priority, insts)
			setNeighbourDiscovery(m, 135, addr)
			m.SetUint(openflow.FieldInPort, uint64(ports.Uplink))
			return m
		}
		solicitation(priorityEgressIPDAD, normal).SetAddr(openflow.FieldIPv6Src, netip.IPv6Unspecified())
		solicitation(priorityEgressIP, ndSolicitationToAdvert(addr, ports.BridgeMAC))
		setNeighbourDiscovery(add(KindEgressIPND, TableNeighbour, priorityEgressIP, ndAdvertTarget(ports.BridgeMAC)), 136, addr)
	}
	var snat = map[netip.Addr][]openflow.Instruction{}
	var steer = map[string][]openflow.Instruction{}
	for _, pod := range p.Pods {
		var insts []openflow.Instruction
		kind := KindEgressIPSNAT
		if pod.HolderMAC == nil {
			if insts = snat[pod.Via]; insts == nil {
				insts = snatTo(pod.Via)
				snat[pod.Via] = insts
			}
		} else {
			kind = KindEgressIPSteer
			if insts = steer[string(pod.HolderMAC)]; insts == nil {
				insts = []openflow.Instruction{openflow.Apply(
					openflow.SetField{Field: openflow.FieldEthDst, Value: []byte(pod.HolderMAC)},
					openflow.Output{Port: ports.Uplink})}
				steer[string(pod.HolderMAC)] = insts
			}
		}
		setIP(add(kind, TableEgress, priorityEgressIP, insts), pod.Pod, srcField(pod.Pod))
	}
	return dst
}

// arpResponder turns an ARP request for addr into the reply that mac has
// it, back out of the port it came in on.
func arpResponder(addr netip.Addr, mac net.HardwareAddr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		copyField(openflow.FieldEthSrc, openflow.FieldEthDst, 48),
		openflow.SetField{Field: openflow.FieldEthSrc, Value: []byte(mac)},
		openflow.SetFieldUint(openflow.FieldARPOp, 2),
		copyField(openflow.FieldARPSHA, openflow.FieldARPTHA, 48),
		openflow.SetField{Field: openflow.FieldARPSHA, Value: []byte(mac)},
		copyField(openflow.FieldARPSPA, openflow.FieldARPTPA, 32),
		openflow.SetField{Field: openflow.FieldARPSPA, Value: addr.AsSlice()},
		openflow.Output{Port: openflow.PortInPort})}
}

// ndSolicitationToAdvert turns a neighbour solicitation for addr into an
// advertisement from addr and mac to the solicitor, and looks it up again
// in TableNeighbour (ndAdvertTarget).
func ndSolicitationToAdvert(addr netip.Addr, mac net.HardwareAddr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		copyField(openflow.FieldEthSrc, openflow.FieldEthDst, 48),
		openflow.SetField{Field: openflow.FieldEthSrc, Value: []byte(mac)},
		copyField(openflow.FieldIPv6Src, openflow.FieldIPv6Dst, 128),
		openflow.SetField{Field: openflow.FieldIPv6Src, Value: addr.AsSlice()},
		openflow.SetFieldUint(openflow.FieldIPTTL, 255),
		openflow.SetFieldUint(openflow.FieldICMPv6Type, 136),
		openflow.SetFieldUint(openflow.FieldNDReserved, ndAdvertFlags),
		openflow.SetFieldUint(openflow.FieldNDOptionsType, ndOptionTargetLinkAddr),
		openflow.ResubmitTable(TableNeighbour))}
}

// ndAdvertTarget gives the advertisement mac as its target link-layer
// address and sends it back out of the port the solicitation came in on.
func ndAdvertTarget(mac net.HardwareAddr) []openflow.Instruction {
	return []openflow.Instruction{openflow.Apply(
		openflow.SetField{Field: openflow.FieldNDTLL, Value: []byte(mac)},
		openflow.Output{Port: openflow.PortInPort})}
}

// setNeighbourDiscovery matches an ICMPv6 neighbour discovery message of
// icmpType (135 solicitation, 136 advertisement) for target.
func setNeighbourDiscovery(m *openflow.Match, icmpType uint64, target netip.Addr) {
	setIP(m, target, openflow.FieldNone)
	m.SetUint(openflow.FieldIPProto, 58)
	m.SetUint(openflow.FieldICMPv6Type, icmpType)
	m.SetUint(openflow.FieldICMPv6Code, 0)
	m.SetAddr(openflow.FieldNDTarget, target)
}

func copyField(src, dst openflow.Field, bits uint16) openflow.CopyField {
	return openflow.CopyField{Src: openflow.Subfield{Field: src, Bits: bits}, Dst: openflow.Subfield{Field: dst, Bits: bits}}
}

// EgressIPs is the node's EgressIP dataplane.
type EgressIPs struct {
	// Parts, sorted by key, only those with flows on this node.
	Parts []EgressIPPart
	// Selected are the addresses of this node's pods that an EgressIP
	// selects, sorted: they are never admitted (they leave with an egress
	// IP, or not at all). Under EgressIPUnheldNodeIP an address whose
	// EgressIP holds none of its family is not among them.
	Selected []netip.Addr
	// Problems, sorted by object, then as found.
	Problems []Problem
}

// egressIPHolder is one held address of an EgressIP: status.items' entry.
type egressIPHolder struct {
	addr netip.Addr
	node string
}

// egressIPHolders are the held addresses of eip, by family (IPv4 first),
// each sorted: the status items whose address is one of spec.egressIPs
// (compared as addresses) and names a node. An address listed twice keeps
// its first item.
func egressIPHolders(eip *esv1.EgressIP) [2][]egressIPHolder {
	spec := eip.Spec.Addresses()
	var out [2][]egressIPHolder
	seen := map[netip.Addr]bool{}
	for _, item := range eip.Status.Items {
		a, ok := esv1.ParseEgressIP(item.EgressIP)
		if !ok || item.Node == "" || !slices.Contains(spec, a) || seen[a] {
			continue
		}
		seen[a] = true
		out[family(a)] = append(out[family(a)], egressIPHolder{a, item.Node})
	}
	for i := range out {
		slices.SortFunc(out[i], func(x, y egressIPHolder) int { return x.addr.Compare(y.addr) })
	}
	return out
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// egressIPVia is the holder a pod address leaves through, among its
// family's: the highest rendezvous score of (pod, address), so that losing
// one holder moves only the pods that used it. ok is false with none.
func egressIPVia(pod netip.Addr, holders [2][]egressIPHolder) (egressIPHolder, bool) {
	var best egressIPHolder
	var bestScore uint64
	for _, h := range holders[family(pod)] {
		if s := egressIPScore(pod, h.addr); !best.addr.IsValid() || s > bestScore {
			best, bestScore = h, s
		}
	}
	return best, best.addr.IsValid()
}

// egressIPScore is the rendezvous score of pod for egress IP via (FNV-1a,
// 64 bits, over both addresses' bytes).
func egressIPScore(pod, via netip.Addr) uint64 {
	h := fnv.New64a()
	b := pod.As16()
	h.Write(b[:])
	b = via.As16()
	h.Write(b[:])
	return h.Sum64()
}

// egressIPFamilies says which families eip lists an address of (IPv4,
// IPv6): an EgressIP takes a pod's address only in those, so that an
// IPv4-only object leaves the pod's IPv6 traffic alone.
func egressIPFamilies(eip *esv1.EgressIP) [2]bool {
	var out [2]bool
	for _, a := range eip.Spec.Addresses() {
		out[family(a)] = true
	}
	return out
}

// egressIPSelectors are an EgressIP's namespace and pod selectors; err
// when either does not parse (an object stored before the CRD validated
// them), and then the object selects nothing.
func egressIPSelectors(eip *esv1.EgressIP) (namespaces, pods labels.Selector, err error) {
	if namespaces, err = metav1.LabelSelectorAsSelector(eip.Spec.NamespaceSelector.AsMeta()); err != nil {
		return nil, nil, fmt.Errorf("namespaceSelector: %w", err)
	}
	if pods, err = metav1.LabelSelectorAsSelector(eip.Spec.PodSelector.AsMeta()); err != nil {
		return nil, nil, fmt.Errorf("podSelector: %w", err)
	}
	return namespaces, pods, nil
}

// compareEgressIPs orders EgressIPs by precedence: a pod that several
// select leaves with the oldest (creationTimestamp), then the first by
// name. An object created later never takes pods from one already there.
func compareEgressIPs(a, b *esv1.EgressIP) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// egressIPProblem is a problem of the EgressIP name.
func egressIPProblem(name string, reason reasons.Reason, format string, args ...any) Problem {
	return Problem{Key: ObjectKey(APIEgressIP, "", name), Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ComputeEgressIP is the specification of node's EgressIP dataplane, from
// the EgressIPs, namespaces and pods of the cluster, the agents' Leases,
// and lbClaimed: whether a pod address is an endpoint that an
// EgressService with sourceIPBy LoadBalancerIP claims (that service's SNAT
// wins, docs/dataplane.md "Precedence"). It keeps no index: each pod
// address is matched against every EgressIP in precedence order.
//
// Problems are reported for this node's pods only, so that each is
// reported once in the cluster: a pod another EgressIP or an EgressService
// takes, a local pod whose holder has not published its bridge MAC.
func ComputeEgressIP(node NodeConfig, cluster Cluster, lbClaimed func(netip.Addr) (string, bool)) EgressIPs {
	nsLabels := map[string]labels.Set{}
	for _, ns := range cluster.Namespaces {
		nsLabels[ns.Name] = labels.Set(ns.Labels)
	}
	eips := slices.Clone(cluster.EgressIPs)
	slices.SortFunc(eips, compareEgressIPs)

	var out EgressIPs
	parts := map[string]*EgressIPPart{}
	for _, eip := range eips {
		k := ObjectKey(APIEgressIP, "", eip.Name)
		part := &EgressIPPart{Key: k}
		parts[k] = part
		if node.Fenced {
			continue
		}
		for _, hs := range egressIPHolders(eip) {
			for _, h := range hs {
				if h.node == node.Name {
					part.Held = append(part.Held, h.addr)
				}
			}
		}
	}
	for _, pod := range cluster.Pods {
		local := pod.Spec.NodeName == node.Name
		podNS, ok := nsLabels[pod.Namespace]
		if !ok {
			continue // a namespace not seen yet selects nothing
		}
		for _, addr := range podAddresses(pod, node.ClusterPodCIDRs) {
			var owner *esv1.EgressIP
			for _, eip := range eips {
				nsSel, podSel, err := egressIPSelectors(eip)
				if err != nil || !egressIPFamilies(eip)[family(addr)] || !nsSel.Matches(podNS) || !podSel.Matches(labels.Set(pod.Labels)) {
					continue
				}
				if owner != nil {
					if local {
						out.Problems = append(out.Problems, egressIPProblem(eip.Name, reasons.PodClaimed,
							"pod %s/%s (%s) also selected by EgressIP %s, which takes precedence (older)", pod.Namespace, pod.Name, addr, owner.Name))
					}
					continue
				}
				owner = eip
			}
			if owner == nil {
				continue
			}
			h, held := egressIPVia(addr, egressIPHolders(owner))
			if !held && node.EgressIPUnheld.LeavesThroughNode() {
				continue // as if not selected: the pod guard admits it
			}
			if local {
				out.Selected = append(out.Selected, addr)
			}
			if svc, claimed := lbClaimed(addr); claimed {
				if local {
					out.Problems = append(out.Problems, egressIPProblem(owner.Name, reasons.PodClaimed,
						"pod %s/%s (%s) is an endpoint of EgressService %s, whose LB IP it leaves with", pod.Namespace, pod.Name, addr, svc))
				}
				continue
			}
			if !held {
				continue // no holder: dropped on its node
			}
			part := parts[ObjectKey(APIEgressIP, "", owner.Name)]
			switch {
			case h.node == node.Name:
				if !node.Fenced {
					part.Pods = append(part.Pods, EgressIPPod{Pod: addr, Via: h.addr})
				}
			case local:
				mac := hostMAC(cluster.Leases[h.node])
				if mac == nil {
					out.Problems = append(out.Problems, egressIPProblem(owner.Name, reasons.HostUnknown,
						"node %s, holding %s, has not published its bridge MAC; dropping pod %s/%s's egress until it does", h.node, h.addr, pod.Namespace, pod.Name))
					continue
				}
				part.Pods = append(part.Pods, EgressIPPod{Pod: addr, Via: h.addr, HolderMAC: mac})
			}
		}
	}
	for _, eip := range eips {
		part := parts[ObjectKey(APIEgressIP, "", eip.Name)]
		if len(part.Held)+len(part.Pods) == 0 {
			continue
		}
		slices.SortFunc(part.Held, netip.Addr.Compare)
		slices.SortFunc(part.Pods, func(a, b EgressIPPod) int { return a.Pod.Compare(b.Pod) })
		out.Parts = append(out.Parts, *part)
	}
	slices.SortFunc(out.Parts, func(a, b EgressIPPart) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(out.Problems, compareProblems)
	slices.SortFunc(out.Selected, netip.Addr.Compare)
	out.Selected = slices.Compact(out.Selected)
	return out
}
