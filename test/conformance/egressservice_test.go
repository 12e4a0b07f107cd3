// Package conformance checks that the REST surfaces of EgressService,
// EgressQoS, EgressFirewall and EgressIP served from deploy/crds/ by a real
// kube-apiserver behave as the API reference (the seeds) documents, endpoint
// by endpoint, including the validation this project adds (CEL rules). This
// file has EgressService's tests and the helpers; egressqos_test.go has
// EgressQoS's, egressfirewall_test.go EgressFirewall's and egressip_test.go
// EgressIP's.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
)

var cluster *kubetest.Cluster

// One API server for the package; every test works in namespaces of its own.
func TestMain(m *testing.M) {
	var err error
	cluster, err = kubetest.Launch()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

const basePath = "/apis/k8s.ovn.org/v1"

// api sends raw requests, so that tests see the status codes and headers the
// seeds document, not what a typed client makes of them.
type api struct {
	t      *testing.T
	client *http.Client
	url    string
	token  string
}

type response struct {
	code     int
	body     []byte
	warnings []string
}

func newAPI(t *testing.T) *api {
	cfg := cluster.Config(kubetest.Admin)
	httpClient, err := rest.HTTPClientFor(&rest.Config{Host: cfg.Host, TLSClientConfig: cfg.TLSClientConfig})
	if err != nil {
		t.Fatal(err)
	}
	return &api{t: t, client: httpClient, url: cfg.Host, token: kubetest.Admin.Token}
}

func (a *api) do(method, path, contentType, body string) response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return response{code: resp.StatusCode, body: data, warnings: resp.Header.Values("Warning")}
}

// expect fails the test unless the response has the given code.
func (r response) expect(t *testing.T, code int, what string) response {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d, want %d: %s", what, r.code, code, r.body)
	}
	return r
}

// message is the text a client shows: a Status's message, else the body.
func (r response) message() string {
	var status metav1.Status
	if json.Unmarshal(r.body, &status) == nil && status.Message != "" {
		return status.Message
	}
	return string(r.body)
}

// decode reads a response body as a T.
func decode[T any](t *testing.T, r response) *T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %T: %v: %s", v, err, r.body)
	}
	return &v
}

func (r response) object(t *testing.T) *esv1.EgressService {
	t.Helper()
	return decode[esv1.EgressService](t, r)
}

// names lists a list response's items as namespace/name, sorted, whatever
// their kind.
func (r response) names(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, item := range decode[metav1.PartialObjectMetadataList](t, r).Items {
		out = append(out, item.Namespace+"/"+item.Name)
	}
	slices.Sort(out)
	return out
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	ns, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "conf-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// collectionOf is the path of a namespace's objects of a resource.
func collectionOf(resource, ns string) string { return basePath + "/namespaces/" + ns + "/" + resource }

func collection(ns string) string { return collectionOf("egressservices", ns) }
func item(ns, name string) string { return collection(ns) + "/" + name }

func manifest(name, spec string) string { return manifestOf("EgressService", name, spec) }

// replacement is a PUT body for the object at its current resourceVersion.
func (a *api) replacement(ns, name, spec string) string {
	a.t.Helper()
	return a.replacementOf("egressservices", "EgressService", ns, name, spec)
}

// awaitCached waits for an informer factory's caches (waitForSync, the
// factory's WaitForCacheSync), then until get finds the object in its
// lister (an event may still be on its way), and returns it with get's
// last error.
func awaitCached[T any](ctx context.Context, t *testing.T, waitForSync func(<-chan struct{}) map[reflect.Type]bool,
	get func() (*T, error)) (*T, error) {
	t.Helper()
	for _, synced := range waitForSync(ctx.Done()) {
		if !synced {
			t.Fatal("informer did not sync")
		}
	}
	for {
		obj, err := get()
		if err == nil || ctx.Err() != nil {
			return obj, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// manifestOf is a create body for an object of kind (of this API group)
// named name with spec.
func manifestOf(kind, name, spec string) string {
	return manifestIn("k8s.ovn.org/v1", kind, name, spec)
}

// manifestIn is a create body for an object of apiVersion and kind named
// name with spec.
func manifestIn(apiVersion, kind, name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q},"spec":%s}`, apiVersion, kind, name, spec)
}

// replacementOf is a PUT body for namespace ns's object name of resource
// (kind) with spec, at the object's current resourceVersion.
func (a *api) replacementOf(resource, kind, ns, name, spec string) string {
	a.t.Helper()
	got := a.do("GET", collectionOf(resource, ns)+"/"+name, "", "").expect(a.t, http.StatusOK, "get for put")
	rv := decode[metav1.PartialObjectMetadata](a.t, got).ResourceVersion
	return fmt.Sprintf(`{"apiVersion":"k8s.ovn.org/v1","kind":%q,"metadata":{"name":%q,"resourceVersion":%q},"spec":%s}`, kind, name, rv, spec)
}

const jsonType = "application/json"

func TestCreateGetList(t *testing.T) {
	a := newAPI(t)
	nsA, nsB := namespace(t), namespace(t)

	created := a.do("POST", collection(nsA), jsonType,
		manifest("web", `{"sourceIPBy":"LoadBalancerIP","nodeSelector":{"matchLabels":{"zone":"a"}},"network":"100"}`)).
		expect(t, http.StatusCreated, "create").object(t)
	if created.Spec.SourceIPBy != esv1.SourceIPByLoadBalancerIP || created.Spec.Network != "100" ||
		created.Spec.NodeSelector.MatchLabels["zone"] != "a" || created.UID == "" {
		t.Fatalf("create returned %+v", created)
	}
	a.do("POST", collection(nsB), jsonType, manifest("db", `{"sourceIPBy":"Network","network":"blue"}`)).
		expect(t, http.StatusCreated, "create in second namespace")

	got := a.do("GET", item(nsA, "web"), "", "").expect(t, http.StatusOK, "get").object(t)
	if got.UID != created.UID || got.Spec.Network != "100" {
		t.Fatalf("get returned %+v", got)
	}
	a.do("GET", item(nsA, "nope"), "", "").expect(t, http.StatusNotFound, "get missing")

	all := a.do("GET", basePath+"/egressservices", "", "").expect(t, http.StatusOK, "list all").names(t)
	for _, want := range []string{nsA + "/web", nsB + "/db"} {
		if !slices.Contains(all, want) {
			t.Errorf("cluster-wide list %v lacks %s", all, want)
		}
	}
	if inA := a.do("GET", collection(nsA), "", "").expect(t, http.StatusOK, "list one namespace").names(t); !slices.Equal(inA, []string{nsA + "/web"}) {
		t.Errorf("list of %s = %v", nsA, inA)
	}
}

func TestDryRunPersistsNothing(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	dry := a.do("POST", collection(ns)+"?dryRun=All", jsonType, manifest("dry", `{"network":"7"}`)).
		expect(t, http.StatusCreated, "dry-run create").object(t)
	if dry.Spec.Network != "7" {
		t.Fatalf("dry-run create returned %+v", dry)
	}
	a.do("GET", item(ns, "dry"), "", "").expect(t, http.StatusNotFound, "get after dry-run create")

	a.do("POST", collection(ns), jsonType, manifest("real", `{"network":"7"}`)).expect(t, http.StatusCreated, "create")
	a.do("PATCH", item(ns, "real")+"?dryRun=All", "application/merge-patch+json", `{"spec":{"network":"8"}}`).
		expect(t, http.StatusOK, "dry-run patch")
	a.do("PUT", item(ns, "real")+"?dryRun=All", jsonType, a.replacement(ns, "real", `{"network":"9"}`)).
		expect(t, http.StatusOK, "dry-run put")
	a.do("DELETE", item(ns, "real")+"?dryRun=All", "", "").expect(t, http.StatusOK, "dry-run delete")
	if got := a.do("GET", item(ns, "real"), "", "").expect(t, http.StatusOK, "get").object(t); got.Spec.Network != "7" {
		t.Fatalf("dry-run requests changed the object: network %q", got.Spec.Network)
	}
	// "An invalid or unrecognized dryRun directive will result in an error
	// response and no further processing of the request."
	bogus := a.do("POST", collection(ns)+"?dryRun=Bogus", jsonType, manifest("bogus", `{}`)).
		expect(t, http.StatusUnprocessableEntity, "unknown dryRun directive")
	if !strings.Contains(bogus.message(), `supported values: "All"`) {
		t.Errorf("unknown dryRun directive: %q", bogus.message())
	}
	a.do("GET", item(ns, "bogus"), "", "").expect(t, http.StatusNotFound, "get after a bad dryRun")
}

func TestUpdateAndPatches(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", collection(ns), jsonType, manifest("svc", `{"sourceIPBy":"LoadBalancerIP"}`)).expect(t, http.StatusCreated, "create")

	put := a.do("PUT", item(ns, "svc"), jsonType, a.replacement(ns, "svc", `{"sourceIPBy":"LoadBalancerIP","network":"10"}`)).
		expect(t, http.StatusOK, "put").object(t)
	if put.Spec.Network != "10" {
		t.Fatalf("put: network %q", put.Spec.Network)
	}
	merge := a.do("PATCH", item(ns, "svc"), "application/merge-patch+json", `{"spec":{"network":"11"}}`).
		expect(t, http.StatusOK, "merge patch").object(t)
	if merge.Spec.Network != "11" || merge.Spec.SourceIPBy != esv1.SourceIPByLoadBalancerIP {
		t.Fatalf("merge patch: %+v", merge.Spec)
	}
	jsonPatch := a.do("PATCH", item(ns, "svc"), "application/json-patch+json",
		`[{"op":"replace","path":"/spec/network","value":"12"},{"op":"add","path":"/spec/nodeSelector","value":{"matchLabels":{"k":"v"}}}]`).
		expect(t, http.StatusOK, "json patch").object(t)
	if jsonPatch.Spec.Network != "12" || jsonPatch.Spec.NodeSelector.MatchLabels["k"] != "v" {
		t.Fatalf("json patch: %+v", jsonPatch.Spec)
	}
	applied := a.do("PATCH", item(ns, "svc")+"?fieldManager=conformance&force=true", "application/apply-patch+yaml",
		"apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata:\n  name: svc\nspec:\n  sourceIPBy: Network\n  network: \"13\"\n").
		expect(t, http.StatusOK, "server-side apply").object(t)
	if applied.Spec.SourceIPBy != esv1.SourceIPByNetwork || applied.Spec.Network != "13" {
		t.Fatalf("apply: %+v", applied.Spec)
	}
	if !slices.ContainsFunc(applied.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == "conformance" && f.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("apply did not record its field manager: %+v", applied.ManagedFields)
	}
	// Server-side apply also creates.
	a.do("PATCH", item(ns, "fresh")+"?fieldManager=conformance", "application/apply-patch+yaml",
		"apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata:\n  name: fresh\nspec:\n  network: blue\n").
		expect(t, http.StatusCreated, "server-side apply of a new object")
}

func TestDeleteAndDeleteCollection(t *testing.T) {
	a := newAPI(t)
	ns, other := namespace(t), namespace(t)
	for _, name := range []string{"a", "b", "c"} {
		a.do("POST", collection(ns), jsonType, manifest(name, `{}`)).expect(t, http.StatusCreated, "create "+name)
	}
	a.do("POST", collection(other), jsonType, manifest("keep", `{}`)).expect(t, http.StatusCreated, "create keep")

	a.do("DELETE", item(ns, "a"), "", "").expect(t, http.StatusOK, "delete")
	a.do("GET", item(ns, "a"), "", "").expect(t, http.StatusNotFound, "get after delete")
	a.do("DELETE", item(ns, "a"), "", "").expect(t, http.StatusNotFound, "delete again")

	a.do("DELETE", collection(ns), "", "").expect(t, http.StatusOK, "delete collection")
	if left := a.do("GET", collection(ns), "", "").expect(t, http.StatusOK, "list").names(t); len(left) != 0 {
		t.Fatalf("delete collection left %v", left)
	}
	if kept := a.do("GET", collection(other), "", "").expect(t, http.StatusOK, "list other").names(t); !slices.Equal(kept, []string{other + "/keep"}) {
		t.Fatalf("delete collection reached another namespace: %v", kept)
	}
}

// TestStatusSubresource: /status reads and writes only status; the main
// resource writes only spec.
func TestStatusSubresource(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", collection(ns), jsonType, manifest("svc", `{"network":"1"}`)).expect(t, http.StatusCreated, "create")

	current := a.do("GET", item(ns, "svc")+"/status", "", "").expect(t, http.StatusOK, "get status").object(t)
	if current.Spec.Network != "1" {
		t.Fatalf("get status returned %+v", current)
	}
	// PUT /status that also tries to change spec: only status changes.
	current.Status.Host = "node-a"
	current.Spec.Network = "999"
	body, _ := json.Marshal(current)
	afterPut := a.do("PUT", item(ns, "svc")+"/status", jsonType, string(body)).expect(t, http.StatusOK, "put status").object(t)
	if afterPut.Status.Host != "node-a" || afterPut.Spec.Network != "1" {
		t.Fatalf("put status: host %q network %q; want node-a and unchanged 1", afterPut.Status.Host, afterPut.Spec.Network)
	}
	afterPatch := a.do("PATCH", item(ns, "svc")+"/status", "application/merge-patch+json",
		`{"spec":{"network":"998"},"status":{"host":"node-b","conditions":[{"type":"Ready","status":"True","reason":"Assigned","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`).
		expect(t, http.StatusOK, "patch status").object(t)
	if afterPatch.Status.Host != "node-b" || afterPatch.Spec.Network != "1" || len(afterPatch.Status.Conditions) != 1 {
		t.Fatalf("patch status: %+v / %+v", afterPatch.Spec, afterPatch.Status)
	}
	// A spec write through the main resource leaves status alone.
	afterSpec := a.do("PATCH", item(ns, "svc"), "application/merge-patch+json", `{"spec":{"network":"2"},"status":{"host":"intruder"}}`).
		expect(t, http.StatusOK, "patch spec").object(t)
	if afterSpec.Spec.Network != "2" || afterSpec.Status.Host != "node-b" {
		t.Fatalf("spec patch: network %q host %q; want 2 and node-b", afterSpec.Spec.Network, afterSpec.Status.Host)
	}
	// status.host is required.
	r := a.do("PUT", item(ns, "svc")+"/status", jsonType,
		fmt.Sprintf(`{"apiVersion":"k8s.ovn.org/v1","kind":"EgressService","metadata":{"name":"svc","resourceVersion":%q},"status":{}}`, afterSpec.ResourceVersion))
	if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), "status.host: Required value") {
		t.Fatalf("status without host: %d %s; want 422 naming status.host", r.code, r.body)
	}
}

func TestFieldValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	unknown := `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressService","metadata":{"name":"%s"},"spec":{"network":"1","colour":"red"}}`

	strict := a.do("POST", collection(ns)+"?fieldValidation=Strict", jsonType, fmt.Sprintf(unknown, "strict"))
	if strict.code != http.StatusBadRequest || !strings.Contains(strict.message(), `unknown field "spec.colour"`) {
		t.Fatalf("Strict: %d %s; want 400 naming spec.colour", strict.code, strict.body)
	}
	a.do("GET", item(ns, "strict"), "", "").expect(t, http.StatusNotFound, "get after Strict rejection")

	warn := a.do("POST", collection(ns)+"?fieldValidation=Warn", jsonType, fmt.Sprintf(unknown, "warn")).
		expect(t, http.StatusCreated, "Warn")
	// The header is `299 - "unknown field \"spec.colour\""`.
	if !slices.ContainsFunc(warn.warnings, func(w string) bool {
		return strings.HasPrefix(w, "299 ") && strings.Contains(w, "unknown field") && strings.Contains(w, "spec.colour")
	}) {
		t.Fatalf("Warn: warnings %q do not name spec.colour", warn.warnings)
	}
	ignore := a.do("POST", collection(ns)+"?fieldValidation=Ignore", jsonType, fmt.Sprintf(unknown, "ignore")).
		expect(t, http.StatusCreated, "Ignore")
	if len(ignore.warnings) != 0 {
		t.Fatalf("Ignore warned: %q", ignore.warnings)
	}
	// The unknown field is dropped, not stored.
	if got := a.do("GET", item(ns, "warn"), "", "").body; strings.Contains(string(got), "colour") {
		t.Fatalf("unknown field was stored: %s", got)
	}
}

func TestSchemaValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	cases := []struct {
		name, spec, want string
	}{
		{"enum", `{"sourceIPBy":"Foo"}`, `Unsupported value: "Foo": supported values: "LoadBalancerIP", "Network"`},
		{"bad-operator", `{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"Gt","values":["1"]}]}}`,
			"operator must be one of In, NotIn, Exists, DoesNotExist"},
		{"in-without-values", `{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"In"}]}}`,
			"operators In and NotIn need at least one value"},
		{"notin-empty-values", `{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"NotIn","values":[]}]}}`,
			"operators In and NotIn need at least one value"},
		{"exists-with-values", `{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"Exists","values":["x"]}]}}`,
			"operators Exists and DoesNotExist take no values"},
		{"doesnotexist-with-values", `{"nodeSelector":{"matchExpressions":[{"key":"k","operator":"DoesNotExist","values":["x"]}]}}`,
			"operators Exists and DoesNotExist take no values"},
		{"missing-operator", `{"nodeSelector":{"matchExpressions":[{"key":"k"}]}}`, "operator: Required value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", collection(ns), jsonType, manifest(c.name, c.spec))
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %s\nwant 422 with %q", r.code, r.body, c.want)
			}
		})
	}
	// Every valid operator form is accepted, and an empty sourceIPBy too.
	valid := `{"nodeSelector":{"matchLabels":{"a":"b"},"matchExpressions":[
		{"key":"k1","operator":"In","values":["x"]},{"key":"k2","operator":"NotIn","values":["y","z"]},
		{"key":"k3","operator":"Exists"},{"key":"k4","operator":"DoesNotExist","values":[]}]}}`
	a.do("POST", collection(ns), jsonType, manifest("valid", valid)).expect(t, http.StatusCreated, "valid selector")
	// Validation also guards updates.
	a.do("PATCH", item(ns, "valid"), "application/merge-patch+json", `{"spec":{"sourceIPBy":"Foo"}}`).
		expect(t, http.StatusUnprocessableEntity, "patch to an invalid enum value")
}

// TestUnauthenticated covers every kind of the group.
func TestUnauthenticated(t *testing.T) {
	a := newAPI(t)
	for _, resource := range []string{"egressservices", "egressqoses", "egressfirewalls", "egressips", "adminpolicybasedexternalroutes"} {
		a.token = ""
		a.do("GET", basePath+"/"+resource, "", "").expect(t, http.StatusUnauthorized, "anonymous list of "+resource)
		a.token = "not-a-token"
		a.do("GET", basePath+"/"+resource, "", "").expect(t, http.StatusUnauthorized, "list of "+resource+" with a bad token")
	}
}

// table lists path in the Table form kubectl prints, and its columns' names.
func (a *api) table(path string) (metav1.Table, []string) {
	a.t.Helper()
	req, _ := http.NewRequest("GET", a.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		a.t.Fatal(err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	return table, columns
}

// TestPrinterColumns asks for the Table form kubectl prints: beside the
// spec and the host, the Ready condition's status and reason (empty
// before the controller has written them), and only the Ready one's among
// several conditions.
func TestPrinterColumns(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", collection(ns), jsonType, manifest("svc", `{"sourceIPBy":"Network","network":"blue"}`)).expect(t, http.StatusCreated, "create")
	a.do("POST", collection(ns), jsonType, manifest("fresh", `{}`)).expect(t, http.StatusCreated, "create")
	const at = `"lastTransitionTime":"2025-01-01T00:00:00Z"`
	a.do("PATCH", item(ns, "svc")+"/status", "application/merge-patch+json", `{"status":{"host":"ALL","conditions":[`+
		`{"type":"Other","status":"False","reason":"NotThis","message":"m",`+at+`},`+
		`{"type":"Ready","status":"True","reason":"Assigned","message":"m",`+at+`}]}}`).expect(t, http.StatusOK, "status")

	table, columns := a.table(collection(ns))
	if !slices.Equal(columns, []string{"Name", "SourceIPBy", "Host", "Network", "Ready", "Reason", "Age"}) {
		t.Fatalf("columns %v", columns)
	}
	rows := map[string]string{}
	for _, r := range table.Rows {
		rows[fmt.Sprint(r.Cells[0])] = fmt.Sprint(r.Cells[:6])
	}
	want := map[string]string{"svc": "[svc Network ALL blue True Assigned]", "fresh": "[fresh <nil> <nil> <nil> <nil> <nil>]"}
	if !maps.Equal(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
}

// addedModifiedDeleted reads three events from w, which must be ADDED,
// MODIFIED and DELETED of a T in that order, and returns them as
// "TYPE:<what of the object>".
func addedModifiedDeleted[T runtime.Object](ctx context.Context, t *testing.T, w watch.Interface, what func(T) string) []string {
	t.Helper()
	var seen []string
	for _, want := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted} {
		select {
		case ev := <-w.ResultChan():
			obj, ok := ev.Object.(T)
			if !ok {
				t.Fatalf("watch delivered %T: %+v", ev.Object, ev.Object)
			}
			seen = append(seen, string(ev.Type)+":"+what(obj))
			if ev.Type != want {
				t.Fatalf("watch events %v, want %s next", seen, want)
			}
		case <-ctx.Done():
			t.Fatalf("watch delivered only %v", seen)
		}
	}
	return seen
}

// TestWatchAndTypedClient drives the generated clientset: a watch sees
// ADDED, MODIFIED (a status update) and DELETED in order.
func TestWatchAndTypedClient(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin)).K8sV1().EgressServices(ns)

	w, err := client.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	es, err := client.Create(ctx, &esv1.EgressService{
		ObjectMeta: metav1.ObjectMeta{Name: "watched"},
		Spec:       esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPByLoadBalancerIP},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Status.Host = "node-1"
	if _, err := client.UpdateStatus(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := addedModifiedDeleted(ctx, t, w, func(es *esv1.EgressService) string { return es.Status.Host })
	if seen[1] != "MODIFIED:node-1" {
		t.Fatalf("MODIFIED event carried %q", seen[1])
	}
}
