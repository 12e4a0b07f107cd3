package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egressflow/egressflow/cmd/internal/cli/clitest"
	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/proc"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// timeout bounds every wait: the agent converges in milliseconds, the rest
// is slack for a loaded two-core CI machine.
const timeout = 60 * time.Second

// serviceCIDR is the test API server's --service-cluster-ip-range.
const serviceCIDR = "10.96.0.0/16"

// TestBinary builds the command and runs it as the DaemonSet does: in the
// node's network namespace (hostNetwork), with the agent's service account
// (kubeconfig), the node's OVS run directory, and metrics and health on
// loopback ports. Once synced it serves /readyz and /healthz in plain
// HTTP, /metrics over TLS to the scraper alone (401 without a valid
// token, 403 without get on /metrics), renews a fresh heartbeat Lease
// carrying the bridge MAC and its peer key, answers a peer's /heartbeat
// question only when signed with the key the peer's Lease publishes, and
// SNATs an EgressService's pod to the LB IP (UDP and TCP), which /metrics
// reflects. An EgressService it
// cannot program gets a Warning Event and leaves the agent healthy. While
// ovs-vswitchd is down it is not ready, its Lease runs out and its OpenFlow
// gauge reads 0; the process stays live (/healthz) until the bridge has
// been away for --liveness-bridge-timeout, then /healthz fails; once OVS is
// back it replays its flows, SNAT works again and it is live. On SIGTERM
// it exits 0. Restarted while OVS is down (as the kubelet restarts it
// then), it waits for the bridge, live past the bound and not ready, and
// once OVS is back syncs and releases the hold its predecessor set. With
// its permissions revoked, a stopped agent keeps the dataplane (a refusal
// is no sign of an uninstall); once its namespace is being deleted, it
// removes the dataplane on exit even if its permissions went first.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	bin := proc.Build(t, "cmd/egressflow-agent")

	// The API server, with exactly the agent's manifests.
	api := kubetest.Start(t)
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	admin := api.Config(kubetest.Admin)
	for _, m := range []string{"deploy/controller/namespace.yaml", "deploy/agent/rbac.yaml", "deploy/agent/rbac-dataplane.yaml", "deploy/monitoring/scraper-rbac.yaml"} {
		kubetest.Apply(t, admin, filepath.Join(root, m))
	}
	kubetest.PublishNodeViews(t, admin, nil)
	kube := kubernetes.NewForConfigOrDie(admin)
	objects := &clustertest.Env{Cluster: api, Kube: kube, ES: versioned.NewForConfigOrDie(admin)}
	ctx := context.Background()

	// One OVS node, four pods on it, and the external host's source server.
	topo := topology.New(t, 1)
	n := topo.Nodes[0]
	pod, other, routed, away := n.AddPod(t, "a"), n.AddPod(t, "b"), n.AddPod(t, "c"), n.AddPod(t, "d")
	server := topo.External.Serve(t)
	node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*topology.Pod{pod, other, routed, away} {
		objects.CreatePod(t, "shop", p, nil)
	}

	// The API server listens on the root namespace's loopback; the agent
	// reaches it through a forwarder on the node namespace's loopback, as a
	// host-networked pod reaches its API server.
	apiURL, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	apiVia := topology.Forward(t, n.Netns, apiURL.Host)
	if err := api.WriteKubeconfigVia(kubeconfig, kubetest.Agent, "https://"+apiVia); err != nil {
		t.Fatal(err)
	}
	rtTables := filepath.Join(dir, "rt_tables")
	if err := os.WriteFile(rtTables, []byte("100 blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	metricsAddr, healthAddr := freeAddr(t, n.Netns), freeAddr(t, n.Netns)
	const renew, leaseDuration = 200 * time.Millisecond, 1500 * time.Millisecond
	// A bridge away this long makes the agent's /healthz fail.
	const bridgeBound = 3 * time.Second
	args := []string{"ip", "netns", "exec", n.Netns, bin, // ip execs bin: same pid
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + kubetest.SystemNamespace,
		"--node-name=" + n.Name,
		"--bridge=" + n.Bridge,
		"--ovs-rundir=" + n.Dir,
		"--uplink=" + topology.UplinkPort,
		"--pod-cidrs=" + topology.ClusterPodPrefix.String(),
		"--service-cidrs=" + serviceCIDR,
		"--rt-tables=" + rtTables,
		"--heartbeat-renew-interval=" + renew.String(),
		"--heartbeat-lease-duration=" + leaseDuration.String(),
		"--metrics-bind-address=" + metricsAddr,
		"--health-bind-address=" + healthAddr,
		"--liveness-bridge-timeout=" + bridgeBound.String(),
		"--v=2"}
	agent := proc.Start(t, args[0], args[1:]...)
	// until waits for check like wait.Until, and fails t at once if the
	// agent has exited.
	until := func(t *testing.T, d time.Duration, check func() error) {
		t.Helper()
		wait.Until(t, d, func() error {
			select {
			case <-agent.Exited():
				t.Fatalf("the agent exited: %v", agent.Err())
			default:
			}
			return check()
		})
	}

	client := topology.HTTPClient(n.Netns)
	get := func(path string) (int, string) {
		resp, err := client.Get("http://" + healthAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status := func(path string, ok bool) func() error {
		return func() error {
			code, body := get(path)
			if (code == http.StatusOK) != ok {
				return fmt.Errorf("%s: %d %s", path, code, strings.TrimSpace(body))
			}
			return nil
		}
	}
	// lease checks the heartbeat Lease: fresh as wanted and, when fresh,
	// carrying the bridge MAC, the Synced state, and among the egress
	// subnets those of the node IPs on br-ex (masked).
	mac := n.BridgeMAC(t)
	lease := func(fresh bool) func() error {
		return func() error {
			l, err := kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := heartbeat.Fresh(l, time.Now()); got != fresh {
				return fmt.Errorf("Lease %s fresh=%v, want %v", n.Name, got, fresh)
			}
			if facts := heartbeat.ReadFacts(l); fresh && (facts.BridgeMAC != mac || facts.SyncState != heartbeat.SyncStateSynced) {
				return fmt.Errorf("Lease %s: bridge MAC %q, sync state %q; want %q, %q",
					n.Name, facts.BridgeMAC, facts.SyncState, mac, heartbeat.SyncStateSynced)
			} else if fresh && (!slices.Contains(facts.EgressSubnets, topology.UnderlayPrefix) || !slices.Contains(facts.EgressSubnets, topology.UnderlayPrefix6)) {
				return fmt.Errorf("Lease %s: egress subnets %v, want %v and %v among them", n.Name, facts.EgressSubnets, topology.UnderlayPrefix, topology.UnderlayPrefix6)
			}
			return nil
		}
	}
	// metrics checks samples of /metrics; an absent sample is checked as NaN.
	metrics := func(want map[string]func(float64) bool) func() error {
		return func() error {
			code, body, err := kubetest.Scrape(client.Transport.(*http.Transport), metricsAddr, "/metrics", kubetest.MetricsScraper.Token)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("/metrics: %d %v %.200s", code, err, body)
			}
			for sample, ok := range want {
				v, found := proc.Sample(body, sample)
				if !found {
					v = math.NaN()
				}
				if !ok(v) {
					return fmt.Errorf("/metrics: %s = %v (NaN: absent)", sample, v)
				}
			}
			return nil
		}
	}
	positive := func(v float64) bool { return v > 0 }
	equals := func(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
	// A labelled counter is exported once its label was counted.
	absentOrZero := func(v float64) bool { return math.IsNaN(v) || v == 0 }
	source := func(p *topology.Pod, network string, want netip.Addr) func() error {
		return func() error {
			got, err := p.Dial(network, server.Addr)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s from %s seen as %s, want %s", network, p.Name, got, want)
			}
			return nil
		}
	}

	// Synced: ready and live, and the heartbeat is fresh with the bridge MAC.
	until(t, timeout, status("/readyz", true))
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", agent.Cmd.Process.Pid)); err != nil || exe != bin {
		t.Fatalf("pid %d runs %q (%v), not the agent: signals would miss it", agent.Cmd.Process.Pid, exe, err)
	}
	until(t, timeout, status("/healthz", true))
	until(t, timeout, lease(true))
	kubetest.CheckMetricsAuth(t, client.Transport.(*http.Transport), metricsAddr, kubetest.DefaultMetricsTokens, "egressflow_agent_openflow_connected 1")
	if code, _ := get("/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the health port: %d, want 404", code)
	}
	checkPeerQuestions(t, kube, client, healthAddr, n.Name)

	// An EgressService hosted here: the pod leaves with the LB IP.
	lb := netip.MustParseAddr("192.0.2.10")
	objects.CreateHostedService(t, clustertest.Service{Namespace: "shop", Name: "web", IngressIPs: []string{lb.String()}, Endpoints: clustertest.PodEndpoints(pod)},
		esv1.EgressServiceSpec{}, n.Name)
	topo.External.Exec(t, "ip", "route", "replace", lb.String(), "via", n.IP.String())
	until(t, timeout, source(pod, "udp", lb))
	until(t, timeout, source(pod, "tcp", lb))
	until(t, timeout, source(other, "udp", other.IP)) // not an endpoint: its own source
	until(t, timeout, metrics(map[string]func(float64) bool{
		`egressflow_agent_service_flows{service="shop/web"}`:                                  positive,
		`egressflow_agent_flows{role="host"}`:                                                 positive,
		`egressflow_agent_flows{role="shared"}`:                                               positive,
		`egressflow_agent_sync_duration_seconds_count`:                                        positive,
		`egressflow_agent_last_successful_sync_timestamp_seconds`:                             positive,
		`egressflow_agent_openflow_connected`:                                                 equals(1),
		`egressflow_agent_last_sync_failed`:                                                   equals(0),
		`egressflow_agent_lease_renewals_total{result="ok"}`:                                  positive,
		`workqueue_adds_total{name="egressflow-agent"}`:                                       positive,
		`workqueue_work_duration_seconds_count{name="egressflow-agent"}`:                      positive,
		fmt.Sprintf(`rest_client_requests_total{code="200",host=%q,method="GET"}`, apiVia):    positive,
		fmt.Sprintf(`rest_client_request_duration_seconds_count{host=%q,verb="GET"}`, apiVia): positive,
	}))

	// A service hosted by another node: this node steers its endpoint and
	// counts those flows under role steer, but exports no series of its
	// own for it (only a service's host does).
	objects.CreateHostedService(t, clustertest.Service{Namespace: "shop", Name: "away", IngressIPs: []string{"192.0.2.20"}, Endpoints: clustertest.PodEndpoints(away)},
		esv1.EgressServiceSpec{}, "node-elsewhere")
	until(t, timeout, metrics(map[string]func(float64) bool{
		`egressflow_agent_flows{role="steer"}`:               positive,
		`egressflow_agent_service_flows{service="shop/web"}`: positive,
	}))
	until(t, timeout, metrics(map[string]func(float64) bool{
		`egressflow_agent_service_flows{service="shop/away"}`: math.IsNaN,
	}))

	// An EgressService this node cannot program: a Warning Event on it, and
	// the agent stays healthy and keeps serving the other one.
	objects.CreateHostedService(t, clustertest.Service{Namespace: "shop", Name: "bad", Endpoints: clustertest.PodEndpoints(other)},
		esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "no-such-table"}, esv1.HostAll)
	until(t, timeout, func() error {
		events, err := kube.CoreV1().Events("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			o := e.InvolvedObject
			if o.Kind == "EgressService" && o.Name == "bad" && e.Type == corev1.EventTypeWarning &&
				e.Reason == string(reasons.UnknownNetwork) && e.Source.Component == "egressflow-agent" &&
				strings.Contains(e.Message, n.Name) && strings.Contains(e.Message, "no-such-table") {
				t.Logf("Event on shop/bad: %s %s: %s", e.Type, e.Reason, e.Message)
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s/%s %s %s: %s", o.Kind, o.Name, e.Type, e.Reason, e.Message))
		}
		return fmt.Errorf("no Warning %s Event on EgressService shop/bad; events: %v", reasons.UnknownNetwork, seen)
	})
	until(t, timeout, status("/readyz", true))
	until(t, timeout, status("/healthz", true))
	until(t, timeout, metrics(map[string]func(float64) bool{
		`egressflow_agent_syncs_total{result="error"}`:       absentOrZero,
		`egressflow_agent_last_sync_failed`:                  equals(0),
		`egressflow_agent_service_flows{service="shop/web"}`: positive,
	}))
	until(t, timeout, lease(true))
	until(t, timeout, source(pod, "udp", lb))

	// ovs-vswitchd dies: the agent is no longer ready at once and lets its
	// Lease run out, but stays live until the bridge has been away for
	// the bound: a restart would not bring OVS back. Past it, /healthz
	// fails, so that the kubelet would restart it.
	vswitchdStopped := time.Now()
	n.StopVswitchd(t)
	until(t, timeout, status("/readyz", false))
	until(t, timeout, status("/healthz", false))
	if since := time.Since(vswitchdStopped); since < bridgeBound {
		t.Errorf("/healthz failed %v after ovs-vswitchd was stopped, before --liveness-bridge-timeout=%v", since, bridgeBound)
	}
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "connection to the bridge has been down") {
		t.Errorf("/healthz with the bridge away: %d %s", code, body)
	}
	until(t, timeout, lease(false))
	// The gauge must say so too, as /readyz already does: nothing else
	// happens while OVS is down, so it has to be read at scrape time. A
	// subtest, so that the rest still runs if it is not.
	t.Run("OpenFlowGaugeWhileDown", func(t *testing.T) {
		until(t, 10*time.Second, metrics(map[string]func(float64) bool{
			`egressflow_agent_openflow_connected`: equals(0),
		}))
	})

	// OVS is back with an empty flow table: the agent replays its flows.
	// Each loss and return of the bridge is in its log.
	restarted := time.Now()
	n.StartVswitchd(t)
	until(t, timeout, source(pod, "udp", lb))
	until(t, timeout, source(pod, "tcp", lb))
	t.Logf("SNAT again %v after ovs-vswitchd was started again", time.Since(restarted).Round(time.Millisecond))
	until(t, timeout, status("/readyz", true))
	until(t, timeout, status("/healthz", true))
	until(t, timeout, lease(true))
	kubetest.CheckMetricsAuth(t, client.Transport.(*http.Transport), metricsAddr, kubetest.DefaultMetricsTokens, "egressflow_agent_openflow_connected 1")
	if code, _ := get("/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the health port: %d, want 404", code)
	}
	checkPeerQuestions(t, kube, client, healthAddr, n.Name)
	for _, logged := range []string{"Connected to the bridge over OpenFlow", "Lost the OpenFlow connection to the bridge", "Reconnected to the bridge"} {
		if !strings.Contains(agent.Output(), logged) {
			t.Errorf("the agent's log lacks %q", logged)
		}
	}
	until(t, timeout, metrics(map[string]func(float64) bool{
		fmt.Sprintf(`egressflow_agent_build_info{goversion=%q,version="dev"}`, runtime.Version()): equals(1),
		`egressflow_agent_openflow_connected`:                                                     equals(1),
		`egressflow_agent_last_sync_failed`:                                                       equals(0),
		`egressflow_agent_service_flows{service="shop/web"}`:                                      positive,
	}))

	// An endpoint routed through table "blue": egressflow's ip rules.
	objects.CreateHostedService(t, clustertest.Service{Namespace: "shop", Name: "net", Endpoints: clustertest.PodEndpoints(routed)},
		esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByNetwork, Network: "blue"}, esv1.HostAll)
	ours := func() (flows int, rules string) {
		return n.FlowCount(t, "cookie=0xef10000000000000/0xffff000000000000"), n.Exec(t, "ip", "rule", "show")
	}
	until(t, timeout, func() error {
		if _, rules := ours(); !strings.Contains(rules, "lookup 100") {
			return fmt.Errorf("no rule of shop/net:\n%s", rules)
		}
		return nil
	})

	// `egressflow-agent flows`: a service's cookie, its flows (the same
	// ones ovs-ofctl's dump with the printed filter lists), its zone and its
	// ip rules; for a Network-mode service, no flows and the rules.
	flowsOf := func(service string) string {
		out, err := exec.Command("ip", "netns", "exec", n.Netns, bin, "flows", "--service="+service,
			"--bridge="+n.Bridge, "--ovs-rundir="+n.Dir).CombinedOutput()
		if err != nil {
			t.Fatalf("egressflow-agent flows --service %s: %v\n%s", service, err, out)
		}
		return string(out)
	}
	web := flowsOf("shop/web")
	t.Logf("egressflow-agent flows --service shop/web:\n%s", web)
	filter := fmt.Sprintf("cookie=%#x/%#x", dataplane.Cookie(0, "shop/web"), dataplane.ServiceCookieMask)
	ofctl := strings.Count(n.Ofctl(t, "dump-flows", n.Bridge, filter, "--no-stats"), "cookie=")
	for _, want := range []string{filter, fmt.Sprintf("flows (%d):", ofctl), "nw_src=" + pod.IP.String() + " ", "nat(src=" + lb.String() + ")",
		fmt.Sprintf("zone %d", conntrack.SNATZone)} {
		if !strings.Contains(web, want) {
			t.Errorf("flows of shop/web: no %q", want)
		}
	}
	if strings.Contains(web, "lookup 100") {
		t.Error("flows of shop/web lists shop/net's ip rule")
	}
	if net := flowsOf("shop/net"); !strings.Contains(net, "flows (0):") || !strings.Contains(net, fmt.Sprintf("from %s lookup 100", routed.IP)) {
		t.Errorf("flows of shop/net: want no flow and its ip rule:\n%s", net)
	}

	// `egressflow-agent flows` for the other APIs: an EgressIP this node
	// holds, the namespace's EgressFirewall and EgressQoS. Each lists
	// exactly the flows ovs-ofctl's dump with the printed filter lists,
	// and the objects' own matches; once they are deleted, none.
	t.Run("FlowsOfEachAPI", func(t *testing.T) {
		testFlowsOfEachAPI(t, objects, n, bin, pod)
	})

	// SIGTERM, egressflow still installed (the node shuts down, say): a
	// clean exit that leaves the dataplane in place, fail-closed.
	stopped := time.Now()
	if err := agent.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	t.Logf("exited %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
	if flows, rules := ours(); flows == 0 || !strings.Contains(rules, "lookup 100") {
		t.Errorf("a stopped agent removed its dataplane: %d flows, rules:\n%s", flows, rules)
	}

	// The kubelet's restart for a bridge away past the bound: an agent
	// runs, ovs-vswitchd dies and the agent holds its successor's
	// forwarding; the agent is stopped and started again while OVS is
	// still down. The new one waits for the bridge, not ready and live for
	// longer than the bound, rather than exit into a crash loop; once OVS
	// is back it programs the bridge and releases the hold.
	agent = proc.Start(t, args[0], args[1:]...)
	until(t, timeout, status("/readyz", true))
	n.StopVswitchd(t)
	until(t, timeout, status("/readyz", false))
	held := func() bool {
		return strings.Contains(n.Vsctl(t, "get", "Open_vSwitch", ".", "other_config"), `flow-restore-wait="true"`)
	}
	until(t, timeout, func() error {
		if !held() {
			return errors.New("ovs-vswitchd's forwarding is not held")
		}
		return nil
	})
	if err := agent.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	agent = proc.Start(t, args[0], args[1:]...)
	until(t, timeout, status("/healthz", true)) // it serves its probes
	time.Sleep(2 * bridgeBound)
	for path, want := range map[string]struct {
		code int
		body string
	}{"/healthz": {http.StatusOK, "ok"}, "/readyz": {http.StatusServiceUnavailable, "waiting for the OpenFlow connection"}} {
		if code, body := get(path); code != want.code || !strings.Contains(body, want.body) {
			t.Errorf("%s of an agent waiting %v for its bridge: %d %s; want %d %s", path, 2*bridgeBound, code, strings.TrimSpace(body), want.code, want.body)
		}
	}
	if !strings.Contains(agent.Output(), "Waiting for the bridge's OpenFlow socket") {
		t.Error("the agent's log does not say that it waits for the bridge")
	}
	n.StartVswitchd(t)
	until(t, timeout, status("/readyz", true))
	until(t, timeout, status("/healthz", true))
	until(t, timeout, source(pod, "udp", lb))
	if held() {
		t.Error("the restarted agent synced but left ovs-vswitchd's forwarding held")
	}

	// A refusal is no sign of an uninstall: with the agent's permissions
	// revoked (as a wrong namespace in the RBAC or a mistaken change
	// does), its reads on exit are refused, and a stopped agent keeps the
	// dataplane.
	asAgent := kubernetes.NewForConfigOrDie(api.Config(kubetest.Agent))
	revoke := func() {
		t.Helper()
		if err := kube.RbacV1().ClusterRoleBindings().Delete(ctx, "egressflow-agent", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := kube.RbacV1().RoleBindings(kubetest.SystemNamespace).Delete(ctx, "egressflow-agent-heartbeat", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, timeout, func() error {
			if _, err := asAgent.CoreV1().Namespaces().Get(ctx, kubetest.SystemNamespace, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
				return fmt.Errorf("the agent reads its namespace: %v; want forbidden", err)
			}
			return nil
		})
	}
	revoke()
	if err := agent.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if flows, rules := ours(); flows == 0 || !strings.Contains(rules, "lookup 100") {
		t.Errorf("an agent refused on exit removed its dataplane: %d flows, rules:\n%s", flows, rules)
	}
	for _, m := range []string{"deploy/agent/rbac.yaml", "deploy/agent/rbac-dataplane.yaml"} {
		kubetest.Apply(t, admin, filepath.Join(root, m))
	}
	agent = proc.Start(t, args[0], args[1:]...)
	until(t, timeout, status("/readyz", true))

	// Uninstall: kubectl delete -k deploy/ deletes egressflow's namespace
	// (this API server runs no namespace controller, so it stays
	// Terminating), then the agent's RBAC, before the agent stops. The
	// agent saw the namespace's deletion as it happened; stopped, it
	// leaves the node as it was before egressflow: no flow of ours, no ip
	// rule of ours, no hold of ovs-vswitchd; the endpoints leave with their
	// own IPs.
	if err := kube.CoreV1().Namespaces().Delete(ctx, kubetest.SystemNamespace, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, timeout, func() error {
		if !strings.Contains(agent.Output(), "egressflow's namespace is being deleted") {
			return errors.New("the agent has not seen its namespace's deletion")
		}
		return nil
	})
	revoke()
	if err := agent.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if flows, rules := ours(); flows != 0 || strings.Contains(rules, "lookup 100") || strings.Contains(rules, "4999:") || strings.Contains(rules, "5001:") {
		t.Errorf("after uninstall: %d flows of egressflow, rules:\n%s", flows, rules)
	}
	if config := n.Vsctl(t, "get", "Open_vSwitch", ".", "other_config"); strings.Contains(config, "flow-restore-wait") {
		t.Errorf("after uninstall, ovs-vswitchd is held: other_config %s", config)
	}
	wait.Until(t, timeout, source(pod, "udp", pod.IP))
	wait.Until(t, timeout, source(routed, "udp", routed.IP))
}

// testFlowsOfEachAPI runs `egressflow-agent flows --egressip`,
// `--firewall` and `--qos` against node n, whose agent runs, for objects
// it creates in namespace shop (where pod runs) and deletes again.
func testFlowsOfEachAPI(t *testing.T, objects *clustertest.Env, n *topology.Node, bin string, pod *topology.Pod) {
	ctx := context.Background()
	es := objects.ES.K8sV1()
	flowsOf := func(flag, value string) string {
		out, err := exec.Command("ip", "netns", "exec", n.Netns, bin, "flows", "--"+flag+"="+value,
			"--bridge="+n.Bridge, "--ovs-rundir="+n.Dir).CombinedOutput()
		if err != nil {
			t.Fatalf("egressflow-agent flows --%s %s: %v\n%s", flag, value, err, out)
		}
		return string(out)
	}
	// check waits until the output for flag=value shows key's flows, as
	// many as ovs-ofctl lists with the printed filter, at least one, with
	// each of want.
	check := func(flag, value, key string, want ...string) {
		t.Helper()
		filter := fmt.Sprintf("cookie=%#x/%#x", dataplane.Cookie(0, key), dataplane.ServiceCookieMask)
		var out string
		wait.Until(t, timeout, func() error {
			out = flowsOf(flag, value)
			ofctl := strings.Count(n.Ofctl(t, "dump-flows", n.Bridge, filter, "--no-stats"), "cookie=")
			if ofctl == 0 || !strings.Contains(out, fmt.Sprintf("flows (%d):", ofctl)) {
				return fmt.Errorf("ovs-ofctl lists %d flows with %s; flows --%s %s:\n%s", ofctl, filter, flag, value, out)
			}
			for _, w := range append([]string{filter}, want...) {
				if !strings.Contains(out, w) {
					return fmt.Errorf("flows --%s %s: no %q:\n%s", flag, value, w, out)
				}
			}
			return nil
		})
		t.Logf("egressflow-agent flows --%s %s:\n%s", flag, value, out)
	}
	// gone waits until the output for flag=value lists no flow.
	gone := func(flag, value string) {
		t.Helper()
		wait.Until(t, timeout, func() error {
			if out := flowsOf(flag, value); !strings.Contains(out, "flows (0):") {
				return fmt.Errorf("flows --%s %s after the delete:\n%s", flag, value, out)
			}
			return nil
		})
	}

	// An EgressIP held by this node: its ARP responder names the address.
	egressIP := netip.MustParseAddr("172.18.0.50")
	if !topology.UnderlayPrefix.Contains(egressIP) {
		t.Fatalf("%s is outside the uplink's subnet %s", egressIP, topology.UnderlayPrefix)
	}
	eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "flows-eip"},
		Spec: esv1.EgressIPSpec{EgressIPs: []string{egressIP.String()},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egressflow.test/no-such": "label"}}},
		Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: egressIP.String(), Node: n.Name}}}}
	if _, err := es.EgressIPs().Create(ctx, eip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("egressip", "flows-eip", dataplane.ObjectKey(dataplane.APIEgressIP, "", "flows-eip"), "EgressIP flows-eip", egressIP.String(),
		fmt.Sprintf("zone %d", conntrack.SNATZone))

	// The namespace's EgressFirewall: table 44, its CIDR, its zone.
	denied := "203.0.113.0/24"
	objects.CreateEgressFirewall(t, "shop", esv1.EgressFirewallName, esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: denied}}}})
	check("firewall", "shop", dataplane.ObjectKey(dataplane.APIEgressFirewall, "shop", esv1.EgressFirewallName),
		"EgressFirewall shop/default", fmt.Sprintf("table=%d", dataplane.TableFirewall), "nw_dst="+denied, "nw_src="+pod.IP.String(),
		fmt.Sprintf("zone %d", conntrack.FirewallZone), "dnsName answers its flows hold (0 names)")

	// The namespace's EgressQoS: table 45 and its destination.
	marked := "198.51.100.0/24"
	objects.CreateEgressQoS(t, "shop", esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 46, DstCIDR: marked}}})
	check("qos", "shop", dataplane.ObjectKey(dataplane.APIEgressQoS, "shop", esv1.EgressQoSName),
		"EgressQoS shop/default", fmt.Sprintf("table=%d", dataplane.TableQoS), "nw_dst="+marked)

	// Nothing of another object, and none once they are gone.
	if out := flowsOf("qos", "elsewhere"); !strings.Contains(out, "flows (0):") {
		t.Errorf("flows --qos elsewhere:\n%s", out)
	}
	if err := es.EgressIPs().Delete(ctx, "flows-eip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := es.EgressFirewalls("shop").Delete(ctx, esv1.EgressFirewallName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := es.EgressQoSes("shop").Delete(ctx, esv1.EgressQoSName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("egressip", "flows-eip")
	gone("firewall", "shop")
	gone("qos", "shop")

	// One object at a time, and the synopsis in both --help.
	if out, err := exec.Command(bin, "flows", "--firewall=shop", "--qos=shop").CombinedOutput(); err == nil || !strings.Contains(string(out), "exactly one of") {
		t.Errorf("flows with two objects: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--help"}, {"flows", "--help"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%v: %v", args, err)
		}
		for _, flag := range []string{"--service", "--egressip", "--firewall", "--qos"} {
			if !strings.Contains(string(out), flag) {
				t.Errorf("egressflow-agent %s lacks %s:\n%s", strings.Join(args, " "), flag, out)
			}
		}
	}
}

// TestFlags: the command line of Kubernetes components. --version prints
// the build's version; --logging-format=json logs JSON lines; klog's
// legacy flags are refused (cmd/internal/cli).
func TestFlags(t *testing.T) {
	bin := proc.BuildVersion(t, "cmd/egressflow-agent", "v1.2.3-test")
	clitest.CheckFlags(t, bin, "egressflow-agent", "v1.2.3-test", []string{"--pod-cidrs=not-a-cidr"}, "egressflow-agent failed")
}

// freeAddr returns a free port on the loopback of network namespace ns.
func freeAddr(t *testing.T, ns string) string {
	t.Helper()
	var l net.Listener
	if err := topology.InNetns(ns, func() error {
		var err error
		l, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// checkPeerQuestions asks the agent of node, at its health address, as its
// peers do before fencing (heartbeat.PeerProbe), through the test's Lease
// for a peer node "peer-q" that publishes the test's key. Signed with that
// key, the question gets the agent's answer, signed with the key its own
// Lease publishes; unsigned, or signed with a key no Lease publishes, it
// gets 401 and no answer; and the probe ignores an answer that does not
// verify with the agent's published key.
func checkPeerQuestions(t *testing.T, kube kubernetes.Interface, client *http.Client, healthAddr, node string) {
	t.Helper()
	ctx := context.Background()
	peer, err := heartbeat.NewPeerIdentity("peer-q")
	if err != nil {
		t.Fatal(err)
	}
	renewer, err := heartbeat.NewRenewer(kube.CoordinationV1(), heartbeat.RenewerConfig{Namespace: kubetest.SystemNamespace, NodeName: peer.Node,
		Facts: func() heartbeat.Facts { return heartbeat.Facts{PeerKey: peer.PublicKey()} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := renewer.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := kube.CoordinationV1().Leases(kubetest.SystemNamespace).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := heartbeat.ParsePeerKey(heartbeat.ReadFacts(l).PeerKey)
	if key == nil {
		t.Fatalf("the agent's Lease publishes no peer key: %v", l.Annotations)
	}
	addr := netip.MustParseAddrPort(healthAddr)
	// The agent reads the peer's key from its Lease cache: the first
	// questions may come before the watch delivers it.
	wait.Until(t, timeout, func() error {
		if renewing, believed := heartbeat.AskPeer(ctx, client, peer, heartbeat.Peer{Node: node, Addr: addr, Key: key}); !believed || !renewing {
			return fmt.Errorf("signed question: renewing %v, believed %v; want a believed answer that it renews", renewing, believed)
		}
		return nil
	})
	impostor, err := heartbeat.NewPeerIdentity(peer.Node) // the peer's name, not its key
	if err != nil {
		t.Fatal(err)
	}
	if _, believed := heartbeat.AskPeer(ctx, client, impostor, heartbeat.Peer{Node: node, Addr: addr, Key: key}); believed {
		t.Error("a question signed with a key no Lease publishes was answered")
	}
	resp, err := client.Post("http://"+healthAddr+heartbeat.PeerPath, "application/json",
		strings.NewReader(`{"from":"peer-q","to":"`+node+`","nonce":"AAAAAAAAAAAAAAAAAAAAAA==","unixMilli":`+fmt.Sprint(time.Now().UnixMilli())+`}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned question: %d, want %d", resp.StatusCode, http.StatusUnauthorized)
	}
	// An answer is believed only with the agent's own key.
	other, err := heartbeat.NewPeerIdentity(node)
	if err != nil {
		t.Fatal(err)
	}
	if _, believed := heartbeat.AskPeer(ctx, client, peer, heartbeat.Peer{Node: node, Addr: addr, Key: heartbeat.ParsePeerKey(other.PublicKey())}); believed {
		t.Error("the agent's answer verified with a key its Lease does not publish")
	}
}

// TestParseDNSResolverPods reads --dns-resolver-pods: the default selects
// CoreDNS's pods in kube-system and no others; "" selects none; a value
// without a namespace or with a broken selector is refused.
func TestParseDNSResolverPods(t *testing.T) {
	r, err := parseDNSResolverPods(defaultDNSResolverPods)
	if err != nil {
		t.Fatal(err)
	}
	coredns := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-1", Labels: map[string]string{"k8s-app": "kube-dns"}}}
	elsewhere := coredns.DeepCopy()
	elsewhere.Namespace = "shop"
	other := coredns.DeepCopy()
	other.Labels = map[string]string{"k8s-app": "metrics-server"}
	if !r.Selects(coredns) || r.Selects(elsewhere) || r.Selects(other) {
		t.Errorf("default %q: selects CoreDNS %v (want true), the label in shop %v, another app %v (want false)",
			defaultDNSResolverPods, r.Selects(coredns), r.Selects(elsewhere), r.Selects(other))
	}
	if none, err := parseDNSResolverPods(""); err != nil || none.Selects(coredns) {
		t.Errorf(`"": %v, selects CoreDNS %v; want no error and none`, err, none.Selects(coredns))
	}
	for _, bad := range []string{"k8s-app=kube-dns", "/k8s-app=kube-dns", "kube-system/", "kube-system/k8s-app==kube-dns=x"} {
		if _, err := parseDNSResolverPods(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
