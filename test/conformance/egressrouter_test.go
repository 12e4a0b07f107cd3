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

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/test/kubetest"
)

// EgressRouter is of another group, network.operator.openshift.io/v1, and
// namespaced: each test works in namespaces of its own.

const routerGroupVersion = "network.operator.openshift.io/v1"

func routerCollection(ns string) string {
	return "/apis/" + routerGroupVersion + "/namespaces/" + ns + "/egressrouters"
}
func routerItem(ns, name string) string { return routerCollection(ns) + "/" + name }

func routerManifest(name, spec string) string {
	return manifestIn(routerGroupVersion, "EgressRouter", name, spec)
}

func (r response) router(t *testing.T) *nov1.EgressRouter {
	t.Helper()
	return decode[nov1.EgressRouter](t, r)
}

// minimalRouter leaves mode and networkInterface to their defaults.
const minimalRouter = `{"addresses":[{"ip":"192.0.2.10/24"}],"redirect":{"fallbackIP":"203.0.113.5"}}`

// everyRouterField sets every field the API has: both families, a gateway
// and a master, rules of each protocol with and without a targetPort, and
// a fallback.
func everyRouterField() nov1.EgressRouterSpec {
	return nov1.EgressRouterSpec{
		Mode: nov1.EgressRouterModeRedirect,
		Redirect: &nov1.RedirectConfig{
			RedirectRules: []nov1.L4RedirectRule{
				{DestinationIP: "203.0.113.10", Port: 80, Protocol: nov1.ProtocolTypeTCP},
				{DestinationIP: "203.0.113.11", Port: 8080, Protocol: nov1.ProtocolTypeTCP, TargetPort: 80},
				{DestinationIP: "2001:db8:ff::53", Port: 53, Protocol: nov1.ProtocolTypeUDP},
				{DestinationIP: "203.0.113.12", Port: 53, Protocol: nov1.ProtocolTypeTCP},
				{DestinationIP: "203.0.113.13", Port: 9999, Protocol: nov1.ProtocolTypeSCTP, TargetPort: 65535},
			},
			FallbackIP: "203.0.113.99",
		},
		NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeVEPA, Master: "eth1"}},
		Addresses: []nov1.EgressRouterAddress{
			{IP: "192.0.2.10/24", Gateway: "192.0.2.1"},
			{IP: "2001:db8::10/64", Gateway: "2001:db8::1"},
		},
	}
}

func TestRouterCreateGetListRoundTrip(t *testing.T) {
	a := newAPI(t)
	ns, other := namespace(t), namespace(t)
	spec := everyRouterField()
	body, err := json.Marshal(nov1.EgressRouter{
		TypeMeta:   metav1.TypeMeta{APIVersion: routerGroupVersion, Kind: "EgressRouter"},
		ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec:       spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	created := a.do("POST", routerCollection(ns), jsonType, string(body)).expect(t, http.StatusCreated, "create").router(t)
	if created.UID == "" || created.Namespace != ns || !reflect.DeepEqual(created.Spec, spec) {
		t.Fatalf("create returned %+v\nwant spec %+v", created, spec)
	}
	got := a.do("GET", routerItem(ns, "all"), "", "").expect(t, http.StatusOK, "get").router(t)
	if got.UID != created.UID || !reflect.DeepEqual(got.Spec, spec) {
		t.Fatalf("get returned %+v\nwant spec %+v", got.Spec, spec)
	}
	a.do("GET", routerItem(ns, "missing"), "", "").expect(t, http.StatusNotFound, "get missing")

	// Mode and the interface default as in OpenShift: Redirect, macvlan
	// in Bridge mode.
	minimal := a.do("POST", routerCollection(other), jsonType, routerManifest("minimal", minimalRouter)).
		expect(t, http.StatusCreated, "create minimal").router(t)
	if minimal.Spec.Mode != nov1.EgressRouterModeRedirect || minimal.Spec.NetworkInterface.Macvlan != (nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}) {
		t.Fatalf("defaults: mode %q, networkInterface %+v; want Redirect and macvlan Bridge", minimal.Spec.Mode, minimal.Spec.NetworkInterface)
	}
	a.do("POST", routerCollection(other), jsonType, routerManifest("minimal", minimalRouter)).expect(t, http.StatusConflict, "create again")
	if names := a.do("GET", routerCollection(ns), "", "").expect(t, http.StatusOK, "list").names(t); !slices.Equal(names, []string{ns + "/all"}) {
		t.Fatalf("list of %s: %v", ns, names)
	}
	all := a.do("GET", "/apis/"+routerGroupVersion+"/egressrouters", "", "").expect(t, http.StatusOK, "list all").names(t)
	if !slices.Contains(all, ns+"/all") || !slices.Contains(all, other+"/minimal") {
		t.Fatalf("list across namespaces: %v", all)
	}
	// Strict field validation names a field the API does not have.
	strict := a.do("POST", routerCollection(ns)+"?fieldValidation=Strict", jsonType,
		routerManifest("strict", `{"addresses":[{"ip":"192.0.2.10/24"}],"redirect":{"fallbackIP":"203.0.113.5","weight":2}}`))
	if strict.code != http.StatusBadRequest || !strings.Contains(strict.message(), `unknown field "spec.redirect.weight"`) {
		t.Fatalf("Strict: %d %s; want 400 naming spec.redirect.weight", strict.code, strict.body)
	}
	// Dry run stores nothing.
	a.do("POST", routerCollection(ns)+"?dryRun=All", jsonType, routerManifest("dry", minimalRouter)).expect(t, http.StatusCreated, "dry-run create")
	a.do("GET", routerItem(ns, "dry"), "", "").expect(t, http.StatusNotFound, "get after dry-run create")

	a.do("DELETE", routerItem(ns, "all"), "", "").expect(t, http.StatusOK, "delete")
	a.do("DELETE", routerCollection(other), "", "").expect(t, http.StatusOK, "delete collection")
	for _, n := range []string{ns, other} {
		if left := a.do("GET", routerCollection(n), "", "").expect(t, http.StatusOK, "list after delete").names(t); len(left) != 0 {
			t.Fatalf("%s after deletes: %v", n, left)
		}
	}
}

// TestRouterValidation: the CRD refuses, with a message naming the field,
// what the redirect cannot serve; nothing refused is stored, and the
// rules guard updates too.
func TestRouterValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	const v4 = `{"ip":"192.0.2.10/24"}`
	withRedirect := func(redirect string) string {
		return `{"addresses":[` + v4 + `],"redirect":` + redirect + `}`
	}
	cases := []struct{ name, spec, want string }{
		{"no-redirect", `{"addresses":[` + v4 + `]}`, "mode Redirect needs redirect"},
		{"empty-redirect", withRedirect(`{}`), "redirect needs a fallbackIP or at least one redirect rule"},
		{"empty-fallback-no-rules", withRedirect(`{"fallbackIP":"","redirectRules":[]}`), "redirect needs a fallbackIP or at least one redirect rule"},
		{"other-mode", `{"mode":"HTTPProxy","addresses":[` + v4 + `],"redirect":{"fallbackIP":"203.0.113.5"}}`, `spec.mode: Unsupported value: "HTTPProxy": supported values: "Redirect"`},
		{"macvlan-mode", `{"networkInterface":{"macvlan":{"mode":"Source"}},"addresses":[` + v4 + `],"redirect":{"fallbackIP":"203.0.113.5"}}`,
			`spec.networkInterface.macvlan.mode: Unsupported value: "Source": supported values: "Bridge", "Private", "VEPA", "Passthru"`},
		{"master-slash", `{"networkInterface":{"macvlan":{"mode":"Bridge","master":"eth0/1"}},"addresses":[` + v4 + `],"redirect":{"fallbackIP":"203.0.113.5"}}`,
			"spec.networkInterface.macvlan.master in body should match"},
		{"master-too-long", `{"networkInterface":{"macvlan":{"mode":"Bridge","master":"` + strings.Repeat("e", 16) + `"}},"addresses":[` + v4 + `],"redirect":{"fallbackIP":"203.0.113.5"}}`,
			"spec.networkInterface.macvlan.master: Too long: may not be more than 15 bytes"},
		{"no-addresses", `{"addresses":[],"redirect":{"fallbackIP":"203.0.113.5"}}`, "spec.addresses: Invalid value: 0: spec.addresses in body should have at least 1 items"},
		{"address-not-cidr", `{"addresses":[{"ip":"192.0.2.10"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "ip must be an address with its prefix length"},
		{"address-garbage", `{"addresses":[{"ip":"router"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "ip must be an address with its prefix length"},
		{"address-prefix-too-long", `{"addresses":[{"ip":"192.0.2.10/33"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "ip must be an address with its prefix length"},
		{"two-v4", `{"addresses":[` + v4 + `,{"ip":"192.0.2.11/24"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "addresses may hold one address of each family, not two of one"},
		{"three", `{"addresses":[` + v4 + `,{"ip":"2001:db8::1/64"},{"ip":"2001:db8::2/64"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "must have at most 2 items"},
		{"gateway-garbage", `{"addresses":[{"ip":"192.0.2.10/24","gateway":"gw"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "gateway must be an IPv4 or IPv6 address"},
		{"gateway-cidr", `{"addresses":[{"ip":"192.0.2.10/24","gateway":"192.0.2.1/24"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "gateway must be an IPv4 or IPv6 address"},
		{"gateway-family", `{"addresses":[{"ip":"192.0.2.10/24","gateway":"2001:db8::1"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "gateway must be of the family of ip"},
		{"gateway-outside", `{"addresses":[{"ip":"192.0.2.10/24","gateway":"192.0.3.1"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "gateway must be an address of ip's subnet"},
		{"gateway-v4-link-local", `{"addresses":[{"ip":"192.0.2.10/24","gateway":"169.254.0.1"}],"redirect":{"fallbackIP":"203.0.113.5"}}`, "gateway must be an address of ip's subnet"},
		{"fallback-garbage", withRedirect(`{"fallbackIP":"example.com"}`), "fallbackIP must be an IPv4 or IPv6 address"},
		{"fallback-family", withRedirect(`{"fallbackIP":"2001:db8::5"}`), "fallbackIP needs an address of its family in addresses"},
		{"destination-garbage", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.0/24","port":80,"protocol":"TCP"}]}`), "destinationIP must be an IPv4 or IPv6 address"},
		{"destination-family", withRedirect(`{"redirectRules":[{"destinationIP":"2001:db8::80","port":80,"protocol":"TCP"}]}`), "each redirect rule's destinationIP needs an address of its family in addresses"},
		{"destination-missing", withRedirect(`{"redirectRules":[{"port":80,"protocol":"TCP"}]}`), "spec.redirect.redirectRules[0].destinationIP: Required value"},
		{"port-zero", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.5","port":0,"protocol":"TCP"}]}`), "spec.redirect.redirectRules[0].port in body should be greater than or equal to 1"},
		{"port-high", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.5","port":65536,"protocol":"TCP"}]}`), "spec.redirect.redirectRules[0].port in body should be less than or equal to 65535"},
		{"target-port-high", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.5","port":80,"targetPort":70000,"protocol":"TCP"}]}`), "spec.redirect.redirectRules[0].targetPort in body should be less than or equal to 65535"},
		{"protocol", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.5","port":80,"protocol":"ICMP"}]}`), `Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"`},
		{"protocol-lowercase", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.5","port":80,"protocol":"tcp"}]}`), `Unsupported value: "tcp"`},
		{"same-port-protocol", withRedirect(`{"redirectRules":[{"destinationIP":"203.0.113.5","port":80,"protocol":"TCP"},{"destinationIP":"203.0.113.6","port":80,"protocol":"TCP"}]}`), "Duplicate value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", routerCollection(ns), jsonType, routerManifest(c.name, c.spec))
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %s\nwant 422 with %q", r.code, r.body, c.want)
			}
			// The agents' and controller's reading finds it too (in an
			// object stored before the CRD refused it).
			if problems := readProblems(t, c.spec); len(problems) == 0 {
				t.Errorf("Read finds no problem in what the CRD refuses: %s", c.spec)
			}
		})
	}
	if left := a.do("GET", routerCollection(ns), "", "").expect(t, http.StatusOK, "list").names(t); len(left) != 0 {
		t.Fatalf("refused objects were stored: %v", left)
	}
	// The edges are accepted: host bits in the CIDR, a /32 and a /128 (with
	// a link-local gateway, outside its subnet), the ends of the port range,
	// one port under two protocols, rules without a fallback, an IPv6-only
	// router.
	for name, spec := range map[string]string{
		"edges": `{"addresses":[{"ip":"192.0.2.10/32"},{"ip":"2001:db8::10/128","gateway":"fe80::1"}],"redirect":{"redirectRules":[` +
			`{"destinationIP":"203.0.113.5","port":1,"protocol":"TCP","targetPort":65535},{"destinationIP":"203.0.113.5","port":65535,"protocol":"UDP","targetPort":1},` +
			`{"destinationIP":"2001:db8:ff::5","port":1,"protocol":"UDP"},{"destinationIP":"203.0.113.6","port":1,"protocol":"SCTP"}]}}`,
		"v6-only": `{"addresses":[{"ip":"2001:db8::10/64"}],"redirect":{"fallbackIP":"2001:db8:ff::5"}}`,
	} {
		a.do("POST", routerCollection(ns), jsonType, routerManifest(name, spec)).expect(t, http.StatusCreated, "valid "+name)
		if problems := readProblems(t, spec); len(problems) != 0 {
			t.Errorf("Read refuses what the CRD accepts (%s): %v", name, problems)
		}
	}
	// Validation also guards updates.
	for _, patch := range []string{
		`{"spec":{"redirect":{"fallbackIP":"203.0.113.5"}}}`,
		`{"spec":{"addresses":[{"ip":"10.0.0.1/24"}]}}`,
		`{"spec":{"redirect":{"redirectRules":[{"destinationIP":"203.0.113.5","port":0,"protocol":"TCP"}]}}}`,
	} {
		a.do("PATCH", routerItem(ns, "v6-only"), "application/merge-patch+json", patch).
			expect(t, http.StatusUnprocessableEntity, "invalid patch "+patch)
	}
}

// TestRouterBounds: redirectRules holds at most MaxEgressRouterRules
// rules, and the API server accepts a router at the bound (its CEL rules
// within the cost budget).
func TestRouterBounds(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	rules := func(n int) string {
		r := make([]string, n)
		for i := range r {
			r[i] = fmt.Sprintf(`{"destinationIP":"203.0.113.%d","port":%d,"protocol":"TCP"}`, i%250+1, 1000+i)
		}
		return `{"addresses":[{"ip":"192.0.2.10/24"}],"redirect":{"redirectRules":[` + strings.Join(r, ",") + `]}}`
	}
	tooMany := a.do("POST", routerCollection(ns), jsonType, routerManifest("over", rules(nov1.MaxEgressRouterRules+1)))
	if want := fmt.Sprintf("must have at most %d items", nov1.MaxEgressRouterRules); tooMany.code != http.StatusUnprocessableEntity || !strings.Contains(tooMany.message(), want) {
		t.Fatalf("%d rules: %d %.300s; want 422 %s", nov1.MaxEgressRouterRules+1, tooMany.code, tooMany.body, want)
	}
	a.do("POST", routerCollection(ns), jsonType, routerManifest("at-bound", rules(nov1.MaxEgressRouterRules))).expect(t, http.StatusCreated, "rules at the bound")
}

// TestRouterStatusSubresource: /status writes only status, the main
// resource only spec; conditions are keyed by type, of the three types.
func TestRouterStatusSubresource(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	path := routerItem(ns, "r")
	a.do("POST", routerCollection(ns), jsonType, routerManifest("r", minimalRouter)).expect(t, http.StatusCreated, "create")

	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	status := nov1.EgressRouterStatus{Holder: "node-a", Conditions: []nov1.EgressRouterStatusCondition{
		{Type: nov1.EgressRouterAvailable, Status: nov1.ConditionTrue, Reason: "Served", Message: "served by node-a", LastTransitionTime: at},
		{Type: nov1.EgressRouterProgressing, Status: nov1.ConditionFalse, LastTransitionTime: at},
		{Type: nov1.EgressRouterDegraded, Status: nov1.ConditionFalse, LastTransitionTime: at},
	}}
	current := a.do("GET", path+"/status", "", "").expect(t, http.StatusOK, "get status").router(t)
	current.Status = status
	current.Spec.Redirect.FallbackIP = "203.0.113.77"
	body, _ := json.Marshal(current)
	afterPut := a.do("PUT", path+"/status", jsonType, string(body)).expect(t, http.StatusOK, "put status").router(t)
	if !equality.Semantic.DeepEqual(afterPut.Status, status) || afterPut.Spec.Redirect.FallbackIP != "203.0.113.5" {
		t.Fatalf("put status: %+v / %+v; want the status and the fallback unchanged", afterPut.Status, afterPut.Spec.Redirect)
	}
	afterSpec := a.do("PATCH", path, "application/merge-patch+json", `{"spec":{"redirect":{"fallbackIP":"203.0.113.6"}},"status":{"holder":"intruder"}}`).
		expect(t, http.StatusOK, "patch spec").router(t)
	if afterSpec.Spec.Redirect.FallbackIP != "203.0.113.6" || afterSpec.Status.Holder != "node-a" {
		t.Fatalf("spec patch: %+v / %+v; want the new fallback and the status unchanged", afterSpec.Spec.Redirect, afterSpec.Status)
	}
	for what, patch := range map[string]string{
		"Duplicate value":            `{"status":{"conditions":[{"type":"Available","status":"True"},{"type":"Available","status":"False"}]}}`,
		`Unsupported value: "Ready"`: `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
		`Unsupported value: "Yes"`:   `{"status":{"conditions":[{"type":"Available","status":"Yes"}]}}`,
	} {
		r := a.do("PATCH", path+"/status", "application/merge-patch+json", patch)
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), what) {
			t.Fatalf("status patch %s: %d %s; want 422 %s", patch, r.code, r.body, what)
		}
	}
}

// TestRouterPrinterColumns: kubectl shows the holder and the Available and
// Degraded conditions' statuses.
func TestRouterPrinterColumns(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", routerCollection(ns), jsonType, routerManifest("r", minimalRouter)).expect(t, http.StatusCreated, "create")
	a.do("PATCH", routerItem(ns, "r")+"/status", "application/merge-patch+json", `{"status":{"holder":"node-b","conditions":[`+
		`{"type":"Progressing","status":"False"},{"type":"Degraded","status":"False"},{"type":"Available","status":"True"}]}}`).
		expect(t, http.StatusOK, "status")
	table, columns := a.table(routerCollection(ns))
	if !slices.Equal(columns, []string{"Name", "Holder", "Available", "Degraded", "Age"}) {
		t.Fatalf("columns %v", columns)
	}
	if len(table.Rows) != 1 || fmt.Sprintf("%q", table.Rows[0].Cells[:4]) != `["r" "node-b" "True" "False"]` {
		t.Fatalf("rows %+v", table.Rows)
	}
}

// TestRouterTypedClientAndInformer drives the generated clientset's
// NetworkOperatorV1(), its watch, and the generated informer and lister.
func TestRouterTypedClientAndInformer(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	clientset := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	client := clientset.NetworkOperatorV1().EgressRouters(ns)

	factory := externalversions.NewSharedInformerFactoryWithOptions(clientset, 0, externalversions.WithNamespace(ns))
	lister := factory.NetworkOperator().V1().EgressRouters().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // runs before Shutdown, which waits for the informers to stop

	w, err := client.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	router, err := client.Create(ctx, &nov1.EgressRouter{ObjectMeta: metav1.ObjectMeta{Name: "typed"}, Spec: everyRouterField()}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := awaitCached(ctx, t, factory.WaitForCacheSync, func() (*nov1.EgressRouter, error) { return lister.EgressRouters(ns).Get("typed") })
	if cached == nil || cached.UID != router.UID {
		t.Fatalf("lister: %+v, %v", cached, err)
	}
	if all, err := lister.List(labels.Everything()); err != nil || len(all) != 1 {
		t.Fatalf("lister List: %v, %v", all, err)
	}
	router.Status = nov1.EgressRouterStatus{Holder: "node-a", Conditions: []nov1.EgressRouterStatusCondition{
		{Type: nov1.EgressRouterAvailable, Status: nov1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	if _, err := client.UpdateStatus(ctx, router, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, "typed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := addedModifiedDeleted(ctx, t, w, func(r *nov1.EgressRouter) string { return r.Status.Holder })
	if seen[1] != "MODIFIED:node-a" {
		t.Fatalf("MODIFIED event carried %q", seen[1])
	}
}

// readProblems reads spec (JSON) as the agents and the controller do.
func readProblems(t *testing.T, spec string) []nov1.Problem {
	t.Helper()
	var s nov1.EgressRouterSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("%s: %v", spec, err)
	}
	_, problems := s.Read()
	return problems
}
