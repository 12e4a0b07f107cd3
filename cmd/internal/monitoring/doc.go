// Package monitoring holds only tests: they check deploy/monitoring, the
// PrometheusRule and the Grafana dashboard shipped for egressflow. promtool
// checks the rules and runs their unit tests (prometheusrule_test.yaml),
// and checks every dashboard query; every metric they name must be one
// that the two commands register, as their mains wire them. The
// PodMonitors must scrape both workloads of deploy/ on the ports their
// --metrics-bind-address serves, over HTTPS with the scraper's token.
package monitoring
