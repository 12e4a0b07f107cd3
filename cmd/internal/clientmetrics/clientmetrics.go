// Package clientmetrics exports client-go's own metrics, those of its
// workqueues and of its REST client, on a command's Prometheus registry,
// under the names and labels Kubernetes components use (workqueue_* by
// queue name, rest_client_* by verb, code and API server host), so that
// dashboards and alerts written for those components read ours too.
//
// client-go reports these through process-wide hooks that take the first
// registration only: Register is for a command's main, once. It writes
// small adapters rather than using k8s.io/component-base's, which would
// bring in that module and its own global legacy registry.
package clientmetrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// queueBuckets span the time an item waits in a workqueue or is worked on:
// from 10 µs (an in-memory decision) to about 40 s (a sync that waits out
// the API server's timeouts), by factors of 4: 12 buckets, for the handful
// of queues a command has.
var queueBuckets = prometheus.ExponentialBuckets(10e-6, 4, 12)

// requestBuckets span an API request from a fast local answer (5 ms) to
// the client's longest wait (60 s), as Kubernetes components bucket theirs.
var requestBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

// Register makes client-go report its workqueue and REST-client metrics to
// reg: those of every queue with a name created afterwards, and of every
// request. Only a process's first call has an effect, as client-go's hooks
// take only the first registration.
func Register(reg prometheus.Registerer) {
	registered.Do(func() {
		q := newQueueMetrics()
		r := newRESTMetrics()
		reg.MustRegister(q.collectors()...)
		reg.MustRegister(r.collectors()...)
		workqueue.SetProvider(q)
		metrics.Register(metrics.RegisterOpts{
			RequestLatency:     latency{r.duration},
			RateLimiterLatency: latency{r.rateLimiter},
			RequestResult:      result{r.requests},
			RequestRetry:       retry{r.retries},
		})
	})
}

var registered sync.Once

// queueMetrics is a workqueue.MetricsProvider: one series per queue name.
type queueMetrics struct {
	depth, unfinished, longestRunning *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	queueDuration, workDuration       *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	name := []string{"name"}
	return &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_depth", Help: "Items waiting in the workqueue, by queue name.",
		}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_adds_total", Help: "Items added to the workqueue, by queue name.",
		}, name),
		queueDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_queue_duration_seconds", Help: "How long an item waited in the workqueue before a worker took it, by queue name.",
			Buckets: queueBuckets,
		}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_work_duration_seconds", Help: "How long a worker took to process an item, by queue name.",
			Buckets: queueBuckets,
		}, name),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet done, summed over the items being worked on, by queue name: a value that keeps growing means a stuck worker.",
		}, name),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_longest_running_processor_seconds", Help: "How long the longest-running worker of the queue has been working on its item, by queue name.",
		}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_retries_total", Help: "Items put back into the workqueue after a failure (rate limited), by queue name.",
		}, name),
	}
}

func (q *queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.depth, q.adds, q.queueDuration, q.workDuration, q.unfinished, q.longestRunning, q.retries}
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.queueDuration.WithLabelValues(name)
}

func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.workDuration.WithLabelValues(name)
}

func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longestRunning.WithLabelValues(name)
}

func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

// restMetrics are the REST client's: their labels are bounded by the verbs,
// the status codes and the API server's host (one, for our commands).
type restMetrics struct {
	duration, rateLimiter *prometheus.HistogramVec
	requests, retries     *prometheus.CounterVec
}

func newRESTMetrics() *restMetrics {
	return &restMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_request_duration_seconds", Help: "API request latency, by verb and API server host.",
			Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		rateLimiter: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_rate_limiter_duration_seconds", Help: "Time an API request waited for the client's own rate limiter (--kube-api-qps, --kube-api-burst), by verb and API server host.",
			Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total", Help: "API requests by HTTP status code (\"<error>\" when none came back), method and API server host.",
		}, []string{"code", "method", "host"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_request_retries_total", Help: "API requests retried by the client, by status code, method and API server host.",
		}, []string{"code", "method", "host"}),
	}
}

func (r *restMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.duration, r.rateLimiter, r.requests, r.retries}
}

// latency is a metrics.LatencyMetric: the URL's host only, never its path
// (object names would make the series unbounded).
type latency struct{ h *prometheus.HistogramVec }

func (l latency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

// result is a metrics.ResultMetric.
type result struct{ c *prometheus.CounterVec }

func (r result) Increment(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

// retry is a metrics.RetryMetric.
type retry struct{ c *prometheus.CounterVec }

func (r retry) IncrementRetry(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}
