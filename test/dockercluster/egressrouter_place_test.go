//go:build e2e || demo

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// routerNamespace holds the EgressRouter tests' routers and clients.
const routerNamespace = "routers"

// udpRouter is the spec of an EgressRouter with one IPv4 address that
// redirects UDP port 80 to dest.
func udpRouter(addr netip.Addr, dest netip.AddrPort) nov1.EgressRouterSpec {
	return nov1.EgressRouterSpec{
		Mode:             nov1.EgressRouterModeRedirect,
		NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
		Addresses:        []nov1.EgressRouterAddress{{IP: netip.PrefixFrom(addr, 24).String()}},
		Redirect: &nov1.RedirectConfig{RedirectRules: []nov1.L4RedirectRule{
			{DestinationIP: dest.Addr().String(), Port: 80, Protocol: nov1.ProtocolTypeUDP, TargetPort: int32(dest.Port())},
		}},
	}
}

// maxPlacementTries bounds routerOn's attempts: each lands on the wanted
// node with a chance of one in the number of nodes.
const maxPlacementTries = 30

// routerOn creates an EgressRouter with spec in namespace, served by node,
// and returns its name once it is Available there. The controller gives a
// new router to the eligible node with the fewest routers, ties broken by
// a hash of the router's and node's names, so routerOn tries the names
// base-0, base-1, ... and deletes each router that lands elsewhere (and
// waits until it is gone, so that it holds no address meanwhile).
func (c *Cluster) routerOn(t testing.TB, namespace, base string, node *Node, spec nov1.EgressRouterSpec) string {
	t.Helper()
	ctx := context.Background()
	routers := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).NetworkOperatorV1().EgressRouters(namespace)
	for try := range maxPlacementTries {
		name := fmt.Sprintf("%s-%d", base, try)
		if _, err := routers.Create(ctx, &nov1.EgressRouter{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		holder := c.awaitRouterAvailable(t, namespace, name, "")
		if holder == node.Name {
			return name
		}
		c.deleteRouter(t, namespace, name)
	}
	t.Fatalf("no router of %d named %s-N landed on %s", maxPlacementTries, base, node.Name)
	return ""
}

// awaitRouterAvailable waits until the router is Available on a holder
// other than notOn (a node's name, or "") and returns the holder.
func (c *Cluster) awaitRouterAvailable(t testing.TB, namespace, name, notOn string) string {
	t.Helper()
	routers := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).NetworkOperatorV1().EgressRouters(namespace)
	var holder string
	wait.UntilEvery(t, convergeTimeout, 10*time.Millisecond, func() error {
		r, err := routers.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !routerAvailable(r) || r.Status.Holder == notOn {
			return fmt.Errorf("%s not Available but on %q: %+v", name, notOn, r.Status)
		}
		holder = r.Status.Holder
		return nil
	})
	return holder
}

// routerAvailable reports whether r's Available condition is true.
func routerAvailable(r *nov1.EgressRouter) bool {
	return slices.ContainsFunc(r.Status.Conditions, func(c nov1.EgressRouterStatusCondition) bool {
		return c.Type == nov1.EgressRouterAvailable && c.Status == nov1.ConditionTrue
	})
}

// deleteRouter deletes the router and waits until it is gone.
func (c *Cluster) deleteRouter(t testing.TB, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	routers := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).NetworkOperatorV1().EgressRouters(namespace)
	if err := routers.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, convergeTimeout, func() error {
		if _, err := routers.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("router %s not gone yet (%v)", name, err)
		}
		return nil
	})
}

// awaitSeen waits up to timeout until server has received a datagram from
// addr since since, and returns how long after since the first came.
func awaitSeen(t testing.TB, server *topology.SourceServer, addr netip.Addr, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	wait.UntilEvery(t, timeout, 10*time.Millisecond, func() error {
		if _, ok := server.FirstFrom(addr, since); !ok {
			return fmt.Errorf("no datagram from %s since %v", addr, since.Format(time.StampMilli))
		}
		return nil
	})
	first, _ := server.FirstFrom(addr, since)
	return first.Sub(since)
}

// captureFlowing starts a capture on the external host and returns it
// once the server has received a datagram from each address since the
// capture listens: an outage read from it (outageAfter) then finds each
// address's traffic through the failed node before a fault that follows.
func (c *Cluster) captureFlowing(t testing.TB, server *topology.SourceServer, addrs ...netip.Addr) *topology.Capture {
	t.Helper()
	capture := c.External.Capture(t)
	listening := time.Now()
	for _, addr := range addrs {
		awaitSeen(t, server, addr, listening, convergeTimeout)
	}
	return capture
}
