package v1

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestLabelSelectorIsMetaOnTheWire: the same JSON decodes into both types
// alike, and AsMeta gives the metav1 form of what LabelSelector decoded.
func TestLabelSelectorIsMetaOnTheWire(t *testing.T) {
	for _, doc := range []string{
		`{}`,
		`{"matchLabels":{"app":"voice","tier":"a"}}`,
		`{"matchLabels":{"app":"voice"},"matchExpressions":[{"key":"tier","operator":"In","values":["a","b"]},
			{"key":"canary","operator":"NotIn","values":["true"]},{"key":"team","operator":"Exists"},{"key":"legacy","operator":"DoesNotExist"}]}`,
	} {
		var ours LabelSelector
		var meta metav1.LabelSelector
		if err := json.Unmarshal([]byte(doc), &ours); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if got := ours.AsMeta(); !reflect.DeepEqual(*got, meta) {
			t.Errorf("%s: AsMeta %+v, metav1 decodes %+v", doc, *got, meta)
		}
		oursJSON, _ := json.Marshal(ours)
		metaJSON, _ := json.Marshal(meta)
		if string(oursJSON) != string(metaJSON) {
			t.Errorf("%s: encodes as %s, metav1 as %s", doc, oursJSON, metaJSON)
		}
	}
}

// TestAsMetaSelects: the converted selector matches labels as the API
// documents (requirements ANDed, each operator).
func TestAsMetaSelects(t *testing.T) {
	s := LabelSelector{
		MatchLabels: map[string]string{"app": "voice"},
		MatchExpressions: []LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
			{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist},
		},
	}
	selector, err := metav1.LabelSelectorAsSelector(s.AsMeta())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		labels labels.Set
		want   bool
	}{
		{labels.Set{"app": "voice", "tier": "a"}, true},
		{labels.Set{"app": "voice", "tier": "c"}, false},
		{labels.Set{"app": "voice"}, false},
		{labels.Set{"app": "video", "tier": "b"}, false},
		{labels.Set{"app": "voice", "tier": "b", "legacy": ""}, false},
	} {
		if got := selector.Matches(c.labels); got != c.want {
			t.Errorf("%v: matches %v, want %v", c.labels, got, c.want)
		}
	}
	if everything, err := metav1.LabelSelectorAsSelector(LabelSelector{}.AsMeta()); err != nil || !everything.Empty() {
		t.Errorf("an empty selector gives %v, %v; want one that selects every pod", everything, err)
	}
}
