// Package v1 holds the kind of the API group network.operator.openshift.io,
// version v1, that egressflow serves: EgressRouter (egressrouter.go).
// It has the Go types, their registration in a scheme, and the kubebuilder
// markers from which `make manifests` generates the CRD in deploy/crds/. The
// deepcopy functions (zz_generated.deepcopy.go) and the typed client,
// informers, listers and apply configurations under controller/generated/
// are generated from these types by `make generate`; never edit them by hand.
// They share one clientset with k8s.ovn.org: NetworkOperatorV1() beside
// K8sV1().
//
// It also holds the one reading of the fields egressflow interprets
// (EgressRouterSpec.Read): the reserved addresses, the redirect rules and
// the fallback, with a problem for each part that cannot be served. It is
// pure: no API call, no flow.
//
// The fields follow OpenShift's API exactly, so that an EgressRouter
// written for OpenShift applies unchanged. Beyond them:
//   - the CRD refuses what OpenShift's network operator would only fail on
//     later: an address that is not a CIDR, a gateway that is not an
//     address of the address's family, two addresses of one family, a
//     rule's or fallback's destination that is not an address, a port
//     outside 1-65535, two rules on one port and protocol, and a redirect
//     with neither rules nor a fallback; it bounds the rules
//     (MaxEgressRouterRules);
//   - status.holder names the node that serves the router (the reference
//     serves it from a pod, whose node kubectl shows instead).
//
// +k8s:deepcopy-gen=package
// +groupName=network.operator.openshift.io
// +groupGoName=NetworkOperator
// +kubebuilder:object:generate=true
package v1
