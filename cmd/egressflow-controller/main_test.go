package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/cmd/internal/cli/clitest"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/wait"
)

// TestBinary builds the command and runs it as in a pod: the controller's
// service account (kubeconfig), leader election, metrics and health on
// loopback ports. It assigns a host, serves /readyz and /healthz in plain
// HTTP, /metrics over TLS to the scraper alone (401 without a valid token,
// 403 without get on /metrics; /debug/pprof/ to whoever may get it, not
// the scraper), and on SIGTERM exits 0 after releasing its leader Lease.
func TestBinary(t *testing.T) {
	bin := proc.Build(t, "cmd/egressflow-controller")
	env := clustertest.Start(t)
	env.Node(t, "node-a", nil)
	ns := env.Namespace(t)
	env.CreateService(t, clustertest.Service{Namespace: ns, Name: "web", IngressIPs: []string{"192.0.2.10"},
		Endpoints: []clustertest.Endpoint{{IP: "10.128.0.10", Node: "node-a"}}})
	env.CreateEgressService(t, ns, "web", esv1.EgressServiceSpec{})
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Apply(t, env.Cluster.Config(kubetest.Admin), filepath.Join(root, "deploy/monitoring/scraper-rbac.yaml"))

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Cluster.WriteKubeconfig(kubeconfig, kubetest.Controller); err != nil {
		t.Fatal(err)
	}
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	controller := proc.Start(t, bin, "--kubeconfig="+kubeconfig, "--identity=cmd-test", "--pod-cidrs="+clustertest.PodCIDR,
		"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=100ms",
		"--health-bind-address="+addr, "--metrics-bind-address="+metricsAddr, "--profiling")

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	wait.Until(t, 30*time.Second, func() error {
		if code, body := get("/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	wait.Until(t, 30*time.Second, func() error {
		if h := env.GetEgressService(t, ns, "web").Status.Host; h != "node-a" {
			return fmt.Errorf("host %q", h)
		}
		if got := env.NodeServiceLabels(t, "node-a"); len(got) != 1 {
			return fmt.Errorf("labels %v", got)
		}
		return nil
	})
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	wait.Until(t, 10*time.Second, func() error {
		code, body, err := kubetest.Scrape(nil, metricsAddr, "/metrics", kubetest.MetricsScraper.Token)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("/metrics: %d %v %s", code, err, body)
		}
		for _, want := range []string{"egressflow_controller_assignments_total 1", "egressflow_controller_leader 1",
			"egressflow_controller_services_without_host 0", "egressflow_controller_event_to_status_seconds_count", "go_goroutines",
			"egressflow_controller_services_no_matching_node 0", `egressflow_controller_failing_syncs{queue="service"} 0`,
			`egressflow_controller_last_successful_sync_timestamp_seconds{queue="service"} 1.`,
			`workqueue_adds_total{name="egressservices"}`, `workqueue_adds_total{name="nodes"}`, `workqueue_depth{name="agent-leases"}`,
			`rest_client_requests_total{code="200",host=`, `rest_client_request_duration_seconds_count{host=`,
			fmt.Sprintf(`egressflow_controller_build_info{goversion=%q,version="dev"} 1`, runtime.Version())} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("/metrics lacks %q", want)
			}
		}
		return nil
	})

	kubetest.CheckMetricsAuth(t, nil, metricsAddr, kubetest.DefaultMetricsTokens, "egressflow_controller_leader 1")
	// pprof (--profiling) is served under the same rules, and the
	// scraper's role does not grant it.
	for _, c := range []struct {
		who  kubetest.User
		code int
	}{{kubetest.MetricsScraper, http.StatusForbidden}, {kubetest.Admin, http.StatusOK}} {
		if code, body, err := kubetest.Scrape(nil, metricsAddr, "/debug/pprof/cmdline", c.who.Token); err != nil || code != c.code {
			t.Errorf("/debug/pprof/cmdline as %s: %d %v %.100s; want %d", c.who.Name, code, err, body, c.code)
		}
	}
	// The health port serves the probes alone.
	if code, body := get("/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the health port: %d %.100s; want 404", code, body)
	}

	if err := controller.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	lease, err := env.Kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(context.Background(), "egressflow-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("leader Lease still held by %q after a graceful stop", *h)
	}
}

// TestFlags: the command line of Kubernetes components. --version prints
// the build's version; --logging-format=json logs JSON lines; klog's
// legacy flags are refused (cmd/internal/cli).
func TestFlags(t *testing.T) {
	bin := proc.BuildVersion(t, "cmd/egressflow-controller", "v1.2.3-test")
	clitest.CheckFlags(t, bin, "egressflow-controller", "v1.2.3-test", []string{"--pod-cidrs=not-a-cidr"}, "egressflow-controller failed")
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
