package trace_test

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
)

// handFlows is a small table written by hand for what egressflow's own
// flows do not use yet: precedence among overlapping masks, resubmit and
// its misses, registers, marks and DSCP, ct with and without
// recirculation, output to the input port. The unit tests below say what
// it must do to a few packets; TestCrossCheckHandFlows holds the tracer to
// ofproto/trace on it for many more. Port 1 is the uplink, 2 and 3 other
// ports.
var handFlows = []string{
	"table=0,priority=300,in_port=1 actions=NORMAL",
	"table=0,priority=250,ip,nw_src=10.1.1.0/24,nw_dst=10.2.0.0/16 actions=output:2",
	"table=0,priority=200,ip,nw_src=10.1.0.0/16 actions=set_field:0x10->pkt_mark,goto_table:10",
	"table=0,priority=200,ipv6,ipv6_src=fd00:1::/32 actions=set_field:0x20->pkt_mark,goto_table:10",
	"table=0,priority=210,ipv6,ipv6_src=fd00:1:ff::/48 actions=goto_table:10",
	"table=0,priority=100,tcp,tcp_dst=80 actions=resubmit(,20),output:3",
	"table=0,priority=100,udp,udp_dst=53 actions=resubmit(,21),CONTROLLER:65535",
	"table=0,priority=90,icmp,icmp_type=8 actions=output:IN_PORT",
	"table=0,priority=90,icmp6,icmpv6_type=128 actions=output:2,output:3",
	"table=0,priority=80,ip,pkt_mark=0x7/0xff actions=set_field:02:00:00:00:00:bb->eth_dst,output:LOCAL",
	"table=10,priority=300,ip,ip_dscp=46 actions=set_field:0->ip_dscp,goto_table:11",
	"table=10,priority=200,pkt_mark=0x10/0xf0 actions=set_field:0x5->reg0,goto_table:11",
	"table=10,priority=200,pkt_mark=0x20 actions=set_field:0x5->reg0,set_field:0x3/0xf->reg1,goto_table:11",
	"table=10,priority=100 actions=drop",
	"table=11,priority=250,tcp6,reg0=0x5 actions=ct(commit,zone=9,nat(src=2001:db8::1)),set_field:02:00:00:00:00:aa->eth_dst,output:2",
	"table=11,priority=200,tcp,reg0=0x5 actions=ct(commit,zone=7,nat(src=192.0.2.1)),output:2",
	"table=11,priority=200,udp,reg0=0x5 actions=ct(commit,zone=8,nat(src=192.0.2.2),table=12),output:3",
	"table=11,priority=100,ip actions=ct(zone=9,table=12)",
	"table=11,priority=100,ipv6 actions=ct(zone=9,table=12)",
	"table=12,priority=200,ct_state=+new+trk,ip actions=set_field:0x1/0x1->pkt_mark,output:2",
	"table=12,priority=200,ct_state=-new+est+trk,ip actions=ct(commit,zone=10),resubmit(,13)",
	"table=12,priority=200,ct_state=-new+est+trk,ipv6 actions=ct(commit,zone=10),resubmit(,13)",
	"table=12,priority=100 actions=drop",
	"table=13,priority=200,ct_state=+trk actions=output:3",
	"table=13,priority=100 actions=LOCAL",
	"table=20,priority=100,ip,nw_dst=10.9.0.0/16 actions=set_field:10.9.9.9->ip_dst",
}

func parseFlows(t testing.TB, lines []string) []*openflow.FlowMod {
	t.Helper()
	var out []*openflow.FlowMod
	for _, l := range lines {
		fm, err := flowtext.ParseFlow(l)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out = append(out, fm)
	}
	return out
}

func handTables(t testing.TB) *trace.Tables {
	t.Helper()
	tables, err := trace.New(append(parseFlows(t, handFlows), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

func mustTrace(t testing.TB, tables *trace.Tables, p trace.Packet, ct trace.Conntrack) trace.Result {
	t.Helper()
	r, err := tables.Trace(p, ct)
	if err != nil {
		t.Fatalf("trace %v: %v", p, err)
	}
	return r
}

// path writes the tables and priorities a result hit, "miss" for a table
// that matched nothing: "0/200 10/200 11/200".
func path(r trace.Result) string {
	var s []string
	for _, h := range r.Hits {
		if h.Flow == nil {
			s = append(s, strconv.Itoa(int(h.Table))+"/miss")
			continue
		}
		s = append(s, strconv.Itoa(int(h.Table))+"/"+strconv.Itoa(int(h.Flow.Priority)))
	}
	return strings.Join(s, " ")
}

func tcp(in uint32, src, dst string, dport uint16) trace.Packet {
	return trace.Packet{InPort: in, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: dport}
}

func TestTraceHandFlows(t *testing.T) {
	tables := handTables(t)
	a := netip.MustParseAddr
	cases := []struct {
		name   string
		packet trace.Packet
		ct     trace.Conntrack
		path   string
		ports  []uint32
		check  func(t *testing.T, r trace.Result)
	}{{
		name:   "in_port outranks everything in table 0",
		packet: tcp(1, "10.1.1.1", "10.2.0.1", 80),
		path:   "0/300", ports: []uint32{openflow.PortNormal},
	}, {
		name:   "the longer prefix at a higher priority wins",
		packet: tcp(3, "10.1.1.1", "10.2.0.1", 80),
		path:   "0/250", ports: []uint32{2},
	}, {
		name:   "SNAT without recirculation: the packet leaves with the translated source, mark and register set",
		packet: tcp(openflow.PortLocal, "10.1.2.1", "8.8.8.8", 80),
		path:   "0/200 10/200 11/200", ports: []uint32{2},
		check: func(t *testing.T, r trace.Result) {
			out := r.Emits[0].Packet
			if out.Src != a("192.0.2.1") || out.PktMark != 0x10 || out.Regs[0] != 5 || out.CTState != 0 {
				t.Errorf("left as %v, want source 192.0.2.1, pkt_mark 0x10, reg0 5, conntrack cleared", out)
			}
		},
	}, {
		name:   "DSCP 46 is rewritten and skips the register",
		packet: trace.Packet{InPort: openflow.PortLocal, Src: a("10.1.2.1"), Dst: a("8.8.8.8"), Proto: trace.ProtoTCP, DSCP: 46},
		path:   "0/200 10/300 11/100 12/200", ports: []uint32{2},
		check: func(t *testing.T, r trace.Result) {
			out := r.Emits[0].Packet
			if out.DSCP != 0 || out.PktMark != 0x11 || out.CTState != openflow.CTStateTrk|openflow.CTStateNew || out.CTZone != 9 {
				t.Errorf("left as %v, want DSCP 0, pkt_mark 0x11 (bit 0 set after ct), ct_state new|trk in zone 9", out)
			}
		},
	}, {
		name:   "an established connection after recirculation is committed, untracked after the ct, and goes to LOCAL",
		packet: trace.Packet{InPort: 2, Src: a("10.1.2.1"), Dst: a("8.8.8.8"), Proto: 47, DSCP: 46},
		ct:     trace.Conntrack{States: []uint32{openflow.CTStateTrk | openflow.CTStateEst}},
		path:   "0/200 10/300 11/100 12/200 13/100", ports: []uint32{openflow.PortLocal},
	}, {
		name:   "ct with recirculation forks: the first pass outputs after the ct, the fork resumes later",
		packet: trace.Packet{InPort: openflow.PortLocal, Src: a("10.1.2.1"), Dst: a("8.8.8.8"), Proto: trace.ProtoUDP, DstPort: 53},
		path:   "0/200 10/200 11/200 12/200", ports: []uint32{3, 2},
		check: func(t *testing.T, r trace.Result) {
			for _, e := range r.Emits {
				if e.Packet.Src != a("192.0.2.2") {
					t.Errorf("output %d with source %v, want the SNAT address 192.0.2.2 on both", e.Port, e.Packet.Src)
				}
			}
			if r.Emits[0].Packet.CTState != 0 || r.Emits[1].Packet.CTZone != 8 {
				t.Errorf("first pass %v, fork %v: want the first pass untracked, the fork in zone 8", r.Emits[0].Packet, r.Emits[1].Packet)
			}
		},
	}, {
		name:   "IPv6 SNAT then a MAC rewrite",
		packet: tcp(3, "fd00:1::5", "2001:db8:ff::1", 443),
		path:   "0/200 10/200 11/250", ports: []uint32{2},
		check: func(t *testing.T, r trace.Result) {
			out := r.Emits[0].Packet
			if out.Src != a("2001:db8::1") || out.EthDst != (trace.MAC{2, 0, 0, 0, 0, 0xaa}) || out.Regs[1] != 3 {
				t.Errorf("left as %v", out)
			}
		},
	}, {
		name:   "resubmit rewrites the destination and returns; the output after it sends the rewritten packet",
		packet: tcp(2, "172.16.0.1", "10.9.0.1", 80),
		path:   "0/100 20/100", ports: []uint32{3},
		check: func(t *testing.T, r trace.Result) {
			if r.Emits[0].Packet.Dst != a("10.9.9.9") {
				t.Errorf("left as %v", r.Emits[0].Packet)
			}
		},
	}, {
		name:   "a resubmit that misses does nothing; the controller still gets the packet",
		packet: trace.Packet{InPort: 2, Src: a("172.16.0.1"), Dst: a("8.8.8.8"), Proto: trace.ProtoUDP, DstPort: 53},
		path:   "0/100 21/miss", ports: []uint32{openflow.PortController},
	}, {
		name:   "IN_PORT sends back; a plain output to the input port is skipped",
		packet: trace.Packet{InPort: 3, Src: a("172.16.0.1"), Dst: a("8.8.8.8"), Proto: trace.ProtoICMP, ICMPType: 8},
		path:   "0/90", ports: []uint32{3},
	}, {
		name:   "output to the input port is skipped",
		packet: trace.Packet{InPort: 3, Src: a("2001:db8:1::1"), Dst: a("2001:db8:2::1"), Proto: trace.ProtoICMPv6, ICMPType: 128},
		path:   "0/90", ports: []uint32{2},
	}, {
		name:   "a masked mark matches; LOCAL with a rewritten MAC",
		packet: trace.Packet{InPort: 2, Src: a("172.16.0.1"), Dst: a("8.8.8.8"), Proto: 47, PktMark: 0x307},
		path:   "0/80", ports: []uint32{openflow.PortLocal},
	}, {
		name:   "a field the packet lacks never matches: OVS's NORMAL",
		packet: trace.Packet{InPort: 2, EthType: 0x0806},
		path:   "0/0", ports: []uint32{openflow.PortNormal},
	}, {
		name:   "a goto_table that finds a drop",
		packet: tcp(2, "fd00:1:ff::1", "2001:db8:ff::1", 443),
		path:   "0/210 10/100", ports: nil,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustTrace(t, tables, c.packet, c.ct)
			var ports []uint32
			for _, e := range r.Emits {
				ports = append(ports, e.Port)
			}
			if path(r) != c.path || fmtPorts(ports) != fmtPorts(c.ports) {
				t.Fatalf("path %q to %v, want %q to %v:\n%v", path(r), fmtPorts(ports), c.path, fmtPorts(c.ports), r)
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

func fmtPorts(ports []uint32) string {
	var s []string
	for _, p := range ports {
		s = append(s, openflow.PortName(p))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestNewRefusesWhatItDoesNotModel: a flow the tracer cannot model is an
// error when the tables are read, whether or not a packet would hit it.
func TestNewRefusesWhatItDoesNotModel(t *testing.T) {
	for _, flow := range []string{
		"table=0,priority=10,tun_id=0x5 actions=NORMAL",
		"table=0,priority=10,ip,nw_ttl=3 actions=NORMAL",
		"table=0,priority=10 actions=write_actions(output:1)",
		"table=0,priority=10 actions=write_metadata:0x1",
		"table=0,priority=10 actions=FLOOD",
		"table=0,priority=10 actions=dec_ttl,NORMAL",
		"table=0,priority=10 actions=learn(table=5,NXM_OF_ETH_DST[]=NXM_OF_ETH_SRC[],output:NXM_OF_IN_PORT[])",
		"table=0,priority=10,tcp actions=set_field:80->tcp_dst,NORMAL",
		"table=0,priority=10 actions=resubmit(2,5)",
		"table=0,priority=10 actions=ct(commit,exec(set_field:0x1->ct_mark),table=1)",
		"table=0,priority=10 actions=ct(exec(set_field:0x1->ct_mark)),NORMAL",
		"table=0,priority=10 actions=ct(commit,zone=NXM_NX_REG0[0..15]),NORMAL",
		"table=0,priority=10,ip actions=ct(commit,nat(src=192.0.2.1-192.0.2.9)),NORMAL",
		"table=0,priority=10,ip actions=ct(nat(src=192.0.2.1),table=1)",
		"table=0,priority=10,ip actions=ct(zone=5,nat),NORMAL",
		"table=5,priority=10 actions=goto_table:3",
	} {
		fm, err := flowtext.ParseFlow(flow)
		if err != nil {
			t.Fatalf("%s: %v", flow, err)
		}
		if _, err := trace.New([]*openflow.FlowMod{fm}); err == nil {
			t.Errorf("New accepted %q, which it does not model", flow)
		}
	}
	del := parseFlows(t, []string{"table=0,priority=10 actions=NORMAL"})[0]
	del.Command = openflow.FlowDelete
	if _, err := trace.New([]*openflow.FlowMod{del}); err == nil {
		t.Error("New accepted a flow delete")
	}
}

// TestTraceRefusesWhatItCannotDecide: two flows of one priority that both
// match, a resubmit loop, and an undone translation the model does not
// know are errors, not a guess.
func TestTraceRefusesWhatItCannotDecide(t *testing.T) {
	a := netip.MustParseAddr
	tables, err := trace.New(parseFlows(t, []string{
		"table=0,priority=10,ip,nw_src=10.0.0.0/8 actions=output:1",
		"table=0,priority=10,ip,nw_dst=10.0.0.0/8 actions=output:2",
		"table=0,priority=20,ip,nw_src=192.168.0.1 actions=resubmit(,0)",
		"table=0,priority=20,ip,nw_dst=192.0.2.10 actions=ct(zone=5,nat,table=1)",
		"table=1,priority=10 actions=LOCAL",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		packet trace.Packet
		ct     trace.Conntrack
	}{
		{"two flows of one priority", trace.Packet{InPort: 3, Src: a("10.0.0.1"), Dst: a("10.0.0.2")}, trace.Conntrack{}},
		{"a resubmit loop", trace.Packet{InPort: 3, Src: a("192.168.0.1"), Dst: a("8.8.8.8")}, trace.Conntrack{}},
		{"an unknown translation to undo", trace.Packet{InPort: 3, Src: a("8.8.8.8"), Dst: a("192.0.2.10")},
			trace.Conntrack{States: []uint32{openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl | openflow.CTStateDNAT}}},
	} {
		if r, err := tables.Trace(c.packet, c.ct); err == nil {
			t.Errorf("%s: traced without error:\n%v", c.name, r)
		}
	}
	// Only one of two flows of a priority matching is no ambiguity.
	if r := mustTrace(t, tables, trace.Packet{InPort: 3, Src: a("10.0.0.1"), Dst: a("8.8.8.8")}, trace.Conntrack{}); fmtPorts(portsOf(r)) != "[1]" {
		t.Errorf("got\n%v", r)
	}
	// With the translation known, the reply is un-NATed and delivered.
	unnat := trace.Conntrack{
		States: []uint32{openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl | openflow.CTStateDNAT},
		Unnat:  func(p trace.Packet) trace.Packet { p.Dst = a("10.244.1.5"); return p },
	}
	r := mustTrace(t, tables, trace.Packet{InPort: 3, Src: a("8.8.8.8"), Dst: a("192.0.2.10")}, unnat)
	if fmtPorts(portsOf(r)) != "[LOCAL]" || r.Emits[0].Packet.Dst != a("10.244.1.5") || r.Emits[0].Packet.CTZone != 5 {
		t.Errorf("reply with a known translation:\n%v", r)
	}
}

// TestLaterFlowReplacesEarlier: a flow with the table, priority and match
// of an earlier one replaces it, as an add does on a switch.
func TestLaterFlowReplacesEarlier(t *testing.T) {
	tables, err := trace.New(parseFlows(t, []string{
		"table=0,priority=10,ip actions=output:1",
		"table=0,priority=10,ip actions=output:2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := mustTrace(t, tables, trace.Packet{InPort: 3, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}, trace.Conntrack{})
	if fmtPorts(portsOf(r)) != "[2]" {
		t.Errorf("got\n%v", r)
	}
}

func portsOf(r trace.Result) []uint32 {
	var ports []uint32
	for _, e := range r.Emits {
		ports = append(ports, e.Port)
	}
	return ports
}

// TestTraceFragments: an IP fragment's ports (and ICMP type) read as 0,
// its first fragment's too, as on a bridge whose fragment handling is
// "normal": a Deny by port lets the datagram's fragments through, and
// only a flow on ip_frag catches them. ip_frag=yes matches first and
// later fragments, not a whole datagram; ip_frag=later only later ones.
// An IPv6 fragment after the first reads as protocol 44 (the Fragment
// header), as Open vSwitch extracts it: a flow on UDP misses it.
func TestTraceFragments(t *testing.T) {
	a := netip.MustParseAddr
	byPort, err := trace.New(parseFlows(t, []string{
		"table=0,priority=200,udp,udp_dst=5353 actions=drop",
		"table=0,priority=200,icmp,icmp_type=8 actions=drop",
		"table=0,priority=100,ip actions=output:2",
		"table=0,priority=100,ipv6 actions=output:2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	withFrag, err := trace.New(parseFlows(t, []string{
		"table=0,priority=200,udp,udp_dst=5353 actions=drop",
		"table=0,priority=200,udp,nw_frag=yes actions=drop",
		"table=0,priority=200,udp6,udp_dst=5353 actions=drop",
		"table=0,priority=200,udp6,nw_frag=yes actions=drop",
		"table=0,priority=150,ipv6,nw_proto=44,nw_frag=later actions=output:3",
		"table=0,priority=100,ip actions=output:2",
		"table=0,priority=100,ipv6 actions=output:2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	const first, later = openflow.IPFragAny, openflow.IPFragAny | openflow.IPFragLater
	udp := func(dst string, port uint16, frag uint8) trace.Packet {
		return trace.Packet{InPort: 1, Src: a("10.1.1.1"), Dst: a(dst), Proto: trace.ProtoUDP, SrcPort: 40000, DstPort: port, Frag: frag}
	}
	udp6 := func(frag uint8) trace.Packet {
		return trace.Packet{InPort: 1, Src: a("fd00:1::5"), Dst: a("2001:db8::9"), Proto: trace.ProtoUDP, SrcPort: 40000, DstPort: 5353, Frag: frag}
	}
	for _, c := range []struct {
		name   string
		tables *trace.Tables
		packet trace.Packet
		path   string
		ports  []uint32
	}{
		{"a whole datagram to the denied port", byPort, udp("203.0.113.10", 5353, 0), "0/200", nil},
		{"its first fragment passes a Deny by port", byPort, udp("203.0.113.10", 5353, first), "0/100", []uint32{2}},
		{"a later fragment passes a Deny by port", byPort, udp("203.0.113.10", 5353, later), "0/100", []uint32{2}},
		{"an ICMP fragment's type reads as 0", byPort, trace.Packet{InPort: 1, Src: a("10.1.1.1"), Dst: a("203.0.113.10"),
			Proto: trace.ProtoICMP, ICMPType: 8, Frag: first}, "0/100", []uint32{2}},
		{"a whole ICMP echo request", byPort, trace.Packet{InPort: 1, Src: a("10.1.1.1"), Dst: a("203.0.113.10"),
			Proto: trace.ProtoICMP, ICMPType: 8}, "0/200", nil},
		{"ip_frag=yes drops the first fragment", withFrag, udp("203.0.113.10", 5353, first), "0/200", nil},
		{"ip_frag=yes drops a later IPv4 fragment, still UDP", withFrag, udp("203.0.113.10", 53, later), "0/200", nil},
		{"ip_frag=yes leaves a whole datagram to its port", withFrag, udp("203.0.113.10", 53, 0), "0/100", []uint32{2}},
		{"udp6 and ip_frag=yes drop the first IPv6 fragment", withFrag, udp6(first), "0/200", nil},
		{"a later IPv6 fragment is protocol 44, not UDP", withFrag, udp6(later), "0/150", []uint32{3}},
	} {
		r := mustTrace(t, c.tables, c.packet, trace.Conntrack{})
		if path(r) != c.path || fmtPorts(portsOf(r)) != fmtPorts(c.ports) {
			t.Errorf("%s: %v: path %q to %v, want %q to %v:\n%v", c.name, c.packet, path(r), fmtPorts(portsOf(r)), c.path, fmtPorts(c.ports), r)
		}
	}
	if s := udp("203.0.113.10", 5353, first).String(); !strings.Contains(s, ",udp,") || !strings.Contains(s, ",nw_frag=first,udp_src=40000,udp_dst=5353") {
		t.Errorf("a first fragment written %q, want udp, nw_frag=first and the ports it carries", s)
	}
	if s := udp("203.0.113.10", 5353, later).String(); !strings.Contains(s, ",udp,") || !strings.HasSuffix(s, ",nw_frag=later") {
		t.Errorf("a later IPv4 fragment written %q, want udp, nw_frag=later and no ports (it has no transport header)", s)
	}
	if s := udp6(later).String(); !strings.Contains(s, ",ipv6,nw_proto=44,") || !strings.HasSuffix(s, ",nw_frag=later") {
		t.Errorf("a later IPv6 fragment written %q, want protocol 44, nw_frag=later and no ports", s)
	}
}
