// Package assign is the pure decision logic of the cluster component: which
// EgressServices may have a host, which nodes may be that host, which node
// is chosen, and why not when none is. Every function here is a function of
// its arguments: no clients, no caches, no clock. The controller in
// controller/cluster feeds it API objects and node facts and applies what it
// returns.
//
// # Decisions made here
//
// Service eligibility (sourceIPBy LoadBalancerIP, checked in this order,
// first failure wins): a valid nodeSelector (InvalidSelector), the Service
// exists (ServiceNotFound), is of type LoadBalancer (NotLoadBalancer), has at
// least one IP in status.loadBalancer.ingress (NoIngressIP), and has at least
// one endpoint on the cluster network (NoEndpoints). Endpoint readiness is
// ignored, like the reference: ready, not-ready and terminating endpoints all
// count. An address is on the cluster network when it lies in one of the pod
// CIDRs the controller is configured with (controller/endpoints decides);
// with none configured every address counts.
//
// sourceIPBy Network: the Service must exist and be of type LoadBalancer;
// then the host is "ALL" (reason AllNodes) whatever its ingress IPs,
// endpoints and nodeSelector. Those only matter to SNAT, which Network mode
// does not do.
//
// Node candidacy: the node is Ready, its agent's heartbeat Lease is fresh,
// it matches nodeSelector, and, with externalTrafficPolicy Local, it runs at
// least one endpoint of the Service. Like the reference, host-networked
// endpoints count for that last test (they serve the ingress traffic that
// arrives at their node), though only cluster-network endpoints make a
// Service eligible at all.
//
// Choice: the current host is kept while it is a candidate, however
// unbalanced that is, so that restarts and leader changes move nothing.
// Otherwise the candidate with the fewest assigned services wins; ties go to
// the lowest rendezvous hash of (service, node), then to the lowest name.
// The hash spreads services that are assigned at the same moment onto
// different nodes and lets every replica compute the same answer from the
// same state.
//
// Several ingress IPs: endpoints.LoadBalancerIPs picks the first IPv4 and
// the first IPv6 address of status.loadBalancer.ingress, in list order, for
// this package and the node agent alike. The reference keeps the last of
// each; the first is the one most announcers treat as primary, and it does
// not change when an address is appended. Entries without an IP
// (hostname-only) are ignored.
//
// Node label: LabelKey. See its doc for names longer than 63 characters.
//
// # EgressIP
//
// DecideEgressIP (egressip.go) picks the node of each address of one
// EgressIP: a node labelled EgressAssignableLabel, Ready, with a live
// agent and the address in one of its agent's subnets; two addresses of
// one EgressIP never on one node; a valid holder kept; otherwise the fewest
// addresses first, ties to the rendezvous hash of (address, node), then
// the name. Which of two EgressIPs listing one address may hold it (the
// older) is the caller's to say. The reasons of addresses not held are
// reasons.NoEgressNode, NoNodeInSubnet, NodesUnavailable, AllNodesTaken,
// AddressConflict and InvalidAddress.
package assign
