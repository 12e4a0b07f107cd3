package dataplane

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

// AdminPolicyBasedExternalRoute's first stage: which next hops each
// namespace's pods send their egress through. The flows and groups that
// send a node's pods through the live ones are the second stage
// (externalroute_part.go).
//
// The rules, where the API leaves a choice:
//   - Several policies that select one namespace merge their hops, as the
//     reference does; an address listed by several (static, or a gateway
//     pod several dynamic hops select) is one hop, followed with BFD if any
//     of them asks for it, so that a dead gateway is always detected where
//     it can be.
//   - A dynamic hop's gateway is a Running pod that is not being deleted;
//     without BFD it must also be Ready (its readiness is then its only
//     liveness), with BFD the session decides.
//   - A dynamic hop without networkAttachmentName takes a host-networked
//     pod's addresses (its node's); with one, the addresses the pod's
//     network-status annotation lists for that network. A pod that has
//     neither is not a hop, and the policy says why.

// ExternalHop is a next hop of a namespace's egress through external
// gateways.
type ExternalHop struct {
	IP netip.Addr
	// BFD: the hop's liveness is a BFD session's, not its pod's readiness.
	BFD bool
}

// NetworkStatusAnnotation is where Multus records the networks of a pod
// and their addresses (the Network Plumbing Working Group's convention).
const NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"

// networkStatus is one entry of NetworkStatusAnnotation.
type networkStatus struct {
	Name string   `json:"name"`
	IPs  []string `json:"ips"`
}

// ComputeExternalRouteHops is the specification of the first stage: for
// each namespace that a policy selects, its next hops, sorted by address
// (IPv4 first); and the problems of the policies, keyed by
// ObjectKey(APIExternalRoute, "", name).
func ComputeExternalRouteHops(routes []*esv1.AdminPolicyBasedExternalRoute, namespaces []*corev1.Namespace, pods []*corev1.Pod) (map[string][]ExternalHop, []Problem) {
	nsLabels := make(map[string]labels.Set, len(namespaces))
	for _, ns := range namespaces {
		nsLabels[ns.Name] = ns.Labels
	}
	// By namespace and name, so that the problems come in one order.
	pods = slices.SortedFunc(slices.Values(pods), byNamespacedName)
	hopSets := map[string][]map[netip.Addr]bool{} // namespace -> the hops of each policy selecting it
	var problems []Problem
	for _, route := range sortedByName(routes) {
		from, hops, routeProblems := readExternalRoute(route, nsLabels, pods)
		problems = append(problems, routeProblems...)
		if from == nil {
			continue
		}
		for ns, set := range nsLabels {
			if from.Matches(set) {
				hopSets[ns] = append(hopSets[ns], hops)
			}
		}
	}
	out := make(map[string][]ExternalHop, len(hopSets))
	for ns, sets := range hopSets {
		if merged := mergeHops(sets); len(merged) > 0 {
			out[ns] = merged
		}
	}
	return out, problems
}

// readExternalRoute reads one policy (esv1.AdminPolicyBasedExternalRouteSpec.Read):
// its namespace selector (nil when it cannot be read), its hops, each
// address with whether BFD follows it, and its problems, keyed: the
// spec's, and those of the gateway pods its dynamic hops select.
func readExternalRoute(route *esv1.AdminPolicyBasedExternalRoute, nsLabels map[string]labels.Set, pods []*corev1.Pod) (labels.Selector, map[netip.Addr]bool, []Problem) {
	key := ObjectKey(APIExternalRoute, "", route.Name)
	from, static, dynamic, staticProblems := route.Spec.Read()
	problems := keyProblems(key, staticProblems)
	if from == nil {
		return nil, nil, problems
	}
	hops := map[netip.Addr]bool{}
	add := func(addr netip.Addr, bfd bool) { hops[addr] = hops[addr] || bfd }
	for _, h := range static {
		add(h.Addr, h.BFD)
	}
	for _, h := range dynamic {
		if h.Problem != nil {
			problems = append(problems, Problem{Key: key, Reason: h.Problem.Reason, Message: h.Problem.Message})
			continue
		}
		where := fmt.Sprintf("spec.nextHops.dynamic[%d]", h.Index)
		for _, pod := range pods {
			set, known := nsLabels[pod.Namespace]
			if !known || !h.Namespaces.Matches(set) || !h.Pods.Matches(labels.Set(pod.Labels)) || !gatewayPodLive(pod, h.BFD) {
				continue
			}
			addrs, problem := gatewayAddrs(pod, h.NetworkAttachmentName)
			if problem != nil {
				problem.Key, problem.Message = key, where+": "+problem.Message
				problems = append(problems, *problem)
				continue
			}
			for _, addr := range addrs {
				add(addr, h.BFD)
			}
		}
	}
	return from, hops, problems
}

// mergeHops merges the hops of the policies that select one namespace:
// an address any lists is a hop, followed with BFD if any asks; sorted by
// address (IPv4 first).
func mergeHops(sets []map[netip.Addr]bool) []ExternalHop {
	merged := map[netip.Addr]bool{}
	for _, hops := range sets {
		for addr, bfd := range hops {
			merged[addr] = merged[addr] || bfd
		}
	}
	out := make([]ExternalHop, 0, len(merged))
	for _, addr := range slices.SortedFunc(maps.Keys(merged), netip.Addr.Compare) {
		out = append(out, ExternalHop{IP: addr, BFD: merged[addr]})
	}
	return out
}

// byNamespacedName orders pods by namespace/name.
func byNamespacedName(a, b *corev1.Pod) int {
	return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

func sortedByName(routes []*esv1.AdminPolicyBasedExternalRoute) []*esv1.AdminPolicyBasedExternalRoute {
	return slices.SortedFunc(slices.Values(routes), func(a, b *esv1.AdminPolicyBasedExternalRoute) int { return strings.Compare(a.Name, b.Name) })
}

// gatewayPodLive says whether a selected pod serves as a hop: Running and
// not being deleted, and Ready unless BFD follows it.
func gatewayPodLive(pod *corev1.Pod, bfd bool) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	return bfd || podReady(pod)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gatewayAddrs returns a gateway pod's addresses as a dynamic hop reads
// them: its own (its node's) when the hop names no network attachment,
// else those the pod's network-status annotation lists for the network,
// named namespace/name or, in the pod's namespace, name.
func gatewayAddrs(pod *corev1.Pod, network string) ([]netip.Addr, *Problem) {
	podName := pod.Namespace + "/" + pod.Name
	if network == "" {
		if !pod.Spec.HostNetwork {
			return nil, &Problem{Reason: reasons.GatewayNotHostNetwork,
				Message: fmt.Sprintf("pod %s names no networkAttachmentName and is not host-networked; it is not a next hop", podName)}
		}
		var out []netip.Addr
		for _, ip := range pod.Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil {
				out = append(out, addr.Unmap())
			}
		}
		return out, nil
	}
	qualified := network
	if !strings.Contains(network, "/") {
		qualified = pod.Namespace + "/" + network
	}
	var statuses []networkStatus
	raw, annotated := pod.Annotations[NetworkStatusAnnotation]
	if !annotated || json.Unmarshal([]byte(raw), &statuses) != nil {
		return nil, &Problem{Reason: reasons.GatewayNetworkUnknown,
			Message: fmt.Sprintf("pod %s has no readable %s annotation, so its address on %s is unknown; it is not a next hop", podName, NetworkStatusAnnotation, qualified)}
	}
	for _, st := range statuses {
		if st.Name != qualified && pod.Namespace+"/"+st.Name != qualified {
			continue
		}
		var out []netip.Addr
		for _, ip := range st.IPs {
			if addr, err := netip.ParseAddr(ip); err == nil {
				out = append(out, addr.Unmap())
			}
		}
		return out, nil
	}
	return nil, &Problem{Reason: reasons.GatewayNetworkUnknown,
		Message: fmt.Sprintf("pod %s is not attached to %s (its %s annotation does not list it); it is not a next hop", podName, qualified, NetworkStatusAnnotation)}
}
