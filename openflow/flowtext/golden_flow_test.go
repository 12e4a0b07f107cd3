package flowtext_test

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
)

func TestGoldenFlowsAgainstOvsOfctl(t *testing.T) {
	fs := oftest.StartFakeSwitch(t)
	for _, text := range oftest.GoldenFlows {
		t.Run(text, func(t *testing.T) {
			fm, err := flowtext.ParseFlow(text)
			if err != nil {
				t.Fatalf("ParseFlow: %v", err)
			}
			ours, err := openflow.MarshalMessage(0x11, fm)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			theirs := fs.OfctlFlowMod(t, "add-flow", text)
			if !oftest.SameExceptXid(ours, theirs) {
				t.Errorf("encoding differs from ovs-ofctl add-flow:\n%s", oftest.HexDiff(ours, theirs))
			}
			// Decode ovs-ofctl's bytes and re-encode them.
			_, msg, err := openflow.UnmarshalMessage(theirs)
			if err != nil {
				t.Fatalf("decode ovs-ofctl's FLOW_MOD: %v", err)
			}
			again, err := openflow.MarshalMessage(binary.BigEndian.Uint32(theirs[4:]), msg)
			if err != nil || !oftest.SameExceptXid(again, theirs) {
				t.Errorf("decode+encode of ovs-ofctl's bytes is not byte-exact (err %v):\n%s", err, oftest.HexDiff(again, theirs))
			}
			// Our text equals what ovs-ofctl prints for the same flow in a dump.
			if got := msg.(*openflow.FlowMod).String(); got != fm.String() {
				t.Errorf("String of decoded flow %q != of parsed flow %q", got, fm.String())
			}
			flow := openflow.Flow{Table: fm.Table, Priority: fm.Priority, IdleTimeout: fm.IdleTimeout, HardTimeout: fm.HardTimeout,
				Flags: fm.Flags, Importance: fm.Importance, Cookie: fm.Cookie, Match: fm.Match, Instructions: fm.Instructions,
				Stats: openflow.Stats{Present: openflow.StatDuration | openflow.StatIdleTime | openflow.StatPacketCount | openflow.StatByteCount,
					DurationSec: 3, DurationNsec: 250000000, IdleSec: 2, PacketCount: 7, ByteCount: 700}}
			reply, err := openflow.MarshalMessage(2, &openflow.FlowDescReply{Flows: []openflow.Flow{flow}})
			if err != nil {
				t.Fatal(err)
			}
			printed := oftest.OfpPrint(t, reply)
			lines := strings.Split(printed, "\n")
			if len(lines) != 2 {
				t.Fatalf("ofp-print of our flow reply:\n%s", printed)
			}
			if want, got := strings.TrimPrefix(lines[1], " "), flow.String(); got != want {
				t.Errorf("Flow.String() differs from ovs-ofctl:\n ours   %s\n theirs %s", got, want)
			}
			// The text is canonical: it is the input itself.
			if fm.String() != text {
				t.Errorf("FlowMod.String() = %q, want the canonical input", fm.String())
			}
		})
	}
}

// TestParseStringRoundTrip: Parse(String(f)) == f, for flows built in Go,
// for every golden flow, and for dumped flows (whose statistics the parser
// skips).
func TestParseStringRoundTrip(t *testing.T) {
	var fms []*openflow.FlowMod
	for i := 0; i < 50; i++ {
		fms = append(fms, oftest.SNATFlow(i*7919, uint64(i)))
	}
	for _, text := range oftest.GoldenFlows {
		fms = append(fms, oftest.MustParseFlow(t, text))
	}
	for _, text := range []string{"delete cookie=0x5/0xff, table=3, ip", "delete_strict table=0, priority=7,ip",
		"modify cookie=0x1/0x1, ip actions=drop", "delete out_port=2, out_group=3"} {
		fms = append(fms, oftest.MustParseFlow(t, text))
	}
	for _, fm := range fms {
		back, err := flowtext.ParseFlow(fm.String())
		if err != nil {
			t.Errorf("%s: %v", fm, err)
			continue
		}
		if !reflect.DeepEqual(back, fm) {
			t.Errorf("Parse(String(f)) != f for %s:\n%#v\n%#v", fm, back, fm)
		}
		if fm.Command != openflow.FlowAdd {
			continue
		}
		flow := openflow.Flow{Table: fm.Table, Priority: fm.Priority, IdleTimeout: fm.IdleTimeout, HardTimeout: fm.HardTimeout,
			Flags: fm.Flags, Importance: fm.Importance, Cookie: fm.Cookie, Match: fm.Match, Instructions: fm.Instructions,
			Stats: openflow.Stats{Present: openflow.StatDuration | openflow.StatIdleTime, DurationSec: 5, IdleSec: 1, PacketCount: 9}}
		back, err = flowtext.ParseFlow(flow.String())
		if err != nil || !reflect.DeepEqual(back, flow.FlowMod()) {
			t.Errorf("Parse(Flow.String()) != flow for %s: %v", flow.String(), err)
		}
	}
}
