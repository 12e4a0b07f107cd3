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

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/generated/informers/externalversions"
	"github.com/egressflow/egressflow/test/kubetest"
)

func qosCollection(ns string) string { return collectionOf("egressqoses", ns) }
func qosItem(ns, name string) string { return qosCollection(ns) + "/" + name }

func qosManifest(name, spec string) string { return manifestOf("EgressQoS", name, spec) }

func (r response) qos(t *testing.T) *esv1.EgressQoS {
	t.Helper()
	return decode[esv1.EgressQoS](t, r)
}

// qosReplacement is a PUT body for the namespace's default EgressQoS at its
// current resourceVersion.
func (a *api) qosReplacement(ns, spec string) string {
	a.t.Helper()
	return a.replacementOf("egressqoses", "EgressQoS", ns, esv1.EgressQoSName, spec)
}

// everyField is a spec that sets every field the API has, in every form:
// IPv4 and IPv6 CIDRs, none, matchLabels with each operator, no selector,
// and both ends of the DSCP range.
func everyField() esv1.EgressQoSSpec {
	return esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
		{DSCP: 46, DstCIDR: "203.0.113.0/24", PodSelector: esv1.LabelSelector{
			MatchLabels: map[string]string{"app": "voice"},
			MatchExpressions: []esv1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "canary", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
				{Key: "team", Operator: metav1.LabelSelectorOpExists},
				{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist},
			},
		}},
		{DSCP: 63, DstCIDR: "2001:db8::/32"},
		{DSCP: 0},
	}}
}

func TestQoSCreateGetListRoundTrip(t *testing.T) {
	a := newAPI(t)
	nsA, nsB := namespace(t), namespace(t)
	spec := everyField()
	body, err := json.Marshal(esv1.EgressQoS{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.ovn.org/v1", Kind: "EgressQoS"},
		ObjectMeta: metav1.ObjectMeta{Name: esv1.EgressQoSName},
		Spec:       spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	created := a.do("POST", qosCollection(nsA), jsonType, string(body)).expect(t, http.StatusCreated, "create").qos(t)
	if created.UID == "" || created.Namespace != nsA || !reflect.DeepEqual(created.Spec, spec) {
		t.Fatalf("create returned %+v\nwant spec %+v", created, spec)
	}
	got := a.do("GET", qosItem(nsA, "default"), "", "").expect(t, http.StatusOK, "get").qos(t)
	if got.UID != created.UID || !reflect.DeepEqual(got.Spec, spec) {
		t.Fatalf("get returned %+v\nwant spec %+v", got.Spec, spec)
	}
	// The rules keep their order: it is their precedence.
	var order []int32
	for _, rule := range got.Spec.Egress {
		order = append(order, rule.DSCP)
	}
	if !slices.Equal(order, []int32{46, 63, 0}) {
		t.Fatalf("rule order %v", order)
	}
	a.do("GET", qosItem(nsB, "default"), "", "").expect(t, http.StatusNotFound, "get missing")

	a.do("POST", qosCollection(nsB), jsonType, qosManifest("default", `{"egress":[{"dscp":10}]}`)).
		expect(t, http.StatusCreated, "create in second namespace")
	all := a.do("GET", basePath+"/egressqoses", "", "").expect(t, http.StatusOK, "list all").names(t)
	for _, want := range []string{nsA + "/default", nsB + "/default"} {
		if !slices.Contains(all, want) {
			t.Errorf("cluster-wide list %v lacks %s", all, want)
		}
	}
	if inA := a.do("GET", qosCollection(nsA), "", "").expect(t, http.StatusOK, "list one namespace").names(t); !slices.Equal(inA, []string{nsA + "/default"}) {
		t.Errorf("list of %s = %v", nsA, inA)
	}
	// A second object in a namespace can only clash on the name.
	a.do("POST", qosCollection(nsA), jsonType, qosManifest("default", `{"egress":[{"dscp":1}]}`)).
		expect(t, http.StatusConflict, "a second default")
}

func TestQoSDryRunAndFieldValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	dry := a.do("POST", qosCollection(ns)+"?dryRun=All", jsonType, qosManifest("default", `{"egress":[{"dscp":8}]}`)).
		expect(t, http.StatusCreated, "dry-run create").qos(t)
	if len(dry.Spec.Egress) != 1 || dry.Spec.Egress[0].DSCP != 8 {
		t.Fatalf("dry-run create returned %+v", dry.Spec)
	}
	a.do("GET", qosItem(ns, "default"), "", "").expect(t, http.StatusNotFound, "get after dry-run create")

	strict := a.do("POST", qosCollection(ns)+"?fieldValidation=Strict", jsonType,
		qosManifest("default", `{"egress":[{"dscp":8,"port":80}]}`))
	if strict.code != http.StatusBadRequest || !strings.Contains(strict.message(), `unknown field "spec.egress[0].port"`) {
		t.Fatalf("Strict: %d %s; want 400 naming spec.egress[0].port", strict.code, strict.body)
	}
	a.do("GET", qosItem(ns, "default"), "", "").expect(t, http.StatusNotFound, "get after Strict rejection")
}

func TestQoSUpdateAndPatches(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", qosCollection(ns), jsonType, qosManifest("default", `{"egress":[{"dscp":1}]}`)).expect(t, http.StatusCreated, "create")

	put := a.do("PUT", qosItem(ns, "default"), jsonType, a.qosReplacement(ns, `{"egress":[{"dscp":2,"dstCIDR":"10.0.0.0/8"}]}`)).
		expect(t, http.StatusOK, "put").qos(t)
	if !reflect.DeepEqual(put.Spec.Egress, []esv1.EgressQoSRule{{DSCP: 2, DstCIDR: "10.0.0.0/8"}}) {
		t.Fatalf("put: %+v", put.Spec)
	}
	// A merge patch replaces the whole list.
	merge := a.do("PATCH", qosItem(ns, "default"), "application/merge-patch+json", `{"spec":{"egress":[{"dscp":3},{"dscp":4}]}}`).
		expect(t, http.StatusOK, "merge patch").qos(t)
	if len(merge.Spec.Egress) != 2 || merge.Spec.Egress[0].DSCP != 3 || merge.Spec.Egress[1].DSCP != 4 || merge.Spec.Egress[0].DstCIDR != "" {
		t.Fatalf("merge patch: %+v", merge.Spec)
	}
	// A JSON patch inserts a rule ahead of the others.
	jsonPatch := a.do("PATCH", qosItem(ns, "default"), "application/json-patch+json",
		`[{"op":"add","path":"/spec/egress/0","value":{"dscp":5,"podSelector":{"matchLabels":{"k":"v"}}}}]`).
		expect(t, http.StatusOK, "json patch").qos(t)
	if len(jsonPatch.Spec.Egress) != 3 || jsonPatch.Spec.Egress[0].DSCP != 5 || jsonPatch.Spec.Egress[0].PodSelector.MatchLabels["k"] != "v" ||
		jsonPatch.Spec.Egress[1].DSCP != 3 {
		t.Fatalf("json patch: %+v", jsonPatch.Spec)
	}
	applied := a.do("PATCH", qosItem(ns, "default")+"?fieldManager=conformance&force=true", "application/apply-patch+yaml",
		"apiVersion: k8s.ovn.org/v1\nkind: EgressQoS\nmetadata:\n  name: default\nspec:\n  egress:\n  - dscp: 6\n    dstCIDR: 192.0.2.0/24\n").
		expect(t, http.StatusOK, "server-side apply").qos(t)
	if !reflect.DeepEqual(applied.Spec.Egress, []esv1.EgressQoSRule{{DSCP: 6, DstCIDR: "192.0.2.0/24"}}) {
		t.Fatalf("apply: %+v", applied.Spec)
	}
	// Server-side apply also creates.
	fresh := namespace(t)
	a.do("PATCH", qosItem(fresh, "default")+"?fieldManager=conformance", "application/apply-patch+yaml",
		"apiVersion: k8s.ovn.org/v1\nkind: EgressQoS\nmetadata:\n  name: default\nspec:\n  egress:\n  - dscp: 7\n").
		expect(t, http.StatusCreated, "server-side apply of a new object")
}

func TestQoSDeleteAndDeleteCollection(t *testing.T) {
	a := newAPI(t)
	ns, other, single := namespace(t), namespace(t), namespace(t)
	for _, n := range []string{ns, other, single} {
		a.do("POST", qosCollection(n), jsonType, qosManifest("default", `{"egress":[{"dscp":1}]}`)).expect(t, http.StatusCreated, "create in "+n)
	}
	a.do("DELETE", qosItem(single, "default"), "", "").expect(t, http.StatusOK, "delete")
	a.do("GET", qosItem(single, "default"), "", "").expect(t, http.StatusNotFound, "get after delete")
	a.do("DELETE", qosItem(single, "default"), "", "").expect(t, http.StatusNotFound, "delete again")

	a.do("DELETE", qosCollection(ns), "", "").expect(t, http.StatusOK, "delete collection")
	if left := a.do("GET", qosCollection(ns), "", "").expect(t, http.StatusOK, "list").names(t); len(left) != 0 {
		t.Fatalf("delete collection left %v", left)
	}
	if kept := a.do("GET", qosCollection(other), "", "").expect(t, http.StatusOK, "list other").names(t); !slices.Equal(kept, []string{other + "/default"}) {
		t.Fatalf("delete collection reached another namespace: %v", kept)
	}
}

// TestQoSStatusSubresource: /status reads and writes only status; the main
// resource writes only spec.
func TestQoSStatusSubresource(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	path := qosItem(ns, "default")
	a.do("POST", qosCollection(ns), jsonType, qosManifest("default", `{"egress":[{"dscp":1}]}`)).expect(t, http.StatusCreated, "create")

	current := a.do("GET", path+"/status", "", "").expect(t, http.StatusOK, "get status").qos(t)
	if len(current.Spec.Egress) != 1 || current.Spec.Egress[0].DSCP != 1 {
		t.Fatalf("get status returned %+v", current)
	}
	current.Status.Status = "EgressQoS Rules applied"
	current.Spec.Egress[0].DSCP = 50
	body, _ := json.Marshal(current)
	afterPut := a.do("PUT", path+"/status", jsonType, string(body)).expect(t, http.StatusOK, "put status").qos(t)
	if afterPut.Status.Status != "EgressQoS Rules applied" || afterPut.Spec.Egress[0].DSCP != 1 {
		t.Fatalf("put status: %+v / %+v; want the status and dscp 1", afterPut.Status, afterPut.Spec)
	}
	afterPatch := a.do("PATCH", path+"/status", "application/merge-patch+json",
		`{"spec":{"egress":[{"dscp":51}]},"status":{"status":"EgressQoS Rules not applied on 1 node","conditions":[{"type":"Applied","status":"False","reason":"WrongFamily","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`).
		expect(t, http.StatusOK, "patch status").qos(t)
	wantConditions := []metav1.Condition{{Type: "Applied", Status: metav1.ConditionFalse, Reason: "WrongFamily", Message: "m",
		LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}
	if afterPatch.Status.Status != "EgressQoS Rules not applied on 1 node" || afterPatch.Spec.Egress[0].DSCP != 1 ||
		!equality.Semantic.DeepEqual(afterPatch.Status.Conditions, wantConditions) {
		t.Fatalf("patch status: %+v / %+v", afterPatch.Spec, afterPatch.Status)
	}
	afterSpec := a.do("PATCH", path, "application/merge-patch+json", `{"spec":{"egress":[{"dscp":2}]},"status":{"status":"intruder"}}`).
		expect(t, http.StatusOK, "patch spec").qos(t)
	if afterSpec.Spec.Egress[0].DSCP != 2 || afterSpec.Status.Status != "EgressQoS Rules not applied on 1 node" {
		t.Fatalf("spec patch: %+v / %+v; want dscp 2 and the status unchanged", afterSpec.Spec, afterSpec.Status)
	}
	// Conditions are a map keyed by type.
	dup := a.do("PATCH", path+"/status", "application/merge-patch+json",
		`{"status":{"conditions":[{"type":"Applied","status":"True","reason":"A","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"},{"type":"Applied","status":"False","reason":"B","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	if dup.code != http.StatusUnprocessableEntity || !strings.Contains(dup.message(), "Duplicate value") {
		t.Fatalf("two conditions of one type: %d %s; want 422 Duplicate value", dup.code, dup.body)
	}
}

func TestQoSValidation(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	const nameMessage = "EgressQoS must be named default: only the object named default in a namespace counts"
	cases := []struct {
		name, object, want string
	}{
		{"other-name", qosManifest("qos", `{"egress":[{"dscp":1}]}`), nameMessage},
		{"generated-name", `{"apiVersion":"k8s.ovn.org/v1","kind":"EgressQoS","metadata":{"generateName":"default-"},"spec":{"egress":[{"dscp":1}]}}`, nameMessage},
		{"dscp-64", qosManifest("default", `{"egress":[{"dscp":64}]}`), "spec.egress[0].dscp: Invalid value: 64: spec.egress[0].dscp in body should be less than or equal to 63"},
		{"dscp-negative", qosManifest("default", `{"egress":[{"dscp":1},{"dscp":-1}]}`), "spec.egress[1].dscp: Invalid value: -1: spec.egress[1].dscp in body should be greater than or equal to 0"},
		{"dscp-missing", qosManifest("default", `{"egress":[{"dstCIDR":"10.0.0.0/8"}]}`), "spec.egress[0].dscp: Required value"},
		{"egress-missing", qosManifest("default", `{}`), "spec.egress: Required value"},
		{"cidr-garbage", qosManifest("default", `{"egress":[{"dscp":1,"dstCIDR":"not-a-cidr"}]}`), "dstCIDR must be an IPv4 or IPv6 CIDR"},
		{"cidr-no-prefix", qosManifest("default", `{"egress":[{"dscp":1,"dstCIDR":"10.0.0.1"}]}`), "dstCIDR must be an IPv4 or IPv6 CIDR"},
		{"cidr-prefix-too-long", qosManifest("default", `{"egress":[{"dscp":1,"dstCIDR":"10.0.0.0/33"}]}`), "dstCIDR must be an IPv4 or IPv6 CIDR"},
		{"cidr-v6-prefix-too-long", qosManifest("default", `{"egress":[{"dscp":1,"dstCIDR":"2001:db8::/129"}]}`), "dstCIDR must be an IPv4 or IPv6 CIDR"},
		{"cidr-too-long", qosManifest("default", `{"egress":[{"dscp":1,"dstCIDR":"`+strings.Repeat("1", 65)+`"}]}`), "spec.egress[0].dstCIDR: Too long: may not be more than 64 bytes"},
		{"cidr-empty", qosManifest("default", `{"egress":[{"dscp":1,"dstCIDR":""}]}`), "dstCIDR must be an IPv4 or IPv6 CIDR"},
		{"bad-operator", qosManifest("default", `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"k","operator":"Gt","values":["1"]}]}}]}`),
			`spec.egress[0].podSelector.matchExpressions[0].operator: Unsupported value: "Gt": supported values: "In", "NotIn", "Exists", "DoesNotExist"`},
		{"in-without-values", qosManifest("default", `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"k","operator":"In"}]}}]}`),
			"spec.egress[0].podSelector.matchExpressions[0]: Invalid value: operators In and NotIn need at least one value"},
		{"notin-empty-values", qosManifest("default", `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"k","operator":"NotIn","values":[]}]}}]}`),
			"spec.egress[0].podSelector.matchExpressions[0]: Invalid value: operators In and NotIn need at least one value"},
		{"exists-with-values", qosManifest("default", `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"k","operator":"Exists","values":["x"]}]}}]}`),
			"spec.egress[0].podSelector.matchExpressions[0]: Invalid value: operators Exists and DoesNotExist take no values"},
		{"doesnotexist-with-values", qosManifest("default", `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"a","operator":"In","values":["x"]},{"key":"k","operator":"DoesNotExist","values":["x"]}]}}]}`),
			"spec.egress[0].podSelector.matchExpressions[1]: Invalid value: operators Exists and DoesNotExist take no values"},
		{"missing-operator", qosManifest("default", `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"k"}]}}]}`),
			"operator: Required value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", qosCollection(ns), jsonType, c.object)
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), c.want) {
				t.Fatalf("status %d %s\nwant 422 with %q", r.code, r.body, c.want)
			}
		})
	}
	if left := a.do("GET", qosCollection(ns), "", "").expect(t, http.StatusOK, "list").names(t); len(left) != 0 {
		t.Fatalf("refused objects were stored: %v", left)
	}
	// The edges of each range are accepted: host bits in a CIDR (as the
	// reference's net.ParseCIDR allows), /0 and /32, /128, and both ends of
	// the DSCP range.
	valid := `{"egress":[{"dscp":0,"dstCIDR":"10.1.2.3/8"},{"dscp":63,"dstCIDR":"0.0.0.0/0"},{"dscp":1,"dstCIDR":"192.0.2.1/32"},
		{"dscp":2,"dstCIDR":"2001:db8::1/128"},{"dscp":3,"dstCIDR":"::/0"}]}`
	a.do("POST", qosCollection(ns), jsonType, qosManifest("default", valid)).expect(t, http.StatusCreated, "valid edges")
	// Validation also guards updates.
	for _, patch := range []string{
		`{"spec":{"egress":[{"dscp":64}]}}`,
		`{"spec":{"egress":[{"dscp":1,"dstCIDR":"10.0.0.0/99"}]}}`,
		`{"spec":{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[{"key":"k","operator":"Lt","values":["1"]}]}}]}}`,
	} {
		a.do("PATCH", qosItem(ns, "default"), "application/merge-patch+json", patch).
			expect(t, http.StatusUnprocessableEntity, "invalid patch "+patch)
	}
}

// TestQoSBounds: spec.egress holds at most 1000 rules, the most the
// reference's priorities (1000 − index) can order, and a podSelector at most
// 100 matchExpressions; both bounds let the API server accept the CEL rules
// nested in the lists (see LabelSelector).
func TestQoSBounds(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	rules := func(n int) string {
		r := make([]string, n)
		for i := range r {
			r[i] = fmt.Sprintf(`{"dscp":%d}`, i%64)
		}
		return `{"egress":[` + strings.Join(r, ",") + `]}`
	}
	tooMany := a.do("POST", qosCollection(ns), jsonType, qosManifest("default", rules(1001)))
	if tooMany.code != http.StatusUnprocessableEntity || !strings.Contains(tooMany.message(), "must have at most 1000 items") {
		t.Fatalf("1001 rules: %d %.300s; want 422 at most 1000 items", tooMany.code, tooMany.body)
	}
	expressions := func(n int) string {
		e := make([]string, n)
		for i := range e {
			e[i] = fmt.Sprintf(`{"key":"k%d","operator":"Exists"}`, i)
		}
		return `{"egress":[{"dscp":1,"podSelector":{"matchExpressions":[` + strings.Join(e, ",") + `]}}]}`
	}
	tooLong := a.do("POST", qosCollection(ns), jsonType, qosManifest("default", expressions(101)))
	if tooLong.code != http.StatusUnprocessableEntity ||
		!strings.Contains(tooLong.message(), "spec.egress[0].podSelector.matchExpressions: Too many: 101: must have at most 100 items") {
		t.Fatalf("101 matchExpressions: %d %.400s; want 422 at most 100 items", tooLong.code, tooLong.body)
	}
	a.do("POST", qosCollection(ns), jsonType, qosManifest("default", expressions(100))).expect(t, http.StatusCreated, "100 matchExpressions")
	a.do("DELETE", qosItem(ns, "default"), "", "").expect(t, http.StatusOK, "delete")
	a.do("POST", qosCollection(ns), jsonType, qosManifest("default", rules(1000))).expect(t, http.StatusCreated, "1000 rules")
}

func TestQoSPrinterColumns(t *testing.T) {
	a := newAPI(t)
	ns := namespace(t)
	a.do("POST", qosCollection(ns), jsonType, qosManifest("default", `{"egress":[{"dscp":1}]}`)).expect(t, http.StatusCreated, "create")
	a.do("PATCH", qosItem(ns, "default")+"/status", "application/merge-patch+json", `{"status":{"status":"EgressQoS Rules applied","conditions":[`+
		`{"type":"Applied","status":"True","reason":"Applied","message":"not this one","lastTransitionTime":"2026-01-01T00:00:00Z"},`+
		`{"type":"Ready","status":"True","reason":"Applied","message":"generation 1 applied on 3/3 nodes","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`).
		expect(t, http.StatusOK, "status")
	table, columns := a.table(qosCollection(ns))
	if !slices.Equal(columns, []string{"Name", "Status", "Details", "Age"}) {
		t.Fatalf("columns %v", columns)
	}
	if len(table.Rows) != 1 || fmt.Sprintf("%q", table.Rows[0].Cells[:3]) != `["default" "EgressQoS Rules applied" "generation 1 applied on 3/3 nodes"]` {
		t.Fatalf("rows %+v", table.Rows)
	}
}

// TestQoSWatchTypedClientAndInformer drives the generated clientset (one
// K8sV1() for both kinds of the group), its watch, and the generated
// informer and lister.
func TestQoSWatchTypedClientAndInformer(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	clientset := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	client := clientset.K8sV1().EgressQoSes(ns)

	factory := externalversions.NewSharedInformerFactoryWithOptions(clientset, 0, externalversions.WithNamespace(ns))
	lister := factory.K8s().V1().EgressQoSes().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // runs before Shutdown, which waits for the informers to stop

	w, err := client.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	qos, err := client.Create(ctx, &esv1.EgressQoS{
		ObjectMeta: metav1.ObjectMeta{Name: esv1.EgressQoSName},
		Spec:       esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 10}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := awaitCached(ctx, t, factory.WaitForCacheSync, func() (*esv1.EgressQoS, error) { return lister.EgressQoSes(ns).Get(esv1.EgressQoSName) })
	if cached == nil || cached.UID != qos.UID {
		t.Fatalf("lister: %+v, %v", cached, err)
	}
	if all, err := lister.List(labels.Everything()); err != nil || len(all) != 1 {
		t.Fatalf("lister List: %v, %v", all, err)
	}

	qos.Status.Status = "applied"
	if _, err := client.UpdateStatus(ctx, qos, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, esv1.EgressQoSName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := addedModifiedDeleted(ctx, t, w, func(q *esv1.EgressQoS) string { return q.Status.Status })
	if seen[1] != "MODIFIED:applied" {
		t.Fatalf("MODIFIED event carried %q", seen[1])
	}
}
