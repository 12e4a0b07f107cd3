package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// DefaultQPS and DefaultBurst bound the Event writes of one Emitter
	// (creates and count patches). The controller writes 1.7 requests per
	// assignment (status and node label; make bench-controller) at its
	// client's 200/s, so it assigns about 120 services a second at most:
	// Events at 100/s nearly keep pace, and a start-up burst of 5,000
	// Assigned Events drains in about 50 s. Warnings are written in the
	// order they were emitted among the Normals, so in such a burst they
	// wait as long as the queue ahead of them. Higher drains faster at the
	// cost of API server load while everything else also writes; lower
	// protects a small API server.
	DefaultQPS   = 100
	DefaultBurst = 200
	// DefaultWorkers write in parallel. A write takes a few milliseconds, so
	// four overlap enough round trips to reach DefaultQPS; more only add
	// concurrent requests at the API server.
	DefaultWorkers = 4
	// DefaultRetryBaseDelay is the first delay before the Events of an
	// object whose write failed are tried again; it doubles per failure up
	// to DefaultRetryMaxDelay. The cap bounds both the API requests a
	// failing object costs (one per cap) and how late its Events arrive
	// once the cause is gone.
	DefaultRetryBaseDelay = 500 * time.Millisecond
	DefaultRetryMaxDelay  = time.Minute
	// DefaultDrainTimeout is how long Run keeps writing the queued Events
	// after its context ends, so that a graceful stop loses none it could
	// write; longer delays the process's exit when the API server is slow.
	DefaultDrainTimeout = 2 * time.Second
	// expirySweepPeriod is how often written-Event records older than
	// EventTTL are dropped from objects that emit nothing new.
	expirySweepPeriod = 10 * time.Minute
)

// Options configure an Emitter. Zero fields take the defaults.
type Options struct {
	// Component is the Events' source.component and reportingController
	// (e.g. egressflow-controller); Host their source.host and
	// reportingInstance (the agent's node name; empty for the controller).
	Component string
	Host      string

	QPS            float64
	Burst          int
	Workers        int
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	DrainTimeout   time.Duration

	// Counter, if not nil, counts Events by type, reason and result (see
	// NewCounter).
	Counter *prometheus.CounterVec
	// Clock stamps the Events; the real clock by default.
	Clock clock.WithTicker
}

func (o *Options) setDefaults() {
	if o.QPS == 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.RetryBaseDelay == 0 {
		o.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if o.RetryMaxDelay == 0 {
		o.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Emitter records Events about objects and writes them to the API server
// (see the package doc). It is a record.EventRecorder. Build it with New,
// run it with Run; Events emitted before Run are written once it runs.
type Emitter struct {
	opts    Options
	client  typedcorev1.EventsGetter
	scheme  *runtime.Scheme
	limiter flowcontrol.RateLimiter
	queue   workqueue.TypedRateLimitingInterface[objectKey]

	mu      sync.Mutex
	objects map[objectKey]*object
	seq     uint64
}

var _ record.EventRecorder = (*Emitter)(nil)

// New returns an Emitter that writes through client and names objects by
// their kinds in scheme.
func New(client typedcorev1.EventsGetter, scheme *runtime.Scheme, opts Options) *Emitter {
	opts.setDefaults()
	return &Emitter{
		opts:    opts,
		client:  client,
		scheme:  scheme,
		limiter: flowcontrol.NewTokenBucketRateLimiter(float32(opts.QPS), opts.Burst),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[objectKey](opts.RetryBaseDelay, opts.RetryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[objectKey]{Name: "events"}),
		objects: map[objectKey]*object{},
	}
}

// NewForConfig returns an Emitter with a client of its own, made from a
// copy of cfg without client-side rate limit (the Emitter limits its
// writes itself): Events never take the request budget of the component's
// other writes (status, labels, heartbeat Leases), nor wait for it.
func NewForConfig(cfg *rest.Config, scheme *runtime.Scheme, opts Options) (*Emitter, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(client.CoreV1(), scheme, opts), nil
}

// Event records an Event about object (see record.EventRecorder).
func (e *Emitter) Event(object runtime.Object, eventType, reason, message string) {
	e.emit(object, nil, eventType, reason, message)
}

// Eventf is Event with a formatted message.
func (e *Emitter) Eventf(object runtime.Object, eventType, reason, messageFmt string, args ...any) {
	e.emit(object, nil, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (e *Emitter) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventType, reason, messageFmt string, args ...any) {
	e.emit(object, annotations, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

func (e *Emitter) emit(obj runtime.Object, annotations map[string]string, eventType, reason, message string) {
	ref, err := reference.GetReference(e.scheme, obj)
	if err != nil {
		klog.ErrorS(err, "Cannot name the object of an Event, not recording it", "type", eventType, "reason", reason, "message", message)
		return
	}
	if eventType != corev1.EventTypeNormal && eventType != corev1.EventTypeWarning {
		klog.ErrorS(nil, "Unsupported Event type, not recording it", "type", eventType, "reason", reason, "object", klog.KRef(ref.Namespace, ref.Name))
		return
	}
	now := e.opts.Clock.Now()
	key := keyOf(ref)
	e.mu.Lock()
	e.seq++
	occ := &occurrence{eventKey: eventKey{eventType, reason, message}, annotations: annotations, count: 1, first: now, last: now, seq: e.seq}
	o := e.objects[key]
	if o == nil {
		o = &object{ref: *ref}
		e.objects[key] = o
	}
	superseded := o.add(occ)
	e.mu.Unlock()
	e.count(occ.eventKey, resultEmitted, 1)
	if superseded != nil {
		e.count(superseded.eventKey, resultSuperseded, superseded.count)
	}
	e.queue.Add(key)
}

// Pending is how many emitted Events are not written yet (nor superseded
// or abandoned).
func (e *Emitter) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, o := range e.objects {
		n += o.pending()
	}
	return n
}

// Run writes Events until ctx ends, then keeps writing what is queued for
// at most the drain timeout, and returns.
func (e *Emitter) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	writeCtx, stopWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWrites()
	var wg sync.WaitGroup
	for range e.opts.Workers {
		wg.Go(func() {
			for e.processNext(writeCtx) {
			}
		})
	}
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		ticker := e.opts.Clock.NewTicker(expirySweepPeriod)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C():
				e.expire()
			}
		}
	}()
	<-ctx.Done()
	// The queue hands out what it holds, then stops the workers; retries
	// waiting for their backoff are not waited for.
	drain := time.AfterFunc(e.opts.DrainTimeout, stopWrites)
	defer drain.Stop()
	e.queue.ShutDown()
	wg.Wait()
	<-sweepDone
	if n := e.abandonAll(); n > 0 {
		klog.InfoS("Events not written before stopping", "count", n)
	}
}

// processNext writes the pending Events of one object, and retries them
// with backoff if a write fails.
func (e *Emitter) processNext(ctx context.Context) bool {
	key, quit := e.queue.Get()
	if quit {
		return false
	}
	defer e.queue.Done(key)
	if err := e.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			klog.ErrorS(err, "Could not write an Event, will retry", "object", klog.KRef(key.namespace, key.name), "kind", key.kind, "retries", e.queue.NumRequeues(key))
		}
		e.queue.AddRateLimited(key)
		return true
	}
	e.queue.Forget(key)
	return true
}

// sync writes the pending occurrences of one object, oldest first, until
// none is left or a write fails.
func (e *Emitter) sync(ctx context.Context, key objectKey) error {
	for {
		now := e.opts.Clock.Now()
		e.mu.Lock()
		o := e.objects[key]
		if o == nil {
			e.mu.Unlock()
			return nil
		}
		o.expire(now)
		occ := o.take()
		if occ == nil {
			if o.idle() {
				delete(e.objects, key)
			}
			e.mu.Unlock()
			return nil
		}
		o.busy, o.inflight = true, occ.count
		ref, prev := o.ref, o.previous(occ.eventKey)
		e.mu.Unlock()

		w, err := e.write(ctx, &ref, occ, prev)

		e.mu.Lock()
		o.busy, o.inflight = false, 0
		var superseded *occurrence
		switch {
		case err == nil:
			o.wrote(occ.eventKey, w)
		case permanent(err):
			klog.ErrorS(err, "The API server refused an Event for good, dropping it", "object", klog.KRef(ref.Namespace, ref.Name),
				"kind", ref.Kind, "type", occ.eventType, "reason", occ.reason, "message", occ.message)
		default:
			superseded = o.add(occ)
		}
		e.mu.Unlock()
		switch {
		case err == nil:
			e.count(occ.eventKey, resultWritten, occ.count)
		case permanent(err):
			e.count(occ.eventKey, resultAbandoned, occ.count)
		default:
			if ctx.Err() == nil {
				e.count(occ.eventKey, resultError, 1)
			}
			if superseded != nil {
				e.count(superseded.eventKey, resultSuperseded, superseded.count)
			}
			return err
		}
	}
}

// write puts occ on the API server: as a higher count of prev, the Event
// of the same key written before, or else as a new Event.
func (e *Emitter) write(ctx context.Context, ref *corev1.ObjectReference, occ *occurrence, prev *written) (written, error) {
	if err := e.limiter.Wait(ctx); err != nil {
		return written{}, err
	}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	client := e.client.Events(namespace)
	if prev != nil {
		count := prev.count + occ.count
		patch, err := json.Marshal(map[string]any{"count": count, "lastTimestamp": metav1.NewTime(occ.last)})
		if err != nil {
			return written{}, err
		}
		_, err = client.Patch(ctx, prev.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return written{name: prev.name, count: count, first: prev.first, at: e.opts.Clock.Now()}, nil
		}
		if !apierrors.IsNotFound(err) {
			return written{}, err
		}
		// Gone (its TTL ran out): a new Event.
	}
	now := e.opts.Clock.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// A name of the write's time: a retry after AlreadyExists
			// takes another one.
			Name:        recordutil.GenerateEventName(ref.Name, now.UnixNano()),
			Namespace:   namespace,
			Annotations: occ.annotations,
		},
		InvolvedObject:      *ref,
		Reason:              occ.reason,
		Message:             occ.message,
		Type:                occ.eventType,
		FirstTimestamp:      metav1.NewTime(occ.first),
		LastTimestamp:       metav1.NewTime(occ.last),
		Count:               occ.count,
		Source:              corev1.EventSource{Component: e.opts.Component, Host: e.opts.Host},
		ReportingController: e.opts.Component,
		ReportingInstance:   e.opts.Host,
	}
	created, err := client.Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		return written{}, err
	}
	return written{name: created.Name, count: occ.count, first: occ.first, at: now}, nil
}

// permanent says whether a write failed for a reason a retry cannot
// change: the namespace is gone or being deleted, or the Event is invalid.
// Everything else (unreachable, throttled, overloaded, forbidden until
// the RBAC is fixed) is retried.
func permanent(err error) bool {
	var construction *rest.RequestConstructionError
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause),
		apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		errors.As(err, &construction):
		return true
	}
	return false
}

// expire drops written-Event records past EventTTL, and the state of
// objects left with nothing.
func (e *Emitter) expire() {
	now := e.opts.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, o := range e.objects {
		o.expire(now)
		if o.idle() {
			delete(e.objects, k)
		}
	}
}

// abandonAll counts what is still pending as abandoned (the Emitter stops)
// and returns how many.
func (e *Emitter) abandonAll() int {
	e.mu.Lock()
	var left []*occurrence
	for _, o := range e.objects {
		if o.normal != nil {
			left = append(left, o.normal)
		}
		left = append(left, o.warnings...)
		o.normal, o.warnings = nil, nil
	}
	e.mu.Unlock()
	n := 0
	for _, occ := range left {
		e.count(occ.eventKey, resultAbandoned, occ.count)
		n += int(occ.count)
	}
	return n
}

func (e *Emitter) count(k eventKey, result string, n int32) {
	if e.opts.Counter != nil {
		e.opts.Counter.WithLabelValues(k.eventType, k.reason, result).Add(float64(n))
	}
}
