package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/openflow"
)

// bridgeModel is a switch's flow table as the ledger's tests see it: one
// flow per FlowID, as OVS keeps them, taking adds and strict, cookie-exact
// deletes.
type bridgeModel map[string]*openflow.FlowMod

func (b bridgeModel) apply(t *testing.T, mods []*openflow.FlowMod) {
	t.Helper()
	for _, fm := range mods {
		id := FlowID(fm)
		switch fm.Command {
		case openflow.FlowAdd:
			b[id] = fm
		case openflow.FlowDeleteStrict:
			if old, ok := b[id]; ok && old.Cookie&fm.CookieMask == fm.Cookie&fm.CookieMask {
				delete(b, id)
			}
		default:
			t.Fatalf("unexpected flow mod %v", fm)
		}
	}
}

func (b bridgeModel) dump(t *testing.T) []openflow.FlowEntry {
	return dumpedAs(t, slices.Collect(maps.Values(b)))
}

// holds reports whether the bridge holds exactly want and the foreign
// flows, and if not, what differs.
func (b bridgeModel) holds(want []*openflow.FlowMod, foreign ...*openflow.FlowMod) error {
	wanted := map[string]bool{}
	for _, fm := range slices.Concat(want, foreign) {
		wanted[fm.String()] = true
	}
	have := map[string]bool{}
	for _, fm := range b {
		have[fm.String()] = true
	}
	var missing, extra []string
	for f := range wanted {
		if !have[f] {
			missing = append(missing, f)
		}
	}
	for f := range have {
		if !wanted[f] {
			extra = append(extra, f)
		}
	}
	if len(missing)+len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		return fmt.Errorf("the bridge lacks %v and holds besides %v", missing, extra)
	}
	return nil
}

// bundle collects what a Diff sends, as the agent's bundle would encode
// it: the flows are copied (the diff reuses their storage), deletes first.
type bundle struct {
	mods  []*openflow.FlowMod
	sends int
	// failAt, if not 0, makes that send fail, as an encoding error or a
	// lost connection would.
	failAt int
}

var errSend = errors.New("the bundle failed")

func (b *bundle) output(t *testing.T, bridge bridgeModel) DiffOutput {
	return DiffOutput{
		Send: func(c *Changes) error {
			b.sends++
			if b.sends == b.failAt {
				return errSend
			}
			for _, fm := range slices.Concat(c.Delete, c.Add) {
				cp := *fm
				cp.Match = fm.Match.Clone()
				b.mods = append(b.mods, &cp)
			}
			clear(c.Delete)
			clear(c.Add)
			c.Delete, c.Add = c.Delete[:0], c.Add[:0]
			return nil
		},
		Dump: func(fn func(openflow.FlowEntry) error) error {
			for _, e := range bridge.dump(t) {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// foreignFlow is someone else's flow on the bridge (not egressflow's
// cookie, in a table egressflow does not use): no sync may touch it.
var foreignFlow = &openflow.FlowMod{Command: openflow.FlowAdd, Table: 200, Priority: 7, Cookie: 0x1234}

// sync is the agent's apply step over a modelled bridge: it diffs (against
// the bridge as read when the ledger needs it), sends the bundle, commits
// on success, and flushes the stale translations (returning them). fail
// picks what goes wrong.
type failure int

const (
	failNone failure = iota
	// failEncode: a send fails before any bundle is opened; the bridge
	// is untouched and known.
	failEncode
	// failLost: the connection is lost mid-bundle: nothing applies, and
	// the outcome is unknown to the agent.
	failLost
	// failCommitApplied: the bundle applied, but its reply was lost.
	failCommitApplied
	// failFlush: the bundle applied, the conntrack flush failed.
	failFlush
	failures
)

func syncLedger(t *testing.T, l *Ledger, desired Desired, ports Ports, bridge bridgeModel, fail failure) (stale []netip.Addr, ok bool) {
	t.Helper()
	var read *Installed
	if l.NeedsRead(ports) {
		read = NewInstalled(bridge.dump(t))
	}
	b := &bundle{}
	switch fail {
	case failEncode:
		b.failAt = 1
	case failLost:
		b.failAt = 2
	}
	d, err := l.Diff(desired, ports, read, b.output(t, bridge))
	switch {
	case err != nil && !errors.Is(err, errSend):
		t.Fatalf("Diff: %v", err)
	case err != nil && fail == failLost:
		l.Forget()
		return nil, false
	case err != nil:
		return nil, false
	case fail == failLost: // the failing send came after the last
		l.Forget()
		return nil, false
	case fail == failCommitApplied:
		bridge.apply(t, b.mods)
		l.Forget()
		return nil, false
	}
	bridge.apply(t, b.mods)
	l.Commit(d)
	stale = l.StaleSources()
	if fail == failFlush {
		return stale, false
	}
	l.Flushed()
	return stale, true
}

// TestLedgerConverges drives a ledger through random histories of the
// desired state (a Planner's, as the agent keeps it), of failed bundles,
// lost bundle replies and failed flushes, of bridges that restart empty
// and uplinks that move, and checks the apply step against what it must
// do: after every sync that succeeds the bridge holds exactly the desired
// flows (Flows of Compute's State) and the foreign flow, however the
// syncs before it failed; and the translations flushed are exactly those
// the bridge has made since the last flush that it does not make now (after
// a bundle that applied without its flush, some of those: see
// Ledger.StaleSources), never one it still makes.
func TestLedgerConverges(t *testing.T) {
	keys := []string{"a/x", "a/y", "b/x", "b/z", "c/w", "c/x"}
	macs := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", ""}
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 11))
		cfg := []NodeConfig{n1Config, n2Config}[seed%2]
		inputs := map[string]ServiceInputs{}
		leases := map[string]*coordinationv1.Lease{"n1": agentLease(macs[0]), "n2": agentLease(macs[1])}
		nodes := []*corev1.Node{node("n1", "172.18.0.11")}
		p := NewPlanner(cfg, tables)
		p.SetNodes(nodes)
		p.SetLeases(leases)
		ports := Ports{Uplink: 1, BridgeMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}}
		foreign := foreignFlow
		bridge := bridgeModel{FlowID(foreign): foreign}
		l := NewLedger()
		// owed holds, for each endpoint, every LB IP the bridge has SNATed
		// it to since its conntrack entries were last flushed: each may
		// have made connections since.
		owed := map[netip.Addr][]netip.Addr{}
		// exact: no bundle applied without its flush since the last flush.
		exact := true
		qoses := map[string]*esv1.EgressQoS{}
		for step := range 80 {
			var changed []string
			switch r.IntN(14) {
			case 0:
				leases["n2"] = agentLease(macs[r.IntN(len(macs))])
				changed = p.SetLeases(leases)
			case 1:
				cfg.Fenced = !cfg.Fenced
				changed = p.SetFenced(cfg.Fenced)
			case 2:
				// Running pods never share an address; two with one would
				// give two classifying flows one FlowID in TableQoS.
				changed = p.SetLocalPods(distinctAddresses(randomPods(r)))
			case 12, 13:
				ns := []string{"a", "b"}[r.IntN(2)]
				q := randomQoS(r, ns)
				if q != nil && q.Name != esv1.EgressQoSName {
					q = nil
				}
				if q == nil {
					delete(qoses, ns)
				} else {
					qoses[ns] = q
				}
				changed = p.UpdateQoS(ObjectKey(APIEgressQoS, ns, esv1.EgressQoSName), q)
			case 3:
				// ovs-vswitchd restarted empty: the agent reconnects.
				clear(bridge)
				bridge[FlowID(foreign)] = foreign
				l.Forget()
			case 4:
				ports.Uplink = 3 - ports.Uplink // the uplink moved: 1, 2, 1...
			default:
				k := keys[r.IntN(len(keys))]
				inputs[k] = randomInputs(r, k)
				changed = p.Update(k, inputs[k])
			}
			l.Changed(p, changed)
			fail := failNone
			if r.IntN(3) == 0 {
				fail = failure(r.IntN(int(failures)))
			}
			cluster := clusterOf(inputs, nodes, leases)
			cluster.Pods = p.localPods
			for _, ns := range slices.Sorted(maps.Keys(qoses)) {
				cluster.EgressQoSes = append(cluster.EgressQoSes, qoses[ns])
			}
			want := Compute(cfg, cluster, tables)
			stale, ok := syncLedger(t, l, p, ports, bridge, fail)
			if fail == failCommitApplied {
				exact = false
				addOwed(owed, want.Translations())
			}
			if fail == failNone || fail == failFlush {
				if err := bridge.holds(Flows(cfg, want, ports), foreign); err != nil {
					t.Fatalf("seed %d step %d: after a sync whose bundle committed, %v", seed, step, err)
				}
				now := want.Translations()
				var wantStale []netip.Addr
				for src, lbs := range owed {
					if slices.ContainsFunc(lbs, func(lb netip.Addr) bool { return now[src] != lb }) {
						wantStale = append(wantStale, src)
					}
				}
				slices.SortFunc(wantStale, netip.Addr.Compare)
				// After a bundle that applied without its flush, the ledger
				// flushes what changed since the part each service had
				// when its flows first changed after the last flush: not
				// a translation made in between and dropped again before
				// the next flush (see ledger.go). It never flushes one
				// that did not change.
				if exact && !slices.Equal(stale, wantStale) || !exact && !isSubset(stale, wantStale) {
					t.Fatalf("seed %d step %d: stale sources %v, want %v (owed %v, now %v)", seed, step, stale, wantStale, owed, now)
				}
				if ok {
					clear(owed)
					exact = true
				} else {
					exact = false
				}
				addOwed(owed, now)
			}
		}
	}
}

// addOwed adds each endpoint's translation to those owed a flush.
func addOwed(owed map[netip.Addr][]netip.Addr, t conntrack.Translations) {
	for src, lb := range t {
		if !slices.Contains(owed[src], lb) {
			owed[src] = append(owed[src], lb)
		}
	}
}

// isSubset reports whether every address of sub is in set; both sorted.
func isSubset(sub, set []netip.Addr) bool {
	for _, a := range sub {
		if _, found := slices.BinarySearchFunc(set, a, netip.Addr.Compare); !found {
			return false
		}
	}
	return true
}

// ledgerCluster is shop/web hosted on n1, with two endpoints on n1 and one
// on n2, and shop/db, another service n1 hosts.
func ledgerCluster() Cluster {
	c := baseCluster()
	c.EgressServices = append(c.EgressServices, egressService("shop", "db", "", "", "n1"))
	c.Services["shop/db"] = lbService("shop", "db", "192.0.2.20")
	c.EndpointSlices["shop/db"] = []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1.9")}
	c.EndpointSlices["shop/web"] = []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1.5", "n1", "10.244.1.6", "n2", "10.244.2.5")}
	return c
}

// ledgerPorts are the bridge's ports in the scripted ledger tests.
var ledgerPorts = Ports{Uplink: 1}

// syncedLedger is a ledger after a first sync of ledgerCluster on n1, with
// the cluster, its Planner and the bridge.
func syncedLedger(t *testing.T) (Cluster, *Planner, *Ledger, bridgeModel) {
	t.Helper()
	c := ledgerCluster()
	p := plannerOf(n1Config, c)
	l, bridge := NewLedger(), bridgeModel{}
	l.Changed(p, p.Keys())
	stale, ok := syncLedger(t, l, p, ledgerPorts, bridge, failNone)
	if !ok || len(stale) != 0 || l.NeedsRead(ledgerPorts) {
		t.Fatalf("first sync: ok %v, stale %v (want none: a first sync has no past), needs a read %v", ok, stale, l.NeedsRead(ledgerPorts))
	}
	return c, p, l, bridge
}

// plannerOf is a Planner given every object of c.
func plannerOf(node NodeConfig, c Cluster) *Planner {
	p := NewPlanner(node, tables)
	p.SetNodes(c.Nodes)
	p.SetLeases(c.Leases)
	update(p, c, nil)
	return p
}

// update gives p the current inputs of every service of c and every
// service p has (a zero ServiceInputs for one c no longer has), or only of
// keys, and returns the keys whose part changed.
func update(p *Planner, c Cluster, keys []string) []string {
	inputs := map[string]ServiceInputs{}
	for _, es := range c.EgressServices {
		k := key(es.Namespace, es.Name)
		inputs[k] = ServiceInputs{EgressService: es, Service: c.Services[k], EndpointSlices: c.EndpointSlices[k]}
	}
	all := slices.Concat(p.Keys(), slices.Collect(maps.Keys(inputs)))
	slices.Sort(all)
	var changed []string
	for _, k := range slices.Compact(all) {
		if keys == nil || slices.Contains(keys, k) {
			changed = append(changed, p.Update(k, inputs[k])...)
		}
	}
	return changed
}

// TestLedgerFailedBundle: a bundle that fails, before it is opened or once
// sent, leaves the ledger as it was: the next Diff sends the same flow
// mods again, the stale translations are still owed, and only the Commit
// after a bundle that applied moves the ledger on.
func TestLedgerFailedBundle(t *testing.T) {
	c, p, l, bridge := syncedLedger(t)
	ports := ledgerPorts

	// shop/web's LB IP changes and its n2 endpoint goes.
	c.Services["shop/web"] = lbService("shop", "web", "192.0.2.77", "2001:db8::10")
	c.EndpointSlices["shop/web"] = []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1.5", "n1", "10.244.1.6")}
	l.Changed(p, update(p, c, []string{"shop/web"}))
	diff := func(fail int) ([]string, error) {
		b := &bundle{failAt: fail}
		d, err := l.Diff(p, ports, nil, b.output(t, bridge))
		var mods []string
		for _, fm := range b.mods {
			mods = append(mods, fm.String())
		}
		_ = d // not committed: the bundle failed
		return mods, err
	}
	first, err := diff(0)
	if err != nil || len(first) == 0 {
		t.Fatalf("Diff after the change: %v, %d flow mods", err, len(first))
	}
	if _, err := diff(1); !errors.Is(err, errSend) {
		t.Fatalf("a failing send: Diff returned %v", err)
	}
	// The bundle of the first Diff failed to commit: nothing applied.
	again, err := diff(0)
	if err != nil || !slices.Equal(again, first) {
		t.Fatalf("after failed bundles, Diff sends\n%v\nwant the same as before\n%v", again, first)
	}
	if stale := l.StaleSources(); len(stale) != 0 {
		t.Fatalf("stale sources %v before any change was committed", stale)
	}
	if l.NeedsRead(ports) {
		t.Fatal("a bundle that failed before it was opened made the ledger forget the bridge")
	}

	stale, ok := syncLedger(t, l, p, ports, bridge, failNone)
	if !ok {
		t.Fatal("sync failed")
	}
	if err := bridge.holds(Flows(n1Config, p.State(), ports)); err != nil {
		t.Fatal(err)
	}
	// Every endpoint of shop/web was SNATed to 192.0.2.10 before; the two
	// left are SNATed to 192.0.2.77 now, the third not at all; shop/db's
	// did not change.
	if want := addrs("10.244.1.5", "10.244.1.6", "10.244.2.5"); !slices.Equal(stale, want) {
		t.Fatalf("stale sources %v, want %v", stale, want)
	}
	if mods, err := diff(0); err != nil || len(mods) != 0 {
		t.Fatalf("once committed, Diff sends %v (%v), want nothing", mods, err)
	}
}

// TestLedgerStaleTranslations: the translations owed a flush are those
// that changed since the last flush: a flush that failed leaves them owed
// through later syncs, changes or none; one that succeeded clears them;
// and a change that keeps an endpoint's translation owes none for it.
func TestLedgerStaleTranslations(t *testing.T) {
	c, p, l, bridge := syncedLedger(t)
	ports := ledgerPorts
	step := func(name string, change func(), fail failure, want ...string) {
		t.Helper()
		change()
		l.Changed(p, update(p, c, nil))
		stale, _ := syncLedger(t, l, p, ports, bridge, fail)
		if !slices.Equal(stale, addrs(want...)) {
			t.Fatalf("%s: stale sources %v, want %v", name, stale, want)
		}
		if fail != failNone && fail != failFlush {
			return // the bundle did not apply
		}
		if err := bridge.holds(Flows(n1Config, p.State(), ports)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	slice := func(pairs ...string) {
		c.EndpointSlices["shop/web"] = []*discoveryv1.EndpointSlice{endpointSlice(pairs...)}
	}
	step("an endpoint added", func() { slice("n1", "10.244.1.5", "n1", "10.244.1.6", "n1", "10.244.1.7", "n2", "10.244.2.5") }, failNone)
	step("an endpoint removed", func() { slice("n1", "10.244.1.5", "n1", "10.244.1.6", "n2", "10.244.2.5") }, failNone, "10.244.1.7")
	step("the LB IP changes, the flush fails", func() {
		c.Services["shop/web"] = lbService("shop", "web", "192.0.2.77")
	}, failFlush, "10.244.1.5", "10.244.1.6", "10.244.2.5")
	step("nothing changes: still owed", func() {}, failNone, "10.244.1.5", "10.244.1.6", "10.244.2.5")
	step("flushed: nothing owed", func() {}, failNone)
	step("an endpoint moves to a service hosted elsewhere", func() {
		slice("n1", "10.244.1.5", "n1", "10.244.1.6")
		c.EgressServices = append(c.EgressServices, egressService("other", "api", "", "", "n2"))
		c.Services["other/api"] = lbService("other", "api", "192.0.2.30")
		c.EndpointSlices["other/api"] = []*discoveryv1.EndpointSlice{endpointSlice("n2", "10.244.2.5")}
	}, failNone, "10.244.2.5")
	step("the host moves away", func() { c.EgressServices[0].Status.Host = "n2" }, failNone, "10.244.1.5", "10.244.1.6")
	step("shop/db is deleted, its bundle lost", func() { c.EgressServices = slices.Delete(c.EgressServices, 1, 2) }, failLost)
	if !l.NeedsRead(ports) {
		t.Fatal("a bundle lost mid-way left the ledger sure of the bridge")
	}
	step("the retry reads the bridge", func() {}, failNone, "10.244.1.9")
}

// TestLedgerNeedsRead: the bridge is read on the first sync, after
// Forget (a reconnection), and when the uplink moves, and not otherwise.
func TestLedgerNeedsRead(t *testing.T) {
	p := plannerOf(n1Config, ledgerCluster())
	l := NewLedger()
	bridge := bridgeModel{}
	one, two := Ports{Uplink: 1}, Ports{Uplink: 2}
	if !l.NeedsRead(one) {
		t.Fatal("a new ledger does not need the bridge read")
	}
	l.Changed(p, p.Keys())
	syncLedger(t, l, p, one, bridge, failNone)
	if l.NeedsRead(one) {
		t.Fatal("after a sync the ledger still needs the bridge read")
	}
	if !l.NeedsRead(two) {
		t.Fatal("a moved uplink does not need the bridge read")
	}
	l.Forget()
	if !l.NeedsRead(one) {
		t.Fatal("after Forget the ledger does not need the bridge read")
	}
}

// groupKeys keeps each group's keys sorted and unique, and forgets a group
// once its last key is removed.
func TestGroupKeys(t *testing.T) {
	g := groupKeys{}
	g.add(7, "shop/web")
	g.add(7, "shop/db") // a hash collision: two keys in one group
	g.add(7, "shop/web")
	g.add(9, "shop/api")
	if got := g[7]; !slices.Equal(got, []string{"shop/db", "shop/web"}) {
		t.Fatalf("group 7 = %v, want [shop/db shop/web]", got)
	}
	g.remove(7, "shop/none")
	g.remove(7, "shop/db")
	g.remove(9, "shop/api")
	if want := (groupKeys{7: {"shop/web"}}); len(g) != 1 || !slices.Equal(g[7], want[7]) {
		t.Fatalf("after removals %v, want %v", g, want)
	}
	g.remove(7, "shop/web")
	if len(g) != 0 {
		t.Fatalf("after removing every key %v, want no groups", g)
	}
}

// asLayout3 is what an agent of layout 3 left on a bridge for the same
// state: its cookies carry layout 3, TableOrigin sends the host stack's
// packets straight to TableEgress, and there is no TableQoS and no late
// admission (those pods were admitted in TableClassify).
func asLayout3(flows []*openflow.FlowMod) []*openflow.FlowMod {
	var out []*openflow.FlowMod
	for _, fm := range flows {
		if fm.Table == TableQoS || (fm.Table == TableEgress && fm.Priority == priorityAdmittedLate) {
			continue
		}
		old := *fm
		old.Cookie = old.Cookie&^0xff | 3
		if old.Table == TableOrigin && slices.Equal(old.Instructions, gotoFirstStage) {
			old.Instructions = []openflow.Instruction{openflow.GotoTable{Table: TableEgress}}
		}
		out = append(out, &old)
	}
	return out
}

// TestLedgerReplacesOlderLayout: an agent of layout 4 that starts on a
// bridge an agent of layout 3 programmed (an upgrade) replaces every flow
// of the older layout in its first sync, which reads the bridge: the
// flows whose match stays by an add that sets the new cookie (and, for
// TableOrigin's LOCAL flow, the way into TableQoS), the others by a
// delete; the stages' flows are added; a foreign flow stays.
func TestLedgerReplacesOlderLayout(t *testing.T) {
	c := ledgerCluster()
	c.Pods = []*corev1.Pod{pod("db", "n1", nil, "10.244.1.30"), pod("shop", "n1", map[string]string{"app": "voice"}, "10.244.1.31")}
	c.EgressQoSes = []*esv1.EgressQoS{egressQoS("shop", esv1.EgressQoSName, esv1.EgressQoSRule{DSCP: 46, PodSelector: matchLabels("app", "voice")})}
	p := plannerOf(n1Config, c)
	p.SetLocalPods(c.Pods)
	p.UpdateQoS(ObjectKey(APIEgressQoS, "shop", esv1.EgressQoSName), c.EgressQoSes[0])
	want := Flows(n1Config, Compute(n1Config, c, tables), ledgerPorts)
	bridge := bridgeModel{FlowID(foreignFlow): foreignFlow}
	old := asLayout3(want)
	bridge.apply(t, old)
	if len(old) == len(want) {
		t.Fatal("the state renders no flow of layout 4's own: the test would not see them added")
	}
	l := NewLedger()
	l.Changed(p, p.Keys())
	if _, ok := syncLedger(t, l, p, ledgerPorts, bridge, failNone); !ok {
		t.Fatal("the first sync failed")
	}
	if err := bridge.holds(want, foreignFlow); err != nil {
		t.Fatalf("after the first sync over layout 3's flows, %v", err)
	}
	for _, fm := range bridge {
		if f, ok := DecodeCookie(fm.Cookie); ok && uint64(f.Layout) != CookieLayout {
			t.Errorf("a flow of layout %d is left: %v", f.Layout, fm)
		}
	}
}

// distinctAddresses drops each pod that has an address of a pod before it.
func distinctAddresses(pods []*corev1.Pod) []*corev1.Pod {
	seen := map[string]bool{}
	return slices.DeleteFunc(pods, func(p *corev1.Pod) bool {
		for _, ip := range p.Status.PodIPs {
			if seen[ip.IP] {
				return true
			}
		}
		for _, ip := range p.Status.PodIPs {
			seen[ip.IP] = true
		}
		return false
	})
}

// TestLedgerStaleRedirects: the reserved addresses whose redirected
// connections are owed a flush are those a router's flows served since
// the last flush and no router's serve now: a router that left the node,
// or lost an address; a flush that failed leaves them owed; an address
// another router on the node serves now is not stale; and a first sync
// has no past.
func TestLedgerStaleRedirects(t *testing.T) {
	a := netip.MustParseAddr
	router := func(name string, id uint32, addrs ...string) RouterPart {
		part := RouterPart{Key: ObjectKey(APIEgressRouter, "shop", name), ID: id, Fallback: a("203.0.113.1")}
		for _, s := range addrs {
			part.Addresses = append(part.Addresses, a(s))
		}
		return part
	}
	l, bridge := NewLedger(), bridgeModel{}
	desired := partsDesired{}
	step := func(name string, change func(), flush bool, want ...string) {
		t.Helper()
		before := slices.Collect(maps.Keys(desired))
		change()
		l.Changed(desired, slices.Concat(before, slices.Collect(maps.Keys(desired))))
		var read *Installed
		if l.NeedsRead(ledgerPorts) {
			read = NewInstalled(bridge.dump(t))
		}
		b := &bundle{}
		d, err := l.Diff(desired, ledgerPorts, read, b.output(t, bridge))
		if err != nil {
			t.Fatalf("%s: Diff: %v", name, err)
		}
		bridge.apply(t, b.mods)
		l.Commit(d)
		if got := l.StaleRedirects(); !slices.Equal(got, addrs(want...)) {
			t.Fatalf("%s: stale redirects %v, want %v", name, got, want)
		}
		if stale := l.StaleSources(); len(stale) != 0 {
			t.Fatalf("%s: a router translates no source, yet stale sources %v", name, stale)
		}
		if flush {
			l.Flushed()
		}
	}
	billing, audit := router("billing", 1, "172.18.0.60", "fd00:172:18::60"), router("audit", 2, "172.18.0.61")
	step("first sync", func() { desired[billing.Key], desired[audit.Key] = billing, audit }, true)
	step("billing leaves the node, the flush fails", func() { delete(desired, billing.Key) }, false, "172.18.0.60", "fd00:172:18::60")
	step("nothing changes: still owed", func() {}, true, "172.18.0.60", "fd00:172:18::60")
	step("flushed: nothing owed", func() {}, true)
	moved := router("audit", 2, "172.18.0.62")
	step("audit's address changes", func() { desired[audit.Key] = moved }, true, "172.18.0.61")
	successor := router("payroll", 3, "172.18.0.62")
	step("audit goes and payroll takes its address", func() {
		delete(desired, audit.Key)
		desired[successor.Key] = successor
	}, true)
	step("billing comes back", func() { desired[billing.Key] = billing }, true)
	step("every router leaves (the node is fenced)", func() { clear(desired) }, true, "172.18.0.60", "172.18.0.62", "fd00:172:18::60")
}
