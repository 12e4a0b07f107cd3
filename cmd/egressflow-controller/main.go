// Command egressflow-controller is the cluster component of egressflow: a
// leader-elected controller that assigns each EgressService a host node,
// writes status.host, labels the host for the load-balancer announcer and
// follows node agents' heartbeat Leases. The logic is in controller/cluster;
// this file only reads flags, wires clients, serves metrics and health, and
// stops on SIGTERM.
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/cmd/internal/cli"
	"github.com/egressflow/egressflow/cmd/internal/clientmetrics"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/cloud"
	"github.com/egressflow/egressflow/controller/cloud/aws"
	"github.com/egressflow/egressflow/controller/cluster"
)

const (
	// defaultQPS and defaultBurst throttle the controller's API client. At
	// start-up with thousands of services every assignment costs about two
	// writes, so the rate bounds how fast a large cluster converges; lower
	// values protect a small API server from that burst.
	defaultQPS   = 200
	defaultBurst = 400
	// uninstallTimeout bounds --uninstall. Its work takes a few seconds
	// (cluster.Uninstall waits 2 s without labels); the chart's hook Job
	// has a deadline above it, and helm uninstall fails (and deletes
	// nothing) if it runs out.
	uninstallTimeout = 2 * time.Minute
)

// The metrics port serves TLS with delegated authentication and
// authorization (cli.DelegatedAuth), as kube-controller-manager's secure
// port does; the health port plain HTTP for the kubelet's probes, which
// say nothing but ok or why not. Each is a flag.
const (
	defaultMetricsAddr = ":8443"
	defaultHealthAddr  = ":8081"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "egressflow-controller failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run() error {
	var (
		opts       cluster.Options
		kubeconfig string
		podCIDRs   string
		metrics    cli.SecureServing
		healthAddr string
		qps        float64
		burst      int
	)
	fs := cli.NewFlags("egressflow-controller")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	fs.StringVar(&opts.Namespace, "namespace", cli.EnvOr("POD_NAMESPACE", cluster.DefaultNamespace), "namespace of the agent heartbeat Leases and of the leader Lease")
	fs.StringVar(&opts.Deployment, "deployment", cli.EnvOr("DEPLOYMENT_NAME", ""), "name of the controller's own Deployment in --namespace: its deletion (helm uninstall) removes every egress-service node label, as the namespace's does; empty: only the namespace's deletion does")
	// The default identity is unique per process, as kube-controller-manager's
	// is: a replica whose container restarts must not take the Lease its
	// previous process held for its own and resume leading at once; it
	// competes with the standby once the Lease runs out.
	fs.StringVar(&opts.Identity, "identity", cli.EnvOr("POD_NAME", cli.Hostname())+"_"+rand.Text()[:8], "this process's name in the leader Lease (<pod>_<random> by default)")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect a leader among replicas; only the leader writes")
	fs.StringVar(&opts.LeaderLeaseName, "leader-elect-lease-name", cluster.DefaultLeaderLeaseName, "name of the leader-election Lease")
	fs.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", cluster.DefaultLeaseDuration, "how long a leader Lease lasts unrenewed: the longest gap after a leader crashes")
	fs.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", cluster.DefaultRenewDeadline, "how long the leader retries renewing before it stops leading (< lease duration)")
	fs.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", cluster.DefaultRetryPeriod, "how often replicas try to acquire or renew the leader Lease")
	fs.StringVar(&opts.ProbeBindAddress, "probe-bind-address", cluster.DefaultProbeBindAddress, "UDP address from which the leader probes the agents (\""+cluster.NoProbes+"\": no probes, agents are judged by their heartbeat Leases alone and fail over after the Lease duration)")
	fs.StringVar(&podCIDRs, "pod-cidrs", "", "comma-separated cluster pod CIDRs; endpoints outside them are host-networked and ignored (empty: every endpoint counts)")
	egress := addEgressFlags(fs)
	fs.IntVar(&opts.ServiceWorkers, "service-workers", cluster.DefaultServiceWorkers, "EgressServices synced in parallel")
	fs.IntVar(&opts.NodeWorkers, "node-workers", cluster.DefaultNodeWorkers, "node label patches, and node view writes, in parallel")
	fs.IntVar(&opts.EgressIPWorkers, "egressip-workers", cluster.DefaultEgressIPWorkers, "EgressIPs synced in parallel")
	fs.IntVar(&opts.EgressRouterWorkers, "egressrouter-workers", cluster.DefaultEgressRouterWorkers, "EgressRouters synced in parallel (each a choice over the nodes and at most a status and a Service or EndpointSlice write)")
	fs.IntVar(&opts.CloudWorkers, "cloud-workers", cluster.DefaultCloudWorkers, "CloudPrivateIPConfigs synced, and nodes' cloud capacities read, in parallel (each waits on the cloud's API)")
	fs.DurationVar(&opts.ResyncPeriod, "resync-period", cluster.DefaultResyncPeriod, "how often everything is re-checked (no API write when right); negative disables")
	fs.DurationVar(&opts.RetryBaseDelay, "retry-base-delay", cluster.DefaultRetryBaseDelay, "first retry delay of a failed sync, doubled per failure")
	fs.DurationVar(&opts.RetryMaxDelay, "retry-max-delay", cluster.DefaultRetryMaxDelay, "cap of the retry delay")
	metrics.AddFlags(fs, defaultMetricsAddr, "address serving /metrics (and /debug/pprof/ with --profiling) over TLS, to callers the API server authenticates (TokenReview) and authorizes (SubjectAccessReview, get on the path); empty disables")
	fs.StringVar(&healthAddr, "health-bind-address", defaultHealthAddr, "address serving /healthz and /readyz in plain HTTP, for the kubelet's probes; empty disables")
	var uninstall bool
	fs.BoolVar(&uninstall, "uninstall", false, "prepare egressflow's removal and exit: delete --deployment (every replica stops labelling) and remove every egress-service node label (the Helm chart's pre-delete hook)")
	var profiling bool
	fs.BoolVar(&profiling, "profiling", false, "also serve Go's /debug/pprof/ on the metrics address, to callers allowed get on /debug/pprof/* (exposes internals; for diagnosis)")
	fs.Float64Var(&qps, "kube-api-qps", defaultQPS, "API client requests per second")
	fs.IntVar(&burst, "kube-api-burst", defaultBurst, "API client burst")
	if done, err := fs.Parse(os.Args[1:]); done || err != nil {
		return err
	}
	if uninstall {
		if opts.Deployment == "" {
			return fmt.Errorf("--uninstall needs --deployment (or DEPLOYMENT_NAME)")
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), uninstallTimeout)
		defer cancel()
		return cluster.Uninstall(ctx, cfg, opts.Namespace, opts.Deployment)
	}

	var err error
	if opts.PodCIDRs, err = cli.ParsePrefixes("pod-cidrs", podCIDRs); err != nil {
		return err
	}
	if err := egress.apply(&opts); err != nil {
		return err
	}
	if len(opts.PodCIDRs) == 0 {
		klog.InfoS("No --pod-cidrs: every endpoint address counts as a pod on the cluster network, host-networked ones too")
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst

	reg := cli.NewRegistry("egressflow_controller")
	clientmetrics.Register(reg)
	opts.Registerer = reg
	c, err := cluster.New(cfg, opts)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if metrics.BindAddress != "" {
		auth, err := cli.NewDelegatedAuth(cfg)
		if err != nil {
			return err
		}
		certificate, err := metrics.Certificate(cli.EnvOr("POD_NAME", cli.Hostname()))
		if err != nil {
			return err
		}
		cli.ServeTLS(ctx, metrics.BindAddress, certificate, auth.Wrap(cli.MetricsHandler(reg, profiling)), stop)
	}
	cli.Serve(ctx, healthAddr, cli.HealthHandler(c.Healthz, c.Ready), stop)
	return c.Run(ctx)
}

// egressFlags are the flags of the EgressIP assignment and the cloud
// controller whose values need reading, from the egressflow-cluster
// ConfigMap's variables by default.
type egressFlags struct {
	unheld, maxPerNode, cloudProvider string
}

func addEgressFlags(fs *cli.Flags) *egressFlags {
	f := &egressFlags{}
	fs.StringVar(&f.unheld, "egressip-unheld", cli.EnvOr("EGRESSIP_UNHELD", string(esv1.EgressIPUnheldDrop)), "the agents' choice for a selected pod whose EgressIP has no held address of its family (\"drop\" or \"node-ip\"; EGRESSIP_UNHELD of the egressflow-cluster ConfigMap): the EgressIP's Assigned condition says when pods leave through their nodes")
	fs.StringVar(&f.maxPerNode, "max-egress-ips-per-node", cli.EnvOr("MAX_EGRESS_IPS_PER_NODE", "0"), "how many egress IPs a node without the egressflow.io/max-egress-ips annotation may hold, both families together (MAX_EGRESS_IPS_PER_NODE of the egressflow-cluster ConfigMap; 0: no limit); a cloud's per-interface capacity (cloud.network.openshift.io/egress-ipconfig) applies too")
	fs.StringVar(&f.cloudProvider, "cloud-provider", cli.EnvOr("CLOUD_PROVIDER", cloud.Metal{}.Name()), "where CloudPrivateIPConfigs' addresses go (CLOUD_PROVIDER of the egressflow-cluster ConfigMap): \"metal\" (no cloud: an assignment is recorded, and the nodes' uplinks answer for the address) or \"aws\" (secondary addresses of the node's primary ENI; region and credentials from the SDK's usual sources: AWS_REGION, an IAM role for the ServiceAccount, the instance profile)")
	return f
}

// apply reads the flags into opts.
func (f *egressFlags) apply(opts *cluster.Options) error {
	var err error
	if opts.EgressIPUnheld, err = esv1.ParseEgressIPUnheld(f.unheld); err != nil {
		return fmt.Errorf("--egressip-unheld (or EGRESSIP_UNHELD): %w", err)
	}
	if opts.MaxEgressIPsPerNode, err = strconv.Atoi(f.maxPerNode); err != nil || opts.MaxEgressIPsPerNode < 0 {
		return fmt.Errorf("--max-egress-ips-per-node (or MAX_EGRESS_IPS_PER_NODE) %q: want a number of addresses, 0 for no limit", f.maxPerNode)
	}
	switch f.cloudProvider {
	case cloud.Metal{}.Name():
		opts.CloudProvider = cloud.Metal{}
	case aws.Name:
		if opts.CloudProvider, err = aws.NewFromEnvironment(context.Background(), aws.Options{}); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--cloud-provider (or CLOUD_PROVIDER) %q: want metal or aws", f.cloudProvider)
	}
	return nil
}
