// Package chart checks the Helm chart (deploy/charts/egressflow) with the
// helm command built from the Go module proxy (test/tools/helm): it lints,
// it renders the same objects as the kustomize base (deploy/,
// deploy/monitoring), its copies of deploy/'s CRDs, admission policies and
// monitoring files are equal to them, and an install elsewhere names
// nothing of egressflow-system. The install, upgrade and uninstall on a
// real cluster are test/dockercluster's TestHelm.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egressflow/egressflow/test/kubetest"
)

const (
	chartDir = "deploy/charts/egressflow"
	// release is the release name the tests render with; no object's name
	// depends on it.
	release = "egressflow"
	// deployNamespace is deploy/'s own namespace.
	deployNamespace = "egressflow-system"
	// otherValues installs elsewhere (namespace net-egress, another image).
	otherValues = "testdata/other-namespace.yaml"
	// otherNamespace is otherValues' namespace.name.
	otherNamespace = "net-egress"
)

// object is one rendered manifest, as JSON-compatible maps.
type object map[string]any

func (o object) kind() string { return str(o, "kind") }
func (o object) name() string { return str(o, "metadata", "name") }
func (o object) namespace() string {
	return str(o, "metadata", "namespace")
}
func (o object) key() string { return o.kind() + "/" + o.namespace() + "/" + o.name() }

// str reads a string at path, "" when absent.
func str(o map[string]any, path ...string) string {
	v, _ := get(o, path...).(string)
	return v
}

func get(o map[string]any, path ...string) any {
	var v any = o
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// parse splits a multi-document YAML stream into objects (empty documents
// skipped).
func parse(t *testing.T, stream string) []object {
	t.Helper()
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
	return objs
}

func byKey(t *testing.T, objs []object) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, o := range objs {
		if _, dup := m[o.key()]; dup {
			t.Errorf("%s rendered twice", o.key())
		}
		m[o.key()] = o
	}
	return m
}

func root(t *testing.T) string {
	t.Helper()
	r, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs a cached binary and returns its standard output.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := kubetest.Binary("helm")
	if err != nil {
		t.Fatalf("helm (make test-deps builds it): %v", err)
	}
	// No repository, cache or plugin of the user's is read or written.
	home := t.TempDir()
	t.Setenv("HELM_CACHE_HOME", filepath.Join(home, "cache"))
	t.Setenv("HELM_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("HELM_DATA_HOME", filepath.Join(home, "data"))
	return run(t, bin, args...)
}

func kustomize(t *testing.T, dir string) []object {
	t.Helper()
	bin, err := kubetest.Binary("kubectl", "--with-kubectl")
	if err != nil {
		t.Fatalf("kubectl (make test-deps builds it): %v", err)
	}
	out := run(t, bin, "kustomize", dir)
	// configMapGenerator appends a hash of the content to the name (and to
	// every reference), so that a change rolls the workloads; the chart
	// keeps the name and rolls them by a checksum annotation.
	out = regexp.MustCompile(`egressflow-cluster-[a-z0-9]{10}\b`).ReplaceAllString(out, "egressflow-cluster")
	return parse(t, out)
}

// template renders the chart into namespace with extra helm arguments.
func template(t *testing.T, namespace string, args ...string) []object {
	t.Helper()
	return parse(t, helm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...))
}

// uninstallHook is the chart's pre-delete hook, which deploy/ has not
// (kubectl delete -k deletes the namespace first, which is the sign).
const uninstallHook = "Job/%s/egressflow-uninstall"

// withoutHooks drops Helm's hooks (objects annotated helm.sh/hook): they
// are not installed as part of the release.
func withoutHooks(objs []object) []object {
	return slices.DeleteFunc(objs, func(o object) bool { return str(o, "metadata", "annotations", "helm.sh/hook") != "" })
}

// withoutChecksum drops the chart's checksum annotations from the pod
// templates (and the annotations map when nothing else is left).
func withoutChecksum(objs []object) []object {
	for _, o := range objs {
		meta, ok := get(o, "spec", "template", "metadata").(map[string]any)
		if !ok {
			continue
		}
		if a, ok := meta["annotations"].(map[string]any); ok {
			delete(a, "checksum/cluster-config")
			if len(a) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	return objs
}

// TestLint: `helm lint --strict` passes with the default values and with
// an install elsewhere's.
func TestLint(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	helm(t, "lint", "--strict", chartDir, "--namespace", "default", "--values", filepath.Join("test", "chart", otherValues))
}

// TestSameObjectsAsKustomize: with the default values in egressflow-system,
// the chart renders exactly the objects of `kubectl kustomize deploy/`,
// field by field (the ConfigMap keeps its name, and the pod templates
// carry a checksum of it instead), and with monitoring on, those of
// deploy/monitoring besides.
func TestSameObjectsAsKustomize(t *testing.T) {
	want := byKey(t, kustomize(t, "deploy"))
	all := withoutChecksum(template(t, deployNamespace))
	hook := byKey(t, all)[fmt.Sprintf(uninstallHook, deployNamespace)]
	if str(hook, "metadata", "annotations", "helm.sh/hook") != "pre-delete" {
		t.Errorf("no pre-delete hook %s: %v", fmt.Sprintf(uninstallHook, deployNamespace), hook)
	}
	got := byKey(t, withoutHooks(all))
	// deploy/ creates its namespace; with the default values the chart
	// installs into an existing one (helm install --create-namespace).
	delete(want, "Namespace//"+deployNamespace)
	compare(t, "deploy/", want, got)

	monitoring := byKey(t, kustomize(t, "deploy/monitoring"))
	for k, o := range want {
		monitoring[k] = o
	}
	got = byKey(t, withoutHooks(withoutChecksum(template(t, deployNamespace, "--set", "monitoring.enabled=true"))))
	compare(t, "deploy/ and deploy/monitoring", monitoring, got)

	got = byKey(t, withoutHooks(withoutChecksum(template(t, deployNamespace, "--set", "admission.enabled=false"))))
	for k, o := range want {
		if strings.HasPrefix(o.kind(), "ValidatingAdmissionPolicy") {
			delete(want, k)
		}
	}
	compare(t, "deploy/ without admission policies", want, got)

	got = byKey(t, withoutHooks(withoutChecksum(template(t, deployNamespace, "--set", "admission.enabled=false", "--set", "priorityAndFairness.enabled=false"))))
	for k, o := range want {
		if o.kind() == "FlowSchema" || o.kind() == "PriorityLevelConfiguration" {
			delete(want, k)
		}
	}
	compare(t, "deploy/ without admission policies and priority and fairness", want, got)
}

func compare(t *testing.T, what string, want, got map[string]object) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("the chart does not render %s of %s", k, what)
			continue
		}
		if !reflect.DeepEqual(w, g) {
			wy, _ := yaml.Marshal(w)
			gy, _ := yaml.Marshal(g)
			t.Errorf("the chart's %s differs from %s's:\n--- %s\n%s\n--- chart\n%s", k, what, what, wy, gy)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which %s has not", k, what)
		}
	}
}

// TestAnotherNamespace: with another namespace and image (otherValues),
// every namespaced object is in that namespace, every RBAC subject names
// it, nothing names egressflow-system, both workloads run the image, the
// cluster's values reach the ConfigMap, the namespace is created
// privileged, and the CRDs are not templates (Helm installs crds/ once and
// never deletes them).
func TestAnotherNamespace(t *testing.T) {
	objs := template(t, "default", "--values", filepath.Join("test", "chart", otherValues))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind()]++
		if o.kind() == "CustomResourceDefinition" {
			t.Errorf("%s is rendered as a template: the CRDs belong in crds/", o.name())
		}
		if walkStrings(o, func(s string) bool { return strings.Contains(s, deployNamespace) }) {
			y, _ := yaml.Marshal(o)
			t.Errorf("%s names %s:\n%s", o.key(), deployNamespace, y)
		}
		switch o.kind() {
		case "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "FlowSchema", "PriorityLevelConfiguration":
			if o.namespace() != "" {
				t.Errorf("cluster-scoped %s has namespace %q", o.key(), o.namespace())
			}
		default:
			if o.namespace() != otherNamespace {
				t.Errorf("%s is not in %s", o.key(), otherNamespace)
			}
		}
		if subjects, ok := o["subjects"].([]any); ok {
			for _, s := range subjects {
				if ns := str(s.(map[string]any), "namespace"); ns != otherNamespace {
					t.Errorf("%s binds a subject in %q, not %s", o.key(), ns, otherNamespace)
				}
			}
		}
		if rules, ok := get(o, "spec", "rules").([]any); ok && o.kind() == "FlowSchema" {
			for _, r := range rules {
				for _, s := range r.(map[string]any)["subjects"].([]any) {
					if ns := str(s.(map[string]any), "serviceAccount", "namespace"); ns != otherNamespace {
						t.Errorf("%s matches a ServiceAccount in %q, not %s", o.key(), ns, otherNamespace)
					}
				}
			}
		}
		if containers, ok := get(o, "spec", "template", "spec", "containers").([]any); ok {
			for _, c := range containers {
				c := c.(map[string]any)
				if c["image"] != "registry.example.com/egressflow:v1.2.3" || c["imagePullPolicy"] != "Always" {
					t.Errorf("%s runs %v (pull %v), not the values' image", o.key(), c["image"], c["imagePullPolicy"])
				}
			}
		}
	}
	// The agent's and the controller's identities and permissions (each
	// bound to system:auth-delegator for its metrics port too), the
	// metrics scraper's (ServiceAccount, token Secret, reader role), and a
	// PodMonitor per component.
	for kind, n := range map[string]int{"Namespace": 1, "ServiceAccount": 3, "Secret": 1, "ConfigMap": 2, "ClusterRole": 3, "ClusterRoleBinding": 5,
		"Role": 2, "RoleBinding": 2, "DaemonSet": 1, "Deployment": 1, "PodDisruptionBudget": 1, "ValidatingAdmissionPolicy": 5,
		"ValidatingAdmissionPolicyBinding": 5, "PodMonitor": 2, "PrometheusRule": 1, "Job": 1, "FlowSchema": 1, "PriorityLevelConfiguration": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s rendered, want %d", kinds[kind], kind, n)
		}
	}
	m := byKey(t, objs)
	ns := m["Namespace//"+otherNamespace]
	if str(ns, "metadata", "labels", "pod-security.kubernetes.io/enforce") != "privileged" {
		t.Errorf("the namespace is not labelled privileged: %v", ns)
	}
	cm := m["ConfigMap/"+otherNamespace+"/egressflow-cluster"]
	for k, v := range map[string]string{"BRIDGE": "br-uplink", "UPLINK": "ens5", "POD_CIDRS": "10.42.0.0/16",
		"SERVICE_CIDRS": "10.43.0.0/16", "EGRESSIP_UNHELD": "node-ip", "MAX_EGRESS_IPS_PER_NODE": "12"} {
		if got := str(cm, "data", k); got != v {
			t.Errorf("egressflow-cluster %s = %q, want %q", k, got, v)
		}
	}
	ds := m["DaemonSet/"+otherNamespace+"/egressflow-agent"]
	if got := get(ds, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["resources"]; !reflect.DeepEqual(got,
		map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "384Mi"}}) {
		t.Errorf("agent resources %v, not the values'", got)
	}
	if got := str(ds, "spec", "template", "metadata", "annotations", "example.com/rolled"); got != "1" {
		t.Errorf("agent pod annotation %q, not the values'", got)
	}
	if got := get(m["Deployment/"+otherNamespace+"/egressflow-controller"], "spec", "replicas"); got != float64(3) {
		t.Errorf("controller replicas %v, want 3", got)
	}
	for _, k := range []string{"PodMonitor/" + otherNamespace + "/egressflow-controller", "PrometheusRule/" + otherNamespace + "/egressflow"} {
		if o, ok := m[k]; ok && str(o, "metadata", "labels", "release") != "kube-prometheus-stack" {
			t.Errorf("%s lacks monitoring.labels", k)
		}
	}

	// With --include-crds (helm install's way), the CRDs come as they are
	// in deploy/crds.
	withCRDs := template(t, "default", "--values", filepath.Join("test", "chart", otherValues), "--include-crds")
	var crds []string
	for _, o := range withCRDs {
		if o.kind() == "CustomResourceDefinition" {
			crds = append(crds, o.name())
		}
	}
	slices.Sort(crds)
	if want := []string{"adminpolicybasedexternalroutes.k8s.ovn.org", "cloudprivateipconfigs.cloud.network.openshift.io", "egressfirewalls.k8s.ovn.org", "egressips.k8s.ovn.org", "egressqoses.k8s.ovn.org", "egressrouters.network.operator.openshift.io", "egressservices.k8s.ovn.org"}; !slices.Equal(crds, want) {
		t.Errorf("crds/ holds %v, want %v", crds, want)
	}
}

// walkStrings reports whether f holds for any string (key or value) in v.
func walkStrings(v any, f func(string) bool) bool {
	switch v := v.(type) {
	case string:
		return f(v)
	case map[string]any:
		for k, e := range v {
			if f(k) || walkStrings(e, f) {
				return true
			}
		}
	case object:
		return walkStrings(map[string]any(v), f)
	case []any:
		for _, e := range v {
			if walkStrings(e, f) {
				return true
			}
		}
	}
	return false
}

// TestValues: a cluster value's change changes both pod templates'
// checksum (helm upgrade rolls both workloads, as deploy/'s hashed
// ConfigMap name does); an annotation rolls only its workload; invalid
// values fail the render with a message.
func TestValues(t *testing.T) {
	checksums := func(args ...string) (agent, controller string) {
		m := byKey(t, template(t, deployNamespace, args...))
		at := func(k string) string {
			return str(m[k], "spec", "template", "metadata", "annotations", "checksum/cluster-config")
		}
		return at("DaemonSet/" + deployNamespace + "/egressflow-agent"), at("Deployment/" + deployNamespace + "/egressflow-controller")
	}
	a0, c0 := checksums()
	if a0 == "" || a0 != c0 {
		t.Fatalf("checksums %q and %q: want one, on both", a0, c0)
	}
	if a1, c1 := checksums("--set", "cluster.uplink=ens6"); a1 == a0 || c1 == c0 {
		t.Errorf("changing cluster.uplink does not roll both workloads: %s %s", a1, c1)
	}
	if a1, _ := checksums("--set", "agent.resources.limits.memory=300Mi"); a1 != a0 {
		t.Errorf("an agent resource changes the cluster checksum")
	}

	bin, err := kubetest.Binary("helm")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		args    []string
		message string
	}{
		{[]string{"--set", "namespace.create=true"}, "namespace.create renders the Namespace"},
		{[]string{"--set", "cluster.egressIPUnheld=maybe"}, "cluster.egressIPUnheld must be drop or node-ip"},
		{[]string{"--set", "cluster.maxEgressIPsPerNode=-1"}, "cluster.maxEgressIPsPerNode must be a number, 0 or more"},
		{[]string{"--set-string", "cluster.maxEgressIPsPerNode=many"}, "cluster.maxEgressIPsPerNode must be a number, 0 or more"},
	} {
		cmd := exec.Command(bin, append([]string{"template", release, chartDir, "--namespace", deployNamespace}, bad.args...)...)
		cmd.Dir = root(t)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad.message) {
			t.Errorf("helm template %v: %v, want a failure saying %q:\n%s", bad.args, err, bad.message, out)
		}
	}
}

// TestCopiesEqualDeploy: the chart's crds/, files/admission and
// files/monitoring are byte-for-byte deploy/crds' CRDs, deploy/admission
// and deploy/monitoring's files (make manifests copies the CRDs; copy the
// others when they change), and nothing else.
func TestCopiesEqualDeploy(t *testing.T) {
	r := root(t)
	for _, c := range []struct{ chart, deploy, glob string }{
		{"crds", "deploy/crds", "*_*.yaml"},
		{"files/admission", "deploy/admission", "*.yaml"},
		{"files/monitoring", "deploy/monitoring", "*"},
	} {
		want := files(t, filepath.Join(r, c.deploy), c.glob)
		if c.chart == "files/monitoring" {
			// The kustomization and promtool's tests are not the chart's.
			delete(want, "kustomization.yaml")
			delete(want, "prometheusrule_test.yaml")
		}
		got := files(t, filepath.Join(r, chartDir, c.chart), "*")
		if len(want) == 0 {
			t.Fatalf("no %s in %s", c.glob, c.deploy)
		}
		for name, data := range want {
			if g, ok := got[name]; !ok {
				t.Errorf("%s/%s has no copy in the chart's %s", c.deploy, name, c.chart)
			} else if !bytes.Equal(g, data) {
				t.Errorf("the chart's %s/%s differs from %s/%s: copy it", c.chart, name, c.deploy, name)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("the chart's %s/%s is not in %s: remove it", c.chart, name, c.deploy)
			}
		}
	}
}

func files(t *testing.T, dir, glob string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(fmt.Errorf("%s: %w", p, err))
		}
		m[filepath.Base(p)] = data
	}
	return m
}

// TestDeletionOrder: `kubectl delete -k deploy/` deletes in the build's
// order, and the controller takes the egress-service labels off the nodes
// when it sees its namespace being deleted, which it can do only while its
// ServiceAccount and RBAC last. So the namespace comes first and every
// ServiceAccount, Role, ClusterRole and binding after every other object:
// the workloads, the admission policies and the FlowSchema are deleted in
// between, which gives the controller their time.
func TestDeletionOrder(t *testing.T) {
	objs := kustomize(t, "deploy")
	if len(objs) == 0 || objs[0].kind() != "Namespace" {
		t.Fatalf("the build does not start with the namespace: %v", kinds(objs))
	}
	identity := func(o object) bool {
		switch o.kind() {
		case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
			return true
		}
		return false
	}
	first := slices.IndexFunc(objs, identity)
	if first < 0 {
		t.Fatalf("no ServiceAccount or RBAC in the build: %v", kinds(objs))
	}
	if rest := objs[first:]; !slices.ContainsFunc(rest, func(o object) bool { return o.key() == "ServiceAccount/"+deployNamespace+"/egressflow-controller" }) ||
		slices.ContainsFunc(rest, func(o object) bool { return !identity(o) }) {
		t.Errorf("an object comes after the first ServiceAccount or RBAC object, or the controller's ServiceAccount is missing: %v", kinds(objs))
	}
	// Between the namespace and the permissions: at least both workloads.
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		if i := slices.IndexFunc(objs, func(o object) bool { return o.kind() == kind }); i < 1 || i > first {
			t.Errorf("%s is not deleted between the namespace and the permissions: %v", kind, kinds(objs))
		}
	}
	// The ServiceAccounts last: deleting one ends its tokens.
	if last := objs[len(objs)-1]; last.kind() != "ServiceAccount" {
		t.Errorf("the build ends with %s, not a ServiceAccount: %v", last.key(), kinds(objs))
	}
}

func kinds(objs []object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.key()
	}
	return out
}
