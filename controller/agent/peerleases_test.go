package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
)

// TestAgentPeerFacts: an agent reads a peer's facts from its heartbeat
// Lease while that peer publishes no peer-facts Lease (an agent of an
// older version), keeps watching the heartbeat Leases as long as one live
// peer lacks one, and once every peer has one, reads the peer-facts
// Leases alone and stops watching the heartbeat Leases; the peer's facts
// are then what its peer-facts Lease says, and a change of them reaches
// the agent.
func TestAgentPeerFacts(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	a := e.startAgent(n1)
	mac := func() (string, error) {
		leases, err := a.peerLeases()
		if err != nil {
			return "", err
		}
		l := leases[n2.Name]
		if l == nil {
			return "", fmt.Errorf("no facts of %s", n2.Name)
		}
		return heartbeat.ReadFacts(l).BridgeMAC, nil
	}
	want := n2.BridgeMAC(t)
	eventually(t, "the peer's MAC from its heartbeat Lease", func() error {
		if got, err := mac(); err != nil || got != want {
			return fmt.Errorf("MAC of %s: %q, %v; want %q", n2.Name, got, err, want)
		}
		return nil
	})
	time.Sleep(heartbeatRetireCheck + time.Second)
	if !a.readingHeartbeats.Load() {
		t.Fatal("stopped reading the heartbeat Leases while a peer has no peer-facts Lease")
	}

	// Both nodes' agents publish peer-facts Leases, as the agent's main
	// does; n2's says another MAC than its heartbeat Lease, to tell them
	// apart.
	ctx := context.Background()
	for _, n := range e.topo.Nodes {
		facts := heartbeat.Facts{BridgeMAC: n.BridgeMAC(t)}
		if n == n2 {
			facts.BridgeMAC = "02:00:00:00:00:77"
		}
		renewer, err := heartbeat.NewRenewer(e.agentKube.CoordinationV1(), heartbeat.RenewerConfig{
			Namespace: kubetest.SystemNamespace, NodeName: n.Name, LeaseDuration: time.Hour, RenewInterval: time.Minute,
			Facts: func() heartbeat.Facts { return facts }, PeerFacts: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := renewer.RenewOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := e.admin.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, n2.Name+".facts", metav1.GetOptions{})
	if err != nil || l.Labels[heartbeat.LeaseLabel] != heartbeat.PeerFactsLabelValue || *l.Spec.HolderIdentity != n2.Name {
		t.Fatalf("peer-facts Lease of %s: %+v, %v", n2.Name, l, err)
	}
	eventually(t, "the heartbeat Leases no longer read", func() error {
		if a.readingHeartbeats.Load() {
			return fmt.Errorf("still reading the heartbeat Leases")
		}
		return nil
	})
	if got, err := mac(); err != nil || got != "02:00:00:00:00:77" {
		t.Errorf("MAC of %s once the heartbeat Leases are no longer read: %q, %v; want its peer-facts Lease's", n2.Name, got, err)
	}
}
