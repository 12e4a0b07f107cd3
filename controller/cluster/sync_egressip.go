package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/reasons"
)

// errSpecChanged: the EgressIP's spec changed between the decision and
// the write; the write is dropped and the object synced again.
var errSpecChanged = errors.New("spec changed since the decision")

// syncEgressIP converges one EgressIP: it decides the node of each address
// from the caches (keeping valid holders), then writes status.items and
// the Assigned condition if they differ, with the object (EgressIP has no
// status subresource), never changing its spec. It writes nothing when the
// status is already right.
func (m *egressIPs) syncEgressIP(ctx context.Context, t *term, name string) error {
	c := m.c
	e := m.state(t)
	eip, err := m.lister.Get(name)
	if apierrors.IsNotFound(err) {
		m.egressIPDeleted(t, name)
		if m.onCloud() {
			return m.dropCloudConfigs(ctx, name, nil)
		}
		return nil
	}
	if err != nil {
		return err
	}
	view := m.egressNodes(t)

	e.mu.Lock()
	eventAt, hasEvent := e.takeEvent(name)
	eip = e.freshest(name, eip)
	d, affected := e.decide(eip, view)
	m.setEgressIPGauges(e)
	e.mu.Unlock()
	for _, k := range affected {
		m.enqueueEgressIP(t, k)
	}
	decided := d
	if m.onCloud() {
		d = m.confirmedByCloud(d)
	}

	items := d.StatusItems()
	cond := assignedCondition(eip, d, c.opts.EgressIPUnheld)
	written, err := m.writeEgressIPStatus(ctx, eip, items, cond)
	if errors.Is(err, errSpecChanged) {
		// The informer brings the new spec; decide again from it.
		m.queue(t).Add(name)
		return nil
	}
	if err != nil {
		if hasEvent {
			e.mu.Lock()
			e.noteEvent(name, eventAt)
			e.mu.Unlock()
		}
		return err
	}
	if written != nil {
		e.mu.Lock()
		e.written[name] = written
		e.mu.Unlock()
		m.reportEgressIP(ctx, eip, d, cond, eventAt, hasEvent)
	}
	if !m.onCloud() {
		return nil
	}
	if hasEvent && d.Pending() {
		// The latency runs until the cloud confirms.
		e.mu.Lock()
		e.noteEvent(name, eventAt)
		e.mu.Unlock()
	}
	// After the status: nothing the cloud is asked to move is in use.
	return m.askCloud(ctx, eip, decided)
}

// egressIPDeleted forgets a deleted EgressIP: its addresses are no longer
// held anywhere (there is no object left to write), and the EgressIPs
// that list the same addresses may take them.
func (m *egressIPs) egressIPDeleted(t *term, name string) {
	c := m.c
	e := m.state(t)
	e.mu.Lock()
	eventAt, hasEvent := e.takeEvent(name)
	held, affected := e.release(name)
	m.setEgressIPGauges(e)
	e.mu.Unlock()
	if hasEvent {
		for range held {
			c.metrics.eipUnassign.Observe(c.opts.Clock.Since(eventAt).Seconds())
		}
	}
	for _, k := range affected {
		m.enqueueEgressIP(t, k)
	}
}

// decide decides the nodes of eip's addresses from the holders on record
// and reserves them. It returns the decision and the other EgressIPs
// whose ownership of an address may have changed. Call with mu held.
func (s *eipState) decide(eip *esv1.EgressIP, view assign.EgressNodes) (assign.EgressIPDecision, []string) {
	affected := s.setSpec(eip.Name, eip.CreationTimestamp, eip.Spec.Addresses())
	in := assign.EgressIPInput{Addresses: eip.Spec.EgressIPs, Holders: s.records[eip.Name].holders, Conflicts: s.conflicts(eip.Name)}
	d := assign.DecideEgressIP(in, view, s.loadOf)
	unheld, waiting, waitingForRoom := unheldCount(d)
	mayFit := s.reserve(eip.Name, d.Held(), unheld, waiting, waitingForRoom)
	return d, append(affected, mayFit...)
}

// unheldCount counts d's addresses without a node, and says whether a
// change of nodes may give one a node (reasons other than AddressConflict
// and InvalidAddress), and whether an address given up elsewhere may
// (NodesAtCapacity, and AllNodesTaken, whose nodes may be full too).
func unheldCount(d assign.EgressIPDecision) (unheld int, waiting, waitingForRoom bool) {
	for _, it := range d.Items {
		if it.Node != "" {
			continue
		}
		unheld++
		switch it.Reason {
		case reasons.AddressConflict, reasons.InvalidAddress:
		case reasons.NodesAtCapacity, reasons.AllNodesTaken:
			waiting, waitingForRoom = true, true
		default:
			waiting = true
		}
	}
	return unheld, waiting, waitingForRoom
}

func (m *egressIPs) setEgressIPGauges(e *eipState) {
	c := m.c
	held, unheld := e.totals()
	c.metrics.eipAddresses.WithLabelValues("held").Set(float64(held))
	c.metrics.eipAddresses.WithLabelValues("unheld").Set(float64(unheld))
}

// assignedCondition is the Assigned condition for decision d on eip. Its
// observedGeneration is the generation the decision read; since status
// writes bump the generation too, it is never compared. Under
// EgressIPUnheldNodeIP its message also says in which families the
// selected pods leave through their own nodes, since none of the family's
// addresses is held.
func assignedCondition(eip *esv1.EgressIP, d assign.EgressIPDecision, unheld esv1.EgressIPUnheld) metav1.Condition {
	ok, reason, message := d.Condition()
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	} else if unheld.LeavesThroughNode() {
		message += leavingThroughNodes(d)
	}
	return metav1.Condition{Type: ConditionAssigned, Status: status, Reason: string(reason), Message: message, ObservedGeneration: eip.Generation}
}

// leavingThroughNodes says, for each family of d's addresses of which
// none is held, that the selected pods' egress of that family leaves
// through their own nodes (EgressIPUnheldNodeIP); "" when every family has
// a held address.
func leavingThroughNodes(d assign.EgressIPDecision) string {
	var listed, held [2]bool // IPv4, IPv6
	for _, it := range d.Items {
		if !it.Addr.IsValid() {
			continue
		}
		f := 0
		if it.Addr.Is6() {
			f = 1
		}
		listed[f] = true
		held[f] = held[f] || it.Node != ""
	}
	out := ""
	for f, name := range []string{"IPv4", "IPv6"} {
		if listed[f] && !held[f] {
			out += fmt.Sprintf("; no %s address is held: with EGRESSIP_UNHELD=%s the selected pods' %s egress leaves through their own nodes, with the source address those give their other pods, until one is",
				name, esv1.EgressIPUnheldNodeIP, name)
		}
	}
	return out
}

// egressIPUpToDate says whether eip's status already says items and cond
// (the condition's transition time and observed generation aside).
func egressIPUpToDate(eip *esv1.EgressIP, items []esv1.EgressIPStatusItem, cond metav1.Condition) bool {
	if len(eip.Status.Items) != len(items) || (len(items) > 0 && !slices.Equal(eip.Status.Items, items)) {
		return false
	}
	cur := meta.FindStatusCondition(eip.Status.Conditions, cond.Type)
	return cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message
}

// writeEgressIPStatus makes eip's status say items and cond, with an
// update of the whole object that carries the resourceVersion read; on a
// conflict it reads the object again and, if its spec is still the one
// decided on, tries again. It returns the object as written, or nil when
// nothing was written.
func (m *egressIPs) writeEgressIPStatus(ctx context.Context, eip *esv1.EgressIP, items []esv1.EgressIPStatusItem, cond metav1.Condition) (*esv1.EgressIP, error) {
	c := m.c
	client := c.es.K8sV1().EgressIPs()
	written, err := writeStatusRetrying(eip,
		func() (*esv1.EgressIP, error) { return client.Get(ctx, eip.Name, metav1.GetOptions{}) },
		func(cur *esv1.EgressIP) bool { return egressIPUpToDate(cur, items, cond) },
		func(cur *esv1.EgressIP) (*esv1.EgressIP, error) {
			if cur.UID != eip.UID || !apiequality.Semantic.DeepEqual(cur.Spec, eip.Spec) {
				return nil, errSpecChanged
			}
			next := cur.DeepCopy()
			next.Status.Items = items
			meta.SetStatusCondition(&next.Status.Conditions, cond)
			updated, err := client.Update(ctx, next, metav1.UpdateOptions{})
			c.metrics.apiWritesByResult.WithLabelValues("egressip_status", writeResult(err)).Inc()
			return updated, err
		})
	if err != nil {
		return nil, fmt.Errorf("write status of EgressIP %s: %w", eip.Name, err)
	}
	return written, nil
}

// reportEgressIP emits the Events and metrics of a status write: eip is
// the object before it, d the decision written.
func (m *egressIPs) reportEgressIP(ctx context.Context, eip *esv1.EgressIP, d assign.EgressIPDecision, cond metav1.Condition, eventAt time.Time, hasEvent bool) {
	c := m.c
	logger := klog.FromContext(ctx).WithValues("egressIP", klog.KObj(eip))
	before := map[netip.Addr]string{}
	for _, it := range eip.Status.Items {
		if a, ok := esv1.ParseEgressIP(it.EgressIP); ok {
			before[a] = it.Node
		}
	}
	latency := c.opts.Clock.Since(eventAt).Seconds()
	var assigned, lost []string
	after := map[netip.Addr]bool{}
	for _, it := range d.Items {
		if !it.Addr.IsValid() {
			continue
		}
		after[it.Addr] = true
		prev := before[it.Addr]
		switch {
		case it.Node == prev:
			continue
		case it.Node != "" && prev == "":
			assigned = append(assigned, it.Address+" on "+it.Node)
		case it.Node != "":
			c.metrics.eipRebalances.Inc()
			assigned = append(assigned, fmt.Sprintf("%s moved from %s%s to %s", it.Address, prev, lostCause(it, prev), it.Node))
		default:
			lost = append(lost, fmt.Sprintf("%s left %s%s", it.Address, prev, lostCause(it, prev)))
		}
		if hasEvent && it.Node != "" {
			c.metrics.eipAssign.Observe(latency)
		}
		if hasEvent && prev != "" {
			c.metrics.eipUnassign.Observe(latency)
		}
	}
	// Addresses the spec no longer lists.
	for a := range before {
		if !after[a] && hasEvent {
			c.metrics.eipUnassign.Observe(latency)
		}
	}

	if len(assigned) > 0 {
		msg := strings.Join(assigned, "; ")
		c.events.Event(eip, corev1.EventTypeNormal, string(reasons.Assigned), msg)
		logger.Info("EgressIP addresses assigned", "changes", msg)
	}
	prev := meta.FindStatusCondition(eip.Status.Conditions, ConditionAssigned)
	changed := prev == nil || prev.Reason != cond.Reason || prev.Message != cond.Message
	if cond.Status == metav1.ConditionFalse && (changed || len(lost) > 0) {
		msg := cond.Message
		if len(lost) > 0 {
			msg += " (" + strings.Join(lost, "; ") + ")"
		}
		c.events.Event(eip, corev1.EventTypeWarning, cond.Reason, msg)
		logger.Info("EgressIP addresses not held", "reason", cond.Reason, "message", msg)
	}
}

// lostCause is " (cause)" when it gave up prev for a known cause.
func lostCause(it assign.EgressIPItem, prev string) string {
	if it.Lost != assign.NodeOK && it.Previous == prev {
		return " (" + string(it.Lost) + ")"
	}
	return ""
}

// adoptEgressIPs runs when a term starts, before any worker: it records
// every EgressIP's addresses (so that ownership of an address two list is
// known before any decision) and adopts every status.items entry that is
// still valid, so that a new leader moves nothing that is right and counts
// every node's load before it places anything. The workers then converge
// the rest.
func (m *egressIPs) adoptEgressIPs(ctx context.Context, t *term) {
	e := m.state(t)
	eips, _ := m.lister.List(labels.Everything())
	view := m.egressNodes(t)
	e.mu.Lock()
	adopted := e.adopt(eips, view, m.cloudHolders())
	m.setEgressIPGauges(e)
	e.mu.Unlock()
	klog.FromContext(ctx).Info("EgressIP assignments adopted", "egressIPs", len(eips), "addresses", adopted)
}

// adopt records the addresses of every EgressIP of eips, then reserves
// the holders their status.items name that are still valid (the decision
// keeps them), and, for addresses status.items does not name, the nodes
// pending names (on a cloud: those its CloudPrivateIPConfigs ask for). It
// returns how many it adopted. Call with mu held.
func (s *eipState) adopt(eips []*esv1.EgressIP, view assign.EgressNodes, pending map[string]map[netip.Addr]string) int {
	eips = slices.Clone(eips)
	slices.SortFunc(eips, sortEIPs)
	for _, eip := range eips {
		s.setSpec(eip.Name, eip.CreationTimestamp, eip.Spec.Addresses())
	}
	adopted := 0
	for _, eip := range eips {
		holders := map[netip.Addr]string{}
		for _, it := range eip.Status.Items {
			if a, ok := esv1.ParseEgressIP(it.EgressIP); ok && it.Node != "" {
				holders[a] = it.Node
			}
		}
		for a, node := range pending[eip.Name] {
			if _, ok := holders[a]; !ok {
				holders[a] = node
			}
		}
		d := assign.DecideEgressIP(assign.EgressIPInput{Addresses: eip.Spec.EgressIPs, Holders: holders, Conflicts: s.conflicts(eip.Name)}, view, s.loadOf)
		kept := map[netip.Addr]string{}
		for _, it := range d.Items {
			if it.Node != "" && it.Node == it.Previous {
				kept[it.Addr] = it.Node
			}
		}
		adopted += len(kept)
		s.reserve(eip.Name, kept, 0, false, false)
	}
	return adopted
}
