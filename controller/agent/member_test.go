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
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/test/topology"
)

// The toy member: a member of the family defined only here, to prove the
// plug-in seam. Its objects are ConfigMaps labelled toyLabel: data.source
// is an address, or data.pod names a pod of the ConfigMap's namespace
// whose IPv4 address is the source when the pod is on this node (no part
// otherwise, as a pod selector's member acts only where its pods are);
// data.nextHops are comma-separated MACs, data.failover "true" for
// fail-over rather than ECMP. Its part sends the source's packets through
// a group of its own, a select or fast-failover group whose buckets
// rewrite the destination MAC to a next hop's and output to the uplink.
// Two objects with one source: the first by key has it, the other a
// problem naming it.
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
// problem; neither when it names a pod that is not on this node.
func toyRead(key string, cm *corev1.ConfigMap, pods map[string][]*corev1.Pod) (toyPart, *dataplane.Problem, bool) {
	part := toyPart{key: key, failover: cm.Data["failover"] == "true"}
	h := fnv.New32a()
	h.Write([]byte(key))
	part.group = dataplane.GroupIDPrefix | h.Sum32()&^dataplane.GroupIDMask
	source := cm.Data["source"]
	if name := cm.Data["pod"]; name != "" {
		i := slices.IndexFunc(pods[cm.Namespace], func(p *corev1.Pod) bool { return p.Name == name })
		if i < 0 {
			return toyPart{}, nil, false
		}
		source = ""
		for _, ip := range pods[cm.Namespace][i].Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil && addr.Is4() {
				source = ip.IP
			}
		}
	}
	var err error
	if part.source, err = netip.ParseAddr(source); err != nil || !part.source.Is4() {
		return toyPart{}, &dataplane.Problem{Key: key, Reason: reasons.Invalid, Message: fmt.Sprintf("source %q is no IPv4 address", source)}, true
	}
	for _, s := range strings.Split(cm.Data["nextHops"], ",") {
		mac, err := net.ParseMAC(s)
		if err != nil {
			return toyPart{}, &dataplane.Problem{Key: key, Reason: reasons.Invalid, Message: fmt.Sprintf("next hop %q: %v", s, err)}, true
		}
		part.hops = append(part.hops, mac)
	}
	return part, nil, true
}

// toyMember is the incremental planner of the toy's parts: it keeps, for
// each source, the keys that claim it, sorted, and reads again only the
// keys a change touches: the object changed, the objects naming a pod of
// a namespace whose pods changed, and those that share a source with them.
type toyMember struct {
	objects  map[string]*corev1.ConfigMap
	pods     map[string][]*corev1.Pod // local, by namespace
	read     map[string]toyPart       // by key: the objects with a source
	problems map[string]*dataplane.Problem
	claims   map[netip.Addr][]string
}

func newToyMember() *toyMember {
	return &toyMember{objects: map[string]*corev1.ConfigMap{}, read: map[string]toyPart{},
		problems: map[string]*dataplane.Problem{}, claims: map[netip.Addr][]string{}}
}

func (m *toyMember) API() dataplane.API { return toyAPI }

func (m *toyMember) Update(key string, obj any) []string {
	if cm, _ := obj.(*corev1.ConfigMap); cm != nil {
		m.objects[key] = cm
	} else {
		delete(m.objects, key)
	}
	return m.reread(key)
}

func (m *toyMember) SetLocalPods(pods map[string][]*corev1.Pod, changed []string) []string {
	m.pods = pods
	var out []string
	for key, cm := range m.objects {
		if cm.Data["pod"] != "" && slices.Contains(changed, cm.Namespace) {
			out = append(out, m.reread(key)...)
		}
	}
	return out
}

// reread withdraws key's claim, reads its object again and claims its
// source, and returns the keys that may have changed.
func (m *toyMember) reread(key string) []string {
	changed := []string{key}
	if old, ok := m.read[key]; ok {
		m.claims[old.source] = slices.DeleteFunc(m.claims[old.source], func(k string) bool { return k == key })
		changed = append(changed, m.claims[old.source]...)
		delete(m.read, key)
	}
	delete(m.problems, key)
	cm := m.objects[key]
	if cm == nil {
		return changed
	}
	part, problem, ok := toyRead(key, cm, m.pods)
	switch {
	case !ok:
	case problem != nil:
		m.problems[key] = problem
	default:
		m.read[key] = part
		claimants := append(m.claims[part.source], key)
		slices.Sort(claimants)
		m.claims[part.source] = claimants
		changed = append(changed, claimants...)
	}
	return changed
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

func (m *toyMember) Keys() iter.Seq[string] { return maps.Keys(m.objects) }

// toySpecification is the toy's whole-cluster rule, written apart from
// toyMember: of the objects with a source, in key order, the first with
// a source has it.
func toySpecification(objects map[string]*corev1.ConfigMap, pods map[string][]*corev1.Pod) (map[string]toyPart, map[string][]dataplane.Problem) {
	parts, problems := map[string]toyPart{}, map[string][]dataplane.Problem{}
	owners := map[netip.Addr]string{}
	for _, k := range slices.Sorted(maps.Keys(objects)) {
		part, problem, ok := toyRead(k, objects[k], pods)
		if !ok {
			continue
		}
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

// toyObject is a toy ConfigMap; a source "pod:<name>" names a pod.
func toyObject(name, source, hops string, failover bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{toyLabel: "true"}},
		Data: map[string]string{"source": source, "nextHops": hops}}
	if pod, ok := strings.CutPrefix(source, "pod:"); ok {
		delete(cm.Data, "source")
		cm.Data["pod"] = pod
	}
	if failover {
		cm.Data["failover"] = "true"
	}
	return cm
}

// TestToyMemberMatchesSpecification registers the toy with a Planner,
// beside the built-in members, and drives it through random histories of
// its objects and of the node's pods (SetLocalPods, as the agent calls
// it): after every change, every key's part and problems are the
// specification's, and the keys the change returned hold every key whose
// part or problems changed.
func TestToyMemberMatchesSpecification(t *testing.T) {
	const node = "n1"
	names := []string{"a", "b", "c", "d", "e"}
	podNames := []string{"p", "q"}
	sources := []string{"10.244.1.5", "10.244.1.6", "10.244.1.7", "not-an-address", "pod:p", "pod:q"}
	podIPs := []string{"10.244.1.5", "10.244.1.8", "fd00::5"}
	hops := []string{"0a:00:00:00:00:01", "0a:00:00:00:00:01,0a:00:00:00:00:02", "0a:00:00:00:00:03,zz"}
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 14))
		p := dataplane.NewPlanner(dataplane.NodeConfig{Name: node, ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00::/64")}}, nil)
		if err := p.RegisterMember(newToyMember()); err != nil {
			t.Fatal(err)
		}
		objects := map[string]*corev1.ConfigMap{}
		pods := map[string]*corev1.Pod{} // by name, in shop, on node or not
		localPods := func() map[string][]*corev1.Pod {
			out := map[string][]*corev1.Pod{}
			for _, name := range slices.Sorted(maps.Keys(pods)) {
				if pod := pods[name]; pod.Spec.NodeName == node {
					out[pod.Namespace] = append(out[pod.Namespace], pod)
				}
			}
			return out
		}
		beforeParts, beforeProblems := toySpecification(objects, localPods())
		for step := range 40 {
			var changed []string
			if r.IntN(3) == 0 {
				// A pod comes, goes, moves or changes its address.
				name := podNames[r.IntN(len(podNames))]
				if r.IntN(4) == 0 {
					delete(pods, name)
				} else {
					pods[name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
						Spec:   corev1.PodSpec{NodeName: []string{node, "n2"}[r.IntN(2)]},
						Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: podIPs[r.IntN(len(podIPs))]}}}}
				}
				changed = p.SetLocalPods(slices.Collect(maps.Values(pods)))
			} else {
				name := names[r.IntN(len(names))]
				key := dataplane.ObjectKey(toyAPI, "shop", name)
				if r.IntN(4) == 0 {
					delete(objects, key)
					changed = p.UpdateObject(key, nil)
				} else {
					objects[key] = toyObject(name, sources[r.IntN(len(sources))], hops[r.IntN(len(hops))], r.IntN(2) == 0)
					changed = p.UpdateObject(key, objects[key])
				}
			}
			parts, problems := toySpecification(objects, localPods())
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
					t.Fatalf("seed %d step %d: %s changed, but the change returned %v", seed, step, k, changed)
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

// ofctlReader is a switch that ovs-ofctl reads (ovstest.Switch,
// topology.Node).
type ofctlReader interface {
	Ofctl(t testing.TB, args ...string) string
}

// toyBridgeDiffers compares what bridge holds of the toy with parts
// rendered for ports: every group, as ovs-ofctl dump-groups prints it
// (those of parts, and the foreign ones given), and every flow of
// toyTable or that uses a group (those of parts). It says what differs;
// nil when they agree.
func toyBridgeDiffers(t testing.TB, sw ofctlReader, bridge string, parts []toyPart, ports dataplane.Ports, foreign ...string) error {
	t.Helper()
	wantGroups := slices.Clone(foreign)
	var wantFlows []string
	var buf dataplane.FlowBuffer
	for _, part := range parts {
		for _, g := range part.AppendGroups(nil, ports) {
			wantGroups = append(wantGroups, strings.TrimPrefix(g.String(), "add "))
		}
		for _, fm := range part.AppendFlows(&buf, nil, ports) {
			wantFlows = append(wantFlows, fm.String())
		}
	}
	var groups []string
	for _, l := range strings.Split(sw.Ofctl(t, "--no-names", "dump-groups", bridge), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") {
			groups = append(groups, l)
		}
	}
	var flows []string
	inToyTable := fmt.Sprintf("table=%d,", toyTable)
	for _, l := range strings.Split(sw.Ofctl(t, "--no-names", "--no-stats", "dump-flows", bridge), "\n") {
		if l = strings.TrimSpace(l); strings.Contains(l, inToyTable) || strings.Contains(l, "group:") {
			fm, err := flowtext.ParseFlow(l)
			if err != nil {
				return fmt.Errorf("%q: %w", l, err)
			}
			flows = append(flows, fm.String())
		}
	}
	for _, list := range [][]string{wantGroups, wantFlows, groups, flows} {
		slices.Sort(list)
	}
	if !slices.Equal(groups, wantGroups) {
		return fmt.Errorf("the bridge's groups\n%s\nwant\n%s", strings.Join(groups, "\n"), strings.Join(wantGroups, "\n"))
	}
	if !slices.Equal(flows, wantFlows) {
		return fmt.Errorf("the bridge's flows of the toy\n%s\nwant\n%s", strings.Join(flows, "\n"), strings.Join(wantFlows, "\n"))
	}
	return nil
}

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
	// localPods are the node's pods as the API server has them.
	localPods := func() map[string][]*corev1.Pod {
		t.Helper()
		list, err := e.admin.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]*corev1.Pod{}
		for i := range list.Items {
			pod := &list.Items[i]
			out[pod.Namespace] = append(out[pod.Namespace], pod)
		}
		return out
	}
	// expectBridge waits until the bridge holds of the toy what its
	// specification says.
	expectBridge := func(step string) {
		t.Helper()
		parts, _ := toySpecification(objects, localPods())
		eventually(t, step, func() error { return toyBridgeDiffers(t, n, n.Bridge, slices.Collect(maps.Values(parts)), uplink) })
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

	// An object naming a pod: its part comes with the pod on this node,
	// and goes with it.
	set(toyObject("bypod", "pod:web", "0a:00:00:00:00:08", false))
	expectBridge("a pod named that is not there yet")
	e.addPod(n, "web")
	if parts, _ := toySpecification(objects, localPods()); !slices.ContainsFunc(slices.Collect(maps.Values(parts)), func(p toyPart) bool { return p.key == dataplane.ObjectKey(toyAPI, "shop", "bypod") }) {
		t.Fatal("the specification gives bypod no part: the pod web is not on the node as the API server has it")
	}
	expectBridge("the pod named is there")
	if err := e.admin.Kube.CoreV1().Pods("shop").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	expectBridge("the pod named gone")

	for _, name := range []string{"ecmp", "failover", "typo", "bypod"} {
		remove(name)
	}
	expectBridge("every object gone")
}
