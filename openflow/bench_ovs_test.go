package openflow_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/internal/oftest"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/ovstest"
)

// Benchmarks against a real Open vSwitch (the harness switch, userspace
// datapath). They need root and OVS, like the integration tests; run them
// with test/bench/openflow.sh (make bench-openflow).

const (
	benchFlows  = 100000
	benchCookie = 0x5eed
)

// benchCookieFilter selects the benchmarks' flows for ovs-ofctl.
var benchCookieFilter = fmt.Sprintf("cookie=%#x/-1", benchCookie)

func benchFlowMods(n int) []*openflow.FlowMod {
	fms := make([]*openflow.FlowMod, n)
	for i := range fms {
		fms[i] = oftest.SNATFlow(i, benchCookie)
	}
	return fms
}

func deleteByCookie(b testing.TB, c *ofconn.Client, cookie uint64) {
	ctx := oftest.TestCtx(b, time.Minute)
	del := &openflow.FlowMod{Command: openflow.FlowDelete, Table: openflow.TableAll, Cookie: cookie, CookieMask: ^uint64(0)}
	if err := c.SendFlowMods(ctx, del); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBundleInstall100k installs the same 100k SNAT-shaped flows in
// one bundle three ways into the same switch, in turns: with
// `ovs-ofctl --bundle add-flows`, as the switch's own limit (the bundle
// pre-encoded once and written raw, see rawBundle), and through the
// Client (the last two twice each). Before each install the flows are
// deleted and the switch is let settle (ovstest.Switch.Settle: until
// vswitchd's RCU thread, which frees the deleted flows, is idle), so that
// each figure measures the switch and not the previous round's cleanup. Each round then also installs
// raw and through the Client right after a delete, unsettled, to show
// what that cleanup costs.
//
// It reports the rates, the Client's ratio to ovs-ofctl and to the
// limit, and the mean settling wait.
func BenchmarkBundleInstall100k(b *testing.B) {
	sw := ovstest.Start(b)
	c := oftest.DialSwitch(b, sw)
	flows := benchFlowMods(benchFlows)
	msgs := oftest.AsMessages(flows)
	file := ovstest.WriteFlowFile(b, flows)
	raw := encodeRawBundle(b, flows)

	var ours, theirs, limit, oursUnsettled, limitUnsettled, settling time.Duration
	settles := 0
	fresh := func(settle bool) {
		deleteByCookie(b, c, benchCookie)
		if settle {
			settling += sw.Settle(b)
			settles++
		}
	}
	installed := func(who string) {
		if n := sw.FlowCount(b, benchCookieFilter); n != benchFlows {
			b.Fatalf("%s installed %d flows, want %d", who, n, benchFlows)
		}
	}
	client := func() time.Duration {
		b.StartTimer()
		start := time.Now()
		if err := c.Bundle(oftest.TestCtx(b, 5*time.Minute), msgs...); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		b.StopTimer()
		return d
	}
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		fresh(true)
		theirs += sw.BundleAddFlows(b, file)
		installed("ovs-ofctl")
		// The raw stream and the client twice each, in the order raw,
		// client, client, raw, so that a drift of the machine's load
		// within the round weighs on both alike.
		for _, rawTurn := range []bool{true, false, false, true} {
			fresh(true)
			if rawTurn {
				limit += raw.install(b, sw)
				installed("the raw stream")
			} else {
				ours += client()
				installed("the client")
			}
		}

		fresh(false)
		limitUnsettled += raw.install(b, sw)
		installed("the raw stream, unsettled")
		fresh(false)
		oursUnsettled += client()
		installed("the client, unsettled")
	}
	n := float64(b.N * benchFlows)
	b.ReportMetric(2*n/ours.Seconds(), "flows/s")
	b.ReportMetric(n/theirs.Seconds(), "ofctl_flows/s")
	b.ReportMetric(2*n/limit.Seconds(), "limit_flows/s")
	b.ReportMetric(2*theirs.Seconds()/ours.Seconds(), "ratio_vs_ofctl")
	b.ReportMetric(limit.Seconds()/ours.Seconds(), "ratio_vs_limit")
	b.ReportMetric(n/oursUnsettled.Seconds(), "unsettled_flows/s")
	b.ReportMetric(n/limitUnsettled.Seconds(), "unsettled_limit_flows/s")
	b.ReportMetric(settling.Seconds()*1000/float64(settles), "settle_ms")
}

// rawBundle is a bundle encoded once as one byte stream: OPEN, the ADDs,
// CLOSE and COMMIT, pipelined without waiting for any reply (a client
// must wait for CLOSE before it commits, to commit only a bundle the
// switch took whole; this one does not). Written on a connection of its
// own it installs the flows as fast as anything could: the time left is
// the switch's.
type rawBundle struct {
	stream    []byte
	commitXid uint32
}

func encodeRawBundle(tb testing.TB, fms []*openflow.FlowMod) rawBundle {
	const id = 0x7a11
	var r rawBundle
	xid := uint32(1)
	put := func(m openflow.Message) {
		var err error
		if r.stream, err = openflow.AppendMessage(r.stream, xid, m); err != nil {
			tb.Fatal(err)
		}
		xid++
	}
	put(&openflow.BundleControl{BundleID: id, Type: openflow.BundleOpenRequest, Flags: ofconn.TransactionFlags})
	for _, fm := range fms {
		put(&openflow.BundleAdd{BundleID: id, Flags: ofconn.TransactionFlags, Message: fm})
	}
	put(&openflow.BundleControl{BundleID: id, Type: openflow.BundleCloseRequest, Flags: ofconn.TransactionFlags})
	r.commitXid = xid
	put(&openflow.BundleControl{BundleID: id, Type: openflow.BundleCommitRequest, Flags: ofconn.TransactionFlags})
	return r
}

// install connects to the switch, exchanges HELLOs (untimed), then writes
// the stream and returns the time from its first byte to the commit
// reply.
func (r rawBundle) install(tb testing.TB, sw *ovstest.Switch) time.Duration {
	conn, err := net.Dial("unix", sw.MgmtSocket)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Minute)); err != nil {
		tb.Fatal(err)
	}
	hello, err := openflow.MarshalMessage(0, &openflow.Hello{Versions: []uint8{openflow.Version}})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Write(hello); err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if _, m, _, err := openflow.ReadMessage(br, nil); err != nil {
		tb.Fatalf("reading the switch's HELLO: %v", err)
	} else if _, ok := m.(*openflow.Hello); !ok {
		tb.Fatalf("the switch sent %T, not HELLO", m)
	}
	// Replies are read while the stream is written, so that the switch
	// never waits on us.
	replied := make(chan error, 1)
	var end time.Time
	go func() {
		var buf []byte
		for {
			h, m, next, err := openflow.ReadMessage(br, buf)
			buf = next
			if err != nil {
				replied <- err
				return
			}
			switch x := m.(type) {
			case *openflow.Error:
				replied <- fmt.Errorf("the switch refused message %d: %s", h.Xid, x.Name())
				return
			case *openflow.BundleControl:
				if h.Xid == r.commitXid && x.Type == openflow.BundleCommitReply {
					end = time.Now()
					replied <- nil
					return
				}
			}
		}
	}()
	start := time.Now()
	if _, err := conn.Write(r.stream); err != nil {
		tb.Fatal(err)
	}
	if err := <-replied; err != nil {
		tb.Fatal(err)
	}
	return end.Sub(start)
}

// BenchmarkTransactionLatency measures one-flow bundle transactions (open,
// add, close, commit) on an idle switch and reports p50 and p99.
func BenchmarkTransactionLatency(b *testing.B) {
	sw := ovstest.Start(b)
	c := oftest.DialSwitch(b, sw)
	ctx := oftest.TestCtx(b, 10*time.Minute)
	const warmup = 50
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N+warmup; i++ {
		fm := oftest.SNATFlow(i%60000, benchCookie)
		start := time.Now()
		if err := c.Bundle(ctx, fm); err != nil {
			b.Fatal(err)
		}
		if i >= warmup {
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

// installBench puts 100k flows on the switch, untimed.
func installBench(b *testing.B, c *ofconn.Client, msgs []openflow.Message) {
	b.StopTimer()
	defer b.StartTimer()
	if err := c.Bundle(oftest.TestCtx(b, 5*time.Minute), msgs...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDeleteByCookie100k deletes 100k flows with one cookie-masked
// delete (and the barrier that confirms it).
func BenchmarkDeleteByCookie100k(b *testing.B) {
	sw := ovstest.Start(b)
	c := oftest.DialSwitch(b, sw)
	msgs := oftest.AsMessages(benchFlowMods(benchFlows))
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		installBench(b, c, msgs)
		start := time.Now()
		deleteByCookie(b, c, benchCookie)
		total += time.Since(start)
		b.StopTimer()
		if n := sw.FlowCount(b, benchCookieFilter); n != 0 {
			b.Fatalf("%d flows left", n)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*benchFlows)/total.Seconds(), "flows/s")
	b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/delete")
}

// BenchmarkDump100k dumps 100k flows three ways, in turns on the same
// switch: through the client decoded (DumpFlows), through the client read
// in place (DumpFlowEntries: what an index of the table needs), and with
// `ovs-ofctl dump-flows` (its text thrown away), and reports the rates and
// their ratios against ovs-ofctl.
func BenchmarkDump100k(b *testing.B) {
	sw := ovstest.Start(b)
	c := oftest.DialSwitch(b, sw)
	installBench(b, c, oftest.AsMessages(benchFlowMods(benchFlows)))
	ctx := oftest.TestCtx(b, 10*time.Minute)
	req := &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: benchCookie, CookieMask: ^uint64(0)}
	var decoded, inPlace, ofctl time.Duration
	timed := func(total *time.Duration, dump func() (int, error)) {
		start := time.Now()
		n, err := dump()
		*total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if n != benchFlows {
			b.Fatalf("dumped %d flows, want %d", n, benchFlows)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(&decoded, func() (int, error) {
			flows, err := c.DumpFlows(ctx, req)
			return len(flows), err
		})
		timed(&inPlace, func() (int, error) {
			n := 0
			err := c.DumpFlowEntries(ctx, req, func(e openflow.FlowEntry) error {
				if e.Cookie() == benchCookie {
					n++
				}
				return nil
			})
			return n, err
		})
		timed(&ofctl, func() (int, error) {
			cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", sw.Bridge, benchCookieFilter)
			cmd.Env = sw.Env()
			out, err := cmd.Output()
			return bytes.Count(out, []byte("cookie=")), err
		})
	}
	n := float64(b.N * benchFlows)
	b.ReportMetric(n/decoded.Seconds(), "decoded_flows/s")
	b.ReportMetric(n/inPlace.Seconds(), "entries_flows/s")
	b.ReportMetric(n/ofctl.Seconds(), "ofctl_flows/s")
	b.ReportMetric(ofctl.Seconds()/decoded.Seconds(), "decoded_ratio_vs_ofctl")
	b.ReportMetric(ofctl.Seconds()/inPlace.Seconds(), "entries_ratio_vs_ofctl")
}
