package cluster

import (
	"errors"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cloud"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"k8s.io/utils/clock"
)

const (
	// DefaultNamespace holds the agents' heartbeat Leases and the leader
	// Lease (deploy/ runs the component there).
	DefaultNamespace = "egressflow-system"
	// DefaultLeaderLeaseName names the leader-election Lease. Agent Leases
	// share the namespace but are told apart by heartbeat.LeaseLabel.
	DefaultLeaderLeaseName = "egressflow-controller"

	// Leader election. A crashed leader's successor takes over within
	// LeaseDuration after the last renewal it observed, plus up to two of
	// its retry periods (client-go jitters them by up to 1.2x): about
	// 2.3 s to 3.1 s with these defaults. Agent Leases run out in 3 s and
	// every replica judges them (heartbeat.Judge) leading or not, so a node
	// that dies carrying both the leader and a service host fails over in
	// about the time of an ordinary host (issue 15: goal p99 <= 5 s).
	//
	// The cost: the leader writes its Lease every RetryPeriod (4 writes/s,
	// against 1 per agent per second for the heartbeats) and each standby
	// reads it as often. Split-brain safety rests on the gap between
	// RenewDeadline and LeaseDuration: a leader that cannot renew stops
	// its workers within RenewDeadline of its last renewal, by its own
	// clock; a standby takes over no sooner than LeaseDuration after it
	// observed that renewal, by its own. The 500 ms between them must
	// cover the workers' stop (their in-flight API writes) and the clocks'
	// rate difference (NTP keeps it far below 1 %); status writes carry the
	// resourceVersion they were computed from, so a late one conflicts
	// rather than overwrite the successor's. A leader that loses the Lease
	// (an API server away past RenewDeadline) campaigns again in-process
	// with its warm caches. kube-controller-manager's 15 s / 10 s / 2 s
	// trade the other way: 0.5 writes/s and tolerance of 10 s API stalls
	// without a change of leader, for failover 7x slower.
	//
	// DefaultLeaseDuration is how long a leader's Lease lasts without
	// renewal: the longest a crashed leader leaves the cluster without
	// writes. A graceful stop releases the Lease at once, whatever this is.
	DefaultLeaseDuration = 2 * time.Second
	// DefaultRenewDeadline is how long the leader keeps retrying a failing
	// renewal before it stops leading. It must be shorter than the lease
	// duration, so that the leader stops writing before another replica
	// may take over.
	DefaultRenewDeadline = 1500 * time.Millisecond
	// DefaultRetryPeriod is how often replicas try to acquire (and the
	// leader to renew) the Lease: the delay of a handover after a release,
	// and the standby's lag in observing a renewal, against one API write
	// per period from the leader and one read per standby.
	DefaultRetryPeriod = 250 * time.Millisecond

	// DefaultServiceWorkers is how many EgressServices are synced at once.
	// Syncs are in-memory decisions plus at most one status write; more
	// workers overlap the writes' round trips (throughput at start-up and
	// on mass failover) at the cost of API server concurrency.
	DefaultServiceWorkers = 8
	// DefaultNodeWorkers is how many nodes' labels are patched at once,
	// and how many nodes' views (nodeview) are written at once: more
	// overlap the writes' round trips when thousands of nodes join or
	// the views are first published, at the cost of API server
	// concurrency.
	DefaultNodeWorkers = 4
	// DefaultQoSWorkers is how many EgressQoS statuses are evaluated and
	// written at once. An evaluation reads every live agent's watermark
	// (O(nodes)) and writes at most one status; objects are one per
	// namespace and change rarely, so two overlap the writes of a change
	// that concerns many (an agent catching up) without taking the API
	// server's concurrency from the EgressService writes.
	DefaultQoSWorkers = 2
	// DefaultQoSPendingWarning is how long an EgressQoS generation may
	// wait for live agents to apply it before the Warning Event Pending
	// names them. An agent takes in a change and syncs within about a
	// second; 30 s is past a slow sync or a rolling update of the
	// agents, so the Warning points at a stuck agent rather than at
	// ordinary lag. Shorter warns of every slow sync; longer leaves a
	// stuck node unnamed for longer (status.status names it at once).
	DefaultQoSPendingWarning = 30 * time.Second
	// DefaultEgressIPWorkers is how many EgressIPs are synced at once. A
	// sync is an in-memory decision plus at most one write of the object;
	// as for EgressServices, more workers overlap the writes' round trips
	// (a burst of new EgressIPs, a node's addresses failing over) at the
	// cost of API server concurrency.
	DefaultEgressIPWorkers = 8
	// DefaultCloudWorkers is how many CloudPrivateIPConfigs are synced at
	// once, and how many nodes' capacities are read at once. Each sync waits on the cloud's API (hundreds of milliseconds a
	// call, and Assign waits until the cloud lists the address): more
	// workers assign more addresses at once, and spend the account's API
	// rate faster, which the cloud answers with throttling.
	DefaultCloudWorkers = 10
	// DefaultEgressRouterWorkers is how many EgressRouters are synced at
	// once. A sync is an in-memory choice over the nodes plus at most a
	// status write and a Service or EndpointSlice write; more workers
	// overlap those round trips when many routers move at once (a holder
	// lost), at the cost of API server concurrency.
	DefaultEgressRouterWorkers = 8
	// DefaultFirewallWorkers and DefaultFirewallPendingWarning are their
	// EgressFirewall counterparts, for the same reasons: one object per
	// namespace, changed rarely, taken in by an agent within about a
	// second.
	DefaultFirewallWorkers        = 2
	DefaultFirewallPendingWarning = 30 * time.Second
	// DefaultExternalRouteWorkers and DefaultExternalRoutePendingWarning
	// are their AdminPolicyBasedExternalRoute counterparts: a handful of
	// cluster-wide policies, changed rarely. Their status also changes
	// when a node's next hop goes down or up, one write per change.
	DefaultExternalRouteWorkers        = 2
	DefaultExternalRoutePendingWarning = 30 * time.Second

	// DefaultResyncPeriod is how often every EgressService and node is
	// enqueued again, a safety net for lost events. A no-op resync costs no
	// API call, only CPU. A negative Options.ResyncPeriod disables it.
	DefaultResyncPeriod = 10 * time.Minute

	// DefaultRetryBaseDelay is the first delay before a failed sync of one
	// object is retried; it doubles with every failure.
	DefaultRetryBaseDelay = 50 * time.Millisecond
	// DefaultRetryMaxDelay caps that delay: a persistently failing object
	// costs at most one attempt per this period, and is retried at most this
	// long after the cause goes away (an event on it retries at once).
	DefaultRetryMaxDelay = 30 * time.Second
)

// Options configure a Controller. Zero fields take the defaults above.
// DefaultProbeBindAddress lets the system pick the probe socket's port:
// the agents answer to whatever address asks. NoProbes turns probing off.
const (
	DefaultProbeBindAddress = ":0"
	NoProbes                = "none"
)

type Options struct {
	// Namespace holds agent Leases and the leader Lease.
	Namespace string
	// Deployment names the controller's own Deployment in Namespace: its
	// deletion (`helm uninstall`, which keeps the namespace) starts the
	// uninstall as the namespace's does (uninstall.go). Empty: only the
	// namespace's deletion does.
	Deployment string
	// Identity names this replica in the leader Lease (e.g. the pod name).
	Identity string

	// LeaderElection turns leader election on; only the leader writes.
	LeaderElection bool
	// LeaderLeaseName, LeaseDuration, RenewDeadline, RetryPeriod configure
	// leader election (see the Default constants).
	LeaderLeaseName string
	// Liveness tunes how agents are judged dead (heartbeat.Judge); zero
	// fields take heartbeat's defaults.
	Liveness      heartbeat.JudgeConfig
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ProbeBindAddress is the leader's UDP socket for the probe protocol
	// (heartbeat.Prober): DefaultProbeBindAddress when empty, NoProbes to
	// judge agents by their Leases alone.
	ProbeBindAddress string

	// PodCIDRs are the cluster network. Endpoint addresses outside them are
	// host-networked and do not make a Service eligible. Empty: every
	// address counts.
	PodCIDRs []netip.Prefix
	// EgressIPUnheld is the agents' choice for a selected pod whose
	// EgressIP holds no address of its family (the same EGRESSIP_UNHELD):
	// the Assigned condition says when the pods leave through their
	// nodes. "" is esv1.EgressIPUnheldDrop.
	EgressIPUnheld esv1.EgressIPUnheld
	// MaxEgressIPsPerNode is how many egress IPs, both families together,
	// a node without assign.MaxEgressIPsAnnotation may hold; 0 sets no
	// limit. A limit spreads the addresses over more nodes than the
	// fewest-first rule alone would when nodes come and go, and bounds
	// what one node's failure moves at once; too low a limit leaves
	// addresses unheld (NodesAtCapacity) while nodes have room to spare.
	MaxEgressIPsPerNode int
	// CloudProvider is the cloud the cloud controller reconciles
	// CloudPrivateIPConfigs with; nil is cloud.Metal.
	CloudProvider cloud.Provider

	ServiceWorkers int
	NodeWorkers    int
	QoSWorkers     int
	// QoSPendingWarning: see DefaultQoSPendingWarning.
	QoSPendingWarning time.Duration
	FirewallWorkers   int
	EgressIPWorkers   int
	CloudWorkers      int
	// EgressRouterWorkers is how many EgressRouters are synced at once
	// (DefaultEgressRouterWorkers).
	EgressRouterWorkers int
	// FirewallPendingWarning: see DefaultFirewallPendingWarning.
	FirewallPendingWarning time.Duration
	ExternalRouteWorkers   int
	// ExternalRoutePendingWarning: see DefaultExternalRoutePendingWarning.
	ExternalRoutePendingWarning time.Duration
	ResyncPeriod                time.Duration
	RetryBaseDelay              time.Duration
	RetryMaxDelay               time.Duration

	// Registerer receives the controller's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock defaults to the real clock (tests may use a fake one for the
	// pure parts; the controller itself needs real time).
	Clock clock.WithTicker
}

// maxEgressIPsPerNode is MaxEgressIPsPerNode as assign.NodeEgressLimits
// reads it.
func (o *Options) maxEgressIPsPerNode() int {
	if o.MaxEgressIPsPerNode <= 0 {
		return assign.NoLimit
	}
	return o.MaxEgressIPsPerNode
}

func (o *Options) setDefaults() error {
	setDefault(&o.Namespace, DefaultNamespace)
	setDefault(&o.LeaderLeaseName, DefaultLeaderLeaseName)
	setDefault(&o.LeaseDuration, DefaultLeaseDuration)
	setDefault(&o.RenewDeadline, DefaultRenewDeadline)
	setDefault(&o.RetryPeriod, DefaultRetryPeriod)
	setDefault(&o.ProbeBindAddress, DefaultProbeBindAddress)
	setDefault(&o.ServiceWorkers, DefaultServiceWorkers)
	setDefault(&o.NodeWorkers, DefaultNodeWorkers)
	setDefault(&o.QoSWorkers, DefaultQoSWorkers)
	setDefault(&o.QoSPendingWarning, DefaultQoSPendingWarning)
	setDefault(&o.FirewallWorkers, DefaultFirewallWorkers)
	setDefault(&o.ExternalRouteWorkers, DefaultExternalRouteWorkers)
	setDefault(&o.EgressIPWorkers, DefaultEgressIPWorkers)
	setDefault(&o.CloudWorkers, DefaultCloudWorkers)
	setDefault(&o.EgressRouterWorkers, DefaultEgressRouterWorkers)
	if o.CloudProvider == nil {
		o.CloudProvider = cloud.Metal{}
	}
	if o.MaxEgressIPsPerNode < 0 {
		return errors.New("the cluster's egress IPs per node must be 0 (no limit) or more")
	}
	setDefault(&o.FirewallPendingWarning, DefaultFirewallPendingWarning)
	setDefault(&o.ExternalRoutePendingWarning, DefaultExternalRoutePendingWarning)
	setDefault(&o.RetryBaseDelay, DefaultRetryBaseDelay)
	setDefault(&o.RetryMaxDelay, DefaultRetryMaxDelay)
	setDefault(&o.ResyncPeriod, DefaultResyncPeriod)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.LeaderElection {
		if o.Identity == "" {
			return errors.New("leader election needs an identity")
		}
		if o.RenewDeadline >= o.LeaseDuration || o.RetryPeriod >= o.RenewDeadline {
			return errors.New("leader election needs retry period < renew deadline < lease duration")
		}
	}
	return nil
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
