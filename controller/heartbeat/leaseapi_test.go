package heartbeat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestRenewalIsOneRequest: an API server that refuses every request as
// API Priority and Fairness does when overloaded (429 with Retry-After)
// gets one request per renewal, not client-go's eleven, and the renewal
// reports the refusal.
func TestRenewalIsOneRequest(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"too many requests, please try again later"}`))
	}))
	defer srv.Close()
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL, QPS: -1})
	var results []RenewalResult
	r, err := NewRenewer(client.CoordinationV1(), RenewerConfig{Namespace: "ns", NodeName: "node-a", PeerFacts: true,
		Observe: func(res RenewalResult) { results = append(results, res) }})
	if err != nil {
		t.Fatal(err)
	}
	err = r.RenewOnce(context.Background())
	if !apierrors.IsTooManyRequests(err) {
		t.Errorf("RenewOnce: %v, want the 429", err)
	}
	// The first renewal reads the Lease (it does not know it yet): that
	// read is the one request.
	if got := requests.Load(); got != 1 {
		t.Errorf("the API server got %d requests for one refused renewal, want 1", got)
	}
	if r.Renewing() || len(results) != 1 || results[0] != RenewalError {
		t.Errorf("after a refused renewal: Renewing %v, results %v; want false, [error]", r.Renewing(), results)
	}
}
