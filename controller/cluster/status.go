package cluster

import (
	"context"
	"fmt"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/reasons"
)

// ConditionReady is the condition that says whether a service has a host
// (sourceIPBy Network: ALL) and, as its reason, why (not).
const ConditionReady = "Ready"

// statusConflictBackoff bounds the retries of a status write that conflicts
// with a concurrent writer: each retry reads the object again. Conflicts are
// rare (the controller is the only status writer), so a few quick retries
// suffice; beyond them the sync fails and the queue's backoff takes over.
var statusConflictBackoff = wait.Backoff{Steps: 5, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1}

// readyCondition is the Ready condition for decision d on es.
func readyCondition(es *esv1.EgressService, d assign.Decision, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if d.Reason == reasons.Assigned || d.Reason == reasons.AllNodes {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{
		Type:               ConditionReady,
		Status:             status,
		Reason:             string(d.Reason),
		Message:            message,
		ObservedGeneration: es.Generation,
	}
}

// upToDate says whether es's status already says host and cond (the
// condition's transition time aside).
func upToDate(es *esv1.EgressService, host string, cond metav1.Condition) bool {
	cur := meta.FindStatusCondition(es.Status.Conditions, ConditionReady)
	return es.Status.Host == host && cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason &&
		cur.Message == cond.Message && cur.ObservedGeneration == cond.ObservedGeneration
}

// statusEqual compares two statuses exactly.
func statusEqual(a, b esv1.EgressServiceStatus) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}

// writeStatus makes es's status say host and cond, retrying on conflict
// with a fresh read. It returns the object as written, or nil if nothing
// was written (already up to date, or the object is gone).
func (c *Controller) writeStatus(ctx context.Context, es *esv1.EgressService, host string, cond metav1.Condition) (*esv1.EgressService, error) {
	client := c.es.K8sV1().EgressServices(es.Namespace)
	written, err := writeStatusRetrying(es,
		func() (*esv1.EgressService, error) { return client.Get(ctx, es.Name, metav1.GetOptions{}) },
		func(cur *esv1.EgressService) bool { return upToDate(cur, host, cond) },
		func(cur *esv1.EgressService) (*esv1.EgressService, error) {
			next := cur.DeepCopy()
			next.Status.Host = host
			meta.SetStatusCondition(&next.Status.Conditions, cond)
			updated, err := client.UpdateStatus(ctx, next, metav1.UpdateOptions{})
			c.metrics.apiWritesByResult.WithLabelValues("status", writeResult(err)).Inc()
			return updated, err
		})
	if err != nil {
		return nil, fmt.Errorf("write status of EgressService %s/%s: %w", es.Namespace, es.Name, err)
	}
	return written, nil
}

// writeStatusRetrying writes obj's status through update (which changes a
// copy) unless upToDate says it already reads so, and on a conflict reads
// the object again with get and tries again. It returns the object as
// written, or nil if nothing was written (already up to date, or the
// object is gone: its delete event cleans up).
func writeStatusRetrying[T any](obj T, get func() (T, error), upToDate func(T) bool, update func(T) (T, error)) (T, error) {
	var written, none T
	first := true
	err := retry.RetryOnConflict(statusConflictBackoff, func() error {
		if !first {
			fresh, err := get()
			if err != nil {
				return err
			}
			obj = fresh
		}
		first = false
		if upToDate(obj) {
			return nil
		}
		updated, err := update(obj)
		if err != nil {
			return err
		}
		written = updated
		return nil
	})
	if apierrors.IsNotFound(err) {
		return none, nil
	}
	if err != nil {
		return none, err
	}
	return written, nil
}

func writeResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "conflict"
	}
	return "error"
}
