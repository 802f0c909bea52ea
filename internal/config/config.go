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

	// DKIMRetain is how long an old DKIM key stays published after a rotation
	// switched away from it, and a deleted domain's keys after the deletion.
	DKIMRetain time.Duration
	// DKIMRecheck is how often a rotation re-checks the customer's DNS while
	// the standby key is not visible through their CNAME.
	DKIMRecheck time.Duration
	// RateLimit is the token bucket of every API key (MAILYARD_RATE_LIMIT).
	RateLimit RateLimit

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

// RateLimit is a sustained rate of Requests per Per, with a burst of twice
// Requests (two periods' worth). The zero value is off: no limit.
type RateLimit struct {
	Requests int
	Per      time.Duration
}

// Off reports whether limits are disabled.
func (r RateLimit) Off() bool { return r.Requests == 0 }

// Burst is the bucket's size: twice the requests of one period.
func (r RateLimit) Burst() int { return 2 * r.Requests }

// PerSecond is the refill rate in tokens per second.
func (r RateLimit) PerSecond() float64 { return float64(r.Requests) / r.Per.Seconds() }

// String writes the limit as it is configured, e.g. "20/s" or "off".
func (r RateLimit) String() string {
	if r.Off() {
		return "off"
	}
	for unit, d := range map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour} {
		if r.Per == d {
			return strconv.Itoa(r.Requests) + "/" + unit
		}
	}
	return strconv.Itoa(r.Requests) + "/" + r.Per.String()
}

// DefaultRateLimit is MAILYARD_RATE_LIMIT's default.
const DefaultRateLimit = "20/s"

// ParseRateLimit reads "N/s", "N/m", "N/h" (N a whole number from 1) or "off".
func ParseRateLimit(v string) (RateLimit, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "off" {
		return RateLimit{}, nil
	}
	count, unit, ok := strings.Cut(v, "/")
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[strings.TrimSpace(unit)]
	n, err := strconv.Atoi(strings.TrimSpace(count))
	if !ok || per == 0 || err != nil || n < 1 || n > 1_000_000 {
		return RateLimit{}, fmt.Errorf("%q is not a rate such as 20/s, 600/m or 10000/h (requests per second, minute or hour), or off", v)
	}
	return RateLimit{Requests: n, Per: per}, nil
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
	duration := func(name string, def time.Duration) time.Duration {
		v := str(name, "")
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive Go duration (e.g. 168h, 20s)", name, v))
		}
		return d
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
		DKIMRetain:                  duration("MAILYARD_DKIM_RETAIN", 7*24*time.Hour),
		DKIMRecheck:                 duration("MAILYARD_DKIM_RECHECK", 10*time.Minute),
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

	if limit, err := ParseRateLimit(str("MAILYARD_RATE_LIMIT", DefaultRateLimit)); err != nil {
		errs = append(errs, fmt.Errorf("MAILYARD_RATE_LIMIT: %v", err))
	} else {
		c.RateLimit = limit
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
	return fmt.Sprintf("database=%s temporal=%s/%s http=%s internal=%s internal_token=%s encryption_key=%s dkim_host=%s publisher=%s dns_addr=%s resolver=%q rate_limit=%s dkim_retain=%s dkim_recheck=%s",
		RedactURL(c.DatabaseURL), c.TemporalAddress, c.TemporalNamespace, c.HTTPAddr, c.InternalAddr,
		mask(c.InternalToken != ""), mask(len(c.EncryptionKey) > 0), c.DKIMHost, c.DNSPublisher, c.DNSAddr, c.DNSResolver, c.RateLimit, c.DKIMRetain, c.DKIMRecheck)
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
