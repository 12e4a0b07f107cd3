package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/test/kubetest"
)

// EgressIP is cluster-scoped: the tests share one space of names. Each test
// takes a prefix of its own (clusterScope), names its objects with it, labels
// them with it, lists and deletes by that label, and removes what is left
// when it ends.

const (
	eipCollection = basePath + "/egressips"
	// eipScopeLabel carries a test's prefix on each object it creates, of
	// any cluster-scoped resource.
	eipScopeLabel = "conformance.egressflow.io/scope"
)

func eipItem(name string) string { return eipCollection + "/" + name }

var clusterScopes atomic.Int32

// clusterScope is a test's own name prefix and label value for a
// cluster-scoped resource; whatever the test leaves carrying the label is
// deleted when it ends.
type clusterScope struct {
	prefix, collection, kind string
}

func newClusterScope(t *testing.T, a *api, collection, kind string) clusterScope {
	t.Helper()
	s := clusterScope{prefix: fmt.Sprintf("scope%d", clusterScopes.Add(1)), collection: collection, kind: kind}
	t.Cleanup(func() {
		a.do("DELETE", collection+"?labelSelector="+s.selector(), "", "")
	})
	return s
}

func newEIPScope(t *testing.T, a *api) clusterScope {
	return newClusterScope(t, a, eipCollection, "EgressIP")
}

// name is the object name n within the scope.
func (s clusterScope) name(n string) string { return s.prefix + "-" + n }

// selector is a labelSelector query value for the scope's objects.
func (s clusterScope) selector() string { return eipScopeLabel + "%3D" + s.prefix }

// manifest is a create body for the scope's object n with spec.
func (s clusterScope) manifest(n, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"k8s.ovn.org/v1","kind":%q,"metadata":{"name":%q,"labels":{%q:%q}},"spec":%s}`,
		s.kind, s.name(n), eipScopeLabel, s.prefix, spec)
}

// list lists the scope's objects' names, sorted.
func (s clusterScope) list(t *testing.T, a *api) []string {
	t.Helper()
	var names []string
	for _, n := range a.do("GET", s.collection+"?labelSelector="+s.selector(), "", "").expect(t, http.StatusOK, "list").names(t) {
		names = append(names, strings.TrimPrefix(n, "/"))
	}
	return names
}

func (r response) egressIP(t *testing.T) *esv1.EgressIP {
	t.Helper()
	return decode[esv1.EgressIP](t, r)
}

// eipReplacement is a PUT body for name at its current resourceVersion,
// with spec and, unless empty, status.
func (a *api) eipReplacement(name, spec, status string) string {
	a.t.Helper()
	got := a.do("GET", eipItem(name), "", "").expect(a.t, http.StatusOK, "get for put")
	meta := decode[metav1.PartialObjectMetadata](a.t, got)
	labels, _ := json.Marshal(meta.Labels)
	body := fmt.Sprintf(`{"apiVersion":"k8s.ovn.org/v1","kind":"EgressIP","metadata":{"name":%q,"resourceVersion":%q,"labels":%s},"spec":%s`,
		name, meta.ResourceVersion, labels, spec)
	if status != "" {
		body += `,"status":` + status
	}
	return body + "}"
}

// everyEgressIPField is a spec that sets every field the API has: IPv4 and
// IPv6 addresses, a namespaceSelector with matchLabels and each operator,
// and a podSelector.
func everyEgressIPField() esv1.EgressIPSpec {
	return esv1.EgressIPSpec{
		EgressIPs: []string{"192.0.2.10", "2001:db8::10"},
		NamespaceSelector: esv1.LabelSelector{
			MatchLabels: map[string]string{"env": "prod"},
			MatchExpressions: []esv1.LabelSelectorRequirement{
				{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "canary", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
				{Key: "team", Operator: metav1.LabelSelectorOpExists},
				{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist},
			},
		},
		PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}},
	}
}

const minimalEgressIP = `{"egressIPs":["192.0.2.1"],"namespaceSelector":{"matchLabels":{"env":"prod"}}}`

// TestEgressIPCreateGetListRoundTrip: POST (201), GET (200, 404), list
// (200); the resource is cluster-scoped, so it has no namespaced path.
func TestEgressIPCreateGetListRoundTrip(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	spec := everyEgressIPField()
	body, err := json.Marshal(esv1.EgressIP{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.ovn.org/v1", Kind: "EgressIP"},
		ObjectMeta: metav1.ObjectMeta{Name: s.name("full"), Labels: map[string]string{eipScopeLabel: s.prefix}},
		Spec:       spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	created := a.do("POST", eipCollection, jsonType, string(body)).expect(t, http.StatusCreated, "create").egressIP(t)
	if created.UID == "" || created.Namespace != "" || !reflect.DeepEqual(created.Spec, spec) {
		t.Fatalf("create returned namespace %q, spec %+v\nwant no namespace, spec %+v", created.Namespace, created.Spec, spec)
	}
	got := a.do("GET", eipItem(s.name("full")), "", "").expect(t, http.StatusOK, "get").egressIP(t)
	if got.UID != created.UID || !reflect.DeepEqual(got.Spec, spec) {
		t.Fatalf("get returned %+v\nwant spec %+v", got.Spec, spec)
	}
	a.do("GET", eipItem(s.name("missing")), "", "").expect(t, http.StatusNotFound, "get missing")

	a.do("POST", eipCollection, jsonType, s.manifest("minimal", minimalEgressIP)).expect(t, http.StatusCreated, "create minimal")
	minimal := a.do("GET", eipItem(s.name("minimal")), "", "").expect(t, http.StatusOK, "get minimal").egressIP(t)
	if len(minimal.Spec.PodSelector.MatchLabels) != 0 || len(minimal.Spec.PodSelector.MatchExpressions) != 0 {
		t.Fatalf("an absent podSelector came back as %+v", minimal.Spec.PodSelector)
	}
	if names := s.list(t, a); !slices.Equal(names, []string{s.name("full"), s.name("minimal")}) {
		t.Fatalf("list = %v", names)
	}
	if all := a.do("GET", eipCollection, "", "").expect(t, http.StatusOK, "list all").names(t); !slices.Contains(all, "/"+s.name("full")) {
		t.Fatalf("unfiltered list %v lacks %s", all, s.name("full"))
	}
	a.do("POST", eipCollection, jsonType, s.manifest("minimal", minimalEgressIP)).expect(t, http.StatusConflict, "create again")
	ns := namespace(t)
	a.do("GET", collectionOf("egressips", ns), "", "").expect(t, http.StatusNotFound, "namespaced list")
	a.do("POST", collectionOf("egressips", ns), jsonType, s.manifest("namespaced", minimalEgressIP)).
		expect(t, http.StatusNotFound, "namespaced create")
}

// TestEgressIPDryRunAndFieldValidation: dryRun=All on POST, PUT, PATCH and
// DELETE answers as the real request would and persists nothing; an
// unknown directive is refused. fieldValidation=Strict refuses unknown and
// duplicate fields, Warn accepts them with a warning, Ignore silently.
func TestEgressIPDryRunAndFieldValidation(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	dry := a.do("POST", eipCollection+"?dryRun=All", jsonType, s.manifest("dry", minimalEgressIP)).
		expect(t, http.StatusCreated, "dry-run create").egressIP(t)
	if !slices.Equal(dry.Spec.EgressIPs, []string{"192.0.2.1"}) {
		t.Fatalf("dry-run create returned %+v", dry.Spec)
	}
	a.do("GET", eipItem(s.name("dry")), "", "").expect(t, http.StatusNotFound, "get after dry-run create")
	bogus := a.do("POST", eipCollection+"?dryRun=Bogus", jsonType, s.manifest("dry", minimalEgressIP))
	if bogus.code != http.StatusUnprocessableEntity || !strings.Contains(bogus.message(), `dryRun: Unsupported value: ["Bogus"]: supported values: "All"`) {
		t.Fatalf("unknown dryRun directive: %d %s", bogus.code, bogus.body)
	}

	a.do("POST", eipCollection, jsonType, s.manifest("kept", minimalEgressIP)).expect(t, http.StatusCreated, "create")
	put := a.do("PUT", eipItem(s.name("kept"))+"?dryRun=All", jsonType,
		a.eipReplacement(s.name("kept"), `{"egressIPs":["198.51.100.1"],"namespaceSelector":{}}`, "")).
		expect(t, http.StatusOK, "dry-run put").egressIP(t)
	patched := a.do("PATCH", eipItem(s.name("kept"))+"?dryRun=All", "application/merge-patch+json", `{"spec":{"egressIPs":["203.0.113.1"]}}`).
		expect(t, http.StatusOK, "dry-run patch").egressIP(t)
	a.do("DELETE", eipItem(s.name("kept"))+"?dryRun=All", "", "").expect(t, http.StatusOK, "dry-run delete")
	if !slices.Equal(put.Spec.EgressIPs, []string{"198.51.100.1"}) || !slices.Equal(patched.Spec.EgressIPs, []string{"203.0.113.1"}) {
		t.Fatalf("dry-run put returned %v, patch %v", put.Spec.EgressIPs, patched.Spec.EgressIPs)
	}
	kept := a.do("GET", eipItem(s.name("kept")), "", "").expect(t, http.StatusOK, "get after dry runs").egressIP(t)
	if !slices.Equal(kept.Spec.EgressIPs, []string{"192.0.2.1"}) {
		t.Fatalf("dry runs changed the object: %+v", kept.Spec)
	}

	unknown := `{"egressIPs":["192.0.2.2"],"namespaceSelector":{},"nodeSelector":{"matchLabels":{"a":"b"}}}`
	strict := a.do("POST", eipCollection+"?fieldValidation=Strict", jsonType, s.manifest("strict", unknown))
	if strict.code != http.StatusBadRequest || !strings.Contains(strict.message(), `unknown field "spec.nodeSelector"`) {
		t.Fatalf("Strict: %d %s; want 400 naming spec.nodeSelector", strict.code, strict.body)
	}
	duplicate := strings.Replace(s.manifest("dup", minimalEgressIP), `"spec":{`, `"spec":{"egressIPs":["192.0.2.3"],`, 1)
	strictDup := a.do("POST", eipCollection+"?fieldValidation=Strict", jsonType, duplicate)
	if strictDup.code != http.StatusBadRequest || !strings.Contains(strictDup.message(), `duplicate field "spec.egressIPs"`) {
		t.Fatalf("Strict duplicate: %d %s; want 400 naming spec.egressIPs", strictDup.code, strictDup.body)
	}
	if names := s.list(t, a); !slices.Equal(names, []string{s.name("kept")}) {
		t.Fatalf("after Strict refusals: %v", names)
	}
	warn := a.do("POST", eipCollection+"?fieldValidation=Warn", jsonType, s.manifest("warn", unknown)).expect(t, http.StatusCreated, "Warn")
	if w := strings.Join(warn.warnings, "\n"); !strings.Contains(w, "unknown field") || !strings.Contains(w, "spec.nodeSelector") {
		t.Fatalf("Warn: warnings %q", warn.warnings)
	}
	ignore := a.do("POST", eipCollection+"?fieldValidation=Ignore", jsonType, s.manifest("ignore", unknown)).expect(t, http.StatusCreated, "Ignore")
	if len(ignore.warnings) != 0 {
		t.Fatalf("Ignore: warnings %q", ignore.warnings)
	}
	if stored := ignore.egressIP(t); !slices.Equal(stored.Spec.EgressIPs, []string{"192.0.2.2"}) {
		t.Fatalf("Ignore stored %+v", stored.Spec)
	}
}

// TestEgressIPUpdateAndPatches: PUT, merge patch, JSON patch and
// server-side apply (update and create), each 200 or 201, and each
// validated.
func TestEgressIPUpdateAndPatches(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	name := s.name("eip")
	a.do("POST", eipCollection, jsonType, s.manifest("eip", minimalEgressIP)).expect(t, http.StatusCreated, "create")

	put := a.do("PUT", eipItem(name), jsonType, a.eipReplacement(name,
		`{"egressIPs":["192.0.2.20","2001:db8::20"],"namespaceSelector":{"matchLabels":{"env":"stage"}},"podSelector":{"matchLabels":{"app":"a"}}}`, "")).
		expect(t, http.StatusOK, "put").egressIP(t)
	if !slices.Equal(put.Spec.EgressIPs, []string{"192.0.2.20", "2001:db8::20"}) || put.Spec.NamespaceSelector.MatchLabels["env"] != "stage" ||
		put.Spec.PodSelector.MatchLabels["app"] != "a" {
		t.Fatalf("put: %+v", put.Spec)
	}
	a.do("PUT", eipItem(name), jsonType, strings.Replace(a.eipReplacement(name, minimalEgressIP, ""), `"resourceVersion":"`, `"resourceVersion":"1`, 1)).
		expect(t, http.StatusConflict, "put at a stale resourceVersion")
	// A merge patch replaces the whole list (it is atomic).
	merge := a.do("PATCH", eipItem(name), "application/merge-patch+json", `{"spec":{"egressIPs":["198.51.100.7"]}}`).
		expect(t, http.StatusOK, "merge patch").egressIP(t)
	if !slices.Equal(merge.Spec.EgressIPs, []string{"198.51.100.7"}) || merge.Spec.PodSelector.MatchLabels["app"] != "a" {
		t.Fatalf("merge patch: %+v", merge.Spec)
	}
	jsonPatch := a.do("PATCH", eipItem(name), "application/json-patch+json",
		`[{"op":"add","path":"/spec/egressIPs/-","value":"2001:db8::7"},{"op":"remove","path":"/spec/podSelector"}]`).
		expect(t, http.StatusOK, "json patch").egressIP(t)
	if !slices.Equal(jsonPatch.Spec.EgressIPs, []string{"198.51.100.7", "2001:db8::7"}) || len(jsonPatch.Spec.PodSelector.MatchLabels) != 0 {
		t.Fatalf("json patch: %+v", jsonPatch.Spec)
	}
	// A JSON patch that would list an address twice is refused.
	dup := a.do("PATCH", eipItem(name), "application/json-patch+json", `[{"op":"add","path":"/spec/egressIPs/-","value":"198.51.100.7"}]`)
	if dup.code != http.StatusUnprocessableEntity || !strings.Contains(dup.message(), "egressIPs must not list an address twice") {
		t.Fatalf("json patch to a duplicate: %d %s", dup.code, dup.body)
	}
	applyBody := func(n, ip string) string {
		return "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata:\n  name: " + s.name(n) + "\n  labels:\n    " + eipScopeLabel + ": " + s.prefix +
			"\nspec:\n  egressIPs:\n  - " + ip + "\n  namespaceSelector:\n    matchExpressions:\n    - key: env\n      operator: Exists\n"
	}
	applied := a.do("PATCH", eipItem(name)+"?fieldManager=conformance&force=true", "application/apply-patch+yaml", applyBody("eip", "203.0.113.9")).
		expect(t, http.StatusOK, "server-side apply").egressIP(t)
	if !slices.Equal(applied.Spec.EgressIPs, []string{"203.0.113.9"}) || len(applied.Spec.NamespaceSelector.MatchExpressions) != 1 {
		t.Fatalf("apply: %+v", applied.Spec)
	}
	a.do("PATCH", eipItem(s.name("applied"))+"?fieldManager=conformance", "application/apply-patch+yaml", applyBody("applied", "203.0.113.10")).
		expect(t, http.StatusCreated, "server-side apply of a new object")
	a.do("PATCH", eipItem(s.name("eip")), "application/merge-patch+json", `{"spec":{"egressIPs":["203.0.113.0/24"]}}`).
		expect(t, http.StatusUnprocessableEntity, "merge patch to a CIDR")
}

// TestEgressIPDeleteAndDeleteCollection: DELETE (200, then 404) and
// DELETE of the collection (200), here narrowed by a label selector.
func TestEgressIPDeleteAndDeleteCollection(t *testing.T) {
	a := newAPI(t)
	s, other := newEIPScope(t, a), newEIPScope(t, a)
	for _, n := range []string{"one", "two", "three"} {
		a.do("POST", eipCollection, jsonType, s.manifest(n, minimalEgressIP)).expect(t, http.StatusCreated, "create "+n)
	}
	a.do("POST", eipCollection, jsonType, other.manifest("kept", minimalEgressIP)).expect(t, http.StatusCreated, "create kept")

	deleted := decode[metav1.Status](t, a.do("DELETE", eipItem(s.name("one")), "", "").expect(t, http.StatusOK, "delete"))
	if deleted.Status != metav1.StatusSuccess || deleted.Details == nil || deleted.Details.Name != s.name("one") {
		t.Fatalf("delete answered %+v", deleted)
	}
	a.do("GET", eipItem(s.name("one")), "", "").expect(t, http.StatusNotFound, "get after delete")
	a.do("DELETE", eipItem(s.name("one")), "", "").expect(t, http.StatusNotFound, "delete again")

	collection := a.do("DELETE", eipCollection+"?labelSelector="+s.selector(), "", "").expect(t, http.StatusOK, "delete collection")
	if removed := collection.names(t); len(removed) != 2 {
		t.Fatalf("delete collection answered with %v; want the two it removed", removed)
	}
	if left := s.list(t, a); len(left) != 0 {
		t.Fatalf("delete collection left %v", left)
	}
	if kept := other.list(t, a); !slices.Equal(kept, []string{other.name("kept")}) {
		t.Fatalf("delete collection reached beyond its selector: %v", kept)
	}
}

// TestEgressIPStatusWrittenWithObject: as in the reference, there is no
// /status subresource; status is stored on create and written by PUT and
// PATCH of the object, next to spec. Its items and conditions are
// validated.
func TestEgressIPStatusWrittenWithObject(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	name := s.name("eip")
	a.do("POST", eipCollection, jsonType, strings.TrimSuffix(s.manifest("eip", `{"egressIPs":["192.0.2.30","2001:db8::30"],"namespaceSelector":{}}`), "}")+
		`,"status":{"items":[{"egressIP":"192.0.2.30","node":"node-1"}]}}`).expect(t, http.StatusCreated, "create with status")
	created := a.do("GET", eipItem(name), "", "").expect(t, http.StatusOK, "get").egressIP(t)
	if !reflect.DeepEqual(created.Status.Items, []esv1.EgressIPStatusItem{{EgressIP: "192.0.2.30", Node: "node-1"}}) {
		t.Fatalf("status stored on create: %+v", created.Status)
	}
	for _, method := range []string{"GET", "PUT", "PATCH"} {
		a.do(method, eipItem(name)+"/status", "application/merge-patch+json", `{"status":{"items":[]}}`).
			expect(t, http.StatusNotFound, method+" /status")
	}

	put := a.do("PUT", eipItem(name), jsonType, a.eipReplacement(name, `{"egressIPs":["192.0.2.30","2001:db8::30"],"namespaceSelector":{}}`,
		`{"items":[{"egressIP":"192.0.2.30","node":"node-1"},{"egressIP":"2001:db8::30","node":"node-2"}]}`)).
		expect(t, http.StatusOK, "put with status").egressIP(t)
	if len(put.Status.Items) != 2 || put.Status.Items[1] != (esv1.EgressIPStatusItem{EgressIP: "2001:db8::30", Node: "node-2"}) {
		t.Fatalf("put status: %+v", put.Status)
	}
	condition := `{"type":"Assigned","status":"False","reason":"NoEligibleNode","message":"no node can hold 2001:db8::30","lastTransitionTime":"2026-01-02T03:04:05Z"}`
	patched := a.do("PATCH", eipItem(name), "application/merge-patch+json",
		`{"status":{"items":[{"egressIP":"192.0.2.30","node":"node-3"}],"conditions":[`+condition+`]}}`).
		expect(t, http.StatusOK, "merge patch of status").egressIP(t)
	if !reflect.DeepEqual(patched.Status.Items, []esv1.EgressIPStatusItem{{EgressIP: "192.0.2.30", Node: "node-3"}}) ||
		len(patched.Status.Conditions) != 1 || patched.Status.Conditions[0].Reason != "NoEligibleNode" ||
		!slices.Equal(patched.Spec.EgressIPs, []string{"192.0.2.30", "2001:db8::30"}) {
		t.Fatalf("merge patch of status: %+v / %+v", patched.Spec, patched.Status)
	}
	cleared := a.do("PATCH", eipItem(name), "application/merge-patch+json", `{"status":{"items":[],"conditions":null}}`).
		expect(t, http.StatusOK, "clear status").egressIP(t)
	if len(cleared.Status.Items) != 0 || len(cleared.Status.Conditions) != 0 {
		t.Fatalf("cleared status: %+v", cleared.Status)
	}
	// The seed marks status.items required; the CRD does not (see
	// EgressIPStatus.Items), so a status without items is accepted.
	a.do("PATCH", eipItem(name), "application/merge-patch+json", `{"status":{"items":null}}`).expect(t, http.StatusOK, "status without items")
	a.do("PATCH", eipItem(name), "application/merge-patch+json", `{"status":null}`).expect(t, http.StatusOK, "no status")

	cases := []struct{ name, status, want string }{
		{"egressIP-not-an-address", `{"items":[{"egressIP":"node-1","node":"node-1"}]}`,
			"status.items[0].egressIP: Invalid value: \"node-1\": status.items[].egressIP must be an IPv4 or IPv6 address"},
		{"egressIP-cidr", `{"items":[{"egressIP":"192.0.2.30/32","node":"node-1"}]}`, "status.items[].egressIP must be an IPv4 or IPv6 address"},
		{"node-empty", `{"items":[{"egressIP":"192.0.2.30","node":""}]}`, "status.items[0].node: Invalid value: \"\": status.items[0].node in body should be at least 1 chars long"},
		{"node-missing", `{"items":[{"egressIP":"192.0.2.30"}]}`, "status.items[0].node: Required value"},
		{"egressIP-missing", `{"items":[{"node":"node-1"}]}`, "status.items[0].egressIP: Required value"},
		{"condition-bad-reason", `{"items":[],"conditions":[{"type":"Assigned","status":"False","reason":"no node","message":"","lastTransitionTime":"2026-01-02T03:04:05Z"}]}`,
			"status.conditions[0].reason: Invalid value: \"no node\""},
		{"condition-bad-status", `{"items":[],"conditions":[{"type":"Assigned","status":"Maybe","reason":"X","message":"","lastTransitionTime":"2026-01-02T03:04:05Z"}]}`,
			`status.conditions[0].status: Unsupported value: "Maybe"`},
		{"condition-twice", `{"items":[],"conditions":[` + condition + `,` + condition + `]}`, `status.conditions[1]: Duplicate value`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("PATCH", eipItem(name), "application/merge-patch+json", `{"status":`+c.status+`}`)
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %s\nwant 422 with %q", r.code, r.body, c.want)
			}
		})
	}
}

// TestEgressIPValidation sends each refusal the CRD makes and checks its
// message; then the edges, accepted.
func TestEgressIPValidation(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	const (
		notAnAddress = "each egressIPs entry must be an IPv4 or IPv6 address such as 192.0.2.10 or 2001:db8::10, not a CIDR"
		twice        = "spec.egressIPs: Invalid value: egressIPs must not list an address twice"
	)
	ips := func(list ...string) string {
		b, _ := json.Marshal(list)
		return `{"egressIPs":` + string(b) + `,"namespaceSelector":{}}`
	}
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			if i%2 == 0 {
				out[i] = fmt.Sprintf("192.0.2.%d", i)
			} else {
				out[i] = fmt.Sprintf("2001:db8::%x", i)
			}
		}
		return out
	}
	selector := func(field, expressions string) string {
		return `{"egressIPs":["192.0.2.1"],"namespaceSelector":{},"` + field + `":{"matchExpressions":` + expressions + `}}`
	}
	cases := []struct{ name, object, want string }{
		{"spec-missing", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressIP","metadata":{"name":"` + s.name("x") + `"}}`, "spec: Required value"},
		{"egressIPs-missing", s.manifest("x", `{"namespaceSelector":{}}`), "spec.egressIPs: Required value"},
		{"egressIPs-empty", s.manifest("x", `{"egressIPs":[],"namespaceSelector":{}}`), "spec.egressIPs: Invalid value: 0: spec.egressIPs in body should have at least 1 items"},
		{"namespaceSelector-missing", s.manifest("x", `{"egressIPs":["192.0.2.1"]}`), "spec.namespaceSelector: Required value"},
		{"address-empty", s.manifest("x", ips("")), "spec.egressIPs[0]: Invalid value: \"\": " + notAnAddress},
		{"address-cidr-v4", s.manifest("x", ips("192.0.2.0/24")), notAnAddress},
		{"address-cidr-host", s.manifest("x", ips("192.0.2.1/32")), notAnAddress},
		{"address-cidr-v6", s.manifest("x", ips("192.0.2.1", "2001:db8::/64")), "spec.egressIPs[1]: Invalid value: \"2001:db8::/64\": " + notAnAddress},
		{"address-name", s.manifest("x", ips("egress.example.com")), notAnAddress},
		{"address-v4-short", s.manifest("x", ips("192.0.2")), notAnAddress},
		{"address-v4-octet", s.manifest("x", ips("192.0.2.256")), notAnAddress},
		{"address-v4-leading-zero", s.manifest("x", ips("192.0.2.010")), notAnAddress},
		{"address-v6-zone", s.manifest("x", ips("fe80::1%eth0")), notAnAddress},
		{"address-v4-mapped-v6", s.manifest("x", ips("::ffff:192.0.2.1")), notAnAddress},
		{"address-spaces", s.manifest("x", ips(" 192.0.2.1")), notAnAddress},
		{"address-too-long", s.manifest("x", ips(strings.Repeat("1", 46))), "spec.egressIPs[0]: Too long: may not be more than 45 bytes"},
		{"duplicate-v4", s.manifest("x", ips("192.0.2.1", "2001:db8::1", "192.0.2.1")), twice},
		{"duplicate-v6-spelled-differently", s.manifest("x", ips("2001:db8::1", "2001:DB8:0:0::1")), twice},
		{"too-many", s.manifest("x", ips(many(esv1.MaxEgressIPAddresses+1)...)), "spec.egressIPs: Too many: 65: must have at most 64 items"},
		{"namespace-bad-operator", s.manifest("x", selector("namespaceSelector", `[{"key":"k","operator":"Gt","values":["1"]}]`)),
			`spec.namespaceSelector.matchExpressions[0].operator: Unsupported value: "Gt": supported values: "In", "NotIn", "Exists", "DoesNotExist"`},
		{"namespace-in-without-values", s.manifest("x", selector("namespaceSelector", `[{"key":"k","operator":"In"}]`)),
			"spec.namespaceSelector.matchExpressions[0]: Invalid value: operators In and NotIn need at least one value"},
		{"namespace-notin-empty-values", s.manifest("x", selector("namespaceSelector", `[{"key":"k","operator":"NotIn","values":[]}]`)),
			"operators In and NotIn need at least one value"},
		{"namespace-exists-with-values", s.manifest("x", selector("namespaceSelector", `[{"key":"k","operator":"Exists","values":["x"]}]`)),
			"spec.namespaceSelector.matchExpressions[0]: Invalid value: operators Exists and DoesNotExist take no values"},
		{"namespace-key-missing", s.manifest("x", selector("namespaceSelector", `[{"operator":"Exists"}]`)),
			"spec.namespaceSelector.matchExpressions[0].key: Required value"},
		{"pod-bad-operator", s.manifest("x", selector("podSelector", `[{"key":"k","operator":"exists"}]`)),
			`spec.podSelector.matchExpressions[0].operator: Unsupported value: "exists"`},
		{"pod-in-without-values", s.manifest("x", selector("podSelector", `[{"key":"k","operator":"In"}]`)),
			"spec.podSelector.matchExpressions[0]: Invalid value: operators In and NotIn need at least one value"},
		{"pod-doesnotexist-with-values", s.manifest("x", selector("podSelector", `[{"key":"k","operator":"DoesNotExist","values":["x"]}]`)),
			"spec.podSelector.matchExpressions[0]: Invalid value: operators Exists and DoesNotExist take no values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", eipCollection, jsonType, c.object)
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %.600s\nwant 422 with %q", r.code, r.body, c.want)
			}
		})
	}
	if left := s.list(t, a); len(left) != 0 {
		t.Fatalf("refused objects were stored: %v", left)
	}

	// The edges are accepted: 64 addresses, IPv4 and IPv6 in one object,
	// non-canonical IPv6 spellings, the unspecified addresses, an empty
	// namespaceSelector (every namespace), the operators with their values.
	accepted := map[string]string{
		"at-limit":  ips(many(esv1.MaxEgressIPAddresses)...),
		"spellings": ips("2001:DB8::A", "2001:db8:0:0:0:0:0:b", "0.0.0.0", "::", "255.255.255.255"),
		"v4-and-v6": ips("192.0.2.1", "2001:db8::1"),
		"every-operator": `{"egressIPs":["192.0.2.1"],"namespaceSelector":{"matchExpressions":[{"key":"a","operator":"In","values":["x"]},` +
			`{"key":"b","operator":"NotIn","values":["y","z"]},{"key":"c","operator":"Exists"},{"key":"d","operator":"DoesNotExist","values":[]}]},` +
			`"podSelector":{"matchLabels":{"app":"x"},"matchExpressions":[{"key":"tier","operator":"Exists"}]}}`,
	}
	for n, spec := range accepted {
		a.do("POST", eipCollection, jsonType, s.manifest(n, spec)).expect(t, http.StatusCreated, "accepted edge "+n)
	}
	// Validation also guards updates.
	for _, patch := range []string{
		`{"spec":{"egressIPs":["192.0.2.1","192.0.2.1"]}}`,
		`{"spec":{"egressIPs":["10.0.0.0/8"]}}`,
		`{"spec":{"egressIPs":[]}}`,
		`{"spec":{"namespaceSelector":null}}`,
		`{"spec":{"podSelector":{"matchExpressions":[{"key":"k","operator":"Lt","values":["1"]}]}}}`,
	} {
		a.do("PATCH", eipItem(s.name("v4-and-v6")), "application/merge-patch+json", patch).
			expect(t, http.StatusUnprocessableEntity, "invalid patch "+patch)
	}
}

// TestEgressIPPrinterColumns: the reference's columns, EgressIPs, Assigned
// Node and Assigned EgressIPs. The API server prints only the first match
// of a [*] path in a custom resource's column, as the reference's types
// note: a second address and its node are not shown.
func TestEgressIPPrinterColumns(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	a.do("POST", eipCollection, jsonType, strings.TrimSuffix(s.manifest("eip", `{"egressIPs":["192.0.2.40","2001:db8::40"],"namespaceSelector":{}}`), "}")+
		`,"status":{"items":[{"egressIP":"192.0.2.40","node":"node-1"},{"egressIP":"2001:db8::40","node":"node-2"}]}}`).
		expect(t, http.StatusCreated, "create")
	table, columns := a.table(eipCollection + "?labelSelector=" + s.selector())
	if !slices.Equal(columns, []string{"Name", "EgressIPs", "Assigned Node", "Assigned EgressIPs"}) {
		t.Fatalf("columns %v", columns)
	}
	want := fmt.Sprint([]any{s.name("eip"), "192.0.2.40", "node-1", "192.0.2.40"})
	if len(table.Rows) != 1 || fmt.Sprint(table.Rows[0].Cells) != want {
		t.Fatalf("rows %+v, want cells %s", table.Rows, want)
	}
}

// TestEgressIPWatchTypedClientAndInformer drives the generated clientset
// (the same K8sV1() as the other kinds, with no namespace), its watch, and
// the generated informer and lister; status is written by Update, as the
// clientset has no UpdateStatus for EgressIP.
func TestEgressIPWatchTypedClientAndInformer(t *testing.T) {
	a := newAPI(t)
	s := newEIPScope(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	clientset := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	client := clientset.K8sV1().EgressIPs()
	scoped := func(o *metav1.ListOptions) { o.LabelSelector = eipScopeLabel + "=" + s.prefix }

	factory := externalversions.NewSharedInformerFactoryWithOptions(clientset, 0, externalversions.WithTweakListOptions(scoped))
	lister := factory.K8s().V1().EgressIPs().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // runs before Shutdown, which waits for the informers to stop

	listOptions := metav1.ListOptions{}
	scoped(&listOptions)
	w, err := client.Watch(ctx, listOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	eip, err := client.Create(ctx, &esv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: s.name("typed"), Labels: map[string]string{eipScopeLabel: s.prefix}},
		Spec:       everyEgressIPField(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := awaitCached(ctx, t, factory.WaitForCacheSync, func() (*esv1.EgressIP, error) { return lister.Get(s.name("typed")) })
	if cached == nil || cached.UID != eip.UID || !reflect.DeepEqual(cached.Spec, everyEgressIPField()) {
		t.Fatalf("lister: %+v, %v", cached, err)
	}
	if all, err := lister.List(labels.Everything()); err != nil || len(all) != 1 {
		t.Fatalf("lister List: %v, %v", all, err)
	}

	eip.Status.Items = []esv1.EgressIPStatusItem{{EgressIP: "192.0.2.10", Node: "node-1"}}
	updated, err := client.Update(ctx, eip, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(updated.Status.Items, eip.Status.Items) {
		t.Fatalf("Update stored status %+v", updated.Status)
	}
	if err := client.Delete(ctx, s.name("typed"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := addedModifiedDeleted(ctx, t, w, func(e *esv1.EgressIP) string {
		var held []string
		for _, item := range e.Status.Items {
			held = append(held, item.EgressIP+"@"+item.Node)
		}
		return strings.Join(held, ",")
	})
	if seen[1] != "MODIFIED:192.0.2.10@node-1" {
		t.Fatalf("MODIFIED event carried %q", seen[1])
	}
}
