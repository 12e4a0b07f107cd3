package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/wait"
)

// Agent Leases in TestProbeProtocol are renewed every probeTestRenew and
// valid for probeTestLease: far longer than any step of the test, so that
// a host that moves was moved by the probes, and one that stays was not
// kept by a Lease running out late.
const (
	probeTestRenew = time.Second
	probeTestLease = 2 * time.Minute
)

// probeFailoverBound is what the test allows from a host's death to its
// service's new host in status: the protocol's own bound
// (heartbeat.DeadIntervals holder intervals, and the witnesses' answer) is
// about 0.7 s; the rest is room for a loaded test machine. The figures
// are measured by make bench-failover, not here.
const probeFailoverBound = 3 * time.Second

// TestProbeProtocol runs the controller binary against a real API server
// and three agents that renew their Leases and answer the probe protocol
// on loopback (clustertest.ProbeRelay), and checks the protocol's rules
// in turn on the host of one EgressService:
//
//   - cut off from the leader but reached by the witnesses, it stays the
//     host, during the cut and after it (two observers that disagree move
//     nothing back and forth);
//   - the leader frozen (SIGSTOP) for longer than the probes' bound and
//     resumed judges no one dead;
//   - an API server outage of 10 s moves nothing;
//   - dead to the probes while its Lease is still valid, it fails over
//     within probeFailoverBound, and the Event says the host was lost as
//     unreachable;
//   - answering again, it stays a candidate, and the host stays put.
func TestProbeProtocol(t *testing.T) {
	bin := proc.Build(t, "cmd/egressflow-controller")
	env := clustertest.Start(t)
	nodes := []string{"node-a", "node-b", "node-c"}
	agents := map[string]*clustertest.Agent{}
	for _, n := range nodes {
		env.CreateNode(t, n, nil, true)
		agents[n] = env.StartProbedAgent(t, n, probeTestRenew, probeTestLease)
	}
	ns := env.Namespace(t)
	var endpoints []clustertest.Endpoint
	for i, n := range nodes {
		endpoints = append(endpoints, clustertest.Endpoint{IP: fmt.Sprintf("10.128.0.%d", 10+i), Node: n})
	}
	env.CreateService(t, clustertest.Service{Namespace: ns, Name: "web", IngressIPs: []string{"192.0.2.10"}, Endpoints: endpoints})
	env.CreateEgressService(t, ns, "web", esv1.EgressServiceSpec{})

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Cluster.WriteKubeconfig(kubeconfig, kubetest.Controller); err != nil {
		t.Fatal(err)
	}
	controller := proc.Start(t, bin, "--kubeconfig="+kubeconfig, "--identity=probe-test", "--pod-cidrs="+clustertest.PodCIDR,
		"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=100ms",
		"--health-bind-address="+freeAddr(t), "--metrics-bind-address=", "-v=2")

	host := func() string { return env.GetEgressService(t, ns, "web").Status.Host }
	wait.Until(t, 30*time.Second, func() error {
		if host() == "" {
			return fmt.Errorf("no host yet")
		}
		return nil
	})
	first := host()
	// The leader probes the host at the holders' rate once it has seen the
	// agents' probe addresses and the assignment.
	wait.Until(t, 10*time.Second, func() error {
		if !strings.Contains(controller.Output(), "Leading") {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	time.Sleep(time.Second)
	stays := func(step string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if h := host(); h != first {
				t.Fatalf("%s: the host moved from %s to %s", step, first, h)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Two observers that disagree: the leader hears nothing, the
	// witnesses reach the host.
	agents[first].Probes().CutFromObserver(true)
	stays("cut off from the leader alone", 10*heartbeat.DeadIntervals*heartbeat.DefaultHolderProbeInterval)
	agents[first].Probes().CutFromObserver(false)
	stays("reached by the leader again", 2*time.Second)

	// A frozen observer.
	if err := controller.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := controller.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stays("after the leader's freeze", 3*time.Second)

	// An API server outage of 10 s.
	env.Cluster.StopAPIServer()
	time.Sleep(10 * time.Second)
	if err := env.Cluster.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	stays("after a 10 s API server outage", 5*time.Second)

	// The host dies to the probes; its Lease stays valid for minutes.
	agents[first].Probes().StopAnswering(true)
	died := time.Now()
	wait.Until(t, probeFailoverBound, func() error {
		if h := host(); h == first || h == "" {
			return fmt.Errorf("host %q", h)
		}
		return nil
	})
	second := host()
	t.Logf("host %s dead to the probes: %s hosts %v later", first, second, time.Since(died).Round(time.Millisecond))
	wait.Until(t, 5*time.Second, func() error {
		for _, e := range env.Events(t, ns, "web") {
			if e.Reason == "HostLost" && strings.Contains(e.Message, "host "+first+" lost (AgentUnreachable)") {
				return nil
			}
		}
		return fmt.Errorf("no HostLost Event for %s as AgentUnreachable", first)
	})
	lease, err := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(context.Background(), first, metav1.GetOptions{})
	if err != nil || !heartbeat.Fresh(lease, time.Now()) {
		t.Errorf("the dead host's Lease should still be valid (the probes moved it, not the Lease): %v", err)
	}

	// It answers again: nothing moves back.
	agents[first].Probes().StopAnswering(false)
	first = second
	stays("the dead host answering again", 3*time.Second)
}
