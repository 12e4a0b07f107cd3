package aws_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/controller/cloud"
	"github.com/egressflow/egressflow/controller/cloud/aws"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/fakeec2"
)

// The provider through the real SDK against test/fakeec2.

func node(name, instance, instanceType string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelInstanceTypeStable: instanceType}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + instance}}
}

type env struct {
	ec2      *fakeec2.Server
	p        *aws.Provider
	ifaceA   string
	ifaceB   string
	nodeA    *corev1.Node
	ctx      context.Context
	addr     netip.Addr
	addr6    netip.Addr
	primaryB netip.Addr
}

func newEnv(t *testing.T, listedTimeout time.Duration) *env {
	e := &env{ec2: fakeec2.New(t), ctx: context.Background(),
		addr: netip.MustParseAddr("10.0.0.100"), addr6: netip.MustParseAddr("2600:1f18::100"), primaryB: netip.MustParseAddr("10.0.0.11")}
	e.ec2.AddSubnet("subnet-a", "10.0.0.0/24", "2600:1f18::/64")
	e.ec2.AddInstanceType("m5.large", 10, 10)
	e.ec2.AddInstanceType("t3.nano", 2, 2)
	e.ifaceA = e.ec2.AddInstance("i-a", "m5.large", "subnet-a", netip.MustParseAddr("10.0.0.10"))
	e.ifaceB = e.ec2.AddInstance("i-b", "t3.nano", "subnet-a", e.primaryB)
	e.p = aws.New(e.ec2.Config(), aws.Options{ListedTimeout: listedTimeout, PollInterval: 20 * time.Millisecond})
	e.nodeA = node("node-a", "i-a", "m5.large")
	return e
}

func wantReason(t *testing.T, err error, want reasons.Reason) {
	t.Helper()
	if err == nil || cloud.ReasonOf(err) != want {
		t.Fatalf("error %v, want one with reason %s", err, want)
	}
}

// TestNodeInterface: a node's primary interface, its subnets and its
// instance type's limits; a node the cloud cannot place is CloudNodeUnknown.
func TestNodeInterface(t *testing.T) {
	e := newEnv(t, time.Second)
	got, err := e.p.NodeInterface(e.ctx, e.nodeA)
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.Interface{ID: e.ifaceA, Subnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2600:1f18::/64")},
		PerInterfaceIPv4: 10, PerInterfaceIPv6: 10, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.10")}}
	if got.ID != want.ID || !slices.Equal(got.Subnets, want.Subnets) || got.PerInterfaceIPv4 != 10 || got.PerInterfaceIPv6 != 10 || !slices.Equal(got.Addresses, want.Addresses) {
		t.Errorf("interface %+v, want %+v", got, want)
	}
	for _, n := range []*corev1.Node{
		node("no-provider", "", "m5.large"),
		node("gone", "i-gone", "m5.large"),
		node("no-type", "i-a", ""),
		node("unknown-type", "i-a", "z9.huge"),
	} {
		if n.Name == "no-provider" {
			n.Spec.ProviderID = ""
		}
		_, err := e.p.NodeInterface(e.ctx, n)
		wantReason(t, err, reasons.CloudNodeUnknown)
	}
}

// TestAssignMoveRelease: assign waits until EC2 lists the address; a
// move is a release then an assignment; releasing twice is no error.
func TestAssignMoveRelease(t *testing.T) {
	e := newEnv(t, 5*time.Second)
	e.ec2.SetListDelay(300 * time.Millisecond)
	for _, a := range []netip.Addr{e.addr, e.addr6} {
		start := time.Now()
		if err := e.p.Assign(e.ctx, e.ifaceA, a); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) < 300*time.Millisecond {
			t.Errorf("Assign of %s returned before EC2 listed it", a)
		}
		if h, err := e.p.Holder(e.ctx, a, ""); err != nil || h != e.ifaceA {
			t.Fatalf("holder of %s %q (%v), want %s", a, h, err, e.ifaceA)
		}
		// Assigning again, as a leader that lost the answer would, is
		// no error.
		if err := e.p.Assign(e.ctx, e.ifaceA, a); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := e.p.Release(e.ctx, e.ifaceA, a); err != nil {
				t.Fatal(err)
			}
		}
		if h, err := e.p.Holder(e.ctx, a, ""); err != nil || h != "" {
			t.Fatalf("holder of %s after release %q (%v)", a, h, err)
		}
		if got := e.ec2.Holders(a); len(got) != 0 {
			t.Fatalf("%s still on %v", a, got)
		}
	}
}

// TestErrors: each failure of EC2 carries its reason.
func TestErrors(t *testing.T) {
	e := newEnv(t, 200*time.Millisecond)
	// Throttled.
	e.ec2.Throttle(1)
	_, err := e.p.Holder(e.ctx, e.addr, "")
	wantReason(t, err, reasons.CloudThrottled)
	// A primary address is never an egress address to move.
	_, err = e.p.Holder(e.ctx, e.primaryB, "")
	wantReason(t, err, reasons.CloudAddressInUse)
	wantReason(t, e.p.Assign(e.ctx, e.ifaceA, e.primaryB), reasons.CloudAddressInUse)
	// On another interface.
	if err := e.p.Assign(e.ctx, e.ifaceA, e.addr); err != nil {
		t.Fatal(err)
	}
	wantReason(t, e.p.Assign(e.ctx, e.ifaceB, e.addr), reasons.CloudAddressInUse)
	// Full: t3.nano has 2 IPv4 addresses per interface, the primary one.
	if err := e.p.Assign(e.ctx, e.ifaceB, netip.MustParseAddr("10.0.0.101")); err != nil {
		t.Fatal(err)
	}
	err = e.p.Assign(e.ctx, e.ifaceB, netip.MustParseAddr("10.0.0.102"))
	wantReason(t, err, reasons.CloudInterfaceFull)
	// The message says what failed, and nothing that changes per call.
	if want := "EC2 AssignPrivateIpAddresses: PrivateIpAddressLimitExceeded: Number of private addresses will exceed limit."; !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "RequestID") {
		t.Errorf("message %q, want one ending %q without a request ID", err, want)
	}
	// Accepted, not listed within the timeout.
	e.ec2.SetListDelay(time.Hour)
	wantReason(t, e.p.Assign(e.ctx, e.ifaceA, netip.MustParseAddr("10.0.0.103")), reasons.CloudAssignPending)
	// Outside the subnet.
	wantReason(t, e.p.Assign(e.ctx, e.ifaceA, netip.MustParseAddr("192.0.2.1")), reasons.CloudRequestFailed)
}
