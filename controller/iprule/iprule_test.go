package iprule

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/test/ovstest"
)

func rule(src string, table int) dataplane.Rule {
	return dataplane.Rule{Source: netip.MustParseAddr(src), Table: table}
}

func TestDiff(t *testing.T) {
	installed := []dataplane.Rule{rule("10.0.0.1", 100), rule("10.0.0.2", 100), rule("fd00::1", 7)}
	desired := []dataplane.Rule{rule("10.0.0.2", 100), rule("10.0.0.3", 100), rule("10.0.0.3", 100), rule("fd00::1", 8)}
	add, remove := Diff(installed, desired, dataplane.Rule.Compare)
	if want := []dataplane.Rule{rule("10.0.0.3", 100), rule("fd00::1", 8)}; !slices.Equal(add, want) {
		t.Errorf("add = %v, want %v", add, want)
	}
	if want := []dataplane.Rule{rule("10.0.0.1", 100), rule("fd00::1", 7)}; !slices.Equal(remove, want) {
		t.Errorf("remove = %v, want %v", remove, want)
	}
	if add, remove := Diff(desired, desired, dataplane.Rule.Compare); len(add)+len(remove) != 0 {
		t.Errorf("no change expected, got add %v remove %v", add, remove)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "usr-rt_tables")
	admin := filepath.Join(dir, "etc-rt_tables")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(base, "255\tlocal\n254\tmain\n253 default\n0 unspec\n# comment\n100 blue # trailing comment\nnot-a-number red\n")
	write(admin, "0x65 green\n")
	write(admin+".d/extra.conf", "102 purple\n100 azure\n")
	links := func(name string) (netlink.Link, error) {
		switch name {
		case "vrf-red":
			return &netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: name}, Table: 1007}, nil
		case "eth0":
			return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}, nil
		}
		return nil, fmt.Errorf("Link not found")
	}
	r := TableResolver{Files: []string{base, admin}, LinkByName: links}

	for network, want := range map[string]int{
		"100": 100, "4294967295": 4294967295, "main": 254, "blue": 100, "azure": 100,
		"green": 0x65, "purple": 102, "vrf-red": 1007,
	} {
		got, err := r.Resolve(network)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %d, %v; want %d", network, got, err, want)
		}
	}
	for network, wantText := range map[string]string{
		"":           "network is empty",
		"nope":       `"nope" is not a table number, a table name in`,
		"red":        `"red" is not a table number`,
		"eth0":       `"eth0" is a dummy device, not a VRF`,
		"local":      "table 255",
		"0":          "table 0",
		"unspec":     "table 0",
		"-3":         `"-3" is not a table number`,
		"5000000000": `"5000000000" is not a table number`,
	} {
		_, err := r.Resolve(network)
		if !errors.Is(err, ErrUnknownNetwork) || !strings.Contains(err.Error(), wantText) {
			t.Errorf("Resolve(%q) error %v; want ErrUnknownNetwork saying %q", network, err, wantText)
		}
	}
}

// TestSyncInNamespace installs rules into a real network namespace and reads
// them back with iproute2, the oracle no one here wrote.
func TestSyncInNamespace(t *testing.T) {
	handle, ip, _ := ruleNamespace(t)
	// Rules egressflow does not own: same priority but a fwmark, and a
	// source rule at another priority. Plus a stale rule of ours from a
	// previous run.
	ip("rule", "add", "priority", "5000", "fwmark", "0x10", "lookup", "300")
	ip("rule", "add", "priority", "4000", "from", "10.0.0.1", "lookup", "300")
	ip("rule", "add", "priority", "5000", "from", "10.9.9.9", "lookup", "100")

	m := NewManager(handle, "")
	desired := []dataplane.Rule{rule("10.0.0.1", 100), rule("10.0.0.2", 200), rule("fd00::5", 100)}
	added, removed, err := m.Sync(desired)
	if err != nil || added != 3 || removed != 1 {
		t.Fatalf("first Sync: added %d removed %d err %v; want 3, 1, nil", added, removed, err)
	}
	v4, v6 := ip("rule", "show"), ip("-6", "rule", "show")
	for _, want := range []string{
		"5000:\tfrom 10.0.0.1 lookup 100", "5000:\tfrom 10.0.0.2 lookup 200",
		"5000:\tfrom all fwmark 0x10 lookup 300", "4000:\tfrom 10.0.0.1 lookup 300",
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("ip rule show lacks %q:\n%s", want, v4)
		}
	}
	if strings.Contains(v4, "10.9.9.9") {
		t.Errorf("stale rule survived:\n%s", v4)
	}
	if !strings.Contains(v6, "5000:\tfrom fd00::5 lookup 100") {
		t.Errorf("ip -6 rule show lacks the IPv6 rule:\n%s", v6)
	}

	// Nothing changed: nothing written.
	if added, removed, err := m.Sync(desired); err != nil || added+removed != 0 {
		t.Fatalf("second Sync: added %d removed %d err %v; want no change", added, removed, err)
	}
	// An endpoint moves to another table; one goes away.
	if added, removed, err := m.Sync([]dataplane.Rule{rule("10.0.0.1", 150), rule("fd00::5", 100)}); err != nil || added != 1 || removed != 2 {
		t.Fatalf("third Sync: added %d removed %d err %v; want 1, 2", added, removed, err)
	}
	installed, err := m.Installed()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(installed, dataplane.Rule.Compare)
	if want := []dataplane.Rule{rule("10.0.0.1", 150), rule("fd00::5", 100)}; !slices.Equal(installed, want) {
		t.Fatalf("installed %v, want %v", installed, want)
	}
	// Emptying removes only ours.
	if _, _, err := m.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if v4 := ip("rule", "show"); strings.Contains(v4, "lookup 150") || !strings.Contains(v4, "fwmark 0x10") {
		t.Fatalf("after emptying:\n%s", v4)
	}
}

// TestExemptionsInNamespace: with an endpoint's route rule in place, the
// exemption and landing rules make route lookups to the cluster's own
// prefixes use the node's other rules (here: main), in both families, while
// other destinations still use the endpoint's table; they read back as
// installed, a second Sync writes nothing, and a foreign rule at the
// exemptions' priority is left alone.
func TestExemptionsInNamespace(t *testing.T) {
	handle, ip, _ := ruleNamespace(t)
	// cluster0 leads to the cluster (main table), other0 to the other
	// network (table 100's default route).
	for _, dev := range []string{"cluster0", "other0"} {
		ip("link", "add", dev, "type", "veth", "peer", "name", dev+"p") // no dummy module here
		ip("link", "set", dev, "up")
		ip("link", "set", dev+"p", "up")
	}
	ip("addr", "add", "10.244.1.2/32", "dev", "cluster0")
	ip("-6", "addr", "add", "fd00:10:244:1::2/128", "dev", "cluster0", "nodad")
	ip("route", "add", "10.244.0.0/16", "dev", "cluster0")
	ip("-6", "route", "add", "fd00:10:244::/48", "dev", "cluster0")
	ip("route", "add", "default", "dev", "other0", "table", "100")
	ip("-6", "route", "add", "default", "dev", "other0", "table", "100")
	ip("rule", "add", "priority", "4999", "from", "10.9.9.9", "lookup", "300") // not ours

	endpoints := []dataplane.Rule{dataplane.RouteFrom(netip.MustParseAddr("10.244.1.2"), 100), dataplane.RouteFrom(netip.MustParseAddr("fd00:10:244:1::2"), 100)}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
	desired := append(slices.Clone(endpoints), dataplane.ExemptionRules(endpoints, cluster)...)
	if len(desired) != 6 {
		t.Fatalf("Exemptions of two families' routes: %v, want an exemption and a landing per family", desired)
	}
	m := NewManager(handle, "")
	if added, removed, err := m.Sync(desired); err != nil || added != 6 || removed != 0 {
		t.Fatalf("Sync: added %d removed %d err %v; want 6, 0", added, removed, err)
	}
	routeVia := func(family, dst, src string) string {
		t.Helper()
		out := ip(family, "route", "get", dst, "from", src)
		for _, dev := range []string{"cluster0", "other0"} {
			if strings.Contains(out, "dev "+dev) {
				return dev
			}
		}
		t.Fatalf("route get %s from %s: %s", dst, src, out)
		return ""
	}
	for _, c := range []struct{ family, dst, src, want string }{
		{"-4", "10.244.7.7", "10.244.1.2", "cluster0"},
		{"-4", "192.0.2.1", "10.244.1.2", "other0"},
		{"-6", "fd00:10:244:7::7", "fd00:10:244:1::2", "cluster0"},
		{"-6", "2001:db8::1", "fd00:10:244:1::2", "other0"},
	} {
		if got := routeVia(c.family, c.dst, c.src); got != c.want {
			t.Errorf("%s from the endpoint %s goes out %s, want %s", c.dst, c.src, got, c.want)
		}
	}
	installed, err := m.Installed()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(installed, dataplane.Rule.Compare)
	slices.SortFunc(desired, dataplane.Rule.Compare)
	if !slices.Equal(installed, desired) {
		t.Fatalf("installed %v, want %v", installed, desired)
	}
	if added, removed, err := m.Sync(desired); err != nil || added+removed != 0 {
		t.Fatalf("second Sync: added %d removed %d err %v; want no change", added, removed, err)
	}
	if _, _, err := m.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if v4, v6 := ip("rule", "show"), ip("-6", "rule", "show"); strings.Contains(v4+v6, "goto") || strings.Contains(v4+v6, "nop") ||
		!strings.Contains(v4, "4999:\tfrom 10.9.9.9 lookup 300") {
		t.Fatalf("after emptying, ours gone and the foreign rule kept:\n%s%s", v4, v6)
	}
}

// ruleNamespace makes a network namespace for a test, removed with it, and
// returns a netlink handle in it, a runner of `ip` commands there, and its
// name.
func ruleNamespace(t *testing.T) (*netlink.Handle, func(args ...string) string, string) {
	t.Helper()
	ovstest.RequireRoot(t)
	ns := ovstest.NewNetns(t, "rule")
	nsHandle, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nsHandle.Close() })
	handle, err := netlink.NewHandleAt(nsHandle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(handle.Close)
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	return handle, ip, ns
}

// TestRouterGatewaysInNamespace: an EgressRouter's gateways, installed as
// rules and routes in egressflow's tables, send what the node forwards
// from a reserved address through the gateway (a link-local one in IPv6),
// to its subnet on the link, and to the cluster by the main table; the
// routes read back as installed, a second sync writes nothing, a stale
// route in egressflow's range goes, and another table's routes stay.
func TestRouterGatewaysInNamespace(t *testing.T) {
	handle, ip, ns := ruleNamespace(t)
	for _, dev := range []string{"br0", "cluster0"} {
		ip("link", "add", dev, "type", "veth", "peer", "name", dev+"p")
		ip("link", "set", dev, "up")
		ip("link", "set", dev+"p", "up")
	}
	ip("addr", "add", "192.0.2.5/24", "dev", "br0")
	ip("-6", "addr", "add", "2001:db8::5/64", "dev", "br0", "nodad")
	ip("route", "add", "10.244.0.0/16", "dev", "cluster0")
	ip("route", "add", "default", "via", "192.0.2.254", "dev", "br0") // the node's own default route
	ip("-6", "route", "add", "default", "via", "2001:db8::fe", "dev", "br0")
	ip("route", "add", "default", "dev", "cluster0", "table", "100") // not ours
	ip("route", "add", "198.51.100.0/24", "dev", "br0", "table", fmt.Sprint(dataplane.RouterTableBase+7))
	for _, sysctl := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", sysctl).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v: %s", sysctl, err, out)
		}
	}

	rules, routes := dataplane.RouterRouting([]dataplane.RouterGateway{
		{Address: netip.MustParsePrefix("192.0.2.10/24"), Gateway: netip.MustParseAddr("192.0.2.1")},
		{Address: netip.MustParsePrefix("2001:db8::10/64"), Gateway: netip.MustParseAddr("fe80::1")},
	})
	rules = append(rules, dataplane.ExemptionRules(rules, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})...)
	m := NewManager(handle, "br0")
	if added, removed, err := m.SyncRoutes(routes); err != nil || added != 4 || removed != 1 {
		t.Fatalf("SyncRoutes: added %d removed %d err %v; want 4, 1", added, removed, err)
	}
	if _, _, err := m.Sync(rules); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ family, dst, src, want string }{
		{"-4", "203.0.113.5", "192.0.2.10", "via 192.0.2.1 dev br0"},
		{"-4", "192.0.2.77", "192.0.2.10", "192.0.2.77 from 192.0.2.10 dev br0"},
		{"-4", "10.244.7.7", "192.0.2.10", "dev cluster0"},
		{"-4", "203.0.113.5", "192.0.2.11", "via 192.0.2.254 dev br0"}, // another source: the node's routes
		{"-6", "2001:db8:ff::5", "2001:db8::10", "via fe80::1 dev br0"},
	} {
		out := ip(c.family, "route", "get", c.dst, "from", c.src, "iif", "br0p")
		if !strings.Contains(out, c.want) {
			t.Errorf("forwarded from %s to %s: %q, want %q", c.src, c.dst, strings.TrimSpace(out), c.want)
		}
	}
	installed, err := m.InstalledRoutes()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(installed, dataplane.Route.Compare)
	if !slices.Equal(installed, routes) {
		t.Fatalf("installed %v, want %v", installed, routes)
	}
	if added, removed, err := m.SyncRoutes(routes); err != nil || added+removed != 0 {
		t.Fatalf("second SyncRoutes: added %d removed %d err %v; want no change", added, removed, err)
	}
	if _, removed, err := m.SyncRoutes(nil); err != nil || removed != 4 {
		t.Fatalf("emptying: removed %d err %v; want 4", removed, err)
	}
	if out := ip("route", "show", "table", "100"); !strings.Contains(out, "default dev cluster0") {
		t.Fatalf("another table's route went: %q", out)
	}
}
