package conntrack_test

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/test/topology"
)

func TestStale(t *testing.T) {
	a := netip.MustParseAddr
	before := conntrack.Translations{
		a("10.0.0.1"): a("192.0.2.1"),
		a("10.0.0.2"): a("192.0.2.1"),
		a("10.0.0.3"): a("192.0.2.1"),
		a("fd00::1"):  a("2001:db8::1"),
		a("10.0.0.9"): a("192.0.2.2"),
	}
	after := conntrack.Translations{
		a("10.0.0.1"): a("192.0.2.1"), // unchanged
		a("10.0.0.3"): a("192.0.2.5"), // new LB IP
		a("10.0.0.9"): a("192.0.2.2"), // unchanged
		a("10.0.0.4"): a("192.0.2.1"), // new: nothing to flush
	}
	want := []netip.Addr{a("10.0.0.2"), a("10.0.0.3"), a("fd00::1")}
	if got := conntrack.Stale(before, after); !slices.Equal(got, want) {
		t.Errorf("Stale = %v, want %v", got, want)
	}
	if got := conntrack.Stale(after, after); len(got) != 0 {
		t.Errorf("nothing changed, yet Stale = %v", got)
	}
	if got := conntrack.Stale(nil, after); len(got) != 0 {
		t.Errorf("from nothing, Stale = %v", got)
	}
}

// failingFlusher refuses its n-th flush.
type failingFlusher struct {
	calls, failAt int
	filters       []*openflow.CTFlush
}

func (f *failingFlusher) FlushConntrack(_ context.Context, filter *openflow.CTFlush) error {
	f.calls++
	if f.calls == f.failAt {
		return fmt.Errorf("refused")
	}
	f.filters = append(f.filters, filter)
	return nil
}

func TestFlushSourcesStopsAtFirstError(t *testing.T) {
	srcs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	f := &failingFlusher{failAt: 2}
	n, err := conntrack.FlushSources(context.Background(), f, conntrack.SNATZone, srcs)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "10.0.0.2") {
		t.Fatalf("FlushSources = %d, %v; want 1 and an error naming 10.0.0.2", n, err)
	}
	if len(f.filters) != 1 || !reflect.DeepEqual(f.filters[0], conntrack.SourceFilter(conntrack.SNATZone, srcs[0])) {
		t.Fatalf("filters sent: %+v", f.filters)
	}
}

// TestFlushSourcesOnRealSwitch commits connections of two pods into the
// SNAT zone through real packets, flushes one pod's, and checks that only
// its entries went: the other pod's, and the same pod's in another zone,
// stay.
func TestFlushSourcesOnRealSwitch(t *testing.T) {
	topo := topology.New(t, 1)
	n := topo.Nodes[0]
	gone, kept := n.AddPod(t, "gone"), n.AddPod(t, "kept")
	const otherZone = 7
	n.Ofctl(t, "add-flow", n.Bridge, fmt.Sprintf("priority=10,ip,nw_src=%s,actions=ct(commit,zone=%d),ct(commit,zone=%d),normal", topology.ClusterPodPrefix, conntrack.SNATZone, otherZone))
	for _, p := range []*topology.Pod{gone, kept} {
		if err := p.Ping(topo.External.IP, 1); err != nil {
			t.Fatal(err)
		}
	}
	entries := func(zone int, p *topology.Pod) bool {
		dump := n.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone))
		return strings.Contains(dump, "src="+p.IP.String()+",")
	}
	for _, zone := range []int{int(conntrack.SNATZone), otherZone} {
		for _, p := range []*topology.Pod{gone, kept} {
			if !entries(zone, p) {
				t.Fatalf("no zone %d entry for %s before the flush", zone, p.Name)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := openflow.Dial(ctx, "unix:"+n.MgmtSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if flushed, err := conntrack.FlushSources(ctx, client, conntrack.SNATZone, []netip.Addr{gone.IP}); err != nil || flushed != 1 {
		t.Fatalf("FlushSources = %d, %v", flushed, err)
	}
	// The flush is followed by a barrier: no waiting needed.
	if entries(int(conntrack.SNATZone), gone) {
		t.Error("the flushed pod's entries remain in the SNAT zone")
	}
	if !entries(int(conntrack.SNATZone), kept) {
		t.Error("the other pod's entries were flushed too")
	}
	if !entries(otherZone, gone) {
		t.Error("the flushed pod's entries in another zone were flushed too")
	}
}
