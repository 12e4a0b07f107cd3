package heartbeat

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
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
		{EgressSubnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/64")}},
		{HostAddresses: []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:1::5")}},
		{FirewallUnresolvedDNS: []string{}},
		{FirewallUnresolvedDNS: []string{"shop/api.example.com", "web/a.example"}},
		{ExternalRouteRevision: "42", ExternalRouteNotes: map[string][]string{}},
		{RouterRevision: "43", Uplink: "eth1"},
		{ExternalRouteNotes: map[string][]string{"gw-a": {"next hop 172.18.0.5: BFD session down", "next hop 2001:db8::5: no neighbour answer"}}},
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
	// Written by hand: entries that are not prefixes are skipped, the
	// others read masked, in the order written.
	subnets := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationEgressSubnets: " 192.0.2.7/24,nonsense,,2001:DB8:1::5/64 ,10.0.0.1,fe80::1%eth0/64,198.51.100.0/33"}}}
	wantSubnets := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/64")}
	if got := ReadFacts(subnets).EgressSubnets; !reflect.DeepEqual(got, wantSubnets) {
		t.Errorf("egress subnets read as %v, want %v", got, wantSubnets)
	}
	if got := (Facts{EgressSubnets: wantSubnets}).annotations(time.Second)[AnnotationEgressSubnets]; got != "192.0.2.0/24,2001:db8:1::/64" {
		t.Errorf("egress subnets written as %q", got)
	}
	// Host addresses written by hand (or by a writer that does not sort):
	// read as HostAddresses would publish them, so every reader of one
	// Lease gets one list.
	hosts := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationHostAddresses: "2001:DB8::9, 192.0.2.9,nonsense,192.0.2.9,127.0.0.1,fe80::1,::ffff:198.51.100.2,,10.0.0.0/8"}}}
	wantHosts := []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8::9")}
	if got := ReadFacts(hosts).HostAddresses; !slices.Equal(got, wantHosts) {
		t.Errorf("host addresses read as %v, want %v", got, wantHosts)
	}
	if got := (Facts{HostAddresses: wantHosts}).annotations(time.Second)[AnnotationHostAddresses]; got != "192.0.2.9,198.51.100.2,2001:db8::9" {
		t.Errorf("host addresses written as %q", got)
	}
	// Unresolved names: absent is unknown (nil), "" is none; entries that
	// are not <namespace>/<name> are skipped, the rest sorted, each once,
	// and at most MaxFirewallUnresolvedDNS are written or read.
	if got := ReadFacts(&coordinationv1.Lease{}).FirewallUnresolvedDNS; got != nil {
		t.Errorf("no annotation read as %#v, want nil", got)
	}
	names := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationFirewallUnresolvedDNS: "web/b.example, shop/a.example,nonsense,/x,shop/,web/b.example,a/b/c"}}}
	if got := ReadFacts(names).FirewallUnresolvedDNS; !slices.Equal(got, []string{"shop/a.example", "web/b.example"}) {
		t.Errorf("unresolved names read as %v", got)
	}
	var many []string
	for i := range MaxFirewallUnresolvedDNS + 5 {
		many = append(many, fmt.Sprintf("ns/n%03d.example", i))
	}
	written := (Facts{FirewallUnresolvedDNS: many}).annotations(time.Second)[AnnotationFirewallUnresolvedDNS]
	if n := strings.Count(written, ",") + 1; n != MaxFirewallUnresolvedDNS {
		t.Errorf("%d unresolved names written, want %d", n, MaxFirewallUnresolvedDNS)
	}
	// External route notes: absent is unknown (nil); what is not a JSON
	// object of string lists reads as none; empty messages and policies
	// are dropped, the rest sorted, each once, cut to
	// MaxExternalRouteNoteLength, and at most MaxExternalRouteNotes in
	// all, the first policies first.
	if got := ReadFacts(&coordinationv1.Lease{}).ExternalRouteNotes; got != nil {
		t.Errorf("no notes annotation read as %#v, want nil", got)
	}
	for _, v := range []string{"nonsense", `["a"]`, `{"a": 1}`, ""} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationExternalRouteNotes: v}}}
		if got := ReadFacts(l).ExternalRouteNotes; got == nil || len(got) != 0 {
			t.Errorf("notes %q read as %#v, want none (not nil)", v, got)
		}
	}
	long := strings.Repeat("é", MaxExternalRouteNoteLength) // 2 bytes each: cut inside one
	handWritten := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationExternalRouteNotes: `{"b": ["z", "y", "z", ""], "": ["x"], "a": [], "c": ["` + long + `"]}`}}}
	gotNotes := ReadFacts(handWritten).ExternalRouteNotes
	wantNotes := map[string][]string{"b": {"y", "z"}, "c": {strings.Repeat("é", MaxExternalRouteNoteLength/2)}}
	if !reflect.DeepEqual(gotNotes, wantNotes) {
		t.Errorf("notes read as %q, want %q", gotNotes, wantNotes)
	}
	manyNotes := map[string][]string{}
	for i := range MaxExternalRouteNotes + 5 {
		policy := fmt.Sprintf("p%03d", i%7)
		manyNotes[policy] = append(manyNotes[policy], fmt.Sprintf("note %03d", i))
	}
	written = (Facts{ExternalRouteNotes: manyNotes}).annotations(time.Second)[AnnotationExternalRouteNotes]
	readBack := ReadFacts(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationExternalRouteNotes: written}}}).ExternalRouteNotes
	total := 0
	for _, m := range readBack {
		total += len(m)
	}
	if total != MaxExternalRouteNotes || len(readBack["p000"]) != len(manyNotes["p000"]) || len(readBack["p006"]) >= len(manyNotes["p006"]) {
		t.Errorf("%d notes written (%d of p000, %d of p006), want %d, the first policies whole", total, len(readBack["p000"]), len(readBack["p006"]), MaxExternalRouteNotes)
	}
	bad := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationSteerAddresses: "192.0.2.1, nonsense ,"}}}
	if got := ReadFacts(bad).SteerAddresses; len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("unparseable addresses kept: %v", got)
	}
}

// TestFactsEqual: every field counts, and Facts holding addresses and
// prefixes compare without reflection.
func TestFactsEqual(t *testing.T) {
	full := Facts{BridgeMAC: "02:00:00:00:00:01", SyncState: SyncStateSynced, QoSRevision: "5", FirewallRevision: "6",
		SteerAddresses: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, EgressSubnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		HostAddresses: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.1")}}
	same := full
	same.SteerAddresses = slices.Clone(full.SteerAddresses)
	same.EgressSubnets = slices.Clone(full.EgressSubnets)
	same.HostAddresses = slices.Clone(full.HostAddresses)
	if !full.Equal(same) || !(Facts{}).Equal(Facts{}) {
		t.Error("equal facts compare unequal")
	}
	for name, change := range map[string]func(*Facts){
		"BridgeMAC":                   func(f *Facts) { f.BridgeMAC = "" },
		"SyncState":                   func(f *Facts) { f.SyncState = SyncStateFailed },
		"QoSRevision":                 func(f *Facts) { f.QoSRevision = "7" },
		"FirewallRevision":            func(f *Facts) { f.FirewallRevision = "7" },
		"SteerAddresses":              func(f *Facts) { f.SteerAddresses = []netip.Addr{netip.MustParseAddr("192.0.2.2")} },
		"EgressSubnets":               func(f *Facts) { f.EgressSubnets = nil },
		"HostAddresses":               func(f *Facts) { f.HostAddresses = f.HostAddresses[:1] },
		"FirewallUnresolvedDNS":       func(f *Facts) { f.FirewallUnresolvedDNS = []string{"shop/a.example"} },
		"FirewallUnresolvedDNS known": func(f *Facts) { f.FirewallUnresolvedDNS = []string{} },
		"ExternalRouteRevision":       func(f *Facts) { f.ExternalRouteRevision = "8" },
		"RouterRevision":              func(f *Facts) { f.RouterRevision = "8" },
		"Uplink":                      func(f *Facts) { f.Uplink = "eth9" },
		"ExternalRouteNotes": func(f *Facts) {
			f.ExternalRouteNotes = map[string][]string{"gw": {"next hop 192.0.2.9: BFD session down"}}
		},
		"ExternalRouteNotes known": func(f *Facts) { f.ExternalRouteNotes = map[string][]string{} },
	} {
		other := same
		change(&other)
		if full.Equal(other) {
			t.Errorf("facts differing in %s compare equal", name)
		}
	}
}

// TestEgressSubnets: what an agent publishes for the addresses on its
// bridge: global unicast ones only, masked, sorted, each subnet once.
func TestEgressSubnets(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("2001:db8:1::5/64"),
		netip.MustParsePrefix("192.0.2.7/24"),
		netip.MustParsePrefix("192.0.2.8/24"), // the same subnet again
		netip.MustParsePrefix("fe80::1/64"),   // link-local
		netip.MustParsePrefix("169.254.3.1/16"),
		netip.MustParsePrefix("127.0.0.1/8"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("198.51.100.9/32"),
		netip.MustParsePrefix("10.1.2.3/16"), // private addresses are global unicast
		{},
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("198.51.100.9/32"),
		netip.MustParsePrefix("2001:db8:1::/64"),
	}
	if got := EgressSubnets(in); !reflect.DeepEqual(got, want) {
		t.Errorf("EgressSubnets = %v, want %v", got, want)
	}
	if got := EgressSubnets(nil); got != nil {
		t.Errorf("EgressSubnets(nil) = %v", got)
	}
}

// TestHostAddresses: what an agent publishes for the addresses on its
// node's interfaces: global unicast addresses outside the excluded
// prefixes, without their prefix length, sorted, each once, and no more
// than MaxHostAddresses.
func TestHostAddresses(t *testing.T) {
	excluded := []netip.Prefix{
		netip.MustParsePrefix("10.244.0.0/16"),    // pod CIDR: the pods' gateway on cni0
		netip.MustParsePrefix("fd00:10:244::/48"), // pod CIDR, IPv6
		netip.MustParsePrefix("10.96.0.0/16"),     // service CIDR
		netip.MustParsePrefix("172.18.0.50/32"),   // an egress IP
	}
	in := []netip.Prefix{
		netip.MustParsePrefix("172.18.0.11/24"), // the InternalIP
		netip.MustParsePrefix("192.168.77.2/32"),
		netip.MustParsePrefix("172.18.0.11/16"), // the same address again, another length
		netip.MustParsePrefix("fd00:172:18::11/64"),
		netip.MustParsePrefix("::ffff:198.51.100.4/128"), // IPv4-mapped: read as IPv4
		netip.MustParsePrefix("10.244.1.1/24"),
		netip.MustParsePrefix("fd00:10:244:1::1/64"),
		netip.MustParsePrefix("10.96.0.10/32"),
		netip.MustParsePrefix("172.18.0.50/32"),
		netip.MustParsePrefix("127.0.0.1/8"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("fe80::1/64"),
		netip.MustParsePrefix("169.254.169.254/32"),
		netip.MustParsePrefix("224.0.0.1/32"),
		netip.MustParsePrefix("0.0.0.0/0"),
		{},
	}
	want := []netip.Addr{
		netip.MustParseAddr("172.18.0.11"),
		netip.MustParseAddr("192.168.77.2"),
		netip.MustParseAddr("198.51.100.4"),
		netip.MustParseAddr("fd00:172:18::11"),
	}
	if got := HostAddresses(in, excluded); !slices.Equal(got, want) {
		t.Errorf("HostAddresses = %v, want %v", got, want)
	}
	// Whatever order the interfaces list them in.
	reversed := slices.Clone(in)
	slices.Reverse(reversed)
	if got := HostAddresses(reversed, excluded); !slices.Equal(got, want) {
		t.Errorf("HostAddresses of the reversed list = %v, want %v", got, want)
	}
	if got := HostAddresses(nil, excluded); got != nil {
		t.Errorf("HostAddresses(nil) = %v", got)
	}
	// Too many: the lowest MaxHostAddresses.
	var many []netip.Prefix
	for i := range MaxHostAddresses + 10 {
		many = append(many, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, byte(2 + i/250), byte(250 - i%250)}), 32))
	}
	got := HostAddresses(many, nil)
	if len(got) != MaxHostAddresses || got[0] != netip.MustParseAddr("192.0.2.1") || !slices.IsSortedFunc(got, netip.Addr.Compare) {
		t.Errorf("%d addresses published, first %v", len(got), got[0])
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
	withSubnets := r.desired(first, Facts{SyncState: SyncStateSynced, EgressSubnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	if got := withSubnets.Annotations[AnnotationEgressSubnets]; got != "192.0.2.0/24" {
		t.Errorf("egress subnets annotation %q", got)
	}
	if got := r.desired(withSubnets, Facts{}).Annotations; got[AnnotationEgressSubnets] != "" {
		t.Errorf("subnets the agent no longer has stayed on the Lease: %v", got)
	}
	withHosts := r.desired(first, Facts{HostAddresses: []netip.Addr{netip.MustParseAddr("192.168.77.2")}})
	if got := withHosts.Annotations[AnnotationHostAddresses]; got != "192.168.77.2" {
		t.Errorf("host addresses annotation %q", got)
	}
	if got := r.desired(withHosts, Facts{}).Annotations; got[AnnotationHostAddresses] != "" {
		t.Errorf("host addresses the agent no longer has stayed on the Lease: %v", got)
	}
	// The unresolved names stay until the agent knows them again (a
	// restarted agent, before its first sync), and "none" replaces them.
	withNames := r.desired(first, Facts{FirewallUnresolvedDNS: []string{"shop/a.example"}})
	if got := r.desired(withNames, Facts{}).Annotations[AnnotationFirewallUnresolvedDNS]; got != "shop/a.example" {
		t.Errorf("unresolved names of a predecessor: %q, want them kept", got)
	}
	if got, ok := r.desired(withNames, Facts{FirewallUnresolvedDNS: []string{}}).Annotations[AnnotationFirewallUnresolvedDNS]; !ok || got != "" {
		t.Errorf("no unresolved name: %q (present %v), want \"\"", got, ok)
	}
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
