package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// RenewerConfig configures the agent side of the protocol.
type RenewerConfig struct {
	// Namespace holds the Lease (the component's namespace).
	Namespace string
	// NodeName is the agent's node; the Lease is named after it.
	NodeName string
	// RenewInterval defaults to DefaultRenewInterval.
	RenewInterval time.Duration
	// LeaseDuration defaults to DefaultLeaseDuration. It must be longer than
	// RenewInterval.
	LeaseDuration time.Duration
	// Healthy is asked before every renewal; a non-nil error skips the
	// renewal, so the Lease runs out unless the agent recovers in time. Nil
	// means always healthy.
	Healthy func(context.Context) error
	// Facts is asked before every renewal for the facts to publish. Nil
	// publishes none.
	Facts func() Facts
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Observe, if not nil, is told the result of every renewal attempt
	// (for metrics).
	Observe func(RenewalResult)
	// PeerFacts: also keep the node's peer-facts Lease (peerfacts.go)
	// equal to the peer part of the facts.
	PeerFacts bool
}

// RenewalResult is how one attempt to renew the Lease ended.
type RenewalResult string

const (
	// RenewalOK: the Lease was written.
	RenewalOK RenewalResult = "ok"
	// RenewalError: the write failed (the API server refused it or did not
	// answer in time).
	RenewalError RenewalResult = "error"
	// RenewalSkipped: Healthy failed, so the renewal was not attempted and
	// the Lease is left to run out.
	RenewalSkipped RenewalResult = "skipped"
)

// Renewer keeps one agent's Lease fresh. It costs one API write per renewal:
// it updates from the Lease it last wrote, and reads the Lease back only
// when that write conflicts or the Lease is missing.
type Renewer struct {
	cfg    RenewerConfig
	leases leaseAPI
	// last is the Lease as this renewer last wrote or read it.
	last *coordinationv1.Lease
	// renewed is when the last successful renewal started (unix nanos),
	// by the renewer's clock; 0 before the first.
	renewed atomic.Int64
	// failing: the last renewal attempt failed or was skipped.
	failing atomic.Bool
	// skipped: the last renewal was skipped (Healthy failed), so it made no
	// request; Run renews at the first facts check that finds the agent
	// healthy.
	skipped bool
	// lastFacts are the facts of the last successful write, and lastWrite
	// when it started.
	lastFacts Facts
	lastWrite time.Time
	// handingOver: the write under way is Handover's.
	handingOver bool
	// peerFacts writes the peer-facts Lease (RenewerConfig.PeerFacts).
	peerFacts peerFactsWriter
}

// Renewing says whether the agent renews: its last attempt succeeded
// (true before the first), no longer than an interval and a half ago.
// The half interval's margin makes an agent whose renewal hangs on an
// unresponsive API server say so at least half an interval before a peer
// that renewed an interval earlier sees its own Lease run out (after 3
// intervals with the defaults). What the agent tells its peers
// (PeerHandler).
func (r *Renewer) Renewing() bool {
	if r.failing.Load() {
		return false
	}
	last := r.LastRenewed()
	return last.IsZero() || r.cfg.Clock.Since(last) <= r.cfg.RenewInterval+r.cfg.RenewInterval/2
}

// LastRenewed returns when the last successful renewal started (zero
// before the first): the Lease is valid until LeaseDuration after it, as
// the cluster component sees it at the latest.
func (r *Renewer) LastRenewed() time.Time {
	if n := r.renewed.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// NewRenewer returns a Renewer that writes through client, each request a
// single attempt (newLeaseAPI says why).
func NewRenewer(client coordinationclient.CoordinationV1Interface, cfg RenewerConfig) (*Renewer, error) {
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = DefaultRenewInterval
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	switch {
	case cfg.Namespace == "" || cfg.NodeName == "":
		return nil, errors.New("heartbeat: namespace and node name are required")
	case cfg.LeaseDuration <= cfg.RenewInterval:
		return nil, fmt.Errorf("heartbeat: lease duration %v must be longer than the renew interval %v", cfg.LeaseDuration, cfg.RenewInterval)
	}
	return &Renewer{cfg: cfg, leases: newLeaseAPI(client, cfg.Namespace)}, nil
}

// FactsCheckInterval is how often the renewer asks for the facts between
// renewals, and MinFactsWriteInterval how soon after a write a change of
// them is written: a changed fact (the sync state, a watermark, an
// address) reaches the readers within about FactsCheckInterval, not at the
// next renewal, while a fact that keeps changing (EgressQoS objects under
// churn move the watermark) costs at most one write per
// MinFactsWriteInterval. Asking costs a few netlink reads on the node.
const (
	FactsCheckInterval    = 500 * time.Millisecond
	MinFactsWriteInterval = time.Second
)

// RenewJitter stretches each wait between renewals by up to this fraction
// of RenewInterval, at random. Agents started together (a cluster brought
// up at once, a DaemonSet rolled out quickly) would otherwise renew in
// step, every node in the same instant, for as long as they run; the
// jitter spreads them over the interval within a few renewals. More
// spreads them sooner, and lets a renewal come later: at most
// RenewInterval*(1+RenewJitter) apart, still well inside the Lease and
// the half interval of margin that Renewing allows.
const RenewJitter = 0.1

// Run renews the Lease at once and then about every RenewInterval (see
// RenewJitter) until ctx ends, and writes sooner when the facts change.
// A failed renewal is logged and tried again at the next tick, not
// sooner; a skipped one (the agent unhealthy) as soon as the agent is
// healthy again. Run returns only ctx's error. The Lease is left to expire on
// return, unless Handover extends it for a restart.
func (r *Renewer) Run(ctx context.Context) error {
	next := r.cfg.Clock.NewTimer(wait.Jitter(r.cfg.RenewInterval, RenewJitter))
	defer next.Stop()
	facts := r.cfg.Clock.NewTicker(FactsCheckInterval)
	defer facts.Stop()
	renew := true
	for {
		if renew {
			if err := r.RenewOnce(ctx); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Heartbeat not renewed", "node", r.cfg.NodeName)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-next.C():
			renew = true
			next.Reset(wait.Jitter(r.cfg.RenewInterval, RenewJitter))
		case <-facts.C():
			// A renewal skipped while the agent was unhealthy (a new agent
			// before its first sync, above all) is made as soon as it
			// recovers, not an interval later: until then the Lease is
			// still its predecessor's handover, and the agent's death
			// would not be judged.
			renew = r.recovered(ctx) || r.factsChanged()
		}
	}
}

// recovered says whether the last renewal was skipped and the agent is
// healthy now. Asking costs no API request; a skip is counted and logged
// once per tick, not at every check.
func (r *Renewer) recovered(ctx context.Context) bool {
	return r.skipped && (r.cfg.Healthy == nil || r.cfg.Healthy(ctx) == nil)
}

// factsChanged says whether the facts differ from those last written, and
// the last write is at least MinFactsWriteInterval old. (The peer facts
// are a part of them: their Lease is written with the heartbeat's, and a
// failed write of it is retried with the next renewal.)
func (r *Renewer) factsChanged() bool {
	if r.cfg.Facts == nil || r.last == nil || r.cfg.Clock.Since(r.lastWrite) < MinFactsWriteInterval {
		return false
	}
	return !r.cfg.Facts().Equal(r.lastFacts)
}

// Handover renews the Lease one last time, valid for grace rather than
// LeaseDuration, as the agent stops for a restart: the cluster component
// keeps the node's services while the successor starts, whose first
// renewal shortens it again. Like every renewal it is skipped while the
// dataplane is unhealthy. Call it once Run has returned.
//
// The Lease also says that the agent is restarting (AnnotationRestarting),
// so that the observer of the probe protocol does not judge its silence
// meanwhile; the successor's first renewal removes the mark.
func (r *Renewer) Handover(ctx context.Context, grace time.Duration) error {
	saved := r.cfg.LeaseDuration
	r.cfg.LeaseDuration = max(grace, saved)
	r.handingOver = true
	defer func() { r.cfg.LeaseDuration, r.handingOver = saved, false }()
	return r.RenewOnce(ctx)
}

// RenewOnce renews the Lease now if the health function allows it.
func (r *Renewer) RenewOnce(ctx context.Context) error {
	if r.cfg.Healthy != nil {
		if err := r.cfg.Healthy(ctx); err != nil {
			r.failing.Store(true)
			r.skipped = true
			r.observe(RenewalSkipped)
			return fmt.Errorf("agent unhealthy, renewal skipped: %w", err)
		}
	}
	r.skipped = false
	var facts Facts
	if r.cfg.Facts != nil {
		facts = r.cfg.Facts()
	}
	// A renewal that takes longer than the Lease is valid is useless.
	ctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration)
	defer cancel()
	started := r.cfg.Clock.Now()
	err := r.write(ctx, facts)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		r.last = nil // someone else wrote or deleted it: read it back once
		err = r.write(ctx, facts)
	}
	if err == nil && r.cfg.PeerFacts {
		// Only a live agent's facts are its peers' concern; a failure is
		// retried with the next write of the heartbeat.
		if perr := r.peerFacts.write(ctx, r, facts); perr != nil {
			klog.FromContext(ctx).Error(perr, "Peer facts not written", "node", r.cfg.NodeName)
		}
	}
	if err == nil {
		r.lastFacts, r.lastWrite = facts, started
		r.renewed.Store(started.UnixNano())
		r.observe(RenewalOK)
	} else {
		r.observe(RenewalError)
	}
	r.failing.Store(err != nil)
	return err
}

func (r *Renewer) observe(result RenewalResult) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(result)
	}
}

// write updates the Lease from r.last, reading or creating it first when
// r.last is unknown.
func (r *Renewer) write(ctx context.Context, facts Facts) error {
	if r.last == nil {
		got, err := r.leases.get(ctx, r.cfg.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			created, err := r.leases.create(ctx, r.desired(&coordinationv1.Lease{}, facts))
			if err != nil {
				return fmt.Errorf("create Lease %s/%s: %w", r.cfg.Namespace, r.cfg.NodeName, err)
			}
			r.last = created
			return nil
		case err != nil:
			return fmt.Errorf("get Lease %s/%s: %w", r.cfg.Namespace, r.cfg.NodeName, err)
		}
		r.last = got
	}
	updated, err := r.leases.update(ctx, r.desired(r.last, facts))
	if err != nil {
		return fmt.Errorf("renew Lease %s/%s: %w", r.cfg.Namespace, r.cfg.NodeName, err)
	}
	r.last = updated
	return nil
}

// desired is base renewed now, holding facts; base is not modified.
func (r *Renewer) desired(base *coordinationv1.Lease, facts Facts) *coordinationv1.Lease {
	l := base.DeepCopy()
	now := metav1.NewMicroTime(r.cfg.Clock.Now())
	l.Name, l.Namespace = r.cfg.NodeName, r.cfg.Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LeaseLabel] = LeaseLabelValue
	// Facts this agent no longer has are removed; others' annotations stay.
	// The QoS and firewall watermarks, and the firewall's unresolved
	// names, are not among them: a restarted
	// agent finds its predecessor's flows on the bridge (docs/dataplane.md,
	// "How the agent applies it"), so the predecessor's watermark stays
	// true until this agent's first sync replaces it. Dropping it would flip every
	// EgressQoS and EgressFirewall to Pending and back on each agent
	// restart: two status writes per object per node in a rolling update.
	for _, k := range []string{AnnotationBridgeMAC, AnnotationSteerAddresses, AnnotationSyncState, AnnotationEgressSubnets, AnnotationHostAddresses,
		AnnotationProbeAddress, AnnotationRestarting} {
		delete(l.Annotations, k)
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	maps.Copy(l.Annotations, facts.annotations(r.cfg.LeaseDuration))
	if r.handingOver {
		l.Annotations[AnnotationRestarting] = "true"
	}
	holder := r.cfg.NodeName
	seconds := durationSeconds(r.cfg.LeaseDuration)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder || l.Spec.AcquireTime == nil {
		l.Spec.HolderIdentity = &holder
		l.Spec.AcquireTime = &now
	}
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &now
	return l
}
