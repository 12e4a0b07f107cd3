//go:build e2e

package dockercluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/generated/clientset/versioned"
	"github.com/egressflow/egressflow/test/kubetest"
	"github.com/egressflow/egressflow/test/wait"
)

// qosWindow is how long each look at the external host's capture lasts:
// 50 ms probes send about 20 datagrams per pod and target in it.
const qosWindow = 1500 * time.Millisecond

// flowKey names the packets of one source to one destination.
type flowKey struct{ src, dst netip.Addr }

// TestEgressQoS: an EgressQoS `default` on the real cluster, read from the
// DSCP (IPv4) and traffic class (IPv6) of every packet the external host
// receives. The namespace holds the scenario's EgressService (endpoints on
// every node, SNATed on the host and steered from the others), a
// bystander, and two probe pods that also send to a second address of the
// external host per family. The rules exercise order (a narrower rule
// first), dstCIDR inside and outside, podSelector and both families; then
// a pod's labels change, the object is deleted (every packet unmarked,
// the endpoints still SNATed), and an object not named `default` is
// refused.
func TestEgressQoS(t *testing.T) {
	c := Start(t, Config{Nodes: 3})
	c.Install()
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	s.expectLBIPs()
	ctx := context.Background()

	// A second address per family on the external host, for dstCIDR.
	extra4 := netip.MustParseAddr(fmt.Sprintf("172.31.%d.101", c.subnet))
	extra6 := netip.MustParseAddr(fmt.Sprintf("fd00:172:31:%x::101", c.subnet))
	c.External.AddAddress(t, extra4)
	c.External.AddAddress(t, extra6)
	server := c.External.Serve(t, extra4, extra6)
	main4, main6 := server.Addr.Addr(), server.Addr6.Addr()
	targets := []string{server.Addr.String(), server.Addr6.String(), server.At(extra4).String(), server.At(extra6).String()}
	gold := c.RunProbePod(scenarioNamespace, "qa", c.Nodes[0], map[string]string{"app": "qa", "tier": "gold"}, targets...)
	plain := c.RunProbePod(scenarioNamespace, "qb", c.Nodes[1], map[string]string{"app": "qb"}, targets...)
	for _, p := range []string{gold.Name, plain.Name} {
		pod, _ := c.Kube.CoreV1().Pods(scenarioNamespace).Get(ctx, p, metav1.GetOptions{})
		c.ExpectSources(pod, targets, append(podIPs(pod), podIPs(pod)...))
	}

	qos := versioned.NewForConfigOrDie(c.API.Config(kubetest.Admin)).K8sV1().EgressQoSes(scenarioNamespace)
	_, err := qos.Create(ctx, &esv1.EgressQoS{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
			{DSCP: 46, DstCIDR: extra4.String() + "/32", PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
			{DSCP: 20, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"app": "qa"}}},
			{DSCP: 10, DstCIDR: extra6.String() + "/128"},
			{DSCP: 30, PodSelector: esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// want maps each (source, destination) to the DSCP every one of its
	// packets must carry.
	want := map[flowKey]uint8{}
	set := func(pod []string, dscps map[netip.Addr]uint8) {
		for _, ip := range pod {
			src := netip.MustParseAddr(ip)
			for dst, d := range dscps {
				if dst.Is4() == src.Is4() {
					want[flowKey{src, dst}] = d
				}
			}
		}
	}
	goldIPs, plainIPs, otherIPs := podIPs(gold), podIPs(plain), podIPs(s.bystander)
	lbs := []string{lbIPs[0].String(), lbIPs[1].String()}
	// qa: rule 0 to extra4, rule 1 elsewhere (rule 2 comes after rule 1).
	set(goldIPs, map[netip.Addr]uint8{main4: 20, main6: 20, extra4: 46, extra6: 20})
	// qb: only rule 2, to extra6.
	set(plainIPs, map[netip.Addr]uint8{main4: 0, main6: 0, extra4: 0, extra6: 10})
	// The endpoints leave with the LB IPs (SNATed on the host, steered to
	// it from the others) and rule 3's mark.
	set(lbs, map[netip.Addr]uint8{main4: 30, main6: 30})
	// The bystander matches no rule.
	set(otherIPs, map[netip.Addr]uint8{main4: 0, main6: 0})
	expectDSCPs(t, c, "rules applied", want)
	// Every agent reports it through its watermark; the leader writes it:
	// status.status in the reference's words (what its clients compare),
	// the Ready condition in egressflow's.
	const wantStatus = "EgressQoS Rules applied"
	wantReady := fmt.Sprintf("generation 1 applied on %d/%d nodes", len(c.Nodes), len(c.Nodes))
	wait.Until(t, convergeTimeout, func() error {
		got, err := qos.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		if got.Status.Status != wantStatus || ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != got.Generation || ready.Message != wantReady {
			return fmt.Errorf("status %q, Ready %+v; want %q and Ready True, %q", got.Status.Status, ready, wantStatus, wantReady)
		}
		return nil
	})
	events, err := c.Kube.CoreV1().Events(scenarioNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=EgressQoS,reason=Applied"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no Applied Event for the EgressQoS: %v", err)
	} else {
		t.Logf("status %q; Event %s: %s", wantStatus, events.Items[0].Reason, events.Items[0].Message)
	}

	// qb takes qa's labels: rule 1 now marks all it sends (before rule 2).
	patch := `{"metadata":{"labels":{"app":"qa"}}}`
	if _, err := c.Kube.CoreV1().Pods(scenarioNamespace).Patch(ctx, plain.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	set(plainIPs, map[netip.Addr]uint8{main4: 20, main6: 20, extra4: 20, extra6: 20})
	expectDSCPs(t, c, "qb relabelled app=qa", want)

	if err := qos.Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		want[k] = 0
	}
	expectDSCPs(t, c, "EgressQoS deleted", want)

	_, err = qos.Create(ctx, &esv1.EgressQoS{
		ObjectMeta: metav1.ObjectMeta{Name: "gold"},
		Spec:       esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 46}}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("an EgressQoS named gold: %v; want a refusal that names `default`", err)
	} else {
		t.Logf("an EgressQoS named gold is refused: %v", err)
	}
}

// expectDSCPs waits until a look at the external host's capture shows
// every flow of want with its DSCP and no other, then takes one more look
// in which every packet of those flows must carry it: once converged, no
// packet may be marked otherwise.
func expectDSCPs(t *testing.T, c *Cluster, stage string, want map[flowKey]uint8) {
	t.Helper()
	look := func() (map[flowKey][]uint8, []string) {
		capture := c.External.Capture(t)
		time.Sleep(qosWindow)
		seen := map[flowKey][]uint8{}
		for _, p := range capture.Stop() {
			k := flowKey{p.Src, p.Dst}
			if _, ok := want[k]; ok && !slices.Contains(seen[k], p.DSCP) {
				seen[k] = append(seen[k], p.DSCP)
			}
		}
		var wrong []string
		for k, d := range want {
			if got := seen[k]; len(got) != 1 || got[0] != d {
				wrong = append(wrong, fmt.Sprintf("%s > %s: DSCP %v, want %d", k.src, k.dst, got, d))
			}
		}
		slices.Sort(wrong)
		return seen, wrong
	}
	started := time.Now()
	wait.Until(t, convergeTimeout, func() error {
		if _, wrong := look(); len(wrong) > 0 {
			return fmt.Errorf("%s: %s", stage, strings.Join(wrong, "; "))
		}
		return nil
	})
	took := time.Since(started)
	seen, wrong := look()
	for _, w := range wrong {
		t.Errorf("%s, after converging: %s", stage, w)
	}
	t.Logf("%s: %d flows with the DSCP wanted (within %v, looks of %v); e.g. %v", stage, len(seen), took.Round(100*time.Millisecond), qosWindow, sample(seen))
}

// sample is a few of seen's flows, sorted, for the log.
func sample(seen map[flowKey][]uint8) []string {
	var out []string
	for k, d := range seen {
		out = append(out, fmt.Sprintf("%s>%s:%v", k.src, k.dst, d))
	}
	slices.Sort(out)
	return out[:min(len(out), 4)]
}
