package codegen

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
)

// TestCRDBoundsMatchConstants: the generated CRDs bound their lists by
// the constants the code reads them with (a marker cannot name a
// constant): EgressQoS's and EgressFirewall's spec.egress, the external
// routes' next hops, EgressIP's addresses and status items, and an
// EgressRouter's redirect rules.
func TestCRDBoundsMatchConstants(t *testing.T) {
	for _, c := range []struct {
		file, path string // path: the dotted properties under the schema's root
		want       int
	}{
		{"k8s.ovn.org_egressqoses.yaml", "spec.egress", esv1.MaxEgressQoSRules},
		{"k8s.ovn.org_egressfirewalls.yaml", "spec.egress", esv1.MaxEgressFirewallRules},
		{"k8s.ovn.org_adminpolicybasedexternalroutes.yaml", "spec.nextHops.static", esv1.MaxExternalRouteHops},
		{"k8s.ovn.org_adminpolicybasedexternalroutes.yaml", "spec.nextHops.dynamic", esv1.MaxExternalRouteHops},
		{"k8s.ovn.org_egressips.yaml", "spec.egressIPs", esv1.MaxEgressIPAddresses},
		{"k8s.ovn.org_egressips.yaml", "status.items", esv1.MaxEgressIPAddresses},
		{"network.operator.openshift.io_egressrouters.yaml", "spec.redirect.redirectRules", nov1.MaxEgressRouterRules},
	} {
		raw, err := os.ReadFile("../../deploy/crds/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatal(err)
		}
		if len(crd.Spec.Versions) != 1 {
			t.Fatalf("%s: %d versions in the CRD", c.file, len(crd.Spec.Versions))
		}
		node := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, name := range strings.Split(c.path, ".") {
			props, _ := node["properties"].(map[string]any)
			node, _ = props[name].(map[string]any)
		}
		if got, ok := node["maxItems"].(float64); !ok || int(got) != c.want {
			t.Errorf("%s: %s maxItems %v, the constant %d", c.file, c.path, node["maxItems"], c.want)
		}
	}
}
