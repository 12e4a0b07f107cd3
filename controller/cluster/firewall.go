package cluster

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// EgressFirewall status: status.status in the reference's words
// (referenceStatus), and status.messages in egressflow's: first the one-line
// summary of where the current generation is applied (rollout.go says how
// it is found) or of its first problem, then one message a rule that
// cannot be applied. The type has no conditions: the first message's
// first word is the state.

// firewallKind is the kind, as events, logs and the reference's
// status.status name it.
const firewallKind = "EgressFirewall"

// firewallStatusMessages is how many problems status.messages lists; past
// it one more message says how many more there are. The same bound holds
// for the dnsNames unresolved on some node (one message each). An object
// may have
// esv1.MaxEgressFirewallRules rules, each wrong: the bound keeps the status
// (and the Invalid Event, which repeats the list) small, and the first
// problems are enough to start fixing.
const firewallStatusMessages = 20

// newFirewallRollout is the EgressFirewall rollout, of the objects inf
// watches: an object not named default is reported Invalid (no agent
// applies it; the CRD refuses such objects, but one stored before it did
// is shown).
func newFirewallRollout(c *Controller, inf cache.SharedIndexInformer, s slot[*rolloutTerm[*esv1.EgressFirewall]]) *rollout[*esv1.EgressFirewall] {
	return newRollout(c, rolloutConfig{
		kind: firewallKind, name: esv1.EgressFirewallName, reportMisnamed: true,
		resource: "egressfirewalls", queueLabel: queueFirewall, writeKind: "firewall_status",
		watermark: func(f heartbeat.Facts) string { return f.FirewallRevision },
		nodeNotes: firewallUnresolvedDNS,
		workers:   c.opts.FirewallWorkers, pendingWarning: c.opts.FirewallPendingWarning,
		states: c.metrics.firewallStates, applied: c.metrics.firewallApplied,
	}, firewallAPI{}, inf,
		func(ns string) statusClient[*esv1.EgressFirewall] { return c.es.K8sV1().EgressFirewalls(ns) },
		s)
}

// firewallKey is the queue key of an EgressFirewall, whatever its name:
// one not named default is reported.
func firewallKey(obj any) string {
	return rolloutKey[*esv1.EgressFirewall](obj, esv1.EgressFirewallName, true)
}

// firewallAPI judges EgressFirewalls and writes their status.
type firewallAPI struct{}

func (firewallAPI) problems(fw *esv1.EgressFirewall, podCIDRs []netip.Prefix) []esv1.RuleProblem {
	return firewallProblems(fw, podCIDRs)
}

// firewallProblems are the problems of fw's rules as the agents read them
// (esv1.EgressFirewallSpec.Rules): those of the object alone (InvalidRule)
// and of the cluster's pod CIDRs (WrongFamily). Whether a dnsName is
// resolved is up to each node's resolver: the agents publish the names
// they have no answer for (unresolvedMessages).
func firewallProblems(fw *esv1.EgressFirewall, podCIDRs []netip.Prefix) []esv1.RuleProblem {
	_, problems := fw.Spec.Rules(familyCheckCIDRs(podCIDRs))
	return problems
}

// firewallStatus is the status v says of fw: the reference's
// status.status, and the summary before the problems' messages and then
// the dnsNames of fw's rules that some live agent has no answer for.
// The unresolved names change neither status.status nor the summary: a
// rule whose name has no answer is applied, matching nothing until it has
// one, as the reference's empty address set does.
func firewallStatus(fw *esv1.EgressFirewall, v rolloutVerdict) esv1.EgressFirewallStatus {
	messages := append([]string{v.summary()}, v.problemMessages(firewallStatusMessages)...)
	return esv1.EgressFirewallStatus{Status: v.referenceStatus(firewallKind),
		Messages: append(messages, unresolvedMessages(fw, v.nodeNotes)...)}
}

// unresolvedSuffix ends every status message about unresolved dnsNames,
// and no other: reported() tells them from the problems by it.
const unresolvedSuffix = " not resolved yet"

// unresolvedMessages are the messages about fw's dnsNames that nodes
// (node → esv1.DNSNameKey, as agents publish them) have no answer for:
// one per name, sorted, naming at most statusNodeNames nodes ("node-2:
// dnsName api.example.com is not resolved yet", "node-1, node-2 and 3
// more: ..."), at most firewallStatusMessages names and then one saying
// how many more. Names no rule of fw has (any more) are left out: an
// agent's list may be older than the object.
func unresolvedMessages(fw *esv1.EgressFirewall, nodes map[string][]string) []string {
	if len(nodes) == 0 {
		return nil
	}
	wanted := map[string]bool{}
	for _, r := range fw.Spec.Egress {
		if r.To.DNSName != "" {
			wanted[esv1.DNSNameKey(r.To.DNSName)] = true
		}
	}
	names, who := nodesByNote(nodes, func(name string) bool { return wanted[name] })
	var out []string
	for _, name := range names[:min(len(names), firewallStatusMessages)] {
		out = append(out, fmt.Sprintf("%s: dnsName %s is%s", who[name], name, unresolvedSuffix))
	}
	if more := len(names) - firewallStatusMessages; more > 0 {
		out = append(out, fmt.Sprintf("and %d more dnsNames are%s", more, unresolvedSuffix))
	}
	return out
}

// firewallUnresolvedDNS reads an agent's unresolved dnsNames
// (heartbeat.Facts.FirewallUnresolvedDNS, "<namespace>/<name>") as
// rollout notes: by the key of the namespace's EgressFirewall.
func firewallUnresolvedDNS(f heartbeat.Facts) (map[string][]string, bool) {
	if f.FirewallUnresolvedDNS == nil {
		return nil, false
	}
	out := map[string][]string{}
	for _, e := range f.FirewallUnresolvedDNS {
		if ns, name, ok := strings.Cut(e, "/"); ok {
			key := ns + "/" + esv1.EgressFirewallName
			out[key] = append(out[key], name)
		}
	}
	return out, true
}

func (firewallAPI) says(fw *esv1.EgressFirewall, v rolloutVerdict) bool {
	want := firewallStatus(fw, v)
	return fw.Status.Status == want.Status && slices.Equal(fw.Status.Messages, want.Messages)
}

func (firewallAPI) withStatus(fw *esv1.EgressFirewall, v rolloutVerdict) *esv1.EgressFirewall {
	next := fw.DeepCopy()
	next.Status = firewallStatus(fw, v)
	return next
}

func (firewallAPI) status(fw *esv1.EgressFirewall) any { return fw.Status }

// reported reads the state and the problems from status.messages
// (readSummary), but for the messages about unresolved dnsNames (which
// are no problem of the rules).
func (firewallAPI) reported(fw *esv1.EgressFirewall) (reasons.Reason, string, bool) {
	return readSummary(fw.Status.Status, fw.Status.Messages,
		func(m string) bool { return strings.HasSuffix(m, unresolvedSuffix) },
		func(state reasons.Reason) string { return referenceStatus(firewallKind, state) })
}

// problemsText is status.messages in one line.
func (firewallAPI) problemsText(v rolloutVerdict) string {
	return v.problemList(firewallStatusMessages)
}
