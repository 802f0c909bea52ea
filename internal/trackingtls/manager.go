package trackingtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// ErrNotAllowed is the refusal of a name Allowed does not accept; the TLS
// handshake for it fails.
var ErrNotAllowed = errors.New("not a verified custom tracking domain")

// Options of NewManager.
type Options struct {
	// DirectoryURL is the ACME CA's directory; empty: Let's Encrypt's
	// production directory (acme.LetsEncryptURL).
	DirectoryURL string
	// Email is the ACME account's contact address; optional.
	Email string
	// HTTPClient talks to the ACME CA. Nil: a client with a timeout, trusting
	// RootCAs (or the system's roots when RootCAs is nil too).
	HTTPClient *http.Client
	// RootCAs are the roots the ACME CA's HTTPS certificate is verified
	// against when HTTPClient is nil (tests: Pebble's own certificate).
	RootCAs *x509.CertPool
	// Allowed reports whether host (lower case, no trailing dot) is a
	// verified custom tracking domain. It is asked on every TLS handshake
	// that is not an ACME challenge, and before a certificate is written
	// to Cache, so it should be cheap; it gets 5 seconds, and at most 4
	// calls run at once. An error fails the handshake.
	Allowed func(ctx context.Context, host string) (bool, error)
	// Cache holds the account key and the certificates, shared by every
	// process: a *Cache over the store.
	Cache autocert.Cache
}

// NewManager returns the autocert manager that obtains, caches and renews
// the certificates of the names Allowed accepts, accepting the CA's terms of
// service.
func NewManager(o Options) (*autocert.Manager, error) {
	if o.Allowed == nil {
		return nil, errors.New("trackingtls: Options.Allowed is required")
	}
	if o.Cache == nil {
		return nil, errors.New("trackingtls: Options.Cache is required (certificates must be shared by the api processes)")
	}
	dir := o.DirectoryURL
	if dir == "" {
		dir = acme.LetsEncryptURL
	}
	hc := o.HTTPClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
		hc = &http.Client{Transport: t, Timeout: time.Minute}
	}
	p := newPolicy(o.Allowed)
	return &autocert.Manager{
		Prompt:     autocert.AcceptTOS,
		Cache:      policyCache{Cache: o.Cache, policy: p},
		HostPolicy: p.hostPolicy,
		Email:      o.Email,
		Client: &acme.Client{
			DirectoryURL: dir,
			HTTPClient:   hc,
			UserAgent:    "mailyard",
		},
	}, nil
}

// NormalizeHost is the form of a name Allowed is asked about: lower case,
// without the trailing dot of a fully qualified name.
func NormalizeHost(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}
