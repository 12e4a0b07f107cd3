// Package iprule owns the policy-routing rules that send the traffic of an
// EgressService's endpoints through the routing table its `network` field
// names: one `ip rule from <endpoint IP> lookup <table>` per local endpoint,
// at priority Priority, for IPv4 and IPv6. Traffic inside the cluster (to
// pods, ClusterIPs and nodes) is never rerouted: while any such rule
// exists, `ip rule to <cluster prefix> goto LandingPriority` rules at
// ExemptPriority jump over them, to a `nop` rule at LandingPriority, so
// that this traffic meets every other rule of the node as if egressflow's
// were not there.
//
// It resolves `network` to a table id (a number, a name from the rt_tables
// files, or a VRF device's table), computes the difference between the rules
// wanted and the rules installed, and applies it through netlink. A rule is
// egressflow's when it has priority Priority, a single-address source and no
// other selector; every other rule on the node is left alone. It never
// touches routes or the tables themselves: those belong to whoever set up
// the network (see docs/dataplane.md for why source rules, not fwmark).
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
)

// Priority is the priority of every rule egressflow installs. Lower numbers
// are consulted first: 5000 comes after the `local` table's rule (0), so
// traffic to the node's own addresses is never diverted, and before the
// `main` table's rule (32766), so it wins over default routing. Another
// component that needs to overrule egressflow uses a priority below 5000.
const Priority = 5000

// ExemptPriority and LandingPriority surround Priority: an exemption jumps
// from just before egressflow's route rules to just after them.
const (
	ExemptPriority  = Priority - 1
	LandingPriority = Priority + 1
)

// RuleKind tells egressflow's kinds of rules apart.
type RuleKind uint8

const (
	// RouteRule is `from Source lookup Table` at Priority.
	RouteRule RuleKind = iota
	// ExemptRule is `to Destination goto LandingPriority` at
	// ExemptPriority: a destination inside the cluster skips the route
	// rules.
	ExemptRule
	// LandingRule is `nop` at LandingPriority, in the family of
	// Destination (its zero prefix): the exemptions' goto needs a rule at
	// the priority it jumps to, and a nop changes nothing.
	LandingRule
)

// Rule is one of egressflow's policy-routing rules.
type Rule struct {
	Kind        RuleKind
	Source      netip.Addr   // RouteRule
	Table       int          // RouteRule
	Destination netip.Prefix // ExemptRule; LandingRule: the family's zero prefix
}

// Route is the rule that sends source's packets through table.
func Route(source netip.Addr, table int) Rule {
	return Rule{Kind: RouteRule, Source: source, Table: table}
}

// Exemptions are the rules that keep the cluster's own destinations on the
// node's other rules (ExemptRule, LandingRule), for the families that have
// route rules among routes.
func Exemptions(routes []Rule, cluster []netip.Prefix) []Rule {
	var v4, v6 bool
	for _, r := range routes {
		if r.Kind == RouteRule {
			v4, v6 = v4 || r.Source.Is4(), v6 || r.Source.Is6()
		}
	}
	var out []Rule
	for _, p := range cluster {
		if (p.Addr().Is4() && v4) || (p.Addr().Is6() && v6) {
			out = append(out, Rule{Kind: ExemptRule, Destination: p.Masked()})
		}
	}
	if v4 {
		out = append(out, Rule{Kind: LandingRule, Destination: familyZero(false)})
	}
	if v6 {
		out = append(out, Rule{Kind: LandingRule, Destination: familyZero(true)})
	}
	return out
}

// familyZero is the zero prefix of IPv6 or IPv4, which names a landing
// rule's family.
func familyZero(ipv6 bool) netip.Prefix {
	if ipv6 {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}

func (r Rule) String() string {
	switch r.Kind {
	case ExemptRule:
		return fmt.Sprintf("%d: to %s goto %d", ExemptPriority, r.Destination, LandingPriority)
	case LandingRule:
		return fmt.Sprintf("%d: %s nop", LandingPriority, familyName(r.Destination.Addr()))
	}
	return fmt.Sprintf("%d: from %s lookup %d", Priority, r.Source, r.Table)
}

func familyName(a netip.Addr) string {
	if a.Is6() {
		return "ipv6"
	}
	return "ipv4"
}

// Compare orders rules by kind, then source, destination and table.
func (r Rule) Compare(o Rule) int {
	if c := int(r.Kind) - int(o.Kind); c != 0 {
		return c
	}
	if c := r.Source.Compare(o.Source); c != 0 {
		return c
	}
	if c := r.Destination.Addr().Compare(o.Destination.Addr()); c != 0 {
		return c
	}
	if c := r.Destination.Bits() - o.Destination.Bits(); c != 0 {
		return c
	}
	return r.Table - o.Table
}

// Diff returns the rules to add and the rules to remove to turn installed
// into desired, each sorted. Duplicates in either list count once.
func Diff(installed, desired []Rule) (add, remove []Rule) {
	want := map[Rule]bool{}
	for _, r := range desired {
		want[r] = true
	}
	have := map[Rule]bool{}
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
	slices.SortFunc(add, Rule.Compare)
	slices.SortFunc(remove, Rule.Compare)
	return slices.Compact(add), slices.Compact(remove)
}

// Manager reads and writes egressflow's rules through one netlink handle
// (the node's network namespace, or a test's).
type Manager struct {
	handle *netlink.Handle
}

// NewManager returns a Manager working through handle.
func NewManager(handle *netlink.Handle) *Manager { return &Manager{handle: handle} }

// Installed lists egressflow's rules, IPv4 and IPv6.
func (m *Manager) Installed() ([]Rule, error) {
	var rules []Rule
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
func (m *Manager) Sync(desired []Rule) (added, removed int, err error) {
	installed, err := m.Installed()
	if err != nil {
		return 0, 0, err
	}
	add, remove := Diff(installed, desired)
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
// Priority a lookup in a table from a single-address source; at
// ExemptPriority a goto LandingPriority to a destination; at
// LandingPriority a nop. Each has no other selector.
func owned(r netlink.Rule, family int) (Rule, bool) {
	if r.Mark != 0 || r.IifName != "" || r.OifName != "" || r.Invert || r.Tos != 0 {
		return Rule{}, false
	}
	switch {
	case r.Priority == Priority && r.Src != nil && r.Dst == nil && r.Table > 0 && r.Goto < 0:
		if addr, ok := hostAddr(r.Src); ok {
			return Route(addr, r.Table), true
		}
	case r.Priority == ExemptPriority && r.Src == nil && r.Dst != nil && r.Goto == LandingPriority:
		ones, _ := r.Dst.Mask.Size()
		if addr, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			return Rule{Kind: ExemptRule, Destination: netip.PrefixFrom(addr.Unmap(), ones)}, true
		}
	case r.Priority == LandingPriority && r.Src == nil && r.Dst == nil && r.Table <= 0 && r.Goto < 0:
		return Rule{Kind: LandingRule, Destination: familyZero(family == netlink.FAMILY_V6)}, true
	}
	return Rule{}, false
}

// hostAddr is the address of a single-address prefix.
func hostAddr(n *net.IPNet) (netip.Addr, bool) {
	ones, bits := n.Mask.Size()
	addr, ok := netip.AddrFromSlice(n.IP)
	return addr.Unmap(), ok && ones == bits
}

func toNetlink(r Rule) *netlink.Rule {
	rule := netlink.NewRule()
	rule.Family = netlink.FAMILY_V4
	if r.Source.Is6() || r.Destination.Addr().Is6() {
		rule.Family = netlink.FAMILY_V6
	}
	switch r.Kind {
	case RouteRule:
		rule.Priority = Priority
		rule.Table = r.Table
		bits := r.Source.BitLen()
		rule.Src = &net.IPNet{IP: r.Source.AsSlice(), Mask: net.CIDRMask(bits, bits)}
	case ExemptRule:
		rule.Priority = ExemptPriority
		rule.Goto = LandingPriority
		p := r.Destination
		rule.Dst = &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	case LandingRule:
		rule.Priority = LandingPriority
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
