// Package nodeview owns the node view: what the node agents read of the
// cluster's Nodes, published by the cluster component so that no agent
// watches Nodes.
//
// An agent reads of the Nodes only their InternalIP and ExternalIP
// addresses (the destinations it never rewrites, the peers it probes, the
// addresses EgressFirewall's nodeSelector rules match) and their labels
// (those rules' selectors). A Node object changes far more often than
// that: the kubelet reports its status every few seconds to minutes, and
// each report of each node would reach every agent watching Nodes, which
// at 5,000 nodes is tens of thousands of events per second across the
// cluster for nothing. So the leading cluster component, which watches
// the Nodes anyway, keeps one ConfigMap per node in egressflow's
// namespace (Name: "<node>.view", labelled Label=LabelValue) holding
// exactly that, and writes it only when it changes: a node's join, its
// removal, a change of its addresses or of its labels (but for the
// egress-service labels the cluster component itself writes). The agents
// watch those ConfigMaps (Reader).
//
// Each view names its Node as its owner, so that the garbage collector
// deletes it with the Node even while no cluster component runs.
package nodeview

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egressflow/egressflow/controller/assign"
)

const (
	// Label marks the node views, so that readers watch only them.
	Label = "egressflow.io/node-view"
	// LabelValue is Label's value: the format of the data below.
	LabelValue = "v1"
	// nameSuffix makes a node's view name.
	nameSuffix = ".view"

	// The data keys: the node's name, its addresses (one "<type> <IP>"
	// per line, in the Node's order) and its labels (a JSON object).
	keyNode      = "node"
	keyAddresses = "addresses"
	keyLabels    = "labels"
)

// Name is the name of node's view, and false when node's name is too long
// to take the suffix (a ConfigMap name is a DNS subdomain of at most 253
// characters): such a node has no view.
func Name(node string) (string, bool) {
	name := node + nameSuffix
	return name, len(validation.IsDNS1123Subdomain(name)) == 0
}

// Selector selects the node views.
func Selector() string {
	return labels.SelectorFromSet(labels.Set{Label: LabelValue}).String()
}

// Data is the view of n: its name, its InternalIP and ExternalIP addresses
// and its labels but the egress-service ones.
func Data(n *corev1.Node) map[string]string {
	var addrs []string
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if _, err := netip.ParseAddr(a.Address); err == nil {
			addrs = append(addrs, string(a.Type)+" "+a.Address)
		}
	}
	plain := map[string]string{}
	for k, v := range n.Labels {
		if !assign.IsLabelKey(k) {
			plain[k] = v
		}
	}
	encoded, err := json.Marshal(plain) // sorted keys: equal labels, equal data
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	return map[string]string{keyNode: n.Name, keyAddresses: strings.Join(addrs, "\n"), keyLabels: string(encoded)}
}

// Desired is the ConfigMap that publishes n's view in namespace, and false
// when n has none (Name).
func Desired(namespace string, n *corev1.Node) (*corev1.ConfigMap, bool) {
	name, ok := Name(n.Name)
	if !ok {
		return nil, false
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace, Labels: map[string]string{Label: LabelValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}},
		},
		Data: Data(n),
	}, true
}

// UpToDate says whether cm publishes want (Desired): same data, label and
// owner.
func UpToDate(cm, want *corev1.ConfigMap) bool {
	if !maps.Equal(cm.Data, want.Data) || cm.Labels[Label] != LabelValue || len(cm.OwnerReferences) != 1 {
		return false
	}
	return cm.OwnerReferences[0].UID == want.OwnerReferences[0].UID
}

// Decode reads a view back as the Node it shows: name, labels and
// addresses, nothing else. It fails on a ConfigMap that is not a view or
// whose data do not parse.
func Decode(cm *corev1.ConfigMap) (*corev1.Node, error) {
	node := cm.Data[keyNode]
	if name, ok := Name(node); !ok || name != cm.Name {
		return nil, fmt.Errorf("node view %s: names node %q", cm.Name, node)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := json.Unmarshal([]byte(cm.Data[keyLabels]), &n.Labels); err != nil {
		return nil, fmt.Errorf("node view %s: labels: %w", cm.Name, err)
	}
	for line := range strings.Lines(cm.Data[keyAddresses]) {
		kind, addr, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		t := corev1.NodeAddressType(kind)
		if _, err := netip.ParseAddr(addr); !ok || err != nil || (t != corev1.NodeInternalIP && t != corev1.NodeExternalIP) {
			return nil, fmt.Errorf("node view %s: address %q is not \"InternalIP|ExternalIP <IP>\"", cm.Name, line)
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: t, Address: addr})
	}
	return n, nil
}
