package heartbeat

import (
	"context"
	"fmt"
	"maps"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The peer-facts Lease: what agents need of each other, apart from what
// changes with every renewal. Every agent watches its peers' facts; were
// they read from the heartbeat Leases, every renewal of every agent would
// reach every agent (nodes² / RenewInterval watch events in all, 2.5
// million per second at 5,000 nodes). So each agent also writes the facts
// its peers read (Facts.Peer) to a second Lease, PeerFactsLeaseName of its
// node, labelled LeaseLabel=PeerFactsLabelValue, only when they change;
// agents watch those. The heartbeat Lease keeps every fact too, for the
// cluster component and for agents of an older version (which read their
// peers' heartbeat Leases).
const (
	// PeerFactsLabelValue is LeaseLabel's value on peer-facts Leases.
	PeerFactsLabelValue = "node-facts"
	// peerFactsSuffix makes a node's peer-facts Lease name.
	peerFactsSuffix = ".facts"
)

// PeerFactsLeaseName is the name of node's peer-facts Lease, and false
// when node's name is too long to take the suffix (a Lease name is a DNS
// subdomain of at most 253 characters): such a node's peers read its
// heartbeat Lease instead.
func PeerFactsLeaseName(node string) (string, bool) {
	name := node + peerFactsSuffix
	return name, len(validation.IsDNS1123Subdomain(name)) == 0
}

// PeerFactsNode is the node whose peer-facts Lease is l, or false if l is
// not one.
func PeerFactsNode(l *coordinationv1.Lease) (string, bool) {
	if l.Labels[LeaseLabel] != PeerFactsLabelValue {
		return "", false
	}
	node, ok := strings.CutSuffix(l.Name, peerFactsSuffix)
	return node, ok && node != ""
}

// Peer is the part of f that other agents read: the bridge MAC and steer
// addresses (steering), the host addresses (cluster-internal
// destinations), the peer key and the probe address (the peer and probe
// protocols).
func (f Facts) Peer() Facts {
	return Facts{BridgeMAC: f.BridgeMAC, SteerAddresses: f.SteerAddresses, HostAddresses: f.HostAddresses,
		PeerKey: f.PeerKey, ProbeAddress: f.ProbeAddress}
}

// peerFactsWriter keeps an agent's peer-facts Lease equal to the peer part
// of its facts: one write when they change, none otherwise.
type peerFactsWriter struct {
	// last is the Lease as last written or read; nil when unknown.
	last *coordinationv1.Lease
	// written are the facts last written.
	written Facts
	known   bool
}

// write brings the peer-facts Lease of r's node to facts' peer part.
func (w *peerFactsWriter) write(ctx context.Context, r *Renewer, facts Facts) error {
	facts = facts.Peer()
	if w.known && facts.Equal(w.written) {
		return nil
	}
	name, ok := PeerFactsLeaseName(r.cfg.NodeName)
	if !ok {
		return nil
	}
	if w.last == nil {
		got, err := r.leases.get(ctx, name)
		switch {
		case apierrors.IsNotFound(err):
			got = nil
		case err != nil:
			return fmt.Errorf("get Lease %s/%s: %w", r.cfg.Namespace, name, err)
		}
		w.last = got
	}
	desired := w.desired(r, name, facts)
	var err error
	var wrote *coordinationv1.Lease
	if w.last == nil {
		wrote, err = r.leases.create(ctx, desired)
	} else {
		wrote, err = r.leases.update(ctx, desired)
	}
	if err != nil {
		w.last = nil // read it back next time
		return fmt.Errorf("write Lease %s/%s: %w", r.cfg.Namespace, name, err)
	}
	w.last, w.written, w.known = wrote, facts, true
	return nil
}

// desired is the peer-facts Lease holding facts, from the last one read.
func (w *peerFactsWriter) desired(r *Renewer, name string, facts Facts) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if w.last != nil {
		l = w.last.DeepCopy()
	}
	l.Name, l.Namespace = name, r.cfg.Namespace
	l.Labels = map[string]string{LeaseLabel: PeerFactsLabelValue}
	l.Annotations = map[string]string{}
	maps.Copy(l.Annotations, facts.annotations(0))
	delete(l.Annotations, AnnotationDuration) // not a heartbeat: it never runs out
	holder := r.cfg.NodeName
	now := metav1.NewMicroTime(r.cfg.Clock.Now())
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &now}
	return l
}
