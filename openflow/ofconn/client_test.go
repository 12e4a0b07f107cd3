package ofconn_test

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

const testCookie = 0xe0

// switchFlows are the golden flows made distinct (own priority) and
// tagged with testCookie, so that they can coexist in one switch.
func switchFlows(t testing.TB) []*openflow.FlowMod {
	var fms []*openflow.FlowMod
	for i, text := range oftest.GoldenFlows {
		if strings.Contains(text, "recirc_id") {
			continue // only Open vSwitch itself may match on recirc_id
		}
		fm := oftest.MustParseFlow(t, text)
		fm.Cookie = testCookie
		fm.Priority = uint16(1000 + i)
		fm.CookieMask = 0
		fms = append(fms, fm)
	}
	return fms
}

var volatileStats = regexp.MustCompile(`duration=[0-9.]+s, |n_packets=[0-9]+, |n_bytes=[0-9]+, |idle_age=[0-9]+, `)

// TestClientFlowsRoundTrip installs every golden flow through the client
// and checks that ovs-ofctl shows exactly our text for each, and that
// dumping through the client gives the same flows back.
func TestClientFlowsRoundTrip(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 30*time.Second)
	sw.Ofctl(t, "add-group", sw.Bridge, "group_id=5,type=all,bucket=output:1")
	fms := switchFlows(t)
	if err := c.Bundle(ctx, oftest.AsMessages(fms)...); err != nil {
		t.Fatalf("Bundle: %v", err)
	}
	var want []string
	for _, fm := range fms {
		want = append(want, fm.String())
	}
	sort.Strings(want)
	got := oftest.OfctlFlows(t, sw, "--no-stats", fmt.Sprintf("cookie=%#x/-1", testCookie))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ovs-ofctl --no-stats dump-flows differs from our String():\n%s", oftest.LineDiff(got, want))
	}

	flows, err := c.DumpFlows(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: testCookie, CookieMask: ^uint64(0)})
	if err != nil {
		t.Fatalf("DumpFlows: %v", err)
	}
	if len(flows) != len(fms) {
		t.Fatalf("dumped %d flows, installed %d", len(flows), len(fms))
	}
	byText := map[string]*openflow.FlowMod{}
	for _, fm := range fms {
		byText[fm.String()] = fm
	}
	var dumpedText []string
	for i := range flows {
		f := &flows[i]
		back := f.FlowMod()
		orig := byText[back.String()]
		if orig == nil {
			t.Errorf("dumped flow %q was not installed", back.String())
			continue
		}
		if !orig.Match.Equal(back.Match) {
			t.Errorf("match of %q changed on the way back", back.String())
		}
		a, _ := openflow.MarshalMessage(1, orig)
		b, _ := openflow.MarshalMessage(1, back)
		if string(a) != string(b) {
			t.Errorf("flow %q dumps back as different bytes:\n%s", back.String(), oftest.HexDiff(b, a))
		}
		dumpedText = append(dumpedText, volatileStats.ReplaceAllString(f.String(), ""))
	}
	// Read in place, each entry holds the match and instructions exactly
	// as this package encoded them: what lets a caller index a dump by
	// digests of its bytes.
	entries := 0
	err = c.DumpFlowEntries(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: testCookie, CookieMask: ^uint64(0)}, func(e openflow.FlowEntry) error {
		entries++
		f, err := e.Decode()
		if err != nil {
			return err
		}
		orig := byText[f.FlowMod().String()]
		if orig == nil || e.Table() != orig.Table || e.Priority() != orig.Priority || e.Cookie() != orig.Cookie {
			t.Errorf("entry %q: table, priority or cookie differ from what was installed", f.String())
			return nil
		}
		match, _ := orig.Match.AppendBinary(nil)
		insts, _ := openflow.AppendInstructions(nil, orig.Instructions)
		if !bytes.Equal(e.Match(), match) || !bytes.Equal(e.Instructions(), insts) {
			t.Errorf("entry %q: match or instructions are not the bytes sent:\n%s\n%s", orig, oftest.HexDiff(e.Match(), match), oftest.HexDiff(e.Instructions(), insts))
		}
		return nil
	})
	if err != nil || entries != len(fms) {
		t.Fatalf("DumpFlowEntries: %d entries, %v; want %d", entries, err, len(fms))
	}

	// Flow.String is the dump-flows line, statistics included.
	sort.Strings(dumpedText)
	var ofctl []string
	for _, l := range oftest.OfctlFlows(t, sw, fmt.Sprintf("cookie=%#x/-1", testCookie)) {
		ofctl = append(ofctl, volatileStats.ReplaceAllString(l, ""))
	}
	sort.Strings(ofctl)
	if strings.Join(dumpedText, "\n") != strings.Join(ofctl, "\n") {
		t.Errorf("Flow.String() differs from ovs-ofctl dump-flows:\n%s", oftest.LineDiff(dumpedText, ofctl))
	}
}

// TestBundleWithInvalidFlowChangesNothing sends a bundle in which one flow
// is invalid: the switch must end up exactly as before, and the error must
// name the bad message and the reason.
func TestBundleWithInvalidFlowChangesNothing(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 30*time.Second)
	base := []*openflow.FlowMod{
		oftest.MustParseFlow(t, "cookie=0x1, table=1, priority=10,ip,nw_src=10.0.0.1 actions=output:1"),
		oftest.MustParseFlow(t, "cookie=0x1, table=1, priority=10,ip,nw_src=10.0.0.2 actions=output:2"),
	}
	if err := c.SendFlowMods(ctx, base...); err != nil {
		t.Fatal(err)
	}
	before := oftest.OfctlFlows(t, sw, "--no-stats")

	bundle := []openflow.Message{
		oftest.MustParseFlow(t, "cookie=0x2, table=1, priority=20,ip,nw_src=10.0.0.3 actions=output:3"),
		oftest.MustParseFlow(t, "delete cookie=0x1/-1, table=1"),
		// ct needs an IP match: Open vSwitch refuses this one.
		oftest.MustParseFlow(t, "cookie=0x2, table=1, priority=20,in_port=5 actions=ct(commit,zone=5)"),
		oftest.MustParseFlow(t, "cookie=0x2, table=1, priority=20,ip,nw_src=10.0.0.4 actions=output:4"),
	}
	// The same messages, the last two encoded ahead in a Batch: the error
	// names the message in the Batch as it names it in the plain bundle.
	var batch openflow.Batch
	for _, m := range bundle[2:] {
		if err := batch.Add(m); err != nil {
			t.Fatal(err)
		}
	}
	for form, send := range map[string]func() error{
		"messages": func() error { return c.Bundle(ctx, bundle...) },
		"joined to batch": func() error {
			return c.BundleSequence(ctx, openflow.Join(openflow.List[openflow.Message](bundle[:2]), &batch))
		},
	} {
		err := send()
		var be *ofconn.BundleError
		if !errors.As(err, &be) {
			t.Fatalf("%s: Bundle returned %v, want a *BundleError", form, err)
		}
		if be.Phase != "add" || !be.Discarded || len(be.Failed) != 1 || be.Failed[0].Index != 2 {
			t.Fatalf("%s: BundleError %+v: want phase add, discarded, message 2 failed", form, be)
		}
		if !errors.Is(err, &openflow.Error{Type: openflow.ErrBadAction, Code: 10}) { // OFPBAC_MATCH_INCONSISTENT
			t.Errorf("%s: error %v does not say OFPBAC_MATCH_INCONSISTENT", form, err)
		}
		for _, want := range []string{"message 2", "in_port=5 actions=ct(commit,zone=5)", "OFPBAC_MATCH_INCONSISTENT", "nothing changed"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error text %q lacks %q", form, err.Error(), want)
			}
		}
		after := oftest.OfctlFlows(t, sw, "--no-stats")
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Fatalf("%s: the switch changed:\n%s", form, oftest.LineDiff(after, before))
		}
	}
	// The same bundle without the bad flow applies completely.
	good := append(append([]openflow.Message(nil), bundle[:2]...), bundle[3])
	if err := c.Bundle(ctx, good...); err != nil {
		t.Fatalf("Bundle: %v", err)
	}
	got := oftest.OfctlFlows(t, sw, "--no-stats", "table=1")
	want := []string{"cookie=0x2, table=1, priority=20,ip,nw_src=10.0.0.3 actions=output:3",
		"cookie=0x2, table=1, priority=20,ip,nw_src=10.0.0.4 actions=output:4"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after a good bundle:\n%s", oftest.LineDiff(got, want))
	}
}

// TestTransactionInParts builds bundles part by part on a real switch: the
// parts commit as one and show nothing before; a message refused in one
// part fails the transaction at the next Add, named by its index in the
// transaction and by the flow the switch echoed, and changes nothing;
// Discard leaves the switch as it was.
func TestTransactionInParts(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 30*time.Second)
	flow := func(i int) *openflow.FlowMod {
		return oftest.MustParseFlow(t, fmt.Sprintf("cookie=0x3, table=2, priority=10,ip,nw_src=10.0.1.%d actions=output:%d", i, i))
	}

	tx, err := c.BeginBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for part := range 3 {
		var batch openflow.Batch
		for i := range 10 {
			fm := flow(part*10 + i + 1)
			if err := batch.Add(fm); err != nil {
				t.Fatal(err)
			}
			want = append(want, fm.String())
		}
		if err := tx.Add(ctx, &batch); err != nil {
			t.Fatalf("Add part %d: %v", part, err)
		}
		if part == 1 {
			// Another call's xid comes between two parts' ranges.
			if err := c.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if tx.Len() != 30 {
		t.Errorf("Len %d after 3 parts of 10", tx.Len())
	}
	if got := oftest.OfctlFlows(t, sw, "--no-stats", "table=2"); len(got) != 0 {
		t.Fatalf("before Commit the switch already shows:\n%s", strings.Join(got, "\n"))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	slices.Sort(want)
	got := oftest.OfctlFlows(t, sw, "--no-stats", "table=2")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after Commit:\n%s", oftest.LineDiff(got, want))
	}
	if err := tx.Add(ctx, openflow.List[*openflow.FlowMod]{flow(99)}); err == nil {
		t.Error("Add after Commit succeeded")
	}

	before := got
	tx, err = c.BeginBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := oftest.MustParseFlow(t, "cookie=0x3, table=2, priority=20,in_port=5 actions=ct(commit,zone=5)") // ct needs an IP match
	// The refusal surfaces at the Add that sent the refused message, when
	// the switch answers before that Add returns, or else at the next one,
	// after the barrier: never later, and never at an earlier Add.
	for i, part := range []openflow.List[*openflow.FlowMod]{
		{oftest.MustParseFlow(t, "delete cookie=0x3/-1, table=2")}, // message 0
		{flow(40), bad}, // messages 1 and 2
		{flow(41)},      // after the refusal
	} {
		if err = tx.Add(ctx, part); err != nil {
			if i == 0 {
				t.Fatalf("Add part 0: %v", err)
			}
			break
		}
		if i == 2 {
			t.Fatal("three Adds succeeded after a refused message")
		}
		// Between the parts, another call's xid: the refused message is
		// counted across two ranges. After them, the switch has checked
		// both parts, so the refusal is known.
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var be *ofconn.BundleError
	if !errors.As(err, &be) || be.Phase != "add" || !be.Discarded || len(be.Failed) != 1 || be.Failed[0].Index != 2 {
		t.Fatalf("Add after a refused message: %v (%+v), want a discarded add-phase BundleError for message 2", err, be)
	}
	for _, want := range []string{"message 2", "in_port=5 actions=ct(commit,zone=5)", "OFPBAC_MATCH_INCONSISTENT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if again := tx.Commit(ctx); again != err {
		t.Errorf("Commit after the failure: %v, want the same error", again)
	}
	if after := oftest.OfctlFlows(t, sw, "--no-stats", "table=2"); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("the failed transaction changed the switch:\n%s", oftest.LineDiff(after, before))
	}

	tx, err = c.BeginBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Add(ctx, openflow.List[*openflow.FlowMod]{oftest.MustParseFlow(t, "delete table=2")}); err != nil {
		t.Fatal(err)
	}
	tx.Discard()
	if err := tx.Commit(ctx); err == nil {
		t.Error("Commit after Discard succeeded")
	}
	if err := c.Bundle(ctx, flow(42)); err != nil {
		t.Fatalf("a bundle after a discarded one: %v", err)
	}
	if after := oftest.OfctlFlows(t, sw, "--no-stats", "table=2"); len(after) != len(before)+1 {
		t.Fatalf("after Discard and one more flow: %d flows, want %d:\n%s", len(after), len(before)+1, strings.Join(after, "\n"))
	}
}

// TestDumpCollectsEveryPart dumps more flows than fit in one multipart
// reply: every part must be collected.
func TestDumpCollectsEveryPart(t *testing.T) {
	sw := ovstest.Start(t)
	c := oftest.DialSwitch(t, sw)
	ctx := oftest.TestCtx(t, 60*time.Second)
	const n = 3000
	want := map[string]bool{}
	var msgs []openflow.Message
	for i := 0; i < n; i++ {
		fm := oftest.SNATFlow(i, 0x77)
		msgs = append(msgs, fm)
		want[fm.Match.String()] = true
	}
	if err := c.Bundle(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	req := &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: 0x77, CookieMask: ^uint64(0)}
	parts, err := c.Multipart(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 {
		t.Fatalf("the dump came in %d part(s); the test needs several", len(parts))
	}
	flows, err := c.DumpFlows(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != n {
		t.Fatalf("DumpFlows returned %d flows of %d (in %d parts)", len(flows), n, len(parts))
	}
	for i := range flows {
		delete(want, flows[i].Match.String())
	}
	if len(want) != 0 {
		t.Fatalf("%d flows missing from the dump", len(want))
	}
	t.Logf("%d flows in %d multipart replies", n, len(parts))

	// DumpFlowsFunc stops at fn's error, mid-dump, and returns it; the
	// rest of the reply confuses no later call.
	stop := errors.New("enough")
	seen := 0
	err = c.DumpFlowsFunc(ctx, req, func(*openflow.Flow) error {
		if seen++; seen == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 10 {
		t.Fatalf("DumpFlowsFunc after fn's error: %v, %d flows seen; want fn's error after 10", err, seen)
	}
	if flows, err := c.DumpFlows(ctx, req); err != nil || len(flows) != n {
		t.Fatalf("a dump after a stopped one: %d flows (%v), want %d", len(flows), err, n)
	}
}
