// Package iprule installs the policy-routing rules that send the traffic of
// an EgressService's endpoints through the routing table its `network` field
// names, and the redirected connections of an EgressRouter's address
// through its gateway, for IPv4 and IPv6: the rules controller/dataplane's
// model describes (dataplane.Rule: route rules at dataplane.RulePriority,
// and the exemptions that keep traffic inside the cluster on the node's
// other rules), and the routes of egressflow's own tables (dataplane.Route).
//
// It resolves `network` to a table id (a number, a name from the rt_tables
// files, or a VRF device's table), computes the difference between the rules
// wanted and the rules installed, and applies it through netlink. A rule is
// egressflow's when it has one of the model's priorities and shapes
// (owned); every other rule on the node is left alone. It touches routes
// only in egressflow's own tables (dataplane.RouterTableBase): the tables
// that `network` names belong to whoever set up the network (see
// docs/dataplane.md for why source rules, not fwmark).
package iprule

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/egressflow/egressflow/controller/dataplane"
)

// Diff returns the rules (or routes) to add and those to remove to turn
// installed into desired, each sorted by compare. Duplicates in either
// list count once.
func Diff[T comparable](installed, desired []T, compare func(a, b T) int) (add, remove []T) {
	want := map[T]bool{}
	for _, r := range desired {
		want[r] = true
	}
	have := map[T]bool{}
	for _, r := range installed {
		have[r] = true
		if !want[r] {
			remove = append(remove, r)
		}
	}
	for r := range want {
		if !have[r] {
			add = append(add, r)
		}
	}
	slices.SortFunc(add, compare)
	slices.SortFunc(remove, compare)
	return slices.Compact(add), slices.Compact(remove)
}

// Manager reads and writes egressflow's rules, and the routes of its own
// tables, through one netlink handle (the node's network namespace, or a
// test's).
type Manager struct {
	handle *netlink.Handle
	// routeDevice is the device of the routes (the bridge's interface).
	routeDevice string
}

// NewManager returns a Manager working through handle, whose routes go
// through routeDevice (the bridge's interface).
func NewManager(handle *netlink.Handle, routeDevice string) *Manager {
	return &Manager{handle: handle, routeDevice: routeDevice}
}

// Installed lists egressflow's rules, IPv4 and IPv6.
func (m *Manager) Installed() ([]dataplane.Rule, error) {
	var rules []dataplane.Rule
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := m.handle.RuleList(family)
		if err != nil {
			return nil, fmt.Errorf("list ip rules: %w", err)
		}
		for _, r := range list {
			if rule, ok := owned(r, family); ok {
				rules = append(rules, rule)
			}
		}
	}
	return rules, nil
}

// Sync makes the installed rules equal desired: it removes egressflow's rules
// that are not desired and adds the missing ones, and returns how many rules
// it added and removed. It goes on after a failed change and reports all
// failures together, so one bad rule does not hold back the others.
func (m *Manager) Sync(desired []dataplane.Rule) (added, removed int, err error) {
	installed, err := m.Installed()
	if err != nil {
		return 0, 0, err
	}
	add, remove := Diff(installed, desired, dataplane.Rule.Compare)
	var errs []error
	for _, r := range remove {
		if err := m.handle.RuleDel(toNetlink(r)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete ip rule %s: %w", r, err))
			continue
		}
		removed++
	}
	for _, r := range add {
		if err := m.handle.RuleAdd(toNetlink(r)); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("add ip rule %s: %w", r, err))
			continue
		}
		added++
	}
	return added, removed, errors.Join(errs...)
}

// owned recognises egressflow's rules by their priority and shape: at
// dataplane.RulePriority a lookup in a table from a single-address source;
// at ExemptRulePriority a goto LandingRulePriority to a destination; at
// LandingRulePriority a nop. Each has no other selector.
func owned(r netlink.Rule, family int) (dataplane.Rule, bool) {
	if r.Mark != 0 || r.IifName != "" || r.OifName != "" || r.Invert || r.Tos != 0 {
		return dataplane.Rule{}, false
	}
	switch {
	case r.Priority == dataplane.RulePriority && r.Src != nil && r.Dst == nil && r.Table > 0 && r.Goto < 0:
		if addr, ok := hostAddr(r.Src); ok {
			return dataplane.RouteFrom(addr, r.Table), true
		}
	case r.Priority == dataplane.ExemptRulePriority && r.Src == nil && r.Dst != nil && r.Goto == dataplane.LandingRulePriority:
		ones, _ := r.Dst.Mask.Size()
		if addr, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			return dataplane.Rule{Kind: dataplane.ExemptRule, Destination: netip.PrefixFrom(addr.Unmap(), ones)}, true
		}
	case r.Priority == dataplane.LandingRulePriority && r.Src == nil && r.Dst == nil && r.Table <= 0 && r.Goto < 0:
		return dataplane.Landing(family == netlink.FAMILY_V6), true
	}
	return dataplane.Rule{}, false
}

// hostAddr is the address of a single-address prefix.
func hostAddr(n *net.IPNet) (netip.Addr, bool) {
	ones, bits := n.Mask.Size()
	addr, ok := netip.AddrFromSlice(n.IP)
	return addr.Unmap(), ok && ones == bits
}

func toNetlink(r dataplane.Rule) *netlink.Rule {
	rule := netlink.NewRule()
	rule.Family = netlink.FAMILY_V4
	if r.Source.Is6() || r.Destination.Addr().Is6() {
		rule.Family = netlink.FAMILY_V6
	}
	switch r.Kind {
	case dataplane.RouteRule:
		rule.Priority = dataplane.RulePriority
		rule.Table = r.Table
		bits := r.Source.BitLen()
		rule.Src = &net.IPNet{IP: r.Source.AsSlice(), Mask: net.CIDRMask(bits, bits)}
	case dataplane.ExemptRule:
		rule.Priority = dataplane.ExemptRulePriority
		rule.Goto = dataplane.LandingRulePriority
		p := r.Destination
		rule.Dst = &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	case dataplane.LandingRule:
		rule.Priority = dataplane.LandingRulePriority
		rule.Table = -1
		rule.Type = nl.FR_ACT_NOP
	}
	return rule
}

// Tables that `network` may not name: 0 is "unspecified" and 255 ("local")
// holds the node's own addresses; sending egress there would break it.
const (
	tableUnspec = 0
	tableLocal  = 255
)

// DefaultTableFiles are where iproute2 keeps table names, in the order it
// reads them: the distribution's defaults, then the administrator's. Each
// file's rt_tables.d/*.conf directory is read after it.
var DefaultTableFiles = []string{"/usr/share/iproute2/rt_tables", "/etc/iproute2/rt_tables"}

// TableResolver turns an EgressService's `network` into a routing table id.
type TableResolver struct {
	// Files are rt_tables files, read in order (a later name wins).
	Files []string
	// LinkByName finds network devices, for VRF names; nil: no VRF lookup.
	LinkByName func(name string) (netlink.Link, error)
}

// ErrUnknownNetwork is wrapped by Resolve's error when `network` names no
// table.
var ErrUnknownNetwork = errors.New("unknown network")

// Resolve returns the table for network: a decimal table id, a table name
// from the rt_tables files, or the name of a VRF device (its table).
func (r TableResolver) Resolve(network string) (int, error) {
	if network == "" {
		return 0, fmt.Errorf("%w: network is empty", ErrUnknownNetwork)
	}
	if id, err := strconv.ParseUint(network, 10, 32); err == nil {
		return checkTable(network, int(id))
	}
	names, err := r.tableNames()
	if err != nil {
		return 0, err
	}
	if id, ok := names[network]; ok {
		return checkTable(network, id)
	}
	if r.LinkByName != nil {
		if link, err := r.LinkByName(network); err == nil {
			if vrf, ok := link.(*netlink.Vrf); ok {
				return checkTable(network, int(vrf.Table))
			}
			return 0, fmt.Errorf("%w: %q is a %s device, not a VRF", ErrUnknownNetwork, network, link.Type())
		}
	}
	return 0, fmt.Errorf("%w: %q is not a table number, a table name in %s, or a VRF device",
		ErrUnknownNetwork, network, strings.Join(r.Files, " or "))
}

func checkTable(network string, id int) (int, error) {
	if id == tableUnspec || id == tableLocal {
		return 0, fmt.Errorf("%w: network %q is table %d, which egress traffic may not use", ErrUnknownNetwork, network, id)
	}
	return id, nil
}

// tableNames reads the rt_tables files: lines of "<id> <name>", # comments.
func (r TableResolver) tableNames() (map[string]int, error) {
	names := map[string]int{}
	for _, file := range r.Files {
		extra, _ := filepath.Glob(file + ".d/*.conf")
		for _, path := range append([]string{file}, extra...) {
			if err := readTableFile(path, names); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	return names, nil
}

func readTableFile(path string, names map[string]int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line, _, _ := strings.Cut(lines.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		id, err := strconv.ParseUint(fields[0], 0, 32)
		if err != nil {
			continue // iproute2 skips lines it cannot read, too
		}
		names[fields[1]] = int(id)
	}
	return lines.Err()
}
