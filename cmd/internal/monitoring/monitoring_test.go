package monitoring

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/egressflow/egressflow/cmd/internal/cli"
	"github.com/egressflow/egressflow/cmd/internal/clientmetrics"
	"github.com/egressflow/egressflow/controller/agent"
	"github.com/egressflow/egressflow/controller/cluster"
)

// dir is deploy/monitoring, from this package's directory.
const dir = "../../../deploy/monitoring"

// promtoolHint says where promtool comes from.
const promtoolHint = "promtool is in Debian's package prometheus; `make test-deps` installs it"

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule
// these tests read; Spec is exactly a Prometheus rules file.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// readRule reads the PrometheusRule and the plain rules file made of its
// spec.
func readRule(t *testing.T) (*prometheusRule, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.JSONToYAML(raw.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return &pr, rules
}

// promtool runs promtool in dir and fails t with its output on error.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("%v: %s", err, promtoolHint)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules: promtool accepts the PrometheusRule's spec as a rules
// file and its unit tests pass, in which every alert fires for a case that
// should raise it and stays quiet for one that should not. Every alert has
// a severity, a summary, a description and a runbook that exists in
// docs/troubleshooting.md.
func TestAlertRules(t *testing.T) {
	pr, rules := readRule(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "prometheusrule_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(promtool(t, work, "check", "rules", "rules.yaml"))
	t.Log(promtool(t, work, "test", "rules", "prometheusrule_test.yaml"))

	var unitTests struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &unitTests); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unitTests.RuleFiles, []string{"rules.yaml"}) {
		t.Errorf("prometheusrule_test.yaml tests %v, want rules.yaml (the spec this test writes)", unitTests.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, test := range unitTests.Tests {
		for _, a := range test.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}

	anchors := docAnchors(t, "../../../docs/troubleshooting.md")
	const runbookPrefix = "https://github.com/egressflow/egressflow/blob/main/docs/troubleshooting.md#"
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: prometheusrule_test.yaml must show it firing (%v) and quiet (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
			if s := r.Labels["severity"]; s != "info" && s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want info, warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookPrefix)
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is no section of docs/troubleshooting.md (%s<anchor>)", r.Alert, r.Annotations["runbook_url"], runbookPrefix)
			}
		}
	}
	for _, want := range []string{"EgressFlowServiceWithoutHost", "EgressFlowAgentSyncFailing", "EgressFlowOVSDisconnected", "EgressFlowLeaseRenewalsFailing",
		"EgressFlowAgentMissing", "EgressFlowQoSNotApplied", "EgressFlowFirewallNotApplied", "EgressFlowFirewallDNSUnresolved"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}

// docAnchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, punctuation dropped, spaces as hyphens.
func docAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")] = true
	}
	return out
}

// dashboard is the part of the Grafana dashboard these tests read.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// dashboardQueries returns the dashboard's PromQL queries by panel title,
// and the metrics its variables list label values of.
func dashboardQueries(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	queries := map[string][]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries[p.Title] = append(queries[p.Title], target.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	var variables []string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(<metric>, <label>)", v.Name, text)
			continue
		}
		variables = append(variables, m[1])
	}
	return queries, variables
}

// TestDashboardQueries: every query of the Grafana dashboard is PromQL
// that promtool accepts (each written as a recording rule).
func TestDashboardQueries(t *testing.T) {
	queries, _ := dashboardQueries(t)
	var rules []rule
	for _, title := range slices.Sorted(maps.Keys(queries)) {
		for _, q := range queries[title] {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", len(rules)), Expr: q})
		}
	}
	if len(rules) == 0 {
		t.Fatal("the dashboard has no query")
	}
	file := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	data, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "dashboard.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(promtool(t, work, "check", "rules", "dashboard.yaml"))
}

// collector is a prometheus.Registerer that records the names of the
// metrics registered with it.
type collector map[string]bool

// fqName reads a Desc's name: client_golang exposes it only in String.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (c collector) Register(col prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() {
		col.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			c[m[1]] = true
		}
	}
	return nil
}

func (c collector) MustRegister(cols ...prometheus.Collector) {
	for _, col := range cols {
		_ = c.Register(col)
	}
}

func (c collector) Unregister(prometheus.Collector) bool { return false }

// exported returns the names of every metric the two commands export, as
// their mains register them: the registry of cli.NewRegistry, client-go's
// metrics, and each component's own.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := collector{}
	for _, namespace := range []string{"egressflow_agent", "egressflow_controller"} {
		families, err := cli.NewRegistry(namespace).Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			names[f.GetName()] = true
		}
	}
	clientmetrics.Register(names)
	agent.NewMetrics(names)
	if _, err := cluster.New(&rest.Config{Host: "https://127.0.0.1:1"}, cluster.Options{Registerer: names}); err != nil {
		t.Fatal(err)
	}
	return names
}

// metricName finds metric names in PromQL: identifiers with the prefixes
// of the metrics egressflow's commands export, and kube-state-metrics'
// (kube_), outside string literals.
var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	metricName    = regexp.MustCompile(`\b(?:egressflow|workqueue|rest_client|go|process|kube)_[a-zA-Z0-9_:]*`)
)

// foreignMetrics are the metrics the alerts read that egressflow does not
// export, by exporter: no test here can see them registered, so they are
// pinned by name to their exporter's documented, STABLE metrics
// (kube-state-metrics' docs/metrics/workload/daemonset-metrics.md), and
// docs/monitoring.md says that the alerts need that exporter. Any other
// foreign name fails the test, as a misspelt one of ours does.
var foreignMetrics = map[string]string{
	"kube_daemonset_status_desired_number_scheduled": "kube-state-metrics",
	"kube_daemonset_status_number_available":         "kube-state-metrics",
}

// TestReferencedMetricsAreExported: every metric the alerts and the
// dashboard read is one that egressflow's commands register (a histogram's
// _bucket, _sum and _count series included), so that no alert or panel
// silently reads nothing after a rename, or one of foreignMetrics, which
// only the alerts read (the dashboard shows egressflow's own).
func TestReferencedMetricsAreExported(t *testing.T) {
	names := exported(t)
	for _, want := range []string{"egressflow_agent_flows", "egressflow_agent_service_flows", "egressflow_controller_leader",
		"workqueue_depth", "rest_client_requests_total", "egressflow_agent_build_info"} {
		if !names[want] {
			t.Fatalf("%s is not among the registered names %v: the collection is broken", want, slices.Sorted(maps.Keys(names)))
		}
	}
	known := func(name string) bool {
		if names[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
				return true
			}
		}
		return false
	}

	references := map[string][]string{} // metric: where
	add := func(where, expr string) {
		found := metricName.FindAllString(stringLiteral.ReplaceAllString(expr, `""`), -1)
		if len(found) == 0 {
			t.Errorf("%s: no egressflow metric in %q", where, expr)
		}
		for _, name := range found {
			references[name] = append(references[name], where)
		}
	}
	pr, _ := readRule(t)
	foreignRead := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			add("alert "+r.Alert, r.Expr)
			for _, name := range metricName.FindAllString(stringLiteral.ReplaceAllString(r.Expr, `""`), -1) {
				if foreignMetrics[name] != "" {
					foreignRead[name] = true
				}
			}
		}
	}
	for name := range foreignMetrics {
		if !foreignRead[name] {
			t.Errorf("foreign metric %s is read by no alert: drop it from foreignMetrics", name)
		}
	}
	queries, variables := dashboardQueries(t)
	for title, qs := range queries {
		for _, q := range qs {
			add("dashboard panel "+title, q)
		}
	}
	for _, v := range variables {
		add("dashboard variable", v)
	}
	for _, name := range slices.Sorted(maps.Keys(references)) {
		if foreignMetrics[name] != "" && !slices.ContainsFunc(references[name], func(where string) bool { return !strings.HasPrefix(where, "alert ") }) {
			continue
		}
		if !known(name) {
			t.Errorf("%s, read by %v, is exported by neither command", name, slices.Compact(references[name]))
		}
	}
	t.Logf("%d metrics referenced by the alerts and the dashboard", len(references))
}
