package cluster

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

func firewallObject(name string, gen int64, rv string, rules ...esv1.EgressFirewallRule) *esv1.EgressFirewall {
	return &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Generation: gen, ResourceVersion: rv},
		Spec: esv1.EgressFirewallSpec{Egress: rules}}
}

// evaluateFirewall is what the sync of fw decides, as evaluateQoS is for
// an EgressQoS.
func evaluateFirewall(fw *esv1.EgressFirewall, seen revision, agents map[string]revision, podCIDRs []netip.Prefix) rolloutVerdict {
	if fw.Name != esv1.EgressFirewallName {
		return misnamedVerdict(fw, "EgressFirewall", esv1.EgressFirewallName)
	}
	return evaluateRollout(fw, seen, agents, firewallProblems(fw, podCIDRs))
}

func denyCIDR(cidr string) esv1.EgressFirewallRule {
	return esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: cidr}}
}

// The status of every state, as operators read it: status.status in the
// reference's words, then in status.messages egressflow's summary and one
// message per problem the cluster can tell from the object, none for a
// DNS name (a node's resolver's business), at most firewallStatusMessages
// and then how many more.
func TestFirewallVerdict(t *testing.T) {
	dns := esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "api.example.com"},
		Ports: []esv1.EgressFirewallPort{{Protocol: "TCP", Port: 443}}}
	badSelector := esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny,
		To: esv1.EgressFirewallDestination{NodeSelector: &esv1.LabelSelector{MatchLabels: map[string]string{"role": "not valid"}}}}
	badType := esv1.EgressFirewallRule{Type: "Reject", To: esv1.EgressFirewallDestination{CIDRSelector: "192.0.2.0/24"}}
	var manyV6 []esv1.EgressFirewallRule
	var manyMessages []string
	for i := range 25 {
		cidr := fmt.Sprintf("2001:db8:%x::/48", i)
		manyV6 = append(manyV6, denyCIDR(cidr))
		if i < firewallStatusMessages {
			manyMessages = append(manyMessages, fmt.Sprintf("rule %d: cidrSelector %s is IPv6, and the cluster has no pod of that family", i, netip.MustParsePrefix(cidr)))
		}
	}
	manyMessages = append(manyMessages, "and 5 more")

	for _, tc := range []struct {
		name     string
		status   string // status.status, the reference's words
		fw       *esv1.EgressFirewall
		seen     string
		agents   map[string]revision
		podCIDRs []netip.Prefix
		text     string // the summary, the first message
		messages []string
		state    reasons.Reason
	}{
		{"applied, a DNS name is no problem", "EgressFirewall Rules applied", firewallObject("default", 2, "120", dns, denyCIDR("0.0.0.0/0")), "100", watermarks("a", "100", "b", "150"), v4Only,
			"Applied on 2/2 nodes", nil, reasons.Applied},
		{"lagging names capped", "", firewallObject("default", 1, "100", dns), "100", watermarks("a", "99", "b", "", "c", "x", "d", "98", "e", "100"), v4Only,
			"Pending on 4 of 5 nodes: a, b, c and 1 more", nil, reasons.Pending},
		{"no agent", "", firewallObject("default", 1, "100", dns), "100", nil, v4Only,
			"Pending: no node agent is alive", nil, reasons.Pending},
		{"unknown revision is never applied", "", firewallObject("default", 1, "abc", dns), "abc", watermarks("a", "18446744073709551615"), v4Only,
			`Unknown: resourceVersion "abc" is not an etcd revision: where it is applied cannot be told`, nil, reasons.RevisionUnknown},
		{"wrong family and a selector, each named", "EgressFirewall Rules not correctly applied", firewallObject("default", 1, "100", dns, denyCIDR("2001:db8::/32"), badSelector, badType), "100", watermarks("a", "100"), v4Only,
			"Invalid: rule 1: cidrSelector 2001:db8::/32 is IPv6, and the cluster has no pod of that family; and 2 more",
			[]string{"rule 1: cidrSelector 2001:db8::/32 is IPv6, and the cluster has no pod of that family",
				"rule 2: nodeSelector: ", // and the parser's words
				`rule 3: type "Reject" is neither Allow nor Deny`},
			reasons.Invalid},
		{"families unknown: no family check", "EgressFirewall Rules applied", firewallObject("default", 1, "100", denyCIDR("2001:db8::/32")), "100", watermarks("a", "100"), nil,
			"Applied on 1/1 nodes", nil, reasons.Applied},
		{"messages bounded", "EgressFirewall Rules not correctly applied", firewallObject("default", 1, "100", manyV6...), "100", watermarks("a", "100"), v4Only,
			"Invalid: " + manyMessages[0] + "; and 24 more", manyMessages, reasons.Invalid},
		{"not named default", "EgressFirewall Rules not correctly applied", firewallObject("other", 1, "100", dns), "100", watermarks("a", "100"), v4Only,
			"Invalid: EgressFirewall must be named default", []string{"EgressFirewall must be named default"}, reasons.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := evaluateFirewall(tc.fw, etcdRevision(tc.seen), tc.agents, tc.podCIDRs)
			status := firewallStatus(tc.fw, v)
			if status.Status != tc.status {
				t.Errorf("status %q, want %q", status.Status, tc.status)
			}
			if len(status.Messages) == 0 || status.Messages[0] != tc.text {
				t.Errorf("messages %q, want the summary %q first", status.Messages, tc.text)
			} else if !messagesMatch(status.Messages[1:], tc.messages) {
				t.Errorf("messages after the summary %q, want %q", status.Messages[1:], tc.messages)
			}
			if v.readyReason() != tc.state {
				t.Errorf("state %s, want %s", v.readyReason(), tc.state)
			}
			// Written, the status reads back as up to date, with the
			// state and problems the Events compare against.
			var api firewallAPI
			written := tc.fw.DeepCopy()
			written.Status = status
			if !api.says(written, v) {
				t.Error("a status does not say what it was written from")
			}
			if state, problems, ok := api.reported(written); !ok || state != tc.state || problems != api.problemsText(v) {
				t.Errorf("reported as %s %q (ours: %v), want %s %q", state, problems, ok, tc.state, api.problemsText(v))
			}
			if api.says(tc.fw, v) {
				t.Error("an empty status says the verdict")
			}
		})
	}
}

// messagesMatch: got has a message per wanted one, equal to it, or
// starting with it where it ends in ": ".
func messagesMatch(got, want []string) bool {
	return slices.EqualFunc(got, want, func(g, w string) bool {
		return g == w || (strings.HasSuffix(w, ": ") && strings.HasPrefix(g, w))
	})
}

// Every EgressFirewall is keyed, whatever its name, and so is its
// tombstone: one not named default is reported. Anything else is
// ignored, never a crash.
func TestFirewallKey(t *testing.T) {
	for _, fw := range []*esv1.EgressFirewall{firewallObject("default", 1, "5"), firewallObject("other", 1, "6")} {
		want := "shop/" + fw.Name
		if got := firewallKey(fw); got != want {
			t.Errorf("firewallKey(%s) = %q, want %q", fw.Name, got, want)
		}
		if got := firewallKey(cache.DeletedFinalStateUnknown{Key: want, Obj: fw}); got != want {
			t.Errorf("firewallKey(tombstone of %s) = %q, want %q", fw.Name, got, want)
		}
	}
	for _, obj := range []any{qosObject(1, "5"), (*esv1.EgressFirewall)(nil), "not an object", nil} {
		if got := firewallKey(obj); got != "" {
			t.Errorf("firewallKey(%T) = %q, want none", obj, got)
		}
	}
}

// The state and problems the Events compare against are read back from
// the status this controller writes; an empty status is a new object's,
// and one of other wording another writer's, which tells no change.
func TestFirewallReported(t *testing.T) {
	var api firewallAPI
	for _, tc := range []struct {
		status   esv1.EgressFirewallStatus
		state    reasons.Reason
		problems string
		ok       bool
	}{
		{esv1.EgressFirewallStatus{}, "", "", true},
		{esv1.EgressFirewallStatus{Status: "EgressFirewall Rules applied", Messages: []string{"Applied on 3/3 nodes"}}, reasons.Applied, "", true},
		{esv1.EgressFirewallStatus{Messages: []string{"Pending: no node agent is alive"}}, reasons.Pending, "", true},
		{esv1.EgressFirewallStatus{Messages: []string{"Pending on 1 of 3 nodes: node-c"}}, reasons.Pending, "", true},
		{esv1.EgressFirewallStatus{Status: "EgressFirewall Rules not correctly applied", Messages: []string{"Invalid: rule 0: x; and 1 more", "rule 0: x", "rule 1: y"}},
			reasons.Invalid, "rule 0: x; rule 1: y", true},
		{esv1.EgressFirewallStatus{Messages: []string{`Unknown: resourceVersion "abc" is not an etcd revision`}}, reasons.RevisionUnknown, "", true},
		// The reference's word with a summary of another state, or
		// without a summary: another writer's.
		{esv1.EgressFirewallStatus{Status: "EgressFirewall Rules applied", Messages: []string{"Pending on 1 of 3 nodes: node-c"}}, reasons.Pending, "", false},
		{esv1.EgressFirewallStatus{Status: "EgressFirewall Rules applied"}, "", "", false},
		{esv1.EgressFirewallStatus{Status: "EgressFirewall Rules applied", Messages: []string{"zone-a: EgressFirewall Rules applied"}}, "", "", false},
		// An earlier version's status (egressflow's words in status.status).
		{esv1.EgressFirewallStatus{Status: "Applied on 3/3 nodes"}, "", "", false},
		{esv1.EgressFirewallStatus{Status: "tampered", Messages: []string{"tampered"}}, "", "", false},
	} {
		fw := firewallObject("default", 1, "5")
		fw.Status = tc.status
		state, problems, ok := api.reported(fw)
		if state != tc.state || problems != tc.problems || ok != tc.ok {
			t.Errorf("%+v read as %q %q %v, want %q %q %v", tc.status, state, problems, ok, tc.state, tc.problems, tc.ok)
		}
	}
}

// TestUnresolvedMessages: one message per dnsName of the object's rules
// (by esv1.DNSNameKey), its nodes sorted and bounded, the names bounded;
// names no rule has are left out; none of them counts as a problem.
func TestUnresolvedMessages(t *testing.T) {
	rule := func(name string) esv1.EgressFirewallRule {
		return esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: name}}
	}
	fw := firewallObject("default", 1, "100", rule("A.example."), rule("b.example"))
	got := unresolvedMessages(fw, map[string][]string{
		"n5": {"a.example"}, "n1": {"a.example", "gone.example"}, "n3": {"a.example", "b.example"}, "n2": {"a.example"}, "n4": {"a.example"}})
	want := []string{"n1, n2, n3 and 2 more: dnsName a.example is not resolved yet", "n3: dnsName b.example is not resolved yet"}
	if !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
	if got := unresolvedMessages(fw, nil); got != nil {
		t.Errorf("no node: %q", got)
	}

	var rules []esv1.EgressFirewallRule
	var names []string
	for i := range firewallStatusMessages + 3 {
		name := fmt.Sprintf("n%02d.example", i)
		rules, names = append(rules, rule(name)), append(names, name)
	}
	many := unresolvedMessages(firewallObject("default", 1, "100", rules...), map[string][]string{"node": names})
	if len(many) != firewallStatusMessages+1 || many[len(many)-1] != "and 3 more dnsNames are not resolved yet" {
		t.Errorf("%d messages, the last %q", len(many), many[len(many)-1])
	}

	// In a status, beside a problem: the problem alone is reported.
	v := evaluateFirewall(fw, etcdRevision("100"), watermarks("n1", "100"), nil)
	v.nodeNotes = map[string][]string{"n1": {"a.example"}}
	var api firewallAPI
	written := fw.DeepCopy()
	written.Status = firewallStatus(fw, v)
	if state, problems, ok := api.reported(written); !ok || state != reasons.Applied || problems != "" {
		t.Errorf("reported as %s %q (ours: %v), want Applied and no problem", state, problems, ok)
	}
	if written.Status.Status != "EgressFirewall Rules applied" || !slices.Equal(written.Status.Messages,
		[]string{"Applied on 1/1 nodes", "n1: dnsName a.example is not resolved yet"}) {
		t.Errorf("status %q %q", written.Status.Status, written.Status.Messages)
	}
}
