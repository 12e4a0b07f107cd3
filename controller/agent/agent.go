// Package agent is the node agent's control loop: it watches the egress
// family's objects (EgressServices with their Services and EndpointSlices,
// EgressIPs, EgressQoSes, EgressFirewalls, and those of the members given
// in Config.Members), Nodes, the agents' Leases and the Pods of its node,
// keeps this node's desired dataplane current
// (controller/dataplane's Planner), and converges br-ex, the policy-routing
// rules and conntrack to it. It owns the apply step, and the removal of
// everything it applied when egressflow is uninstalled (Uninstall); what to
// install is decided by pure functions elsewhere.
//
// One sync at a time, over one queue key: events mark the objects whose
// inputs changed and enqueue the key, so bursts collapse into one sync
// that re-reads those objects from the informer caches (where each
// member's objects are read is one table: sources), recomputes them (and
// the few that share an endpoint or LB IP with them), and sends what
// differs from the bridge for those objects alone as one atomic OpenFlow
// bundle. Nodes and Leases are re-read on every sync (they are
// few), and so are the node's Pods after any of them changed. The first
// sync, and the first after the OpenFlow connection comes back (OVS
// restarted, or the agent did), dump the installed flows and diff every
// service; it waits until every informer has synced, so a partial view of
// the cluster is never programmed.
//
// Healthy says whether the node's dataplane can be trusted (readiness, and
// the heartbeat); Live whether the agent still makes progress (liveness:
// a sync that does not end, or a bridge away past a bound; liveness.go).
package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/bfd"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	esinformers "github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	eslisters "github.com/egressflow/egressflow/controller/generated/listers/egressservice/v1"
	nolisters "github.com/egressflow/egressflow/controller/generated/listers/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/nodeview"
	"github.com/egressflow/egressflow/openflow"
)

// Switch is what the agent needs of its bridge's OpenFlow connection.
type Switch interface {
	// DumpFlows calls fn with every flow whose cookie matches cookie under
	// mask, read in place as the dump arrives (fn keeps no entry); an
	// error from fn stops it.
	DumpFlows(ctx context.Context, cookie, mask uint64, fn func(openflow.FlowEntry) error) error
	// BeginBundle opens an atomic, ordered transaction that messages are
	// added to in parts.
	BeginBundle(ctx context.Context) (Bundle, error)
	// Ports describes the bridge's ports, LOCAL included.
	Ports(ctx context.Context) ([]openflow.Port, error)
	// Groups describes the bridge's groups, every controller's.
	Groups(ctx context.Context) ([]openflow.GroupDesc, error)
	// FlushConntrack removes the connections the filter selects.
	FlushConntrack(ctx context.Context, filter *openflow.CTFlush) error
	// Connected reports whether the connection is up now.
	Connected() bool
	// Generation counts the connections made so far: it changes with every
	// reconnection, after which the bridge may have lost its flows.
	Generation() uint64
	// SendPacket has the bridge run a packet through po's actions.
	SendPacket(ctx context.Context, po *openflow.PacketOut) error
}

// FirewallDNS follows the addresses of DNS names (dnsresolve.Resolver):
// the agent tells it which names its node's EgressFirewall rules need, and
// reads the answers whenever it signals a change.
type FirewallDNS interface {
	// SetNames sets the names to follow, by esv1.DNSNameKey.
	SetNames(keys []string)
	// Snapshot returns each followed name's addresses; a name absent has
	// no answer yet.
	Snapshot() map[string][]netip.Addr
	// Changed is signalled whenever Snapshot would return something new.
	Changed() <-chan struct{}
	// Generation counts the changes; it grows before Changed is
	// signalled.
	Generation() uint64
	// Learn files addresses that an answer seen elsewhere gave name, valid
	// for ttl (a restarted agent's predecessor's, read from the bridge).
	Learn(name string, addrs []netip.Addr, ttl time.Duration)
}

// RuleSyncer converges the policy-routing rules and the routes of
// egressflow's own tables (iprule.Manager).
type RuleSyncer interface {
	Sync(desired []dataplane.Rule) (added, removed int, err error)
	SyncRoutes(desired []dataplane.Route) (added, removed int, err error)
}

// HostFirewallSyncer converges the node's nftables table, which judges the
// local pods' packets to the node's own addresses (local) by the
// EgressFirewall rules, and refuses the connections to a served
// EgressRouter's address that it does not redirect (hostfirewall.Syncer);
// it reports whether it changed the table.
type HostFirewallSyncer interface {
	Sync(ctx context.Context, fw dataplane.Firewall, refusals []dataplane.RouterRefusal, local []netip.Addr) (bool, error)
}

// Retry backoff after a failed sync: the first retry comes quickly (a
// transient bundle error usually clears at once), later ones back off so a
// persistent failure (OVS down) costs little; the cap keeps recovery within
// seconds of the cause going away.
const (
	retryBaseDelay = 50 * time.Millisecond
	retryMaxDelay  = 5 * time.Second
)

// syncKey is the only key of the queue; what a sync covers is in the dirty
// set and the worker's unapplied set.
const syncKey = "node"

// serviceIndex indexes EndpointSlices by the "namespace/name" of their
// Service.
const serviceIndex = "egressflow-service"

// Config wires an Agent.
type Config struct {
	Node       dataplane.NodeConfig
	UplinkPort string // name of the uplink port on the bridge
	// Namespace holds the agents' heartbeat Leases.
	Namespace string
	Kube      kubernetes.Interface
	Egress    versioned.Interface
	Switch    Switch
	// Forwarding, if not nil, holds a restarting ovs-vswitchd until the
	// agent has replayed its flows; Disconnected signals each loss of the
	// OpenFlow connection (ofconn.Client.Disconnected), when it holds.
	Forwarding   ForwardingGate
	Disconnected <-chan struct{}
	// LastRenewed, if not nil, says when the node's heartbeat Lease was
	// last renewed (heartbeat.Renewer.LastRenewed); LeaseDuration is how
	// long a renewal is valid. Once the Lease has run out the node is
	// fenced: it hosts nothing (dataplane.NodeConfig.Fenced) until it has
	// renewed again and its caches have caught up with the API.
	LastRenewed   func() time.Time
	LeaseDuration time.Duration
	// SharedOutage, if not nil, says whether the peers cannot renew either
	// (heartbeat.PeerProbe.SharedOutage): the API server is away for the
	// cluster, whose component then holds every assignment, so a Lease
	// that ran out does not fence the node.
	SharedOutage func() bool
	// ProbeLost, if not nil, says whether the probe protocol has found
	// this node cut off, or stalled for long enough to have been judged
	// dead, and why (heartbeat.Responder.Lost, given ProbePeers): the node
	// is fenced as when its Lease has run out, and unfenced once the
	// probes are back and its caches have caught up.
	ProbeLost func(ctx context.Context, peers func() []netip.AddrPort) (bool, string)
	Rules     RuleSyncer
	Tables    dataplane.TableResolver
	// HostFirewall, if not nil, keeps the node's nftables table equal to
	// TableFirewall's rules, for the pods' packets to the node's own
	// addresses, which never cross the bridge; nil: those go unjudged.
	HostFirewall HostFirewallSyncer
	// DNS follows the addresses of the EgressFirewall rules' DNS names
	// (controller/dnsresolve); nil: no name is ever answered, so dnsName
	// rules match nothing (and are reported unresolved).
	DNS      FirewallDNS
	Recorder record.EventRecorder
	Metrics  *Metrics
	// Resync is the informers' resync period (0: none). A resync only
	// re-runs the level-triggered sync; nothing is written unless it differs.
	Resync time.Duration
	// Liveness bounds when the agent counts as wedged (Live); zero fields
	// take the defaults. Clock, if not nil, times them (tests).
	Liveness LivenessBounds
	Clock    clock.PassiveClock
	// Members are members of the egress family the agent plans beside its
	// built-in ones (MemberSource).
	Members []MemberSource
	// Neighbours, if not nil, finds the MACs of the external routes' next
	// hops on the node's link to them (neighbour.Resolver, on the bridge's
	// interface). Nil: no hop is usable, and the pods the routes select
	// are dropped.
	Neighbours NeighbourTable
	// BFD, if not nil, runs a session to each next hop that asks for BFD
	// (bfd.Engine): such a hop is used only while its session is up. Nil:
	// no such hop is used.
	BFD BFDSessions
	// HopsChanged signals each change of a next hop's MAC or BFD session.
	HopsChanged <-chan struct{}
}

// BFDSessions runs BFD sessions to peers (bfd.Engine).
type BFDSessions interface {
	// Add starts a session to peer, if there is none.
	Add(peer netip.Addr) error
	// Remove ends the session to peer.
	Remove(peer netip.Addr)
	// Peers returns the peers with a session.
	Peers() []netip.Addr
	// State returns the state of the session to peer; ok is false when
	// there is none.
	State(peer netip.Addr) (st bfd.State, d bfd.Diag, ok bool)
}

// NeighbourTable finds the MACs of the addresses the agent wants
// (neighbour.Resolver).
type NeighbourTable interface {
	// Want sets the addresses to resolve.
	Want(addrs []netip.Addr)
	// MAC returns an address's MAC, if known.
	MAC(addr netip.Addr) (net.HardwareAddr, bool)
}

// MemberSource is a member of the egress family, with the informer of its
// objects: the agent registers the member with its planner, runs the
// informer, marks an object's key (dataplane.ObjectKey of the member's
// API) dirty on each of its events, and hands the member the object as
// the informer holds it, or nil once it is gone. Its parts are diffed,
// applied and reported like every member's, in the same bundle, and the
// first sync waits for its informer too.
type MemberSource struct {
	Member   dataplane.Member
	Informer cache.SharedIndexInformer
}

// memberSource is where the agent reads a member's objects.
type memberSource struct {
	// informer holds the member's objects; the agent marks keyOf of each
	// of its events dirty. Nil: EgressIP, whose objects are handed over
	// whole (setHolderWatches).
	informer cache.SharedIndexInformer
	keyOf    func(obj any) string
	// read reads the object of a dirty key as its member takes it
	// (dataplane.Member.Update): nil, or a typed nil, when it is gone.
	// Nil: the member's keys are never marked dirty (EgressIP's objects
	// are handed over whole, setHolderWatches).
	read func(key string) (any, error)
	// eventObject returns the object a node's problems with key are
	// recorded on as Events, nil when it is gone. Nil: its problems are
	// logged only, as the cluster component reports them once for every
	// node (EgressQoS's, EgressFirewall's: their families, their rules,
	// the same on a thousand nodes).
	eventObject func(key string) runtime.Object
	// seen, of a member whose rollout the cluster component reports
	// (rolledOut), is the newest resourceVersion of an event of its
	// objects the handlers have taken in (marked dirty), or of the initial
	// list once the informer has synced; nil for the others.
	seen *revisionWatermark
	// changed, if not nil, is set by each event of the member's objects.
	changed *atomic.Bool
}

// rolledOut is src of a member whose rollout the cluster component
// reports from every node's heartbeat (EgressQoS, EgressFirewall,
// AdminPolicyBasedExternalRoute): the
// agent publishes the watermark of its objects as of its last successful
// sync (AppliedRevision), and leaves the Events to the cluster component,
// which reports its problems once for every node (its families, its
// rules, the same on a thousand nodes), so they are only logged here.
func rolledOut(src memberSource) memberSource {
	src.seen, src.eventObject = &revisionWatermark{}, nil
	return src
}

// storeSource is the source of a member's objects held by informer, keyed
// dataplane.ObjectKey(api, namespace, name).
func storeSource(api dataplane.API, informer cache.SharedIndexInformer) memberSource {
	read := storeRead(api, informer.GetStore())
	return memberSource{
		informer: informer,
		keyOf:    func(obj any) string { return apiObjectKey(api, obj) },
		read:     read,
		eventObject: func(key string) runtime.Object {
			obj, _ := read(key)
			o, _ := obj.(runtime.Object)
			return o
		},
	}
}

// Agent runs the node's sync loop.
type Agent struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]

	egressServices eslisters.EgressServiceLister
	egressIPs      eslisters.EgressIPLister
	egressRouters  nolisters.EgressRouterLister
	externalRoutes eslisters.AdminPolicyBasedExternalRouteLister
	namespaces     corelisters.NamespaceLister
	services       corelisters.ServiceLister
	endpointSlices cache.Indexer
	// nodes are the Nodes as the cluster component publishes them
	// (nodeview): addresses and labels.
	nodes *nodeview.Reader
	// leases are the peers' peer-facts Leases; heartbeatLeases their
	// heartbeat Leases, read only while readingHeartbeats (peerleases.go).
	leases, heartbeatLeases coordinationlisters.LeaseLister
	// podScope holds the pods the agent reads (podscope.go).
	podScope    podScope
	kubeFactory informers.SharedInformerFactory
	// egressServiceFactory watches the Services and EndpointSlices
	// labelled endpoints.EgressServiceLabel.
	egressServiceFactory informers.SharedInformerFactory
	leaseFactory         informers.SharedInformerFactory
	heartbeatFactory     informers.SharedInformerFactory
	viewFactory          informers.SharedInformerFactory
	// heartbeatLeasesStop stops the heartbeat Lease informer, once no
	// peer needs it; readingHeartbeats says whether it still runs.
	heartbeatLeasesStop chan struct{}
	readingHeartbeats   atomic.Bool
	ownPodFactory       informers.SharedInformerFactory
	esFactory           esinformers.SharedInformerFactory
	synced              []cache.InformerSynced
	// sources says, for each member's API, where its objects are read:
	// the one table from informers to members.
	sources map[dataplane.API]memberSource

	dirtyMu sync.Mutex
	// dirty holds the keys of the EgressServices whose inputs changed since
	// the worker last read them.
	dirty map[string]bool
	// podsChanged: a Pod changed since the worker last read them.
	podsChanged atomic.Bool
	// egressIPsChanged, namespacesChanged, routesChanged: an EgressIP, a
	// namespace's labels, an AdminPolicyBasedExternalRoute changed since
	// the worker last read them (the pod watches they imply may change).
	egressIPsChanged, namespacesChanged, routesChanged atomic.Bool
	// held are the EgressIP addresses the bridge answers for, as the last
	// committed bundle left it; an address new in it is announced
	// (announceTakeovers). Written by the worker, read by announcers.
	heldMu sync.Mutex
	held   map[netip.Addr]bool
	// released are the addresses the bridge stopped answering for that
	// are yet to be handed back to their holders (handBack): written and
	// read by the worker only.
	released map[netip.Addr]bool
	// dnsChanged: the DNS names' answers changed since the worker last
	// read them (Config.DNS).
	dnsChanged atomic.Bool
	// dnsAwaited: the worker has waited once for the resolver's first
	// answers (awaitAnswers). Owned by the worker.
	dnsAwaited bool
	// dnsRendered is the resolver's generation of the last snapshot the
	// planner took (owned by the worker); dnsApplied, of the last one
	// whose flows the bridge took (WaitDNSApplied).
	dnsRendered uint64
	dnsApplied  generationGate
	// dnsNamed is closed once the worker has given the resolver the names
	// its firewalls need (the first sync): before it, a DNS reply teaches
	// the resolver nothing (DNSNamesSet).
	dnsNamed     chan struct{}
	dnsNamedOnce sync.Once
	// hostFirewallCurrent: Config.HostFirewall took the firewall parts as
	// they are, for the own addresses hostFirewallLocal; a recompute that
	// changes an EgressFirewall's part clears it. Owned by the worker.
	hostFirewallCurrent bool
	hostFirewallLocal   []netip.Addr
	// routesSynced are the routes of egressflow's tables that
	// Config.Rules last made installed, valid once routesCurrent: a sync
	// that wants the same ones does not list the node's routes again (a
	// node may hold a routing daemon's hundreds of thousands).
	routesSynced  []dataplane.Route
	routesCurrent bool

	// Owned by the single worker.
	planner *dataplane.Planner
	// ledger is the account of what the bridge holds, which a sync diffs
	// the planner's state against and commits to once the bridge took it.
	ledger *dataplane.Ledger
	// ledgerGeneration is the OpenFlow connection the ledger's account is
	// of: on any other, the bridge may be a restarted vswitchd's.
	ledgerGeneration uint64
	// reported holds the problems of each service already logged and
	// recorded as Events (report).
	reported map[string][]dataplane.Problem
	// prefetched delivers the bridge read that Run starts beside the
	// informers' initial list; nil once the first full sync took it.
	prefetched <-chan *bridgeRead
	// forwarding is the bookkeeping of holds and releases of a restarting
	// ovs-vswitchd's forwarding.
	forwarding forwardingHolds
	// wantedHops are the external routes' next hops last asked of
	// Neighbours; hopMACs and hopsUp what the planner was last told of
	// their MACs and BFD sessions; bfdErrors the last error starting
	// each session, logged once.
	wantedHops []netip.Addr
	hopMACs    map[netip.Addr]net.HardwareAddr
	hopsUp     map[netip.Addr]bool
	// hopsFollowed are the wanted hops that BFD follows.
	hopsFollowed map[netip.Addr]bool
	bfdErrors    map[netip.Addr]string

	// applyMu serializes what writes to the bridge: the worker's syncs
	// and, until the caches have synced, the cold guard.
	applyMu sync.Mutex
	// cachesSynced: the informers have listed the cluster, the worker runs
	// and the cold guard is no longer needed.
	cachesSynced atomic.Bool
	// mustFence: the heartbeat Lease has run out, or the probe protocol
	// found the node cut off (watchFence).
	mustFence atomic.Bool
	// probeCut: the probe protocol found the node cut off or stalled; it
	// stays set until the node is fenced and the probes are back.
	probeCut atomic.Bool
	// fenced mirrors the planner's fence for the watchFence goroutine
	// (the planner belongs to the sync loop).
	fenced atomic.Bool
	// fencePending: the Lease is renewed again but the node is still
	// fenced, until its caches have caught up (rechecked every
	// fenceRecheckInterval).
	fencePending atomic.Bool

	mu          sync.Mutex
	lastSyncErr error
	everSynced  bool
	// syncedGeneration is the connection generation the last successful
	// sync started on: the flows are known to be on the bridge only while
	// the connection is still that one.
	syncedGeneration uint64
	// appliedRevisions are the rolled-out members' watermarks (their
	// sources' seen) as the last successful sync began; empty before it.
	appliedRevisions map[dataplane.API]string
	// unresolvedDNS is heartbeat.Facts.FirewallUnresolvedDNS as of the
	// last successful sync (nil before it), under mu; syncUnresolved is
	// what the sync running now found, touched by the worker only.
	unresolvedDNS, syncUnresolved []string
	// routeNotes is heartbeat.Facts.ExternalRouteNotes as of the last
	// successful sync (nil before it), under mu; syncRouteNotes, as
	// syncUnresolved.
	routeNotes, syncRouteNotes map[string][]string

	// liveness records the sync attempts and the bridge's losses (Live).
	liveness *liveness
}

// New builds an Agent; Run starts it. It panics if two members of
// cfg.Members, or one and a built-in member, share an API.
func New(cfg Config) *Agent {
	a := &Agent{
		cfg:      cfg,
		dnsNamed: make(chan struct{}),
		released: map[netip.Addr]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressflow-agent"}),
		kubeFactory: informers.NewSharedInformerFactoryWithOptions(listingKube{cfg.Kube}, cfg.Resync,
			informers.WithTransform(slim)),
		// Only the Services of EgressServices and their slices, which the
		// cluster component labels: the endpoint churn of every other
		// Service in the cluster reaches no agent.
		egressServiceFactory: informers.NewSharedInformerFactoryWithOptions(listingKube{cfg.Kube}, cfg.Resync,
			informers.WithTransform(slim),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = endpoints.EgressServiceSelector() })),
		leaseFactory:        namespaceFactory(cfg, heartbeat.LeaseLabel+"="+heartbeat.PeerFactsLabelValue),
		heartbeatFactory:    namespaceFactory(cfg, heartbeat.LeaseLabel+"="+heartbeat.LeaseLabelValue),
		viewFactory:         namespaceFactory(cfg, nodeview.Selector()),
		heartbeatLeasesStop: make(chan struct{}),
		esFactory: esinformers.NewSharedInformerFactoryWithOptions(listingEgress{cfg.Egress}, cfg.Resync,
			esinformers.WithTransform(slim)),
		// The node's pods, which the pod guard admits and the EgressQoS,
		// EgressFirewall and EgressIP flows classify; the pods of held
		// EgressIPs are watched apart (podScope).
		ownPodFactory: ownPodFactory(cfg),
		dirty:         map[string]bool{},
		planner:       dataplane.NewPlanner(cfg.Node, cfg.Tables),
		ledger:        dataplane.NewLedger(),
		reported:      map[string][]dataplane.Problem{},
		liveness:      newLiveness(cfg.Clock, cfg.Liveness),
	}
	a.watchInputs()
	a.watchMembers()
	if cfg.Metrics != nil && cfg.Switch != nil {
		connected := cfg.Switch.Connected
		cfg.Metrics.isConnected.Store(&connected)
		cfg.Metrics.qosPackets.setSwitch(cfg.Switch)
		cfg.Metrics.firewallDenied.setSwitch(cfg.Switch)
	}
	return a
}

// watchInputs registers the agent's handlers on the informers of what the
// dataplane reads, and takes their listers.
func (a *Agent) watchInputs() {
	serviceInformer := a.egressServiceFactory.Core().V1().Services().Informer()
	sliceInformer := a.egressServiceFactory.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInformer.AddIndexers(cache.Indexers{serviceIndex: sliceServiceKeys}); err != nil {
		panic(err) // only fails once the informer has started
	}
	viewInformer := a.viewFactory.Core().V1().ConfigMaps().Informer()
	leaseInformer := a.leaseFactory.Coordination().V1().Leases().Informer()
	heartbeatInformer := a.heartbeatFactory.Coordination().V1().Leases().Informer()
	a.readingHeartbeats.Store(true)
	podInformer := a.ownPodFactory.Core().V1().Pods().Informer()
	eipInformer := a.esFactory.K8s().V1().EgressIPs().Informer()
	namespaceInformer := a.kubeFactory.Core().V1().Namespaces().Informer()
	noKey := func(any) string { return "" } // read on every sync
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		keyOf    func(any) string
		relevant func(old, new any) bool
		changed  *atomic.Bool
	}{
		// An EgressService's Service and EndpointSlices mark it dirty
		// (the members' own informers: watchMembers).
		{serviceInformer, objectKey, nil, nil},
		{sliceInformer, sliceServiceKey, nil, nil},
		// The nodes' addresses and labels (nodeSelector rules), as the
		// cluster component publishes them: no kubelet status report
		// reaches the agents. The peers' Leases: only their published
		// facts.
		{viewInformer, noKey, viewDataChanged, nil},
		{leaseInformer, noKey, leaseFactsChanged, nil},
		{heartbeatInformer, noKey, leaseFactsChanged, nil},
		// Kubelets update a pod's status on every probe and container
		// change; the pod guard reads its labels, phase and addresses.
		{podInformer, noKey, podAdmissionChanged, &a.podsChanged},
		// The agent must not sync before it has seen every EgressIP: a
		// restart would let their pods out with their pod IPs until it had.
		{eipInformer, noKey, nil, &a.egressIPsChanged},
		{namespaceInformer, noKey, namespaceLabelsChanged, &a.namespacesChanged},
	} {
		// The registration has synced once this handler has seen every
		// object of the initial list, so the first sync's dirty set is
		// complete.
		registration, err := h.informer.AddEventHandler(a.eventHandler(h.keyOf, h.relevant, h.changed, nil))
		if err != nil {
			panic(err) // only fails once the informer has stopped
		}
		a.synced = append(a.synced, registration.HasSynced)
	}
	a.egressServices = a.esFactory.K8s().V1().EgressServices().Lister()
	a.egressIPs = a.esFactory.K8s().V1().EgressIPs().Lister()
	a.egressRouters = a.esFactory.NetworkOperator().V1().EgressRouters().Lister()
	a.externalRoutes = a.esFactory.K8s().V1().AdminPolicyBasedExternalRoutes().Lister()
	a.namespaces = a.kubeFactory.Core().V1().Namespaces().Lister()
	a.services = a.egressServiceFactory.Core().V1().Services().Lister()
	a.endpointSlices = sliceInformer.GetIndexer()
	a.nodes = nodeview.NewReader(a.viewFactory.Core().V1().ConfigMaps().Lister().ConfigMaps(a.cfg.Namespace))
	a.leases = a.leaseFactory.Coordination().V1().Leases().Lister()
	a.heartbeatLeases = a.heartbeatFactory.Coordination().V1().Leases().Lister()
	a.podScope = podScope{cfg: a.cfg, own: a.ownPodFactory.Core().V1().Pods().Lister(),
		handler: a.eventHandler(noKey, podAdmissionChanged, &a.podsChanged, nil),
		holder:  map[dataplane.PodWatch]*podWatch{}}
}

// watchMembers makes the table of where each member of the family reads
// its objects, the built-in ones' and Config.Members' (registered with the
// planner), and registers the handlers on their informers. The agent must
// not sync before it has seen every object of every member: a restart
// would, until it had, unmark EgressQoS's pods, let EgressFirewall's out
// unjudged, and drop an EgressService's steering.
func (a *Agent) watchMembers() {
	es := a.esFactory.K8s().V1()
	a.sources = map[dataplane.API]memberSource{
		dataplane.APIEgressService: {
			informer: es.EgressServices().Informer(),
			keyOf:    objectKey,
			read:     func(k string) (any, error) { return a.inputs(k) },
			eventObject: func(k string) runtime.Object {
				namespace, name, _ := cache.SplitMetaNamespaceKey(k)
				return orNil(a.egressServices.EgressServices(namespace).Get(name))
			},
		},
		dataplane.APIEgressIP: {
			eventObject: func(k string) runtime.Object {
				return orNil(a.egressIPs.Get(strings.TrimPrefix(k, egressIPKeyPrefix)))
			},
		},
		dataplane.APIEgressQoS:      rolledOut(storeSource(dataplane.APIEgressQoS, es.EgressQoSes().Informer())),
		dataplane.APIEgressFirewall: rolledOut(storeSource(dataplane.APIEgressFirewall, es.EgressFirewalls().Informer())),
		dataplane.APIExternalRoute:  rolledOut(storeSource(dataplane.APIExternalRoute, es.AdminPolicyBasedExternalRoutes().Informer())),
	}
	routes := a.sources[dataplane.APIExternalRoute]
	routes.changed = &a.routesChanged // its dynamic hops' gateway pods are watched
	a.sources[dataplane.APIExternalRoute] = routes
	if err := a.planner.RegisterMember(dataplane.NewRouterMember(a.cfg.Node.Name)); err != nil {
		panic(err) // a second member of EgressRouter's API
	}
	a.sources[dataplane.APIEgressRouter] = rolledOut(storeSource(dataplane.APIEgressRouter, a.esFactory.NetworkOperator().V1().EgressRouters().Informer()))
	for _, src := range a.cfg.Members {
		if err := a.planner.RegisterMember(src.Member); err != nil {
			panic(err)
		}
		a.sources[src.Member.API()] = storeSource(src.Member.API(), src.Informer)
	}
	for _, src := range a.sources {
		if src.informer == nil {
			continue
		}
		registration, err := src.informer.AddEventHandler(a.eventHandler(src.keyOf, nil, src.changed, src.seen))
		if err != nil {
			panic(err) // only fails once the informer has stopped
		}
		a.synced = append(a.synced, registration.HasSynced)
	}
}

// storeRead reads the object of a key of api (dataplane.ObjectKey) from
// an informer's store, keyed "namespace/name": nil when it is gone.
func storeRead(api dataplane.API, store cache.Store) func(key string) (any, error) {
	prefix := api.String() + "/"
	return func(key string) (any, error) {
		obj, exists, err := store.GetByKey(strings.TrimPrefix(key, prefix))
		if !exists {
			return nil, err
		}
		return obj, err
	}
}

// orNil is obj, or nil when it could not be read.
func orNil[T runtime.Object](obj T, err error) runtime.Object {
	if err != nil {
		return nil
	}
	return obj
}

// eventHandler marks the EgressService an object feeds (keyOf; "": none),
// or sets its changed flag (if any), and asks for a sync, on every add and
// delete, and on updates for which relevant says something the dataplane
// reads changed (nil: any); seen, if not nil, follows the objects'
// revisions.
func (a *Agent) eventHandler(keyOf func(obj any) string, relevant func(old, new any) bool, changed *atomic.Bool, seen *revisionWatermark) cache.ResourceEventHandler {
	mark := func(obj any) {
		if key := keyOf(obj); key != "" {
			a.markDirty(key)
		}
		if changed != nil {
			changed.Store(true)
		}
		// After the mark: a sync that reads the watermark then takes
		// the dirty keys has taken in what the watermark says.
		if seen != nil {
			seen.observe(obj)
		}
		a.queue.Add(syncKey)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: mark,
		UpdateFunc: func(old, new any) {
			if relevant != nil && !relevant(old, new) {
				return
			}
			if keyOf(old) != keyOf(new) { // an EndpointSlice relabelled
				mark(old)
			}
			mark(new)
		},
		DeleteFunc: mark,
	}
}

// Run starts the informers, waits for them, and syncs until ctx ends.
// Reconnected, if not nil, signals that the OpenFlow connection was
// re-established: the bridge's flows are read again and replayed.
//
// Before the informers have listed the cluster, a bridge without
// egressflow's flows (a vswitchd that has just started) gets the cold
// guard (dataplane.ColdGuardFlows) and is released at once: the agent
// cannot tell endpoints yet, so every pod is held to the fail-closed
// pipeline rather than left to leave with its pod IP, and the node's own
// traffic flows, so the cluster can be listed even when the API server is
// reached through this bridge.
func (a *Agent) Run(ctx context.Context, reconnected <-chan struct{}) error {
	defer utilruntime.HandleCrash()
	defer a.queue.ShutDown()
	a.startInformers(ctx)
	// Run returns only once the succession guard has stopped, so that no
	// hold lands after an uninstall's release.
	successionDone := make(chan struct{})
	defer func() { <-successionDone }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { defer close(successionDone); a.guardSuccession(ctx) }()
	go a.holdOnDisconnect(ctx)
	if a.cfg.DNS != nil {
		go a.watchDNS(ctx)
	}
	go a.watchFence(ctx)
	if a.cfg.HopsChanged != nil {
		go a.watchHops(ctx)
	}
	go a.retireHeartbeatLeases(ctx)
	go a.watchBridge(ctx)
	if err := a.guardCold(ctx); err != nil {
		klog.ErrorS(err, "Could not guard a fresh bridge before the first sync; retrying on reconnection", "node", a.cfg.Node.Name)
	}
	// The bridge is read while the cluster is listed: on a restart at
	// 10,000 services the two take about as long as each other. The first
	// sync waits for the read only once it has computed what it wants.
	prefetched := make(chan *bridgeRead, 1)
	a.prefetched = prefetched
	go func() { prefetched <- a.readBridge(ctx) }()
	coldWake := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-reconnected:
				if !ok {
					return
				}
				klog.InfoS("Reconnected to the bridge: reading its flows and replaying egressflow's", "node", a.cfg.Node.Name)
				a.queue.Add(syncKey) // on a new connection, it reads the bridge first
				select {
				case coldWake <- struct{}{}:
				default:
				}
			}
		}
	}()
	go func() {
		for !a.cachesSynced.Load() {
			select {
			case <-ctx.Done():
				return
			case <-coldWake:
			}
			if err := a.guardCold(ctx); err != nil {
				klog.ErrorS(err, "Could not guard a fresh bridge before the first sync", "node", a.cfg.Node.Name)
			}
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return errors.New("informer caches did not sync")
	}
	// The rolled-out members' initial lists have been taken in: their
	// resourceVersions are the watermarks' floors.
	for _, src := range a.sources {
		if src.seen != nil {
			src.seen.observeRevision(src.informer.LastSyncResourceVersion())
		}
	}
	// A restarted holder must not drop the SNAT of the pods it serves:
	// the first sync waits for their watches too.
	if _, err := a.setHolderWatches(ctx); err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.podScope.synced) {
		return errors.New("the held EgressIPs' pod caches did not sync")
	}
	a.cachesSynced.Store(true)
	klog.InfoS("Caches synced; starting the node sync", "node", a.cfg.Node.Name)
	// Handlers have marked every object so far; the first sync reads them
	// all, as the bridge is dumped and diffed in full anyway.
	a.queue.Add(syncKey)
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for a.processNext(ctx) {
	}
	return nil
}

// startInformers starts every informer the agent reads, until ctx ends
// (the heartbeat Leases' sooner, once retired).
func (a *Agent) startInformers(ctx context.Context) {
	a.kubeFactory.Start(ctx.Done())
	a.egressServiceFactory.Start(ctx.Done())
	a.leaseFactory.Start(ctx.Done())
	a.heartbeatFactory.Start(mergeDone(ctx.Done(), a.heartbeatLeasesStop))
	a.viewFactory.Start(ctx.Done())
	a.esFactory.Start(ctx.Done())
	a.ownPodFactory.Start(ctx.Done())
	for _, src := range a.cfg.Members {
		go src.Informer.Run(ctx.Done())
	}
}

// watchHops asks for a sync whenever a next hop's MAC or BFD session
// changes.
func (a *Agent) watchHops(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.HopsChanged:
			a.queue.Add(syncKey)
		}
	}
}

// watchDNS asks for a sync whenever the DNS names' answers change.
func (a *Agent) watchDNS(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.DNS.Changed():
			a.dnsChanged.Store(true)
			a.queue.Add(syncKey)
		}
	}
}

// fenceCheckInterval is how often the agent checks whether its heartbeat
// Lease has run out or its probes have stopped: part of the time a
// cut-off holder takes to fence itself, which must end before the cluster
// component gives its addresses away (heartbeat.FenceIntervals). A check
// is a clock read, and while the probes are away a ping to a few peers.
const fenceCheckInterval = 50 * time.Millisecond

// watchFence follows the heartbeat: when the Lease runs out unrenewed (the
// node is cut off from the API server, or its dataplane is unhealthy), and
// when it is renewed again, it asks for a sync, which fences or unfences
// the node.
func (a *Agent) watchFence(ctx context.Context) {
	if (a.cfg.LastRenewed == nil || a.cfg.LeaseDuration <= 0) && a.cfg.ProbeLost == nil {
		return
	}
	ticker := time.NewTicker(fenceCheckInterval)
	defer ticker.Stop()
	var rechecked time.Time
	sharedOutage := false // logged once per outage
	var outageSeen time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		lapsed := false
		if a.cfg.LastRenewed != nil && a.cfg.LeaseDuration > 0 {
			last := a.cfg.LastRenewed()
			lapsed = !last.IsZero() && time.Since(last) > a.cfg.LeaseDuration
		}
		outage := false
		if lapsed && !a.fenced.Load() && a.cfg.SharedOutage != nil {
			if a.cfg.SharedOutage() {
				outageSeen = time.Now()
			}
			// When the API server returns, the peers renew within an
			// interval of each other; the cluster component gives every
			// agent a full Lease duration from the first renewal it sees.
			// So an agent whose own renewal comes last does not fence for
			// the peers that renewed first, within that duration.
			outage = !outageSeen.IsZero() && time.Since(outageSeen) < a.cfg.LeaseDuration-sharedOutageEvidenceLag
		}
		if outage {
			if !sharedOutage {
				klog.InfoS("Heartbeat Lease ran out, but so many peers cannot renew either that the API server is away for the cluster: staying unfenced (the cluster component holds every assignment in such a disruption)", "node", a.cfg.Node.Name)
			}
			lapsed, sharedOutage = false, true
		} else if sharedOutage && !lapsed {
			sharedOutage = false
		}
		if a.probeLost(ctx) {
			lapsed = true
		}
		changed := a.mustFence.Swap(lapsed) != lapsed
		// While renewed but still fenced, each sync lists the
		// EgressServices from the API server: not more than once per
		// fenceRecheckInterval.
		recheck := !lapsed && a.fencePending.Load() && time.Since(rechecked) >= fenceRecheckInterval
		if changed || recheck {
			rechecked = time.Now()
			a.queue.Add(syncKey)
		}
	}
}

// probeLost asks the probe protocol whether the node is cut off, and
// latches the answer until the node has fenced: a stall that ended before
// the next sync must still fence.
func (a *Agent) probeLost(ctx context.Context) bool {
	if a.cfg.ProbeLost == nil {
		return false
	}
	lost, why := a.cfg.ProbeLost(ctx, a.ProbePeers)
	switch {
	case lost:
		if !a.probeCut.Swap(true) {
			klog.InfoS("Probes lost: fencing", "node", a.cfg.Node.Name, "reason", why)
		}
	case a.probeCut.Load() && a.fenced.Load():
		a.probeCut.Store(false)
	}
	return a.probeCut.Load()
}

// sharedOutageEvidenceLag is how long after the first peer renews again
// this agent may still see its last evidence of a shared outage: a peer
// round counts for two probe intervals, and takes up to a probe timeout.
// The grace after that evidence is the Lease duration less this lag, so
// that it ends before the cluster component could judge this agent dead.
const sharedOutageEvidenceLag = 2*heartbeat.DefaultPeerProbeInterval + heartbeat.DefaultPeerProbeTimeout

// fenceRecheckInterval is how often a renewed but still fenced node checks
// again whether its cache has caught up: each check lists every
// EgressService from the API server.
const fenceRecheckInterval = time.Second

// guardCold installs the cold guard on a bridge that holds none of
// egressflow's flows (its marker is missing), then releases forwarding,
// unless the caches have synced (the worker's full sync does both then).
func (a *Agent) guardCold(ctx context.Context) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	if a.cachesSynced.Load() {
		return nil
	}
	epoch := a.epoch()
	guarded, err := GuardColdBridge(ctx, a.cfg.Switch, a.cfg.Node, a.cfg.UplinkPort)
	if err != nil || !guarded {
		// Not guarded: programmed before, by this agent's predecessor; the
		// first sync diffs against it (and releases a vswitchd still held).
		return err
	}
	return a.release(ctx, epoch)
}

// GuardColdBridge installs the cold guard (dataplane.ColdGuardFlows) on a
// bridge that holds none of egressflow's flows (its marker is missing) and
// reports whether it did. The agent does it when it starts; a node's boot
// sequence does it too (egressflow-agent --cold-guard) before the kubelet
// starts any pod, since a rebooted node's pods may start before the agent.
func GuardColdBridge(ctx context.Context, sw Switch, node dataplane.NodeConfig, uplinkPort string) (bool, error) {
	marked := false
	err := sw.DumpFlows(ctx, dataplane.MarkerCookie, ^uint64(0), func(openflow.FlowEntry) error {
		marked = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("look for egressflow's marker flow: %w", err)
	}
	if marked {
		return false, nil
	}
	ports, err := readPorts(ctx, sw, uplinkPort)
	if err != nil {
		return false, err
	}
	var changes dataplane.Changes
	changes.Add = dataplane.ColdGuardFlows(node, ports)
	sent, err := applyOnce(ctx, sw, &changes)
	if err != nil {
		return false, fmt.Errorf("install the cold guard: %w", err)
	}
	klog.InfoS("The bridge holds none of egressflow's flows: every pod is held to the fail-closed pipeline until the agent's first sync", "node", node.Name, "flows", sent)
	return true, nil
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	epoch := a.epoch()
	// Read before the sync takes the dirty keys: every rolled-out
	// member's event up to them is among them, or was taken before.
	revisions := map[dataplane.API]string{}
	for api, src := range a.sources {
		if src.seen != nil {
			revisions[api] = src.seen.revision()
		}
	}
	// From here on the attempt counts towards Live's bound, waiting for
	// the cold guard's bundle included.
	a.liveness.syncStarting()
	a.applyMu.Lock()
	err := a.sync(ctx, epoch)
	a.applyMu.Unlock()
	a.liveness.syncEnded()
	a.mu.Lock()
	a.lastSyncErr = err
	if err == nil {
		a.everSynced = true
		a.syncedGeneration = epoch.generation
		a.appliedRevisions = revisions
		a.unresolvedDNS = a.syncUnresolved
		a.routeNotes = a.syncRouteNotes
	}
	a.mu.Unlock()
	if err != nil {
		klog.ErrorS(err, "Node sync failed; retrying", "node", a.cfg.Node.Name, "retries", a.queue.NumRequeues(key))
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// Healthy reports whether this node's dataplane can be trusted: OpenFlow is
// connected, and the last sync succeeded on the current connection (after a
// reconnection the flows are not trusted until they were checked and
// replayed). The heartbeat renews only while it is, so a broken dataplane
// makes the cluster component fail over.
func (a *Agent) Healthy(context.Context) error {
	if !a.cfg.Switch.Connected() {
		return errors.New("OpenFlow connection to the bridge is down")
	}
	generation := a.cfg.Switch.Generation()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.everSynced:
		return errors.New("no successful sync yet")
	case a.lastSyncErr != nil:
		return fmt.Errorf("last sync failed: %w", a.lastSyncErr)
	case a.syncedGeneration != generation:
		return errors.New("reconnected to the bridge; flows not replayed yet")
	}
	return nil
}

// SyncState is the heartbeat's view of Healthy.
func (a *Agent) SyncState() heartbeat.SyncState {
	generation := a.cfg.Switch.Generation()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.lastSyncErr != nil:
		return heartbeat.SyncStateFailed
	case !a.everSynced || a.syncedGeneration != generation:
		return heartbeat.SyncStateSyncing
	}
	return heartbeat.SyncStateSynced
}

// AppliedRevision is the watermark of a rolled-out member's objects
// (rolledOut): the resourceVersion of the newest list or event of them the
// agent had taken in when its last successful sync began; "" before the
// first, and for the other members.
func (a *Agent) AppliedRevision(api dataplane.API) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.appliedRevisions[api]
}

// QoSRevision is the heartbeat's EgressQoS watermark
// (heartbeat.Facts.QoSRevision).
func (a *Agent) QoSRevision() string { return a.AppliedRevision(dataplane.APIEgressQoS) }

// FirewallRevision is the heartbeat's EgressFirewall watermark
// (heartbeat.Facts.FirewallRevision).
func (a *Agent) FirewallRevision() string { return a.AppliedRevision(dataplane.APIEgressFirewall) }

// ExternalRouteRevision is the heartbeat's AdminPolicyBasedExternalRoute
// watermark (heartbeat.Facts.ExternalRouteRevision).
func (a *Agent) ExternalRouteRevision() string { return a.AppliedRevision(dataplane.APIExternalRoute) }

// ExternalRouteNotes is what the node says of the external routes
// (heartbeat.Facts.ExternalRouteNotes) as of the last successful sync: nil
// before it, empty when there is nothing to say.
func (a *Agent) ExternalRouteNotes() map[string][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.routeNotes
}

// FirewallUnresolvedDNS is the heartbeat's list of the EgressFirewall
// dnsNames this node has no answer for (heartbeat.Facts.
// FirewallUnresolvedDNS) as of the last successful sync: nil before it,
// empty when there is none.
func (a *Agent) FirewallUnresolvedDNS() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unresolvedDNS
}

// revisionWatermark is the newest resourceVersion among those observed. A
// resourceVersion is opaque to clients, but the API server's are etcd
// revisions, integers that grow with every write: compared as such, and
// kept as the latest seen should one not be an integer.
type revisionWatermark struct {
	mu sync.Mutex
	rv string
	n  uint64
}

// observe takes in an object's resourceVersion (of a deleted one's last
// state too).
func (w *revisionWatermark) observe(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		w.observeRevision(m.GetResourceVersion())
	}
}

// observeRevision takes in a resourceVersion.
func (w *revisionWatermark) observeRevision(rv string) {
	if rv == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ok := heartbeat.ParseRevision(rv)
	switch {
	case !ok:
		w.rv, w.n = rv, 0
	case n >= w.n:
		w.rv, w.n = rv, n
	}
}

func (w *revisionWatermark) revision() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rv
}

// markDirty records that key's inputs changed.
func (a *Agent) markDirty(key string) {
	a.dirtyMu.Lock()
	a.dirty[key] = true
	a.dirtyMu.Unlock()
}

// takeDirty returns the keys marked since the last call.
func (a *Agent) takeDirty() map[string]bool {
	a.dirtyMu.Lock()
	defer a.dirtyMu.Unlock()
	dirty := a.dirty
	a.dirty = map[string]bool{}
	return dirty
}

// inputs reads key's objects from the informer caches.
func (a *Agent) inputs(key string) (dataplane.ServiceInputs, error) {
	var in dataplane.ServiceInputs
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return in, err
	}
	es, err := a.egressServices.EgressServices(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return in, nil
	} else if err != nil {
		return in, err
	}
	in.EgressService = es
	if in.Service, err = a.services.Services(namespace).Get(name); err != nil && !apierrors.IsNotFound(err) {
		return in, err
	}
	objs, err := a.endpointSlices.ByIndex(serviceIndex, key)
	if err != nil {
		return in, err
	}
	for _, o := range objs {
		in.EndpointSlices = append(in.EndpointSlices, o.(*discoveryv1.EndpointSlice))
	}
	// The cache's order is random; Compute's result does not depend on it,
	// but a stable order keeps equal inputs equal.
	slices.SortFunc(in.EndpointSlices, func(x, y *discoveryv1.EndpointSlice) int { return strings.Compare(x.Name, y.Name) })
	return in, nil
}

// objectKey is "namespace/name" of an object, or of a deleted one's last
// state.
func objectKey(obj any) string {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return ""
	}
	return key
}

// apiObjectKey is dataplane.ObjectKey of an object of api, or of a
// deleted one's last state.
func apiObjectKey(api dataplane.API, obj any) string {
	namespace, name, err := cache.SplitMetaNamespaceKey(objectKey(obj))
	if err != nil || name == "" {
		return ""
	}
	return dataplane.ObjectKey(api, namespace, name)
}

// qosKeyPrefix and firewallKeyPrefix start the keys of EgressQoS and
// EgressFirewall objects in the dirty set; an EgressService's key
// ("namespace/name") never does.
var (
	qosKeyPrefix      = dataplane.APIEgressQoS.String() + "/"
	firewallKeyPrefix = dataplane.APIEgressFirewall.String() + "/"
	routerKeyPrefix   = dataplane.APIEgressRouter.String() + "/"
	egressIPKeyPrefix = dataplane.APIEgressIP.String() + "/"
)

// sliceServiceKey is the key of the Service an EndpointSlice belongs to.
func sliceServiceKey(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return ""
	}
	return s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
}

func sliceServiceKeys(obj any) ([]string, error) {
	if key := sliceServiceKey(obj); key != "" {
		return []string{key}, nil
	}
	return nil, nil
}

// slim is the informers' transform: it keeps of each object only what the
// agent reads (and what Events need to name it), so the caches of a large
// cluster stay small. At 10,000 services the EndpointSlices' conditions,
// target refs and ports, the Services' specs and every object's managed
// fields would otherwise be most of the agent's memory.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *discoveryv1.EndpointSlice:
		return slimSlice(o), nil
	case *corev1.Service:
		out := &corev1.Service{ObjectMeta: identity(o.ObjectMeta),
			Spec: corev1.ServiceSpec{Type: o.Spec.Type, Selector: o.Spec.Selector, IPFamilies: o.Spec.IPFamilies}}
		for _, ing := range o.Status.LoadBalancer.Ingress {
			out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ing.IP})
		}
		return out, nil
	case *corev1.ConfigMap:
		return &corev1.ConfigMap{ObjectMeta: identity(o.ObjectMeta), Data: o.Data}, nil // node views
	case *corev1.Pod:
		id := identity(o.ObjectMeta)
		id.Labels = o.Labels // the pod guard holds pods a Service selects
		// An external route's gateway pod: being deleted, Ready, on the
		// host network, or its addresses on other networks.
		id.DeletionTimestamp = o.DeletionTimestamp
		if status, ok := o.Annotations[dataplane.NetworkStatusAnnotation]; ok {
			id.Annotations = map[string]string{dataplane.NetworkStatusAnnotation: status}
		}
		out := &corev1.Pod{ObjectMeta: id, Spec: corev1.PodSpec{NodeName: o.Spec.NodeName, HostNetwork: o.Spec.HostNetwork},
			Status: corev1.PodStatus{Phase: o.Status.Phase, PodIPs: o.Status.PodIPs}}
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.PodReady {
				out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		return out, nil
	case *esv1.EgressService:
		// Its annotations may hold a kubectl last-applied-configuration,
		// a copy of the whole object.
		return &esv1.EgressService{ObjectMeta: identity(o.ObjectMeta), Spec: o.Spec, Status: o.Status}, nil
	case *esv1.EgressQoS:
		// Its status is the cluster component's, written from what the
		// agents report: no input here.
		return &esv1.EgressQoS{ObjectMeta: identity(o.ObjectMeta), Spec: o.Spec}, nil
	case *esv1.EgressFirewall:
		// Its status too is the cluster component's.
		return &esv1.EgressFirewall{ObjectMeta: identity(o.ObjectMeta), Spec: o.Spec}, nil
	case *esv1.EgressIP:
		// Its status.items say which node holds each address; its
		// conditions are for people.
		id := identity(o.ObjectMeta)
		id.CreationTimestamp = o.CreationTimestamp // precedence between EgressIPs
		return &esv1.EgressIP{ObjectMeta: id, Spec: o.Spec, Status: esv1.EgressIPStatus{Items: o.Status.Items}}, nil
	case *corev1.Namespace:
		id := identity(o.ObjectMeta)
		id.Labels = o.Labels // EgressIP's namespaceSelector
		return &corev1.Namespace{ObjectMeta: id}, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil) // Leases: their annotations carry the agents' facts
	}
	return obj, nil
}

// slimSlice keeps a slice's addresses and their nodes, and nothing else
// of its endpoints (the agent ignores readiness, as the reference does): the
// endpoints of one node become one endpoint listing all their addresses,
// which endpoints.OnClusterNetwork reads exactly as the original. At ten
// endpoints a slice this is about a tenth of the memory.
func slimSlice(o *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	id := identity(o.ObjectMeta)
	id.Labels = o.Labels // the Service's name, for the index
	out := &discoveryv1.EndpointSlice{ObjectMeta: id, AddressType: o.AddressType}
	byNode := map[string]int{} // node name -> index in out.Endpoints
	for _, ep := range o.Endpoints {
		node := ""
		if ep.NodeName != nil {
			node = *ep.NodeName
		}
		i, ok := byNode[node]
		if !ok {
			i = len(out.Endpoints)
			byNode[node] = i
			out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{NodeName: ep.NodeName})
		}
		out.Endpoints[i].Addresses = append(out.Endpoints[i].Addresses, ep.Addresses...)
	}
	// Exactly sized copies: appends leave up to twice the room, in a cache
	// that lives as long as the agent.
	for i := range out.Endpoints {
		out.Endpoints[i].Addresses = slices.Clone(out.Endpoints[i].Addresses)
	}
	out.Endpoints = slices.Clone(out.Endpoints)
	return out
}

// identity keeps of an object's metadata what names it (in Events too).
func identity(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
}

// viewDataChanged reports whether a node view's data changed.
func viewDataChanged(old, new any) bool {
	o, ok1 := old.(*corev1.ConfigMap)
	n, ok2 := new.(*corev1.ConfigMap)
	return !ok1 || !ok2 || !maps.Equal(o.Data, n.Data)
}

// podAdmissionChanged reports whether a pod changed in what the agent
// reads of it (slim keeps nothing else, but the resourceVersion).
func podAdmissionChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := new.(*corev1.Pod)
	return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equality.Semantic.DeepEqual(o.Status, n.Status) ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

func namespaceLabelsChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Namespace)
	n, ok2 := new.(*corev1.Namespace)
	return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Labels, n.Labels)
}

func leaseFactsChanged(old, new any) bool {
	o, ok1 := old.(*coordinationv1.Lease)
	n, ok2 := new.(*coordinationv1.Lease)
	return !ok1 || !ok2 || !heartbeat.ReadFacts(o).Equal(heartbeat.ReadFacts(n))
}

// Peers returns every other agent whose facts are in the cache
// (peerLeases): its node, its node's first InternalIP with port (where its
// health server answers heartbeat.PeerPath) and the key it publishes
// (heartbeat.PeerProbe).
func (a *Agent) Peers(port uint16) []heartbeat.Peer {
	leases, err := a.peerLeases()
	if err != nil {
		return nil
	}
	var out []heartbeat.Peer
	for name, l := range leases {
		if name == a.cfg.Node.Name {
			continue
		}
		if ip, ok := a.internalIP(name); ok {
			out = append(out, heartbeat.Peer{Node: name, Addr: netip.AddrPortFrom(ip, port), Key: heartbeat.ParsePeerKey(heartbeat.ReadFacts(l).PeerKey)})
		}
	}
	return out
}

// ProbePeers returns the probe addresses (heartbeat.Facts.ProbeAddress) of
// every other agent whose facts are in the cache and publish one.
func (a *Agent) ProbePeers() []netip.AddrPort {
	leases, err := a.peerLeases()
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	for name, l := range leases {
		if addr := heartbeat.ProbeAddress(l); name != a.cfg.Node.Name && addr.IsValid() {
			out = append(out, addr)
		}
	}
	return out
}

// IsProbePeer says whether addr is another agent's probe address: the only
// targets this agent pings as a witness (heartbeat.ResponderConfig).
func (a *Agent) IsProbePeer(addr netip.AddrPort) bool {
	return slices.Contains(a.ProbePeers(), addr)
}

// ProbeAddress is where this agent answers the probe protocol, at port:
// its Node's first InternalIP, as its peers reach it (Peers); invalid
// while the Node is not in the cache.
func (a *Agent) ProbeAddress(port uint16) netip.AddrPort {
	if ip, ok := a.internalIP(a.cfg.Node.Name); ok {
		return netip.AddrPortFrom(ip, port)
	}
	return netip.AddrPort{}
}

// internalIP is the first InternalIP of the Node named name in the cache.
func (a *Agent) internalIP(name string) (netip.Addr, bool) {
	node, ok := a.nodes.Get(name)
	if !ok {
		return netip.Addr{}, false
	}
	for _, addr := range node.Status.Addresses {
		if ip, err := netip.ParseAddr(addr.Address); addr.Type == corev1.NodeInternalIP && err == nil {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// PeerKey is the key node's agent publishes, as the cache holds it
// (peerLeases); nil if none (heartbeat.PeerHandler).
func (a *Agent) PeerKey(node string) ed25519.PublicKey {
	if l := a.peerLease(node); l != nil {
		return heartbeat.ParsePeerKey(heartbeat.ReadFacts(l).PeerKey)
	}
	return nil
}
