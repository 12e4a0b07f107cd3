package dockercluster

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/topology"
)

// AgentMetricsPort is where deploy/agent/daemonset.yaml serves the agent's
// metrics, over TLS on the node's addresses.
const AgentMetricsPort = 9101

// scraperTokenTimeout bounds the wait for the token controller to fill
// the scraper's token Secret: it does so within a second of its creation.
const scraperTokenTimeout = 60 * time.Second

// ScraperToken applies deploy/monitoring/scraper-rbac.yaml into the
// install's namespace, as `kubectl apply -k deploy/monitoring` does, and
// returns the token the PodMonitors scrape with: the one the cluster's
// token controller writes into the Secret egressflow-metrics-scraper-token.
func (c *Cluster) ScraperToken() string {
	c.t.Helper()
	if c.scraperToken != "" {
		return c.scraperToken
	}
	kubetest.Apply(c.t, c.API.Config(kubetest.Admin), filepath.Join(mustRepoRoot(c.t), "deploy", "monitoring", "scraper-rbac.yaml"))
	deadline := time.Now().Add(scraperTokenTimeout)
	for {
		s, err := c.Kube.CoreV1().Secrets(c.InstallNamespace()).Get(context.Background(), "egressflow-metrics-scraper-token", metav1.GetOptions{})
		if err == nil && len(s.Data["token"]) > 0 {
			c.scraperToken = string(s.Data["token"])
			return c.scraperToken
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the scraper's token Secret is not filled after %v: %v", scraperTokenTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// agentMetricsTransport reaches the nodes' addresses from the external
// host, as a Prometheus outside the nodes would.
func (c *Cluster) agentMetricsTransport() *http.Transport {
	return topology.HTTPClient(c.External.Netns).Transport.(*http.Transport)
}

// AgentMetrics scrapes n's agent as deploy/monitoring's PodMonitor does:
// HTTPS at the node's address, with the scraper's token.
func (c *Cluster) AgentMetrics(n *Node) (string, error) {
	c.t.Helper()
	code, body, err := kubetest.Scrape(c.agentMetricsTransport(), netip.AddrPortFrom(n.IP, AgentMetricsPort).String(), "/metrics", c.ScraperToken())
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("%d %.200s", code, body)
	}
	return body, err
}
