// Package v1 holds the kinds of the API group k8s.ovn.org, version v1, that
// egressflow serves: EgressService (types.go), EgressQoS (egressqos.go),
// EgressFirewall (egressfirewall.go) and EgressIP (egressip.go, the only
// cluster-scoped kind).
// It has the Go types, their registration in a scheme, and the kubebuilder
// markers from which `make manifests` generates the CRDs in deploy/crds/. The
// deepcopy functions (zz_generated.deepcopy.go) and the typed clientset,
// informers, listers and apply configurations under controller/generated/
// are generated from these types by `make generate`; never edit them by hand.
//
// It also holds the one reading of the fields that egressflow interprets,
// so that the node agents and the cluster component cannot read them
// differently: the rules of EgressQoS and EgressFirewall and their problems
// (rules.go: EgressQoSSpec.Rules, EgressFirewallSpec.Rules), the addresses
// of spec.egressIPs and status.items (ParseEgressIP,
// EgressIPSpec.Addresses), a dnsName's key (DNSNameKey), and the cluster's
// EGRESSIP_UNHELD choice. These are pure: no API call, no flow.
//
// Why one package for the group, under EgressService's path: client-gen
// makes one typed client per Go package of types, and names its clientset
// method after the group and version, so a second package of k8s.ovn.org/v1
// would give a second, clashing K8sV1(). With every kind of the group here,
// the clientset has one K8sV1() with EgressServices(), EgressQoSes(),
// EgressFirewalls() and EgressIPs(), the
// informer factory one K8s().V1(), and no import path changed when
// EgressQoS, EgressFirewall and EgressIP came. The next kinds of the group
// go here too, one file each. The path keeps its historical name.
//
// The fields follow the ovn-kubernetes APIs exactly. Beyond them:
//   - EgressService's status carries optional conditions that say why a
//     service has, or has not, a host, and its CRD validates nodeSelector
//     operators with CEL;
//   - EgressQoS's CRD refuses a name other than default (only that object
//     counts, as in the reference), a dstCIDR that is not a CIDR, and
//     podSelector operators the API server does not check by itself in a
//     custom resource; it bounds spec.egress (see EgressQoSSpec);
//   - EgressFirewall's CRD refuses a name other than default, a destination
//     that sets none or several of cidrSelector, dnsName and nodeSelector, a
//     cidrSelector that is not a CIDR, a dnsName that is not a DNS name (a
//     "*." wildcard only as the first label) or is an address, and
//     nodeSelector operators the API server does not check; it bounds
//     spec.egress at the reference's 8,000 rules (MaxEgressFirewallRules);
//   - EgressIP's CRD refuses an egressIPs entry that is not an IPv4 or IPv6
//     address (a CIDR, an empty string), an address listed twice, an empty
//     list, selector operators the API server does not check, and a
//     status.items entry whose egressIP is not an address or whose node is
//     empty; it bounds egressIPs and status.items (MaxEgressIPAddresses).
//     Its status carries optional conditions. As in the reference, it has
//     no status subresource: status is written with the object.
//
// informer-gen v0.36 names the informer of EgressQoS "egressqoss" in its
// identifier (it appends an s and ignores --plural-exceptions there); the
// informer still lists and watches egressqoses through the clientset.
//
// +k8s:deepcopy-gen=package
// +groupName=k8s.ovn.org
// +kubebuilder:object:generate=true
package v1
