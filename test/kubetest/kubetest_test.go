package kubetest

import (
	"context"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestControlPlane starts etcd and kube-apiserver, checks that each token
// user authenticates as who it claims, that RBAC denies an unprivileged
// identity, and that the CRDs are served; then that Stop leaves nothing.
func TestControlPlane(t *testing.T) {
	c, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, u := range []User{Admin, Agent, Controller} {
		client := kubernetes.NewForConfigOrDie(c.Config(u))
		review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", u.Name, err)
		}
		info := review.Status.UserInfo
		if info.Username != u.Name || !slices.Contains(info.Groups, u.Groups[0]) {
			t.Errorf("token of %s authenticated as %s %v", u.Name, info.Username, info.Groups)
		}
	}
	// No RBAC rule grants the agent anything yet: RBAC is really on.
	agent := kubernetes.NewForConfigOrDie(c.Config(Agent))
	if _, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("agent without RBAC bindings could list nodes: RBAC is not enforced")
	}
	admin := kubernetes.NewForConfigOrDie(c.Config(Admin))
	resources, err := admin.Discovery().ServerResourcesForGroupVersion("k8s.ovn.org/v1")
	if err != nil {
		t.Fatalf("k8s.ovn.org/v1 not served: %v", err)
	}
	served := map[string]bool{}
	for _, r := range resources.APIResources {
		served[r.Name] = true
	}
	for _, want := range []string{"egressservices", "egressqoses", "egressfirewalls", "egressips"} {
		if !served[want] {
			t.Errorf("k8s.ovn.org/v1 serves %v, not %s", resources.APIResources, want)
		}
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}

	pids := c.Pids()
	c.Stop()
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("pid %d still alive after Stop", pid)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Stop", c.Dir)
	}
}

// BenchmarkLaunch measures how long a control plane takes to be ready, with
// the binaries already built.
func BenchmarkLaunch(b *testing.B) {
	for b.Loop() {
		c, err := Launch()
		if err != nil {
			b.Fatal(err)
		}
		c.Stop()
	}
}
