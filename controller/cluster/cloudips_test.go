package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cloudv1 "github.com/egressflow/egressflow/controller/apis/cloudnetwork/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/cloud/aws"
	"github.com/egressflow/egressflow/controller/cluster"
	"github.com/egressflow/egressflow/controller/cluster/clustertest"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/test/fakeec2"
	"github.com/egressflow/egressflow/test/wait"
)

// The cloud controller on a real API server, with the AWS provider through
// the real SDK against test/fakeec2.

type cloudFixture struct {
	*clustertest.Env
	t     *testing.T
	ec2   *fakeec2.Server
	iface map[string]string // node -> its primary interface
}

func newCloudFixture(t *testing.T) *cloudFixture {
	f := &cloudFixture{Env: clustertest.Start(t), t: t, ec2: fakeec2.New(t), iface: map[string]string{}}
	f.ec2.AddSubnet("subnet-a", "10.0.0.0/24", "2600:1f18::/64")
	f.ec2.AddInstanceType("m5.large", 10, 10)
	f.ec2.AddInstanceType("t3.nano", 2, 2)
	return f
}

// node adds an instance of instanceType with primary address 10.0.0.<n>
// and its Ready egress Node, whose agent heartbeats and publishes the
// subnet.
func (f *cloudFixture) node(name, instanceType string, n int) {
	f.t.Helper()
	instance := "i-" + name
	f.iface[name] = f.ec2.AddInstance(instance, instanceType, "subnet-a", netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}))
	_, err := f.Kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{assign.EgressAssignableLabel: "", corev1.LabelInstanceTypeStable: instanceType}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + instance},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.SetNodeReady(f.t, name, true)
	f.StartAgentWith(f.t, name, clustertest.AgentRenew, clustertest.AgentExpire, "10.0.0.0/24")
}

func (f *cloudFixture) run(identity string) *clustertest.Replica {
	f.t.Helper()
	opts := options(identity)
	opts.CloudProvider = aws.New(f.ec2.Config(), aws.Options{PollInterval: 20 * time.Millisecond, ListedTimeout: 2 * time.Second})
	opts.RetryMaxDelay = 500 * time.Millisecond
	r := f.RunController(f.t, opts)
	return r
}

func (f *cloudFixture) create(addr, node string) string {
	f.t.Helper()
	name := cloudv1.ObjectName(netip.MustParseAddr(addr))
	_, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Create(context.Background(),
		&cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: cloudv1.CloudPrivateIPConfigSpec{Node: node}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return name
}

func (f *cloudFixture) setNode(name, node string) {
	f.t.Helper()
	wait.Until(f.t, settle, func() error {
		obj, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		obj.Spec.Node = node
		_, err = f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Update(context.Background(), obj, metav1.UpdateOptions{})
		return err
	})
}

// wait waits until name's status says node with reason (True only for
// Assigned), and the cloud has its address on that node's interface alone
// (nowhere for "").
func (f *cloudFixture) wait(name, node string, reason reasons.Reason) {
	f.t.Helper()
	addr, _ := cloudv1.AddressOf(name)
	wait.Until(f.t, settle, func() error {
		obj, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := statusSays(obj, node, reason); err != nil {
			return err
		}
		switch {
		case node == "" && len(f.ec2.Holders(addr)) != 0:
			return fmt.Errorf("the cloud has %s on %v, want nowhere", addr, f.ec2.Holders(addr))
		case node != "" && !slices.Equal(f.ec2.Holders(addr), []string{f.iface[node]}):
			return fmt.Errorf("the cloud has %s on %v, want %s's %s alone", addr, f.ec2.Holders(addr), node, f.iface[node])
		}
		return nil
	})
}

// statusSays is nil when obj's status says node, with reason (True only
// for Assigned).
func statusSays(obj *cloudv1.CloudPrivateIPConfig, node string, reason reasons.Reason) error {
	cond := meta.FindStatusCondition(obj.Status.Conditions, cloudv1.AssignedCondition)
	if obj.Status.Node != node || cond == nil || cond.Reason != string(reason) || (cond.Status == metav1.ConditionTrue) != (reason == reasons.Assigned) {
		return fmt.Errorf("status %+v, want node %q reason %s", obj.Status, node, reason)
	}
	return nil
}

func (f *cloudFixture) waitEvent(name, eventType string, reason reasons.Reason) {
	f.t.Helper()
	waitEventOn(f.t, f.Env, metav1.NamespaceDefault, "CloudPrivateIPConfig", name, eventType, reason, "")
}

// sample runs check every 2 ms until the test ends, and fails the test
// then with the last violation check reported ("" for none).
func (f *cloudFixture) sample(check func() string) {
	var violation atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if v := check(); v != "" {
				violation.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	f.t.Cleanup(func() {
		close(stop)
		wg.Wait()
		if v := violation.Load(); v != nil {
			f.t.Error(v)
		}
	})
}

// neverTwice checks, until the test ends, that addr is never on two
// interfaces at once.
func (f *cloudFixture) neverTwice(addr string) {
	a := netip.MustParseAddr(addr)
	f.sample(func() string {
		if h := f.ec2.Holders(a); len(h) > 1 {
			return fmt.Sprintf("%s was on %v at once", addr, h)
		}
		return ""
	})
}

// TestCloudPrivateIPConfig: assign in both families, a move (released
// before it is assigned), throttling, a full interface, a node deleted, and
// an object deleted; each state in status and Events; the egress nodes'
// capacity published.
func TestCloudPrivateIPConfig(t *testing.T) {
	f := newCloudFixture(t)
	f.node("node-a", "m5.large", 10)
	f.node("node-b", "m5.large", 11)
	f.node("node-c", "t3.nano", 12)
	f.ec2.SetListDelay(300 * time.Millisecond) // every assignment waits for EC2 to list it
	f.run("replica-a")

	// Capacity: the primary counted out, the subnets of the ENI's subnet.
	for node, want := range map[string]string{
		"node-a": `[{"interface":"` + f.iface["node-a"] + `","ifaddr":{"ipv4":"10.0.0.0/24","ipv6":"2600:1f18::/64"},"capacity":{"ipv4":9,"ipv6":10}}]`,
		"node-c": `[{"interface":"` + f.iface["node-c"] + `","ifaddr":{"ipv4":"10.0.0.0/24","ipv6":"2600:1f18::/64"},"capacity":{"ipv4":1,"ipv6":2}}]`,
	} {
		wait.Until(t, settle, func() error {
			n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := n.Annotations[cloudv1.EgressIPConfigAnnotation]; got != want {
				return fmt.Errorf("%s: %s %q, want %q", node, cloudv1.EgressIPConfigAnnotation, got, want)
			}
			return nil
		})
	}

	v4 := f.create("10.0.0.100", "node-a")
	v6 := f.create("2600:1f18::100", "node-b")
	f.neverTwice("10.0.0.100")
	f.wait(v4, "node-a", reasons.Assigned)
	f.wait(v6, "node-b", reasons.Assigned)
	f.waitEvent(v4, normal, reasons.Assigned)
	obj, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), v4, metav1.GetOptions{})
	if err != nil || !slices.Contains(obj.Finalizers, cluster.CloudReleaseFinalizer) {
		t.Fatalf("%s: finalizers %v (%v)", v4, obj.Finalizers, err)
	}

	// A move: released from node-a, then on node-b.
	f.setNode(v4, "node-b")
	f.wait(v4, "node-b", reasons.Assigned)

	// Throttled: the condition says so meanwhile, and it is assigned once
	// EC2 lets the calls through.
	f.ec2.Throttle(6)
	throttled := f.create("10.0.0.101", "node-a")
	f.waitEvent(throttled, warning, reasons.CloudThrottled)
	f.wait(throttled, "node-a", reasons.Assigned)

	// node-c's t3.nano takes one address besides its primary.
	f.wait(f.create("10.0.0.102", "node-c"), "node-c", reasons.Assigned)
	full := f.create("10.0.0.103", "node-c")
	f.wait(full, "", reasons.CloudInterfaceFull)
	f.waitEvent(full, warning, reasons.CloudInterfaceFull)

	// Its Node deleted: released, and it says why.
	if err := f.Kube.CoreV1().Nodes().Delete(context.Background(), "node-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.wait(v4, "", reasons.CloudNodeNotFound)
	f.wait(v6, "", reasons.CloudNodeNotFound)
	f.waitEvent(v6, warning, reasons.CloudNodeNotFound)

	// Deleted: released from the cloud before the object goes.
	if err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Delete(context.Background(), throttled, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, settle, func() error {
		_, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), throttled, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", throttled, err)
		}
		if h := f.ec2.Holders(netip.MustParseAddr("10.0.0.101")); len(h) > 0 {
			t.Fatalf("%s deleted while the cloud still has its address on %v", throttled, h)
		}
		return nil
	})
}

// TestCloudPrivateIPConfigLeaderChange: the leader stops in the middle of
// a move (the address assigned to the new interface, EC2 not listing it
// yet); the next leader finishes it from EC2's own answers, and the
// address is never on two interfaces.
func TestCloudPrivateIPConfigLeaderChange(t *testing.T) {
	f := newCloudFixture(t)
	f.node("node-a", "m5.large", 10)
	f.node("node-b", "m5.large", 11)
	a := f.run("replica-a")
	a.WaitLeading(t, settle)
	name := f.create("10.0.0.100", "node-a")
	f.neverTwice("10.0.0.100")
	f.wait(name, "node-a", reasons.Assigned)

	f.ec2.SetListDelay(time.Hour) // the assignment to node-b is never listed while a leads
	assigns := f.ec2.Calls("AssignPrivateIpAddresses")
	f.setNode(name, "node-b")
	wait.Until(t, settle, func() error {
		if f.ec2.Calls("AssignPrivateIpAddresses") == assigns {
			return fmt.Errorf("no assignment to node-b yet")
		}
		return nil
	})
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	f.ec2.ListAll()
	b := f.run("replica-b")
	b.WaitLeading(t, settle)
	f.wait(name, "node-b", reasons.Assigned)
	if h := f.ec2.Holders(netip.MustParseAddr("10.0.0.100")); !slices.Equal(h, []string{f.iface["node-b"]}) || strings.Contains(fmt.Sprint(h), f.iface["node-a"]) {
		t.Errorf("holders %v", h)
	}
}

// TestEgressIPOnCloud: on a cloud, an EgressIP's address gets its
// CloudPrivateIPConfig on the chosen node, and enters status.items only
// once the cloud has it there; a move takes it out of status.items before
// the cloud moves it; a deleted EgressIP's object goes, and the cloud
// releases the address.
func TestEgressIPOnCloud(t *testing.T) {
	f := newCloudFixture(t)
	f.node("node-a", "m5.large", 10)
	f.node("node-b", "m5.large", 11)
	f.ec2.SetListDelay(300 * time.Millisecond)
	f.run("replica-a")
	const addr = "10.0.0.100"
	name := cloudv1.ObjectName(netip.MustParseAddr(addr))
	f.neverTwice(addr)
	f.statusFollowsCloud("web", addr)
	// The cloud is asked to take the address from a node only once
	// status.items no longer names that node (a quorum read, at the moment
	// of the request).
	var released atomic.Int32
	f.ec2.BeforeRelease(func(iface string, a netip.Addr) {
		released.Add(1)
		eip, err := f.ES.K8sV1().EgressIPs().Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return
		}
		for _, it := range eip.Status.Items {
			if f.iface[it.Node] == iface {
				t.Errorf("the cloud is asked to release %s from %s while status.items names %s", a, iface, it.Node)
			}
		}
	})

	f.CreateEgressIP(t, "web", addr)
	first := f.waitEgressIP("web", "")
	f.wait(name, first, reasons.Assigned)
	obj, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || obj.Labels[cluster.CloudEgressIPLabel] != "web" {
		t.Fatalf("%s: labels %v (%v), want %s=web", name, obj.Labels, err, cluster.CloudEgressIPLabel)
	}
	waitEventOn(t, f.Env, metav1.NamespaceDefault, "EgressIP", "web", warning, reasons.CloudPending, "the cloud has yet to attach it")

	// The holder loses its label: the address moves, through the cloud.
	f.PatchNodeLabels(t, first, map[string]*string{assign.EgressAssignableLabel: nil})
	second := f.waitEgressIP("web", first)
	f.wait(name, second, reasons.Assigned)
	if released.Load() == 0 {
		t.Error("the move released nothing")
	}

	// Deleted: its object goes, and with it the address from the cloud.
	f.DeleteEgressIP(t, "web")
	wait.Until(t, settle, func() error {
		_, err := f.ES.CloudNetworkV1().CloudPrivateIPConfigs().Get(context.Background(), name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", name, err)
		}
		if h := f.ec2.Holders(netip.MustParseAddr(addr)); len(h) > 0 {
			return fmt.Errorf("%s still on %v", addr, h)
		}
		return nil
	})
}

// waitEgressIP waits until the EgressIP's one address is held by a node
// other than not, and returns it.
func (f *cloudFixture) waitEgressIP(name, not string) string {
	f.t.Helper()
	node := ""
	wait.Until(f.t, settle, func() error {
		eip := f.GetEgressIP(f.t, name)
		if len(eip.Status.Items) != 1 || eip.Status.Items[0].Node == not {
			return fmt.Errorf("items %+v (conditions %+v)", eip.Status.Items, eip.Status.Conditions)
		}
		node = eip.Status.Items[0].Node
		return nil
	})
	return node
}

// statusFollowsCloud checks, until the test ends, that whenever the
// EgressIP's status.items names a node for addr, the cloud has addr on
// that node's interface: read between two reads of the cloud, one of them
// must show it (an item is written only after the cloud lists it, and
// taken out before the cloud releases it).
func (f *cloudFixture) statusFollowsCloud(eipName, addr string) {
	a := netip.MustParseAddr(addr)
	f.sample(func() string {
		before := f.ec2.Holders(a)
		eip, err := f.ES.K8sV1().EgressIPs().Get(context.Background(), eipName, metav1.GetOptions{})
		after := f.ec2.Holders(a)
		if err != nil {
			return ""
		}
		for _, it := range eip.Status.Items {
			if iface := f.iface[it.Node]; it.EgressIP == addr && !slices.Contains(before, iface) && !slices.Contains(after, iface) {
				return fmt.Sprintf("status.items says %s on %s while the cloud has it on %v, then %v", addr, it.Node, before, after)
			}
		}
		return ""
	})
}

// TestCloudPrivateIPConfigMetal: with the default provider, metal, an
// assignment is recorded at once, a move too; an object whose node is
// deleted says NodeNotFound; a deleted object goes (its finalizer
// removed); no node gets a capacity annotation.
func TestCloudPrivateIPConfigMetal(t *testing.T) {
	env := clustertest.Start(t)
	for _, n := range []string{"node-a", "node-b"} {
		env.EgressNode(t, n, nil, "192.0.2.0/24")
	}
	env.RunController(t, options("replica-a")).WaitLeading(t, settle)
	client := env.ES.CloudNetworkV1().CloudPrivateIPConfigs()
	ctx := context.Background()
	name := cloudv1.ObjectName(netip.MustParseAddr("2001:db8::10"))
	if _, err := client.Create(ctx, &cloudv1.CloudPrivateIPConfig{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cloudv1.CloudPrivateIPConfigSpec{Node: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(node string, reason reasons.Reason) {
		t.Helper()
		wait.Until(t, settle, func() error {
			obj, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return statusSays(obj, node, reason)
		})
	}
	waitStatus("node-a", reasons.Assigned)
	obj, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Spec.Node = "node-b"
	if _, err := client.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("node-b", reasons.Assigned)
	if err := env.Kube.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("", reasons.CloudNodeNotFound)
	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, settle, func() error {
		if _, err := client.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (%v)", name, err)
		}
		return nil
	})
	n, err := env.Kube.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n.Annotations[cloudv1.EgressIPConfigAnnotation]; ok {
		t.Errorf("metal published %s=%q", cloudv1.EgressIPConfigAnnotation, v)
	}
}
