// Package cli holds what egressflow's commands share: their command line
// (pflag, component-base's logging flags, --version), environment helpers,
// the metrics registry, the TLS server of /metrics with delegated
// authentication and authorization (secure.go), and the plain one of
// /healthz and /readyz. No logic of the components lives here.
package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"
)

// Version is the build's version, set by `make images` and `make build`
// from `git describe` (-ldflags -X); "dev" otherwise. --version prints it
// (Flags), and <namespace>_build_info carries it (NewRegistry).
var Version = "dev"

// NewRegistry is a command's metrics registry: Go's runtime and process
// collectors, and <namespace>_build_info{version, goversion}, always 1, as
// Kubernetes components export theirs (which build runs where, in one
// query).
func NewRegistry(namespace string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "build_info",
			Help:        "The build running: its version (git describe) and Go version. Always 1.",
			ConstLabels: prometheus.Labels{"version": Version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }))
	return reg
}

// ShutdownGrace bounds how long a server (metrics, health) drains on exit.
const ShutdownGrace = 5 * time.Second

// EnvOr returns the environment variable name, or def when it is unset or
// empty (Kubernetes fills such variables from the downward API).
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Hostname is the machine's host name, or "" if it cannot be read.
func Hostname() string {
	h, _ := os.Hostname()
	return h
}

// ParsePrefixes parses a comma-separated list of CIDRs given to flag name.
func ParsePrefixes(name, value string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(value, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Check is a health check: nil means healthy.
type Check func(*http.Request) error

// HealthHandler serves /healthz and /readyz alone, in plain HTTP, without
// authentication: what a kubelet probes. They say nothing but ok or why
// not, and change nothing; the metrics are served apart (ServeTLS).
func HealthHandler(healthz, readyz Check) http.Handler {
	m := http.NewServeMux()
	handleHealth(m, healthz, readyz)
	return m
}

func handleHealth(m *http.ServeMux, healthz, readyz Check) {
	check := func(f Check) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := f(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	m.Handle("/healthz", check(healthz))
	m.Handle("/readyz", check(readyz))
}

// Serve runs handler on addr until ctx ends, then drains it for at most
// ShutdownGrace. If the server fails it calls failed (e.g. to stop the
// command). An empty addr serves nothing.
func Serve(ctx context.Context, addr string, handler http.Handler, failed func()) {
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	serve(ctx, srv, srv.ListenAndServe, failed)
}

func serve(ctx context.Context, srv *http.Server, listen func() error, failed func()) {
	go func() {
		if err := listen(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Server failed", "address", srv.Addr)
			failed()
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
}
