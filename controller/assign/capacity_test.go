package assign

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeEgressLimits: the cluster's default, the node's own limit that
// replaces it, and the cloud's, which applies as well and brings its
// subnets; an unreadable annotation is an error and a capacity of 0.
func TestNodeEgressLimits(t *testing.T) {
	const cloudKey = "cloud.network.openshift.io/egress-ipconfig"
	cloudSubnet := []netip.Prefix{netip.MustParsePrefix("10.0.128.0/18")}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		maxPerNode  int
		want        *EgressCapacity
		wantSubnets []netip.Prefix
		wantErr     string
	}{
		{name: "nothing set", maxPerNode: NoLimit},
		{name: "the cluster's default", maxPerNode: 3, want: &EgressCapacity{NoLimit, NoLimit, 3}},
		{name: "the node's own replaces the default", annotations: map[string]string{MaxEgressIPsAnnotation: "7"}, maxPerNode: 3, want: &EgressCapacity{NoLimit, NoLimit, 7}},
		{name: "the node's own 0", annotations: map[string]string{MaxEgressIPsAnnotation: "0"}, maxPerNode: NoLimit, want: &EgressCapacity{NoLimit, NoLimit, 0}},
		{name: "AWS's form: per family, and the default beside it",
			annotations: map[string]string{cloudKey: `[{"interface":"eni-1","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":14,"ipv6":15}}]`},
			maxPerNode:  20, want: &EgressCapacity{14, 15, 20}, wantSubnets: cloudSubnet},
		{name: "a family the cloud does not give holds none",
			annotations: map[string]string{cloudKey: `[{"interface":"eni-1","ifaddr":{"ipv4":"10.0.128.1/18"},"capacity":{"ipv4":14}}]`},
			maxPerNode:  NoLimit, want: &EgressCapacity{14, 0, NoLimit}, wantSubnets: cloudSubnet},
		{name: "GCP's form: both families, the smaller of it and the node's own",
			annotations: map[string]string{cloudKey: `[{"interface":"nic0","ifaddr":{"ipv4":"10.0.128.0/18","ipv6":"fd00:1::/64"},"capacity":{"ip":10}}]`, MaxEgressIPsAnnotation: "4"},
			maxPerNode:  NoLimit, want: &EgressCapacity{NoLimit, NoLimit, 4}, wantSubnets: []netip.Prefix{cloudSubnet[0], netip.MustParsePrefix("fd00:1::/64")}},
		{name: "GCP's form under a larger own limit",
			annotations: map[string]string{cloudKey: `[{"interface":"nic0","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ip":10}}]`},
			maxPerNode:  50, want: &EgressCapacity{NoLimit, NoLimit, 10}, wantSubnets: cloudSubnet},
		{name: "own limit not a number", annotations: map[string]string{MaxEgressIPsAnnotation: "lots"}, maxPerNode: NoLimit,
			want: &EgressCapacity{0, 0, 0}, wantErr: `egressflow.io/max-egress-ips "lots" is not a number`},
		{name: "own limit negative, the cloud's subnets still apply",
			annotations: map[string]string{MaxEgressIPsAnnotation: "-2", cloudKey: `[{"ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ip":10}}]`},
			maxPerNode:  NoLimit, want: &EgressCapacity{0, 0, 0}, wantSubnets: cloudSubnet, wantErr: `"-2" is not a number`},
		{name: "the cloud's not JSON", annotations: map[string]string{cloudKey: `{nope`}, maxPerNode: NoLimit,
			want: &EgressCapacity{0, 0, 0}, wantErr: "is not a JSON list of interfaces"},
		{name: "the cloud's with two interfaces", annotations: map[string]string{cloudKey: `[{},{}]`}, maxPerNode: NoLimit,
			want: &EgressCapacity{0, 0, 0}, wantErr: "lists 2 interfaces"},
		{name: "the cloud's subnet of the wrong family", annotations: map[string]string{cloudKey: `[{"ifaddr":{"ipv6":"10.0.0.0/8"}}]`}, maxPerNode: NoLimit,
			want: &EgressCapacity{0, 0, 0}, wantErr: `ifaddr.ipv6 "10.0.0.0/8" is not an ipv6 prefix`},
		{name: "the cloud's capacity negative", annotations: map[string]string{cloudKey: `[{"capacity":{"ipv4":-1}}]`}, maxPerNode: NoLimit,
			want: &EgressCapacity{0, 0, 0}, wantErr: "capacity.ipv4 is -1, below zero"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: tc.annotations}}
			got, err := NodeEgressLimits(n, tc.maxPerNode)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got.Capacity, tc.want) {
				t.Errorf("capacity %+v, want %+v", got.Capacity, tc.want)
			}
			if !reflect.DeepEqual(got.CloudSubnets, tc.wantSubnets) {
				t.Errorf("subnets %v, want %v", got.CloudSubnets, tc.wantSubnets)
			}
		})
	}
}

// TestHasRoom: each family against its own limit and both against the
// total; NoLimit and a nil capacity bound nothing.
func TestHasRoom(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for _, tc := range []struct {
		c      *EgressCapacity
		l      EgressLoad
		a      netip.Addr
		expect bool
	}{
		{nil, EgressLoad{100, 100}, v4, true},
		{&EgressCapacity{2, NoLimit, NoLimit}, EgressLoad{1, 9}, v4, true},
		{&EgressCapacity{2, NoLimit, NoLimit}, EgressLoad{2, 0}, v4, false},
		{&EgressCapacity{2, NoLimit, NoLimit}, EgressLoad{2, 0}, v6, true},
		{&EgressCapacity{NoLimit, 1, NoLimit}, EgressLoad{0, 1}, v6, false},
		{&EgressCapacity{NoLimit, NoLimit, 3}, EgressLoad{2, 1}, v4, false},
		{&EgressCapacity{NoLimit, NoLimit, 3}, EgressLoad{1, 1}, v6, true},
		{&EgressCapacity{5, 5, 0}, EgressLoad{}, v4, false},
	} {
		if got := tc.c.HasRoom(tc.a, tc.l); got != tc.expect {
			t.Errorf("capacity %+v, load %+v, %s: room %v, want %v", tc.c, tc.l, tc.a, got, tc.expect)
		}
	}
}
