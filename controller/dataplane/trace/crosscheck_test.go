package trace_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// The cross-check holds the tracer to Open vSwitch: flows installed on a
// real bridge through our OpenFlow client, as the agent installs them;
// packets generated at random from a logged seed; each traced by the
// tracer and by `ovs-appctl ofproto/trace`, which must agree on every one.

// crossCheckSeed makes the generated packets the same on every run; a
// failure names the packet, and the log the seed.
const crossCheckSeed = 16

// Packets per flow set: enough that every flow of a scenario is hit
// (each run logs the flows no packet reached), few enough that the
// ofproto/trace calls (a process each) take seconds.
const (
	packetsPerScenario = 250
	packetsHandFlows   = 250
)

// bridge is a real br-ex with an uplink and two pod ports.
type bridge struct {
	sw     *ovstest.Switch
	client *ofconn.Client
	uplink uint32
	pods   []uint32
	mac    net.HardwareAddr // br-ex's own
	odp    map[uint32]uint32
}

func startBridge(t *testing.T) *bridge {
	t.Helper()
	sw := ovstest.Start(t)
	b := &bridge{sw: sw}
	for _, name := range []string{"uplink", "pod1", "pod2"} {
		sw.Vsctl(t, "add-port", sw.Bridge, name, "--", "set", "Interface", name, "type=internal")
		n, err := strconv.ParseUint(strings.TrimSpace(sw.Vsctl(t, "get", "Interface", name, "ofport")), 10, 32)
		if err != nil || n == 0 {
			t.Fatalf("ofport of %s: %v", name, err)
		}
		if name == "uplink" {
			b.uplink = uint32(n)
		} else {
			b.pods = append(b.pods, uint32(n))
		}
	}
	mac, err := net.ParseMAC(strings.Trim(strings.TrimSpace(sw.Vsctl(t, "get", "Interface", sw.Bridge, "mac_in_use")), `"`))
	if err != nil {
		t.Fatal(err)
	}
	b.mac = mac
	// "    uplink 1/2: (tap)": name, OpenFlow port, datapath port.
	b.odp = map[uint32]uint32{}
	for _, m := range regexp.MustCompile(`(?m)^\s+\S+ (\d+)/(\d+):`).FindAllStringSubmatch(sw.Appctl(t, "dpif/show"), -1) {
		of, _ := strconv.ParseUint(m[1], 10, 32)
		dp, _ := strconv.ParseUint(m[2], 10, 32)
		if of == 65534 {
			of = uint64(openflow.PortLocal)
		}
		b.odp[uint32(dp)] = uint32(of)
	}
	if len(b.odp) != 4 {
		t.Fatalf("dpif/show lists %d ports of br-ex, want 4: %v", len(b.odp), b.odp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if b.client, err = ofconn.Dial(ctx, "unix:"+sw.MgmtSocket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.client.Close() })
	return b
}

// install replaces the flows whose cookie is cookie under mask with flows,
// in one bundle, and checks the bridge then holds exactly them: the
// tracer reads what the switch has.
func (b *bridge) install(t *testing.T, flows []*openflow.FlowMod, cookie, mask uint64) {
	t.Helper()
	msgs := []openflow.Message{&openflow.FlowMod{Command: openflow.FlowDelete, Table: openflow.TableAll, Cookie: cookie, CookieMask: mask}}
	var want []string
	for _, fm := range flows {
		if fm.Cookie&mask != cookie {
			t.Fatalf("flow %v does not carry cookie %#x/%#x", fm, cookie, mask)
		}
		msgs = append(msgs, fm)
		want = append(want, fm.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.client.Bundle(ctx, msgs...); err != nil {
		t.Fatalf("install: %v", err)
	}
	var got []string
	for _, l := range strings.Split(b.sw.Ofctl(t, "dump-flows", b.sw.Bridge, "--no-stats", fmt.Sprintf("cookie=%#x/%#x", cookie, mask)), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_FLOW") {
			got = append(got, l)
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the bridge holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// maxRecirculations is more than any path through the flows under test
// recirculates (the firewall's ct, then the SNAT's).
const maxRecirculations = 3

// probe is one generated packet and the conntrack state every
// recirculation gives it.
type probe struct {
	packet trace.Packet
	state  uint32
}

// crossCheck traces each probe through flows (installed on b, plus OVS's
// default flow) with the tracer and with ofproto/trace, reports every
// disagreement, and returns the tracer's results.
func crossCheck(t *testing.T, b *bridge, flows []*openflow.FlowMod, probes []probe) []trace.Result {
	t.Helper()
	tables, err := trace.New(append(slices.Clone(flows), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	var results []trace.Result
	agreed, disagreed := 0, 0
	for _, pr := range probes {
		// Every recirculation finds the probe's state, in both models:
		// their defaults differ (ofproto/trace's lacks the snat or dnat
		// a translating ct gives).
		ct := trace.Conntrack{States: slices.Repeat([]uint32{pr.state}, maxRecirculations)}
		r, err := tables.Trace(pr.packet, ct)
		if err != nil {
			t.Errorf("tracer: %v", err)
			disagreed++
			continue
		}
		results = append(results, r)
		args := []string{"ofproto/trace", b.sw.Bridge, pr.packet.String()}
		for range maxRecirculations {
			args = append(args, "--ct-next", trace.CTStateString(pr.state, ","))
		}
		out := b.sw.Appctl(t, args...)
		o, err := parseOfprotoTrace(out, b.odp)
		if err == nil {
			err = agree(r, o)
		}
		if err != nil {
			disagreed++
			if disagreed <= 5 { // the first few in full
				t.Errorf("packet %v (ct-next %s): %v\ntracer:\n%vofproto/trace:\n%s", pr.packet, trace.CTStateString(pr.state, ","), err, r, out)
			}
			continue
		}
		agreed++
	}
	t.Logf("%d of %d packets: the tracer agrees with ofproto/trace (%d disagree)", agreed, len(probes), disagreed)
	if disagreed > 0 {
		t.Errorf("%d packets disagree", disagreed)
	}
	return results
}

// coverage logs how the packets ended and which flows none reached, and
// returns the ends by name.
func coverage(t *testing.T, flows []*openflow.FlowMod, probes []probe, results []trace.Result) map[string]int {
	t.Helper()
	ends := map[string]int{}
	hit := map[*openflow.FlowMod]bool{}
	for i, r := range results {
		for _, h := range r.Hits {
			hit[h.Flow] = true
		}
		if r.Dropped() {
			ends["drop"]++
		}
		for _, e := range r.Emits {
			in := probes[i].packet
			var end string
			switch {
			case e.Port == openflow.PortNormal:
				end = "NORMAL"
			case e.Packet.Src != in.Src:
				end = "SNAT to " + openflow.PortName(e.Port)
			case e.Packet.EthDst != in.EthDst:
				end = "readdressed to " + openflow.PortName(e.Port)
			default:
				end = "out " + openflow.PortName(e.Port)
			}
			if e.Packet.CTState != 0 {
				end += " after conntrack"
			}
			ends[end]++
		}
	}
	var missed []string
	for _, fm := range flows {
		if !hit[fm] {
			missed = append(missed, fm.String())
		}
	}
	t.Logf("ends: %v; %d of %d flows hit", ends, len(flows)-len(missed), len(flows))
	if len(missed) > 0 {
		t.Logf("flows no packet reached:\n  %s", strings.Join(missed, "\n  "))
	}
	return ends
}

// TestCrossCheckDataplaneFlows installs the flows egressflow renders for
// the test cluster (cluster_test.go) in four situations on one real
// bridge, n1 as it is, n1 fenced with its bridge MAC unknown, n2, and the
// cold guard, and checks that the tracer and ofproto/trace agree on every
// generated packet.
func TestCrossCheckDataplaneFlows(t *testing.T) {
	b := startBridge(t)
	t.Logf("seed %d", crossCheckSeed)
	rnd := rand.New(rand.NewPCG(crossCheckSeed, 0))
	cluster := testCluster()
	fenced := nodeConfig("n1")
	fenced.Fenced = true
	ports := dataplane.Ports{Uplink: b.uplink, BridgeMAC: b.mac}
	scenarios := []struct {
		name  string
		flows []*openflow.FlowMod
	}{
		{"n1", dataplane.Flows(nodeConfig("n1"), dataplane.Compute(nodeConfig("n1"), cluster, routingTables), ports)},
		{"n1 fenced, bridge MAC unknown", dataplane.Flows(fenced, dataplane.Compute(fenced, cluster, routingTables), dataplane.Ports{Uplink: b.uplink})},
		{"n2", dataplane.Flows(nodeConfig("n2"), dataplane.Compute(nodeConfig("n2"), cluster, routingTables), ports)},
		{"cold guard", dataplane.ColdGuardFlows(nodeConfig("n1"), ports)},
	}
	total := map[string]int{}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			b.install(t, s.flows, dataplane.CookiePrefix, dataplane.CookiePrefixMask)
			probes := make([]probe, packetsPerScenario)
			for i := range probes {
				probes[i] = clusterProbe(rnd, b)
			}
			results := crossCheck(t, b, s.flows, probes)
			for k, n := range coverage(t, s.flows, probes, results) {
				total[k] += n
			}
		})
	}
	// The generator must reach every way out, or agreement proves less.
	uplink := strconv.Itoa(int(b.uplink))
	for _, end := range []string{"drop", "NORMAL", "NORMAL after conntrack", "SNAT to " + uplink + " after conntrack", "readdressed to " + uplink,
		"readdressed to LOCAL", "out LOCAL after conntrack"} {
		if total[end] == 0 {
			t.Errorf("no generated packet ended %q (ends: %v)", end, total)
		}
	}
}

// TestCrossCheckHandFlows checks the tracer against ofproto/trace on the
// hand-written table (trace_test.go), for what egressflow's flows do not
// use yet.
func TestCrossCheckHandFlows(t *testing.T) {
	b := startBridge(t)
	t.Logf("seed %d", crossCheckSeed)
	rnd := rand.New(rand.NewPCG(crossCheckSeed, 1))
	const cookie = 0x16
	flows := parseFlows(t, handFlows)
	for _, fm := range flows {
		fm.Cookie = cookie
	}
	b.install(t, flows, cookie, ^uint64(0))
	probes := make([]probe, packetsHandFlows)
	for i := range probes {
		probes[i] = handProbe(rnd, b)
	}
	coverage(t, flows, probes, crossCheck(t, b, flows, probes))
}

// pick returns a random element of s.
func pick[T any](rnd *rand.Rand, s []T) T { return s[rnd.IntN(len(s))] }

// pickPair picks a source among sources and a destination of the same
// family among destinations (which must hold one).
func pickPair(rnd *rand.Rand, sources, destinations []string) (src, dst netip.Addr) {
	src = netip.MustParseAddr(pick(rnd, sources))
	for !dst.IsValid() || dst.Is4() != src.Is4() {
		dst = netip.MustParseAddr(pick(rnd, destinations))
	}
	return src, dst
}

// randomMAC is a unicast, locally administered MAC.
func randomMAC(rnd *rand.Rand) trace.MAC {
	m := trace.MAC{0x02}
	for i := 1; i < len(m); i++ {
		m[i] = byte(rnd.IntN(256))
	}
	return m
}

// clusterProbe generates a packet on the bridge of a node of the test
// cluster, in one of three shapes chosen at random: a pod's packet routed
// out by the host stack (from LOCAL), a packet from the outside (from the
// uplink: replies to LB IPs among them), or anything: from any port, with a
// source of every kind the pipeline tells apart (endpoints of each service,
// admitted, held and unknown pods, other nodes' pods, node IPs, the
// outside) to a destination inside or outside the cluster, an LB IP, or
// multicast. By TCP, UDP, SCTP, ICMP or another protocol; a recirculation
// finds a new connection or a reply.
func clusterProbe(rnd *rand.Rand, b *bridge) probe {
	var nodes []string
	for _, ips := range nodeIPs {
		nodes = append(nodes, ips...)
	}
	slices.Sort(nodes) // map order would make the run depend on more than the seed
	external := []string{"198.51.100.7", "203.0.113.9", "2001:db8:ff::1", "2001:db8:ff::2"}
	pods := [][]string{webEndpoints, apiEndpoints, dbEndpoints, netEndpoints, bystanders, heldPod, unknownPod, otherPods}
	inside := [][]string{otherPods, webEndpoints, {"10.96.0.10", "fd00:10:96::a"}, nodes}
	multicast := []string{"224.0.0.251", "255.255.255.255", "239.1.1.1", "ff02::1", "ff05::2"}
	var sources, destinations [][]string
	inPorts := append([]uint32{b.uplink, openflow.PortLocal}, b.pods...)
	switch rnd.IntN(3) {
	case 0: // routed out by the host stack
		inPorts = []uint32{openflow.PortLocal}
		sources, destinations = pods, append([][]string{external, external, external, multicast}, inside...)
	case 1: // from the outside
		inPorts = []uint32{b.uplink}
		sources, destinations = [][]string{external}, [][]string{lbIPs, lbIPs, nodes, webEndpoints, otherPods}
	default:
		sources = append(slices.Clone(pods), nodes, external)
		destinations = append([][]string{external, lbIPs, multicast}, inside...)
	}
	src := netip.MustParseAddr(pick(rnd, pick(rnd, sources)))
	var dst netip.Addr
	for !dst.IsValid() || dst.Is4() != src.Is4() {
		dst = netip.MustParseAddr(pick(rnd, pick(rnd, destinations)))
	}
	p := trace.Packet{InPort: pick(rnd, inPorts), EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd), Src: src, Dst: dst}
	if rnd.IntN(4) == 0 {
		p.DSCP = uint8(rnd.IntN(64))
	}
	randomTransport(rnd, &p)
	states := []uint32{
		openflow.CTStateTrk | openflow.CTStateNew,
		openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl,
	}
	if p.InPort == openflow.PortLocal && !slices.Contains(lbIPs, p.Dst.String()) {
		// On its way out, what SNAT finds: a connection it translates,
		// or a packet conntrack cannot tie to one (then it keeps its
		// source). A packet to an LB IP is never SNATed, and its reply
		// flow's nat would need to know what to undo.
		states = append(states,
			openflow.CTStateTrk|openflow.CTStateNew|openflow.CTStateSNAT,
			openflow.CTStateTrk|openflow.CTStateEst|openflow.CTStateSNAT,
			openflow.CTStateTrk|openflow.CTStateInv)
	}
	return probe{packet: p, state: pick(rnd, states)}
}

// randomTransport gives p a protocol and its header.
func randomTransport(rnd *rand.Rand, p *trace.Packet) {
	switch rnd.IntN(5) {
	case 0:
		p.Proto = trace.ProtoTCP
	case 1:
		p.Proto = trace.ProtoUDP
	case 2:
		p.Proto = trace.ProtoSCTP
	case 3:
		if p.Src.Is4() {
			p.Proto, p.ICMPType = trace.ProtoICMP, pick(rnd, []uint8{0, 3, 8})
		} else {
			p.Proto, p.ICMPType = trace.ProtoICMPv6, pick(rnd, []uint8{1, 128, 129})
		}
		return
	default:
		p.Proto = pick(rnd, []uint8{47, 50})
		return
	}
	p.SrcPort, p.DstPort = uint16(1024+rnd.IntN(60000)), pick(rnd, []uint16{53, 80, 443, uint16(1 + rnd.IntN(65535))})
}

// handProbe generates a packet for the hand-written table: sources and
// destinations in and around its prefixes, marks and DSCP it matches on.
func handProbe(rnd *rand.Rand, b *bridge) probe {
	sources := []string{"10.1.1.1", "10.1.2.1", "10.1.200.3", "172.16.0.1", "fd00:1::5", "fd00:1:ff::1", "2001:db8:1::1"}
	destinations := []string{"10.2.0.1", "10.9.0.1", "8.8.8.8", "10.1.1.2", "2001:db8:ff::1", "fd00:1::9"}
	src, dst := pickPair(rnd, sources, destinations)
	inPorts := append([]uint32{b.uplink, openflow.PortLocal}, b.pods...)
	p := trace.Packet{InPort: pick(rnd, inPorts), EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd), Src: src, Dst: dst,
		DSCP: pick(rnd, []uint8{0, 0, 46, 10}), PktMark: pick(rnd, []uint32{0, 0, 0x7, 0x107, 0x10})}
	randomTransport(rnd, &p)
	if rnd.IntN(3) == 0 {
		p.Proto, p.DstPort = pick(rnd, []uint8{trace.ProtoTCP, trace.ProtoUDP}), pick(rnd, []uint16{53, 80})
	}
	if rnd.IntN(2) == 0 { // the echo requests table 0 sorts out
		switch p.Proto {
		case trace.ProtoICMP:
			p.ICMPType = 8
		case trace.ProtoICMPv6:
			p.ICMPType = 128
		}
	}
	if rnd.IntN(8) == 0 {
		p = trace.Packet{InPort: p.InPort, EthSrc: p.EthSrc, EthDst: p.EthDst, EthType: 0x0806}
	}
	return probe{packet: p, state: pick(rnd, []uint32{
		openflow.CTStateTrk | openflow.CTStateNew,
		openflow.CTStateTrk | openflow.CTStateEst,
		openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl,
	})}
}
