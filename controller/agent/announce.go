package agent

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
)

// An address this node takes over (an EgressIP's, an EgressRouter's) is
// announced out of every port of the bridge, so that the segment's router
// and hosts move to the bridge's MAC at once rather than when their
// neighbour entries expire; so do the host stack (LOCAL), whose own entry
// may still name the previous holder (it forwards an EgressRouter's
// connections to the address), and a pod attached to the bridge that
// learnt the address from an ICMP redirect: a gratuitous
// ARP request for an IPv4 address, an unsolicited neighbour advertisement
// with the Override flag for an IPv6 one. Only addresses the committed
// flows answer for are announced, after the bundle that installed their
// responders; a node that no longer holds an address (the cluster moved
// it, or the node is fenced) never announces it, whatever it held before
// a restart. It hands it back instead: it announces the address with its
// holder's MAC (handBack).

// Announcements per takeover. The first does the work; the others cover a
// lost frame. More repeats cost a few frames per takeover; fewer leave a
// host that lost the first to its neighbour timeout.
const (
	announceRepeats  = 3
	announceInterval = time.Second
)

// announceTakeovers starts announcing each address the bridge answers for
// now (the planner's, as just committed) that it did not after the
// previous commit, and hands back those it stopped answering for
// (handBack). Without the bridge's MAC the flows answer for nothing.
func (a *Agent) announceTakeovers(ctx context.Context, ports dataplane.Ports) {
	held := map[netip.Addr]bool{}
	if ports.BridgeMAC != nil {
		for _, addr := range a.planner.Announced() {
			held[addr] = true
		}
	}
	a.heldMu.Lock()
	before := a.held
	a.held = held
	a.heldMu.Unlock()
	var took []addrAt
	for addr := range held {
		if !before[addr] {
			klog.InfoS("Took over an address: announcing it", "node", a.cfg.Node.Name, "address", addr)
			took = append(took, addrAt{addr, ports.BridgeMAC})
		}
	}
	if len(took) > 0 {
		go a.announce(ctx, took, func() func(netip.Addr) bool { return a.holds })
	}
	for addr := range before {
		if !held[addr] {
			a.released[addr] = true
		}
	}
	a.handBack(ctx)
}

// holds reports whether the bridge answers for addr, as the last commit
// left it.
func (a *Agent) holds(addr netip.Addr) bool {
	a.heldMu.Lock()
	defer a.heldMu.Unlock()
	return a.held[addr]
}

// handBack points the segment at the holder of each address the bridge
// stopped answering for: an announcement of the holder's bridge MAC (as
// its heartbeat Lease publishes it), sent out of this node's ports. A
// node back from a stall (the node frozen, say) has answered for its old
// addresses before its agent could fence it: its switch processes first
// the neighbour requests queued meanwhile, with its old flows, and a host
// that takes those answers would send to it until its neighbour entry
// expired (tens of seconds), long after the holder's own announcements.
// While the node is fenced its caches may be stale, so it hands back only
// once it unfences (cacheCaughtUp). An address no node holds, or whose
// holder's MAC is unknown, is left to expire.
func (a *Agent) handBack(ctx context.Context) {
	if len(a.released) == 0 || a.planner.Fenced() {
		return
	}
	holders := a.holdersByAddress()
	var targets []addrAt
	handedTo := map[netip.Addr]string{}
	for addr := range a.released {
		holder := holders[addr]
		mac := a.planner.HostMAC(holder)
		if holder == "" || holder == a.cfg.Node.Name || mac == nil {
			continue
		}
		klog.InfoS("Stopped answering for an address: announcing its holder", "node", a.cfg.Node.Name, "address", addr, "holder", holder)
		targets = append(targets, addrAt{addr, mac})
		handedTo[addr] = holder
	}
	clear(a.released)
	if len(targets) == 0 {
		return
	}
	// Due while this node does not answer for the address and its holder
	// is still the one it was handed to.
	go a.announce(ctx, targets, func() func(netip.Addr) bool {
		now := a.holdersByAddress()
		return func(addr netip.Addr) bool { return !a.holds(addr) && now[addr] == handedTo[addr] }
	})
}

// holdersByAddress are the holders of the addresses nodes answer for, by
// address, as the caches have them: each EgressIP's held addresses, each
// EgressRouter's reserved addresses.
func (a *Agent) holdersByAddress() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	if eips, err := a.egressIPs.List(labels.Everything()); err == nil {
		for _, eip := range eips {
			for _, it := range eip.Status.Items {
				if addr, err := netip.ParseAddr(it.EgressIP); err == nil {
					out[addr] = it.Node
				}
			}
		}
	}
	if routers, err := a.egressRouters.List(labels.Everything()); err == nil {
		for _, r := range routers {
			for _, ra := range r.Spec.Addresses {
				if prefix, err := netip.ParsePrefix(ra.IP); err == nil && r.Status.Holder != "" {
					out[prefix.Addr()] = r.Status.Holder
				}
			}
		}
	}
	return out
}

// addrAt is an announcement to send: that addr is at mac (this node's
// bridge MAC, or a holder's: handBack).
type addrAt struct {
	addr netip.Addr
	mac  net.HardwareAddr
}

// announce sends each target's announcement out of every port,
// announceRepeats times a second apart. Before each round, due gives what
// tells an address still due (read once for the round); an address that
// is not is dropped for good.
func (a *Agent) announce(ctx context.Context, targets []addrAt, due func() func(netip.Addr) bool) {
	var inPort openflow.Match
	inPort.SetUint(openflow.FieldInPort, uint64(openflow.PortController))
	for i := range announceRepeats {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(announceInterval):
			}
		}
		stillDue := due()
		targets = slices.DeleteFunc(targets, func(t addrAt) bool { return !stillDue(t.addr) })
		for _, t := range targets {
			po := &openflow.PacketOut{BufferID: openflow.NoBuffer, Match: inPort,
				Actions: []openflow.Action{openflow.Output{Port: openflow.PortAll}}, Data: announcement(t.addr, t.mac)}
			family := "ipv4"
			if t.addr.Is6() {
				family = "ipv6"
			}
			result := "ok"
			if err := a.cfg.Switch.SendPacket(ctx, po); err != nil {
				result = "error"
				klog.ErrorS(err, "Could not announce an address", "node", a.cfg.Node.Name, "address", t.addr)
			}
			if a.cfg.Metrics != nil {
				a.cfg.Metrics.announcements.WithLabelValues(family, result).Inc()
			}
		}
	}
}

// announcement is the frame that tells a segment mac has addr: a
// gratuitous ARP request (sender and target addr), or an unsolicited
// neighbour advertisement to all nodes with the Override flag.
func announcement(addr netip.Addr, mac net.HardwareAddr) []byte {
	if addr.Is4() {
		b := make([]byte, 0, 42)
		b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		b = append(b, mac...)
		b = append(b, 0x08, 0x06)                   // ARP
		b = append(b, 0, 1, 0x08, 0x00, 6, 4, 0, 1) // Ethernet, IPv4, request
		b = append(b, mac...)
		b = append(b, addr.AsSlice()...)
		b = append(b, 0, 0, 0, 0, 0, 0)
		return append(b, addr.AsSlice()...)
	}
	allNodes := netip.MustParseAddr("ff02::1")
	icmp := make([]byte, 0, 32)
	icmp = append(icmp, 136, 0, 0, 0)  // neighbour advertisement, checksum below
	icmp = append(icmp, 0x20, 0, 0, 0) // Override
	icmp = append(icmp, addr.AsSlice()...)
	icmp = append(icmp, 2, 1) // target link-layer address, 8 bytes
	icmp = append(icmp, mac...)
	binary.BigEndian.PutUint16(icmp[2:], icmpv6Checksum(addr, allNodes, icmp))

	b := make([]byte, 0, 14+40+len(icmp))
	b = append(b, 0x33, 0x33, 0, 0, 0, 1)
	b = append(b, mac...)
	b = append(b, 0x86, 0xdd)
	b = append(b, 0x60, 0, 0, 0) // version 6
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, 58, 255) // ICMPv6, hop limit 255 (RFC 4861 §7.1.2)
	b = append(b, addr.AsSlice()...)
	b = append(b, allNodes.AsSlice()...)
	return append(b, icmp...)
}

// icmpv6Checksum is the checksum of an ICMPv6 message (its checksum field
// zero) from src to dst: the ones' complement sum over the IPv6
// pseudo-header and the message (RFC 8200 §8.1).
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	add(binary.BigEndian.AppendUint32(nil, uint32(len(msg))))
	add([]byte{0, 0, 0, 58})
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
