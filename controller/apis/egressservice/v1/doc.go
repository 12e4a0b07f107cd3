// Package v1 holds the EgressService API, group k8s.ovn.org, version v1: the
// Go types, their registration in a scheme, and the kubebuilder markers from
// which `make manifests` generates the CRD in deploy/crds/. The deepcopy
// functions (zz_generated.deepcopy.go) and the typed clientset, informers,
// listers and apply configurations under controller/generated/ are generated
// from these types by `make generate`; never edit them by hand.
//
// The fields follow the ovn-kubernetes EgressService API exactly. Beyond it,
// status carries optional conditions that say why a service has, or has not,
// a host; and the CRD validates nodeSelector operators with CEL.
//
// +k8s:deepcopy-gen=package
// +groupName=k8s.ovn.org
// +kubebuilder:object:generate=true
package v1
