package assign

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/endpoints"
	"github.com/egressflow/egressflow/controller/reasons"
)

// Input is what the eligibility of one EgressService depends on.
type Input struct {
	// EgressService is the object being decided; required.
	EgressService *esv1.EgressService
	// Service is the Service of the same name, nil if there is none.
	Service *corev1.Service
	// EndpointSlices are the Service's slices (label kubernetes.io/service-name).
	EndpointSlices []*discoveryv1.EndpointSlice
	// PodCIDRs are the cluster network; an endpoint address outside them is
	// host-networked. Empty: every address is on the cluster network.
	PodCIDRs []netip.Prefix
}

// Eligibility is what Evaluate found about a service, before nodes are
// looked at.
type Eligibility struct {
	// Reason is "" when the service may have a host node, reasons.AllNodes for
	// sourceIPBy Network, and otherwise why it has no host.
	Reason reasons.Reason
	// Message explains Reason to a person.
	Message string
	// Selector is the parsed nodeSelector (when Reason is "").
	Selector labels.Selector
	// LocalNodes, non-nil only with externalTrafficPolicy Local, are the
	// nodes that run an endpoint of the service.
	LocalNodes map[string]bool
}

// Evaluate decides whether in.EgressService may have a host (see the package
// doc for the rules and their order).
func Evaluate(in Input) Eligibility {
	es, svc := in.EgressService, in.Service
	network := es.Spec.SourceIPBy == esv1.SourceIPByNetwork
	var selector labels.Selector
	if !network {
		var err error
		selector, err = metav1.LabelSelectorAsSelector(&es.Spec.NodeSelector)
		if err != nil {
			return Eligibility{Reason: reasons.InvalidSelector, Message: fmt.Sprintf("spec.nodeSelector is invalid: %v", err)}
		}
	}
	switch {
	case svc == nil:
		return Eligibility{Reason: reasons.ServiceNotFound, Message: fmt.Sprintf("there is no Service %s/%s", es.Namespace, es.Name)}
	case svc.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return Eligibility{Reason: reasons.NotLoadBalancer, Message: fmt.Sprintf("Service %s/%s is of type %s, not LoadBalancer", svc.Namespace, svc.Name, typeName(svc.Spec.Type))}
	case network:
		return Eligibility{Reason: reasons.AllNodes, Message: "sourceIPBy is Network: every node routes its own endpoints' traffic"}
	}
	if v4, v6 := endpoints.LoadBalancerIPs(svc); !v4.IsValid() && !v6.IsValid() {
		return Eligibility{Reason: reasons.NoIngressIP, Message: fmt.Sprintf("Service %s/%s has no IP in status.loadBalancer.ingress", svc.Namespace, svc.Name)}
	}
	if len(endpoints.OnClusterNetwork(in.EndpointSlices, in.PodCIDRs)) == 0 {
		return Eligibility{Reason: reasons.NoEndpoints, Message: fmt.Sprintf("Service %s/%s has no endpoint on the cluster network", svc.Namespace, svc.Name)}
	}
	el := Eligibility{Selector: selector}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		el.LocalNodes = endpointNodes(in.EndpointSlices)
	}
	return el
}

func typeName(t corev1.ServiceType) string {
	if t == "" {
		return string(corev1.ServiceTypeClusterIP)
	}
	return string(t)
}

// endpointNodes are the nodes that run any endpoint of the slices,
// host-networked ones included.
func endpointNodes(slices []*discoveryv1.EndpointSlice) map[string]bool {
	nodes := map[string]bool{}
	for _, s := range slices {
		if s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil && *ep.NodeName != "" {
				nodes[*ep.NodeName] = true
			}
		}
	}
	return nodes
}
