package cluster

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/events"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// AdminPolicyBasedExternalRoute status: status.status in the reference's
// words (Success, Fail, or empty while agents have yet to apply the
// current generation), and status.messages in egressflow's: first the
// one-line summary of where the current generation is applied (rollout.go
// says how it is found) or of its first problem, then one message per
// problem, then what the agents note about the policy on their nodes
// (heartbeat.Facts.ExternalRouteNotes: next hops they cannot use, gateway
// pods that are no hop), each with the nodes that note it.
// status.lastTransitionTime is when the status last changed.
//
// A next hop down is not a failure to apply the policy: the node steers
// over the other hops (or drops the namespace's egress when none is left,
// never sending it another way), and status.status stays Success. The
// messages and the NextHopsDegraded Event say which hops, on which
// nodes.

// externalRouteKind is the kind, as events and logs name it.
const externalRouteKind = "AdminPolicyBasedExternalRoute"

// externalRouteStatusMessages is how many problems status.messages lists,
// and how many of the agents' notes; past each, one more message says how
// many more there are. A policy has at most 2 × esv1.MaxExternalRouteHops
// hops: the first are enough to act on, and the status (and the Events,
// which repeat the lists) stays small.
const externalRouteStatusMessages = 20

// newExternalRouteRollout is the AdminPolicyBasedExternalRoute rollout, of
// the objects inf watches: every object counts, whatever its name.
func newExternalRouteRollout(c *Controller, inf cache.SharedIndexInformer, s slot[*rolloutTerm[*esv1.AdminPolicyBasedExternalRoute]]) *rollout[*esv1.AdminPolicyBasedExternalRoute] {
	return newRollout(c, rolloutConfig{
		kind: externalRouteKind, resource: "adminpolicybasedexternalroutes", queueLabel: queueExternalRoute, writeKind: "externalroute_status",
		watermark: func(f heartbeat.Facts) string { return f.ExternalRouteRevision },
		nodeNotes: externalRouteNotes,
		workers:   c.opts.ExternalRouteWorkers, pendingWarning: c.opts.ExternalRoutePendingWarning,
		states: c.metrics.externalRouteStates, applied: c.metrics.externalRouteApplied,
	}, externalRouteAPI{clock: c.opts.Clock}, inf,
		func(string) statusClient[*esv1.AdminPolicyBasedExternalRoute] {
			return c.es.K8sV1().AdminPolicyBasedExternalRoutes()
		},
		s)
}

// externalRouteNotes reads an agent's notes about the policies
// (heartbeat.Facts.ExternalRouteNotes) as rollout notes: by the policy's
// key, its name.
func externalRouteNotes(f heartbeat.Facts) (map[string][]string, bool) {
	return f.ExternalRouteNotes, f.ExternalRouteNotes != nil
}

// externalRouteAPI judges AdminPolicyBasedExternalRoutes and writes their
// status; clock stamps status.lastTransitionTime.
type externalRouteAPI struct{ clock clock.Clock }

// problems are what the cluster can tell from the policy alone, as the
// agents read it: selectors that do not parse, static hops that are not
// addresses. The family check does not apply: a hop of a family the
// pods do not have is never used, and harms nothing.
func (externalRouteAPI) problems(route *esv1.AdminPolicyBasedExternalRoute, _ []netip.Prefix) []esv1.RuleProblem {
	return route.Spec.Problems()
}

// externalRouteReferenceStatus is status.status in the reference's words
// for a state (a Ready reason).
func externalRouteReferenceStatus(state reasons.Reason) string {
	switch state {
	case reasons.Applied:
		return esv1.ExternalRouteApplied
	case reasons.Invalid:
		return esv1.ExternalRouteNotApplied
	}
	return ""
}

// externalRouteMessages are status.messages for v: the summary, the
// problems, then the notes.
func externalRouteMessages(v rolloutVerdict) []string {
	messages := append([]string{v.summary()}, v.problemMessages(externalRouteStatusMessages)...)
	return append(messages, noteMessages(v.nodeNotes)...)
}

// noteSeparator separates the nodes from the note in each note message,
// and appears in no summary or problem message: reported() tells the
// notes from the problems by it.
const noteSeparator = " note: "

// noteMessages are the messages about the agents' notes (node → notes):
// one per note, sorted, naming at most statusNodeNames nodes ("node-1,
// node-2 and 3 more note: next hop 172.18.0.5: BFD session down"), at most
// externalRouteStatusMessages and then one saying how many more.
func noteMessages(nodes map[string][]string) []string {
	notes, who := nodesByNote(nodes, nil)
	var out []string
	for _, n := range notes[:min(len(notes), externalRouteStatusMessages)] {
		out = append(out, who[n]+noteSeparator+n)
	}
	if more := len(notes) - externalRouteStatusMessages; more > 0 {
		out = append(out, fmt.Sprintf("and %d more notes", more))
	}
	return out
}

// nodesByNote turns the agents' notes (node → notes) around: the notes
// that keep accepts (nil: all), sorted, and for each the nodes that note
// it, sorted and named as a status message names them (at most
// statusNodeNames: "node-1, node-2 and 3 more").
func nodesByNote(nodes map[string][]string, keep func(note string) bool) ([]string, map[string]string) {
	byNote := map[string][]string{}
	for node, notes := range nodes {
		for _, n := range notes {
			if keep == nil || keep(n) {
				byNote[n] = append(byNote[n], node)
			}
		}
	}
	who := make(map[string]string, len(byNote))
	for n, list := range byNote {
		slices.Sort(list)
		names := strings.Join(list[:min(len(list), statusNodeNames)], ", ")
		if more := len(list) - statusNodeNames; more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		who[n] = names
	}
	return slices.Sorted(maps.Keys(byNote)), who
}

func (externalRouteAPI) says(route *esv1.AdminPolicyBasedExternalRoute, v rolloutVerdict) bool {
	return route.Status.Status == externalRouteReferenceStatus(v.readyReason()) &&
		slices.Equal(route.Status.Messages, externalRouteMessages(v))
}

func (a externalRouteAPI) withStatus(route *esv1.AdminPolicyBasedExternalRoute, v rolloutVerdict) *esv1.AdminPolicyBasedExternalRoute {
	next := route.DeepCopy()
	next.Status = esv1.AdminPolicyBasedRouteStatus{Status: externalRouteReferenceStatus(v.readyReason()),
		Messages: externalRouteMessages(v), LastTransitionTime: metav1.NewTime(a.clock.Now())}
	return next
}

func (externalRouteAPI) status(route *esv1.AdminPolicyBasedExternalRoute) any { return route.Status }

// reported reads the state and the problems from status.messages
// (readSummary), but for the messages about the agents' notes.
func (externalRouteAPI) reported(route *esv1.AdminPolicyBasedExternalRoute) (reasons.Reason, string, bool) {
	return readSummary(route.Status.Status, route.Status.Messages, isNoteMessage, externalRouteReferenceStatus)
}

// isNoteMessage says whether a status message is about the agents' notes.
func isNoteMessage(m string) bool {
	return strings.Contains(m, noteSeparator) || (strings.HasPrefix(m, "and ") && strings.HasSuffix(m, " more notes"))
}

func (externalRouteAPI) problemsText(v rolloutVerdict) string {
	return v.problemList(externalRouteStatusMessages)
}

// reportNotes sends the Event of a change of the agents' notes, from
// route's status (before the write) to v: NextHopsDegraded (Warning)
// listing them when they changed and some remain, NextHopsRecovered
// (Normal) when none remains.
func (externalRouteAPI) reportNotes(e *events.Emitter, route *esv1.AdminPolicyBasedExternalRoute, v rolloutVerdict) {
	var before []string
	for _, m := range route.Status.Messages {
		if isNoteMessage(m) {
			before = append(before, m)
		}
	}
	now := noteMessages(v.nodeNotes)
	switch {
	case slices.Equal(before, now):
	case len(now) > 0:
		e.Event(route, corev1.EventTypeWarning, string(reasons.NextHopsDegraded), strings.Join(now, "; "))
	default:
		e.Event(route, corev1.EventTypeNormal, string(reasons.NextHopsRecovered), "every node that uses the policy can use every next hop")
	}
}
