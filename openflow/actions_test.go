package openflow_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
)

func TestGoldenActionsAgainstOvsParseActions(t *testing.T) {
	for _, text := range oftest.GoldenActions {
		t.Run(text, func(t *testing.T) {
			acts, err := flowtext.ParseActionText(text)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			ours := openflow.FormatActions(acts)
			if len(acts) == 0 {
				ours = "drop"
			}
			if ours != text {
				t.Errorf("our text %q is not the canonical input", ours)
			}
			b, err := openflow.AppendActions(nil, acts)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if len(b) > 0 {
				if got := oftest.OvsParseActions(t, b); got != text {
					t.Errorf("ovs-ofctl reads our bytes %x as %q", b, got)
				}
			}
			back, err := openflow.ParseActions(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(back, acts) {
				t.Errorf("decoded %#v\nwant    %#v", back, acts)
			}
		})
	}
}

// TestGoldenInstructions checks the instruction encodings the same way.
func TestGoldenInstructions(t *testing.T) {
	for _, text := range []string{
		"output:1,goto_table:3",
		"clear_actions,write_actions(output:1,group:2),write_metadata:0x5/0xff,goto_table:9",
		"write_metadata:0x1",
		"drop",
	} {
		insts, err := flowtext.ParseInstructionsText(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if got := openflow.FormatInstructions(insts); got != text {
			t.Errorf("our text %q != %q", got, text)
		}
		b, err := openflow.AppendInstructions(nil, insts)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 {
			if got := oftest.OvsParseInstructions(t, b); got != text {
				t.Errorf("ovs-ofctl reads our instructions %x as %q, want %q", b, got, text)
			}
		}
		back, err := openflow.ParseInstructions(b)
		if err != nil || !reflect.DeepEqual(back, insts) {
			t.Errorf("decode %q: %v\n%#v", text, err, back)
		}
	}
}

// TestUnknownActionsAreOpaque decodes actions this package does not model
// (some Open vSwitch knows, one nobody knows) and checks they re-encode
// byte for byte inside a flow and never fail a decode.
func TestUnknownActionsAreOpaque(t *testing.T) {
	for _, h := range []string{
		// multipath, bundle, sample and controller2 as Open vSwitch encodes them.
		"ffff0020000023200020000100000000000000000000000000000001000000080000" + "0000",
		"ffff0018000023200015000000000000000000000000000000000000",
		// an experimenter nobody knows
		"ffff0010deadbeef0001020304050607",
		// an OpenFlow action type from the future
		"00c80008000000aa",
	} {
		b := oftest.MustHex(t, h)
		if len(b)%8 != 0 {
			continue
		}
		acts, err := openflow.ParseActions(b)
		if err != nil {
			t.Errorf("%s: %v", h, err)
			continue
		}
		again, err := openflow.AppendActions(nil, acts)
		if err != nil || string(again) != string(b) {
			t.Errorf("%s re-encodes as %x (%v)", h, again, err)
		}
		for _, a := range acts {
			if _, ok := a.(openflow.RawAction); !ok {
				t.Errorf("%s decoded as %T, want RawAction", h, a)
			}
			// raw(...) text parses back to the same action.
			back, err := flowtext.ParseActionText(a.String())
			if err != nil || !reflect.DeepEqual(back, []openflow.Action{a}) {
				t.Errorf("raw text %q does not parse back: %v", a.String(), err)
			}
		}
	}
}

// TestOvsKnownActionsWeDoNotModel takes actions only Open vSwitch models,
// encoded by ovs-ofctl itself, and checks a flow carrying them decodes and
// re-encodes byte for byte.
func TestOvsKnownActionsWeDoNotModel(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	for _, text := range []string{
		"priority=1 actions=multipath(eth_src,50,modulo_n,1,0,NXM_NX_REG0[0..5])",
		"priority=1 actions=bundle(eth_src,0,hrw,ofport,members:4,8)",
		"priority=1 actions=sample(probability=12345,collector_set_id=23456,obs_domain_id=34567,obs_point_id=45678)",
		"priority=1 actions=controller(reason=no_match,id=5,userdata=01.02)",
		"ip,priority=1 actions=check_pkt_larger(1500)->NXM_NX_REG0[0]",
		"priority=1 actions=learn(table=1,limit=10,result_dst=NXM_NX_REG0[0],NXM_OF_VLAN_TCI[0..11])",
	} {
		wire := fs.OfctlFlowMod(t, "add-flow", text)
		_, msg, err := openflow.UnmarshalMessage(wire)
		if err != nil {
			t.Errorf("%s: decode: %v", text, err)
			continue
		}
		again, err := openflow.MarshalMessage(binary.BigEndian.Uint32(wire[4:]), msg)
		if err != nil || string(again) != string(wire) {
			t.Errorf("%s: re-encoding differs:\n%s", text, oftest.HexDiff(again, wire))
		}
		if !strings.Contains(msg.(*openflow.FlowMod).String(), "raw(") {
			t.Errorf("%s: expected an opaque action, got %s", text, msg.(*openflow.FlowMod).String())
		}
	}
}

func TestNATText(t *testing.T) {
	for _, c := range []struct {
		nat  openflow.NAT
		text string
	}{
		{openflow.NAT{}, "nat"},
		{openflow.NAT{Flags: openflow.NATSrc}, "nat(src)"},
		{openflow.NAT{Flags: openflow.NATDst, MinAddr: netip.MustParseAddr("10.0.0.1"), MinPort: 80}, "nat(dst=10.0.0.1:80)"},
		{openflow.NAT{Flags: openflow.NATSrc | openflow.NATPersistent, MinAddr: netip.MustParseAddr("fd00::1"), MaxAddr: netip.MustParseAddr("fd00::2")}, "nat(src=fd00::1-fd00::2,persistent)"},
	} {
		if got := c.nat.String(); got != c.text {
			t.Errorf("%#v: %q, want %q", c.nat, got, c.text)
		}
	}
}

// TestDecTTLControllerIDs decodes NXAST_DEC_TTL_CNT_IDS: as DecTTL with
// its ids when the text form can say it, verbatim otherwise.
func TestDecTTLControllerIDs(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want openflow.Action
	}{
		// dec_ttl(56,89), as ovs-ofctl encodes it.
		{"ffff001800002320001500020000000000380059" + "00000000", openflow.DecTTL{ControllerIDs: []uint16{56, 89}}},
		// Four ids fill the first 8 bytes after the header exactly.
		{"ffff001800002320001500040000000000010002" + "00030004", openflow.DecTTL{ControllerIDs: []uint16{1, 2, 3, 4}}},
		// No ids ("dec_ttl()" would read back as plain dec_ttl), nonzero
		// reserved bytes, nonzero padding, room for more ids than counted.
		{"ffff001000002320001500000000000000000000", nil},
		{"ffff001800002320001500010000000100050000" + "00000000", nil},
		{"ffff001800002320001500010000000000050001" + "00000000", nil},
		{"ffff002000002320001500010000000000050000" + "0000000000000000" + "00000000", nil},
	} {
		b := oftest.MustHex(t, c.hex)
		if len(b)%8 != 0 {
			b = b[:len(b)-len(b)%8]
		}
		acts, err := openflow.ParseActions(b)
		if err != nil || len(acts) != 1 {
			t.Errorf("%s: %v %v", c.hex, acts, err)
			continue
		}
		want := c.want
		if want == nil {
			want = openflow.RawAction{Data: b}
		}
		if !reflect.DeepEqual(acts[0], want) {
			t.Errorf("%s decodes as %#v, want %#v", c.hex, acts[0], want)
		}
		if again, err := openflow.AppendActions(nil, acts); err != nil || string(again) != string(b) {
			t.Errorf("%s re-encodes as %x (%v)", c.hex, again, err)
		}
	}
}

// TestParseRefusesWhatItCannotEncode: text ovs-ofctl reads, but which
// this package cannot send as ovs-ofctl would, is refused with an error
// naming the part (the differential test counts these over generated
// texts; these are examples).
func TestParseRefusesWhatItCannotEncode(t *testing.T) {
	for _, c := range []struct{ text, part string }{
		{"actions=multipath(eth_src,50,modulo_n,1,0,NXM_NX_REG0[0..5])", `action "multipath"`},
		{"actions=controller(reason=no_match)", `controller argument "reason"`},
		{"actions=output:NXM_NX_REG0[0..15]", "output:NXM_NX_REG0[0..15]"},
		{"actions=learn(limit=10,NXM_NX_REG0[])", `learn argument "limit"`},
		{"tun_metadata0=0x5 actions=drop", `match field "tun_metadata0"`},
		{"nw_src=10.0.0.1 actions=drop", "nw_src"},                                      // without ip: ovs-ofctl leaves it out
		{"ip,tp_dst=80 actions=drop", "tp_dst"},                                         // without tcp, udp or sctp
		{"icmp6,icmp_type=135,icmp_code=1,nd_target=fe80::1 actions=drop", "nd_target"}, // not a neighbor discovery
		{"ct_tp_src=80 actions=drop", "ct_tp_src"},                                      // without ct_nw_proto
		{"vlan_tci=0x2000/0x2000 actions=drop", "vlan_tci"},                             // part of the priority
		{"ip actions=mod_nw_tos:8", `action "mod_nw_tos"`},
		{"modify cookie=0x5,ip actions=drop", "a cookie without a mask in modify"}, // OpenFlow 1.5 cannot set it
	} {
		_, err := flowtext.ParseFlow(c.text)
		var ue *flowtext.UnsupportedError
		if !errors.As(err, &ue) || ue.Part != c.part {
			t.Errorf("ParseFlow(%q) = %v, want an UnsupportedError for %s", c.text, err, c.part)
		}
	}
	// mod_tp_src writes the port of the flow's protocol: ParseFlow knows
	// it, an action list alone does not.
	fm, err := flowtext.ParseFlow("udp actions=mod_tp_src:5")
	if err != nil || !reflect.DeepEqual(fm.Actions(), []openflow.Action{openflow.SetFieldUint(openflow.FieldUDPSrc, 5)}) {
		t.Errorf("udp actions=mod_tp_src:5 = %v, %v; want set_field:5->udp_src", fm, err)
	}
	var ue *flowtext.UnsupportedError
	if _, err := flowtext.ParseActionText("mod_tp_src:5"); !errors.As(err, &ue) {
		t.Errorf("ParseActionText(mod_tp_src:5) = %v, want an UnsupportedError", err)
	}
}
