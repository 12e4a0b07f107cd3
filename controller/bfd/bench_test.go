package bfd

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/topology"
)

// BenchmarkDetection measures how long a session takes to declare a path
// down after the path stops forwarding (the peer's end of the link taken
// down), at the default 100 ms x 3, over real UDP between two
// namespaces, with our engine and with FRR's bfdd as the peer; the path
// is restored and the session brought Up between rounds. It reports the
// p50 and p99 over b.N rounds in milliseconds. By the RFC's arithmetic a
// detection takes 300 ms after the last packet that got through, so
// between 225 and 300 ms after the cut.
//
//	go test ./controller/bfd -run '^$' -bench Detection -benchtime 20x
func BenchmarkDetection(b *testing.B) {
	// settleFastTimers covers a few 100 ms intervals: the Poll Sequences
	// that switch both sides to the fast timers.
	const settleFastTimers = 500 * time.Millisecond
	for _, peerKind := range []string{"egressflow", "frr"} {
		b.Run("peer="+peerKind, func(b *testing.B) {
			p := topology.NewPair(b)
			ours, changes := listenIn(b, p.NsA, Config{})
			var peerUp func()
			if peerKind == "frr" {
				frr := startFRR(b, p.NsB, []netip.Addr{p.B4}, []netip.Addr{p.A4})
				peerUp = func() { frr.waitPeer(b, p.A4, "up", sessionSetUp) }
			} else {
				peer, _ := listenIn(b, p.NsB, Config{})
				addIn(b, p.NsB, peer, p.A4)
				peerUp = func() { waitState(b, peer, p.A4, Up, sessionSetUp) }
			}
			addIn(b, p.NsA, ours, p.B4)
			var took []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Up on both sides, and the fast timers in use: until the
				// peer's first packet as Up arrives, the detection time is
				// still the slow 3 x 1 s.
				waitState(b, ours, p.B4, Up, sessionSetUp)
				peerUp()
				time.Sleep(settleFastTimers)
				cut := time.Now()
				p.SetLinkB(b, false)
				waitState(b, ours, p.B4, Down, 5*time.Second)
				down, _ := changes.last(p.B4)
				took = append(took, down.at.Sub(cut))
				p.SetLinkB(b, true)
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99_ms")
		})
	}
}
