package heartbeat

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestFresh(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	renew := metav1.NewMicroTime(t0)
	seconds := func(s int32) *int32 { return &s }
	cases := []struct {
		name        string
		lease       coordinationv1.Lease
		at          time.Duration // after t0
		fresh       bool
		wantExpiry  time.Duration
		expiryKnown bool
	}{
		{
			name:  "annotation duration wins over whole seconds",
			lease: lease(&renew, seconds(1), "600ms"),
			at:    599 * time.Millisecond, fresh: true, wantExpiry: 600 * time.Millisecond, expiryKnown: true,
		},
		{
			name:  "expired at exactly renewTime + duration",
			lease: lease(&renew, seconds(1), "600ms"),
			at:    600 * time.Millisecond, fresh: false, wantExpiry: 600 * time.Millisecond, expiryKnown: true,
		},
		{
			name:  "whole seconds when there is no annotation",
			lease: lease(&renew, seconds(3), ""),
			at:    2999 * time.Millisecond, fresh: true, wantExpiry: 3 * time.Second, expiryKnown: true,
		},
		{
			name:  "bad annotation falls back to seconds",
			lease: lease(&renew, seconds(3), "soon"),
			at:    time.Second, fresh: true, wantExpiry: 3 * time.Second, expiryKnown: true,
		},
		{
			name:  "negative annotation falls back to seconds",
			lease: lease(&renew, seconds(2), "-1s"),
			at:    time.Second, fresh: true, wantExpiry: 2 * time.Second, expiryKnown: true,
		},
		{
			name:  "never renewed is never fresh",
			lease: lease(nil, seconds(3), "3s"),
			at:    -time.Hour, fresh: false,
		},
		{
			name:  "no duration is never fresh",
			lease: lease(&renew, nil, ""),
			at:    -time.Hour, fresh: false,
		},
		{
			name:  "renewTime in the future (reader clock behind) is fresh",
			lease: lease(&renew, seconds(3), "3s"),
			at:    -time.Second, fresh: true, wantExpiry: 3 * time.Second, expiryKnown: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Fresh(&tc.lease, t0.Add(tc.at)); got != tc.fresh {
				t.Errorf("Fresh = %v, want %v", got, tc.fresh)
			}
			exp, ok := Expiry(&tc.lease)
			if ok != tc.expiryKnown || (ok && !exp.Equal(t0.Add(tc.wantExpiry))) {
				t.Errorf("Expiry = %v, %v; want %v, %v", exp, ok, t0.Add(tc.wantExpiry), tc.expiryKnown)
			}
		})
	}
}

func lease(renew *metav1.MicroTime, seconds *int32, annotation string) coordinationv1.Lease {
	l := coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: renew, LeaseDurationSeconds: seconds}}
	if annotation != "" {
		l.Annotations = map[string]string{AnnotationDuration: annotation}
	}
	return l
}

func TestFactsRoundTrip(t *testing.T) {
	cases := []Facts{
		{},
		{BridgeMAC: "02:00:00:00:00:01", SyncState: SyncStateSynced},
		{SteerAddresses: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}, SyncState: SyncStateFailed},
	}
	for _, f := range cases {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: f.annotations(time.Second)}}
		if got := ReadFacts(l); !reflect.DeepEqual(got, f) {
			t.Errorf("ReadFacts(annotations(%+v)) = %+v", f, got)
		}
		if d, ok := Duration(l); !ok || d != time.Second {
			t.Errorf("Duration = %v, %v; want 1s", d, ok)
		}
	}
	bad := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationSteerAddresses: "192.0.2.1, nonsense ,"}}}
	if got := ReadFacts(bad).SteerAddresses; len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("unparseable addresses kept: %v", got)
	}
}

// TestDesired checks what one renewal writes, on a fake clock: the holder,
// both durations, labels and annotations, and that facts the agent no longer
// has are removed while others' annotations stay.
func TestDesired(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r, err := NewRenewer(nil, RenewerConfig{Namespace: "ns", NodeName: "node-a", RenewInterval: 200 * time.Millisecond, LeaseDuration: 1500 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	first := r.desired(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"other": "kept"}}},
		Facts{BridgeMAC: "02:00:00:00:00:01", SyncState: SyncStateSyncing})
	if *first.Spec.HolderIdentity != "node-a" || *first.Spec.LeaseDurationSeconds != 2 || !first.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Fatalf("first renewal: %+v", first.Spec)
	}
	if first.Labels[LeaseLabel] != LeaseLabelValue || first.Annotations["other"] != "kept" || first.Annotations[AnnotationDuration] != "1.5s" {
		t.Fatalf("first renewal metadata: %v %v", first.Labels, first.Annotations)
	}
	acquired := first.Spec.AcquireTime.Time
	clk.Step(time.Second)
	second := r.desired(first, Facts{SyncState: SyncStateSynced})
	if _, ok := second.Annotations[AnnotationBridgeMAC]; ok {
		t.Error("a fact the agent no longer has stayed on the Lease")
	}
	if !second.Spec.AcquireTime.Time.Equal(acquired) || !second.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("second renewal: acquire %v renew %v", second.Spec.AcquireTime, second.Spec.RenewTime)
	}
	if first.Spec.RenewTime.Time.Equal(second.Spec.RenewTime.Time) {
		t.Error("desired modified its base")
	}

	if _, err := NewRenewer(nil, RenewerConfig{Namespace: "ns", NodeName: "n", RenewInterval: time.Second, LeaseDuration: time.Second}); err == nil {
		t.Error("a lease duration not longer than the renew interval was accepted")
	}
}
