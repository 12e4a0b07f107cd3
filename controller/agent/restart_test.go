package agent

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// restartProbeInterval is how often each endpoint sends while ovs-vswitchd
// restarts, as in the issue that found the leak (50 ms UDP traffic).
const restartProbeInterval = 50 * time.Millisecond

// restartDowntimes are how long ovs-vswitchd stays dead in a round: not at
// all (restarted at once, the harshest race with the agent's hold) and 3 s
// (the agent has long lost the switch).
var restartDowntimes = []time.Duration{0, 3 * time.Second}

// restartEnv is a host node and a steering node with an endpoint each,
// sending UDP in both families throughout, and a capture on the external
// host.
type restartEnv struct {
	*env
	host    *topology.Node
	a, b    *topology.Pod
	lbs     []netip.Addr
	capture *topology.Capture
	stop    func() int
}

// newRestartEnv starts it; setup, if not nil, may change how the agents
// start (env.unguarded, env.configureAgents).
func newRestartEnv(t testing.TB, probeInterval time.Duration, setup func(*env)) *restartEnv {
	e := newEnv(t, 2)
	if setup != nil {
		setup(e)
	}
	r := &restartEnv{env: e, host: e.topo.Nodes[0],
		lbs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}}
	r.a, r.b = e.addPod(r.host, "a"), e.addPod(e.topo.Nodes[1], "b")
	e.hostWeb(r.host, r.lbs, r.a, r.b)
	r.capture = e.topo.External.Capture(t)
	r.stop = e.probeEvery(probeInterval, r.a, r.b)
	return r
}

// restartHost kills the host's ovs-vswitchd, starts it again after
// downtime, and returns how long after it answered again (its control
// socket, as ovstest.StartVswitchd waits for) the external host first saw
// an endpoint's traffic with the LB IP of each family: the later of the two.
func (r *restartEnv) restartHost(t testing.TB, downtime time.Duration) time.Duration {
	t.Helper()
	r.host.StopVswitchd(t)
	time.Sleep(downtime)
	r.host.StartVswitchd(t)
	answered := time.Now()
	var resumed time.Duration
	for _, lb := range r.lbs {
		wait.Until(t, convergeTimeout, func() error {
			at, ok := r.server.FirstFrom(lb, answered)
			if !ok {
				return fmt.Errorf("no traffic from LB IP %s since ovs-vswitchd answered again", lb)
			}
			resumed = max(resumed, at.Sub(answered))
			return nil
		})
	}
	return resumed
}

// leaks stops the traffic and the capture and returns the packets the
// external host received from an endpoint's pod IP, addressed to it (as
// the other agent tests count them: the pods, attached to br-ex here, also
// send neighbour solicitations to link-scope multicast groups, which stay
// on the segment and are not egress).
func (r *restartEnv) leaks() (leaked []topology.Packet, sent int) {
	sent = r.stop()
	pods := map[netip.Addr]bool{r.a.IP: true, r.a.IP6: true, r.b.IP: true, r.b.IP6: true}
	external := map[netip.Addr]bool{r.topo.External.IP: true, r.topo.External.IP6: true}
	for _, p := range r.capture.Stop() {
		if pods[p.Src] && external[p.Dst] {
			leaked = append(leaked, p)
		}
	}
	return leaked, sent
}

// TestAgentVswitchdRestartLeaksNothing: the host's ovs-vswitchd is killed
// and started again, at once and after 3 s, ten rounds each, while an
// endpoint on the host and one steered from the other node send UDP every
// 50 ms in both families. The restarted vswitchd forwards nothing until the
// agent has replayed its flows (the agent holds it through
// flow-restore-wait when the connection drops), so the capture on the
// external host never sees a pod IP, and the LB IP's traffic resumes after
// every round.
func TestAgentVswitchdRestartLeaksNothing(t *testing.T) {
	r := newRestartEnv(t, restartProbeInterval, nil)
	var resumes []time.Duration
	for range 10 {
		for _, downtime := range restartDowntimes {
			resumes = append(resumes, r.restartHost(t, downtime))
		}
	}
	leaked, sent := r.leaks()
	for _, p := range leaked[:min(len(leaked), 10)] {
		t.Logf("leaked: %v", p)
	}
	if len(leaked) > 0 {
		t.Fatalf("%d packets left with an endpoint's pod IP across %d vswitchd restarts", len(leaked), len(resumes))
	}
	slices.Sort(resumes)
	t.Logf("%d restarts, %d datagrams sent, no pod IP on the wire; LB-IP traffic resumed %v to %v after vswitchd answered",
		len(resumes), sent, resumes[0].Round(time.Millisecond), resumes[len(resumes)-1].Round(time.Millisecond))
}

// slowHolds is a forwarding gate whose holds each take holdDelay longer,
// as on a node whose database answers slowly or whose agent is not
// scheduled for that long when ovs-vswitchd dies.
type slowHolds struct {
	ForwardingGate
}

// holdDelay is far longer than a restarted ovs-vswitchd takes to read its
// database (tens of milliseconds), so that a hold that merely raced the
// restart would lose every round.
const holdDelay = 500 * time.Millisecond

func (s slowHolds) HoldForwarding(ctx context.Context) error {
	select {
	case <-time.After(holdDelay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.ForwardingGate.HoldForwarding(ctx)
}

// TestAgentSlowHoldStillHoldsTheSuccessor: when the agent's hold is slow
// (holdDelay per write), a vswitchd killed and started again at once
// still forwards no pod IP: its successor cannot read the database before
// the hold is written, since the agent stands in line for vswitchd's
// database lock and holds it while it writes. The LB IP's traffic resumes
// after every round.
func TestAgentSlowHoldStillHoldsTheSuccessor(t *testing.T) {
	r := newRestartEnv(t, restartProbeInterval, func(e *env) {
		e.configureAgents = func(cfg *Config) {
			if cfg.Forwarding != nil {
				cfg.Forwarding = slowHolds{cfg.Forwarding}
			}
		}
	})
	const rounds = 5
	for range rounds {
		r.restartHost(t, 0)
	}
	leaked, sent := r.leaks()
	for _, p := range leaked[:min(len(leaked), 10)] {
		t.Logf("leaked: %v", p)
	}
	if len(leaked) > 0 {
		t.Fatalf("%d packets left with an endpoint's pod IP across %d vswitchd restarts with holds %v slow", len(leaked), rounds, holdDelay)
	}
	t.Logf("%d restarts with holds %v slow, %d datagrams sent, no pod IP on the wire", rounds, holdDelay, sent)
}

// benchRestartProbeInterval is finer than the test's, so that the resume
// time is measured to 10 ms rather than to 50.
var benchRestartProbeInterval = flag.Duration("restart-probe-interval", 10*time.Millisecond, "BenchmarkVswitchdRestart: how often each endpoint sends")

// BenchmarkVswitchdRestart measures the time from a restarted
// ovs-vswitchd answering to the first LB-IP packet at the external host
// (goal: at most 1 s), for each downtime, and counts pod-IP packets (goal:
// none). Each iteration is one round of each downtime; `make
// bench-restart` runs 10. Beside the agent as built ("guarded") it runs
// the agent as it was before the restart guard ("unguarded": no hold,
// the remote backoff), on its own cluster in the same run, for the ratio.
func BenchmarkVswitchdRestart(b *testing.B) {
	for _, mode := range []struct {
		name      string
		unguarded bool
	}{{"guarded", false}, {"unguarded", true}} {
		b.Run(mode.name, func(b *testing.B) {
			r := newRestartEnv(b, *benchRestartProbeInterval, func(e *env) { e.unguarded = mode.unguarded })
			resumes := map[time.Duration][]time.Duration{}
			for b.Loop() {
				for _, downtime := range restartDowntimes {
					resumes[downtime] = append(resumes[downtime], r.restartHost(b, downtime))
				}
			}
			b.StopTimer()
			leaked, sent := r.leaks()
			for _, downtime := range restartDowntimes {
				d := resumes[downtime]
				slices.Sort(d)
				p50, worst := d[len(d)/2], d[len(d)-1]
				b.Logf("%s, downtime %v: %d rounds, vswitchd answering -> first LB-IP packet p50 %v, max %v", mode.name, downtime, len(d),
					p50.Round(time.Millisecond), worst.Round(time.Millisecond))
				name := fmt.Sprintf("down%gs", downtime.Seconds())
				b.ReportMetric(float64(p50.Milliseconds()), name+"-resume-p50-ms")
				b.ReportMetric(float64(worst.Milliseconds()), name+"-resume-max-ms")
			}
			b.ReportMetric(float64(len(leaked)), "pod-IP-packets")
			b.Logf("%s: %d datagrams sent, %d left with a pod IP", mode.name, sent, len(leaked))
			if len(leaked) > 0 && !mode.unguarded {
				b.Errorf("%d packets left with an endpoint's pod IP", len(leaked))
			}
		})
	}
}
