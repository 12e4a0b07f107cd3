package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/wait"
)

// TestManualLabelEditsReverted: labels that no assignment explains are
// removed, a removed host label comes back, and a label added by hand to a
// second node is removed from it (the watcher tolerates that one moment,
// which is the user's doing).
func TestManualLabelEditsReverted(t *testing.T) {
	f := newFixture(t, "node-a=zone:east", "node-b=zone:east")
	f.run("replica-a")
	host := f.assigned(esv1.EgressServiceSpec{}, "node-a", "node-b")
	other := otherThan(host, "node-a", "node-b")
	empty := ""

	f.PatchNodeLabels(t, host, map[string]*string{f.label("web"): nil})
	f.waitLabelOn("web", host)

	stray := assign.LabelKey(f.ns, "nobody")
	f.PatchNodeLabels(t, other, map[string]*string{stray: &empty, f.label("web"): &empty})
	f.waitLabelOn("web", host)
	wait.Until(t, settle, func() error {
		if got := f.NodesWithLabel(t, stray); len(got) != 0 {
			return fmt.Errorf("stray label on %v", got)
		}
		return nil
	})
	f.labels.Reset() // the manual second label was a violation by the user
	// Unrelated labels are untouched.
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels["zone"] != "east" {
		t.Errorf("unrelated label changed: %v", n.Labels)
	}
	f.waitStatus("web", host, reasons.Assigned)
}

// TestLongNames: namespace and name longer than a label name together get
// the shortened, hashed label of assign.LabelKey, named in the Ready message.
func TestLongNames(t *testing.T) {
	f := newFixture(t, "node-a")
	f.run("replica-a")
	ns := strings.Repeat("n", 60)
	if _, err := f.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.ns = ns
	name := "a-service-with-a-long-name-" + strings.Repeat("x", 30)
	f.service(name, esv1.EgressServiceSpec{}, "node-a")
	es := f.waitStatus(name, "node-a", reasons.Assigned)
	key := assign.LabelKey(ns, name)
	if len(strings.TrimPrefix(key, assign.LabelPrefix)) > 63 || strings.TrimPrefix(key, assign.LabelPrefix) == ns+"-"+name {
		t.Fatalf("label key %s was not shortened", key)
	}
	f.waitLabelOn(name, "node-a")
	if !strings.Contains(es.Status.Conditions[0].Message, key) {
		t.Errorf("Ready message %q does not name the label %s", es.Status.Conditions[0].Message, key)
	}
}

// TestLabelKeyShared: namespace "lk-a-b" name "c" and namespace "lk-a" name
// "b-c" share the label key lk-a-b-c. Both get hosts; only the lesser key
// (lk-a-b/c) has its host labelled, and the other one's Ready message says
// so. When the owner goes, the label follows the other service.
func TestLabelKeyShared(t *testing.T) {
	f := newFixture(t, "node-a", "node-b")
	f.run("replica-a")
	for _, ns := range []string{"lk-a-b", "lk-a"} {
		if _, err := f.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	owner := &fixture{Env: f.Env, t: t, ns: "lk-a-b", labels: f.labels}
	other := &fixture{Env: f.Env, t: t, ns: "lk-a", labels: f.labels}
	if owner.label("c") != other.label("b-c") {
		t.Fatalf("keys differ: %s %s", owner.label("c"), other.label("b-c"))
	}
	owner.service("c", esv1.EgressServiceSpec{}, "node-a", "node-b")
	ownerHost := ""
	wait.Until(t, settle, func() error {
		if ownerHost = owner.GetEgressService(t, "lk-a-b", "c").Status.Host; ownerHost == "" {
			return errNoHost
		}
		return nil
	})
	other.service("b-c", esv1.EgressServiceSpec{}, "node-a", "node-b")
	otherHost := otherThan(ownerHost, "node-a", "node-b") // least loaded
	es := other.waitStatus("b-c", otherHost, reasons.Assigned)
	if !strings.Contains(es.Status.Conditions[0].Message, "lk-a-b/c maps to the same label") {
		t.Errorf("Ready message %q does not explain the shared label", es.Status.Conditions[0].Message)
	}
	owner.waitLabelOn("c", ownerHost)

	if err := f.ES.K8sV1().EgressServices("lk-a-b").Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	other.waitLabelOn("b-c", otherHost)
	wait.Until(t, settle, func() error {
		es := other.GetEgressService(t, "lk-a", "b-c")
		if strings.Contains(es.Status.Conditions[0].Message, "maps to the same label") {
			return fmt.Errorf("message still mentions the conflict: %s", es.Status.Conditions[0].Message)
		}
		return nil
	})
}
