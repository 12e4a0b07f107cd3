package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// Metrics (and pprof) are served as kube-controller-manager and the kubelet
// serve theirs: over TLS, to callers the API server vouches for. A bearer
// token is checked with a TokenReview, the request with a
// SubjectAccessReview of the non-resource URL (verb get on /metrics), so
// that a ClusterRole granting `get` on nonResourceURLs ["/metrics"]
// (deploy/monitoring, egressflow-metrics-reader) is what Prometheus's
// ServiceAccount needs. Nothing answers without both.
const (
	// AuthCacheTTL is how long a TokenReview's or SubjectAccessReview's
	// answer is reused for the same token or request (kube-apiserver's
	// delegated defaults): a scrape every 15 s to 30 s costs at most two
	// reviews per interval; longer lets a revoked token or binding keep
	// scraping that long.
	AuthCacheTTL = 10 * time.Second
	// AuthDenyCacheTTL is how long a refusal is reused: short, so that a
	// binding just made takes effect quickly; longer spares the API server
	// from a caller that keeps trying without permission.
	AuthDenyCacheTTL = 10 * time.Second
	// AuthReviewTimeout bounds one TokenReview: a scrape waits at most
	// this for the API server, then fails (and Prometheus retries at its
	// next interval).
	AuthReviewTimeout = 10 * time.Second
	// tlsMinVersion is the oldest TLS a scraper may use (Kubernetes
	// components' default).
	tlsMinVersion = tls.VersionTLS12
)

// authReviewBackoff retries a review the API server failed to answer
// (not one it refused): five tries over about 4 s, so a scrape survives an
// API server's brief hiccup without piling up requests on a degraded one.
var authReviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// SecureServing is the command line of a TLS server with delegated
// authentication and authorization.
type SecureServing struct {
	// BindAddress is where it listens; empty serves nothing.
	BindAddress string
	// CertFile and KeyFile are a PEM serving certificate and its key. Both
	// empty: a self-signed certificate is made in memory at start (as
	// kube-controller-manager does without --tls-cert-file), and scrapers
	// skip verifying it or pin nothing; set them to a certificate the
	// scraper trusts to have it verified. Read once at start: a renewed
	// certificate takes a restart.
	CertFile, KeyFile string
}

// AddFlags adds --metrics-bind-address, --tls-cert-file and
// --tls-private-key-file to fs, with def the default address.
func (s *SecureServing) AddFlags(fs *Flags, def, usage string) {
	fs.StringVar(&s.BindAddress, "metrics-bind-address", def, usage)
	fs.StringVar(&s.CertFile, "tls-cert-file", "", "PEM serving certificate of the metrics address (with --tls-private-key-file); empty: a self-signed certificate made at start")
	fs.StringVar(&s.KeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
}

// Certificate is the serving certificate: the files', or a self-signed one
// for host (and the IP addresses given).
func (s *SecureServing) Certificate(host string, ips ...net.IP) (tls.Certificate, error) {
	switch {
	case s.CertFile != "" && s.KeyFile != "":
		c, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("--tls-cert-file and --tls-private-key-file: %w", err)
		}
		return c, nil
	case s.CertFile != "" || s.KeyFile != "":
		return tls.Certificate{}, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if host == "" {
		host = "localhost"
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, ips, nil)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// DelegatedAuth authenticates bearer tokens with TokenReviews and
// authorizes requests with SubjectAccessReviews, through the API server
// that cfg reaches.
type DelegatedAuth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

// NewDelegatedAuth makes the reviews' clients from cfg.
func NewDelegatedAuth(cfg *rest.Config) (*DelegatedAuth, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	backoff := authReviewBackoff
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		// Anonymous nil: a request without a valid token is refused.
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: AuthReviewTimeout,
		WebhookRetryBackoff:      &backoff,
		CacheTTL:                 AuthCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             AuthCacheTTL,
		DenyCacheTTL:              AuthDenyCacheTTL,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	return &DelegatedAuth{authn: authn, authz: authz}, nil
}

// Wrap serves h only to an authenticated caller allowed the request's
// non-resource URL with the verb of its method (get for GET, as the API
// server names it): 401 without valid credentials, 403 without the
// permission.
func (a *DelegatedAuth) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				klog.V(2).InfoS("Metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		// The API server's verb for a non-resource request: the method in
		// lower case, get for HEAD as for GET.
		verb := strings.ToLower(r.Method)
		if r.Method == http.MethodHead {
			verb = "get"
		}
		decision, reason, err := a.authz.Authorize(r.Context(), authorizer.AttributesRecord{
			User: resp.User, Verb: verb, Path: r.URL.Path, ResourceRequest: false,
		})
		if decision != authorizer.DecisionAllow {
			klog.V(2).InfoS("Metrics request forbidden", "user", resp.User.GetName(), "path", r.URL.Path, "reason", reason, "err", err)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", resp.User.GetName(), verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MetricsHandler serves /metrics from reg, and with profiling Go's
// /debug/pprof/ (heap, CPU, goroutines: for diagnosing a running
// component; off by default, as it exposes internals). Wrap it in
// DelegatedAuth.
func MetricsHandler(reg *prometheus.Registry, profiling bool) http.Handler {
	m := http.NewServeMux()
	if profiling {
		m.HandleFunc("/debug/pprof/", pprof.Index)
		m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		m.HandleFunc("/debug/pprof/profile", pprof.Profile)
		m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	m.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return m
}

// ServeTLS runs handler over TLS with certificate on addr until ctx ends,
// as Serve does.
func ServeTLS(ctx context.Context, addr string, certificate tls.Certificate, handler http.Handler, failed func()) {
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tlsMinVersion, Certificates: []tls.Certificate{certificate}}}
	serve(ctx, srv, func() error { return srv.ListenAndServeTLS("", "") }, failed)
}
