// Package dataplane is one node's desired dataplane for the egress family
// (EgressService, EgressIP, EgressQoS, EgressFirewall, and the members
// registered beside them), as a pure model:
//
//   - what the node must do, as each member's parts (Part, Member): which
//     endpoint IPs it SNATs to which LB IP, which it steers to the host
//     node, which it routes through which table, which pods an EgressIP
//     takes, which packets it marks or drops, and what is never touched
//     (State). Compute is the specification, the Planner keeps it current
//     one object at a time;
//   - how that looks on the node: the OpenFlow flows that render it
//     (Flows, ServiceFlows, SharedFlows) and the policy-routing rules (Rule);
//   - how the bridge gets there: the diff of those flows against the
//     bridge's (Diff, Installed), and the Ledger, the agent's account of
//     what the bridge holds, which says what a sync must send.
//
// Every function here is a function of its arguments: it talks to no
// switch, kernel or API server (TestNoSystemDependencies). The node agent
// (controller/agent) reads the API objects and the bridge, and applies
// what this package says through openflow/ and controller/iprule.
// docs/dataplane.md describes the pipeline.
package dataplane

import (
	"bytes"
	"net"
	"net/netip"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

// Role is what a node's flows for one object do, the name they are
// counted under (Part.FlowRole): for an EgressService, whether the node is
// its host, steers to its host, or routes it (Network); every other member
// of the family counts its parts under one role of its own.
type Role string

const (
	// RoleHost: this node is status.host. It SNATs the egress traffic of
	// every endpoint of the service, wherever it runs, to the LB IP of the
	// endpoint's family, and un-SNATs the replies.
	RoleHost Role = "Host"
	// RoleSteer: another node is the host. This node sends the egress
	// traffic of the service's endpoints to the host, or drops it while the
	// host's bridge MAC is unknown (never lets it out with the pod IP).
	RoleSteer Role = "Steer"
	// RoleNetwork: sourceIPBy Network (host ALL). This node routes its local
	// endpoints' traffic through the service's routing table.
	RoleNetwork Role = "Network"
	// RoleQoS is no EgressService's: the role the flows of an EgressQoS's
	// part are counted under (DiffOutput.Count).
	RoleQoS Role = "QoS"
	// RoleFirewall is no EgressService's: the role the flows of an
	// EgressFirewall's part are counted under.
	RoleFirewall Role = "Firewall"
)

// NodeConfig is what Compute needs to know about the node it runs for.
type NodeConfig struct {
	// Name is the node's name, as in Node objects and endpoint nodeName.
	Name string
	// ClusterPodCIDRs hold every pod IP of the cluster network.
	ClusterPodCIDRs []netip.Prefix
	// ServiceCIDRs hold every ClusterIP.
	ServiceCIDRs []netip.Prefix
	// Fenced: this node's agent has not renewed its heartbeat Lease within
	// the Lease's duration, so the cluster may have moved its services to
	// another host. A fenced node hosts nothing: the services whose
	// status.host names it are rendered as if their host were unknown, so
	// their endpoints' egress is dropped here rather than SNATed to an LB IP
	// another node may be sending with too.
	Fenced bool
	// EgressIPUnheld is what a selected pod's egress does while its
	// EgressIP has no held address of its family; "" is
	// EgressIPUnheldDrop.
	EgressIPUnheld EgressIPUnheld
	// DNSResolvers selects the pods that answer other pods' DNS queries
	// (the cluster's CoreDNS). Their DNS replies are learned and held too
	// (Firewall.Resolvers); zero: none.
	DNSResolvers DNSResolverPods
}

// DNSResolverPods selects the cluster's DNS resolver pods: those of
// Namespace whose labels Selector matches.
type DNSResolverPods struct {
	Namespace string
	Selector  labels.Selector
}

// Selects reports whether pod is one of the resolvers.
func (r DNSResolverPods) Selects(pod *corev1.Pod) bool {
	return r.Selector != nil && pod.Namespace == r.Namespace && r.Selector.Matches(labels.Set(pod.Labels))
}

// Cluster is the API state Compute reads. Maps are keyed by
// "namespace/name" (Services, EndpointSlices by their Service) or by node
// name (Leases: the agents' heartbeat Leases).
type Cluster struct {
	EgressServices []*esv1.EgressService
	Services       map[string]*corev1.Service
	EndpointSlices map[string][]*discoveryv1.EndpointSlice
	Nodes          []*corev1.Node
	Leases         map[string]*coordinationv1.Lease
	// Pods are the cluster's pods: EgressIP acts on every pod it selects
	// (its holder SNATs them wherever they run); the pod guard and the
	// node-local stages read only those bound to this node.
	Pods []*corev1.Pod
	// Namespaces are the cluster's namespaces, whose labels EgressIP's
	// namespaceSelector reads.
	Namespaces []*corev1.Namespace
	// EgressIPs are the cluster's EgressIP objects.
	EgressIPs []*esv1.EgressIP
	// EgressQoSes are the cluster's EgressQoS objects (only those named
	// default count).
	EgressQoSes []*esv1.EgressQoS
	// EgressFirewalls are the cluster's EgressFirewall objects (only those
	// named default count).
	EgressFirewalls []*esv1.EgressFirewall
	// ExternalRoutes are the cluster's AdminPolicyBasedExternalRoute
	// objects; ExternalRouteHops is what this node knows of their hops
	// (their MACs, their BFD sessions).
	ExternalRoutes    []*esv1.AdminPolicyBasedExternalRoute
	ExternalRouteHops ExternalRouteNode
	// Resolved are the addresses of the firewalls' DNS names, by
	// esv1.DNSNameKey; a name absent has no answer yet.
	Resolved map[string][]netip.Addr
}

// Service is one EgressService's part of this node's dataplane.
type Service struct {
	// Key is "namespace/name".
	Key  string
	Role Role
	// LoadBalancerIPs has at most one address per family, IPv4 first
	// (RoleHost and RoleSteer).
	LoadBalancerIPs []netip.Addr
	// Endpoints are the pod IPs this node acts on, sorted: every endpoint
	// of a family with an LB IP for RoleHost and RoleSteer, this node's own
	// for RoleNetwork.
	Endpoints []netip.Addr
	// ReplyLBIPs are the LB IPs whose replies this service's flows send
	// through conntrack (RoleHost): its LoadBalancerIPs except those that a
	// service with a smaller key, hosted here too, already covers (a shared
	// LB IP needs, and can have, only one such flow).
	ReplyLBIPs []netip.Addr
	// HostMAC is the host's bridge MAC (RoleSteer); nil while unknown.
	HostMAC net.HardwareAddr
	// Table routes the endpoints' traffic; 0 means default routing.
	Table int
}

// Translations returns the SNAT this node's flows make: each endpoint of a
// service this node hosts, to that service's LB IP of its family. Steered
// and Network endpoints are not translated here.
func (s State) Translations() conntrack.Translations {
	out := conntrack.Translations{}
	for _, svc := range s.Services {
		svc.AddTranslations(out)
	}
	return out
}

// AddTranslations adds the SNAT this service's flows make on this node to
// out: nothing unless the node is its host.
func (s Service) AddTranslations(out conntrack.Translations) {
	if s.Role != RoleHost {
		return
	}
	for _, ep := range s.Endpoints {
		if lb, ok := s.LoadBalancerIP(ep); ok {
			out[ep] = lb
		}
	}
}

// Equal reports whether two Services render the same flows and rules.
func (s Service) Equal(o Service) bool {
	return s.Key == o.Key && s.Role == o.Role && s.Table == o.Table &&
		slices.Equal(s.LoadBalancerIPs, o.LoadBalancerIPs) && slices.Equal(s.ReplyLBIPs, o.ReplyLBIPs) &&
		slices.Equal(s.Endpoints, o.Endpoints) && bytes.Equal(s.HostMAC, o.HostMAC)
}

// LoadBalancerIP returns the LB IP of addr's family, if the service has one.
func (s Service) LoadBalancerIP(addr netip.Addr) (netip.Addr, bool) {
	for _, lb := range s.LoadBalancerIPs {
		if lb.Is4() == addr.Is4() {
			return lb, true
		}
	}
	return netip.Addr{}, false
}

// Problem says why part of an object, of any member of the family, is not
// programmed as asked on this node.
type Problem struct {
	// Key is the object's (ObjectKey).
	Key     string
	Reason  reasons.Reason
	Message string
}

// keyProblems are the problems of the rules of the object of key.
func keyProblems(key string, rules []esv1.RuleProblem) []Problem {
	out := make([]Problem, 0, len(rules))
	for _, p := range rules {
		out = append(out, Problem{Key: key, Reason: p.Reason, Message: p.Message})
	}
	return out
}

// State is the node's whole desired dataplane, every built-in member's.
type State struct {
	// Exempt are destinations never rewritten or rerouted: the cluster pod
	// CIDRs, the service CIDRs, every address of every Node object, and
	// every host address that the agent of an existing node publishes on
	// its Lease (heartbeat.Facts.HostAddresses). Sorted.
	Exempt []netip.Prefix
	// Services, sorted by Key, only those this node acts on.
	Services []Service
	// Admitted are the addresses of this node's pods that may leave the
	// cluster as they are (AdmittedPods): the pod guard drops every other
	// pod address of the cluster CIDRs on its way out, unless a service's
	// flows act on it. Sorted. Only pods that no node-local stage concerns:
	// AdmittedLate holds the others.
	Admitted []netip.Addr
	// AdmittedLate are the admitted addresses of this node's pods whose
	// namespace has an EgressQoS or an EgressFirewall named default, or
	// an AdminPolicyBasedExternalRoute selects: they pass the stages first, and are admitted in TableEgress
	// (priorityAdmittedLate). Sorted. A pod's address is in one list or
	// the other, by its namespace.
	AdmittedLate []netip.Addr
	// Held are the addresses of this node's pods that the pod guard holds
	// (about to be an EgressService's endpoint; AdmittedPods), sorted:
	// each is dropped in TableEgress above an external route's flows.
	Held []netip.Addr
	// EgressIP is the node's EgressIP part (ComputeEgressIP).
	EgressIP EgressIPs
	// Firewall is the node's TableFirewall (ComputeFirewall); its Problems
	// are the EgressFirewall objects'.
	Firewall Firewall
	// QoS is the node's TableQoS (ComputeQoS); its Problems are the
	// EgressQoS objects'.
	QoS QoS
	// ExternalRoute is the node's AdminPolicyBasedExternalRoute part
	// (ComputeExternalRoutes).
	ExternalRoute ExternalRoutes
	// Rules are the policy-routing rules for services with a table.
	Rules []Rule
	// Problems, sorted by service.
	Problems []Problem
}

// TableResolver turns spec.network into a routing table id.
type TableResolver func(network string) (int, error)

// claimsEndpoints reports whether es acts on its Service's endpoints: it
// has a host that fits its mode, and a LoadBalancer Service.
func claimsEndpoints(es *esv1.EgressService, svc *corev1.Service) bool {
	return es.Status.Host != "" && svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(es.Spec.SourceIPBy == esv1.SourceIPByNetwork) == (es.Status.Host == esv1.HostAll)
}

// podSelector is svc's pod selector; nil when it has none (a Service
// without selector has the endpoints its slices list, and no others).
func podSelector(svc *corev1.Service) labels.Selector {
	if svc == nil || len(svc.Spec.Selector) == 0 {
		return nil
	}
	return labels.SelectorFromSet(svc.Spec.Selector)
}

// servesFamily reports whether a Service of families has endpoints of
// addr's family (every family when it names none).
func servesFamily(families []corev1.IPFamily, addr netip.Addr) bool {
	want := corev1.IPv4Protocol
	if addr.Is6() {
		want = corev1.IPv6Protocol
	}
	return len(families) == 0 || slices.Contains(families, want)
}

func selects(svc *corev1.Service, pod *corev1.Pod) bool {
	sel := podSelector(svc)
	return sel != nil && sel.Matches(labels.Set(pod.Labels))
}

// podAddresses are the addresses of a pod that has not finished, in cidrs.
func podAddresses(pod *corev1.Pod, cidrs []netip.Prefix) []netip.Addr {
	return appendPodAddresses(make([]netip.Addr, 0, len(pod.Status.PodIPs)), pod, cidrs)
}

// appendPodAddresses appends podAddresses to dst: a caller that only reads
// them reuses one buffer across pods.
func appendPodAddresses(dst []netip.Addr, pod *corev1.Pod, cidrs []netip.Prefix) []netip.Addr {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return dst
	}
	for _, ip := range pod.Status.PodIPs {
		if addr, err := netip.ParseAddr(ip.IP); err == nil && endpoints.Contains(cidrs, addr.Unmap()) {
			dst = append(dst, addr.Unmap())
		}
	}
	return dst
}

func key(namespace, name string) string { return namespace + "/" + name }

func sourceIPBy(es *esv1.EgressService) esv1.SourceIPMode {
	if es.Spec.SourceIPBy == "" {
		return esv1.SourceIPByLoadBalancerIP
	}
	return es.Spec.SourceIPBy
}

// lbIPs returns the Service's LB IPs, IPv4 first, one per family at most.
func lbIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	v4, v6 := endpoints.LoadBalancerIPs(svc)
	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

func hostMAC(lease *coordinationv1.Lease) net.HardwareAddr {
	if lease == nil {
		return nil
	}
	mac, err := net.ParseMAC(heartbeat.ReadFacts(lease).BridgeMAC)
	if err != nil {
		return nil
	}
	return mac
}

// exemptions are the destinations egressflow never rewrites or reroutes,
// as far as the Node objects tell: the cluster's pod and service CIDRs and
// the nodes' addresses. The host addresses the agents publish on their
// Leases are added to these (Compute; Planner.SetLeases).
func exemptions(node NodeConfig, nodes []*corev1.Node) []netip.Prefix {
	out := slices.Concat(node.ClusterPodCIDRs, node.ServiceCIDRs)
	for _, n := range nodes {
		for _, addr := range endpoints.NodeAddresses(n) {
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	for i, p := range out {
		out[i] = p.Masked()
	}
	slices.SortFunc(out, comparePrefixes)
	return slices.Compact(out)
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
