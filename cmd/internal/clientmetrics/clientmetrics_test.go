package clientmetrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
)

// find returns the sample of family name whose labels include labels.
func find(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// Once registered, a named workqueue reports its adds, depth, waits, work
// and retries, and every API request its latency and result by code,
// method and host, never by path. A second registration changes nothing.
func TestRegister(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	Register(reg)
	Register(prometheus.NewPedanticRegistry()) // no effect, no panic

	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test-queue"})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	item, _ := q.Get()
	time.Sleep(time.Millisecond)
	q.Done(item)
	q.AddRateLimited(item)
	queue := map[string]string{"name": "test-queue"}
	for name, want := range map[string]float64{"workqueue_adds_total": 2, "workqueue_depth": 1, "workqueue_retries_total": 1} {
		m := find(t, reg, name, queue)
		if m == nil {
			t.Errorf("no %s{name=test-queue}", name)
			continue
		}
		if got := m.GetCounter().GetValue() + m.GetGauge().GetValue(); got != want {
			t.Errorf("%s{name=test-queue} = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"} {
		if m := find(t, reg, name, queue); m == nil || m.GetHistogram().GetSampleCount() != 1 {
			t.Errorf("%s{name=test-queue}: %v, want one observation", name, m)
		}
	}

	// An API server that knows no Pod.
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	defer server.Close()
	kube := kubernetes.NewForConfigOrDie(&rest.Config{Host: server.URL})
	if _, err := kube.CoreV1().Pods("shop").Get(context.Background(), "web-1", metav1.GetOptions{}); err == nil {
		t.Fatal("the fake API server found a Pod")
	}
	u, _ := url.Parse(server.URL)
	if m := find(t, reg, "rest_client_requests_total", map[string]string{"code": "404", "method": "GET", "host": u.Host}); m == nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("rest_client_requests_total{code=404,method=GET,host=%s}: %v, want 1", u.Host, m)
	}
	if m := find(t, reg, "rest_client_request_duration_seconds", map[string]string{"verb": "GET", "host": u.Host}); m == nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("rest_client_request_duration_seconds{verb=GET,host=%s}: %v, want one observation", u.Host, m)
	}
	families, _ := reg.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "web-1") {
					t.Errorf("%s %s=%q: an object's name in a label makes the series unbounded", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}
