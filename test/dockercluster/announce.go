package dockercluster

import (
	"context"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Announcer plays the load-balancer announcer of a cluster without a cloud
// (MetalLB's role, with a nodeSelector on egressflow's label): it watches
// the Nodes and routes the LB IPs to the node that carries the label, from
// the external host, as soon as the label moves.
type Announcer struct {
	c     *Cluster
	label string
	lbIPs []netip.Addr

	mu      sync.Mutex
	current *Node
	moved   time.Time // when it last routed the LB IPs to a new node
}

// Announce starts an Announcer for the node label key (for an EgressService
// ns/name: egress-service.k8s.ovn.org/<ns>-<name>); it stops with the test.
func (c *Cluster) Announce(label string, lbIPs ...netip.Addr) *Announcer {
	a := &Announcer{c: c, label: label, lbIPs: lbIPs}
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: label})
	}, func(ev watch.Event) {
		n, ok := ev.Object.(*corev1.Node)
		if !ok || ev.Type == watch.Deleted {
			return
		}
		for _, node := range c.Nodes {
			if node.Name == n.Name {
				a.route(node)
			}
		}
	})
	return a
}

// route sends the LB IPs to n, if they do not go there already.
func (a *Announcer) route(n *Node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == n {
		return
	}
	for _, lb := range a.lbIPs {
		via := n.IP
		if lb.Is6() {
			via = n.IP6
		}
		_, _ = run("ip", "netns", "exec", a.c.External.Netns, "ip", "route", "replace", lb.String(), "via", via.String())
	}
	a.current, a.moved = n, time.Now()
}

// Current returns the node the LB IPs are routed to, and since when.
func (a *Announcer) Current() (*Node, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.current, a.moved
}
