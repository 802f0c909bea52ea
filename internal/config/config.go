// Package config reads Mailyard's configuration from the environment (PRODUCT.md §1).
//
// Every process reads the same struct; each subcommand asks only for the parts it
// needs, so `mailyard dns` does not demand an internal token it never uses.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mailyard/mailyard/workflows/onboarding"
)

// Config is the whole configuration. Secrets are kept as bytes or strings here and
// masked by String so that printing a Config never leaks them.
type Config struct {
	DatabaseURL       string
	TemporalAddress   string
	TemporalNamespace string
	HTTPAddr          string
	InternalAddr      string
	InternalToken     string
	EncryptionKey     []byte

	DKIMHost     string
	SPFHost      string
	BounceHost   string
	MXPriority   int
	DNSPublisher string
	DNSAddr      string
	RFC2136      RFC2136
	DNSResolver  string

	WebhookAllowPrivateNetworks bool
	WebhookAllowHTTP            bool
	// WebhookDisableAfter disables a webhook (reason failing) whose
	// delivery runs out of its schedule after this long without a 2xx.
	WebhookDisableAfter time.Duration

	// VerifySchedule is how often the onboarding workflow checks DNS; empty means
	// the default of PRODUCT.md §4.
	VerifySchedule []onboarding.Step
}

// DefaultWebhookDisableAfter is 5 days without a 2xx answer.
const DefaultWebhookDisableAfter = 120 * time.Hour

// RFC2136 names the primary server and TSIG key for dynamic updates.
type RFC2136 struct {
	Server string
	TSIG   string // name:algorithm:base64secret
}

// Need says which settings a process requires beyond those with defaults.
type Need struct {
	Database      bool
	EncryptionKey bool
	InternalToken bool
}

// Getenv is os.Getenv's shape, so tests and `mailyard dev` can supply their own.
type Getenv func(string) string

// Load reads the configuration with os.Getenv.
func Load(need Need) (*Config, error) { return LoadFrom(os.Getenv, need) }

// LoadFrom reads the configuration through getenv and returns every problem at once,
// one line per variable, so an operator fixes them all in one go.
func LoadFrom(getenv Getenv, need Need) (*Config, error) {
	var errs []error
	str := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	boolean := func(name string, def bool) bool {
		v := str(name, "")
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a boolean (use true or false)", name, v))
		}
		return b
	}
	addr := func(name, def string) string {
		v := str(name, def)
		if _, _, err := net.SplitHostPort(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a host:port address", name, v))
		}
		return v
	}

	c := &Config{
		DatabaseURL:                 str("MAILYARD_DATABASE_URL", ""),
		TemporalAddress:             addr("TEMPORAL_ADDRESS", "localhost:7233"),
		TemporalNamespace:           str("TEMPORAL_NAMESPACE", "default"),
		HTTPAddr:                    addr("MAILYARD_HTTP_ADDR", ":8080"),
		InternalAddr:                addr("MAILYARD_INTERNAL_ADDR", "127.0.0.1:8081"),
		InternalToken:               str("MAILYARD_INTERNAL_TOKEN", ""),
		DKIMHost:                    strings.TrimSuffix(strings.ToLower(str("MAILYARD_DKIM_HOST", "dkim.mailyard.test")), "."),
		SPFHost:                     strings.TrimSuffix(strings.ToLower(str("MAILYARD_SPF_HOST", "spf.mailyard.test")), "."),
		BounceHost:                  strings.TrimSuffix(strings.ToLower(str("MAILYARD_BOUNCE_HOST", "bounces.mailyard.test")), "."),
		DNSPublisher:                str("MAILYARD_DNS_PUBLISHER", "embedded"),
		DNSAddr:                     addr("MAILYARD_DNS_ADDR", "127.0.0.1:8053"),
		RFC2136:                     RFC2136{Server: str("MAILYARD_RFC2136_SERVER", ""), TSIG: str("MAILYARD_RFC2136_TSIG", "")},
		DNSResolver:                 str("MAILYARD_DNS_RESOLVER", ""),
		WebhookAllowPrivateNetworks: boolean("MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS", false),
		WebhookAllowHTTP:            boolean("MAILYARD_WEBHOOK_ALLOW_HTTP", false),
	}

	c.WebhookDisableAfter = DefaultWebhookDisableAfter
	if raw := str("MAILYARD_WEBHOOK_DISABLE_AFTER", ""); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("MAILYARD_WEBHOOK_DISABLE_AFTER: %q is not a positive Go duration (e.g. 120h, 30s)", raw))
		}
		c.WebhookDisableAfter = d
	}

	if raw := str("MAILYARD_VERIFY_SCHEDULE", ""); raw != "" {
		schedule, err := onboarding.ParseSchedule(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("MAILYARD_VERIFY_SCHEDULE: %v", err))
		}
		c.VerifySchedule = schedule
	}

	prio := str("MAILYARD_MX_PRIORITY", "10")
	if n, err := strconv.Atoi(prio); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("MAILYARD_MX_PRIORITY: %q is not a number from 0 to 65535", prio))
	} else {
		c.MXPriority = n
	}

	if c.DNSResolver != "" {
		if _, _, err := net.SplitHostPort(c.DNSResolver); err != nil {
			errs = append(errs, fmt.Errorf("MAILYARD_DNS_RESOLVER: %q is not a host:port address", c.DNSResolver))
		}
	}

	switch c.DNSPublisher {
	case "embedded":
	case "rfc2136":
		if c.RFC2136.Server == "" {
			errs = append(errs, errors.New("MAILYARD_RFC2136_SERVER: required when MAILYARD_DNS_PUBLISHER=rfc2136"))
		}
		if c.RFC2136.TSIG == "" {
			errs = append(errs, errors.New("MAILYARD_RFC2136_TSIG: required when MAILYARD_DNS_PUBLISHER=rfc2136 (name:algorithm:base64secret)"))
		}
	default:
		errs = append(errs, fmt.Errorf("MAILYARD_DNS_PUBLISHER: %q is not one of embedded, rfc2136", c.DNSPublisher))
	}

	if need.Database {
		switch {
		case c.DatabaseURL == "":
			errs = append(errs, errors.New("MAILYARD_DATABASE_URL: required (postgres://... or sqlite://PATH)"))
		case !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") && !strings.HasPrefix(c.DatabaseURL, "sqlite://"):
			errs = append(errs, errors.New("MAILYARD_DATABASE_URL: must start with postgres:// or sqlite://"))
		}
	}

	if raw := getenv("MAILYARD_ENCRYPTION_KEY"); raw != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(raw))
		if err != nil || len(key) != 32 {
			errs = append(errs, errors.New("MAILYARD_ENCRYPTION_KEY: must be the base64 encoding of exactly 32 bytes (openssl rand -base64 32)"))
		} else {
			c.EncryptionKey = key
		}
	} else if need.EncryptionKey {
		errs = append(errs, errors.New("MAILYARD_ENCRYPTION_KEY: required (base64 of 32 bytes: openssl rand -base64 32)"))
	}

	if need.InternalToken && c.InternalToken == "" {
		errs = append(errs, errors.New("MAILYARD_INTERNAL_TOKEN: required (the bearer token of the internal listener)"))
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// String prints the configuration with secrets masked.
func (c *Config) String() string {
	mask := func(set bool) string {
		if set {
			return "(set)"
		}
		return "(unset)"
	}
	return fmt.Sprintf("database=%s temporal=%s/%s http=%s internal=%s internal_token=%s encryption_key=%s dkim_host=%s publisher=%s dns_addr=%s resolver=%q",
		RedactURL(c.DatabaseURL), c.TemporalAddress, c.TemporalNamespace, c.HTTPAddr, c.InternalAddr,
		mask(c.InternalToken != ""), mask(len(c.EncryptionKey) > 0), c.DKIMHost, c.DNSPublisher, c.DNSAddr, c.DNSResolver)
}

// RedactURL hides a password in a database URL.
func RedactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	creds, host, ok := strings.Cut(rest, "@")
	if !ok {
		return u
	}
	if user, _, hasPass := strings.Cut(creds, ":"); hasPass {
		return scheme + "://" + user + ":***@" + host
	}
	return u
}
