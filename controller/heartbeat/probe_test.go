package heartbeat

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestProbeMessageRoundTrip(t *testing.T) {
	for _, m := range []probeMessage{
		{kind: probePing, interval: 100 * time.Millisecond, token: 1},
		{kind: probePing, token: 0xFFFF_FFFF_FFFF_FFFF},
		{kind: probeAck, token: 42},
		{kind: probeNack, token: 43},
		{kind: probePingRequest, token: 44, target: netip.MustParseAddrPort("192.0.2.7:9102")},
		{kind: probePingRequest, token: 45, target: netip.MustParseAddrPort("[2001:db8::7]:9102")},
	} {
		b := m.encode(nil)
		if len(b) != probeMessageSize {
			t.Fatalf("%v: %d bytes, want %d", m.kind, len(b), probeMessageSize)
		}
		got, err := decodeProbe(b)
		if err != nil || got != m {
			t.Errorf("%+v: decoded %+v, %v", m, got, err)
		}
		// A later version may append fields: they are ignored.
		if got, err := decodeProbe(append(b, 1, 2, 3)); err != nil || got != m {
			t.Errorf("%+v with a tail: decoded %+v, %v", m, got, err)
		}
	}
	// The wire layout, byte by byte, for a ping request to 192.0.2.7:9102.
	want := []byte{0xEF, 0x1B, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 44,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 0, 2, 7, 0x23, 0x8E}
	if got := (probeMessage{kind: probePingRequest, token: 44, target: netip.MustParseAddrPort("192.0.2.7:9102")}).encode(nil); !bytes.Equal(got, want) {
		t.Errorf("ping request bytes\n got %x\nwant %x", got, want)
	}
}

func TestProbeMessageMalformed(t *testing.T) {
	valid := probeMessage{kind: probePing, interval: time.Second, token: 9}.encode(nil)
	mutate := func(f func(b []byte)) []byte {
		b := slices.Clone(valid)
		f(b)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":              nil,
		"short":              valid[:probeMessageSize-1],
		"bad magic":          mutate(func(b []byte) { b[0] = 0 }),
		"other version":      mutate(func(b []byte) { b[2] = 2 }),
		"unknown kind":       mutate(func(b []byte) { b[3] = 9 }),
		"request, no target": mutate(func(b []byte) { b[3] = byte(probePingRequest) }),
	} {
		if m, err := decodeProbe(b); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, m)
		}
	}
}

func FuzzDecodeProbe(f *testing.F) {
	f.Add(probeMessage{kind: probePing, interval: time.Second, token: 9}.encode(nil))
	f.Add(probeMessage{kind: probePingRequest, token: 1, target: netip.MustParseAddrPort("[2001:db8::1]:1")}.encode(nil))
	f.Add([]byte{0xEF, 0x1B, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeProbe(b)
		if err != nil {
			return
		}
		// What decodes encodes to the same first probeMessageSize bytes,
		// but for the target of a message that carries none.
		again := m.encode(nil)
		if m.kind == probePingRequest && !bytes.Equal(again, b[:probeMessageSize]) {
			t.Errorf("%x decoded to %+v, which encodes to %x", b, m, again)
		}
		if m2, err := decodeProbe(again); err != nil || m2 != m {
			t.Errorf("%+v re-decoded to %+v, %v", m, m2, err)
		}
	})
}

// probeNet is a prober and agents' responders on loopback.
type probeNet struct {
	prober  *Prober
	agents  map[string]*Responder
	mu      sync.Mutex
	reports []probeReport
}

type probeReport struct {
	node      string
	reachable bool
	at        time.Time
}

func startProbeNet(t *testing.T, names ...string) *probeNet {
	t.Helper()
	n := &probeNet{agents: map[string]*Responder{}}
	var targets []ProbeTarget
	for _, name := range names {
		r, err := ListenResponder("127.0.0.1:0", ResponderConfig{})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = r.Serve() }()
		t.Cleanup(func() { _ = r.Close() })
		n.agents[name] = r
		targets = append(targets, ProbeTarget{Node: name, Addr: r.Addr(), Interval: DefaultHolderProbeInterval})
	}
	p, err := ListenProber("127.0.0.1:0", ProberConfig{}, func(node string, reachable bool) {
		n.mu.Lock()
		n.reports = append(n.reports, probeReport{node, reachable, time.Now()})
		n.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	p.SetTargets(targets)
	n.prober = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

func (n *probeNet) reported() []probeReport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.reports)
}

// waitReport waits up to d for a report about node and returns it.
func (n *probeNet) waitReport(t *testing.T, node string, d time.Duration) probeReport {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, r := range n.reported() {
			if r.node == node {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no report about %s within %v: %+v", node, d, n.reported())
	return probeReport{}
}

// TestProberJudgesADeadAgent: an agent that stops answering is reported
// unreachable, not before DeadIntervals of its interval (a witness
// confirms), and its peers stay reachable; answering again, it is
// reported reachable.
func TestProberJudgesADeadAgent(t *testing.T) {
	n := startProbeNet(t, "a", "b", "c")
	time.Sleep(3 * DefaultHolderProbeInterval)
	if r := n.reported(); len(r) != 0 {
		t.Fatalf("reports while every agent answers: %+v", r)
	}
	// b goes silent: its socket closes, as its process dies.
	addr := n.agents["b"].Addr()
	_ = n.agents["b"].Close()
	stopped := time.Now()
	r := n.waitReport(t, "b", 5*time.Second)
	if r.reachable {
		t.Fatalf("b reported reachable after it stopped")
	}
	if took := r.at.Sub(stopped); took < (DeadIntervals-1)*DefaultHolderProbeInterval {
		t.Errorf("b judged %v after it stopped: before DeadIntervals of silence", took)
	}
	t.Logf("b judged unreachable %v after it stopped", r.at.Sub(stopped).Round(time.Millisecond))
	if got := n.prober.Unreachable(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("unreachable: %v, want [b]", got)
	}
	// A new process on the same address answers again.
	again, err := ListenResponder(addr.String(), ResponderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = again.Serve() }()
	defer again.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(n.reported()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := n.reported(); len(got) != 2 || got[1].node != "b" || !got[1].reachable {
		t.Fatalf("reports: %+v, want b unreachable then reachable", got)
	}
}

// TestProberWithoutWitnessesJudgesNoOne: an observer whose witnesses do
// not answer either (it is the one cut off, or every agent is gone) judges
// no one, however long the silence.
func TestProberWithoutWitnessesJudgesNoOne(t *testing.T) {
	n := startProbeNet(t, "a", "b")
	time.Sleep(3 * DefaultHolderProbeInterval)
	for _, r := range n.agents {
		_ = r.Close()
	}
	time.Sleep(3 * DeadIntervals * DefaultHolderProbeInterval)
	if r := n.reported(); len(r) != 0 {
		t.Fatalf("reports with no witness answering: %+v", r)
	}
}

// TestProberForgivesItsOwnStall: an observer that stalls (a freeze of its
// process, here its lock held) for longer than the agents' bound judges no
// one when it resumes: the silence was its own.
func TestProberForgivesItsOwnStall(t *testing.T) {
	n := startProbeNet(t, "a", "b", "c")
	time.Sleep(3 * DefaultHolderProbeInterval)
	n.prober.mu.Lock()
	time.Sleep(2 * DeadIntervals * DefaultHolderProbeInterval)
	n.prober.mu.Unlock()
	time.Sleep(2 * DeadIntervals * DefaultHolderProbeInterval)
	if r := n.reported(); len(r) != 0 {
		t.Fatalf("reports after the observer's own stall: %+v", r)
	}
}

// TestProberHeldTarget: a restarting agent (its Lease's handover) is not
// judged while silent.
func TestProberHeldTarget(t *testing.T) {
	n := startProbeNet(t, "a", "b", "c")
	var targets []ProbeTarget
	for name, r := range n.agents {
		targets = append(targets, ProbeTarget{Node: name, Addr: r.Addr(), Interval: DefaultHolderProbeInterval, Held: name == "b"})
	}
	n.prober.SetTargets(targets)
	_ = n.agents["b"].Close()
	time.Sleep(3 * DeadIntervals * DefaultHolderProbeInterval)
	if r := n.reported(); len(r) != 0 {
		t.Fatalf("reports about a restarting agent: %+v", r)
	}
}

// TestResponderLost: an agent that hears its observer is not lost; one
// that stops hearing it is lost only when no peer answers either; and one
// that stalled past DeadIntervals - 1 intervals is lost whatever its peers
// say.
func TestResponderLost(t *testing.T) {
	n := startProbeNet(t, "a", "b", "c")
	a := n.agents["a"]
	peers := []netip.AddrPort{n.agents["b"].Addr(), n.agents["c"].Addr()}
	ctx := context.Background()
	time.Sleep(3 * DefaultHolderProbeInterval)
	if lost, why := a.Lost(ctx, func() []netip.AddrPort { return peers }); lost {
		t.Fatalf("lost while probed: %s", why)
	}
	// The observer goes away (stops probing a): the peers answer, so a
	// stays.
	n.prober.SetTargets(nil)
	for range 10 {
		time.Sleep(DefaultHolderProbeInterval / 2)
		if lost, why := a.Lost(ctx, func() []netip.AddrPort { return peers }); lost {
			t.Fatalf("lost with the observer away and the peers answering: %s", why)
		}
	}
	// Now the peers are silent too (a dead address stands for each): a
	// is cut off.
	dead := deadAddresses(t, 2)
	time.Sleep(FenceIntervals * DefaultHolderProbeInterval)
	lost, why := a.Lost(ctx, func() []netip.AddrPort { return dead })
	if !lost {
		t.Fatal("not lost with neither the observer nor any peer answering")
	}
	t.Logf("cut off: %s", why)

	// A stall: a fresh responder, probed again, then not called for
	// DeadIntervals intervals.
	n.prober.SetTargets([]ProbeTarget{{Node: "a", Addr: a.Addr(), Interval: DefaultHolderProbeInterval}})
	time.Sleep(2 * DefaultHolderProbeInterval)
	if lost, why := a.Lost(ctx, func() []netip.AddrPort { return peers }); lost {
		t.Fatalf("lost once probed again: %s", why)
	}
	time.Sleep(DeadIntervals * DefaultHolderProbeInterval)
	if lost, why := a.Lost(ctx, func() []netip.AddrPort { return peers }); !lost {
		t.Fatal("not lost after a stall of DeadIntervals intervals")
	} else {
		t.Logf("stalled: %s", why)
	}
}

// deadAddresses returns n loopback UDP addresses where nothing answers.
func deadAddresses(t *testing.T, n int) []netip.AddrPort {
	var out []netip.AddrPort
	for range n {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.LocalAddr().(*net.UDPAddr).AddrPort())
		_ = c.Close()
	}
	return out
}

// TestJudgeProbeVerdicts: an unreachable agent dies at the next judgement
// though its Lease is valid, even while the reader is blind to renewals; a
// renewal does not bring it back, its probes answering does; and probe
// deaths count towards the disruption rule.
func TestJudgeProbeVerdicts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	j := NewJudge(simJudge)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		j.Observe(now, renewedLease(name, now))
	}
	now = now.Add(time.Second)
	j.Unreachable("a", now)
	if v := j.Judge(now); !slices.Equal(v.Died, []string{"a"}) {
		t.Fatalf("died: %v, want [a]", v.Died)
	}
	j.Observe(now, renewedLease("a", now)) // its API connection still works
	if alive := j.AliveAgents(); alive["a"] {
		t.Error("a renewal brought an unreachable agent back")
	}
	if !j.Reachable("a", now) || !j.AliveAgents()["a"] {
		t.Error("a reachable again with a valid Lease is not alive")
	}
	// Blind to renewals (none seen for longer than BlindAfter), a probe
	// death still counts.
	now = now.Add(5 * time.Second)
	j.Unreachable("b", now)
	if v := j.Judge(now); !v.Blind || !slices.Equal(v.Died, []string{"b"}) {
		t.Errorf("blind judgement: %+v, want b dead", v)
	}
	// Three of five unreachable together: the third is held.
	j.Unreachable("c", now)
	j.Unreachable("d", now)
	v := j.Judge(now)
	if len(v.Died) != 1 || v.Held != 1 {
		t.Errorf("mass probe death: %+v, want one more dead and one held", v)
	}
	j.ForgetProbes()
	j.Observe(now, renewedLease("e", now))
	if v := j.Judge(now); len(v.Died) != 0 {
		t.Errorf("died after the probes were forgotten: %v", v.Died)
	}
}

// TestResponderUnhealthy: an agent whose dataplane is unhealthy answers
// for UnhealthyGrace, then no more, and the observer judges it
// unreachable; healthy again, it answers at once.
func TestResponderUnhealthy(t *testing.T) {
	n := startProbeNet(t, "a", "b", "c")
	var mu sync.Mutex
	healthy := true
	sick, err := ListenResponder("127.0.0.1:0", ResponderConfig{UnhealthyGrace: 300 * time.Millisecond, Healthy: func() bool {
		mu.Lock()
		defer mu.Unlock()
		return healthy
	}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sick.Serve() }()
	defer sick.Close()
	var targets []ProbeTarget
	for name, r := range n.agents {
		targets = append(targets, ProbeTarget{Node: name, Addr: r.Addr(), Interval: DefaultHolderProbeInterval})
	}
	n.prober.SetTargets(append(targets, ProbeTarget{Node: "sick", Addr: sick.Addr(), Interval: DefaultHolderProbeInterval}))
	time.Sleep(3 * DefaultHolderProbeInterval)
	mu.Lock()
	healthy = false
	mu.Unlock()
	turned := time.Now()
	r := n.waitReport(t, "sick", 5*time.Second)
	if r.reachable || r.at.Sub(turned) < 300*time.Millisecond {
		t.Fatalf("report %+v %v after the dataplane turned unhealthy: want unreachable, after the grace", r, r.at.Sub(turned))
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for len(n.reported()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := n.reported(); len(got) != 2 || !got[1].reachable {
		t.Fatalf("reports %+v: want sick reachable again", got)
	}
}

// TestResponderLostNeedsAPeerThatAnswered: an agent none of whose peers
// has ever answered (UDP between the nodes filtered) does not fence when
// its probes stop: the peers' silence proves nothing.
func TestResponderLostNeedsAPeerThatAnswered(t *testing.T) {
	n := startProbeNet(t, "a")
	a := n.agents["a"]
	time.Sleep(3 * DefaultHolderProbeInterval)
	n.prober.SetTargets(nil)
	time.Sleep(FenceIntervals*DefaultHolderProbeInterval + DefaultHolderProbeInterval)
	if lost, why := a.Lost(context.Background(), func() []netip.AddrPort { return deadAddresses(t, 2) }); lost {
		t.Fatalf("lost with peers that never answered: %s", why)
	}
}

// TestResponderLearnsItsPeersAnswer: an agent that hears its observer
// pings its peers by itself, so that a cut later finds it knowing that
// they can answer: cut off from observer and peers alike, it is lost
// without ever having asked them before.
func TestResponderLearnsItsPeersAnswer(t *testing.T) {
	n := startProbeNet(t, "a", "b")
	a := n.agents["a"]
	peers := []netip.AddrPort{n.agents["b"].Addr()}
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if lost, why := a.Lost(ctx, func() []netip.AddrPort { return peers }); lost {
			t.Fatalf("lost while probed: %s", why)
		}
		a.mu.Lock()
		learnt := a.peerAnswered
		a.mu.Unlock()
		if learnt {
			break
		}
		time.Sleep(DefaultHolderProbeInterval / 2)
	}
	// Cut: the observer and the peer go silent together.
	n.prober.SetTargets(nil)
	_ = n.agents["b"].Close()
	time.Sleep(FenceIntervals*DefaultHolderProbeInterval + DefaultHolderProbeInterval)
	if lost, _ := a.Lost(ctx, func() []netip.AddrPort { return peers }); !lost {
		t.Fatal("not lost, cut off from observer and peers, after its peer had answered once")
	}
}

// TestWitnessPoolPick: a pick is up to n distinct witnesses, never the
// silent target itself, and every fit target gets its turn.
func TestWitnessPoolPick(t *testing.T) {
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 9102)
	}
	pool := &witnessPool{}
	for i, name := range []string{"a", "b", "c", "d"} {
		pool.nodes, pool.addrs = append(pool.nodes, name), append(pool.addrs, addr(i))
	}
	chosen := map[netip.AddrPort]int{}
	for range 400 {
		picked := pool.pick("a", 2)
		if len(picked) != 2 || picked[0] == picked[1] {
			t.Fatalf("pick of 2 but a: %v", picked)
		}
		for _, w := range picked {
			if w == addr(0) {
				t.Fatalf("the silent target was picked as its own witness: %v", picked)
			}
			chosen[w]++
		}
	}
	for i := 1; i < 4; i++ {
		if chosen[addr(i)] < 100 {
			t.Errorf("witness %v chosen %d times of 800", addr(i), chosen[addr(i)])
		}
	}
	if got := pool.pick("a", 5); len(got) != 3 {
		t.Errorf("pick of 5 from 3 others: %v", got)
	}
	alone := &witnessPool{nodes: []string{"a"}, addrs: []netip.AddrPort{addr(0)}}
	if got := alone.pick("a", 2); len(got) != 0 {
		t.Errorf("a pool of the silent target alone gave %v", got)
	}
}
