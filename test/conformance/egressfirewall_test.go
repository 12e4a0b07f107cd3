package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/test/kubetest"
)

func firewallCollection(ns string) string { return collectionOf("egressfirewalls", ns) }
func firewallItem(ns, name string) string { return firewallCollection(ns) + "/" + name }

func firewallManifest(name, spec string) string { return manifestOf("EgressFirewall", name, spec) }

func (r response) firewall(t *testing.T) *esv1.EgressFirewall {
	t.Helper()
	return decode[esv1.EgressFirewall](t, r)
}

// firewallReplacement is a PUT body for the namespace's default
// EgressFirewall at its current resourceVersion.
func (a *api) firewallReplacement(ns, spec string) string {
	a.t.Helper()
	return a.replacementOf("egressfirewalls", "EgressFirewall", ns, esv1.EgressFirewallName, spec)
}

// everyFirewallField is a spec that sets every field the API has, in every
// form: IPv4 and IPv6 CIDRs, a name, a wildcard name, a nodeSelector with
// matchLabels and each operator, an empty nodeSelector (every node), both
// rule types, each protocol and both ends of the port range.
func everyFirewallField() esv1.EgressFirewallSpec {
	return esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "www.example.com"}},
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{DNSName: "*.example.org."}},
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{CIDRSelector: "203.0.113.0/24"},
			Ports: []esv1.EgressFirewallPort{{Protocol: "TCP", Port: 1}, {Protocol: "UDP", Port: 53}, {Protocol: "SCTP", Port: 65535}}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{NodeSelector: &esv1.LabelSelector{
			MatchLabels: map[string]string{"role": "infra"},
			MatchExpressions: []esv1.LabelSelectorRequirement{
				{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "canary", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
				{Key: "team", Operator: metav1.LabelSelectorOpExists},
				{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist},
			},
		}}},
		{Type: esv1.EgressFirewallRuleAllow, To: esv1.EgressFirewallDestination{NodeSelector: &esv1.LabelSelector{}}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "2001:db8::/32"}},
		{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}},
	}}
}

func TestFirewallCreateGetListRoundTrip(t *testing.T) {
	a := newAPI(t)
	nsA, nsB := namespace(t), namespace(t)
	spec := everyFirewallField()
	body, err := json.Marshal(esv1.EgressFirewall{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.ovn.org/v1", Kind: "EgressFirewall"},
		ObjectMeta: metav1.ObjectMeta{Name: esv1.EgressFirewallName},
		Spec:       spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	created := a.do("POST", firewallCollection(nsA), jsonType, string(body)).expect(t, http.StatusCreated, "create").firewall(t)
	if created.UID == "" || created.Namespace != nsA || !reflect.DeepEqual(created.Spec, spec) {
		t.Fatalf("create returned %+v\nwant spec %+v", created.Spec, spec)
	}
	got := a.do("GET", firewallItem(nsA, "default"), "", "").expect(t, http.StatusOK, "get").firewall(t)
	if got.UID != created.UID || !reflect.DeepEqual(got.Spec, spec) {
		t.Fatalf("get returned %+v\nwant spec %+v", got.Spec, spec)
	}
	// The empty nodeSelector survives as an empty selector, not as none:
	// it selects every node.
	if got.Spec.Egress[4].To.NodeSelector == nil {
		t.Fatal("the empty nodeSelector came back unset")
	}
	a.do("GET", firewallItem(nsB, "default"), "", "").expect(t, http.StatusNotFound, "get missing")

	a.do("POST", firewallCollection(nsB), jsonType, firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"0.0.0.0/0"}}]}`)).
		expect(t, http.StatusCreated, "create in second namespace")
	all := a.do("GET", basePath+"/egressfirewalls", "", "").expect(t, http.StatusOK, "list all").names(t)
	for _, want := range []string{nsA + "/default", nsB + "/default"} {
		if !slices.Contains(all, want) {
			t.Errorf("cluster-wide list %v lacks %s", all, want)
		}
	}
	if inA := a.do("GET", firewallCollection(nsA), "", "").expect(t, http.StatusOK, "list one namespace").names(t); !slices.Equal(inA, []string{nsA + "/default"}) {
		t.Errorf("list of %s = %v", nsA, inA)
	}
	a.do("POST", firewallCollection(nsA), jsonType, firewallManifest("default", `{"egress":[{"type":"Allow","to":{"dnsName":"a.example"}}]}`)).
		expect(t, http.StatusConflict, "a second default")
}

func TestFirewallDryRunAndFieldValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	dry := a.do("POST", firewallCollection(ns)+"?dryRun=All", jsonType, firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"}}]}`)).
		expect(t, http.StatusCreated, "dry-run create").firewall(t)
	if len(dry.Spec.Egress) != 1 || dry.Spec.Egress[0].To.CIDRSelector != "10.0.0.0/8" {
		t.Fatalf("dry-run create returned %+v", dry.Spec)
	}
	a.do("GET", firewallItem(ns, "default"), "", "").expect(t, http.StatusNotFound, "get after dry-run create")

	strict := a.do("POST", firewallCollection(ns)+"?fieldValidation=Strict", jsonType,
		firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"TCP","port":80,"endPort":90}]}]}`))
	if strict.code != http.StatusBadRequest || !strings.Contains(strict.message(), `unknown field "spec.egress[0].ports[0].endPort"`) {
		t.Fatalf("Strict: %d %s; want 400 naming spec.egress[0].ports[0].endPort", strict.code, strict.body)
	}
	a.do("GET", firewallItem(ns, "default"), "", "").expect(t, http.StatusNotFound, "get after Strict rejection")
}

func TestFirewallUpdateAndPatches(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	deny := func(cidr string) esv1.EgressFirewallRule {
		return esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: cidr}}
	}
	a.do("POST", firewallCollection(ns), jsonType, firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"}}]}`)).
		expect(t, http.StatusCreated, "create")

	put := a.do("PUT", firewallItem(ns, "default"), jsonType, a.firewallReplacement(ns, `{"egress":[{"type":"Deny","to":{"cidrSelector":"192.0.2.0/24"}}]}`)).
		expect(t, http.StatusOK, "put").firewall(t)
	if !reflect.DeepEqual(put.Spec.Egress, []esv1.EgressFirewallRule{deny("192.0.2.0/24")}) {
		t.Fatalf("put: %+v", put.Spec)
	}
	// A merge patch replaces the whole list (it is atomic).
	merge := a.do("PATCH", firewallItem(ns, "default"), "application/merge-patch+json",
		`{"spec":{"egress":[{"type":"Allow","to":{"dnsName":"a.example"}},{"type":"Deny","to":{"cidrSelector":"0.0.0.0/0"}}]}}`).
		expect(t, http.StatusOK, "merge patch").firewall(t)
	if len(merge.Spec.Egress) != 2 || merge.Spec.Egress[0].To.DNSName != "a.example" || !reflect.DeepEqual(merge.Spec.Egress[1], deny("0.0.0.0/0")) {
		t.Fatalf("merge patch: %+v", merge.Spec)
	}
	// A JSON patch inserts a rule ahead of the others: order is precedence.
	jsonPatch := a.do("PATCH", firewallItem(ns, "default"), "application/json-patch+json",
		`[{"op":"add","path":"/spec/egress/0","value":{"type":"Allow","to":{"cidrSelector":"198.51.100.0/24"},"ports":[{"protocol":"UDP","port":53}]}}]`).
		expect(t, http.StatusOK, "json patch").firewall(t)
	if len(jsonPatch.Spec.Egress) != 3 || jsonPatch.Spec.Egress[0].Ports[0] != (esv1.EgressFirewallPort{Protocol: "UDP", Port: 53}) ||
		jsonPatch.Spec.Egress[1].To.DNSName != "a.example" {
		t.Fatalf("json patch: %+v", jsonPatch.Spec)
	}
	// A JSON patch that would leave a rule with two destinations is refused.
	a.do("PATCH", firewallItem(ns, "default"), "application/json-patch+json",
		`[{"op":"add","path":"/spec/egress/0/to/dnsName","value":"b.example"}]`).
		expect(t, http.StatusUnprocessableEntity, "json patch to two destinations")
	applied := a.do("PATCH", firewallItem(ns, "default")+"?fieldManager=conformance&force=true", "application/apply-patch+yaml",
		"apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata:\n  name: default\nspec:\n  egress:\n  - type: Deny\n    to:\n      cidrSelector: 192.0.2.0/24\n").
		expect(t, http.StatusOK, "server-side apply").firewall(t)
	if !reflect.DeepEqual(applied.Spec.Egress, []esv1.EgressFirewallRule{deny("192.0.2.0/24")}) {
		t.Fatalf("apply: %+v", applied.Spec)
	}
	fresh := namespace(t)
	a.do("PATCH", firewallItem(fresh, "default")+"?fieldManager=conformance", "application/apply-patch+yaml",
		"apiVersion: k8s.ovn.org/v1\nkind: EgressFirewall\nmetadata:\n  name: default\nspec:\n  egress:\n  - type: Allow\n    to:\n      nodeSelector: {}\n").
		expect(t, http.StatusCreated, "server-side apply of a new object")
}

func TestFirewallDeleteAndDeleteCollection(t *testing.T) {
	a := newAPI(t)
	ns, other, single := namespace(t), namespace(t), namespace(t)
	for _, n := range []string{ns, other, single} {
		a.do("POST", firewallCollection(n), jsonType, firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"0.0.0.0/0"}}]}`)).
			expect(t, http.StatusCreated, "create in "+n)
	}
	a.do("DELETE", firewallItem(single, "default"), "", "").expect(t, http.StatusOK, "delete")
	a.do("GET", firewallItem(single, "default"), "", "").expect(t, http.StatusNotFound, "get after delete")
	a.do("DELETE", firewallItem(single, "default"), "", "").expect(t, http.StatusNotFound, "delete again")

	a.do("DELETE", firewallCollection(ns), "", "").expect(t, http.StatusOK, "delete collection")
	if left := a.do("GET", firewallCollection(ns), "", "").expect(t, http.StatusOK, "list").names(t); len(left) != 0 {
		t.Fatalf("delete collection left %v", left)
	}
	if kept := a.do("GET", firewallCollection(other), "", "").expect(t, http.StatusOK, "list other").names(t); !slices.Equal(kept, []string{other + "/default"}) {
		t.Fatalf("delete collection reached another namespace: %v", kept)
	}
}

// TestFirewallStatusSubresource: /status reads and writes only status (the
// seed's status and messages); the main resource writes only spec.
func TestFirewallStatusSubresource(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	path := firewallItem(ns, "default")
	a.do("POST", firewallCollection(ns), jsonType, firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"}}]}`)).
		expect(t, http.StatusCreated, "create")

	current := a.do("GET", path+"/status", "", "").expect(t, http.StatusOK, "get status").firewall(t)
	if len(current.Spec.Egress) != 1 || current.Spec.Egress[0].To.CIDRSelector != "10.0.0.0/8" {
		t.Fatalf("get status returned %+v", current)
	}
	current.Status.Status = "EgressFirewall Rules applied"
	current.Status.Messages = []string{"node-1: applied"}
	current.Spec.Egress[0].Type = esv1.EgressFirewallRuleAllow
	body, _ := json.Marshal(current)
	afterPut := a.do("PUT", path+"/status", jsonType, string(body)).expect(t, http.StatusOK, "put status").firewall(t)
	if afterPut.Status.Status != "EgressFirewall Rules applied" || !slices.Equal(afterPut.Status.Messages, []string{"node-1: applied"}) ||
		afterPut.Spec.Egress[0].Type != esv1.EgressFirewallRuleDeny {
		t.Fatalf("put status: %+v / %+v; want the status and the rule still Deny", afterPut.Status, afterPut.Spec)
	}
	afterPatch := a.do("PATCH", path+"/status", "application/merge-patch+json",
		`{"spec":{"egress":[]},"status":{"status":"EgressFirewall Rules not applied","messages":["rule 0: dnsName a.example not resolved yet","rule 3: x"]}}`).
		expect(t, http.StatusOK, "patch status").firewall(t)
	if afterPatch.Status.Status != "EgressFirewall Rules not applied" || len(afterPatch.Status.Messages) != 2 || len(afterPatch.Spec.Egress) != 1 {
		t.Fatalf("patch status: %+v / %+v", afterPatch.Spec, afterPatch.Status)
	}
	afterSpec := a.do("PATCH", path, "application/merge-patch+json", `{"spec":{"egress":[{"type":"Allow","to":{"dnsName":"x.example"}}]},"status":{"status":"intruder"}}`).
		expect(t, http.StatusOK, "patch spec").firewall(t)
	if afterSpec.Spec.Egress[0].To.DNSName != "x.example" || afterSpec.Status.Status != "EgressFirewall Rules not applied" {
		t.Fatalf("spec patch: %+v / %+v; want the new rule and the status unchanged", afterSpec.Spec, afterSpec.Status)
	}
}

// TestFirewallValidation sends each refusal the CRD makes and checks its
// message; then the edges of each range and form, accepted.
func TestFirewallValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	const (
		nameMessage = "EgressFirewall must be named default: only the object named default in a namespace counts"
		oneOf       = "exactly one of cidrSelector, dnsName and nodeSelector must be set"
		cidr        = "cidrSelector must be an IPv4 or IPv6 CIDR"
		dns         = "dnsName must be a DNS name such as www.example.com"
	)
	rule := func(to string) string { return `{"egress":[{"type":"Deny","to":` + to + `}]}` }
	dnsRule := func(name string) string { return rule(`{"dnsName":"` + name + `"}`) }
	cases := []struct {
		name, object, want string
	}{
		{"other-name", firewallManifest("fw", rule(`{"cidrSelector":"10.0.0.0/8"}`)), nameMessage},
		{"generated-name", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressFirewall","metadata":{"generateName":"default-"},"spec":` + rule(`{"cidrSelector":"10.0.0.0/8"}`) + `}`, nameMessage},
		{"spec-missing", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressFirewall","metadata":{"name":"default"}}`, "spec: Required value"},
		{"egress-missing", firewallManifest("default", `{}`), "spec.egress: Required value"},
		{"type-missing", firewallManifest("default", `{"egress":[{"to":{"cidrSelector":"10.0.0.0/8"}}]}`), "spec.egress[0].type: Required value"},
		{"type-unknown", firewallManifest("default", `{"egress":[{"type":"Reject","to":{"cidrSelector":"10.0.0.0/8"}}]}`),
			`spec.egress[0].type: Unsupported value: "Reject": supported values: "Allow", "Deny"`},
		{"to-missing", firewallManifest("default", `{"egress":[{"type":"Deny"}]}`), "spec.egress[0].to: Required value"},
		{"to-empty", firewallManifest("default", rule(`{}`)), "spec.egress[0].to: Invalid value: " + oneOf},
		{"cidr-and-dns", firewallManifest("default", rule(`{"cidrSelector":"10.0.0.0/8","dnsName":"a.example"}`)), oneOf},
		{"cidr-and-nodes", firewallManifest("default", rule(`{"cidrSelector":"10.0.0.0/8","nodeSelector":{}}`)), oneOf},
		{"dns-and-nodes", firewallManifest("default", rule(`{"dnsName":"a.example","nodeSelector":{"matchLabels":{"a":"b"}}}`)), oneOf},
		{"all-three", firewallManifest("default", rule(`{"cidrSelector":"10.0.0.0/8","dnsName":"a.example","nodeSelector":{}}`)), oneOf},
		{"cidr-garbage", firewallManifest("default", rule(`{"cidrSelector":"not-a-cidr"}`)), cidr},
		{"cidr-no-prefix", firewallManifest("default", rule(`{"cidrSelector":"10.0.0.1"}`)), cidr},
		{"cidr-prefix-too-long", firewallManifest("default", rule(`{"cidrSelector":"10.0.0.0/33"}`)), cidr},
		{"cidr-v6-prefix-too-long", firewallManifest("default", rule(`{"cidrSelector":"2001:db8::/129"}`)), cidr},
		{"cidr-empty", firewallManifest("default", rule(`{"cidrSelector":""}`)), cidr},
		{"cidr-too-long", firewallManifest("default", rule(`{"cidrSelector":"`+strings.Repeat("1", 65)+`"}`)), "spec.egress[0].to.cidrSelector: Too long: may not be more than 64 bytes"},
		{"dns-empty", firewallManifest("default", dnsRule("")), dns},
		{"dns-wildcard-inside", firewallManifest("default", dnsRule("www.*.example.com")), dns},
		{"dns-wildcard-last", firewallManifest("default", dnsRule("example.*")), dns},
		{"dns-wildcard-partial", firewallManifest("default", dnsRule("w*.example.com")), dns},
		{"dns-wildcard-alone", firewallManifest("default", dnsRule("*")), dns},
		{"dns-two-wildcards", firewallManifest("default", dnsRule("*.*.example.com")), dns},
		{"dns-underscore", firewallManifest("default", dnsRule("a_b.example.com")), dns},
		{"dns-leading-hyphen", firewallManifest("default", dnsRule("-a.example.com")), dns},
		{"dns-trailing-hyphen", firewallManifest("default", dnsRule("a-.example.com")), dns},
		{"dns-empty-label", firewallManifest("default", dnsRule("a..example.com")), dns},
		{"dns-leading-dot", firewallManifest("default", dnsRule(".example.com")), dns},
		{"dns-label-64", firewallManifest("default", dnsRule(strings.Repeat("a", 64)+".example.com")), dns},
		{"dns-space", firewallManifest("default", dnsRule("a b.example.com")), dns},
		{"dns-too-long", firewallManifest("default", dnsRule(strings.Repeat("abcdefghi.", 25)+"abcd")), "spec.egress[0].to.dnsName: Too long: may not be more than 253 bytes"},
		{"dns-ipv4", firewallManifest("default", dnsRule("192.0.2.1")), "dnsName must be a name, not an address: use cidrSelector for an address"},
		{"dns-ipv6", firewallManifest("default", dnsRule("2001:db8::1")), "dnsName must be a name, not an address"},
		{"port-zero", firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"TCP","port":0}]}]}`),
			"spec.egress[0].ports[0].port: Invalid value: 0: spec.egress[0].ports[0].port in body should be greater than or equal to 1"},
		{"port-65536", firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"UDP","port":53},{"protocol":"TCP","port":65536}]}]}`),
			"spec.egress[0].ports[1].port: Invalid value: 65536: spec.egress[0].ports[1].port in body should be less than or equal to 65535"},
		{"port-missing", firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"TCP"}]}]}`),
			"spec.egress[0].ports[0].port: Required value"},
		{"protocol-missing", firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"port":80}]}]}`),
			"spec.egress[0].ports[0].protocol: Required value"},
		{"protocol-lowercase", firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"tcp","port":80}]}]}`),
			`spec.egress[0].ports[0].protocol: Unsupported value: "tcp": supported values: "TCP", "UDP", "SCTP"`},
		{"protocol-icmp", firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/8"},"ports":[{"protocol":"ICMP","port":1}]}]}`),
			`spec.egress[0].ports[0].protocol: Unsupported value: "ICMP"`},
		{"bad-operator", firewallManifest("default", rule(`{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"Gt","values":["1"]}]}}`)),
			`spec.egress[0].to.nodeSelector.matchExpressions[0].operator: Unsupported value: "Gt": supported values: "In", "NotIn", "Exists", "DoesNotExist"`},
		{"in-without-values", firewallManifest("default", rule(`{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"In"}]}}`)),
			"spec.egress[0].to.nodeSelector.matchExpressions[0]: Invalid value: operators In and NotIn need at least one value"},
		{"exists-with-values", firewallManifest("default", rule(`{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"Exists","values":["x"]}]}}`)),
			"spec.egress[0].to.nodeSelector.matchExpressions[0]: Invalid value: operators Exists and DoesNotExist take no values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", firewallCollection(ns), jsonType, c.object)
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %s\nwant 422 with %q", r.code, r.body, c.want)
			}
		})
	}
	if left := a.do("GET", firewallCollection(ns), "", "").expect(t, http.StatusOK, "list").names(t); len(left) != 0 {
		t.Fatalf("refused objects were stored: %v", left)
	}
	// The edges of each form are accepted: host bits in a CIDR (as the
	// reference's net.ParseCIDR allows), /0, /32 and /128; a one-label
	// name, a final dot, digits, inner hyphens, 63-character labels, a
	// 253-character name, a wildcard first label; both port ends.
	long := strings.Repeat(strings.Repeat("a", 63)+".", 3) + strings.Repeat("b", 61) // 253 characters
	valid := `{"egress":[
		{"type":"Allow","to":{"cidrSelector":"10.1.2.3/8"}},
		{"type":"Allow","to":{"cidrSelector":"0.0.0.0/0"}},
		{"type":"Allow","to":{"cidrSelector":"192.0.2.1/32"}},
		{"type":"Allow","to":{"cidrSelector":"2001:db8::1/128"}},
		{"type":"Allow","to":{"cidrSelector":"::/0"}},
		{"type":"Allow","to":{"dnsName":"localhost"}},
		{"type":"Allow","to":{"dnsName":"www.example.com."}},
		{"type":"Allow","to":{"dnsName":"1e100.net"}},
		{"type":"Allow","to":{"dnsName":"a-b--c.x-y.example"}},
		{"type":"Allow","to":{"dnsName":"` + strings.Repeat("z", 63) + `.example"}},
		{"type":"Allow","to":{"dnsName":"` + long + `"}},
		{"type":"Allow","to":{"dnsName":"*.example.com"}},
		{"type":"Allow","to":{"dnsName":"*.com"}},
		{"type":"Deny","to":{"cidrSelector":"0.0.0.0/0"},"ports":[{"protocol":"TCP","port":1},{"protocol":"SCTP","port":65535}]}]}`
	a.do("POST", firewallCollection(ns), jsonType, firewallManifest("default", valid)).expect(t, http.StatusCreated, "valid edges")
	// Validation also guards updates.
	for _, patch := range []string{
		`{"spec":{"egress":[{"type":"Deny","to":{"cidrSelector":"10.0.0.0/99"}}]}}`,
		`{"spec":{"egress":[{"type":"Deny","to":{"dnsName":"a.*.example"}}]}}`,
		`{"spec":{"egress":[{"type":"Deny","to":{}}]}}`,
		`{"spec":{"egress":[{"type":"Deny","to":{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"Lt","values":["1"]}]}}}]}}`,
	} {
		a.do("PATCH", firewallItem(ns, "default"), "application/merge-patch+json", patch).
			expect(t, http.StatusUnprocessableEntity, "invalid patch "+patch)
	}
}

// TestFirewallRuleLimit: a namespace at the reference's limit, 8,000 rules
// (each with a CEL-checked destination, some with ports and node
// selectors), is accepted; one rule more is refused. A nodeSelector keeps
// its bound of 100 matchExpressions.
func TestFirewallRuleLimit(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	rules := func(n int) string {
		r := make([]string, n)
		for i := range r {
			switch i % 4 {
			case 0:
				r[i] = fmt.Sprintf(`{"type":"Allow","to":{"cidrSelector":"10.%d.%d.0/24"}}`, i/256, i%256)
			case 1:
				r[i] = fmt.Sprintf(`{"type":"Deny","to":{"dnsName":"host-%d.example.com"},"ports":[{"protocol":"TCP","port":%d}]}`, i, 1+i%65535)
			case 2:
				r[i] = fmt.Sprintf(`{"type":"Allow","to":{"nodeSelector":{"matchExpressions":[{"key":"k%d","operator":"Exists"}]}}}`, i)
			default:
				r[i] = fmt.Sprintf(`{"type":"Deny","to":{"cidrSelector":"2001:db8:%x::/48"}}`, i)
			}
		}
		return `{"egress":[` + strings.Join(r, ",") + `]}`
	}
	tooMany := a.do("POST", firewallCollection(ns), jsonType, firewallManifest("default", rules(esv1.MaxEgressFirewallRules+1)))
	if tooMany.code != http.StatusUnprocessableEntity || !strings.Contains(tooMany.message(), "spec.egress: Too many: 8001: must have at most 8000 items") {
		t.Fatalf("8001 rules: %d %.300s; want 422 at most 8000 items", tooMany.code, tooMany.body)
	}
	atLimit := a.do("POST", firewallCollection(ns), jsonType, firewallManifest("default", rules(esv1.MaxEgressFirewallRules))).
		expect(t, http.StatusCreated, "8000 rules").firewall(t)
	if len(atLimit.Spec.Egress) != esv1.MaxEgressFirewallRules || atLimit.Spec.Egress[7999].To.CIDRSelector != "2001:db8:1f3f::/48" {
		t.Fatalf("stored %d rules, the last %+v", len(atLimit.Spec.Egress), atLimit.Spec.Egress[len(atLimit.Spec.Egress)-1])
	}
	expressions := func(n int) string {
		e := make([]string, n)
		for i := range e {
			e[i] = fmt.Sprintf(`{"key":"k%d","operator":"Exists"}`, i)
		}
		return `{"egress":[{"type":"Deny","to":{"nodeSelector":{"matchExpressions":[` + strings.Join(e, ",") + `]}}}]}`
	}
	other := namespace(t)
	tooLong := a.do("POST", firewallCollection(other), jsonType, firewallManifest("default", expressions(101)))
	if tooLong.code != http.StatusUnprocessableEntity ||
		!strings.Contains(tooLong.message(), "spec.egress[0].to.nodeSelector.matchExpressions: Too many: 101: must have at most 100 items") {
		t.Fatalf("101 matchExpressions: %d %.400s; want 422 at most 100 items", tooLong.code, tooLong.body)
	}
	a.do("POST", firewallCollection(other), jsonType, firewallManifest("default", expressions(100))).expect(t, http.StatusCreated, "100 matchExpressions")
}

func TestFirewallPrinterColumns(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", firewallCollection(ns), jsonType, firewallManifest("default", `{"egress":[{"type":"Deny","to":{"cidrSelector":"0.0.0.0/0"}}]}`)).
		expect(t, http.StatusCreated, "create")
	a.do("PATCH", firewallItem(ns, "default")+"/status", "application/merge-patch+json", `{"status":{"status":"EgressFirewall Rules applied","messages":["Applied on 3/3 nodes","second"]}}`).
		expect(t, http.StatusOK, "status")
	table, columns := a.table(firewallCollection(ns))
	if !slices.Equal(columns, []string{"Name", "EgressFirewall Status", "Details", "Age"}) {
		t.Fatalf("columns %v", columns)
	}
	if len(table.Rows) != 1 || fmt.Sprintf("%q", table.Rows[0].Cells[:3]) != `["default" "EgressFirewall Rules applied" "Applied on 3/3 nodes"]` {
		t.Fatalf("rows %+v", table.Rows)
	}
}

// TestFirewallWatchTypedClientAndInformer drives the generated clientset
// (the same K8sV1() as the other kinds), its watch, and the generated
// informer and lister.
func TestFirewallWatchTypedClientAndInformer(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	clientset := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	client := clientset.K8sV1().EgressFirewalls(ns)

	factory := externalversions.NewSharedInformerFactoryWithOptions(clientset, 0, externalversions.WithNamespace(ns))
	lister := factory.K8s().V1().EgressFirewalls().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // runs before Shutdown, which waits for the informers to stop

	w, err := client.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fw, err := client.Create(ctx, &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := awaitCached(ctx, t, factory.WaitForCacheSync, func() (*esv1.EgressFirewall, error) { return lister.EgressFirewalls(ns).Get(esv1.EgressFirewallName) })
	if cached == nil || cached.UID != fw.UID {
		t.Fatalf("lister: %+v, %v", cached, err)
	}
	if all, err := lister.List(labels.Everything()); err != nil || len(all) != 1 {
		t.Fatalf("lister List: %v, %v", all, err)
	}

	fw.Status.Status = "applied"
	if _, err := client.UpdateStatus(ctx, fw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, esv1.EgressFirewallName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := addedModifiedDeleted(ctx, t, w, func(f *esv1.EgressFirewall) string { return f.Status.Status })
	if seen[1] != "MODIFIED:applied" {
		t.Fatalf("MODIFIED event carried %q", seen[1])
	}
}
