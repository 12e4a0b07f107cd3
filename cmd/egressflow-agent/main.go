// Command egressflow-agent is egressflow's node agent, run as a DaemonSet
// beside Open vSwitch: it programs the node's br-ex over OpenFlow 1.5 (SNAT,
// steering, fail-closed drops), the policy-routing rules of EgressService
// networks and conntrack flushes, and renews the node's heartbeat Lease
// while its dataplane is healthy. The logic is in controller/agent; this file
// reads flags, wires clients, serves metrics and health, and stops on SIGTERM.
// `egressflow-agent flows --service <namespace>/<name>` shows what one
// EgressService holds on the node (flows.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/cmd/internal/cli"
	"github.com/egressflow/egressflow/controller/agent"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/iprule"
	"github.com/egressflow/egressflow/controller/ovsdb"
	"github.com/egressflow/egressflow/openflow"
)

// defaultNamespace is where deploy/ runs egressflow and keeps the Leases.
const defaultNamespace = "egressflow-system"

// The agent runs in the host's network namespace, so what it serves is on
// the node's addresses unless bound to loopback. Its metrics (and pprof,
// when asked for) stay on loopback by default: scraping them needs a
// sidecar, a node-local agent or an explicit address. Its probes must be
// reachable by the kubelet at the node's address, and say nothing but ok
// or why not. 9101 and 9102 clash with no Kubernetes component (kube-proxy
// uses 10249 and 10256, the node exporter 9100); each is a flag.
const (
	defaultMetricsAddr = "127.0.0.1:9101"
	defaultHealthAddr  = ":9102"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "egressflow-agent failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "flows" {
		return runFlows(os.Args[2:], os.Stdout)
	}
	var (
		kubeconfig, namespace, nodeName, bridge, ovsRundir, uplink string
		podCIDRs, serviceCIDRs, rtTables, metricsAddr              string
		renewInterval, leaseDuration                               = heartbeat.DefaultRenewInterval, heartbeat.DefaultLeaseDuration
	)
	fs := flag.CommandLine
	klog.InitFlags(fs)
	version := cli.VersionFlag(fs)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	fs.StringVar(&namespace, "namespace", cli.EnvOr("POD_NAMESPACE", defaultNamespace), "namespace of the heartbeat Leases")
	fs.StringVar(&nodeName, "node-name", cli.EnvOr("NODE_NAME", cli.Hostname()), "this node's name, as in its Node object")
	fs.StringVar(&bridge, "bridge", "br-ex", "the Open vSwitch bridge that carries the node's external traffic")
	fs.StringVar(&ovsRundir, "ovs-rundir", "/var/run/openvswitch", "Open vSwitch run directory, holding <bridge>.mgmt")
	fs.StringVar(&uplink, "uplink", "", "name of the bridge's uplink port (required)")
	fs.StringVar(&podCIDRs, "pod-cidrs", "", "comma-separated cluster pod CIDRs (required): endpoints outside them are host-networked and untouched; traffic to them is never rewritten")
	fs.StringVar(&serviceCIDRs, "service-cidrs", "", "comma-separated ClusterIP CIDRs: traffic to them is never rewritten")
	fs.StringVar(&rtTables, "rt-tables", strings.Join(iprule.DefaultTableFiles, ","), "comma-separated iproute2 rt_tables files naming routing tables (mount the host's into the container)")
	fs.DurationVar(&renewInterval, "heartbeat-renew-interval", renewInterval, "how often the heartbeat Lease is renewed: one API write per node per interval")
	fs.DurationVar(&leaseDuration, "heartbeat-lease-duration", leaseDuration, "how long a renewal is valid: failover time after this agent or its dataplane dies")
	restartGrace := heartbeat.DefaultRestartGrace
	fs.DurationVar(&restartGrace, "heartbeat-restart-grace", restartGrace, "how long the last renewal of an agent whose Pod is deleted (a rolling update) is valid, so that its successor takes over without a failover")
	podName := cli.EnvOr("POD_NAME", "")
	fs.StringVar(&metricsAddr, "metrics-bind-address", defaultMetricsAddr, "address serving /metrics, /healthz and /readyz (and /debug/pprof/ with --profiling); empty disables")
	var healthAddr string
	fs.StringVar(&healthAddr, "health-bind-address", defaultHealthAddr, "address serving /healthz and /readyz alone, for the kubelet's probes; empty disables")
	var ovsdbTarget string
	fs.StringVar(&ovsdbTarget, "ovsdb", "", "Open vSwitch database (unix:PATH or tcp:HOST:PORT; default unix:<ovs-rundir>/db.sock) where the agent holds a restarting ovs-vswitchd's forwarding until its flows are replayed (other_config:flow-restore-wait); \"none\" disables the hold, and then a vswitchd restart forwards pods' packets unchanged until the agent has reconnected")
	var coldGuard bool
	fs.BoolVar(&coldGuard, "cold-guard", false, "install the cold guard on a bridge that holds none of egressflow's flows (every pod held to the fail-closed pipeline), then exit: for the node's boot sequence, before the kubelet starts pods, which after a reboot may start before this agent; needs only the bridge, uplink and CIDR flags")
	var profiling bool
	fs.BoolVar(&profiling, "profiling", false, "also serve Go's /debug/pprof/ on the metrics address (exposes internals; for diagnosis)")
	flag.Parse()
	if cli.PrintVersion(version) {
		return nil
	}

	node := dataplane.NodeConfig{Name: nodeName}
	var err error
	if node.ClusterPodCIDRs, err = cli.ParsePrefixes("pod-cidrs", podCIDRs); err != nil {
		return err
	}
	if node.ServiceCIDRs, err = cli.ParsePrefixes("service-cidrs", serviceCIDRs); err != nil {
		return err
	}
	switch {
	case nodeName == "":
		return errors.New("--node-name (or NODE_NAME) is required")
	case uplink == "":
		return errors.New("--uplink is required: the bridge port that leads out of the node")
	case len(node.ClusterPodCIDRs) == 0:
		return errors.New("--pod-cidrs is required: without it every address would count as a pod")
	}

	if coldGuard {
		return guardCold(node, bridge, ovsRundir, uplink)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(agent.CoreClientConfig(cfg))
	if err != nil {
		return err
	}
	egress, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	ofClient, err := openflow.Dial(ctx, "unix:"+filepath.Join(ovsRundir, bridge+".mgmt"))
	if err != nil {
		return fmt.Errorf("connect to bridge %s: %w", bridge, err)
	}
	defer ofClient.Close()
	klog.InfoS("Connected to the bridge over OpenFlow 1.5", "bridge", bridge)
	var forwarding agent.ForwardingGate
	switch ovsdbTarget {
	case "none":
	case "":
		forwarding = ovsdb.Database{Target: "unix:" + filepath.Join(ovsRundir, "db.sock")}
	default:
		forwarding = ovsdb.Database{Target: ovsdbTarget}
	}
	handle, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer handle.Close()

	// The renewer is made after the agent (it asks the agent's health); the
	// agent reads its renewals only once Run starts, after both exist.
	var renewer *heartbeat.Renewer
	rules := iprule.NewManager(handle)
	reg := cli.NewRegistry("egressflow_agent")
	a := agent.New(agent.Config{
		Node:          node,
		UplinkPort:    uplink,
		Namespace:     namespace,
		Kube:          kube,
		Egress:        egress,
		Switch:        agent.OpenFlowSwitch{Client: ofClient},
		Forwarding:    forwarding,
		Disconnected:  ofClient.Disconnected(),
		LastRenewed:   func() time.Time { return renewer.LastRenewed() },
		LeaseDuration: leaseDuration,
		Rules:         rules,
		Tables: iprule.TableResolver{
			Files:      strings.Split(rtTables, ","),
			LinkByName: handle.LinkByName,
		}.Resolve,
		Recorder: recorder(kube, nodeName),
		Metrics:  agent.NewMetrics(reg),
	})

	renewer, err = heartbeat.NewRenewer(kube.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: namespace, NodeName: nodeName,
		RenewInterval: renewInterval, LeaseDuration: leaseDuration,
		Healthy: a.Healthy,
		Facts: func() heartbeat.Facts {
			return heartbeat.Facts{BridgeMAC: bridgeMAC(handle, bridge), SyncState: a.SyncState()}
		},
	})
	if err != nil {
		return err
	}
	renewerDone := make(chan struct{})
	go func() {
		defer close(renewerDone)
		if err := renewer.Run(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Heartbeat stopped")
			stop()
		}
	}()

	healthy := func(r *http.Request) error { return a.Healthy(r.Context()) }
	live := func(*http.Request) error { return nil }
	cli.Serve(ctx, metricsAddr, cli.Handler(reg, live, healthy, profiling), stop)
	cli.Serve(ctx, healthAddr, cli.HealthHandler(live, healthy), stop)
	klog.InfoS("Starting egressflow-agent", "node", nodeName, "bridge", bridge, "uplink", uplink)
	err = a.Run(ctx, ofClient.Reconnected())
	<-renewerDone
	exitCtx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	switch action, reason := decideExit(exitCtx, kube, namespace, podName); action {
	case removeDataplane:
		klog.InfoS("egressflow is being removed: removing its flows, ip rules and forwarding hold from the node", "node", nodeName, "reason", reason)
		if err := agent.Uninstall(exitCtx, agent.OpenFlowSwitch{Client: ofClient}, rules, forwarding); err != nil {
			klog.ErrorS(err, "Could not remove all of egressflow from the node")
		}
	case handOverDataplane:
		if err := renewer.Handover(exitCtx, restartGrace); err != nil {
			klog.ErrorS(err, "Could not hand the heartbeat Lease over to the restarted agent")
		} else {
			klog.InfoS("Pod deleted: heartbeat Lease extended for the successor", "pod", podName, "grace", restartGrace, "reason", reason)
		}
	default:
		klog.InfoS("Stopping; the dataplane stays and the heartbeat Lease runs out as usual", "reason", reason)
	}
	return err
}

// coldGuardTimeout bounds --cold-guard: a connection and two bundles to a
// local switch take milliseconds.
const coldGuardTimeout = 30 * time.Second

// guardCold is --cold-guard.
func guardCold(node dataplane.NodeConfig, bridge, ovsRundir, uplink string) error {
	ctx, cancel := context.WithTimeout(context.Background(), coldGuardTimeout)
	defer cancel()
	client, err := openflow.Dial(ctx, "unix:"+filepath.Join(ovsRundir, bridge+".mgmt"))
	if err != nil {
		return fmt.Errorf("connect to bridge %s: %w", bridge, err)
	}
	defer client.Close()
	guarded, err := agent.GuardColdBridge(ctx, agent.OpenFlowSwitch{Client: client}, node, uplink)
	if err == nil && !guarded {
		klog.InfoS("The bridge holds egressflow's flows already; nothing to guard", "bridge", bridge)
	}
	return err
}

// exitTimeout bounds what the agent does on exit (a few API reads, then a
// handover or the removal of its flows and rules), well within the pod's
// termination grace period.
const exitTimeout = 5 * time.Second

// exitAction is what a stopping agent does with the node's dataplane.
type exitAction int

const (
	// keepDataplane: the flows stay, fail-closed, and the heartbeat Lease
	// runs out as usual (the kubelet stops pods so when the node shuts
	// down; also when the API server cannot be asked).
	keepDataplane exitAction = iota
	// handOverDataplane: the Pod is deleted but its DaemonSet stays (a
	// rolling update): the flows stay and the Lease is extended for the
	// successor, so the node's services do not fail over.
	handOverDataplane
	// removeDataplane: egressflow itself is being removed (kubectl delete
	// -k deploy/): the node is left as it was before egressflow.
	removeDataplane
)

// decideExit tells a rolling update from an uninstall. egressflow is being
// removed when its namespace is, when the DaemonSet that owns this Pod is
// gone or being deleted, or when the API server no longer knows or allows
// the agent (kubectl delete -k removes the ServiceAccount and the RBAC with
// the workloads, in no order the agent can rely on). Any other failure to
// ask keeps the dataplane: fail closed.
func decideExit(ctx context.Context, kube kubernetes.Interface, namespace, podName string) (exitAction, string) {
	removed := func(err error) bool {
		return apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
	}
	ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	switch {
	case removed(err):
		return removeDataplane, fmt.Sprintf("namespace %s: %v", namespace, err)
	case err == nil && ns.DeletionTimestamp != nil:
		return removeDataplane, fmt.Sprintf("namespace %s is being deleted", namespace)
	}
	if podName == "" {
		return keepDataplane, "no POD_NAME"
	}
	pod, err := kube.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	switch {
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return removeDataplane, fmt.Sprintf("pod %s: %v", podName, err)
	case err != nil:
		return keepDataplane, fmt.Sprintf("pod %s: %v", podName, err)
	case pod.DeletionTimestamp == nil:
		return keepDataplane, "pod not deleted"
	}
	for _, owner := range pod.OwnerReferences {
		if owner.Kind != "DaemonSet" {
			continue
		}
		ds, err := kube.AppsV1().DaemonSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
		switch {
		case removed(err):
			return removeDataplane, fmt.Sprintf("DaemonSet %s: %v", owner.Name, err)
		case err != nil:
			return keepDataplane, fmt.Sprintf("DaemonSet %s: %v", owner.Name, err)
		case ds.DeletionTimestamp != nil || ds.UID != owner.UID:
			return removeDataplane, fmt.Sprintf("DaemonSet %s is being deleted", owner.Name)
		}
	}
	return handOverDataplane, "pod deleted, its DaemonSet stays"
}

// bridgeMAC reads the bridge's MAC address from its LOCAL interface.
func bridgeMAC(handle *netlink.Handle, bridge string) string {
	link, err := handle.LinkByName(bridge)
	if err != nil {
		return ""
	}
	return link.Attrs().HardwareAddr.String()
}

// recorder emits Events about EgressServices from this node's agent.
func recorder(kube kubernetes.Interface, node string) record.EventRecorder {
	scheme := runtime.NewScheme()
	_ = kubescheme.AddToScheme(scheme)
	_ = esv1.AddToScheme(scheme)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "egressflow-agent", Host: node})
}
