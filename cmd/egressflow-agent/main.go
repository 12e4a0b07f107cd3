// Command egressflow-agent is egressflow's node agent, run as a DaemonSet
// beside Open vSwitch: it programs the node's br-ex over OpenFlow 1.5 (SNAT,
// steering, fail-closed drops), the policy-routing rules of EgressService
// networks and conntrack flushes, and renews the node's heartbeat Lease
// while its dataplane is healthy. The logic is in controller/agent; this file
// reads flags, wires clients, serves metrics and health, and stops on SIGTERM.
// `egressflow-agent flows` (--service <namespace>/<name>, --egressip
// <name>, --firewall <namespace> or --qos <namespace>) shows what one
// object of the egress APIs holds on the node (flows.go).
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/egressflow/egressflow/cmd/internal/cli"
	"github.com/egressflow/egressflow/cmd/internal/clientmetrics"
	"github.com/egressflow/egressflow/controller/agent"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/bfd"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dnsresolve"
	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/hostfirewall"
	"github.com/egressflow/egressflow/controller/iprule"
	"github.com/egressflow/egressflow/controller/neighbour"
	"github.com/egressflow/egressflow/controller/ovsdb"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// defaultNamespace is where deploy/ runs egressflow and keeps the Leases.
const defaultNamespace = "egressflow-system"

// The agent runs in the host's network namespace, so what it serves is on
// the node's addresses. Its metrics (and pprof, when asked for) are served
// over TLS to callers the API server authenticates and authorizes
// (cli.DelegatedAuth), as the kubelet serves its own, so that Prometheus
// scrapes them at the node's address with its ServiceAccount token. Its
// probes must be reachable by the kubelet at the node's address in plain
// HTTP, and say nothing but ok or why not; beside them, the peers'
// questions (heartbeat.PeerPath) are answered only when signed. 9101 and
// 9102 clash with no Kubernetes component (kube-proxy uses 10249 and
// 10256, the node exporter 9100); each is a flag.
const (
	defaultMetricsAddr = ":9101"
	defaultHealthAddr  = ":9102"
	// defaultProbeAddr is UDP, beside the health port's TCP.
	defaultProbeAddr = ":9102"
)

// handoverPropagation is how long an agent that handed its Lease over for
// a restart keeps answering probes: long enough for the cluster
// component's watch to see the handover before the probes go silent
// (milliseconds), so that the restart moves nothing. It delays the exit.
const handoverPropagation = 300 * time.Millisecond

// healthHandler serves the kubelet's probes (live, ready) and, on
// heartbeat.PeerPath, the peers' signed questions, which it answers once
// both the agent and its renewer run.
func healthHandler(live, ready func(*http.Request) error, identity *heartbeat.PeerIdentity,
	running *atomic.Pointer[agent.Agent], renewer *atomic.Pointer[heartbeat.Renewer]) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", cli.HealthHandler(live, ready))
	peers := heartbeat.PeerHandler(identity,
		func() bool { return renewer.Load().Renewing() },
		func(node string) ed25519.PublicKey { return running.Load().PeerKey(node) })
	mux.HandleFunc(heartbeat.PeerPath, func(w http.ResponseWriter, r *http.Request) {
		if renewer.Load() != nil && running.Load() != nil {
			peers.ServeHTTP(w, r)
			return
		}
		http.Error(w, "not renewing yet", http.StatusServiceUnavailable)
	})
	return mux
}

// nodeConfig reads the flags that describe the node (--node-name,
// --pod-cidrs, --service-cidrs, --egressip-unheld, --dns-resolver-pods)
// into its dataplane.NodeConfig, and refuses the required ones missing
// (--uplink among them).
func nodeConfig(nodeName, uplink, podCIDRs, serviceCIDRs, egressIPUnheld, dnsResolverPods string) (dataplane.NodeConfig, error) {
	node := dataplane.NodeConfig{Name: nodeName}
	var err error
	if node.DNSResolvers, err = parseDNSResolverPods(dnsResolverPods); err != nil {
		return node, err
	}
	if node.ClusterPodCIDRs, err = cli.ParsePrefixes("pod-cidrs", podCIDRs); err != nil {
		return node, err
	}
	if node.ServiceCIDRs, err = cli.ParsePrefixes("service-cidrs", serviceCIDRs); err != nil {
		return node, err
	}
	if node.EgressIPUnheld, err = esv1.ParseEgressIPUnheld(egressIPUnheld); err != nil {
		return node, fmt.Errorf("--egressip-unheld (or EGRESSIP_UNHELD): %w", err)
	}
	switch {
	case nodeName == "":
		return node, errors.New("--node-name (or NODE_NAME) is required")
	case uplink == "":
		return node, errors.New("--uplink is required: the bridge port that leads out of the node")
	case len(node.ClusterPodCIDRs) == 0:
		return node, errors.New("--pod-cidrs is required: without it every address would count as a pod")
	}
	return node, nil
}

// defaultDNSResolverPods are CoreDNS's pods (and kube-dns's before it),
// as kubeadm, kind and most distributions deploy them.
const defaultDNSResolverPods = "kube-system/k8s-app=kube-dns"

// parseDNSResolverPods reads --dns-resolver-pods: namespace/selector, or
// "" for none.
func parseDNSResolverPods(s string) (dataplane.DNSResolverPods, error) {
	if strings.TrimSpace(s) == "" {
		return dataplane.DNSResolverPods{}, nil
	}
	namespace, selector, ok := strings.Cut(s, "/")
	if !ok || namespace == "" || selector == "" {
		return dataplane.DNSResolverPods{}, fmt.Errorf("--dns-resolver-pods %q: want namespace/label-selector, such as %s", s, defaultDNSResolverPods)
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return dataplane.DNSResolverPods{}, fmt.Errorf("--dns-resolver-pods %q: %w", s, err)
	}
	return dataplane.DNSResolverPods{Namespace: namespace, Selector: sel}, nil
}

// parseDNSServers reads --dns-servers: addresses, each with an optional
// port (53 by default).
func parseDNSServers(list string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if ap, err := netip.ParseAddrPort(s); err == nil {
			out = append(out, ap)
			continue
		}
		addr, err := netip.ParseAddr(strings.Trim(s, "[]"))
		if err != nil {
			return nil, fmt.Errorf("--dns-servers: %q is neither an address nor address:port", s)
		}
		out = append(out, netip.AddrPortFrom(addr, 53))
	}
	return out, nil
}

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "egressflow-agent failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// agentFlags are the agent's command line (parseFlags).
type agentFlags struct {
	kubeconfig, namespace, nodeName, bridge, ovsRundir, uplink string
	podCIDRs, serviceCIDRs, rtTables                           string
	dnsServers, resolvConf, egressIPUnheld                     string
	renewInterval, leaseDuration, restartGrace                 time.Duration
	metrics                                                    cli.SecureServing
	probeAddr, healthAddr, ovsdbTarget                         string
	coldGuard, profiling                                       bool
	dnsHoldTimeout                                             time.Duration
	dnsWhileAway, dnsResolverPods                              string
	liveness                                                   agent.LivenessBounds
	bfd                                                        bfd.Config
}

// parseFlags reads the agent's flags from args (without the command's
// name); done says the command has nothing more to do (it printed its
// usage).
func parseFlags(args []string) (f agentFlags, done bool, err error) {
	f.renewInterval, f.leaseDuration = heartbeat.DefaultRenewInterval, heartbeat.DefaultLeaseDuration
	fs := cli.NewFlags("egressflow-agent")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage:\n  egressflow-agent [flags]\n    the node agent (the DaemonSet's command)\n  %s\n\nFlags of the agent:\n", flowsUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	fs.StringVar(&f.namespace, "namespace", cli.EnvOr("POD_NAMESPACE", defaultNamespace), "namespace of the heartbeat Leases")
	fs.StringVar(&f.nodeName, "node-name", cli.EnvOr("NODE_NAME", cli.Hostname()), "this node's name, as in its Node object")
	fs.StringVar(&f.bridge, "bridge", "br-ex", "the Open vSwitch bridge that carries the node's external traffic")
	fs.StringVar(&f.ovsRundir, "ovs-rundir", "/var/run/openvswitch", "Open vSwitch run directory, holding <bridge>.mgmt")
	fs.StringVar(&f.uplink, "uplink", "", "name of the bridge's uplink port (required)")
	fs.StringVar(&f.podCIDRs, "pod-cidrs", "", "comma-separated cluster pod CIDRs (required): endpoints outside them are host-networked and untouched; traffic to them is never rewritten")
	fs.StringVar(&f.serviceCIDRs, "service-cidrs", "", "comma-separated ClusterIP CIDRs: traffic to them is never rewritten")
	fs.StringVar(&f.dnsServers, "dns-servers", "", "comma-separated DNS servers (address or address:port) at which EgressFirewall's dnsName rules are resolved; empty: the nameservers of --resolv-conf")
	fs.StringVar(&f.resolvConf, "resolv-conf", dnsresolve.DefaultResolvConf, "resolv.conf whose nameservers resolve EgressFirewall's dnsName rules when --dns-servers is empty (the node's, for an agent on the host network with dnsPolicy Default)")
	fs.DurationVar(&f.bfd.DesiredMinTx, "bfd-min-tx", bfd.DefaultDesiredMinTx, "how often the BFD session to an AdminPolicyBasedExternalRoute next hop with bfdEnabled sends while up: lower detects a dead gateway sooner, at one packet per interval per hop")
	fs.DurationVar(&f.bfd.RequiredMinRx, "bfd-min-rx", bfd.DefaultRequiredMinRx, "the fastest the agent accepts BFD packets from a next hop: the gateway's detection of this node is paced by the slower of this and its own interval")
	bfdMultiplier := fs.Uint("bfd-multiplier", bfd.DefaultDetectMult, "how many BFD intervals without a packet declare a next hop down (1-255): lower detects sooner, higher rides out lost packets")
	fs.StringVar(&f.egressIPUnheld, "egressip-unheld", cli.EnvOr("EGRESSIP_UNHELD", string(esv1.EgressIPUnheldDrop)), "what a selected pod's egress does while its EgressIP has no held address of its family: \"drop\" (fail closed: no packet leaves with another source than the egress IP) or \"node-ip\" (as OVN-Kubernetes: it leaves as the node's other pods do, with their source address); one value for the whole cluster (EGRESSIP_UNHELD of the egressflow-cluster ConfigMap)")
	fs.StringVar(&f.rtTables, "rt-tables", strings.Join(iprule.DefaultTableFiles, ","), "comma-separated iproute2 rt_tables files naming routing tables (mount the host's into the container)")
	fs.DurationVar(&f.renewInterval, "heartbeat-renew-interval", f.renewInterval, "how often the heartbeat Lease is renewed: one API write per node per interval")
	fs.DurationVar(&f.leaseDuration, "heartbeat-lease-duration", f.leaseDuration, "how long a renewal is valid: failover time of a node cut off from the API server alone, or whose agent answers no probe (--probe-bind-address empty)")
	fs.DurationVar(&f.restartGrace, "heartbeat-restart-grace", heartbeat.DefaultRestartGrace, "how long the last renewal of an agent whose Pod is deleted (a rolling update) is valid, so that its successor takes over without a failover")
	f.metrics.AddFlags(fs, defaultMetricsAddr, "address serving /metrics (and /debug/pprof/ with --profiling) over TLS, to callers the API server authenticates (TokenReview) and authorizes (SubjectAccessReview, get on the path); empty disables")
	fs.StringVar(&f.probeAddr, "probe-bind-address", defaultProbeAddr, "UDP address where the agent answers the cluster component's probes and its peers' (fast failover: the node fails over within a second of its death); empty disables, and the node is then judged by its heartbeat Lease alone")
	fs.StringVar(&f.healthAddr, "health-bind-address", defaultHealthAddr, "address serving /healthz and /readyz in plain HTTP for the kubelet's probes, and the peers' signed questions on /heartbeat; empty disables (and with it the peers' questions before fencing)")
	fs.StringVar(&f.ovsdbTarget, "ovsdb", "", "Open vSwitch database (unix:PATH or tcp:HOST:PORT; default unix:<ovs-rundir>/db.sock) where the agent holds a restarting ovs-vswitchd's forwarding until its flows are replayed (other_config:flow-restore-wait); \"none\" disables the hold, and then a vswitchd restart forwards pods' packets unchanged until the agent has reconnected")
	fs.BoolVar(&f.coldGuard, "cold-guard", false, "install the cold guard on a bridge that holds none of egressflow's flows (every pod held to the fail-closed pipeline), then exit: for the node's boot sequence, before the kubelet starts pods, which after a reboot may start before this agent; needs only the bridge, uplink and CIDR flags")
	fs.DurationVar(&f.dnsHoldTimeout, "dns-reply-hold-timeout", agent.DefaultDNSHoldTimeout, "how long a DNS reply to a pod of a namespace with a dnsName rule is held for the flows of its addresses at most; past it the reply goes on all the same (counted in egressflow_agent_dns_replies_total{outcome=\"timeout\"}): longer delays lookups on an agent that cannot program its bridge, shorter lets such a pod's first packets through before the firewall judges them")
	fs.StringVar(&f.dnsWhileAway, "dns-replies-while-away", cli.EnvOr("DNS_REPLIES_WHILE_AWAY", dnsRepliesHold), "(or DNS_REPLIES_WHILE_AWAY of the egressflow-cluster ConfigMap) what DNS replies to pods of namespaces with a dnsName rule do while this agent is away (restarting, or between its exit and its successor's first sync): \"hold\" keeps them paused for an agent that is not there, so those pods cannot resolve names until it is back (no address ever reaches a pod before the firewall can judge it); \"pass\" makes a stopping agent let them through unheld, so lookups keep working and the firewall may judge a pod's first packets to a new address late")
	fs.StringVar(&f.dnsResolverPods, "dns-resolver-pods", cli.EnvOr("DNS_RESOLVER_PODS", defaultDNSResolverPods), "(or DNS_RESOLVER_PODS of the egressflow-cluster ConfigMap) the cluster's DNS resolver pods, as namespace/label-selector: the DNS replies to those on this node are learned and held too while a local namespace has a dnsName rule, since such a resolver answers the pods of its own node without crossing the bridge (\"\": none; a resolver left out lets its node's pods get answers the firewall learns only from its own lookups)")
	fs.BoolVar(&f.profiling, "profiling", false, "also serve Go's /debug/pprof/ on the metrics address, to callers allowed get on /debug/pprof/* (exposes internals; for diagnosis)")
	fs.DurationVar(&f.liveness.Sync, "liveness-sync-timeout", agent.DefaultSyncTimeout, "/healthz fails once a sync attempt has run this long (the sync loop is stuck), so that the kubelet restarts the agent: shorter may restart an agent that is only slow on an overloaded node")
	fs.DurationVar(&f.liveness.Bridge, "liveness-bridge-timeout", agent.DefaultBridgeTimeout, "/healthz fails once the OpenFlow connection to the bridge has been down this long, so that the kubelet restarts the agent (which then waits for the bridge, live): it must outlast an ovs-vswitchd restart")
	done, err = fs.Parse(args)
	if err == nil && !done {
		if *bfdMultiplier < 1 || *bfdMultiplier > 255 {
			return f, false, fmt.Errorf("--bfd-multiplier %d: want 1 to 255", *bfdMultiplier)
		}
		f.bfd.DetectMult = uint8(*bfdMultiplier)
	}
	return f, done, err
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "flows" {
		return runFlows(os.Args[2:], os.Stdout)
	}
	f, done, err := parseFlags(os.Args[1:])
	if done || err != nil {
		return err
	}
	podName := cli.EnvOr("POD_NAME", "")
	node, err := nodeConfig(f.nodeName, f.uplink, f.podCIDRs, f.serviceCIDRs, f.egressIPUnheld, f.dnsResolverPods)
	if err != nil {
		return err
	}
	if f.coldGuard {
		return guardCold(node, f.bridge, f.ovsRundir, f.uplink)
	}
	if f.dnsWhileAway != dnsRepliesHold && f.dnsWhileAway != dnsRepliesPass {
		return fmt.Errorf("--dns-replies-while-away: %q is neither %q nor %q", f.dnsWhileAway, dnsRepliesHold, dnsRepliesPass)
	}
	servers, err := parseDNSServers(f.dnsServers)
	if err != nil {
		return err
	}
	// Without a nameserver the agent still runs: dnsName rules match
	// nothing, and each is reported unresolved.
	resolver, resolverErr := dnsresolve.New(dnsresolve.Config{Servers: servers, ResolvConf: f.resolvConf})
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(agent.CoreClientConfig(cfg))
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// From the start: an uninstall takes the agent's permissions soon after
	// it begins, before the kubelet stops the agent (exit.go).
	removal := watchRemoval(ctx, kube, f.namespace, podName)
	ep, err := serveEndpoints(ctx, stop, f, cfg)
	if err != nil {
		return err
	}
	if ep.responder != nil {
		defer ep.responder.Close()
	}
	agentMetrics := agent.NewMetrics(ep.registry)
	local, err := connectNode(ctx, f, agentMetrics)
	if err != nil || local == nil {
		return err // nil: stopped while waiting for the bridge
	}
	defer local.close()

	emitter, err := recorder(agent.CoreClientConfig(cfg), f.nodeName, ep.registry)
	if err != nil {
		return err
	}
	eventsDone := make(chan struct{})
	go func() { defer close(eventsDone); emitter.Run(ctx) }()
	defer func() { stop(); <-eventsDone }() // stop ends ctx: the emitter drains and returns
	// Bound once the agent exists: the peer probe asks the agent for its
	// peers, and the agent reads the probe only once it runs.
	late := &lateBound{}
	agentCfg, err := agentConfig(f, node, cfg, kube, local, ep, late, emitter, agentMetrics)
	if err != nil {
		return err
	}
	if resolverErr != nil {
		klog.ErrorS(resolverErr, "No DNS resolver: EgressFirewall's dnsName rules will match nothing")
	} else {
		agentCfg.DNS = resolver
		resolverDone := make(chan struct{})
		go func() { defer close(resolverDone); _ = resolver.Run(ctx) }()
		defer func() { stop(); <-resolverDone }()
		klog.InfoS("Resolving EgressFirewall's DNS names", "servers", resolver.Servers())
	}
	a := agent.New(agentCfg)
	if agentCfg.DNS != nil {
		snoopDone := startDNSSnoop(ctx, a, resolver, agentMetrics, f.dnsHoldTimeout, f.dnsWhileAway, local.mgmt)
		defer func() { stop(); <-snoopDone }()
	}
	renewerDone, err := startLiveness(ctx, stop, kube, f, a, local.handle, ep, late, agentMetrics)
	if err != nil {
		return err
	}
	ep.running.Store(a)
	klog.InfoS("Starting egressflow-agent", "node", f.nodeName, "bridge", f.bridge, "uplink", f.uplink)
	err = a.Run(ctx, local.ofClient.Reconnected())
	<-renewerDone
	leaveNode(kube, f, podName, removal, local.ofClient, local.rules, local.nft, local.forwarding, ep.renewer.Load(), ep.responder)
	return err
}

// agentEndpoints are what the agent serves from its start, before it has
// a bridge: its metrics, its health address (the kubelet's probes, and the
// peers that ask whether it can renew) and the probe protocol's socket.
// running and renewer are set once the agent runs.
type agentEndpoints struct {
	registry  *prometheus.Registry
	running   atomic.Pointer[agent.Agent]
	renewer   atomic.Pointer[heartbeat.Renewer]
	identity  *heartbeat.PeerIdentity
	responder *heartbeat.Responder
}

// serveEndpoints starts the agent's endpoints. Until the agent runs, it
// waits for the bridge, live (a restart would wait the same way) and not
// ready.
func serveEndpoints(ctx context.Context, stop func(), f agentFlags, cfg *rest.Config) (*agentEndpoints, error) {
	ep := &agentEndpoints{registry: cli.NewRegistry("egressflow_agent")}
	clientmetrics.Register(ep.registry) // before any client or queue is made
	live := func(r *http.Request) error {
		if a := ep.running.Load(); a != nil {
			return a.Live(r.Context())
		}
		return nil
	}
	ready := func(r *http.Request) error {
		if a := ep.running.Load(); a != nil {
			return a.Healthy(r.Context())
		}
		return fmt.Errorf("waiting for the OpenFlow connection to bridge %s", f.bridge)
	}
	if f.metrics.BindAddress != "" {
		auth, err := cli.NewDelegatedAuth(cfg)
		if err != nil {
			return nil, err
		}
		certificate, err := f.metrics.Certificate(f.nodeName)
		if err != nil {
			return nil, err
		}
		cli.ServeTLS(ctx, f.metrics.BindAddress, certificate, auth.Wrap(cli.MetricsHandler(ep.registry, f.profiling)), stop)
	}
	// Beside the probes, the health address answers the peers that ask,
	// before fencing, whether this agent can renew (heartbeat.PeerProbe),
	// when their question is signed with the key their Lease publishes;
	// until its renewer runs, it does not know (a peer then counts it as
	// renewing).
	var err error
	if ep.identity, err = heartbeat.NewPeerIdentity(f.nodeName); err != nil {
		return nil, err
	}
	cli.Serve(ctx, f.healthAddr, healthHandler(live, ready, ep.identity, &ep.running, &ep.renewer), stop)
	if ep.responder, err = listenProbes(f.probeAddr, &ep.running); err != nil {
		return nil, err
	}
	return ep, nil
}

// localNode are the agent's handles on its node: the bridge's OpenFlow
// connection, the hold of a restarting ovs-vswitchd, netlink (ip rules,
// addresses) and nftables.
type localNode struct {
	// mgmt is the bridge's management socket: the agent's connection and
	// the DNS snoop's.
	mgmt       string
	ofClient   *ofconn.Client
	forwarding agent.ForwardingGate
	handle     *netlink.Handle
	rules      *iprule.Manager
	nft        knftables.Interface
	// neighbours finds the external routes' next hops' MACs on the
	// bridge's interface, bfd runs the sessions to those with BFD (nil if
	// its port could not be opened); hopsChanged signals each change.
	neighbours  *neighbour.Resolver
	bfd         *bfd.Engine
	hopsChanged chan struct{}
}

// connectNode opens the agent's handles on its node, waiting for the
// bridge as long as ctx lasts (nil, nil if it ended meanwhile).
func connectNode(ctx context.Context, f agentFlags, metrics *agent.Metrics) (*localNode, error) {
	local := &localNode{mgmt: "unix:" + filepath.Join(f.ovsRundir, f.bridge+".mgmt")}
	var err error
	if local.ofClient, err = dialBridge(ctx, f.bridge, local.mgmt); err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("connect to bridge %s: %w", f.bridge, err)
	}
	klog.InfoS("Connected to the bridge over OpenFlow 1.5", "bridge", f.bridge)
	switch f.ovsdbTarget {
	case "none":
	case "":
		local.forwarding = ovsdb.Database{Target: "unix:" + filepath.Join(f.ovsRundir, "db.sock")}
	default:
		local.forwarding = ovsdb.Database{Target: f.ovsdbTarget}
	}
	if local.handle, err = netlink.NewHandle(); err != nil {
		local.ofClient.Close()
		return nil, err
	}
	local.rules = iprule.NewManager(local.handle, f.bridge)
	if local.nft, err = hostfirewall.Interface(); err != nil {
		local.close()
		return nil, err
	}
	local.hopsChanged = make(chan struct{}, 1)
	hopsChanged := func() {
		select {
		case local.hopsChanged <- struct{}{}:
		default: // a sync is already asked for
		}
	}
	if local.neighbours, err = neighbour.Start(f.bridge, neighbour.DefaultRefresh, hopsChanged); err != nil {
		local.close()
		return nil, fmt.Errorf("watch the neighbours of %s: %w", f.bridge, err)
	}
	if local.bfd, err = bfd.Listen(f.bfd, func(c bfd.Change) { metrics.BFDChanged(c); hopsChanged() }); err != nil {
		// Another BFD daemon on the node, say: the rest works.
		klog.ErrorS(err, "No BFD: AdminPolicyBasedExternalRoute next hops with bfdEnabled will not be used, and the pods they serve are dropped")
	}
	return local, nil
}

func (l *localNode) close() {
	if l.bfd != nil {
		l.bfd.Close()
	}
	if l.neighbours != nil {
		l.neighbours.Close()
	}
	l.handle.Close()
	l.ofClient.Close()
}

// lateBound is what the agent's configuration reads of the peer probe,
// which is made after the agent. The agent reads it only once it runs,
// after it is set.
type lateBound struct {
	// sharedOutage is the peer probe's, nil without a health address.
	sharedOutage func() bool
}

// agentConfig is the agent's configuration on this node.
func agentConfig(f agentFlags, node dataplane.NodeConfig, cfg *rest.Config, kube kubernetes.Interface, local *localNode, ep *agentEndpoints,
	late *lateBound, emitter *events.Emitter, metrics *agent.Metrics) (agent.Config, error) {
	egress, err := versioned.NewForConfig(cfg)
	if err != nil {
		return agent.Config{}, err
	}
	c := agent.Config{
		Node:          node,
		UplinkPort:    f.uplink,
		Namespace:     f.namespace,
		Kube:          kube,
		Egress:        egress,
		Switch:        agent.OpenFlowSwitch{Client: local.ofClient},
		Forwarding:    local.forwarding,
		Disconnected:  local.ofClient.Disconnected(),
		LastRenewed:   func() time.Time { return ep.renewer.Load().LastRenewed() },
		SharedOutage:  func() bool { return late.sharedOutage != nil && late.sharedOutage() },
		LeaseDuration: f.leaseDuration,
		Rules:         local.rules,
		HostFirewall:  hostfirewall.New(local.nft),
		Tables: iprule.TableResolver{
			Files:      strings.Split(f.rtTables, ","),
			LinkByName: local.handle.LinkByName,
		}.Resolve,
		Recorder:    emitter,
		Metrics:     metrics,
		Neighbours:  local.neighbours,
		HopsChanged: local.hopsChanged,
		Liveness:    f.liveness,
	}
	if local.bfd != nil {
		c.BFD = local.bfd
	}
	if ep.responder != nil {
		c.ProbeLost = ep.responder.Lost
	}
	return c, nil
}

// startLiveness publishes the agent's renewer in ep and starts it (its
// failure stops the agent) and, with a health address, the peer probe it
// asks before fencing, bound in late. The returned channel closes when the
// renewer has returned.
func startLiveness(ctx context.Context, stop func(), kube kubernetes.Interface, f agentFlags, a *agent.Agent, handle *netlink.Handle,
	ep *agentEndpoints, late *lateBound, metrics *agent.Metrics) (<-chan struct{}, error) {
	renewer, err := newRenewer(kube, f, a, handle, ep.identity, ep.responder, metrics)
	if err != nil {
		return nil, err
	}
	ep.renewer.Store(renewer)
	renewerDone := make(chan struct{})
	go func() {
		defer close(renewerDone)
		if err := renewer.Run(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Heartbeat stopped")
			stop()
		}
	}()
	if port, ok := heartbeat.HealthPort(f.healthAddr); ok {
		probe := &heartbeat.PeerProbe{
			Peers:    func() []heartbeat.Peer { return a.Peers(port) },
			Identity: ep.identity,
			Renewing: renewer.Renewing,
		}
		go probe.Run(ctx)
		late.sharedOutage = probe.SharedOutage
	}
	return renewerDone, nil
}

// leaveNode does what the agent's exit leaves on the node, as decideExit
// tells: removes egressflow from it (an uninstall), hands the Lease over
// to a successor (a rolling update), or leaves the dataplane as it is.
func leaveNode(kube kubernetes.Interface, f agentFlags, podName string, removal *removalSigns, ofClient *ofconn.Client,
	rules *iprule.Manager, nft knftables.Interface, forwarding agent.ForwardingGate, renewer *heartbeat.Renewer, responder *heartbeat.Responder) {
	exitCtx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	switch action, reason := decideExit(exitCtx, kube, f.namespace, podName, removal); action {
	case removeDataplane:
		klog.InfoS("egressflow is being removed: removing its flows, ip rules, nftables table and forwarding hold from the node", "node", f.nodeName, "reason", reason)
		removeHostFirewall := func(ctx context.Context) error { return hostfirewall.Remove(ctx, nft) }
		if err := agent.Uninstall(exitCtx, agent.OpenFlowSwitch{Client: ofClient}, rules, removeHostFirewall, forwarding); err != nil {
			klog.ErrorS(err, "Could not remove all of egressflow from the node")
		}
	case handOverDataplane:
		passDNSReplies(exitCtx, ofClient, f.dnsWhileAway)
		handOverLease(exitCtx, renewer, f.restartGrace, podName, reason)
		if responder != nil {
			time.Sleep(handoverPropagation)
		}
	default:
		passDNSReplies(exitCtx, ofClient, f.dnsWhileAway)
		klog.InfoS("Stopping; the dataplane stays and the heartbeat Lease runs out as usual", "reason", reason)
	}
}

// newRenewer makes the agent's heartbeat: its Lease, renewed while a is
// live and its dataplane healthy, and the facts its peers read.
func newRenewer(kube kubernetes.Interface, f agentFlags, a *agent.Agent, handle *netlink.Handle, identity *heartbeat.PeerIdentity,
	responder *heartbeat.Responder, metrics *agent.Metrics) (*heartbeat.Renewer, error) {
	hostAddresses := &agent.HostAddressReader{Handle: handle, Excluded: a.HostAddressExclusions}
	return heartbeat.NewRenewer(kube.CoordinationV1(), heartbeat.RenewerConfig{
		Namespace: f.namespace, NodeName: f.nodeName,
		RenewInterval: f.renewInterval, LeaseDuration: f.leaseDuration,
		// A wedged agent (its sync stuck past the liveness bound) stops
		// renewing too: its dataplane no longer follows the cluster, so
		// its services should move while the kubelet restarts it.
		Healthy: func(ctx context.Context) error {
			if err := a.Live(ctx); err != nil {
				return err
			}
			return a.Healthy(ctx)
		},
		Facts: func() heartbeat.Facts {
			return heartbeat.Facts{BridgeMAC: bridgeMAC(handle, f.bridge), SyncState: a.SyncState(), QoSRevision: a.QoSRevision(),
				FirewallRevision: a.FirewallRevision(), FirewallUnresolvedDNS: a.FirewallUnresolvedDNS(),
				ExternalRouteRevision: a.ExternalRouteRevision(), ExternalRouteNotes: a.ExternalRouteNotes(), EgressSubnets: bridgeSubnets(handle, f.bridge),
				RouterRevision: a.AppliedRevision(dataplane.APIEgressRouter), Uplink: f.uplink,
				HostAddresses: hostAddresses.Read(), PeerKey: identity.PublicKey(), ProbeAddress: probeAddress(a, responder)}
		},
		Observe:   metrics.ObserveRenewal,
		PeerFacts: true,
	})
}

// listenProbes opens the probe protocol's socket at addr (nil without
// one). It answers while the running agent is live and its dataplane
// healthy, as the Lease is renewed (a wedged agent, or a bridge away past
// the grace, answers no more), and pings as a witness only the agents that
// the running agent knows as peers.
func listenProbes(addr string, running *atomic.Pointer[agent.Agent]) (*heartbeat.Responder, error) {
	if addr == "" {
		return nil, nil
	}
	responder, err := heartbeat.ListenResponder(addr, heartbeat.ResponderConfig{
		AllowTarget: func(target netip.AddrPort) bool {
			a := running.Load()
			return a != nil && a.IsProbePeer(target)
		},
		Healthy: func() bool {
			a := running.Load()
			ctx := context.Background()
			return a != nil && a.Live(ctx) == nil && a.Healthy(ctx) == nil
		},
	})
	if err != nil {
		return nil, err
	}
	go func() { _ = responder.Serve() }()
	return responder, nil
}

// probeAddress is the probe address a publishes (none without a
// responder).
func probeAddress(a *agent.Agent, responder *heartbeat.Responder) netip.AddrPort {
	if responder == nil {
		return netip.AddrPort{}
	}
	return a.ProbeAddress(responder.Addr().Port())
}

// handOverLease extends the heartbeat Lease of an agent whose Pod was
// deleted (a rolling update) by grace, for its successor.
func handOverLease(ctx context.Context, renewer *heartbeat.Renewer, grace time.Duration, podName, reason string) {
	if err := renewer.Handover(ctx, grace); err != nil {
		klog.ErrorS(err, "Could not hand the heartbeat Lease over to the restarted agent")
		return
	}
	klog.InfoS("Pod deleted: heartbeat Lease extended for the successor", "pod", podName, "grace", grace, "reason", reason)
}

// startDNSSnoop starts the agent's DNS snoop connection to the bridge at
// target: the DNS replies the bridge pauses (TableFirewall's snoop flows)
// teach the resolver what the pods are told, and go on once the flows for
// it are in place. It returns once the connection takes the paused
// replies (so that the syncs start only when a reply their flows pause
// has someone to resume it), or after snoopReadyTimeout; the returned
// channel closes when the connection ends with ctx.
func startDNSSnoop(ctx context.Context, a *agent.Agent, resolver *dnsresolve.Resolver, metrics *agent.Metrics,
	holdTimeout time.Duration, whileAway, target string) <-chan struct{} {
	done, ready := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		hold := agent.DNSHold{Learn: resolver.LearnFrame, Generation: resolver.Generation, Applied: a.WaitDNSApplied, NamesSet: a.DNSNamesSet(),
			Timeout: holdTimeout, Metrics: metrics, Ready: func() { close(ready) },
			ReleaseOnStop: whileAway == dnsRepliesPass}
		if err := agent.SnoopDNS(ctx, target, hold); err != nil {
			klog.ErrorS(err, "No DNS snooping: wildcard dnsName rules will match nothing, and DNS replies to pods of namespaces with a dnsName rule go no further")
		}
	}()
	select {
	case <-ready:
	case <-time.After(snoopReadyTimeout):
		klog.InfoS("Starting without the DNS snoop connection: replies to pods of namespaces with a dnsName rule wait for it", "waited", snoopReadyTimeout)
	case <-ctx.Done():
	}
	return done
}

// snoopReadyTimeout bounds how long the agent waits for its DNS snoop
// connection before its first sync: a local switch answers in
// milliseconds; past it the agent syncs anyway, rather than leave the
// node's pods held by the cold guard.
const snoopReadyTimeout = 5 * time.Second

// bridgeRetryInterval is how often an agent that starts while its bridge
// is away tries it again, as often as the OpenFlow client redials a local
// bridge it lost: the agent connects within this of ovs-vswitchd's return.
// An attempt is a failed connect(2) on a unix socket.
const bridgeRetryInterval = ofconn.DefaultLocalBackoff

// dialBridge connects to the bridge's OpenFlow socket, waiting for it as
// long as ctx lasts. An agent started while ovs-vswitchd is away (after
// the kubelet restarted it for a bridge lost past --liveness-bridge-timeout,
// or while Open vSwitch restarts) waits, where exiting would make the
// kubelet back off from restarting it, up to 5 minutes, and so hold the
// node's traffic (through the forwarding hold) long after OVS is back. A
// switch that lacks OpenFlow 1.5 will not grow it: that fails at once.
func dialBridge(ctx context.Context, bridge, target string) (*ofconn.Client, error) {
	for waiting := false; ; {
		client, err := ofconn.Dial(ctx, target)
		var version *ofconn.VersionError
		switch {
		case err == nil:
			return client, nil
		case errors.As(err, &version) || ctx.Err() != nil:
			return nil, err
		case !waiting:
			waiting = true
			klog.InfoS("Waiting for the bridge's OpenFlow socket", "bridge", bridge, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(bridgeRetryInterval):
		}
	}
}

// coldGuardTimeout bounds --cold-guard: a connection and two bundles to a
// local switch take milliseconds.
const coldGuardTimeout = 30 * time.Second

// guardCold is --cold-guard.
func guardCold(node dataplane.NodeConfig, bridge, ovsRundir, uplink string) error {
	ctx, cancel := context.WithTimeout(context.Background(), coldGuardTimeout)
	defer cancel()
	client, err := ofconn.Dial(ctx, "unix:"+filepath.Join(ovsRundir, bridge+".mgmt"))
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

// bridgeMAC reads the bridge's MAC address from its LOCAL interface.
func bridgeMAC(handle *netlink.Handle, bridge string) string {
	link, err := handle.LinkByName(bridge)
	if err != nil {
		return ""
	}
	return link.Attrs().HardwareAddr.String()
}

// bridgeSubnets are the subnets of the global unicast addresses on the
// bridge's LOCAL interface (the node IP's and any other), for the
// EgressIP assignment (heartbeat.Facts.EgressSubnets). One netlink dump of
// a single interface's addresses, asked once per renewal: cheaper than
// keeping a subscription's cache current. Nil when the bridge cannot be
// read (its agent then offers no subnet until it can).
func bridgeSubnets(handle *netlink.Handle, bridge string) []netip.Prefix {
	link, err := handle.LinkByName(bridge)
	if err != nil {
		return nil
	}
	addrs, err := handle.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil
	}
	return heartbeat.EgressSubnets(agent.AddrPrefixes(addrs))
}

// The agent's Event writes (controller/events). An agent emits Warnings
// for the services it cannot program, in bursts when one change breaks many
// (a routing table removed): the burst writes a node's typical problems at
// once; past it, 2/s per node keeps 1,000 nodes at 2,000 writes/s at worst,
// which the API server's priority and fairness may throttle further (the
// emitter retries what it refuses). Higher reports a mass problem sooner at
// that cost.
const (
	agentEventQPS   = 2
	agentEventBurst = 25
)

// recorder emits Events about EgressServices from this node's agent, and
// counts them in reg; run it with Run.
func recorder(cfg *rest.Config, node string, reg prometheus.Registerer) (*events.Emitter, error) {
	scheme := runtime.NewScheme()
	_ = kubescheme.AddToScheme(scheme)
	_ = esv1.AddToScheme(scheme)
	counter := events.NewCounter("egressflow_agent")
	reg.MustRegister(counter)
	return events.NewForConfig(cfg, scheme, events.Options{
		Component: "egressflow-agent", Host: node, QPS: agentEventQPS, Burst: agentEventBurst, Counter: counter,
	})
}
