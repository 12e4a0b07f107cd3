package cluster

import (
	"errors"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

const (
	// DefaultNamespace holds the agents' heartbeat Leases and the leader
	// Lease (deploy/ runs the component there).
	DefaultNamespace = "egressflow-system"
	// DefaultLeaderLeaseName names the leader-election Lease. Agent Leases
	// share the namespace but are told apart by heartbeat.LeaseLabel.
	DefaultLeaderLeaseName = "egressflow-controller"

	// DefaultLeaseDuration is how long a leader's Lease lasts without
	// renewal: the longest a crashed leader leaves the cluster without
	// writes. Shorter hands over faster after a crash but lets a leader
	// that merely stalls (GC, API server hiccup) lose the lease. A graceful
	// stop releases the Lease at once, whatever this is.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultRenewDeadline is how long the leader keeps retrying a failing
	// renewal before it stops leading. It must be shorter than the lease
	// duration, so that the leader stops writing before another replica
	// may take over.
	DefaultRenewDeadline = 10 * time.Second
	// DefaultRetryPeriod is how often replicas try to acquire (and the
	// leader to renew) the Lease: the delay of a handover after a release,
	// against one API write per period from the leader.
	DefaultRetryPeriod = 2 * time.Second

	// DefaultServiceWorkers is how many EgressServices are synced at once.
	// Syncs are in-memory decisions plus at most one status write; more
	// workers overlap the writes' round trips (throughput at start-up and
	// on mass failover) at the cost of API server concurrency.
	DefaultServiceWorkers = 8
	// DefaultNodeWorkers is how many nodes' labels are patched at once.
	DefaultNodeWorkers = 4

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
type Options struct {
	// Namespace holds agent Leases and the leader Lease.
	Namespace string
	// Identity names this replica in the leader Lease (e.g. the pod name).
	Identity string

	// LeaderElection turns leader election on; only the leader writes.
	LeaderElection bool
	// LeaderLeaseName, LeaseDuration, RenewDeadline, RetryPeriod configure
	// leader election (see the Default constants).
	LeaderLeaseName string
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration

	// PodCIDRs are the cluster network. Endpoint addresses outside them are
	// host-networked and do not make a Service eligible. Empty: every
	// address counts.
	PodCIDRs []netip.Prefix

	ServiceWorkers int
	NodeWorkers    int
	ResyncPeriod   time.Duration
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration

	// Registerer receives the controller's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock defaults to the real clock (tests may use a fake one for the
	// pure parts; the controller itself needs real time).
	Clock clock.WithTicker
}

func (o *Options) setDefaults() error {
	setDefault(&o.Namespace, DefaultNamespace)
	setDefault(&o.LeaderLeaseName, DefaultLeaderLeaseName)
	setDefault(&o.LeaseDuration, DefaultLeaseDuration)
	setDefault(&o.RenewDeadline, DefaultRenewDeadline)
	setDefault(&o.RetryPeriod, DefaultRetryPeriod)
	setDefault(&o.ServiceWorkers, DefaultServiceWorkers)
	setDefault(&o.NodeWorkers, DefaultNodeWorkers)
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
