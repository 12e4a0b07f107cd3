package openflow_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
)

// goldenMessages are one of every message this package models, with their
// bytes and what `ovs-ofctl ofp-print` says about those bytes.
func goldenMessages(t testing.TB) []struct {
	xid   uint32
	msg   openflow.Message
	hex   string
	print string
} {
	fm := oftest.MustParseFlow(t, "cookie=0x5, table=2, priority=100,ip,nw_src=10.1.0.5 actions=output:2")
	var ipMatch openflow.Match
	ipMatch.SetUint(openflow.FieldEthType, 0x0800)
	var inPort1 openflow.Match
	inPort1.SetUint(openflow.FieldInPort, 1)
	var fromController openflow.Match
	fromController.SetUint(openflow.FieldInPort, uint64(openflow.PortController))
	flow := openflow.Flow{Table: 1, Priority: 7, Cookie: 0x10, Match: ipMatch, Instructions: []openflow.Instruction{openflow.Apply(openflow.Output{Port: 1})},
		Stats: openflow.Stats{Present: openflow.StatDuration | openflow.StatIdleTime | openflow.StatPacketCount | openflow.StatByteCount,
			DurationSec: 1, DurationNsec: 5000000, IdleSec: 1, PacketCount: 2, ByteCount: 120}}
	// properties: the packet, table 44, the cookie, the reason (action).
	const packetIn2Props = "00000026ffffffffffff0011223344550800450000140001000040117cca0a0000010a0000020000000300052c0000000004001000000000ef104500000000050005000501000000"
	packetIn2 := &openflow.PacketIn2{Properties: oftest.MustHex(t, packetIn2Props), Table: 44, Cookie: 0xef10450000000005, Reason: openflow.PacketInApplyAction,
		Data: oftest.MustHex(t, "ffffffffffff0011223344550800450000140001000040117cca0a0000010a000002")}
	return []struct {
		xid   uint32
		msg   openflow.Message
		hex   string
		print string
	}{
		{1, &openflow.Hello{Versions: []uint8{6}}, "06000010000000010001000800000040",
			"OFPT_HELLO (OF1.5) (xid=0x1):\n version bitmap: 0x06"},
		{1, &openflow.Hello{Versions: []uint8{1, 4, 6}}, "06000010000000010001000800000052",
			"OFPT_HELLO (OF1.5) (xid=0x1):\n version bitmap: 0x01, 0x04, 0x06"},
		{2, &openflow.Error{Type: openflow.ErrBundleFailed, Code: openflow.BundleErrMsgFailed, Data: []byte{6, 0x14, 0, 8, 0, 0, 0, 9}},
			"06010014000000020011000d0614000800000009",
			"OFPT_ERROR (OF1.5) (xid=0x2): OFPBFC_MSG_FAILED\nOFPT_BARRIER_REQUEST (OF1.5) (xid=0x9):"},
		{2, &openflow.Error{Type: openflow.ErrExperimenter, Code: 2, Experimenter: openflow.NiciraExperimenter}, "0601001000000002ffff000200002320",
			"OFPT_ERROR (OF1.5) (xid=0x2): NXBRC_NXM_INVALID\nOpenFlow message is empty"},
		{3, &openflow.EchoRequest{Data: []byte("ping")}, "0602000c0000000370696e67",
			"OFPT_ECHO_REQUEST (OF1.5) (xid=0x3): 4 bytes of payload\n00000000  70 69 6e 67                                     |ping            |"},
		{3, &openflow.EchoReply{Data: []byte("ping")}, "0603000c0000000370696e67",
			"OFPT_ECHO_REPLY (OF1.5) (xid=0x3): 4 bytes of payload\n00000000  70 69 6e 67                                     |ping            |"},
		{4, &openflow.FeaturesRequest{}, "0605000800000004", "OFPT_FEATURES_REQUEST (OF1.5) (xid=0x4):"},
		{4, &openflow.FeaturesReply{DatapathID: 0xabcd, Tables: 254, Capabilities: 0x4f},
			"0606002000000004000000000000abcd00000000fe0000000000004f00000000",
			"OFPT_FEATURES_REPLY (OF1.5) (xid=0x4): dpid:000000000000abcd\nn_tables:254, n_buffers:0\ncapabilities: FLOW_STATS TABLE_STATS PORT_STATS GROUP_STATS QUEUE_STATS"},
		{5, &openflow.GetConfigRequest{}, "0607000800000005", "OFPT_GET_CONFIG_REQUEST (OF1.5) (xid=0x5):"},
		{5, &openflow.GetConfigReply{openflow.SwitchConfig{Flags: openflow.ConfigFragNormal, MissSendLen: 128}}, "0608000c0000000500000080",
			"OFPT_GET_CONFIG_REPLY (OF1.5) (xid=0x5): frags=normal miss_send_len=128"},
		{5, &openflow.SetConfig{openflow.SwitchConfig{Flags: openflow.ConfigFragDrop, MissSendLen: 0xffff}}, "0609000c000000050001ffff",
			"OFPT_SET_CONFIG (OF1.5) (xid=0x5): frags=drop miss_send_len=65535"},
		{6, fm, "060e006000000006000000000000000500000000000000000200000000000064ffffffffffffffffffffffff000000000001001280000a020800800016040a010005000000000000000400180000000000000010000000020000000000000000",
			"OFPT_FLOW_MOD (OF1.5) (xid=0x6): ADD table:2 priority=100,ip,nw_src=10.1.0.5 cookie:0x5 actions=output:2"},
		{7, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: 0x5, CookieMask: 0xff},
			"06120038000000070001000000000000ff000000ffffffffffffffff00000000000000000000000500000000000000ff0001000400000000",
			"OFPST_FLOW request (OF1.5) (xid=0x7):"},
		{7, &openflow.FlowDescReply{Flags: openflow.MultipartMore, Flows: []openflow.Flow{flow}},
			"061300880000000700010001000000000078000001000007000000000000000000000000000000100001000a80000a020800000000000000000000348002000800000001004c4b4080020208000000010000000080020808000000000000000280020a08000000000000007800000000000400180000000000000010000000010000000000000000",
			"OFPST_FLOW reply (OF1.5) (xid=0x7): flags=[more]\n cookie=0x10, duration=1.005s, table=1, n_packets=2, n_bytes=120, idle_age=1, priority=7,ip actions=output:1"},
		{8, &openflow.PortDescRequest{}, "0612001800000008000d000000000000ffffffff00000000",
			"OFPST_PORT_DESC request (OF1.5) (xid=0x8): port=ANY"},
		{8, &openflow.PortDescReply{Ports: []openflow.Port{
			{PortNo: 1, HWAddr: net.HardwareAddr{0, 0x11, 0x22, 0x33, 0x44, 0x55}, Name: "eth1", HasEthernet: true, CurrSpeed: 10000000, MaxSpeed: 10000000, Curr: 0x802},
			{PortNo: openflow.PortLocal, HWAddr: net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}, Name: "br-ex", Config: 1, State: 1}}},
			"0613008000000008000d000000000000000000010048000000112233445500006574683100000000000000000000000000000000000000000000002000000000000008020000000000000000000000000098968000989680fffffffe00280000aabbccddeeff000062722d657800000000000000000000000000000100000001",
			"OFPST_PORT_DESC reply (OF1.5) (xid=0x8):\n 1(eth1): addr:00:11:22:33:44:55\n     config:     0\n     state:      0\n     current:    10MB-FD COPPER\n     speed: 10000 Mbps now, 10000 Mbps max\n LOCAL(br-ex): addr:aa:bb:cc:dd:ee:ff\n     config:     PORT_DOWN\n     state:      LINK_DOWN\n     speed: 0 Mbps now, 0 Mbps max"},
		{9, &openflow.BarrierRequest{}, "0614000800000009", "OFPT_BARRIER_REQUEST (OF1.5) (xid=0x9):"},
		{9, &openflow.BarrierReply{}, "0615000800000009", "OFPT_BARRIER_REPLY (OF1.5) (xid=0x9):"},
		{10, &openflow.BundleControl{BundleID: 7, Type: openflow.BundleOpenRequest, Flags: openflow.BundleAtomic | openflow.BundleOrdered},
			"062100100000000a0000000700000003",
			"OFPT_BUNDLE_CONTROL (OF1.5) (xid=0xa):\n bundle_id=0x7 type=OPEN_REQUEST flags=atomic ordered"},
		{10, &openflow.BundleControl{BundleID: 7, Type: openflow.BundleCloseRequest, Flags: openflow.BundleAtomic | openflow.BundleOrdered},
			"062100100000000a0000000700020003",
			"OFPT_BUNDLE_CONTROL (OF1.5) (xid=0xa):\n bundle_id=0x7 type=CLOSE_REQUEST flags=atomic ordered"},
		{10, &openflow.BundleControl{BundleID: 7, Type: openflow.BundleCommitReply, Flags: openflow.BundleAtomic | openflow.BundleOrdered},
			"062100100000000a0000000700050003",
			"OFPT_BUNDLE_CONTROL (OF1.5) (xid=0xa):\n bundle_id=0x7 type=COMMIT_REPLY flags=atomic ordered"},
		{10, &openflow.BundleControl{BundleID: 7, Type: openflow.BundleDiscardRequest, Flags: openflow.BundleAtomic | openflow.BundleOrdered},
			"062100100000000a0000000700060003",
			"OFPT_BUNDLE_CONTROL (OF1.5) (xid=0xa):\n bundle_id=0x7 type=DISCARD_REQUEST flags=atomic ordered"},
		{11, &openflow.BundleAdd{BundleID: 7, Flags: openflow.BundleAtomic | openflow.BundleOrdered, Message: fm},
			"062200700000000b0000000700000003060e00600000000b000000000000000500000000000000000200000000000064ffffffffffffffffffffffff000000000001001280000a020800800016040a010005000000000000000400180000000000000010000000020000000000000000",
			"OFPT_BUNDLE_ADD_MESSAGE (OF1.5) (xid=0xb):\n bundle_id=0x7 flags=atomic ordered\nOFPT_FLOW_MOD (OF1.5) (xid=0xb): ADD table:2 priority=100,ip,nw_src=10.1.0.5 cookie:0x5 actions=output:2"},
		{12, &openflow.CTFlushZone{Zone: 5}, "060400180000000c000023200000001d0000000000000005",
			"NXT_CT_FLUSH_ZONE (OF1.5) (xid=0xc): zone_id=5"},
		{13, &openflow.CTFlush{Proto: 17, Zone: 5, HasZone: true, Orig: openflow.CTTuple{Src: netip.MustParseAddr("10.0.0.1"),
			Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1000, DstPort: 2000}},
			"060400680000000d0000232000000020110000000000000000000048000000000000001400000000000000000000ffff0a000001000000000001001400000000000000000000ffff0a000002000000000002000803e800000003000807d000000002000800050000",
			"NXT_CT_FLUSH (OF1.5) (xid=0xd): zone=5 'ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,ct_tp_src=1000,ct_tp_dst=2000,ct_nw_proto=17' 'ct_nw_src=::,ct_nw_dst=::,ct_tp_src=0,ct_tp_dst=0'"},
		// A DNS reply (UDP from port 53) punted by an output to CONTROLLER.
		{7, &openflow.PacketIn{BufferID: openflow.NoBuffer, TotalLen: 46, Reason: openflow.PacketInApplyAction, Cookie: 0xef10450000000005, Match: inPort1,
			Data: oftest.MustHex(t, "0200000000010200000000020800450000200001000040110000"+"0a0000010af4010500359c40000c000061626364")},
			"060a005800000007ffffffff002e0100ef104500000000050001000c800000040000000100000000000002000000000102000000000208004500002000010000401100000a0000010af4010500359c40000c000061626364",
			"OFPT_PACKET_IN (OF1.5) (xid=0x7): cookie=0xef10450000000005 total_len=46 in_port=1 (via action) data_len=46 (unbuffered)\nudp,vlan_tci=0x0000,dl_src=02:00:00:00:00:02,dl_dst=02:00:00:00:00:01,nw_src=10.0.0.1,nw_dst=10.244.1.5,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=53,tp_dst=40000 udp_csum:0"},
		// Continuations (controller(pause)): the format that carries them,
		// a packet-in of that format, and its resumption.
		{5, &openflow.SetPacketInFormat{Format: openflow.PacketInNX2}, "0604001400000005000023200000001000000002",
			"NXT_SET_PACKET_IN_FORMAT (OF1.5) (xid=0x5): format=nxt_packet_in2"},
		{5, packetIn2, "0604005800000005000023200000001e" + packetIn2Props,
			"NXT_PACKET_IN2 (OF1.5) (xid=0x5): table_id=44 cookie=0xef10450000000005 total_len=34  (via action) data_len=34 (unbuffered)\nudp,vlan_tci=0x0000,dl_src=00:11:22:33:44:55,dl_dst=ff:ff:ff:ff:ff:ff,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=0,tp_dst=0"},
		{5, packetIn2.Resume(), "0604005800000005000023200000001c" + packetIn2Props,
			"NXT_RESUME (OF1.5) (xid=0x5): table_id=44 cookie=0xef10450000000005 total_len=34  (via action) data_len=34 (unbuffered)\nudp,vlan_tci=0x0000,dl_src=00:11:22:33:44:55,dl_dst=ff:ff:ff:ff:ff:ff,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=0,tp_dst=0"},
		// A gratuitous ARP for 198.51.100.20, sent out of port 2.
		{9, &openflow.PacketOut{BufferID: openflow.NoBuffer, Match: fromController, Actions: []openflow.Action{openflow.Output{Port: 2}},
			Data: oftest.MustHex(t, "ffffffffffff0200000000aa08060001080006040001"+"0200000000aac6336414"+"000000000000c6336414")},
			"060d005a00000009ffffffff001000000001000c80000004fffffffd0000000000000010000000020000000000000000ffffffffffff0200000000aa080600010800060400010200000000aac6336414000000000000c6336414",
			"OFPT_PACKET_OUT (OF1.5) (xid=0x9): in_port=CONTROLLER actions=output:2 data_len=42\narp,vlan_tci=0x0000,dl_src=02:00:00:00:00:aa,dl_dst=ff:ff:ff:ff:ff:ff,arp_spa=198.51.100.20,arp_tpa=198.51.100.20,arp_op=1,arp_sha=02:00:00:00:00:aa,arp_tha=00:00:00:00:00:00"},
	}
}

// TestGoldenMessages checks every modelled message three ways: our bytes
// equal the golden bytes, ovs-ofctl ofp-print reads those bytes as the
// expected message, and decoding them gives back the same value, which
// re-encodes byte for byte.
func TestGoldenMessages(t *testing.T) {
	for _, g := range goldenMessages(t) {
		name := g.msg.MsgType().String()
		t.Run(name, func(t *testing.T) {
			want := oftest.MustHex(t, g.hex)
			got, err := openflow.MarshalMessage(g.xid, g.msg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("encoding:\n got  %x\n want %x", got, want)
			}
			if p := oftest.OfpPrint(t, want); p != g.print {
				t.Errorf("ovs-ofctl ofp-print:\n%s\nwant:\n%s", p, g.print)
			}
			h, msg, err := openflow.UnmarshalMessage(want)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if h.Xid != g.xid || h.Type != g.msg.MsgType() || int(h.Length) != len(want) {
				t.Errorf("header %v", h)
			}
			if !reflect.DeepEqual(msg, g.msg) {
				t.Errorf("decoded %#v\nwant    %#v", msg, g.msg)
			}
			again, err := openflow.MarshalMessage(g.xid, msg)
			if err != nil || !reflect.DeepEqual(again, want) {
				t.Errorf("re-encoding: %v\n got  %x\n want %x", err, again, want)
			}
		})
	}
}

// TestErrorNames checks every error name in our table against the name
// ovs-ofctl prints for the same type and code, and that the Go error text
// says what failed.
func TestErrorNames(t *testing.T) {
	var hexes []string
	var errs []*openflow.Error
	for key, name := range openflow.ErrorCodeNames {
		e := &openflow.Error{Type: openflow.ErrorType(key >> 16), Code: uint16(key), Data: []byte{6, 0x14, 0, 8, 0, 0, 0, 0x42}}
		if e.Name() != name {
			t.Errorf("%v code %d: Name() = %s, want %s", e.Type, e.Code, e.Name(), name)
		}
		b, err := openflow.MarshalMessage(1, e)
		if err != nil {
			t.Fatal(err)
		}
		hexes = append(hexes, hex.EncodeToString(b))
		errs = append(errs, e)
	}
	for code, name := range openflow.NiciraErrorNames {
		e := &openflow.Error{Type: openflow.ErrExperimenter, Code: code, Experimenter: openflow.NiciraExperimenter}
		b, _ := openflow.MarshalMessage(1, e)
		hexes = append(hexes, hex.EncodeToString(b))
		errs = append(errs, e)
		if e.Name() != name {
			t.Errorf("NX code %d: Name() = %s, want %s", code, e.Name(), name)
		}
	}
	for i, h := range hexes {
		first := strings.SplitN(oftest.OfpPrint(t, oftest.MustHex(t, h)), "\n", 2)[0]
		if !strings.HasSuffix(first, " "+errs[i].Name()) {
			t.Errorf("ovs-ofctl prints %q for %s, we say %s", first, h, errs[i].Name())
		}
	}
	e := &openflow.Error{Type: openflow.ErrBadAction, Code: 4, Data: []byte{6, 0x0e, 0, 8, 0, 0, 0, 0x42}}
	if got, want := e.Error(), "openflow: switch rejected the request: OFPBAC_BAD_OUT_PORT (bad_action, code 4) for OFPT_FLOW_MOD xid 0x42"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errorsIs(e, &openflow.Error{Type: openflow.ErrBadAction, Code: 4}) || errorsIs(e, &openflow.Error{Type: openflow.ErrBadAction, Code: 5}) {
		t.Error("errors.Is does not compare type and code")
	}
}

// TestFlowModCommandsAgainstOvsOfctl compares every FlowMod command with
// what ovs-ofctl sends for add-flow, mod-flows and del-flows, strict and not.
func TestFlowModCommandsAgainstOvsOfctl(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	cases := []struct {
		args []string
		text string
	}{
		{[]string{"add-flow"}, "table=3, priority=5,ip actions=drop"},
		{[]string{"mod-flows"}, "modify cookie=0x5/0xff, table=3, ip actions=output:1"},
		{[]string{"--strict", "mod-flows"}, "modify_strict priority=7,ip actions=drop"},
		{[]string{"del-flows"}, "delete cookie=0x5/0xff, table=3, ip,nw_src=10.0.0.1"},
		{[]string{"--strict", "del-flows"}, "delete_strict table=3, priority=5,ip"},
		{[]string{"del-flows"}, "delete out_port=5"},
		{[]string{"del-flows"}, "delete"},
	}
	for _, c := range cases {
		t.Run(c.text, func(t *testing.T) {
			fm := oftest.MustParseFlow(t, c.text)
			if fm.String() != c.text {
				t.Errorf("String() = %q, want %q", fm.String(), c.text)
			}
			ours, err := openflow.MarshalMessage(1, fm)
			if err != nil {
				t.Fatal(err)
			}
			_, ofctlText, _ := strings.Cut(c.text, " ")
			if c.args[0] == "add-flow" {
				ofctlText = c.text
			}
			if c.text == "delete" {
				ofctlText = ""
			}
			args := append(append([]string(nil), c.args...), "SWITCH")
			if ofctlText != "" {
				args = append(args, strings.ReplaceAll(ofctlText, ", ", ","))
			}
			msgs := fs.Ofctl(t, args...)
			if len(msgs) != 1 || !oftest.SameExceptXid(ours, msgs[0]) {
				t.Fatalf("ovs-ofctl %v sent %x\nwe encode %x", args, msgs, ours)
			}
		})
	}
}

// TestRequestsAgainstOvsOfctl compares the requests the client sends with
// the ones ovs-ofctl sends for the same operation.
func TestRequestsAgainstOvsOfctl(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	var m openflow.Match
	m.SetUint(openflow.FieldReg(0), 1)
	check := func(ours openflow.Message, args ...string) {
		t.Helper()
		b, err := openflow.MarshalMessage(1, ours)
		if err != nil {
			t.Fatal(err)
		}
		msgs := fs.Ofctl(t, args...)
		if len(msgs) == 0 || !oftest.SameExceptXid(b, msgs[0]) {
			t.Errorf("ovs-ofctl %v sent %x\nwe encode %x", args, msgs, b)
		}
	}
	check(&openflow.FlowDescRequest{Table: 3, Cookie: 5, CookieMask: 0xff, Match: m}, "dump-flows", "SWITCH", "table=3,cookie=0x5/0xff,reg0=1")
	check(&openflow.FlowDescRequest{Table: openflow.TableAll}, "dump-flows", "SWITCH")
	check(&openflow.PortDescRequest{}, "dump-ports-desc", "SWITCH")
	check(&openflow.CTFlushZone{Zone: 5}, "ct-flush-zone", "SWITCH", "5")
	check(&openflow.CTFlush{Proto: 17, Zone: 5, HasZone: true, Orig: openflow.CTTuple{Src: netip.MustParseAddr("10.0.0.1"),
		Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1000, DstPort: 2000}},
		"ct-flush", "SWITCH", "zone=5", "ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,ct_nw_proto=17,ct_tp_src=1000,ct_tp_dst=2000")
	check(&openflow.CTFlush{Proto: 1, Orig: openflow.CTTuple{Src: netip.MustParseAddr("10.0.0.1"), ICMPID: 5, ICMPType: 8}},
		"ct-flush", "SWITCH", "ct_nw_src=10.0.0.1,ct_nw_proto=1,icmp_id=5,icmp_type=8,icmp_code=0")
	check(&openflow.CTFlush{Orig: openflow.CTTuple{Src: netip.MustParseAddr("fd00::1")}, Reply: openflow.CTTuple{Dst: netip.MustParseAddr("fd00::2")}},
		"ct-flush", "SWITCH", "ct_ipv6_src=fd00::1", "ct_ipv6_dst=fd00::2")
}

// TestOpaqueMessages: messages, multipart bodies and instructions this
// package does not model decode into opaque values that re-encode byte for
// byte (a bridge shared with other controllers has things we never send).
func TestOpaqueMessages(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	for _, c := range []struct {
		hex  string
		want string
	}{
		// OFPT_ROLE_STATUS, a message type we do not model.
		{"061e001800000003000000020000000000000000000000aa", "*openflow.RawMessage"},
		// A table-stats multipart request and reply.
		{"06120010000000040003000000000000", "*openflow.MultipartRequest"},
		{"06130010000000040003000000000000", "*openflow.MultipartReply"},
		// An experimenter message of an unknown experimenter.
		{"0604001400000005deadbeef0000000101020304", "*openflow.Experimenter"},
		// A Nicira experimenter message we do not model (NXT_SET_ASYNC_CONFIG2).
		{"06040010000000060000232000000021", "*openflow.Experimenter"},
	} {
		b := oftest.MustHex(t, c.hex)
		_, m, err := openflow.UnmarshalMessage(b)
		if err != nil {
			t.Errorf("%s: %v", c.hex, err)
			continue
		}
		if got := reflect.TypeOf(m).String(); got != c.want {
			t.Errorf("%s decoded as %s, want %s", c.hex, got, c.want)
		}
		again, err := openflow.MarshalMessage(binary.BigEndian.Uint32(b[4:]), m)
		if err != nil || !reflect.DeepEqual(again, b) {
			t.Errorf("%s re-encodes as %x (%v)", c.hex, again, err)
		}
	}
	// A flow with a meter instruction and a stat-trigger instruction,
	// neither of which we model, as ovs-ofctl sends the first.
	wire := fs.OfctlFlowMod(t, "add-flow", "priority=1 actions=meter:1,output:2")
	_, m, err := openflow.UnmarshalMessage(wire)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := openflow.MarshalMessage(binary.BigEndian.Uint32(wire[4:]), m)
	if !reflect.DeepEqual(again, wire) {
		t.Errorf("flow with a meter does not re-encode:\n%s", oftest.HexDiff(again, wire))
	}
	insts, err := openflow.ParseInstructions(oftest.MustHex(t, "0007001000000000"+"0000000000000000"))
	if err != nil || len(insts) != 1 {
		t.Fatalf("stat trigger: %v %v", insts, err)
	}
	if _, ok := insts[0].(openflow.RawInstruction); !ok {
		t.Errorf("stat trigger decoded as %T", insts[0])
	}
}

// TestBatch: messages encoded ahead in a Batch send the same bytes as the
// messages themselves and decode back to them; a message that cannot be
// encoded ahead is refused and leaves the batch as it was.
func TestBatch(t *testing.T) {
	msgs := []openflow.Message{
		oftest.MustParseFlow(t, "cookie=0xef1003eb78a54401,table=41,priority=200,ip,nw_src=10.244.1.5,actions=ct(commit,zone=61189,nat(src=192.0.2.10)),output:1"),
		&openflow.EchoRequest{Data: []byte("ping")},
		oftest.MustParseFlow(t, "delete_strict cookie=0x1/-1,table=1,priority=10,ip,nw_src=10.0.0.2"),
	}
	var b openflow.Batch
	for _, m := range msgs {
		if err := b.Add(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Add(&openflow.BundleAdd{Message: msgs[0]}); err == nil {
		t.Error("a BundleAdd was encoded ahead, though its body holds its xid")
	}
	if b.Len() != len(msgs) {
		t.Fatalf("Len %d, want %d", b.Len(), len(msgs))
	}
	for i, m := range msgs {
		direct, err := openflow.MarshalMessage(7, m)
		if err != nil {
			t.Fatal(err)
		}
		ahead, err := openflow.MarshalMessage(7, b.At(i))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(direct, ahead) {
			t.Fatalf("message %d encoded ahead differs:\n%s", i, oftest.HexDiff(ahead, direct))
		}
		back, err := b.At(i).(*openflow.RawMessage).Decode()
		if err != nil {
			t.Fatal(err)
		}
		if openflow.Describe(back) != openflow.Describe(m) {
			t.Errorf("message %d decoded as %s, want %s", i, openflow.Describe(back), openflow.Describe(m))
		}
	}
	// Join keeps the order of its parts; empty parts vanish.
	j := openflow.Join(openflow.List[openflow.Message](msgs[:1]), nil, openflow.List[*openflow.FlowMod]{}, &b, openflow.List[openflow.Message](msgs[1:2]))
	if j.Len() != 5 || j.At(0) != msgs[0] || openflow.Describe(j.At(3)) != openflow.Describe(msgs[2]) || j.At(4) != msgs[1] {
		t.Errorf("Join: %d messages, in the wrong order", j.Len())
	}
	if _, err := (&openflow.RawMessage{Type: openflow.TypeFlowMod, Body: []byte{1, 2, 3}}).Decode(); err == nil {
		t.Error("a truncated flow mod decoded")
	}

	// Enough flows to fill several of the batch's buffers: each comes back
	// whole, wherever a buffer ended.
	var big openflow.Batch
	const n = 50000
	for i := range n {
		fm := &openflow.FlowMod{Command: openflow.FlowAdd, Table: 1, Priority: 10, Cookie: uint64(i)}
		fm.Match.Set(openflow.FieldEthType, []byte{0x08, 0x00})
		if err := big.Add(fm); err != nil {
			t.Fatal(err)
		}
	}
	if big.Len() != n || big.Size() < 2*openflow.BatchChunk {
		t.Fatalf("%d messages in %d bytes: want %d in more than two buffers", big.Len(), big.Size(), n)
	}
	for i := range n {
		m, err := big.At(i).(*openflow.RawMessage).Decode()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if fm, ok := m.(*openflow.FlowMod); !ok || fm.Cookie != uint64(i) {
			t.Fatalf("message %d decoded as %v", i, m)
		}
	}

	// Reset empties it for reuse; what is added next reads back as added.
	big.Reset()
	if big.Len() != 0 || big.Size() != 0 {
		t.Fatalf("after Reset: %d messages, %d bytes", big.Len(), big.Size())
	}
	for _, m := range msgs {
		if err := big.Add(m); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range msgs {
		if openflow.Describe(big.At(i)) != openflow.Describe(m) {
			t.Errorf("after Reset, message %d is %s, want %s", i, openflow.Describe(big.At(i)), openflow.Describe(m))
		}
	}
}

func errorsIs(err, target error) bool {
	type iser interface{ Is(error) bool }
	if x, ok := err.(iser); ok {
		return x.Is(target)
	}
	return false
}
