//go:build e2e || demo

package dockercluster

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/topology"
)

// TestOutageAfterAFault reads outages from hand-made captures: a failed
// node that sends every probeInterval until the fault takes effect, and
// another node's packets from some time after it.
func TestOutageAfterAFault(t *testing.T) {
	addr, dest := netip.MustParseAddr("192.0.2.70"), netip.MustParseAddr("192.0.2.100")
	const failed, next, bystander = "02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"
	faultAt := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	send := func(mac string, from, to time.Duration) []topology.Packet {
		var out []topology.Packet
		for at := from; at <= to; at += probeInterval {
			out = append(out, topology.Packet{Time: faultAt.Add(at), Src: addr, Dst: dest, SrcMAC: mac})
		}
		return out
	}
	other := topology.Packet{Time: faultAt.Add(300 * time.Millisecond), Src: netip.MustParseAddr("192.0.2.71"), Dst: dest, SrcMAC: bystander}
	cases := []struct {
		name    string
		packets [][]topology.Packet
		want    time.Duration
	}{{
		name:    "a kill: the failed node's packets stop, another's start",
		packets: [][]topology.Packet{send(failed, -2*time.Second, 100*time.Millisecond), {other}, send(next, 700*time.Millisecond, 2*time.Second)},
		want:    600 * time.Millisecond,
	}, {
		// Unfrozen 800 ms after the fault, the node sends what it queued:
		// within deathSlack, after the new holder's first packet.
		name:    "a short freeze: the failed node's queued packets come after the new holder's first",
		packets: [][]topology.Packet{send(failed, -2*time.Second, 0), send(next, 650*time.Millisecond, 2*time.Second), send(failed, 800*time.Millisecond, 900*time.Millisecond)},
		want:    650 * time.Millisecond,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var packets []topology.Packet
			for _, p := range tc.packets {
				packets = append(packets, p...)
			}
			slices.SortFunc(packets, func(a, b topology.Packet) int { return a.Time.Compare(b.Time) })
			gap, mac := outageAfter(t, packets, addr, dest, failed, faultAt)
			if gap != tc.want || mac != next {
				t.Errorf("outage %v through %s, want %v through %s", gap, mac, tc.want, next)
			}
		})
	}
}
