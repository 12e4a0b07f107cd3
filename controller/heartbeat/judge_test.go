package heartbeat

import (
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDisrupted(t *testing.T) {
	for _, c := range []struct {
		dead, total int
		want        bool
	}{
		{0, 3, false}, {1, 3, false}, {2, 3, false}, {3, 3, true},
		{1, 1, true}, {1, 2, false}, {2, 2, true},
		{5, 10, false}, {6, 10, true}, {2, 4, false}, {3, 4, true},
		{54, 100, false}, {55, 100, true}, {0, 0, false},
	} {
		if got := Disrupted(c.dead, c.total); got != c.want {
			t.Errorf("Disrupted(%d, %d) = %v, want %v", c.dead, c.total, got, c.want)
		}
	}
}

// The simulation's timings: agents renewing 3 s Leases every second,
// judged with a Judge scaled to them. The rules are the same at every
// scale; the defaults (10 s and 40 s) only stretch the simulation.
const (
	simLease = 3 * time.Second
)

var simJudge = JudgeConfig{BlindAfter: 1500 * time.Millisecond, DisruptionWindow: 10 * time.Second, DisruptedFailoverInterval: 10 * time.Second}

// agents simulates agents renewing simLease Leases every second, staggered
// over the second, and a reader that observes them after a watch delay.
type agents struct {
	t0    time.Time
	judge *Judge
	// renewing: the agents that renew; their phase within the second.
	renewing map[string]time.Duration
	leases   map[string]*coordinationv1.Lease
	dead     map[string]time.Time // judged dead, when
	died     []string             // every death judged, in order
	next     time.Time            // when the last judgement asked to be judged again
}

func newAgents(n int) *agents {
	a := &agents{t0: time.Unix(1_800_000_000, 0), judge: NewJudge(simJudge), renewing: map[string]time.Duration{}, leases: map[string]*coordinationv1.Lease{}, dead: map[string]time.Time{}}
	for i := range n {
		a.renewing[fmt.Sprintf("node-%d", i)] = (time.Duration(i) * time.Second / time.Duration(n)).Truncate(10 * time.Millisecond)
	}
	return a
}

func renewedLease(name string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationDuration: simLease.String()}},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// run steps the simulation from the reader's time from to to in 10 ms
// steps: agents in renewing renew on their phase, and the reader observes
// each renewal unless seen says otherwise; the reader judges every step.
func (a *agents) run(from, to time.Duration, seen func(at time.Duration) bool) {
	const step = 10 * time.Millisecond
	for at := from; at < to; at += step {
		now := a.t0.Add(at)
		for name, phase := range a.renewing {
			if (at-phase)%time.Second == 0 && at >= phase {
				a.leases[name] = renewedLease(name, now)
			}
		}
		// Judged as the controller does: when an observation may change a
		// verdict, and when the last judgement's Next is due.
		changed := false
		if seen == nil || seen(at) {
			for _, l := range a.leases {
				changed = a.judge.Observe(now, l) || changed
			}
		}
		if !changed && (a.next.IsZero() || now.Before(a.next)) {
			continue
		}
		v := a.judge.Judge(now)
		a.next = v.Next
		for _, name := range v.Died {
			a.dead[name] = now
			a.died = append(a.died, name)
		}
		alive := a.judge.AliveAgents()
		for name := range a.dead {
			if alive[name] {
				delete(a.dead, name)
			}
		}
	}
}

func (a *agents) deadNames() []string {
	var out []string
	for name := range a.dead {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func TestJudgeFailsOverOneDeadAgentAtItsExpiry(t *testing.T) {
	a := newAgents(3)
	a.run(0, 10*time.Second, nil)
	if len(a.dead) != 0 {
		t.Fatalf("healthy agents judged dead: %v", a.deadNames())
	}
	phase := a.renewing["node-1"]
	delete(a.renewing, "node-1") // stops renewing after its renewal at 9 s + phase
	a.run(10*time.Second, 20*time.Second, nil)
	if got := a.deadNames(); !slices.Equal(got, []string{"node-1"}) {
		t.Fatalf("dead: %v, want node-1", got)
	}
	lastRenewal := a.t0.Add(9*time.Second + phase)
	if at := a.dead["node-1"]; at.Before(lastRenewal.Add(simLease)) || at.After(lastRenewal.Add(simLease+10*time.Millisecond)) {
		t.Errorf("node-1 judged dead at +%v after its last renewal, want its Lease duration %v", at.Sub(lastRenewal), simLease)
	}
}

// An API server away for 10 s: no renewal is written or observed. None of
// the agents dies, neither during the outage nor when renewals come back
// one by one; an agent that never comes back dies a Lease duration after
// sight returned.
func TestJudgeMovesNothingAcrossAnAPIServerOutage(t *testing.T) {
	a := newAgents(3)
	a.run(0, 10*time.Second, nil)
	saved := a.renewing
	a.renewing = nil
	a.run(10*time.Second, 20*time.Second, func(time.Duration) bool { return false })
	if len(a.dead) != 0 {
		t.Fatalf("dead during the outage: %v", a.deadNames())
	}
	// Back: node-2 never renews again; the others renew on their phase.
	a.renewing = map[string]time.Duration{"node-0": saved["node-0"], "node-1": saved["node-1"]}
	a.run(20*time.Second, 22*time.Second, nil)
	if len(a.dead) != 0 {
		t.Fatalf("dead as renewals came back: %v", a.deadNames())
	}
	a.run(22*time.Second, 30*time.Second, nil)
	if got := a.deadNames(); !slices.Equal(got, []string{"node-2"}) {
		t.Fatalf("dead after the outage: %v, want node-2", got)
	}
	// Sight returned with the first renewal after 20 s (node-0's, at
	// 20 s + its phase 0).
	if at, want := a.dead["node-2"], a.t0.Add(20*time.Second+simLease); at.Before(want) || at.After(want.Add(10*time.Millisecond)) {
		t.Errorf("node-2 judged dead at %v, want a Lease duration after sight returned (%v)", at.Sub(a.t0), want.Sub(a.t0))
	}
}

// The reader's watch stalls for 10 s while the agents keep renewing: the
// renewals arrive late, together; nobody dies.
func TestJudgeSurvivesAStalledWatch(t *testing.T) {
	a := newAgents(5)
	a.run(0, 30*time.Second, func(at time.Duration) bool { return at < 10*time.Second || at >= 20*time.Second })
	if len(a.died) != 0 {
		t.Fatalf("judged dead: %v", a.died)
	}
}

// A reader that starts after an outage lists Leases that all ran out
// together: they are given a Lease duration. One that ran out long before
// the others (its node died before) is dead at once.
func TestJudgeStartingAfterAnOutage(t *testing.T) {
	j := NewJudge(simJudge)
	now := time.Unix(1_800_000_000, 0)
	j.Observe(now, renewedLease("a", now.Add(-12*time.Second)))
	j.Observe(now, renewedLease("b", now.Add(-11500*time.Millisecond)))
	j.Observe(now, renewedLease("old", now.Add(-time.Hour)))
	v := j.Judge(now)
	if !slices.Equal(v.Died, []string{"old"}) {
		t.Fatalf("died at start: %v, want old", v.Died)
	}
	if want := now.Add(simLease); !v.Next.Equal(want) {
		t.Errorf("next judgement at %v, want %v", v.Next.Sub(now), want.Sub(now))
	}
	// b renews; a does not: a dies a Lease duration after the start.
	j.Observe(now.Add(time.Second), renewedLease("b", now.Add(time.Second)))
	if v := j.Judge(now.Add(2 * time.Second)); len(v.Died) != 0 {
		t.Fatalf("died before the grace ended: %v", v.Died)
	}
	j.Observe(now.Add(2*time.Second), renewedLease("b", now.Add(2*time.Second)))
	if v := j.Judge(now.Add(simLease)); !slices.Equal(v.Died, []string{"a"}) {
		t.Fatalf("died at the end of the grace: %v, want a", v.Died)
	}
}

// Six of ten agents die at once while the reader still sees the other
// four: the first five are failed over at once, the sixth is held by the
// disruption rule and let through one interval later.
func TestJudgeHoldsAMassDeath(t *testing.T) {
	a := newAgents(10)
	a.run(0, 5*time.Second, nil)
	for i := range 6 {
		delete(a.renewing, fmt.Sprintf("node-%d", i))
	}
	a.run(5*time.Second, 9*time.Second, nil)
	if got := len(a.dead); got != 5 {
		t.Fatalf("%d dead 4 s into the mass death, want 5 (the sixth held): %v", got, a.deadNames())
	}
	v := a.judge.Judge(a.t0.Add(9 * time.Second))
	if v.Held != 1 {
		t.Errorf("held %d, want 1", v.Held)
	}
	a.run(9*time.Second, 9*time.Second+simJudge.DisruptedFailoverInterval, nil)
	if got := len(a.dead); got != 6 {
		t.Fatalf("%d dead after one disrupted failover interval, want 6", got)
	}
}
