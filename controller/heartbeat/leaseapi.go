package heartbeat

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
)

// leaseAPI is the Lease requests a renewer makes, in one namespace.
type leaseAPI interface {
	get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// newLeaseAPI returns the Lease requests of client in namespace, each a
// single attempt when client talks to an API server.
//
// client-go retries a request the API server refused with Retry-After (a
// 429 from API Priority and Fairness, a 5xx) up to 10 times. For a
// renewal that is the wrong trade: an overloaded API server would get
// eleven requests for each renewal it cannot take, from every node at
// once, and stay overloaded. A refused renewal waits for the next tick
// instead; the Lease outlasts three of them (DefaultLeaseDuration is four
// DefaultRenewIntervals).
func newLeaseAPI(client coordinationclient.CoordinationV1Interface, namespace string) leaseAPI {
	if client == nil {
		return nil
	}
	if rc, ok := client.RESTClient().(*rest.RESTClient); ok && rc != nil {
		return singleAttemptLeases{rest: rc, namespace: namespace}
	}
	// A fake clientset, which has no REST client and never retries.
	return typedLeases{client.Leases(namespace)}
}

// singleAttemptLeases makes each request once.
type singleAttemptLeases struct {
	rest      rest.Interface
	namespace string
}

func (s singleAttemptLeases) do(ctx context.Context, r *rest.Request) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	if err := r.Namespace(s.namespace).Resource("leases").MaxRetries(0).Do(ctx).Into(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s singleAttemptLeases) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return s.do(ctx, s.rest.Get().Name(name))
}

func (s singleAttemptLeases) create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.do(ctx, s.rest.Post().Body(l))
}

func (s singleAttemptLeases) update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.do(ctx, s.rest.Put().Name(l.Name).Body(l))
}

// typedLeases makes the requests through the typed client.
type typedLeases struct {
	leases coordinationclient.LeaseInterface
}

func (t typedLeases) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return t.leases.Get(ctx, name, metav1.GetOptions{})
}

func (t typedLeases) create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return t.leases.Create(ctx, l, metav1.CreateOptions{})
}

func (t typedLeases) update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return t.leases.Update(ctx, l, metav1.UpdateOptions{})
}
