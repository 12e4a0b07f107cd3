package conformance

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// CloudPrivateIPConfig is cluster-scoped and named after its address: each
// test uses addresses of its own and labels its objects with its name, by
// which it deletes them when it ends.

const cloudIPCollection = "/apis/cloud.network.openshift.io/v1/cloudprivateipconfigs"

func cloudIPItem(name string) string { return cloudIPCollection + "/" + name }

// cloudIPs creates nothing: it returns a create body maker for test t's
// objects, and deletes them when t ends.
func cloudIPs(t *testing.T, a *api) func(name, node string) string {
	label := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	t.Cleanup(func() { a.do("DELETE", cloudIPCollection+"?labelSelector=test%3D"+label, "", "") })
	return func(name, node string) string {
		return fmt.Sprintf(`{"apiVersion":"cloud.network.openshift.io/v1","kind":"CloudPrivateIPConfig","metadata":{"name":%q,"labels":{"test":%q}},"spec":{"node":%q}}`,
			name, label, node)
	}
}

func (r response) cloudIP(t *testing.T) *cloudv1.CloudPrivateIPConfig {
	t.Helper()
	return decode[cloudv1.CloudPrivateIPConfig](t, r)
}

// TestCloudIPNames: the name is the address, IPv4 as it is written and
// IPv6 as its eight groups of four hex digits joined by dots; ObjectName
// gives those names, AddressOf reads them and refuses what the API server
// refuses.
func TestCloudIPNames(t *testing.T) {
	a := newAPI(t)
	manifest := cloudIPs(t, a)
	for _, addr := range []string{"192.0.2.10", "2001:db8::10", "fd00:1:2:3:4:5:6:7", "::1"} {
		name := cloudv1.ObjectName(netip.MustParseAddr(addr))
		created := a.do("POST", cloudIPCollection, jsonType, manifest(name, "node-a")).expect(t, http.StatusCreated, "create "+name).cloudIP(t)
		if created.Name != name || created.Spec.Node != "node-a" || created.Namespace != "" {
			t.Fatalf("create %s returned %+v", name, created)
		}
		if got, err := cloudv1.AddressOf(name); err != nil || got != netip.MustParseAddr(addr) {
			t.Errorf("AddressOf(%q) = %v, %v; want %s", name, got, err, addr)
		}
	}
	const nameMessage = "the name must be the address assigned"
	for _, name := range []string{
		"node-a",                // not an address
		"2001.db8.0.0.0.0.0.10", // IPv6, groups not written out
		"2001.0DB8.0000.0000.0000.0000.0000.0010", // upper case (the API server's own rule refuses it too)
		"2001.0db8.0000.0000.0000.0000.0010",      // seven groups
		"0000.0000.0000.0000.0000.ffff.c000.020a", // an IPv4 address mapped: its name is 192.0.2.10
		"192.0.2.010", // IPv4 with a leading zero
		"192.0.2",     // too short
	} {
		r := a.do("POST", cloudIPCollection, jsonType, manifest(name, "node-a"))
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), nameMessage) && !strings.Contains(r.message(), "metadata.name: Invalid value") {
			t.Errorf("name %q: %d %s; want 422 refusing the name", name, r.code, r.body)
		}
		if _, err := cloudv1.AddressOf(name); err == nil {
			t.Errorf("AddressOf(%q) accepts what the API server refuses", name)
		}
	}
	// spec.node is required and not empty.
	for body, want := range map[string]string{
		`{"apiVersion":"cloud.network.openshift.io/v1","kind":"CloudPrivateIPConfig","metadata":{"name":"192.0.2.11"},"spec":{}}`:          "spec.node: Required value",
		`{"apiVersion":"cloud.network.openshift.io/v1","kind":"CloudPrivateIPConfig","metadata":{"name":"192.0.2.11"},"spec":{"node":""}}`: "spec.node in body should be at least 1 chars long",
		`{"apiVersion":"cloud.network.openshift.io/v1","kind":"CloudPrivateIPConfig","metadata":{"name":"192.0.2.11"}}`:                    "spec: Required value",
	} {
		r := a.do("POST", cloudIPCollection, jsonType, body)
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(r.message(), want) {
			t.Errorf("%s: %d %s; want 422 with %q", body, r.code, r.body, want)
		}
	}
	// Cluster-scoped: there is no namespaced path.
	a.do("GET", "/apis/cloud.network.openshift.io/v1/namespaces/default/cloudprivateipconfigs", "", "").expect(t, http.StatusNotFound, "namespaced list")
}

// TestCloudIPStatusOnlyByTheController: /status writes only status, the
// object only spec; the admission policy lets egressflow's controller
// write status and refuses everyone else, cluster administrators too.
func TestCloudIPStatusOnlyByTheController(t *testing.T) {
	a := newAPI(t)
	manifest := cloudIPs(t, a)
	kubetest.Apply(t, cluster.Config(kubetest.Admin), "../../deploy/admission/cloudprivateipconfig-status-policy.yaml")
	t.Cleanup(func() {
		admission := kubernetes.NewForConfigOrDie(cluster.Config(kubetest.Admin)).AdmissionregistrationV1()
		admission.ValidatingAdmissionPolicyBindings().Delete(context.Background(), "egressflow-cloudprivateipconfig-status", metav1.DeleteOptions{})
		admission.ValidatingAdmissionPolicies().Delete(context.Background(), "egressflow-cloudprivateipconfig-status", metav1.DeleteOptions{})
	})
	grantControllerCloudIPStatus(t)
	const name = "192.0.2.20"
	a.do("POST", cloudIPCollection, jsonType, manifest(name, "node-a")).expect(t, http.StatusCreated, "create")
	status := `{"status":{"node":"node-a","conditions":[{"type":"Assigned","status":"True","reason":"CloudResponseSuccess","message":"assigned","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`

	// The policy takes a moment to reach the admission plugin.
	wait.Until(t, 30*time.Second, func() error {
		r := a.do("PATCH", cloudIPItem(name)+"/status", "application/merge-patch+json", status)
		if r.code != http.StatusForbidden || !strings.Contains(r.message(), "only egressflow-controller writes the status of CloudPrivateIPConfig "+name) {
			return fmt.Errorf("admin's status write: %d %s; want 403 from the policy", r.code, r.body)
		}
		return nil
	})
	controller := newAPIAs(t, kubetest.Controller)
	var written *cloudv1.CloudPrivateIPConfig
	wait.Until(t, 30*time.Second, func() error { // its RBAC, too, takes a moment
		r := controller.do("PATCH", cloudIPItem(name)+"/status", "application/merge-patch+json", status)
		if r.code != http.StatusOK {
			return fmt.Errorf("the controller's status write: %d %s", r.code, r.body)
		}
		written = r.cloudIP(t)
		return nil
	})
	if written.Status.Node != "node-a" || len(written.Status.Conditions) != 1 || written.Status.Conditions[0].Type != cloudv1.AssignedCondition {
		t.Fatalf("status written: %+v", written.Status)
	}
	// The object's own path changes the spec and never the status.
	moved := a.do("PATCH", cloudIPItem(name), "application/merge-patch+json", `{"spec":{"node":"node-b"},"status":{"node":"intruder"}}`).
		expect(t, http.StatusOK, "spec patch").cloudIP(t)
	if moved.Spec.Node != "node-b" || moved.Status.Node != "node-a" {
		t.Fatalf("spec patch: spec %+v, status %+v; want node-b and the status unchanged", moved.Spec, moved.Status)
	}
	// Conditions are keyed by type.
	dup := controller.do("PATCH", cloudIPItem(name)+"/status", "application/merge-patch+json",
		`{"status":{"conditions":[{"type":"Assigned","status":"True","reason":"A","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"},{"type":"Assigned","status":"False","reason":"B","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	if dup.code != http.StatusUnprocessableEntity || !strings.Contains(dup.message(), "Duplicate value") {
		t.Fatalf("two Assigned conditions: %d %s; want 422 Duplicate value", dup.code, dup.body)
	}
	// kubectl's columns: where it is asked for, where it is, and the
	// Assigned condition.
	table, columns := a.table(cloudIPCollection + "?fieldSelector=metadata.name%3D" + name)
	if !slices.Equal(columns, []string{"Name", "Requested", "Assigned", "Status", "Reason", "Age"}) {
		t.Fatalf("columns %v", columns)
	}
	if len(table.Rows) != 1 || fmt.Sprintf("%q", table.Rows[0].Cells[:5]) != `["192.0.2.20" "node-b" "node-a" "True" "CloudResponseSuccess"]` {
		t.Fatalf("rows %+v", table.Rows)
	}
}

// TestCloudIPTypedClient drives the generated clientset's
// CloudNetworkV1(), create to delete.
func TestCloudIPTypedClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := versioned.NewForConfigOrDie(cluster.Config(kubetest.Admin)).CloudNetworkV1().CloudPrivateIPConfigs()
	name := cloudv1.ObjectName(netip.MustParseAddr("2001:db8::30"))
	created, err := client.Create(ctx, &cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cloudv1.CloudPrivateIPConfigSpec{Node: "node-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := client.Get(ctx, name, metav1.GetOptions{}); err != nil || got.UID != created.UID || got.Spec.Node != "node-a" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// newAPIAs is newAPI with user's token.
func newAPIAs(t *testing.T, user kubetest.User) *api {
	a := newAPI(t)
	a.token = user.Token
	return a
}

// grantControllerCloudIPStatus lets the controller's identity write
// CloudPrivateIPConfigs' status, as its RBAC will when it serves them.
func grantControllerCloudIPStatus(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cluster.Config(kubetest.Admin))
	const name = "conformance-cloudprivateipconfig-status"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{cloudv1.GroupName}, Resources: []string{"cloudprivateipconfigs/status"}, Verbs: []string{"get", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kubetest.Controller.Name}}}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		kube.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
}
