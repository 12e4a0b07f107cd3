package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// Compute returns the desired dataplane of node for the cluster state. It is
// the specification of the Planner, written apart from it: it keeps no
// index and remembers nothing, and decides every service afresh, in passes
// over the whole cluster, from the objects it looks up. The Planner keeps
// the same State up to date incrementally; TestPlannerMatchesCompute holds
// it to this one through random histories. The two share only the readers
// of single objects (claimsEndpoints, lbIPs, hostMAC, exemptions,
// heartbeat.ReadFacts, endpoints.OnClusterNetwork) and nothing that
// relates one object to another.
func Compute(node NodeConfig, cluster Cluster, tables TableResolver) State {
	// The EgressServices by key: where several claim one thing, the first
	// by key has it.
	type keyed struct {
		key string
		es  *esv1.EgressService
	}
	var byKey []keyed
	for _, es := range cluster.EgressServices {
		byKey = append(byKey, keyed{key(es.Namespace, es.Name), es})
	}
	slices.SortFunc(byKey, func(a, b keyed) int { return strings.Compare(a.key, b.key) })

	// A pod that is an endpoint of several services that act on their
	// endpoints belongs to the first of them, on every node alike.
	eps := map[string][]endpoints.Endpoint{} // of the services that act
	owner := map[netip.Addr]string{}
	for _, e := range byKey {
		k, es := e.key, e.es
		if !claimsEndpoints(es, cluster.Services[k]) {
			continue
		}
		eps[k] = endpoints.OnClusterNetwork(cluster.EndpointSlices[k], node.ClusterPodCIDRs)
		for _, ep := range eps[k] {
			if _, taken := owner[ep.IP]; !taken {
				owner[ep.IP] = k
			}
		}
	}

	// An endpoint that a LoadBalancerIP-mode service claims leaves with
	// its LB IP, whatever EgressIP selects it.
	lbClaimed := func(addr netip.Addr) (string, bool) {
		for _, e := range byKey {
			if e.key == owner[addr] {
				return e.key, e.es.Status.Host != esv1.HostAll
			}
		}
		return "", false
	}
	state := State{Exempt: clusterExemptions(node, cluster), QoS: ComputeQoS(node, cluster.EgressQoSes, cluster.Pods),
		EgressIP: ComputeEgressIP(node, cluster, lbClaimed),
		Firewall: ComputeFirewall(node, cluster.EgressFirewalls, cluster.Pods, cluster.Nodes, cluster.Resolved)}
	state.Admitted, state.AdmittedLate = admittedByStage(node, cluster)
	_, state.Held = podGuard(node, cluster)
	state.ExternalRoute = ComputeExternalRoutes(node, cluster.ExternalRoutes, cluster.Namespaces, cluster.Pods, cluster.ExternalRouteHops)
	for _, e := range byKey {
		s, problems := serviceSpec(node, e.es, cluster.Services[e.key], eps[e.key], owner, cluster.Leases, tables)
		state.Problems = append(state.Problems, problems...)
		if len(s.Endpoints) > 0 {
			state.Services = append(state.Services, s)
		}
	}

	// The replies to an LB IP go through conntrack by one flow, that of
	// the first service by key hosted here with that LB IP.
	replies := map[netip.Addr]bool{}
	for i := range state.Services {
		s := &state.Services[i]
		if s.Role != RoleHost {
			continue
		}
		for _, lb := range s.LoadBalancerIPs {
			if !replies[lb] {
				replies[lb] = true
				s.ReplyLBIPs = append(s.ReplyLBIPs, lb)
			}
		}
	}

	// Each endpoint of a service with a table is routed through it, and the
	// cluster's own destinations are exempt, in the families routed. An
	// endpoint that an EgressIP selects, or that an external route sends
	// through its gateways, is not: it leaves with its egress IP or through
	// the gateways, and a table leading out of another interface would
	// carry it past br-ex.
	externallyRouted := map[netip.Addr]bool{}
	for _, part := range state.ExternalRoute.Parts {
		for _, pod := range part.Pods {
			externallyRouted[pod.Pod] = true
		}
	}
	for _, s := range state.Services {
		if s.Table != 0 {
			for _, ep := range s.Endpoints {
				if !slices.Contains(state.EgressIP.Selected, ep) && !externallyRouted[ep] {
					state.Rules = append(state.Rules, RouteFrom(ep, s.Table))
				}
			}
		}
	}
	state.Rules = append(state.Rules, ExemptionRules(state.Rules, state.Exempt)...)
	slices.SortFunc(state.Rules, Rule.Compare)
	return state
}

// clusterExemptions are the destinations egressflow never rewrites or
// reroutes: those the Node objects tell (exemptions), and every host
// address published on the Lease of an agent whose node exists. A Lease
// left behind by a deleted node exempts nothing: its addresses may since
// be anyone's.
func clusterExemptions(node NodeConfig, cluster Cluster) []netip.Prefix {
	out := exemptions(node, cluster.Nodes)
	for _, n := range cluster.Nodes {
		lease := cluster.Leases[n.Name]
		if lease == nil {
			continue
		}
		for _, addr := range heartbeat.ReadFacts(lease).HostAddresses {
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	slices.SortFunc(out, comparePrefixes)
	return slices.Compact(out)
}

// serviceSpec is one EgressService's part of node's dataplane (without its
// ReplyLBIPs) and its problems, given its Service, its endpoints on the
// cluster network, the owner of every endpoint and the agents' Leases.
func serviceSpec(node NodeConfig, es *esv1.EgressService, svc *corev1.Service, eps []endpoints.Endpoint,
	owner map[netip.Addr]string, leases map[string]*coordinationv1.Lease, tables TableResolver) (Service, []Problem) {
	k := key(es.Namespace, es.Name)
	var problems []Problem
	problem := func(reason reasons.Reason, format string, args ...any) {
		problems = append(problems, Problem{Key: k, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	if es.Status.Host == "" || svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return Service{}, nil // no host: its endpoints egress normally
	}
	if !claimsEndpoints(es, svc) {
		problem(reasons.HostMismatch, "status.host %q does not fit sourceIPBy %q", es.Status.Host, sourceIPBy(es))
		return Service{}, problems
	}

	var mine []endpoints.Endpoint
	for _, ep := range eps {
		if owner[ep.IP] != k {
			problem(reasons.EndpointClaimed, "endpoint %s already egresses through EgressService %s", ep.IP, owner[ep.IP])
			continue
		}
		mine = append(mine, ep)
	}

	s := Service{Key: k}
	host := es.Status.Host
	if host == esv1.HostAll {
		s.Role = RoleNetwork
		for _, ep := range mine {
			if ep.Node == node.Name {
				s.Endpoints = append(s.Endpoints, ep.IP)
			}
		}
	} else {
		// The host SNATs every endpoint that has an LB IP of its family,
		// wherever it runs; every other node steers them all to the host,
		// a former host included (slower nodes may still steer to it).
		s.Role = RoleSteer
		if host == node.Name && !node.Fenced {
			s.Role = RoleHost
		}
		s.LoadBalancerIPs = lbIPs(svc)
		for _, ep := range mine {
			if _, ok := s.LoadBalancerIP(ep.IP); ok {
				s.Endpoints = append(s.Endpoints, ep.IP)
			}
		}
		switch {
		case len(s.Endpoints) == 0 || s.Role == RoleHost:
		case host == node.Name: // fenced: a steering node that knows no host
			problem(reasons.Fenced, "node %s could not renew its heartbeat: it does not act as the host, and drops its endpoints' egress, until it can", node.Name)
		default:
			s.HostMAC = hostMAC(leases[host])
			if s.HostMAC == nil {
				problem(reasons.HostUnknown, "host %s has not published its bridge MAC; dropping local endpoints' egress until it does", host)
			}
		}
	}

	// A steering node needs no table: the host routes what it steers.
	if es.Spec.Network != "" && s.Role != RoleSteer && len(s.Endpoints) > 0 {
		if table, err := tables(es.Spec.Network); err != nil {
			problem(reasons.UnknownNetwork, "spec.network %q: %v; using default routing", es.Spec.Network, err)
		} else {
			s.Table = table
		}
	}
	return s, problems
}

// AdmittedPods is the pod guard's rule, the specification the Planner
// keeps up to date incrementally: it admits each address, in the cluster
// pod CIDRs, of each pod on node that has not finished, unless the address
// is held. An address is held while an EgressService that claims
// endpoints (claimsEndpoints) selects the pod through its Service's
// selector, but the Service's EndpointSlices do not list the address yet:
// the pod is about to be that service's endpoint, and must not leave with
// its own IP in the meantime. Only the Service's IP families are held: a
// single-stack Service's slices never list its pods' other address. A pod
// the agent does not know yet (its address not reported, or not seen) is
// not admitted either, nor is an address an EgressIP selects: it leaves
// with its egress IP or not at all (but see EgressIPUnheldNodeIP).
func AdmittedPods(node NodeConfig, cluster Cluster) []netip.Addr {
	admitted, _ := podGuard(node, cluster)
	return admitted
}

// podGuard returns the addresses AdmittedPods admits, and those it holds
// (about to be an endpoint, whether an EgressIP selects them or not).
func podGuard(node NodeConfig, cluster Cluster) (admitted, heldAddrs []netip.Addr) {
	selected := ComputeEgressIP(node, cluster, func(netip.Addr) (string, bool) { return "", false }).Selected
	for _, pod := range cluster.Pods {
		if pod.Spec.NodeName != node.Name {
			continue
		}
		for _, addr := range podAddresses(pod, node.ClusterPodCIDRs) {
			held := false
			for _, es := range cluster.EgressServices {
				k := key(es.Namespace, es.Name)
				svc := cluster.Services[k]
				if es.Namespace != pod.Namespace || !claimsEndpoints(es, svc) || !selects(svc, pod) ||
					!servesFamily(svc.Spec.IPFamilies, addr) {
					continue
				}
				listed := slices.ContainsFunc(endpoints.OnClusterNetwork(cluster.EndpointSlices[k], node.ClusterPodCIDRs),
					func(ep endpoints.Endpoint) bool { return ep.IP == addr })
				held = held || !listed
			}
			switch {
			case held:
				heldAddrs = append(heldAddrs, addr)
			case !slices.Contains(selected, addr):
				admitted = append(admitted, addr)
			}
		}
	}
	slices.SortFunc(admitted, netip.Addr.Compare)
	slices.SortFunc(heldAddrs, netip.Addr.Compare)
	return slices.Compact(admitted), slices.Compact(heldAddrs)
}

// admittedByStage splits AdmittedPods by where a pod is admitted: the pods
// of a namespace with an EgressQoS or an EgressFirewall named default, or
// that an AdminPolicyBasedExternalRoute selects, pass the stages first and
// are admitted late (State.AdmittedLate); the others in TableClassify.
func admittedByStage(node NodeConfig, cluster Cluster) (early, late []netip.Addr) {
	staged := externalRouteNamespaces(cluster.ExternalRoutes, cluster.Namespaces)
	for _, q := range cluster.EgressQoSes {
		if q.Name == esv1.EgressQoSName {
			staged[q.Namespace] = true
		}
	}
	for _, fw := range cluster.EgressFirewalls {
		if fw.Name == esv1.EgressFirewallName {
			staged[fw.Namespace] = true
		}
	}
	earlyPods, latePods := cluster, cluster
	earlyPods.Pods, latePods.Pods = nil, nil
	for _, pod := range cluster.Pods {
		if staged[pod.Namespace] {
			latePods.Pods = append(latePods.Pods, pod)
		} else {
			earlyPods.Pods = append(earlyPods.Pods, pod)
		}
	}
	// An address an EgressIP selects is held whichever pod has it.
	selected := ComputeEgressIP(node, cluster, func(netip.Addr) (string, bool) { return "", false }).Selected
	isSelected := func(addr netip.Addr) bool { return slices.Contains(selected, addr) }
	return slices.DeleteFunc(AdmittedPods(node, earlyPods), isSelected), slices.DeleteFunc(AdmittedPods(node, latePods), isSelected)
}
