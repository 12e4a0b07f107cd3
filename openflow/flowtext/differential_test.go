package flowtext_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/flowtext"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/test/ovstest"
)

// The differential test of the text form: random flow texts (flowgen_test.go)
// checked three ways against Open vSwitch.
//
//  1. Bytes. ovs-ofctl -O OpenFlow15 add-flows sends the texts to a fake
//     switch on a unix socket that records each FLOW_MOD (openflow/internal/oftest);
//     every text ParseFlow accepts must encode to exactly those bytes
//     (transaction id aside).
//  2. Text. ovs-ofctl's bytes for every add are installed on a real switch
//     (test/ovstest); each installed flow, dumped through our client,
//     decoded and printed with Flow.String, must read exactly as in
//     `ovs-ofctl dump-flows` (statistics aside), and ParseFlow must read
//     ovs-ofctl's dump line back to the same flow.
//  3. Refusals. Texts ParseFlow refuses are counted and listed by reason,
//     with an example each.
//
// The number of texts is diffFlowsDefault per run of `go test` (and so of
// `make test`); OPENFLOW_DIFF_FLOWS raises it (`make fuzz` does), and
// OPENFLOW_DIFF_SEED replays the run a failure names.
const diffFlowsDefault = 300

// diffEnvInt reads an integer environment variable, def when unset.
func diffEnvInt(t *testing.T, name string, def int64) int64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

func TestTextAgainstOvsOfctl(t *testing.T) {
	n := int(diffEnvInt(t, "OPENFLOW_DIFF_FLOWS", diffFlowsDefault))
	seed := diffEnvInt(t, "OPENFLOW_DIFF_SEED", time.Now().UnixNano())
	t.Logf("%d flow texts, seed %d (OPENFLOW_DIFF_SEED=%d OPENFLOW_DIFF_FLOWS=%d replays this run)", n, seed, seed, n)
	gen := newFlowTextGen(seed)
	flows := make([]genFlow, n)
	for i := range flows {
		flows[i] = gen.flow(i)
	}

	theirs := ofctlFlowModsFor(t, flows)

	// 1. Bytes, and the refusals.
	type refusal struct {
		count   int
		example string
	}
	refusals := map[string]*refusal{}
	accepted := make([]bool, n)
	var byteMismatches []string
	for i, f := range flows {
		fm, err := flowtext.ParseFlow(f.text)
		if err != nil {
			r := refusals[refusalReason(err)]
			if r == nil {
				r = &refusal{example: f.text}
				refusals[refusalReason(err)] = r
			}
			r.count++
			continue
		}
		accepted[i] = true
		ours, err := openflow.MarshalMessage(1, fm)
		if err != nil {
			byteMismatches = append(byteMismatches, fmt.Sprintf("%s\n  parsed but does not encode: %v", f.text, err))
			continue
		}
		if !oftest.SameExceptXid(ours, theirs[i]) {
			_, msg, _ := openflow.UnmarshalMessage(theirs[i])
			var theirText string
			if msg != nil {
				theirText = msg.(*openflow.FlowMod).String()
			}
			byteMismatches = append(byteMismatches, fmt.Sprintf("%s\n  ours   %s\n  theirs %s\n%s", f.text, fm.String(), theirText, oftest.HexDiff(ours, theirs[i])))
		}
	}

	// 2. The adds, installed as ovs-ofctl encodes them, dumped both ways.
	textMismatches, rawDecoded, installed := compareDumps(t, flows, theirs, accepted)

	nAccepted := 0
	for _, a := range accepted {
		if a {
			nAccepted++
		}
	}
	var report strings.Builder
	fmt.Fprintf(&report, "%d texts: %d accepted (%d byte mismatches), %d refused; %d adds installed and dumped (%d text mismatches, %d refused texts whose flow decodes to raw())\n",
		n, nAccepted, len(byteMismatches), n-nAccepted, installed, len(textMismatches), rawDecoded)
	reasons := make([]string, 0, len(refusals))
	for r := range refusals {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(a, b int) bool {
		if refusals[reasons[a]].count != refusals[reasons[b]].count {
			return refusals[reasons[a]].count > refusals[reasons[b]].count
		}
		return reasons[a] < reasons[b]
	})
	for _, r := range reasons {
		fmt.Fprintf(&report, "  refused %3d× %s\n        e.g. %s\n", refusals[r].count, r, refusals[r].example)
	}
	t.Log(report.String())
	for _, m := range byteMismatches {
		t.Errorf("accepted, but encodes differently from ovs-ofctl: %s", m)
	}
	for _, m := range textMismatches {
		t.Errorf("dumped flow prints differently from ovs-ofctl: %s", m)
	}
}

// refusalReason names why ParseFlow refused a text, as a category:
// the unsupported part when the parser says which, else the error text
// with its numbers and quoted values taken out.
func refusalReason(err error) string {
	var ue *flowtext.UnsupportedError
	if errors.As(err, &ue) {
		return ue.Error()
	}
	var pe *flowtext.ParseError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return "other: " + reasonValues.ReplaceAllString(err.Error(), "…")
}

var reasonValues = regexp.MustCompile(`"[^"]*"|0x[0-9a-fA-F]+|\b[0-9]+\b`)

// ofctlFlowModsFor returns the FLOW_MOD ovs-ofctl sends for each text, in
// one add-flows run (per text only to name the ones it refuses, which
// fails the test: the generator must write valid flows).
func ofctlFlowModsFor(t *testing.T, flows []genFlow) [][]byte {
	fs := oftest.StartFakeSwitch(t)
	file := filepath.Join(t.TempDir(), "flows.txt")
	var b strings.Builder
	for _, f := range flows {
		b.WriteString(f.text)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	msgs, out, err := fs.TryOfctl(t, "add-flows", "SWITCH", file)
	if err != nil {
		var refused []string
		one := filepath.Join(t.TempDir(), "flow.txt")
		for _, f := range flows {
			if err := os.WriteFile(one, []byte(f.text+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, out, err := fs.TryOfctl(t, "add-flows", "SWITCH", one); err != nil {
				refused = append(refused, fmt.Sprintf("%s\n  %s", f.text, strings.TrimSpace(string(out))))
			}
		}
		t.Fatalf("ovs-ofctl add-flows refused %d generated texts (a generator bug); first error: %s\n%s",
			len(refused), strings.TrimSpace(string(out)), strings.Join(refused, "\n"))
	}
	var fms [][]byte
	for _, m := range msgs {
		if openflow.MessageType(m[1]) == openflow.TypeFlowMod {
			fms = append(fms, m)
		}
	}
	if len(fms) != len(flows) {
		t.Fatalf("ovs-ofctl sent %d FLOW_MODs for %d texts", len(fms), len(flows))
	}
	return fms
}

var dumpStats = regexp.MustCompile(`duration=[0-9.]+s, |n_packets=[0-9]+, |n_bytes=[0-9]+, |idle_age=[0-9]+, |hard_age=[0-9]+, `)

// compareDumps installs ovs-ofctl's FLOW_MOD for every add on a real
// switch and compares, flow by flow, our dump's text with ovs-ofctl's.
// A flow whose text ParseFlow refused may print raw() where Open vSwitch
// has words; those are counted, not compared.
func compareDumps(t *testing.T, flows []genFlow, theirs [][]byte, accepted []bool) (mismatches []string, rawDecoded, installed int) {
	sw := ovstest.Start(t)
	for g := 1; g <= genGroups; g++ {
		sw.Ofctl(t, "add-group", sw.Bridge, fmt.Sprintf("group_id=%d,type=all,bucket=output:1", g))
	}
	for m := 1; m <= genMeters; m++ {
		sw.Ofctl(t, "add-meter", sw.Bridge, fmt.Sprintf("meter=%d,kbps,band=type=drop,rate=1000", m))
	}
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 2*time.Minute)
	var msgs []openflow.Message
	var idx []int
	for i, f := range flows {
		if f.add {
			msgs = append(msgs, &openflow.RawMessage{Type: openflow.TypeFlowMod, Body: theirs[i][openflow.HeaderLen:]})
			idx = append(idx, i)
		}
	}
	refused, err := c.SendThenBarrier(ctx, msgs)
	if err != nil {
		t.Fatalf("installing ovs-ofctl's flow mods: %v", err)
	}
	if len(refused) > 0 {
		var lines []string
		for _, r := range refused {
			lines = append(lines, fmt.Sprintf("%s\n  %s", flows[idx[r.Index]].text, r.Err.Name()))
		}
		t.Fatalf("the switch refused %d of ovs-ofctl's flow mods for generated texts (a generator bug):\n%s", len(refused), strings.Join(lines, "\n"))
	}

	theirLines := map[uint64]string{} // with statistics, which flowtext.ParseFlow skips
	for _, l := range oftest.OfctlFlows(t, sw) {
		cookie, err := strconv.ParseUint(strings.TrimPrefix(strings.SplitN(l, ",", 2)[0], "cookie="), 0, 64)
		if err != nil {
			t.Fatalf("dump line without a cookie: %s", l)
		}
		theirLines[cookie] = l
	}
	dumped, err := c.DumpFlows(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll})
	if err != nil {
		t.Fatalf("DumpFlows: %v", err)
	}
	ours := map[uint64]*openflow.Flow{}
	for i := range dumped {
		ours[dumped[i].Cookie] = &dumped[i]
	}
	for i, f := range flows {
		if !f.add {
			continue
		}
		installed++
		flow, theirLine := ours[f.cookie], theirLines[f.cookie]
		if flow == nil || theirLine == "" {
			mismatches = append(mismatches, fmt.Sprintf("%s\n  not in both dumps (ours %v, ovs-ofctl %q)", f.text, flow != nil, theirLine))
			continue
		}
		ourLine := dumpStats.ReplaceAllString(flow.String(), "")
		if ourLine != dumpStats.ReplaceAllString(theirLine, "") {
			if !accepted[i] && strings.Contains(ourLine, "raw(") {
				rawDecoded++
				continue
			}
			mismatches = append(mismatches, fmt.Sprintf("%s\n  ours      %s\n  ovs-ofctl %s", f.text, ourLine, dumpStats.ReplaceAllString(theirLine, "")))
			continue
		}
		if !accepted[i] {
			continue
		}
		// ovs-ofctl's own canonical text of the flow reads back as the
		// flow that was dumped, but for what that text does not say.
		back, err := flowtext.ParseFlow(theirLine)
		if err != nil {
			mismatches = append(mismatches, fmt.Sprintf("%s\n  ParseFlow of ovs-ofctl's dump line %q: %v", f.text, theirLine, err))
			continue
		}
		dumpedFM := flow.FlowMod()
		dumpedFM.Match = unprintedAway(dumpedFM.Match)
		a, errA := openflow.MarshalMessage(1, back)
		b, errB := openflow.MarshalMessage(1, dumpedFM)
		if errA != nil || errB != nil || !oftest.SameExceptXid(a, b) {
			mismatches = append(mismatches, fmt.Sprintf("%s\n  ovs-ofctl's dump line %q parses to other bytes than the dumped flow (%v, %v)\n%s", f.text, theirLine, errA, errB, oftest.HexDiff(a, b)))
		}
	}
	return mismatches, rawDecoded, installed
}

// unprintedAway returns m without what ovs-ofctl's text of a match does
// not say, and so no parser can read back: an explicit default packet
// type (packet_type=(0,0) is not printed), and the difference between an
// exact tcp_flags match and one masked with the 12 flag bits (both print
// as flag names).
func unprintedAway(m openflow.Match) openflow.Match {
	m = m.Clone()
	if pt, mask, ok := m.Uint(openflow.FieldPacketType); ok && pt == 0 && mask == 0xffffffff {
		m.Delete(openflow.FieldPacketType)
	}
	if v, mask, ok := m.Uint(openflow.FieldTCPFlags); ok && mask == 0x0fff {
		m.SetUint(openflow.FieldTCPFlags, v)
	}
	return m
}
