package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/mailyard/mailyard/internal/egress"
)

// AttemptTimeout bounds one delivery attempt: connecting, sending and
// reading the response.
const AttemptTimeout = 15 * time.Second

// Option adjusts the client built by NewClient.
type Option func(*clientConfig)

type clientConfig struct {
	timeout  time.Duration
	rootCAs  *x509.CertPool
	resolver *net.Resolver
	// afterGuard runs after the address guard on every dial that passed
	// it. Tests use it to see what would have been connected to, and to
	// stop it before any packet leaves loopback.
	afterGuard func(network, address string, c syscall.RawConn) error
}

// WithTimeout replaces AttemptTimeout as the limit of one attempt.
func WithTimeout(d time.Duration) Option {
	return func(c *clientConfig) { c.timeout = d }
}

// WithRootCAs makes the client trust only the given certificate
// authorities instead of the system pool, for receivers with a private CA
// in development and tests. Certificates are still verified.
func WithRootCAs(pool *x509.CertPool) Option {
	return func(c *clientConfig) { c.rootCAs = pool }
}

// WithResolver resolves host names with r instead of the system resolver.
func WithResolver(r *net.Resolver) Option {
	return func(c *clientConfig) { c.resolver = r }
}

// NewClient returns the HTTP client for webhook deliveries. Unless the
// policy allows private networks, it connects only to globally reachable
// addresses, checked on every resolved address at dial time. It ignores
// proxies from the environment (a proxy would connect on our behalf,
// beyond the dial check), verifies TLS, never follows redirects (the
// target was not validated, and a redirect counts as a failed attempt) and
// refuses http:// URLs unless the policy allows them.
func NewClient(p Policy, opts ...Option) *http.Client {
	cfg := clientConfig{timeout: AttemptTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	dialer := &net.Dialer{
		Timeout:   cfg.timeout,
		KeepAlive: 30 * time.Second,
		Resolver:  cfg.resolver,
		Control:   dialControl(p, cfg.afterGuard),
	}
	transport := &http.Transport{
		Proxy:       nil,
		DialContext: dialer.DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			RootCAs:    cfg.rootCAs,
		},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		// The transport would otherwise inflate gzip without a limit;
		// readResponseBody does it with one.
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  1 * time.Second,
	}
	return &http.Client{
		Transport: schemeGuard{allowHTTP: p.AllowHTTP, next: transport},
		Timeout:   cfg.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

func dialControl(p Policy, after func(string, string, syscall.RawConn) error) func(string, string, syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if !p.AllowPrivateNetworks {
			if err := egress.GuardDial(network, address, c); err != nil {
				return err
			}
		}
		if after != nil {
			return after(network, address, c)
		}
		return nil
	}
}

// errHTTPNotAllowed is returned for an http:// URL when the policy allows
// only https://, e.g. a webhook created while the operator switch was on.
var errHTTPNotAllowed = errors.New("http:// URLs are not allowed; use https://")

// schemeGuard enforces the policy's scheme rule on every request, so the
// client is safe even for URLs that were validated under another policy.
type schemeGuard struct {
	allowHTTP bool
	next      *http.Transport
}

func (g schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.URL.Scheme {
	case "https":
	case "http":
		if !g.allowHTTP {
			closeRequestBody(req)
			return nil, errHTTPNotAllowed
		}
	default:
		closeRequestBody(req)
		return nil, fmt.Errorf("unsupported URL scheme %q", req.URL.Scheme)
	}
	return g.next.RoundTrip(req)
}

// closeRequestBody honours the RoundTripper contract: the body is closed
// even when the request is refused.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// pooled connections behind the guard.
func (g schemeGuard) CloseIdleConnections() {
	g.next.CloseIdleConnections()
}
