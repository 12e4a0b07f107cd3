package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelSelector is metav1.LabelSelector on the wire (the same fields and
// JSON), with bounds and an operator enum that the CRD can check. A custom
// resource's schema cannot annotate metav1's types, and the API server does
// not validate a label selector inside a custom resource by itself; CEL
// could, but a CEL rule inside a list (spec.egress[]) is charged for the
// most items every enclosing list may hold, and with unbounded lists the
// server refuses the CRD ("estimated rule cost exceeds budget"). So the
// lists are bounded here. AsMeta converts to metav1.LabelSelector for
// metav1.LabelSelectorAsSelector.
type LabelSelector struct {
	// matchLabels is a map of {key,value} pairs. A single {key,value} in the matchLabels
	// map is equivalent to an element of matchExpressions, whose key field is "key", the
	// operator is "In", and the values array contains only "value". The requirements are ANDed.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// matchExpressions is a list of label selector requirements. The requirements are ANDed.
	// At most 100 (egressflow's bound: see LabelSelector).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// The CEL rules of LabelSelectorRequirement compare the operator with ==
// rather than `in` a list literal: the API server charges a list literal's
// creation on every evaluation, and an EgressFirewall holds up to 8,000 ×
// 100 requirements, whose rules must stay within the cost budget (see
// LabelSelector). Tried on the v1.36 API server: with `in`, the CRD is
// refused (1.7 times over).

// LabelSelectorRequirement is metav1.LabelSelectorRequirement with its
// operator checked by the CRD.
//
// +kubebuilder:validation:XValidation:rule="!(self.operator == 'In' || self.operator == 'NotIn') || (has(self.values) && size(self.values) > 0)",message="operators In and NotIn need at least one value"
// +kubebuilder:validation:XValidation:rule="!has(self.values) || size(self.values) == 0 || self.operator == 'In' || self.operator == 'NotIn'",message="operators Exists and DoesNotExist take no values"
type LabelSelectorRequirement struct {
	// key is the label key that the selector applies to.
	// +required
	Key string `json:"key"`

	// operator represents a key's relationship to a set of values.
	// Valid operators are In, NotIn, Exists and DoesNotExist.
	// +required
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`

	// values is an array of string values. If the operator is In or NotIn,
	// the values array must be non-empty. If the operator is Exists or DoesNotExist,
	// the values array must be empty.
	// +optional
	// +listType=atomic
	Values []string `json:"values,omitempty"`
}

// AsMeta returns the selector as a metav1.LabelSelector, whose helpers
// (metav1.LabelSelectorAsSelector) match labels with it.
func (s LabelSelector) AsMeta() *metav1.LabelSelector {
	meta := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		meta.MatchExpressions = append(meta.MatchExpressions, metav1.LabelSelectorRequirement(r))
	}
	return meta
}
