package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/test/topology"
)

// expectDSCP waits until a UDP probe from pod to dst leaves through the
// uplink and reaches the external host with src as its source and dscp as
// its DSCP (IPv4's TOS or IPv6's traffic class, read from a capture on
// the external host): every such packet of the last probe must carry it.
func (e *env) expectDSCP(pod *topology.Pod, dst netip.AddrPort, src netip.Addr, dscp uint8) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("%s to %s seen from %s with DSCP %d", pod.Name, dst, src, dscp), func() error {
		capture := e.topo.External.Capture(e.t)
		_, err := pod.Dial("udp", dst)
		packets := capture.Stop()
		if err != nil {
			return err
		}
		seen := 0
		for _, p := range packets {
			if p.Dst != dst.Addr() {
				continue
			}
			if p.Src != src {
				return fmt.Errorf("a packet from %s: %s", p.Src, p.Line)
			}
			if p.DSCP != dscp {
				return fmt.Errorf("DSCP %d: %s", p.DSCP, p.Line)
			}
			seen++
		}
		if seen == 0 {
			return fmt.Errorf("no packet captured")
		}
		return nil
	})
}

// addLabelledPod adds a pod to node n with a Pod object carrying labels.
func (e *env) addLabelledPod(n *topology.Node, name string, labels map[string]string) *topology.Pod {
	pod := n.AddPod(e.t, name)
	e.admin.CreatePod(e.t, "shop", pod, labels)
	return pod
}

// TestAgentEgressQoS marks real packets: two nodes, the dual-stack service
// web hosted on n1 with an endpoint on each node (both labelled voice), a
// voice pod and an unlabelled pod on n1, and the EgressQoS shop/default
//
//	0: DSCP 46 to the external host's IPv4 address, for voice
//	1: DSCP 20 to the external host's IPv4 address, for every pod
//	2: DSCP 34 to the external host's IPv6 address, for voice
//	3: DSCP 10 to anywhere, for every pod
//
// A capture on the external host reads each packet's DSCP. It checks rule
// order (voice gets 46 where rule 1 would give 20), dstCIDR inside and
// outside the range, the podSelector, IPv4 and IPv6, the endpoints marked
// and SNATed (the steered one marked on its own node), cluster
// destinations left unmarked, a pod relabelled into a rule, the agent's
// metric and QoS watermark, and the object deleted: unmarked again, still
// SNATed.
func TestAgentEgressQoS(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	voiceLabels := map[string]string{"app": "voice"}
	ep1, ep2 := e.addLabelledPod(n1, "ep1", voiceLabels), e.addLabelledPod(n2, "ep2", voiceLabels)
	voice, plain := e.addLabelledPod(n1, "voice", voiceLabels), e.addLabelledPod(n1, "plain", nil)
	lbs := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	e.hostWeb(n1, lbs, ep1, ep2)
	agents := e.agents

	ext4, ext6 := e.server.Addr, e.server.Addr6
	selector := esv1.LabelSelector{MatchLabels: voiceLabels}
	qos := &esv1.EgressQoS{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressQoSName},
		Spec: esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{
			{DSCP: 46, DstCIDR: ext4.Addr().String() + "/32", PodSelector: selector},
			{DSCP: 20, DstCIDR: ext4.Addr().String() + "/32"},
			{DSCP: 34, DstCIDR: ext6.Addr().String() + "/128", PodSelector: selector},
			{DSCP: 10},
		}},
	}
	ctx := context.Background()
	created, err := e.admin.ES.K8sV1().EgressQoSes("shop").Create(ctx, qos, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The internet addresses, outside the rules' dstCIDRs, are the
	// external host's too; the nodes route to them over the underlay.
	e.routeInternet()
	internet4, internet6 := e.server.At(internet[0]), e.server.At(internet[1])

	e.expectDSCP(voice, ext4, voice.IP, 46)                       // rule 0 before rule 1
	e.expectDSCP(voice, internet4, voice.IP, 10)                  // outside rules 0 and 1: rule 3
	e.expectDSCP(voice, ext6, voice.IP6, 34)                      // IPv6
	e.expectDSCP(voice, internet6, voice.IP6, 10)                 // outside rule 2
	e.expectDSCP(plain, ext4, plain.IP, 20)                       // rule 0 does not select it
	e.expectDSCP(plain, ext6, plain.IP6, 10)                      // nor rule 2
	e.expectDSCP(ep1, ext4, lbs[0], 46)                           // marked and SNATed on the host
	e.expectDSCP(ep1, ext6, lbs[1], 34)                           // in IPv6 too
	e.expectDSCP(ep2, ext4, lbs[0], 46)                           // marked on n2, steered, SNATed on n1
	e.expectDSCP(voice, e.server.At(clusterIPs[0]), voice.IP, 0)  // a ClusterIP: unmarked
	e.expectDSCP(voice, e.server.At(clusterIPs[1]), voice.IP6, 0) // in IPv6 too

	// Each agent applies every rule: its voice pods are selected by all.
	for _, n := range []string{n1.Name, n2.Name} {
		eventually(t, n+" reports its QoS rules and watermark", func() error {
			if got := samples(t, agents[n].metrics, "egressflow_agent_qos_rules")["egressflow_agent_qos_rules"]; got != 4 {
				return fmt.Errorf("egressflow_agent_qos_rules = %v, want 4", got)
			}
			return revisionAtLeast(agents[n].QoSRevision(), created.ResourceVersion)
		})
	}
	marked := samples(t, agents[n1.Name].metrics, "egressflow_agent_qos_marked_packets_total")[`egressflow_agent_qos_marked_packets_total{namespace="shop"}`]
	if marked == 0 {
		t.Errorf("n1 counts no packet marked for shop's EgressQoS")
	}

	// plain is relabelled voice: rule 0 selects it now.
	pod, err := e.admin.Kube.CoreV1().Pods("shop").Get(ctx, plain.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels = voiceLabels
	if _, err := e.admin.Kube.CoreV1().Pods("shop").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectDSCP(plain, ext4, plain.IP, 46)
	e.expectDSCP(plain, ext6, plain.IP6, 34)

	// Deleted: nothing is marked; the endpoints are still SNATed.
	if err := e.admin.ES.K8sV1().EgressQoSes("shop").Delete(ctx, esv1.EgressQoSName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectDSCP(voice, ext4, voice.IP, 0)
	e.expectDSCP(plain, ext6, plain.IP6, 0)
	e.expectDSCP(ep1, ext4, lbs[0], 0)
	e.expectDSCP(ep2, ext6, lbs[1], 0)
	eventually(t, "n1's QoS rules gone", func() error {
		if got := samples(t, agents[n1.Name].metrics, "egressflow_agent_qos_rules")["egressflow_agent_qos_rules"]; got != 0 {
			return fmt.Errorf("egressflow_agent_qos_rules = %v, want 0", got)
		}
		return nil
	})
}

// revisionAtLeast returns an error unless resourceVersion got is at least
// want (both etcd revisions).
func revisionAtLeast(got, want string) error {
	g, err1 := strconv.ParseUint(got, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	if err1 != nil || err2 != nil || g < w {
		return fmt.Errorf("watermark %q, want at least %q", got, want)
	}
	return nil
}
