package agent

import (
	"context"
	"fmt"
	"hash/fnv"
	"iter"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	kubescheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/topology"
)

// The toy member: a member of the family defined only here, to prove the
// plug-in seam. Its objects are ConfigMaps labelled toyLabel: data.source
// is a pod address, data.nextHops comma-separated MACs, data.failover
// "true" for fail-over rather than ECMP. Its part sends the source's
// packets through a group of its own, a select or fast-failover group
// whose buckets rewrite the destination MAC to a next hop's and output to
// the uplink. Two objects with one source: the first by key has it, the
// other a problem naming it.
const (
	toyAPI   dataplane.API = 14 // unreserved (family.go)
	toyLabel               = "egressflow.test/next-hops"
	// toyTable is a table no one uses: the toy's flows are there to be
	// rendered, diffed and applied, no packet goes through them.
	toyTable    uint8  = 250
	toyPriority uint16 = 10
)

// toyPart is one object's part.
type toyPart struct {
	key      string
	source   netip.Addr
	group    uint32
	failover bool
	hops     []net.HardwareAddr
}

func (p toyPart) FlowRole() dataplane.Role { return "NextHops" }

func (p toyPart) AppendFlows(b *dataplane.FlowBuffer, dst []*openflow.FlowMod, _ dataplane.Ports) []*openflow.FlowMod {
	fm := b.Add(dataplane.Cookie(toyAPI.Kind(1), p.key), toyTable, toyPriority,
		[]openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Group{ID: p.group}}}})
	fm.Match.SetUint(openflow.FieldEthType, 0x0800).SetAddr(openflow.FieldIPv4Src, p.source)
	return append(dst, fm)
}

func (p toyPart) AppendGroups(dst []*openflow.GroupMod, ports dataplane.Ports) []*openflow.GroupMod {
	g := &openflow.GroupMod{Command: openflow.GroupAdd, Type: openflow.GroupTypeSelect, GroupID: p.group}
	if p.failover {
		g.Type = openflow.GroupTypeFastFailover
	}
	for i, mac := range p.hops {
		bucket := openflow.Bucket{ID: uint32(i), Actions: []openflow.Action{openflow.SetField{Field: openflow.FieldEthDst, Value: mac}, openflow.Output{Port: ports.Uplink}}}
		if p.failover {
			bucket.WatchPort = ports.Uplink
		} else {
			bucket.Weight = 100
		}
		g.Buckets = append(g.Buckets, bucket)
	}
	return append(dst, g)
}

func (p toyPart) equal(o toyPart) bool {
	return p.key == o.key && p.source == o.source && p.group == o.group && p.failover == o.failover &&
		slices.EqualFunc(p.hops, o.hops, func(a, b net.HardwareAddr) bool { return a.String() == b.String() })
}

// toyRead is what an object asks for: its part without a claim, or its
// problem.
func toyRead(key string, cm *corev1.ConfigMap) (toyPart, *dataplane.Problem) {
	part := toyPart{key: key, failover: cm.Data["failover"] == "true"}
	h := fnv.New32a()
	h.Write([]byte(key))
	part.group = dataplane.GroupIDPrefix | h.Sum32()&^dataplane.GroupIDMask
	var err error
	if part.source, err = netip.ParseAddr(cm.Data["source"]); err != nil || !part.source.Is4() {
		return toyPart{}, &dataplane.Problem{Key: key, Reason: reasons.Invalid, Message: fmt.Sprintf("source %q is no IPv4 address", cm.Data["source"])}
	}
	for _, s := range strings.Split(cm.Data["nextHops"], ",") {
		mac, err := net.ParseMAC(s)
		if err != nil {
			return toyPart{}, &dataplane.Problem{Key: key, Reason: reasons.Invalid, Message: fmt.Sprintf("next hop %q: %v", s, err)}
		}
		part.hops = append(part.hops, mac)
	}
	return part, nil
}

// toyMember is the incremental planner of the toy's parts: it keeps, for
// each source, the keys that claim it, sorted, and recomputes only the
// keys a change touches.
type toyMember struct {
	read     map[string]toyPart // by key: the objects that parse
	problems map[string]*dataplane.Problem
	claims   map[netip.Addr][]string
	keys     map[string]bool
}

func newToyMember() *toyMember {
	return &toyMember{read: map[string]toyPart{}, problems: map[string]*dataplane.Problem{}, claims: map[netip.Addr][]string{}, keys: map[string]bool{}}
}

func (m *toyMember) API() dataplane.API { return toyAPI }

func (m *toyMember) Update(key string, obj any) []string {
	changed := []string{key}
	if old, ok := m.read[key]; ok {
		m.claims[old.source] = slices.DeleteFunc(m.claims[old.source], func(k string) bool { return k == key })
		changed = append(changed, m.claims[old.source]...)
		delete(m.read, key)
	}
	delete(m.problems, key)
	delete(m.keys, key)
	cm, _ := obj.(*corev1.ConfigMap)
	if cm == nil {
		return changed
	}
	m.keys[key] = true
	part, problem := toyRead(key, cm)
	if problem != nil {
		m.problems[key] = problem
		return changed
	}
	m.read[key] = part
	claimants := append(m.claims[part.source], key)
	slices.Sort(claimants)
	m.claims[part.source] = claimants
	return append(changed, claimants...)
}

func (m *toyMember) Part(key string) (dataplane.Part, bool) {
	part, ok := m.read[key]
	if !ok || m.claims[part.source][0] != key {
		return nil, false
	}
	return part, true
}

func (m *toyMember) Problems(key string) []dataplane.Problem {
	if p := m.problems[key]; p != nil {
		return []dataplane.Problem{*p}
	}
	if part, ok := m.read[key]; ok {
		if owner := m.claims[part.source][0]; owner != key {
			return []dataplane.Problem{{Key: key, Reason: reasons.PodClaimed, Message: fmt.Sprintf("source %s is %s's", part.source, owner)}}
		}
	}
	return nil
}

func (m *toyMember) Keys() iter.Seq[string] { return maps.Keys(m.keys) }

// toySpecification is the toy's whole-cluster rule, written apart from
// toyMember: of the objects that parse, in key order, the first with a
// source has it.
func toySpecification(objects map[string]*corev1.ConfigMap) (map[string]toyPart, map[string][]dataplane.Problem) {
	parts, problems := map[string]toyPart{}, map[string][]dataplane.Problem{}
	owners := map[netip.Addr]string{}
	for _, k := range slices.Sorted(maps.Keys(objects)) {
		part, problem := toyRead(k, objects[k])
		switch owner, claimed := owners[part.source]; {
		case problem != nil:
			problems[k] = []dataplane.Problem{*problem}
		case claimed:
			problems[k] = []dataplane.Problem{{Key: k, Reason: reasons.PodClaimed, Message: fmt.Sprintf("source %s is %s's", part.source, owner)}}
		default:
			owners[part.source] = k
			parts[k] = part
		}
	}
	return parts, problems
}

// toyObject is a toy ConfigMap.
func toyObject(name, source, hops string, failover bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{toyLabel: "true"}},
		Data: map[string]string{"source": source, "nextHops": hops}}
	if failover {
		cm.Data["failover"] = "true"
	}
	return cm
}

// TestToyMemberMatchesSpecification registers the toy with a Planner,
// beside the built-in members, and drives it through random histories of
// its objects: after every change, every key's part and problems are the
// specification's, and the keys Update returned hold every key whose
// part or problems changed.
func TestToyMemberMatchesSpecification(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	sources := []string{"10.244.1.5", "10.244.1.6", "10.244.1.7", "not-an-address"}
	hops := []string{"0a:00:00:00:00:01", "0a:00:00:00:00:01,0a:00:00:00:00:02", "0a:00:00:00:00:03,zz"}
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 14))
		p := dataplane.NewPlanner(dataplane.NodeConfig{Name: "n1"}, nil)
		if err := p.RegisterMember(newToyMember()); err != nil {
			t.Fatal(err)
		}
		objects := map[string]*corev1.ConfigMap{}
		beforeParts, beforeProblems := toySpecification(objects)
		for step := range 30 {
			name := names[r.IntN(len(names))]
			key := dataplane.ObjectKey(toyAPI, "shop", name)
			if r.IntN(4) == 0 {
				delete(objects, key)
			} else {
				objects[key] = toyObject(name, sources[r.IntN(len(sources))], hops[r.IntN(len(hops))], r.IntN(2) == 0)
			}
			var changed []string
			if obj, ok := objects[key]; ok {
				changed = p.UpdateObject(key, obj)
			} else {
				changed = p.UpdateObject(key, nil)
			}
			parts, problems := toySpecification(objects)
			for _, name := range names {
				k := dataplane.ObjectKey(toyAPI, "shop", name)
				got, ok := p.Part(k)
				want, wantOK := parts[k]
				if ok != wantOK || ok && !got.(toyPart).equal(want) {
					t.Fatalf("seed %d step %d: part of %s: %v, %v; want %v, %v", seed, step, k, got, ok, want, wantOK)
				}
				if got := p.Problems(k); !slices.Equal(got, problems[k]) {
					t.Fatalf("seed %d step %d: problems of %s: %v, want %v", seed, step, k, got, problems[k])
				}
				before, had := beforeParts[k]
				moved := had != wantOK || had && !before.equal(want) || !slices.Equal(beforeProblems[k], problems[k])
				if moved && !slices.Contains(changed, k) {
					t.Fatalf("seed %d step %d: %s changed, but Update returned %v", seed, step, k, changed)
				}
			}
			if got, want := p.Keys(), slices.Sorted(maps.Keys(objects)); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: Keys() = %v, want %v", seed, step, got, want)
			}
			beforeParts, beforeProblems = parts, problems
		}
	}
	if err := dataplane.NewPlanner(dataplane.NodeConfig{}, nil).RegisterMember(toyNamedAs(dataplane.APIEgressQoS)); err == nil {
		t.Error("a member registered with a built-in member's API was accepted")
	}
}

// toyNamedAs is the toy under another API.
type toyNamedAsAPI struct {
	*toyMember
	api dataplane.API
}

func (m toyNamedAsAPI) API() dataplane.API { return m.api }

func toyNamedAs(api dataplane.API) dataplane.Member { return toyNamedAsAPI{newToyMember(), api} }

// TestAgentToyMember runs a real agent with the toy registered
// (Config.Members), its informer on the real API server's ConfigMaps and
// its bridge a real switch: the toy's groups and flows arrive on the
// bridge as its specification says, change with its objects (a next hop
// added, an object gone, a source taken over), and its problems reach the
// object as Events, with no other change to the agent, the Planner or
// the Ledger.
func TestAgentToyMember(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	scheme := runtime.NewScheme()
	_ = kubescheme.AddToScheme(scheme)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emitter := events.New(e.agentKube.CoreV1(), scheme, events.Options{Component: "egressflow-agent", Host: n.Name, QPS: 10, Burst: 10})
	go emitter.Run(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(e.admin.Kube, 0, informers.WithNamespace("shop"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = toyLabel }))
	informer := factory.Core().V1().ConfigMaps().Informer()
	agent := e.startAgent(n, func(c *Config) {
		c.Recorder = emitter
		c.Members = []MemberSource{{Member: newToyMember(), Informer: informer}}
	})
	agent.waitHealthy(t)

	configMaps := e.admin.Kube.CoreV1().ConfigMaps("shop")
	objects := map[string]*corev1.ConfigMap{}
	set := func(cm *corev1.ConfigMap) {
		t.Helper()
		key := dataplane.ObjectKey(toyAPI, cm.Namespace, cm.Name)
		var err error
		if _, exists := objects[key]; exists {
			_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		} else {
			_, err = configMaps.Create(ctx, cm, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		objects[key] = cm
	}
	remove := func(name string) {
		t.Helper()
		if err := configMaps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(objects, dataplane.ObjectKey(toyAPI, "shop", name))
	}
	uplink := dataplane.Ports{Uplink: n.PortNumber(t, topology.UplinkPort)}
	// expectBridge waits until the bridge's groups of egressflow's range
	// and its flows of toyTable are the specification's.
	expectBridge := func(step string) {
		t.Helper()
		parts, _ := toySpecification(objects)
		var wantGroups, wantFlows []string
		var buf dataplane.FlowBuffer
		for _, part := range parts {
			for _, g := range part.AppendGroups(nil, uplink) {
				wantGroups = append(wantGroups, strings.TrimPrefix(g.String(), "add "))
			}
			for _, fm := range part.AppendFlows(&buf, nil, uplink) {
				wantFlows = append(wantFlows, fm.String())
			}
		}
		slices.Sort(wantGroups)
		slices.Sort(wantFlows)
		eventually(t, step, func() error {
			var groups []string
			for _, l := range strings.Split(n.Ofctl(t, "--no-names", "dump-groups", n.Bridge), "\n") {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") {
					groups = append(groups, l)
				}
			}
			slices.Sort(groups)
			if !slices.Equal(groups, wantGroups) {
				return fmt.Errorf("groups\n%s\nwant\n%s", strings.Join(groups, "\n"), strings.Join(wantGroups, "\n"))
			}
			var flows []string
			for _, l := range strings.Split(n.Ofctl(t, "--no-names", "--no-stats", "dump-flows", n.Bridge, fmt.Sprintf("table=%d", toyTable)), "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_FLOW") {
					fm, err := openflow.ParseFlow(l)
					if err != nil {
						return err
					}
					flows = append(flows, fm.String())
				}
			}
			slices.Sort(flows)
			if !slices.Equal(flows, wantFlows) {
				return fmt.Errorf("flows\n%s\nwant\n%s", strings.Join(flows, "\n"), strings.Join(wantFlows, "\n"))
			}
			return nil
		})
	}

	set(toyObject("ecmp", "10.244.1.5", "0a:00:00:00:00:01,0a:00:00:00:00:02", false))
	set(toyObject("failover", "10.244.1.6", "0a:00:00:00:00:03,0a:00:00:00:00:04", true))
	expectBridge("two objects")

	set(toyObject("ecmp", "10.244.1.5", "0a:00:00:00:00:01,0a:00:00:00:00:02,0a:00:00:00:00:05", false))
	expectBridge("a next hop added")

	// "another" sorts before "failover": it takes the source over, and
	// failover's part and group go.
	set(toyObject("another", "10.244.1.6", "0a:00:00:00:00:06", false))
	expectBridge("a source taken over")
	set(toyObject("typo", "10.244.1", "0a:00:00:00:00:07", false))
	for _, want := range []struct{ name, reason string }{{"failover", string(reasons.PodClaimed)}, {"typo", string(reasons.Invalid)}} {
		eventually(t, fmt.Sprintf("a %s Event on %s", want.reason, want.name), func() error {
			list, err := e.admin.Kube.CoreV1().Events("shop").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, ev := range list.Items {
				if ev.InvolvedObject.Kind == "ConfigMap" && ev.InvolvedObject.Name == want.name && ev.Reason == want.reason && strings.Contains(ev.Message, n.Name) {
					return nil
				}
			}
			return fmt.Errorf("none among %d Events", len(list.Items))
		})
	}

	remove("another")
	expectBridge("the owner gone: failover has its source back")
	for _, name := range []string{"ecmp", "failover", "typo"} {
		remove(name)
	}
	expectBridge("every object gone")
}
