//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/test/kubetest"
)

// timeline records, as the API server tells them, the changes a failover
// goes through: the scenario's EgressService status, each Node's Ready
// condition, each agent's sync state and restart mark, the scenario's
// pods' readiness, the agents' pods and the install namespace's Events. A failover slower than its bound is explained by it.
type timeline struct {
	mu      sync.Mutex
	entries []timelineEntry
	// last is the last line recorded per object, so that a renewal that
	// changes nothing of the above records nothing.
	last map[string]string
}

type timelineEntry struct {
	at   time.Time
	what string
}

func (c *Cluster) followTimeline() *timeline {
	tl := &timeline{last: map[string]string{}}
	es := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressServices(scenarioNamespace)
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return es.Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		if e, ok := ev.Object.(*esv1.EgressService); ok {
			state := fmt.Sprintf("host %q", e.Status.Host)
			for _, cond := range e.Status.Conditions {
				state += fmt.Sprintf(", %s %s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
			tl.record("EgressService "+e.Name, state)
		}
	})
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		if n, ok := ev.Object.(*corev1.Node); ok {
			tl.record("Node "+n.Name, fmt.Sprintf("Ready %v", nodeReady(n)))
		}
	})
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoordinationV1().Leases(c.InstallNamespace()).Watch(ctx, metav1.ListOptions{LabelSelector: heartbeat.LeaseLabel + "=" + heartbeat.LeaseLabelValue})
	}, func(ev watch.Event) {
		if l, ok := ev.Object.(*coordinationv1.Lease); ok {
			tl.record("agent Lease "+l.Name, fmt.Sprintf("sync state %q, restarting %v", heartbeat.ReadFacts(l).SyncState, heartbeat.Restarting(l)))
		}
	})
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoreV1().Pods(scenarioNamespace).Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		if p, ok := ev.Object.(*corev1.Pod); ok {
			ready := false
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					ready = cond.Status == corev1.ConditionTrue
				}
			}
			tl.record("Pod "+p.Name, fmt.Sprintf("%s on %s, IPs %v, Ready %v, deleted %v", p.Status.Phase, p.Spec.NodeName, podIPs(p), ready, ev.Type == watch.Deleted))
		}
	})
	// The agents' pods and the install namespace's Events: an agent that
	// hands its Lease over (restarting) was deleted, and these say by whom.
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoreV1().Pods(c.InstallNamespace()).Watch(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=egressflow-agent"})
	}, func(ev watch.Event) {
		if p, ok := ev.Object.(*corev1.Pod); ok {
			tl.record("agent Pod "+p.Name, fmt.Sprintf("%s on %s (%s %s), deletion requested %v, deleted %v",
				p.Status.Phase, p.Spec.NodeName, p.Status.Reason, p.Status.Message, p.DeletionTimestamp != nil, ev.Type == watch.Deleted))
		}
	})
	c.follow(func(ctx context.Context) (watch.Interface, error) {
		return c.Kube.CoreV1().Events(c.InstallNamespace()).Watch(ctx, metav1.ListOptions{})
	}, func(ev watch.Event) {
		if e, ok := ev.Object.(*corev1.Event); ok && ev.Type != watch.Deleted {
			tl.record("Event "+e.Name, fmt.Sprintf("%s %s/%s %s from %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Source.Component, e.Message))
		}
	})
	return tl
}

func (tl *timeline) record(object, state string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.last[object] == state {
		return
	}
	tl.last[object] = state
	tl.entries = append(tl.entries, timelineEntry{at: time.Now(), what: object + ": " + state})
}

// since is what changed from from to to, each line with its time relative
// to at.
func (tl *timeline) since(at, from, to time.Time) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out strings.Builder
	for _, e := range tl.entries {
		if !e.at.Before(from) && !e.at.After(to) {
			fmt.Fprintf(&out, "  %+8dms %s\n", e.at.Sub(at).Milliseconds(), e.what)
		}
	}
	return out.String()
}

// timelineLookBack is how far before a slow failover's fault its
// explanation begins: far enough to show what set the scene (an agent
// pod deleted, a node back from the previous fault), at the cost of a
// longer print.
const timelineLookBack = time.Minute

// explainSlowFailover logs, for a failover that took longer than slow,
// the timeline from timelineLookBack before the docker command (started
// at at) to the first packet through the new host (until), and the
// controllers' log lines from 2 s before it.
func (s *egressScenario) explainSlowFailover(t testing.TB, tl *timeline, fault string, failed *Node, at, end time.Time, took, slow time.Duration) {
	if took <= slow {
		return
	}
	// Each controller's log by itself: one on the failed node answers
	// nothing, and would fail a kubectl logs of them all.
	var window []string
	pods, err := s.c.Kube.CoreV1().Pods(s.c.InstallNamespace()).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=egressflow-controller"})
	if err != nil {
		window = append(window, err.Error())
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == failed.Name {
			continue
		}
		logs, err := s.c.kubectl("logs", "-n", s.c.InstallNamespace(), pod.Name, "--timestamps",
			"--since-time="+at.Add(-2*time.Second).UTC().Format(time.RFC3339))
		if err != nil {
			window = append(window, pod.Name+": "+err.Error())
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
			// "<RFC 3339 time> <klog line>": up to the first packet.
			stamp, _, _ := strings.Cut(line, " ")
			if ts, err := time.Parse(time.RFC3339Nano, stamp); err == nil && ts.After(end) {
				continue
			}
			window = append(window, pod.Name+" "+line)
		}
	}
	// Printed, not logged: a benchmark's log is cut short.
	fmt.Printf("slow failover (%s): docker %s of %s took %v; what changed meanwhile (ms from the docker command):\n%s\nthe controllers' log lines:\n%s\n",
		t.Name(), fault, failed.Name, took.Round(time.Millisecond), tl.since(at, at.Add(-timelineLookBack), end), strings.Join(window, "\n"))
}
