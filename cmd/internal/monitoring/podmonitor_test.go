package monitoring

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// podMonitor is the part of a monitoring.coreos.com/v1 PodMonitor these
// tests read.
type podMonitor struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Authorization struct {
				Type        string `json:"type"`
				Credentials struct {
					Name string `json:"name"`
					Key  string `json:"key"`
				} `json:"credentials"`
			} `json:"authorization"`
			TLSConfig struct {
				InsecureSkipVerify bool `json:"insecureSkipVerify"`
			} `json:"tlsConfig"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// documents splits a multi-document YAML file into its documents' JSON.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out [][]byte
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(raw) == 0 {
			continue
		}
		b, err := sigsyaml.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		j, err := sigsyaml.YAMLToJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
}

// TestPodMonitorsScrapeBothComponents: deploy/monitoring's PodMonitors
// select the agent DaemonSet's and the controller Deployment's pods, on a
// container port those pods declare and whose number is the one the
// component's --metrics-bind-address serves; they scrape /metrics over
// HTTPS with a bearer token from the scraper's token Secret in
// scraper-rbac.yaml, whose ServiceAccount is bound to a ClusterRole that
// grants get on /metrics and nothing else.
func TestPodMonitorsScrapeBothComponents(t *testing.T) {
	deploy := filepath.Join(dir, "..")
	templates := map[string]corev1.PodTemplateSpec{}
	for _, f := range []string{"agent/daemonset.yaml", "controller/deployment.yaml"} {
		for _, doc := range documents(t, filepath.Join(deploy, f)) {
			var ds appsv1.DaemonSet // a Deployment's template is at the same place
			if err := sigsyaml.Unmarshal(doc, &ds); err != nil {
				t.Fatal(err)
			}
			templates[ds.Spec.Template.Labels["app.kubernetes.io/name"]] = ds.Spec.Template
		}
	}

	// The scraper's permissions.
	var secret, account, role string
	for _, doc := range documents(t, filepath.Join(dir, "scraper-rbac.yaml")) {
		var meta struct {
			Kind string `json:"kind"`
		}
		_ = sigsyaml.Unmarshal(doc, &meta)
		switch meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			_ = sigsyaml.Unmarshal(doc, &r)
			if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(r.Rules[0].Verbs, []string{"get"}) ||
				len(r.Rules[0].Resources) > 0 {
				t.Errorf("ClusterRole %s grants %+v, want get on /metrics alone", r.Name, r.Rules)
			}
			role = r.Name
		case "Secret":
			var s corev1.Secret
			_ = sigsyaml.Unmarshal(doc, &s)
			if s.Type != corev1.SecretTypeServiceAccountToken {
				t.Errorf("Secret %s is of type %s, want a ServiceAccount token", s.Name, s.Type)
			}
			secret, account = s.Name, s.Annotations[corev1.ServiceAccountNameKey]
		}
	}
	bound := false
	for _, doc := range documents(t, filepath.Join(dir, "scraper-rbac.yaml")) {
		var b rbacv1.ClusterRoleBinding
		if err := sigsyaml.Unmarshal(doc, &b); err == nil && b.Kind == "ClusterRoleBinding" && b.RoleRef.Name == role {
			for _, s := range b.Subjects {
				bound = bound || s.Kind == rbacv1.ServiceAccountKind && s.Name == account
			}
		}
	}
	if role == "" || secret == "" || !bound {
		t.Fatalf("scraper-rbac.yaml: role %q, token Secret %q of %q, bound %v", role, secret, account, bound)
	}

	covered := map[string]bool{}
	for _, doc := range documents(t, filepath.Join(dir, "podmonitor.yaml")) {
		var pm podMonitor
		if err := sigsyaml.Unmarshal(doc, &pm); err != nil || pm.Kind != "PodMonitor" {
			t.Fatalf("podmonitor.yaml: %s %v", pm.Kind, err)
		}
		name := pm.Spec.Selector.MatchLabels["app.kubernetes.io/name"]
		tmpl, ok := templates[name]
		if !ok {
			t.Errorf("PodMonitor %s selects %v: no workload of deploy/", pm.Metadata.Name, pm.Spec.Selector.MatchLabels)
			continue
		}
		covered[name] = true
		for _, ep := range pm.Spec.Endpoints {
			if ep.Scheme != "https" || ep.Path != "/metrics" || ep.Authorization.Type != "Bearer" ||
				ep.Authorization.Credentials.Name != secret || ep.Authorization.Credentials.Key != corev1.ServiceAccountTokenKey ||
				!ep.TLSConfig.InsecureSkipVerify {
				t.Errorf("PodMonitor %s: endpoint %+v; want https /metrics, the bearer token of Secret %s, the self-signed certificate accepted", pm.Metadata.Name, ep, secret)
			}
			var port *corev1.ContainerPort
			var args []string
			for _, c := range tmpl.Spec.Containers {
				for i, p := range c.Ports {
					if p.Name == ep.Port {
						port, args = &c.Ports[i], c.Args
					}
				}
			}
			if port == nil {
				t.Errorf("PodMonitor %s scrapes port %q, which %s's pods do not declare", pm.Metadata.Name, ep.Port, name)
				continue
			}
			if !slices.ContainsFunc(args, func(a string) bool {
				return strings.HasPrefix(a, "--metrics-bind-address=") && strings.HasSuffix(a, ":"+strconv.Itoa(int(port.ContainerPort)))
			}) {
				t.Errorf("%s: port %s is %d, but its --metrics-bind-address is elsewhere: %v", name, ep.Port, port.ContainerPort, args)
			}
		}
	}
	for _, want := range []string{"egressflow-agent", "egressflow-controller"} {
		if !covered[want] {
			t.Errorf("no PodMonitor scrapes %s", want)
		}
	}
}
