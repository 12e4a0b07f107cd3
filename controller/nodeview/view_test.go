package nodeview

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func worker() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", UID: "u1", ResourceVersion: "9",
			Labels: map[string]string{"topology.kubernetes.io/zone": "a", "egress-service.k8s.ovn.org/shop-web": ""}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: "worker-1"},
				{Type: corev1.NodeInternalIP, Address: "172.18.0.3"},
				{Type: corev1.NodeExternalIP, Address: "not-an-ip"},
				{Type: corev1.NodeInternalIP, Address: "fc00::3"},
				{Type: corev1.NodeExternalIP, Address: "192.0.2.3"},
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/app:v1"}, SizeBytes: 1 << 20}},
		},
	}
}

// TestViewShowsWhatAgentsRead: a view reads back as the Node's name, its
// labels but the egress-service ones, and its InternalIP and ExternalIP
// addresses that parse, in order; nothing of its status reports.
func TestViewShowsWhatAgentsRead(t *testing.T) {
	n := worker()
	cm, ok := Desired("egressflow-system", n)
	if !ok {
		t.Fatal("no view for worker-1")
	}
	if cm.Name != "worker-1.view" || cm.Namespace != "egressflow-system" || cm.Labels[Label] != LabelValue {
		t.Fatalf("view identity: %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "Node" || cm.OwnerReferences[0].UID != "u1" {
		t.Errorf("owner references: %+v, want the Node", cm.OwnerReferences)
	}
	got, err := Decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Labels: map[string]string{"topology.kubernetes.io/zone": "a"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "172.18.0.3"},
			{Type: corev1.NodeInternalIP, Address: "fc00::3"},
			{Type: corev1.NodeExternalIP, Address: "192.0.2.3"},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v\nwant    %+v", got, want)
	}

	// What the kubelet reports every few seconds changes no view; what
	// agents read does.
	reported := worker()
	reported.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
	reported.Status.Images = nil
	reported.Labels["egress-service.k8s.ovn.org/shop-api"] = ""
	if !reflect.DeepEqual(Data(n), Data(reported)) {
		t.Error("a status report or an egress-service label changed the view")
	}
	for name, change := range map[string]func(*corev1.Node){
		"address": func(n *corev1.Node) { n.Status.Addresses[1].Address = "172.18.0.4" },
		"label":   func(n *corev1.Node) { n.Labels["role"] = "infra" },
	} {
		changed := worker()
		change(changed)
		if reflect.DeepEqual(Data(n), Data(changed)) {
			t.Errorf("a changed %s left the view as it was", name)
		}
	}
}

// TestDecodeRefusesWhatIsNotAView: a ConfigMap edited by hand, or named
// for another node, is refused with an error, never read as a node.
func TestDecodeRefusesWhatIsNotAView(t *testing.T) {
	good, _ := Desired("egressflow-system", worker())
	for name, edit := range map[string]func(*corev1.ConfigMap){
		"other node":      func(cm *corev1.ConfigMap) { cm.Data[keyNode] = "worker-2" },
		"no node":         func(cm *corev1.ConfigMap) { delete(cm.Data, keyNode) },
		"labels":          func(cm *corev1.ConfigMap) { cm.Data[keyLabels] = "{" },
		"no labels":       func(cm *corev1.ConfigMap) { delete(cm.Data, keyLabels) },
		"address":         func(cm *corev1.ConfigMap) { cm.Data[keyAddresses] = "InternalIP 172.18.0.300" },
		"address type":    func(cm *corev1.ConfigMap) { cm.Data[keyAddresses] = "Hostname 172.18.0.3" },
		"no address type": func(cm *corev1.ConfigMap) { cm.Data[keyAddresses] = "172.18.0.3" },
	} {
		cm := good.DeepCopy()
		edit(cm)
		if n, err := Decode(cm); err == nil {
			t.Errorf("%s: decoded as %+v, want an error", name, n)
		}
	}
	if _, ok := Name(strings.Repeat("n", 250)); ok {
		t.Error("a 250-character node name must have no view (255 characters)")
	}
}

// TestReaderListsTheViewsThatDecode: the reader lists every view that
// decodes, leaves out one that does not, and follows a new version.
func TestReaderListsTheViewsThatDecode(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	a, _ := Desired("ns", worker())
	a.ResourceVersion = "1"
	other := worker()
	other.Name = "worker-2"
	b, _ := Desired("ns", other)
	b.ResourceVersion = "1"
	b.Data[keyLabels] = "not json"
	for _, cm := range []*corev1.ConfigMap{a, b} {
		if err := indexer.Add(cm); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(corelisters.NewConfigMapLister(indexer).ConfigMaps("ns"))
	names := func() []string {
		nodes, err := r.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range nodes {
			out = append(out, n.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names(); !slices.Equal(got, []string{"worker-1"}) {
		t.Errorf("listed %v, want worker-1 alone", got)
	}
	if _, ok := r.Get("worker-2"); ok {
		t.Error("worker-2's broken view was read")
	}
	fixed, _ := Desired("ns", other)
	fixed.ResourceVersion = "2"
	if err := indexer.Update(fixed); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, []string{"worker-1", "worker-2"}) {
		t.Errorf("listed %v after worker-2's view was rewritten, want both", got)
	}
	if n, ok := r.Get("worker-2"); !ok || n.Status.Addresses[0].Address != "172.18.0.3" {
		t.Errorf("worker-2: %+v %v", n, ok)
	}
}
