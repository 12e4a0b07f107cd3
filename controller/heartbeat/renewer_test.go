package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// TestRenewerAgainstAPIServer runs the agent side as the agent's service
// account with deploy/agent/rbac.yaml applied: it creates and renews its
// Lease with the facts, stops renewing while unhealthy (the Lease expires),
// recovers, and survives someone else's write to its Lease. The cluster
// side's Fresh and ReadFacts read what it wrote.
func TestRenewerAgainstAPIServer(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	agent := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	var unhealthy atomic.Bool
	facts := heartbeat.Facts{BridgeMAC: "02:00:00:00:00:0a", SteerAddresses: []netip.Addr{netip.MustParseAddr("172.18.0.10")}, SyncState: heartbeat.SyncStateSynced}
	r, err := heartbeat.NewRenewer(agent.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: "node-a",
		RenewInterval: 100 * time.Millisecond, LeaseDuration: 400 * time.Millisecond,
		Healthy: func(context.Context) error {
			if unhealthy.Load() {
				return errors.New("OVS unreachable")
			}
			return nil
		},
		Facts: func() heartbeat.Facts { return facts },
	})
	if err != nil {
		t.Fatal(err)
	}
	runRenewer(t, r)

	leases := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace)
	get := func() *coordinationv1.Lease {
		l, err := leases.Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return l
	}
	var first *coordinationv1.Lease
	wait.Until(t, 10*time.Second, func() error {
		if first = get(); first == nil || !heartbeat.Fresh(first, time.Now()) {
			return errors.New("no fresh Lease yet")
		}
		return nil
	})
	if got := heartbeat.ReadFacts(first); got.BridgeMAC != facts.BridgeMAC || got.SyncState != facts.SyncState || len(got.SteerAddresses) != 1 {
		t.Errorf("facts %+v, want %+v", got, facts)
	}
	if first.Labels[heartbeat.LeaseLabel] != heartbeat.LeaseLabelValue || *first.Spec.HolderIdentity != "node-a" || *first.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("lease metadata %v %+v", first.Labels, first.Spec)
	}
	wait.Until(t, 10*time.Second, func() error {
		if l := get(); l == nil || !l.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
			return errors.New("not renewed")
		}
		return nil
	})

	// Unhealthy: renewals stop and the Lease expires.
	unhealthy.Store(true)
	wait.Until(t, 10*time.Second, func() error {
		if l := get(); l == nil || heartbeat.Fresh(l, time.Now()) {
			return errors.New("still fresh")
		}
		return nil
	})
	unhealthy.Store(false)
	wait.Until(t, 10*time.Second, func() error {
		if l := get(); l == nil || !heartbeat.Fresh(l, time.Now()) {
			return errors.New("not fresh again")
		}
		return nil
	})

	// Someone else writes the Lease: the renewer's next update conflicts,
	// it reads the Lease back and goes on, keeping the other annotation.
	// The foreign writer itself may race a renewal: it retries on conflict,
	// as any client of a shared object must.
	var l *coordinationv1.Lease
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l = get()
		l.Annotations["example.com/note"] = "kept"
		_, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		cur := get()
		if cur == nil || !cur.Spec.RenewTime.After(l.Spec.RenewTime.Time) || cur.Annotations["example.com/note"] != "kept" {
			return errors.New("not renewed after a foreign write")
		}
		return nil
	})
}

// TestHandover: an agent that stops for a restart renews its Lease one last
// time for the restart grace, so that it stays fresh past its normal
// duration; the successor's first renewal shortens it again; an unhealthy
// agent hands nothing over.
func TestHandover(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	agent := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	var unhealthy atomic.Bool
	cfg := heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: "node-h",
		RenewInterval: 100 * time.Millisecond, LeaseDuration: 400 * time.Millisecond,
		Healthy: func(context.Context) error {
			if unhealthy.Load() {
				return errors.New("OVS unreachable")
			}
			return nil
		},
	}
	r, err := heartbeat.NewRenewer(agent.CoordinationV1(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace)
	duration := func() time.Duration {
		l, err := leases.Get(ctx, "node-h", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := heartbeat.Duration(l)
		return d
	}
	if err := r.RenewOnce(ctx); err != nil || duration() != cfg.LeaseDuration {
		t.Fatalf("renewal: %v, duration %v", err, duration())
	}
	if err := r.Handover(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, "node-h", metav1.GetOptions{})
	if err != nil || !heartbeat.Fresh(l, time.Now().Add(2*time.Second)) || duration() != 5*time.Second {
		t.Fatalf("after the handover: fresh in 2 s %v, duration %v, %v; want fresh, 5s", heartbeat.Fresh(l, time.Now().Add(2*time.Second)), duration(), err)
	}
	successor, err := heartbeat.NewRenewer(agent.CoordinationV1(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := successor.RenewOnce(ctx); err != nil || duration() != cfg.LeaseDuration {
		t.Fatalf("successor's renewal: %v, duration %v; want %v", err, duration(), cfg.LeaseDuration)
	}
	unhealthy.Store(true)
	if err := successor.Handover(ctx, 5*time.Second); err == nil || duration() != cfg.LeaseDuration {
		t.Fatalf("handover while unhealthy: %v, duration %v; want an error and no change", err, duration())
	}
}

// TestAgentRBAC: the agent's RBAC lets it keep Leases in the component's
// namespace and read its peers', and nothing else.
func TestAgentRBAC(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	agent := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	env.StartAgent(t, "node-a") // creates and renews as the agent
	if _, err := agent.CoordinationV1().Leases(kubetest.SystemNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("agent cannot list Leases: %v", err)
	}
	// It reads its own Pod on exit (the handover): allowed, so not found.
	if _, err := agent.CoreV1().Pods(kubetest.SystemNamespace).Get(ctx, "egressflow-agent-x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("agent getting a Pod of its namespace: %v, want not found", err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	for what, err := range map[string]error{
		"create a Lease in another namespace": func() error {
			_, err := agent.CoordinationV1().Leases("default").Create(ctx, lease, metav1.CreateOptions{})
			return err
		}(),
		"delete its Lease": agent.CoordinationV1().Leases(kubetest.SystemNamespace).Delete(ctx, "node-a", metav1.DeleteOptions{}),
		"list nodes": func() error {
			_, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		}(),
		"list Pods": func() error {
			_, err := agent.CoreV1().Pods(kubetest.SystemNamespace).List(ctx, metav1.ListOptions{})
			return err
		}(),
		"get a Pod in another namespace": func() error {
			_, err := agent.CoreV1().Pods("default").Get(ctx, "x", metav1.GetOptions{})
			return err
		}(),
		"list Secrets": func() error {
			_, err := agent.CoreV1().Secrets(kubetest.SystemNamespace).List(ctx, metav1.ListOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("agent could %s: %v", what, err)
		}
	}
}

// TestRenewalResults: every attempt reports its result to Observe, as the
// agent's lease renewal counter counts them: ok once the Lease is written,
// skipped while the agent is unhealthy (nothing is written), and error when
// the API server refuses the write (here: the agent may keep Leases only in
// egressflow's namespace).
func TestRenewalResults(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	agent := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	var unhealthy atomic.Bool
	var results []heartbeat.RenewalResult
	cfg := heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: "node-r",
		Healthy: func(context.Context) error {
			if unhealthy.Load() {
				return errors.New("OVS unreachable")
			}
			return nil
		},
		Observe: func(r heartbeat.RenewalResult) { results = append(results, r) },
	}
	r, err := heartbeat.NewRenewer(agent.CoordinationV1(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	unhealthy.Store(true)
	if err := r.RenewOnce(ctx); err == nil {
		t.Fatal("renewed while unhealthy")
	}
	unhealthy.Store(false)
	if err := r.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}

	cfg.Namespace = "default"
	refused, err := heartbeat.NewRenewer(agent.CoordinationV1(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := refused.RenewOnce(ctx); !apierrors.IsForbidden(err) {
		t.Fatalf("renewal in namespace default: %v, want forbidden", err)
	}
	want := []heartbeat.RenewalResult{heartbeat.RenewalOK, heartbeat.RenewalSkipped, heartbeat.RenewalOK, heartbeat.RenewalError}
	if !slices.Equal(results, want) {
		t.Errorf("observed %v, want %v", results, want)
	}
}

// TestRenewerPeerFacts: with PeerFacts, the renewer keeps the node's
// peer-facts Lease equal to the peer part of its facts, on a real API
// server: written with the first renewal, not written again by renewals or
// by a change of a fact no peer reads (the sync state), written within
// FactsCheckInterval of a change of one they read (the MAC), between
// renewals.
func TestRenewerPeerFacts(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	agent := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	var current atomic.Pointer[heartbeat.Facts]
	current.Store(&heartbeat.Facts{BridgeMAC: "02:00:00:00:00:0a", SyncState: heartbeat.SyncStateSyncing, HostAddresses: []netip.Addr{netip.MustParseAddr("172.18.0.10")}})
	r, err := heartbeat.NewRenewer(agent.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: "node-a",
		RenewInterval: 300 * time.Millisecond, LeaseDuration: time.Minute,
		Facts:     func() heartbeat.Facts { return *current.Load() },
		PeerFacts: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	runRenewer(t, r)

	leases := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace)
	peer := func() *coordinationv1.Lease {
		l, err := leases.Get(ctx, "node-a.facts", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return l
	}
	wait.Until(t, 10*time.Second, func() error {
		if peer() == nil {
			return errors.New("no peer-facts Lease yet")
		}
		return nil
	})
	first := peer()
	if node, ok := heartbeat.PeerFactsNode(first); !ok || node != "node-a" {
		t.Errorf("PeerFactsNode: %q, %v", node, ok)
	}
	f := heartbeat.ReadFacts(first)
	if f.BridgeMAC != "02:00:00:00:00:0a" || len(f.HostAddresses) != 1 || f.SyncState != "" {
		t.Errorf("peer facts %+v: want the MAC and host address, and no sync state", f)
	}
	// Renewals, and a change only the cluster component reads.
	next := *current.Load()
	next.SyncState = heartbeat.SyncStateSynced
	current.Store(&next)
	time.Sleep(5 * 300 * time.Millisecond)
	if got := peer(); got.ResourceVersion != first.ResourceVersion {
		t.Errorf("peer-facts Lease written again without a change of the peer facts: %v -> %v", first.ResourceVersion, got.ResourceVersion)
	}
	hb, err := leases.Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || heartbeat.ReadFacts(hb).SyncState != heartbeat.SyncStateSynced {
		t.Errorf("heartbeat Lease: %v; want the new sync state", err)
	}
	// A change the peers read.
	next.BridgeMAC = "02:00:00:00:00:0b"
	current.Store(&next)
	wait.Until(t, 10*time.Second, func() error {
		if got := heartbeat.ReadFacts(peer()).BridgeMAC; got != "02:00:00:00:00:0b" {
			return fmt.Errorf("peer-facts MAC %q", got)
		}
		return nil
	})
}

// TestRenewerRenewsOnRecovery: an agent that starts unhealthy (before its
// first sync) renews as soon as it is healthy, not a renew interval later,
// which here is an hour: until it does, its Lease is still its
// predecessor's handover.
func TestRenewerRenewsOnRecovery(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	agent := kubernetes.NewForConfigOrDie(env.Cluster.Config(kubetest.Agent))
	var healthy atomic.Bool
	r, err := heartbeat.NewRenewer(agent.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: kubetest.SystemNamespace, NodeName: "node-a",
		RenewInterval: time.Hour, LeaseDuration: 4 * time.Hour,
		Healthy: func(context.Context) error {
			if !healthy.Load() {
				return errors.New("no successful sync yet")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runRenewer(t, r)

	leases := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace)
	time.Sleep(3 * heartbeat.FactsCheckInterval)
	if _, err := leases.Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
		t.Fatal("an unhealthy agent wrote its Lease")
	}
	healthy.Store(true)
	// Within seconds (a facts check), where the next tick is an hour away.
	wait.Until(t, 10*time.Second, func() error {
		_, err := leases.Get(ctx, "node-a", metav1.GetOptions{})
		return err
	})
}

// runRenewer runs r until the test ends, and then fails the test unless
// Run returns the cancellation.
func runRenewer(t *testing.T, r *heartbeat.Renewer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	})
}
