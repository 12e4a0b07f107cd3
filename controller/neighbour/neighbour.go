// Package neighbour finds the link-layer addresses of next hops that the
// node reaches directly on a link (external gateways on the uplink's
// segment), through the kernel's neighbour table: the agent's flows send
// to a gateway's MAC, which only ARP or neighbour discovery can tell.
//
// It owns the set of addresses the agent wants resolved and their current
// MACs. It asks the kernel to resolve an address (a neighbour entry with
// NTF_USE, as `ip neigh replace ADDR dev LINK use` does) when it is first
// wanted and again every refresh interval, so that an entry the kernel
// let go stale is confirmed while the dataplane, which bypasses the
// kernel, sends to it; it learns every change of the table through a
// netlink subscription. It does not decide which hops to want, nor what
// a hop without a MAC means for the flows.
package neighbour

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultRefresh is how often a wanted address is resolved again: shorter
// notices a gateway's new MAC sooner (when the gateway sends no
// gratuitous ARP), at one probe per hop per interval once the kernel's
// entry is stale.
const DefaultRefresh = 10 * time.Second

// usable are the states in which an entry's MAC can be sent to.
const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// Resolver keeps the MACs of the wanted addresses on one link. It is safe
// for concurrent use.
type Resolver struct {
	// link is the link's name; linkIndex its index as last looked up
	// (a link deleted and made again, as Open vSwitch does with a
	// bridge's internal port, has a new one).
	link      string
	linkIndex atomic.Int64
	handle    *netlink.Handle
	onChange  func()
	done      chan struct{}
	wg        sync.WaitGroup

	mu     sync.Mutex
	wanted map[netip.Addr]bool
	macs   map[netip.Addr]net.HardwareAddr
}

// Start watches the neighbour table of link in the calling thread's
// network namespace. onChange is called, from the Resolver's goroutine,
// after a wanted address's MAC appears, changes or goes away; it must
// not block. refresh is how often wanted addresses are resolved again
// (DefaultRefresh when 0).
func Start(link string, refresh time.Duration, onChange func()) (*Resolver, error) {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	// Sockets made in the calling thread's namespace, with no setns: the
	// agent's container has CAP_NET_ADMIN, not CAP_SYS_ADMIN.
	handle, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("neighbour: netlink: %w", err)
	}
	l, err := handle.LinkByName(link)
	if err != nil {
		handle.Close()
		return nil, fmt.Errorf("neighbour: link %s: %w", link, err)
	}
	r := &Resolver{link: link, handle: handle, onChange: onChange, done: make(chan struct{}),
		wanted: map[netip.Addr]bool{}, macs: map[netip.Addr]net.HardwareAddr{}}
	r.linkIndex.Store(int64(l.Attrs().Index))
	updates := make(chan netlink.NeighUpdate, 64)
	err = netlink.NeighSubscribeWithOptions(updates, r.done, netlink.NeighSubscribeOptions{ListExisting: true})
	if err != nil {
		handle.Close()
		return nil, fmt.Errorf("neighbour: subscribe: %w", err)
	}
	r.wg.Add(1)
	go r.run(updates, refresh)
	return r, nil
}

// Want sets the addresses to resolve, and asks the kernel at once for
// those newly wanted.
func (r *Resolver) Want(addrs []netip.Addr) {
	r.mu.Lock()
	next := make(map[netip.Addr]bool, len(addrs))
	var fresh []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		next[a] = true
		if !r.wanted[a] {
			fresh = append(fresh, a)
		}
	}
	r.wanted = next
	for a := range r.macs {
		if !next[a] {
			delete(r.macs, a)
		}
	}
	r.mu.Unlock()
	for _, a := range fresh {
		r.resolve(a)
	}
	// What the table already holds for them counts at once.
	r.readTable(fresh)
}

// MAC returns the MAC of a wanted address, if the kernel has one it can
// send to.
func (r *Resolver) MAC(addr netip.Addr) (net.HardwareAddr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mac, ok := r.macs[addr.Unmap()]
	return slices.Clone(mac), ok
}

// Close stops watching.
func (r *Resolver) Close() {
	close(r.done)
	r.wg.Wait()
	r.handle.Close()
}

// resolve asks the kernel to resolve addr on the link (NTF_USE): it
// creates the entry if needed and sends a request or a probe.
func (r *Resolver) resolve(addr netip.Addr) {
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	_ = r.handle.NeighSet(&netlink.Neigh{LinkIndex: int(r.linkIndex.Load()), Family: family, IP: addr.AsSlice(),
		State: netlink.NUD_NONE, Flags: netlink.NTF_USE}) // a failure shows as no MAC
}

// readTable applies the kernel's current entries for addrs.
func (r *Resolver) readTable(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	entries, err := r.handle.NeighList(int(r.linkIndex.Load()), unix.AF_UNSPEC)
	if err != nil {
		return
	}
	changed := false
	for _, e := range entries {
		changed = r.apply(e, false) || changed
	}
	if changed && r.onChange != nil {
		r.onChange()
	}
}

func (r *Resolver) run(updates <-chan netlink.NeighUpdate, refresh time.Duration) {
	defer r.wg.Done()
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return
			}
			if r.apply(u.Neigh, u.Type == unix.RTM_DELNEIGH) && r.onChange != nil {
				r.onChange()
			}
		case <-tick.C:
			moved := r.followLink()
			r.mu.Lock()
			addrs := make([]netip.Addr, 0, len(r.wanted))
			for a := range r.wanted {
				addrs = append(addrs, a)
			}
			r.mu.Unlock()
			for _, a := range addrs {
				r.resolve(a)
			}
			if moved {
				r.readTable(addrs)
			}
		case <-r.done:
			return
		}
	}
}

// followLink looks the link up again by name and, if it has a new index
// (deleted and made again), follows it: the MACs learnt on the old one
// are dropped (the callback is told), and true is returned so that the
// caller resolves the wanted addresses on the new one.
func (r *Resolver) followLink() bool {
	l, err := r.handle.LinkByName(r.link)
	if err != nil || int64(l.Attrs().Index) == r.linkIndex.Load() {
		return false // gone for now, or the same: nothing to follow
	}
	r.linkIndex.Store(int64(l.Attrs().Index))
	r.mu.Lock()
	forgot := len(r.macs) > 0
	clear(r.macs)
	r.mu.Unlock()
	if forgot && r.onChange != nil {
		r.onChange()
	}
	return true
}

// apply takes one entry of the table (gone when deleted) and reports
// whether a wanted address's MAC changed.
func (r *Resolver) apply(n netlink.Neigh, deleted bool) bool {
	if n.LinkIndex != int(r.linkIndex.Load()) {
		return false
	}
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return false
	}
	addr = addr.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.wanted[addr] {
		return false
	}
	old, had := r.macs[addr]
	if deleted || n.State&usable == 0 || len(n.HardwareAddr) == 0 {
		delete(r.macs, addr)
		return had
	}
	if had && slices.Equal(old, n.HardwareAddr) {
		return false
	}
	r.macs[addr] = slices.Clone(n.HardwareAddr)
	return true
}
