package heartbeat

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/egressflow/egressflow/test/kubetest"
)

// TestPeerKeysOverLeases runs the peer protocol with the keys where agents
// find them: published by each agent's Renewer on its Lease in a real API
// server (as the agents' ServiceAccount, deploy/agent/rbac.yaml), and read
// back from a Lease informer's cache, as the agent reads its peers'.
// Genuine peers that cannot renew make a shared outage; the same "cannot
// renew" from forgers at their addresses (unsigned, or signed with a key
// their Lease does not publish) does not, and an asker whose Lease
// publishes no key gets no answer.
func TestPeerKeysOverLeases(t *testing.T) {
	api := kubetest.Start(t)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"deploy/controller/namespace.yaml", "deploy/agent/rbac.yaml"} {
		kubetest.Apply(t, api.Config(kubetest.Admin), filepath.Join(root, m))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := kubernetes.NewForConfigOrDie(api.Config(kubetest.Agent))

	// The asker and two peers publish their keys; a third agent runs an
	// older protocol and publishes none.
	peerIDs := []*PeerIdentity{mustIdentity("node-2"), mustIdentity("node-3")}
	silent := mustIdentity("node-4")
	for _, id := range append([]*PeerIdentity{asker, silent}, peerIDs...) {
		facts := Facts{SyncState: SyncStateSynced}
		if id != silent {
			facts.PeerKey = id.PublicKey()
		}
		r, err := NewRenewer(client.CoordinationV1(), RenewerConfig{Namespace: kubetest.SystemNamespace, NodeName: id.Node,
			Facts: func() Facts { return facts }})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RenewOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(kubetest.SystemNamespace))
	leases := factory.Coordination().V1().Leases().Lister()
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }() // the informers stop with ctx
	if !cache.WaitForCacheSync(ctx.Done(), factory.Coordination().V1().Leases().Informer().HasSynced) {
		t.Fatal("Lease cache not synced")
	}
	keyOf := func(node string) ed25519.PublicKey {
		l, err := leases.Leases(kubetest.SystemNamespace).Get(node)
		if err != nil {
			return nil
		}
		return ParsePeerKey(ReadFacts(l).PeerKey)
	}
	if all, _ := leases.List(labels.Everything()); len(all) != 4 {
		t.Fatalf("%d Leases in the cache, want 4", len(all))
	}
	cannotRenew := func() bool { return false }
	// peersAt are the peers as the asker's cache shows them, at addrs.
	peersAt := func(addrs ...func(id *PeerIdentity) Peer) []Peer {
		var out []Peer
		for i, id := range peerIDs {
			p := addrs[i](id)
			p.Key = keyOf(id.Node)
			if p.Key == nil {
				t.Fatalf("no key of %s in the Lease cache", id.Node)
			}
			out = append(out, p)
		}
		return out
	}
	genuine := func(id *PeerIdentity) Peer {
		return Peer{Node: id.Node, Addr: serve(t, PeerHandler(id, cannotRenew, keyOf))}
	}
	if !sharedOutage(t, peersAt(genuine, genuine)) {
		t.Fatal("the peers' signed answers that they cannot renew made no shared outage")
	}

	unsigned := func(id *PeerIdentity) Peer {
		return Peer{Node: id.Node, Addr: serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(PeerStatus{Node: id.Node, Renewing: false})
		}))}
	}
	impostor := func(id *PeerIdentity) Peer {
		return Peer{Node: id.Node, Addr: serve(t, PeerHandler(mustIdentity(id.Node), cannotRenew, keyOf))}
	}
	if sharedOutage(t, peersAt(unsigned, impostor)) {
		t.Error("forged answers (unsigned; signed with a key the Lease does not publish) made a shared outage: a cut-off node would not fence")
	}

	// A question from the agent that publishes no key is not answered (it
	// counts its peers as renewing); the asker's, with its key, is.
	known, unknown := &PeerProbe{Identity: asker}, &PeerProbe{Identity: silent}
	known.setDefaults()
	unknown.setDefaults()
	for _, peer := range peersAt(genuine, genuine) {
		if known.ask(ctx, peer) {
			t.Errorf("%s did not tell the asker, whose Lease publishes its key, that it cannot renew", peer.Node)
		}
		if !unknown.ask(ctx, peer) {
			t.Errorf("%s answered an agent whose Lease publishes no key", peer.Node)
		}
	}
}
