package kubetest

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Scrape gets path from a command's metrics address over TLS (its
// certificate is self-signed: not verified), with token as bearer unless
// it is empty, through transport (nil: http.DefaultTransport's dialer),
// and returns the status and body.
func Scrape(transport *http.Transport, addr, path, token string) (int, string, error) {
	if transport == nil {
		transport = &http.Transport{}
	} else {
		transport = transport.Clone()
	}
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	transport.DisableKeepAlives = true
	client := &http.Client{Transport: transport, Timeout: 15 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The components' metrics (cmd/internal/cli) answer over TLS only to
// callers the API server authenticates and authorizes: these helpers
// scrape them as Prometheus does, and check who gets what.

// MetricsTokens are the callers CheckMetricsAuth tries.
type MetricsTokens struct {
	// Invalid is a token the API server does not know.
	Invalid string
	// Unauthorized is a valid token of an identity without get on
	// /metrics.
	Unauthorized string
	// Scraper is a valid token of an identity bound to the scraper role.
	Scraper string
}

// DefaultMetricsTokens are this package's: an unknown token, Stranger,
// and MetricsScraper (whose binding deploy/monitoring/scraper-rbac.yaml
// makes).
var DefaultMetricsTokens = MetricsTokens{Invalid: "not-a-token", Unauthorized: Stranger.Token, Scraper: MetricsScraper.Token}

// CheckMetricsAuth checks that the command's metrics address serves
// /metrics over TLS to the scraper only: 401 with no token or an invalid
// one, 403 for a valid token without the permission, the metrics (with
// want in them) for the scraper; and that plain HTTP gets no metrics.
func CheckMetricsAuth(t *testing.T, transport *http.Transport, addr string, tokens MetricsTokens, want string) {
	t.Helper()
	for _, c := range []struct {
		who, token string
		code       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server does not know", tokens.Invalid, http.StatusUnauthorized},
		{"a token without get on /metrics", tokens.Unauthorized, http.StatusForbidden},
		{"the scraper's token", tokens.Scraper, http.StatusOK},
	} {
		code, body, err := Scrape(transport, addr, "/metrics", c.token)
		switch {
		case err != nil:
			t.Errorf("/metrics with %s: %v", c.who, err)
		case code != c.code:
			t.Errorf("/metrics with %s: %d %s; want %d", c.who, code, firstLine(body), c.code)
		case c.code == http.StatusOK && !strings.Contains(body, want):
			t.Errorf("/metrics with %s: no %q in\n%s", c.who, want, body)
		case c.code != http.StatusOK && strings.Contains(body, want):
			t.Errorf("/metrics with %s: %d, but the body has the metrics", c.who, code)
		}
	}
	plain := transport
	if plain == nil {
		plain = &http.Transport{}
	}
	client := &http.Client{Transport: plain, Timeout: 15 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tokens.Scraper)
	if resp, err := client.Do(req); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), want) {
			t.Errorf("/metrics in plain HTTP: %d with the metrics", resp.StatusCode)
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return fmt.Sprintf("%.200s", s)
}

// RoundTripperFunc is a function as an http.RoundTripper, for a client
// configuration's WrapTransport that watches each request and response.
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
