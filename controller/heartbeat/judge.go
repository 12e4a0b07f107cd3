package heartbeat

import (
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The disruption rule, after kube-controller-manager's node lifecycle
// controller, which stops or slows evictions in a zone where at least
// --unhealthy-zone-threshold (0.55) of the nodes, and more than two, are
// unhealthy: so many nodes failing together says more about the observer
// (the API server, the network to it, the controller's watch) than about
// the nodes.
const (
	// DisruptionPercent is the share of the agents that, dead together,
	// make a disruption. Lower freezes failover sooner on a real mass loss
	// (a rack's power); higher lets a wider outage of the observer move more
	// services before the freeze.
	DisruptionPercent = 55
	// DisruptionMinDead is the fewest dead agents that make a partial
	// disruption: in small clusters losing one or two nodes at once is an
	// ordinary failure, and is failed over. All agents dead at once is
	// always a disruption.
	DisruptionMinDead = 3
)

// Disrupted applies the disruption rule to dead agents out of total: all
// of them, or at least DisruptionMinDead and DisruptionPercent % of them.
// The agent applies it to its peers before fencing itself, the cluster
// component before failing nodes over.
func Disrupted(dead, total int) bool {
	if dead <= 0 || total <= 0 {
		return false
	}
	return dead >= total || (dead >= DisruptionMinDead && 100*dead >= DisruptionPercent*total)
}

// Defaults of JudgeConfig.
const (
	// DefaultBlindAfter: a reader that has observed no renewal of any agent
	// Lease for this long has lost sight of the agents (its watch stalled,
	// the API server is away, it is cut off), not the agents their lives.
	// 1.5 renew intervals: with two or more agents renewing every second, a
	// healthy watch delivers a renewal at least every second. Shorter
	// mistakes a slow API server for blindness (failover waits for the next
	// renewal); longer lets the first Leases run out before blindness is
	// noticed (their nodes die in the reader's eyes: an agent whose last
	// renewal came one interval before the stall runs out 2 s after it).
	DefaultBlindAfter = 3 * DefaultRenewInterval / 2
	// DefaultDisruptionWindow: deaths within this window count together
	// towards the disruption rule. It spans the spread of the renewals
	// (one interval) with room for a slow API server.
	DefaultDisruptionWindow = 2 * DefaultRenewInterval
	// DefaultDisruptedFailoverInterval: in a disruption, one more dead node
	// is failed over per this interval, the longest dead first (a real mass
	// loss recovers, slowly; kube-controller-manager's secondary eviction
	// rate is one node per 100 s). Shorter recovers a real loss sooner and
	// moves more services in a long outage of the observer.
	DefaultDisruptedFailoverInterval = 10 * time.Second
)

// JudgeConfig tunes a Judge; zero fields take the defaults above.
type JudgeConfig struct {
	BlindAfter                time.Duration
	DisruptionWindow          time.Duration
	DisruptedFailoverInterval time.Duration
}

// Judge decides which agents are dead, for the cluster component, from
// the agent Leases it observes and from when it observed them. A Lease
// that runs out is not enough:
//
//   - Sight. Time during which the reader saw no renewal of any agent (see
//     DefaultBlindAfter) is not held against the agents: while blind, no
//     agent dies, and once a renewal is seen again every agent whose Lease
//     was valid when sight was lost gets a full Lease duration from then
//     to renew. An API server that was down for 10 s therefore moves no
//     service: the agents renew within a second of its return. A reader
//     that has just started has had no sight before: the Leases it first
//     lists that were valid at the newest renewal among them are taken as
//     alive when sight was lost; a Lease that had run out before that
//     belongs to a node dead before the reader started, and is dead now.
//   - Disruption. Among the agents alive at the start of the last
//     DisruptionWindow, deaths are taken at once until they reach the
//     disruption rule (Disrupted); beyond it, one per
//     DisruptedFailoverInterval.
//
// A Judge is not safe for concurrent use. Its methods take the reader's
// clock; renewal times come from the agents' clocks (see the package doc on
// skew).
type Judge struct {
	cfg    JudgeConfig
	leases map[string]observation
	// dead are the agents judged dead, and since when.
	dead map[string]time.Time
	// lastObserved is when the reader last observed a renewal of any agent.
	lastObserved time.Time
	// sightSince is when the reader's current sight began; lostSight is the
	// last observation before the blind spell that ended then (zero if
	// sight began with the reader's start: startRef stands in for it).
	sightSince, lostSight time.Time
	// startRef is the newest renewal time among the Leases first listed.
	startRef time.Time
	// unreachable are the agents the probe protocol cannot reach (Prober),
	// and since when: dead at once, whatever their Leases say.
	unreachable map[string]time.Time
	// holdingSince is when the disruption rule began holding deaths back
	// (zero while it holds none); lastHeldRelease is when it last let one
	// through.
	holdingSince, lastHeldRelease time.Time
}

type observation struct {
	renewed time.Time
	expiry  time.Time
	valid   bool
}

// NewJudge returns a Judge that has observed nothing.
func NewJudge(cfg JudgeConfig) *Judge {
	if cfg.BlindAfter <= 0 {
		cfg.BlindAfter = DefaultBlindAfter
	}
	if cfg.DisruptionWindow <= 0 {
		cfg.DisruptionWindow = DefaultDisruptionWindow
	}
	if cfg.DisruptedFailoverInterval <= 0 {
		cfg.DisruptedFailoverInterval = DefaultDisruptedFailoverInterval
	}
	return &Judge{cfg: cfg, leases: map[string]observation{}, dead: map[string]time.Time{}, unreachable: map[string]time.Time{}}
}

// Observe records agent Lease l as the reader sees it at now (an add or an
// update from its watch). A new renewal time is a renewal: it brings a dead
// agent back. It returns whether the verdict may have changed at once: a
// new Lease, a dead agent renewing, sight returning, or a Lease that now
// runs out sooner than before. A plain renewal only moves a deadline
// later, which the next scheduled judgement (Verdict.Next) sees, so a
// reader need not judge every agent on every renewal.
func (j *Judge) Observe(now time.Time, l *coordinationv1.Lease) bool {
	expiry, valid := Expiry(l)
	o := observation{expiry: expiry, valid: valid}
	if valid {
		o.renewed = l.Spec.RenewTime.Time
	}
	prev, known := j.leases[l.Name]
	j.leases[l.Name] = o
	if known && prev.valid == o.valid && prev.renewed.Equal(o.renewed) && prev.expiry.Equal(o.expiry) {
		return false // not a renewal
	}
	sooner := !known || prev.valid != o.valid || o.expiry.Before(prev.expiry)
	if !valid {
		return sooner
	}
	sightReturned := true
	switch {
	case j.sightSince.IsZero():
		j.sightSince = now
	case now.Sub(j.lastObserved) > j.cfg.BlindAfter:
		j.lostSight, j.sightSince = j.lastObserved, now
	default:
		sightReturned = false
	}
	if !known && j.lostSight.IsZero() && now.Sub(j.sightSince) <= j.cfg.BlindAfter && o.renewed.After(j.startRef) {
		j.startRef = o.renewed
	}
	j.lastObserved = now
	if _, cut := j.unreachable[l.Name]; cut {
		return sooner || sightReturned // a renewal does not answer the probes
	}
	_, wasDead := j.dead[l.Name]
	delete(j.dead, l.Name)
	return sooner || wasDead || sightReturned
}

// Unreachable records that the probe protocol cannot reach the agent of
// name since now (Prober): it is due to die at the next judgement, whatever
// its Lease says and even while the reader is blind to renewals (the probes
// do not go through the API server). The disruption rule still applies.
func (j *Judge) Unreachable(name string, now time.Time) {
	if _, ok := j.unreachable[name]; !ok {
		j.unreachable[name] = now
	}
}

// Reachable records that the probe protocol reaches the agent of name
// again: it lives again if its Lease is valid. It returns whether that
// brings a dead agent back.
func (j *Judge) Reachable(name string, now time.Time) bool {
	if _, ok := j.unreachable[name]; !ok {
		return false
	}
	delete(j.unreachable, name)
	if _, dead := j.dead[name]; !dead {
		return false
	}
	if o, ok := j.leases[name]; ok && o.valid && now.Before(j.deadline(o)) {
		delete(j.dead, name)
		return true
	}
	return false
}

// ForgetProbes drops every probe verdict, when the prober that made them
// stops (the reader no longer leads). Agents dead by them stay dead until
// they renew.
func (j *Judge) ForgetProbes() {
	clear(j.unreachable)
}

// Forget drops the Lease of name (deleted): its agent is neither alive nor
// dead.
func (j *Judge) Forget(name string) {
	delete(j.leases, name)
	delete(j.dead, name)
	delete(j.unreachable, name)
}

// AliveAgents returns the agents that have a Lease and are not judged dead.
func (j *Judge) AliveAgents() map[string]bool {
	out := make(map[string]bool, len(j.leases))
	for name := range j.leases {
		if _, dead := j.dead[name]; !dead {
			out[name] = true
		}
	}
	return out
}

// UnreachableAgents returns the agents the probes cannot reach
// (Unreachable), dead or held back by the disruption rule.
func (j *Judge) UnreachableAgents() map[string]bool {
	out := make(map[string]bool, len(j.unreachable))
	for name := range j.unreachable {
		out[name] = true
	}
	return out
}

// Verdict is the outcome of a Judge's pass.
type Verdict struct {
	// Died are the agents judged dead in this pass.
	Died []string
	// Blind: the reader has lost sight of the agents; no agent dies.
	Blind bool
	// Held counts agents whose Lease ran out but whose death the
	// disruption rule holds back.
	Held int
	// Next is when to judge again (zero: at the next observation).
	Next time.Time
}

// Judge judges every observed agent at now.
func (j *Judge) Judge(now time.Time) Verdict {
	var v Verdict
	v.Blind = j.lastObserved.IsZero() || now.Sub(j.lastObserved) > j.cfg.BlindAfter
	type candidate struct {
		name     string
		deadline time.Time
	}
	var due []candidate
	for name, o := range j.leases {
		if _, dead := j.dead[name]; dead {
			continue
		}
		if cut, ok := j.unreachable[name]; ok {
			due = append(due, candidate{name, cut})
			continue
		}
		deadline := j.deadline(o)
		if now.Before(deadline) {
			v.Next = earliest(v.Next, deadline)
			continue
		}
		if !v.Blind {
			due = append(due, candidate{name, deadline})
		}
	}
	if len(due) == 0 {
		j.holdingSince = time.Time{}
		return v
	}
	recent := 0
	for _, since := range j.dead {
		if now.Sub(since) < j.cfg.DisruptionWindow {
			recent++
		}
	}
	// Those alive at the window's start: the living, and the recently dead.
	population := len(j.leases) - len(j.dead) + recent
	slices.SortFunc(due, func(a, b candidate) int { return a.deadline.Compare(b.deadline) })
	for _, c := range due {
		if Disrupted(recent+1, population) {
			if j.holdingSince.IsZero() {
				j.holdingSince = now
			}
			gate := j.holdingSince
			if j.lastHeldRelease.After(gate) {
				gate = j.lastHeldRelease
			}
			if gate = gate.Add(j.cfg.DisruptedFailoverInterval); now.Before(gate) {
				v.Held++
				v.Next = earliest(v.Next, gate)
				continue
			}
			j.lastHeldRelease = now
		}
		j.dead[c.name] = now
		v.Died = append(v.Died, c.name)
		recent++
	}
	if v.Held == 0 {
		j.holdingSince = time.Time{}
	}
	return v
}

// deadline is when an agent with observation o dies unless it renews: its
// Lease's expiry, extended to a full duration after sight returned if the
// Lease was valid when sight was lost.
func (j *Judge) deadline(o observation) time.Time {
	if !o.valid {
		return time.Time{}
	}
	lost := j.lostSight
	if lost.IsZero() {
		lost = j.startRef
	}
	if o.expiry.After(lost) {
		if extended := j.sightSince.Add(o.expiry.Sub(o.renewed)); extended.After(o.expiry) {
			return extended
		}
	}
	return o.expiry
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
