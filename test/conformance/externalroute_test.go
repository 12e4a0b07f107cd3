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

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/test/kubetest"
)

// AdminPolicyBasedExternalRoute is cluster-scoped, like EgressIP: each
// test names and labels its objects within a clusterScope.

const routeCollection = basePath + "/adminpolicybasedexternalroutes"

func routeItem(name string) string { return routeCollection + "/" + name }

func newRouteScope(t *testing.T, a *api) clusterScope {
	return newClusterScope(t, a, routeCollection, "AdminPolicyBasedExternalRoute")
}

func (r response) route(t *testing.T) *esv1.AdminPolicyBasedExternalRoute {
	t.Helper()
	return decode[esv1.AdminPolicyBasedExternalRoute](t, r)
}

const minimalRoute = `{"from":{"namespaceSelector":{"matchLabels":{"gw":"a"}}},"nextHops":{"static":[{"ip":"192.0.2.1"}]}}`

// everyRouteField sets every field the API has: static hops of both
// families with and without BFD, dynamic hops with and without a network
// attachment, and selectors with each operator.
func everyRouteField() esv1.AdminPolicyBasedExternalRouteSpec {
	return esv1.AdminPolicyBasedExternalRouteSpec{
		From: esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{
			MatchLabels: map[string]string{"egress": "gateway"},
			MatchExpressions: []esv1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "canary", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
				{Key: "team", Operator: metav1.LabelSelectorOpExists},
				{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist},
			},
		}},
		NextHops: esv1.ExternalNextHops{
			StaticHops: []esv1.StaticHop{{IP: "192.0.2.1", BFDEnabled: true}, {IP: "2001:db8::1"}},
			DynamicHops: []esv1.DynamicHop{
				{PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "gw"}},
					NamespaceSelector:     esv1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "gateways"}},
					NetworkAttachmentName: "gateways/sriov-external", BFDEnabled: true},
				{PodSelector: esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "gw", Operator: metav1.LabelSelectorOpExists}}},
					NamespaceSelector: esv1.LabelSelector{}},
			},
		},
	}
}

func TestExternalRouteCreateGetListRoundTrip(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	spec := everyRouteField()
	body, err := json.Marshal(esv1.AdminPolicyBasedExternalRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.ovn.org/v1", Kind: "AdminPolicyBasedExternalRoute"},
		ObjectMeta: metav1.ObjectMeta{Name: s.name("all"), Labels: map[string]string{eipScopeLabel: s.prefix}},
		Spec:       spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	created := a.do("POST", routeCollection, jsonType, string(body)).expect(t, http.StatusCreated, "create").route(t)
	if created.UID == "" || created.Namespace != "" || !reflect.DeepEqual(created.Spec, spec) {
		t.Fatalf("create returned %+v\nwant spec %+v", created, spec)
	}
	got := a.do("GET", routeItem(s.name("all")), "", "").expect(t, http.StatusOK, "get").route(t)
	if got.UID != created.UID || !reflect.DeepEqual(got.Spec, spec) {
		t.Fatalf("get returned %+v\nwant spec %+v", got.Spec, spec)
	}
	a.do("GET", routeItem(s.name("missing")), "", "").expect(t, http.StatusNotFound, "get missing")
	a.do("POST", routeCollection, jsonType, s.manifest("second", minimalRoute)).expect(t, http.StatusCreated, "create second")
	if names := s.list(t, a); !slices.Equal(names, []string{s.name("all"), s.name("second")}) {
		t.Fatalf("list: %v", names)
	}
	a.do("POST", routeCollection, jsonType, s.manifest("second", minimalRoute)).expect(t, http.StatusConflict, "create again")
	// It is cluster-scoped: there is no namespaced path.
	a.do("GET", collectionOf("adminpolicybasedexternalroutes", "default"), "", "").expect(t, http.StatusNotFound, "namespaced list")
}

func TestExternalRouteDryRunAndFieldValidation(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	dry := a.do("POST", routeCollection+"?dryRun=All", jsonType, s.manifest("dry", minimalRoute)).
		expect(t, http.StatusCreated, "dry-run create").route(t)
	if len(dry.Spec.NextHops.StaticHops) != 1 || dry.Spec.NextHops.StaticHops[0].IP != "192.0.2.1" {
		t.Fatalf("dry-run create returned %+v", dry.Spec)
	}
	a.do("GET", routeItem(s.name("dry")), "", "").expect(t, http.StatusNotFound, "get after dry-run create")
	strict := a.do("POST", routeCollection+"?fieldValidation=Strict", jsonType,
		s.manifest("strict", `{"from":{"namespaceSelector":{}},"nextHops":{"static":[{"ip":"192.0.2.1","weight":2}]}}`))
	if strict.code != http.StatusBadRequest || !strings.Contains(strict.message(), `unknown field "spec.nextHops.static[0].weight"`) {
		t.Fatalf("Strict: %d %s; want 400 naming spec.nextHops.static[0].weight", strict.code, strict.body)
	}
	a.do("GET", routeItem(s.name("strict")), "", "").expect(t, http.StatusNotFound, "get after Strict rejection")
}

func TestExternalRouteUpdateAndPatches(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	name := s.name("route")
	a.do("POST", routeCollection, jsonType, s.manifest("route", minimalRoute)).expect(t, http.StatusCreated, "create")

	current := a.do("GET", routeItem(name), "", "").expect(t, http.StatusOK, "get").route(t)
	current.Spec.NextHops.StaticHops = []esv1.StaticHop{{IP: "198.51.100.1", BFDEnabled: true}}
	body, _ := json.Marshal(current)
	put := a.do("PUT", routeItem(name), jsonType, string(body)).expect(t, http.StatusOK, "put").route(t)
	if !reflect.DeepEqual(put.Spec.NextHops.StaticHops, []esv1.StaticHop{{IP: "198.51.100.1", BFDEnabled: true}}) {
		t.Fatalf("put: %+v", put.Spec)
	}
	a.do("PUT", routeItem(name), jsonType, string(body)).expect(t, http.StatusConflict, "put at a stale resourceVersion")

	// A merge patch replaces the list of static hops; server-side apply
	// (below) merges it by address, as it is a map keyed by ip.
	merge := a.do("PATCH", routeItem(name), "application/merge-patch+json", `{"spec":{"nextHops":{"static":[{"ip":"198.51.100.2"},{"ip":"2001:db8::2"}]}}}`).
		expect(t, http.StatusOK, "merge patch").route(t)
	if !reflect.DeepEqual(merge.Spec.NextHops.StaticHops, []esv1.StaticHop{{IP: "198.51.100.2"}, {IP: "2001:db8::2"}}) {
		t.Fatalf("merge patch: %+v", merge.Spec)
	}
	jsonPatch := a.do("PATCH", routeItem(name), "application/json-patch+json",
		`[{"op":"add","path":"/spec/nextHops/dynamic","value":[{"podSelector":{"matchLabels":{"app":"gw"}},"namespaceSelector":{}}]},{"op":"remove","path":"/spec/nextHops/static/1"}]`).
		expect(t, http.StatusOK, "json patch").route(t)
	if len(jsonPatch.Spec.NextHops.DynamicHops) != 1 || len(jsonPatch.Spec.NextHops.StaticHops) != 1 || jsonPatch.Spec.NextHops.StaticHops[0].IP != "198.51.100.2" {
		t.Fatalf("json patch: %+v", jsonPatch.Spec)
	}
	// A patch that leaves no hop at all, or lists an address twice, is refused.
	a.do("PATCH", routeItem(name), "application/json-patch+json", `[{"op":"remove","path":"/spec/nextHops/dynamic"},{"op":"remove","path":"/spec/nextHops/static"}]`).
		expect(t, http.StatusUnprocessableEntity, "json patch removing every hop")
	a.do("PATCH", routeItem(name), "application/json-patch+json", `[{"op":"add","path":"/spec/nextHops/static/-","value":{"ip":"198.51.100.002"}}]`).
		expect(t, http.StatusUnprocessableEntity, "json patch adding an invalid address")

	applyBody := func(manager, ip string) string {
		return "apiVersion: k8s.ovn.org/v1\nkind: AdminPolicyBasedExternalRoute\nmetadata:\n  name: " + name + "\n  labels:\n    " + eipScopeLabel + ": " + s.prefix +
			"\nspec:\n  from:\n    namespaceSelector: {}\n  nextHops:\n    static:\n    - ip: " + ip + "\n      bfdEnabled: true\n"
	}
	// Two managers each apply a hop: the list is a map, so both are kept.
	a.do("PATCH", routeItem(name)+"?fieldManager=first&force=true", "application/apply-patch+yaml", applyBody("first", "203.0.113.1")).
		expect(t, http.StatusOK, "server-side apply by a first manager")
	applied := a.do("PATCH", routeItem(name)+"?fieldManager=second&force=true", "application/apply-patch+yaml", applyBody("second", "203.0.113.2")).
		expect(t, http.StatusOK, "server-side apply by a second manager").route(t)
	var ips []string
	for _, h := range applied.Spec.NextHops.StaticHops {
		ips = append(ips, h.IP)
	}
	if !slices.Contains(ips, "203.0.113.1") || !slices.Contains(ips, "203.0.113.2") {
		t.Fatalf("two appliers' hops: %v, want both 203.0.113.1 and 203.0.113.2", ips)
	}
	a.do("PATCH", routeItem(s.name("applied"))+"?fieldManager=conformance", "application/apply-patch+yaml",
		strings.Replace(applyBody("conformance", "203.0.113.3"), "name: "+name, "name: "+s.name("applied"), 1)).
		expect(t, http.StatusCreated, "server-side apply of a new object")
}

func TestExternalRouteDeleteAndDeleteCollection(t *testing.T) {
	a := newAPI(t)
	s, other := newRouteScope(t, a), newRouteScope(t, a)
	for _, n := range []string{"a", "b", "single"} {
		a.do("POST", routeCollection, jsonType, s.manifest(n, minimalRoute)).expect(t, http.StatusCreated, "create "+n)
	}
	a.do("POST", routeCollection, jsonType, other.manifest("kept", minimalRoute)).expect(t, http.StatusCreated, "create in another scope")
	a.do("DELETE", routeItem(s.name("single")), "", "").expect(t, http.StatusOK, "delete")
	a.do("GET", routeItem(s.name("single")), "", "").expect(t, http.StatusNotFound, "get after delete")
	a.do("DELETE", routeItem(s.name("single")), "", "").expect(t, http.StatusNotFound, "delete again")
	a.do("DELETE", routeCollection+"?labelSelector="+s.selector(), "", "").expect(t, http.StatusOK, "delete collection")
	if left := s.list(t, a); len(left) != 0 {
		t.Fatalf("delete collection left %v", left)
	}
	if kept := other.list(t, a); !slices.Equal(kept, []string{other.name("kept")}) {
		t.Fatalf("delete collection reached another scope: %v", kept)
	}
}

// TestExternalRouteStatusSubresource: /status reads and writes only
// status; the main resource writes only spec.
func TestExternalRouteStatusSubresource(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	name := s.name("route")
	a.do("POST", routeCollection, jsonType, s.manifest("route", minimalRoute)).expect(t, http.StatusCreated, "create")

	current := a.do("GET", routeItem(name)+"/status", "", "").expect(t, http.StatusOK, "get status").route(t)
	current.Status = esv1.AdminPolicyBasedRouteStatus{Status: esv1.ExternalRouteApplied, Messages: []string{"node-1: 1 of 1 hops up"},
		LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	current.Spec.NextHops.StaticHops[0].IP = "192.0.2.99"
	body, _ := json.Marshal(current)
	afterPut := a.do("PUT", routeItem(name)+"/status", jsonType, string(body)).expect(t, http.StatusOK, "put status").route(t)
	if afterPut.Status.Status != esv1.ExternalRouteApplied || !slices.Equal(afterPut.Status.Messages, []string{"node-1: 1 of 1 hops up"}) ||
		afterPut.Spec.NextHops.StaticHops[0].IP != "192.0.2.1" {
		t.Fatalf("put status: %+v / %+v; want the status and the spec unchanged", afterPut.Status, afterPut.Spec)
	}
	afterPatch := a.do("PATCH", routeItem(name)+"/status", "application/merge-patch+json",
		`{"spec":{"nextHops":{"static":[{"ip":"192.0.2.98"}]}},"status":{"status":"Fail","messages":["node-2: hop 192.0.2.1 down (BFD)"]}}`).
		expect(t, http.StatusOK, "patch status").route(t)
	if afterPatch.Status.Status != esv1.ExternalRouteNotApplied || afterPatch.Spec.NextHops.StaticHops[0].IP != "192.0.2.1" {
		t.Fatalf("patch status: %+v / %+v", afterPatch.Status, afterPatch.Spec)
	}
	// The main resource ignores status.
	main := a.do("PATCH", routeItem(name), "application/merge-patch+json", `{"status":{"status":"Success"}}`).
		expect(t, http.StatusOK, "patch status through the main resource").route(t)
	if main.Status.Status != esv1.ExternalRouteNotApplied {
		t.Fatalf("the main resource wrote status: %+v", main.Status)
	}
}

func TestExternalRouteValidation(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	const notAnAddress = "ip must be an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1"
	from := `"from":{"namespaceSelector":{}}`
	static := func(ips ...string) string {
		hops := make([]string, len(ips))
		for i, ip := range ips {
			hops[i] = fmt.Sprintf(`{"ip":%q}`, ip)
		}
		return `{` + from + `,"nextHops":{"static":[` + strings.Join(hops, ",") + `]}}`
	}
	dynamic := func(hop string) string { return `{` + from + `,"nextHops":{"dynamic":[` + hop + `]}}` }
	many := make([]string, esv1.MaxExternalRouteHops+1)
	for i := range many {
		many[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	cases := []struct{ name, object, want string }{
		{"spec-missing", `{"apiVersion":"k8s.ovn.org/v1","kind":"AdminPolicyBasedExternalRoute","metadata":{"name":"` + s.name("x") + `"}}`, "spec: Required value"},
		{"from-missing", s.manifest("x", `{"nextHops":{"static":[{"ip":"192.0.2.1"}]}}`), "spec.from: Required value"},
		{"namespaceSelector-missing", s.manifest("x", `{"from":{},"nextHops":{"static":[{"ip":"192.0.2.1"}]}}`), "spec.from.namespaceSelector: Required value"},
		{"nextHops-missing", s.manifest("x", `{`+from+`}`), "spec.nextHops: Required value"},
		{"no-hop", s.manifest("x", `{`+from+`,"nextHops":{}}`), "nextHops needs at least one static or dynamic hop"},
		{"empty-lists", s.manifest("x", `{`+from+`,"nextHops":{"static":[],"dynamic":[]}}`), "nextHops needs at least one static or dynamic hop"},
		{"ip-missing", s.manifest("x", `{`+from+`,"nextHops":{"static":[{"bfdEnabled":true}]}}`), "spec.nextHops.static[0].ip: Required value"},
		{"ip-empty", s.manifest("x", static("")), notAnAddress},
		{"ip-cidr", s.manifest("x", static("192.0.2.0/24")), notAnAddress},
		{"ip-name", s.manifest("x", static("gw.example.com")), notAnAddress},
		{"ip-leading-zero", s.manifest("x", static("192.0.2.010")), notAnAddress},
		{"ip-v6-zone", s.manifest("x", static("fe80::1%eth0")), notAnAddress},
		{"ip-v4-mapped-v6", s.manifest("x", static("::ffff:192.0.2.1")), notAnAddress},
		{"ip-too-long", s.manifest("x", static(strings.Repeat("1", 46))), "Too long: may not be more than 45 bytes"},
		{"ip-twice", s.manifest("x", static("192.0.2.1", "192.0.2.1")), `spec.nextHops.static[1]: Duplicate value: {"ip":"192.0.2.1"}`},
		{"ip-twice-spelled-differently", s.manifest("x", static("2001:db8::1", "2001:DB8:0:0::1")), "static must not list an address twice"},
		{"too-many-static", s.manifest("x", static(many...)), "spec.nextHops.static: Too many: 65: must have at most 64 items"},
		{"dynamic-podSelector-missing", s.manifest("x", dynamic(`{"namespaceSelector":{}}`)), "spec.nextHops.dynamic[0].podSelector: Required value"},
		{"dynamic-namespaceSelector-missing", s.manifest("x", dynamic(`{"podSelector":{}}`)), "spec.nextHops.dynamic[0].namespaceSelector: Required value"},
		{"dynamic-bad-network", s.manifest("x", dynamic(`{"podSelector":{},"namespaceSelector":{},"networkAttachmentName":"Bad_Name"}`)),
			"networkAttachmentName must be a name or namespace/name"},
		{"dynamic-network-three-parts", s.manifest("x", dynamic(`{"podSelector":{},"namespaceSelector":{},"networkAttachmentName":"a/b/c"}`)),
			"networkAttachmentName must be a name or namespace/name"},
		{"from-bad-operator", s.manifest("x", `{"from":{"namespaceSelector":{"matchExpressions":[{"key":"k","operator":"Gt","values":["1"]}]}},"nextHops":{"static":[{"ip":"192.0.2.1"}]}}`),
			`spec.from.namespaceSelector.matchExpressions[0].operator: Unsupported value: "Gt"`},
		{"from-in-without-values", s.manifest("x", `{"from":{"namespaceSelector":{"matchExpressions":[{"key":"k","operator":"In"}]}},"nextHops":{"static":[{"ip":"192.0.2.1"}]}}`),
			"spec.from.namespaceSelector.matchExpressions[0]: Invalid value: operators In and NotIn need at least one value"},
		{"dynamic-exists-with-values", s.manifest("x", dynamic(`{"podSelector":{"matchExpressions":[{"key":"k","operator":"Exists","values":["x"]}]},"namespaceSelector":{}}`)),
			"spec.nextHops.dynamic[0].podSelector.matchExpressions[0]: Invalid value: operators Exists and DoesNotExist take no values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", routeCollection, jsonType, c.object)
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %.600s\nwant 422 with %q", r.code, r.body, c.want)
			}
		})
	}
	// The largest valid lists are accepted.
	maxStatic := make([]string, esv1.MaxExternalRouteHops)
	for i := range maxStatic {
		maxStatic[i] = fmt.Sprintf("2001:db8::%x", i+1)
	}
	a.do("POST", routeCollection, jsonType, s.manifest("max", static(maxStatic...))).expect(t, http.StatusCreated, "64 static hops")
	a.do("POST", routeCollection, jsonType, s.manifest("net", dynamic(`{"podSelector":{},"namespaceSelector":{},"networkAttachmentName":"gw-net.v1"}`))).
		expect(t, http.StatusCreated, "a network attachment by name alone")
}

func TestExternalRoutePrinterColumns(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	a.do("POST", routeCollection, jsonType, s.manifest("route", minimalRoute)).expect(t, http.StatusCreated, "create")
	a.do("PATCH", routeItem(s.name("route"))+"/status", "application/merge-patch+json",
		`{"status":{"status":"Success","lastTransitionTime":"2026-01-02T03:04:05Z"}}`).expect(t, http.StatusOK, "patch status")
	table, columns := a.table(routeCollection + "?labelSelector=" + s.selector())
	if !slices.Equal(columns, []string{"Name", "Status", "Last Update", "Age"}) {
		t.Fatalf("columns %v", columns)
	}
	if len(table.Rows) != 1 || table.Rows[0].Cells[0] != s.name("route") || table.Rows[0].Cells[1] != "Success" {
		t.Fatalf("rows %+v", table.Rows)
	}
}

func TestExternalRouteWatchTypedClientAndInformer(t *testing.T) {
	a := newAPI(t)
	s := newRouteScope(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	clientset := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	client := clientset.K8sV1().AdminPolicyBasedExternalRoutes()
	scoped := func(o *metav1.ListOptions) { o.LabelSelector = eipScopeLabel + "=" + s.prefix }

	factory := externalversions.NewSharedInformerFactoryWithOptions(clientset, 0, externalversions.WithTweakListOptions(scoped))
	lister := factory.K8s().V1().AdminPolicyBasedExternalRoutes().Lister()
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
	route, err := client.Create(ctx, &esv1.AdminPolicyBasedExternalRoute{
		ObjectMeta: metav1.ObjectMeta{Name: s.name("typed"), Labels: map[string]string{eipScopeLabel: s.prefix}},
		Spec:       everyRouteField(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := awaitCached(ctx, t, factory.WaitForCacheSync, func() (*esv1.AdminPolicyBasedExternalRoute, error) {
		return lister.Get(s.name("typed"))
	})
	if cached == nil || cached.UID != route.UID || !reflect.DeepEqual(cached.Spec, everyRouteField()) {
		t.Fatalf("lister: %+v, %v", cached, err)
	}
	route.Status = esv1.AdminPolicyBasedRouteStatus{Status: esv1.ExternalRouteApplied, Messages: []string{"node-1: applied"}}
	if _, err := client.UpdateStatus(ctx, route, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, s.name("typed"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := addedModifiedDeleted(ctx, t, w, func(r *esv1.AdminPolicyBasedExternalRoute) string { return r.Status.Status })
	if seen[1] != "MODIFIED:Success" {
		t.Fatalf("MODIFIED event carried %q", seen[1])
	}
}
