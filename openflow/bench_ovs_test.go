package openflow

import (
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"

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

func benchFlowMods(n int) []*FlowMod {
	fms := make([]*FlowMod, n)
	for i := range fms {
		fms[i] = snatFlow(i, benchCookie)
	}
	return fms
}

func deleteByCookie(b *testing.B, c *Client, cookie uint64) {
	ctx := testCtx(b, time.Minute)
	del := &FlowMod{Command: FlowDelete, Table: TableAll, Cookie: cookie, CookieMask: ^uint64(0)}
	if err := c.SendFlowMods(ctx, del); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBundleInstall100k installs 100k SNAT-shaped flows in one bundle
// through the Client, and the same flows with
// `ovs-ofctl --bundle add-flows` into the same switch, in the same run,
// and reports both rates and their ratio.
func BenchmarkBundleInstall100k(b *testing.B) {
	sw := ovstest.Start(b)
	c := dialSwitch(b, sw)
	flows := benchFlowMods(benchFlows)
	msgs := asMessages(flows)
	file := ovstest.WriteFlowFile(b, flows)

	var ours, theirs time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		deleteByCookie(b, c, benchCookie)
		theirs += sw.BundleAddFlows(b, file)
		if n := sw.FlowCount(b, benchCookieFilter); n != benchFlows {
			b.Fatalf("ovs-ofctl installed %d flows", n)
		}
		deleteByCookie(b, c, benchCookie)
		b.StartTimer()

		start := time.Now()
		if err := c.Bundle(testCtx(b, 5*time.Minute), msgs...); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)

		b.StopTimer()
		if n := sw.FlowCount(b, benchCookieFilter); n != benchFlows {
			b.Fatalf("the client installed %d flows", n)
		}
		b.StartTimer()
	}
	n := float64(b.N * benchFlows)
	b.ReportMetric(n/ours.Seconds(), "flows/s")
	b.ReportMetric(n/theirs.Seconds(), "ofctl_flows/s")
	b.ReportMetric(theirs.Seconds()/ours.Seconds(), "ratio_vs_ofctl")
}

// BenchmarkTransactionLatency measures one-flow bundle transactions (open,
// add, close, commit) on an idle switch and reports p50 and p99.
func BenchmarkTransactionLatency(b *testing.B) {
	sw := ovstest.Start(b)
	c := dialSwitch(b, sw)
	ctx := testCtx(b, 10*time.Minute)
	const warmup = 50
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N+warmup; i++ {
		fm := snatFlow(i%60000, benchCookie)
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
func installBench(b *testing.B, c *Client, msgs []Message) {
	b.StopTimer()
	defer b.StartTimer()
	if err := c.Bundle(testCtx(b, 5*time.Minute), msgs...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDeleteByCookie100k deletes 100k flows with one cookie-masked
// delete (and the barrier that confirms it).
func BenchmarkDeleteByCookie100k(b *testing.B) {
	sw := ovstest.Start(b)
	c := dialSwitch(b, sw)
	msgs := asMessages(benchFlowMods(benchFlows))
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
	c := dialSwitch(b, sw)
	installBench(b, c, asMessages(benchFlowMods(benchFlows)))
	ctx := testCtx(b, 10*time.Minute)
	req := &FlowDescRequest{Table: TableAll, Cookie: benchCookie, CookieMask: ^uint64(0)}
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
			err := c.DumpFlowEntries(ctx, req, func(e FlowEntry) error {
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
