package cluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/reasons"
)

// syncService converges one EgressService: it decides its host from the
// caches (keeping a valid one), writes status.host and the Ready condition
// if they differ, then lets the node queue move the label. It writes
// nothing when the status is already right.
func (m *egressServices) syncService(ctx context.Context, t *term, key string) error {
	c := m.c
	ns, name := splitKey(key)
	s := m.state(t)
	es, err := m.lister.EgressServices(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.mu.Lock()
		nodes, others := s.release(key)
		c.metrics.withoutHost.Set(float64(s.withoutHost.Len()))
		c.metrics.noMatchingNode.Set(float64(s.waiting.Len()))
		s.mu.Unlock()
		m.enqueue(t, nodes, others)
		return c.markInputs(ctx, ns, name, false)
	}
	if err != nil {
		return err
	}
	in, err := m.input(es)
	if err != nil {
		return err
	}
	// Before the status write, so that the agents' watches deliver the
	// Service by the time they learn of its host; a failure is retried
	// after the rest of the sync.
	markErr := c.markInputs(ctx, ns, name, !c.uninstalling.Load())
	el := assign.Evaluate(in)

	s.mu.Lock()
	eventAt, hasEvent := s.takeEvent(key)
	es = s.freshest(key, es)
	rec := s.record(key)
	previous := rec.host
	d := assign.Decide(key, el, previous, m.nodesView(t))
	if d.Host == esv1.HostAll {
		s.reserve(key, "")
	} else {
		s.reserve(key, d.Host)
	}
	if d.Reason == reasons.NoMatchingNode {
		s.waiting.Insert(key)
	} else {
		s.waiting.Delete(key)
	}
	message := d.Message
	if d.Reason == reasons.Assigned {
		message += s.labelConflict(key, rec.label)
	}
	s.mu.Unlock()

	cond := readyCondition(es, d, message)
	written, err := c.writeStatus(ctx, es, d.Host, cond)
	if err != nil {
		if hasEvent {
			s.mu.Lock()
			s.noteEvent(key, eventAt)
			s.mu.Unlock()
		}
		return err
	}

	s.mu.Lock()
	if written != nil {
		s.written[key] = written
	}
	confirmed := d.Host
	if confirmed == esv1.HostAll {
		confirmed = ""
	}
	nodes, others := s.confirm(key, confirmed)
	if d.Host == "" {
		s.withoutHost.Insert(key)
	} else {
		s.withoutHost.Delete(key)
	}
	c.metrics.withoutHost.Set(float64(s.withoutHost.Len()))
	c.metrics.noMatchingNode.Set(float64(s.waiting.Len()))
	s.mu.Unlock()
	m.enqueue(t, nodes, others)

	if written != nil {
		m.report(ctx, es, previous, d, message)
		if hasEvent {
			c.metrics.eventToStatus.Observe(c.opts.Clock.Since(eventAt).Seconds())
		}
	}
	return markErr
}

// input gathers what the eligibility of es depends on from the caches.
func (m *egressServices) input(es *esv1.EgressService) (assign.Input, error) {
	c := m.c
	in := assign.Input{EgressService: es, PodCIDRs: c.opts.PodCIDRs}
	svc, err := c.serviceLister.Services(es.Namespace).Get(es.Name)
	switch {
	case err == nil:
		in.Service = svc
	case !apierrors.IsNotFound(err):
		return in, err
	}
	objs, err := c.slices.ByIndex(endpointSliceServiceIndex, es.Namespace+"/"+es.Name)
	if err != nil {
		return in, err
	}
	for _, o := range objs {
		in.EndpointSlices = append(in.EndpointSlices, o.(*discoveryv1.EndpointSlice))
	}
	return in, nil
}

// nodesView is the candidacy input of every node: built from the node
// cache and agent liveness once, then refreshed node by node as they
// change (nodeChanged). Call with m.state(t).mu held.
func (m *egressServices) nodesView(t *term) map[string]*assign.Node {
	c := m.c
	s := m.state(t)
	if s.view == nil {
		nodes, _ := c.nodeLister.List(labels.Everything())
		s.view = make(map[string]*assign.Node, len(nodes))
		for _, n := range nodes {
			s.view[n.Name] = m.candidacy(t, n)
		}
		s.staleNodes.Clear()
		return s.view
	}
	for name := range s.staleNodes {
		if n, err := c.nodeLister.Get(name); err == nil {
			s.view[name] = m.candidacy(t, n)
		} else {
			delete(s.view, name)
		}
	}
	s.staleNodes.Clear()
	return s.view
}

// candidacy is what Decide needs to know of node n. Call with m.state(t).mu
// held.
func (m *egressServices) candidacy(t *term, n *corev1.Node) *assign.Node {
	c := m.c
	alive, unreachable := t.agents.of(n.Name)
	return &assign.Node{Name: n.Name, Labels: n.Labels, Ready: assign.NodeServes(n, alive), AgentAlive: alive, AgentUnreachable: unreachable,
		AgentRestarting: c.leaseFacts.restarting(n.Name), Load: m.state(t).load(n.Name)}
}

// report emits the Events and metrics of a status change from es's status
// (before the write) to decision d; previous is the host reserved before d.
func (m *egressServices) report(ctx context.Context, es *esv1.EgressService, previous string, d assign.Decision, message string) {
	c := m.c
	prevHost := es.Status.Host
	prevReason := ""
	if cond := meta.FindStatusCondition(es.Status.Conditions, ConditionReady); cond != nil {
		prevReason = cond.Reason
	}
	logger := klog.FromContext(ctx).WithValues("egressService", klog.KObj(es))
	if d.Lost != assign.NodeOK && previous != d.Host {
		c.metrics.failovers.WithLabelValues(string(d.Lost)).Inc()
		next := d.Host
		if next == "" {
			next = "none (" + string(d.Reason) + ")"
		}
		m.event(es, corev1.EventTypeWarning, reasons.HostLost, fmt.Sprintf("host %s lost (%s); new host: %s", previous, d.Lost, next))
		logger.Info("Host lost", "host", previous, "cause", d.Lost, "newHost", d.Host)
	}
	switch {
	case d.Host == prevHost && string(d.Reason) == prevReason:
		// only the message or the observed generation changed
	case d.Host != prevHost && d.Reason == reasons.Assigned:
		c.metrics.assignments.Inc()
		m.event(es, corev1.EventTypeNormal, d.Reason, message)
		logger.Info("Host assigned", "host", d.Host, "previous", prevHost)
	case d.Reason == reasons.AllNodes:
		m.event(es, corev1.EventTypeNormal, d.Reason, message)
		logger.Info("Host set to ALL", "previous", prevHost)
	default:
		eventType := corev1.EventTypeWarning
		if d.Host != "" {
			eventType = corev1.EventTypeNormal
		}
		m.event(es, eventType, d.Reason, message)
		logger.Info("No host", "reason", d.Reason, "message", message, "previous", prevHost)
	}
}

// event emits an Event on es (the emitter counts it).
func (m *egressServices) event(es *esv1.EgressService, eventType string, reason reasons.Reason, message string) {
	c := m.c
	c.events.Event(es, eventType, string(reason), message)
}

// enqueue queues nodes and services (from state changes).
func (m *egressServices) enqueue(t *term, nodes, services []string) {
	for _, n := range nodes {
		m.nodes(t).Add(n)
	}
	for _, k := range services {
		m.services(t).Add(k)
	}
}

func splitKey(key string) (namespace, name string) {
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}
