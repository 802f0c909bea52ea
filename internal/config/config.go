// Package config reads Mailyard's configuration from the environment (README "Configuration").
//
// Every process reads the same struct; each subcommand asks only for the parts it
// needs, so `mailyard dns` does not demand an internal token it never uses.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mailyard/mailyard/internal/domainname"
)

// Config is the whole configuration. Secrets are kept as bytes or strings here and
// masked by String so that printing a Config never leaks them.
type Config struct {
	DatabaseURL       string
	TemporalAddress   string
	TemporalNamespace string
	// TemporalTLS and TemporalAPIKey secure the connection to Temporal
	// (internal/temporalclient); all empty is plaintext without credentials.
	TemporalTLS    TemporalTLS
	TemporalAPIKey string
	// MetricsAddr is where `mailyard worker` and `mailyard dns` serve
	// /metrics; empty serves none (the API serves /metrics on its internal
	// listener).
	MetricsAddr   string
	HTTPAddr      string
	InternalAddr  string
	InternalToken string
	EncryptionKey []byte

	DKIMHost     string
	SPFHost      string
	BounceHost   string
	MXPriority   int
	DNSPublisher string
	DNSAddr      string
	// DNSNameServerAddrs are the addresses of ns1.<DKIMHost>, the name
	// server of the DKIM zone, which `mailyard dns` answers for.
	DNSNameServerAddrs []net.IP
	// DNSRateLimit is the most UDP answers per second `mailyard dns`
	// sends one client network (/24, /56); 0: no limit.
	DNSRateLimit int
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

	// SMTP is how emails leave (docs/sending.md).
	SMTP SMTP
	// EmailRetention is how long a sent email's message is kept before it
	// is erased; inbound messages are kept as long.
	EmailRetention time.Duration

	// InboundAddr is the listener of `mailyard inbound`, the SMTP server at
	// the bounce host (docs/inbound.md).
	InboundAddr string
	// InboundMessageRate is the token bucket of each client address (an
	// IPv4 address, an IPv6 /64) for the messages `mailyard inbound` takes
	// (MAILYARD_INBOUND_MESSAGE_RATE); loopback is not limited.
	InboundMessageRate RateLimit
	// SMTPServer holds the rules shared by Mailyard's SMTP servers
	// (docs/smtp.md).
	SMTPServer SMTPServer
	// Submission is where `mailyard submission` listens (docs/submission.md).
	Submission Submission

	// Tracking is where opens, clicks and unsubscribes arrive
	// (docs/tracking.md).
	Tracking Tracking

	// VerifySchedule is how often the onboarding workflow checks DNS; empty means
	// the workflow's default. Plain data: the API turns it into the workflow's input,
	// so the configuration does not depend on any workflow package.
	VerifySchedule []ScheduleStep
}

// TemporalTLS names the PEM files of the TLS connection to Temporal: a client
// certificate and its key (mutual TLS; both or neither), and the CA that
// signed the server's certificate (empty: the system's roots).
type TemporalTLS struct {
	CertFile, KeyFile, CAFile string
}

// Enabled reports whether any TLS file is configured.
func (t TemporalTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// ScheduleStep says: check every Every while the verification window is younger
// than Until.
type ScheduleStep struct {
	Every, Until time.Duration
}

// ParseSchedule reads "every/until,..." such as "1m/10m,5m/1h,30m/72h", the form
// of MAILYARD_VERIFY_SCHEDULE.
func ParseSchedule(s string) ([]ScheduleStep, error) {
	var steps []ScheduleStep
	var last time.Duration
	for _, part := range strings.Split(s, ",") {
		every, until, ok := strings.Cut(strings.TrimSpace(part), "/")
		if !ok {
			return nil, fmt.Errorf("%q is not every/until (e.g. 5m/1h)", part)
		}
		e, err1 := time.ParseDuration(every)
		u, err2 := time.ParseDuration(until)
		if err1 != nil || err2 != nil || e <= 0 || u <= last {
			return nil, fmt.Errorf("%q: durations must be positive and windows increasing", part)
		}
		steps = append(steps, ScheduleStep{Every: e, Until: u})
		last = u
	}
	return steps, nil
}

func formatSchedule(steps []ScheduleStep) string {
	if len(steps) == 0 {
		return "default"
	}
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.Every.String() + "/" + s.Until.String()
	}
	return strings.Join(parts, ",")
}

// SMTP is the transport of outgoing email (MAILYARD_SMTP_*).
type SMTP struct {
	// Mode is "mx" (each recipient domain's mail servers) or "relay".
	Mode string
	// Port is the port of the recipients' mail servers in mx mode.
	Port int
	// HELO is the name Mailyard gives in EHLO.
	HELO string
	// TLS is "opportunistic" (STARTTLS when offered) or "required".
	TLS string
	// AllowPrivateNetworks lets mx mode connect to special-purpose
	// addresses such as loopback (tests and development only).
	AllowPrivateNetworks bool
	// Relay is the host:port of the relay in relay mode; RelayImplicitTLS
	// speaks TLS from the first byte (port 465) instead of STARTTLS.
	Relay            string
	RelayImplicitTLS bool
	RelayUsername    string
	RelayPassword    string
}

// SMTPServer is what Mailyard's SMTP servers share (MAILYARD_SMTP_TLS_CERT,
// _KEY, MAILYARD_SMTP_MAX_CONNECTIONS).
type SMTPServer struct {
	// TLSCertFile and TLSKeyFile are PEM files (both or neither); with them
	// the servers offer STARTTLS, and re-read them when they change.
	TLSCertFile, TLSKeyFile string
	// MaxConnections caps open connections per process.
	MaxConnections int
}

// Submission is the configuration of `mailyard submission`.
type Submission struct {
	// Addr serves SMTP with STARTTLS; TLSAddr, when set, implicit TLS.
	Addr, TLSAddr string
	// AllowInsecureAuth offers AUTH without TLS (tests, dev on loopback).
	AllowInsecureAuth bool
}

// load checks the SMTP settings and reads the port.
func (s *SMTP) load(port string) []error {
	var errs []error
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs = append(errs, fmt.Errorf("MAILYARD_SMTP_PORT: %q is not a port number", port))
	} else {
		s.Port = n
	}
	switch s.Mode {
	case "mx":
	case "relay":
		if !dialAddress(s.Relay) {
			errs = append(errs, fmt.Errorf("MAILYARD_SMTP_RELAY: %q is not a host:port address (required when MAILYARD_SMTP_MODE=relay)", s.Relay))
		}
	default:
		errs = append(errs, fmt.Errorf("MAILYARD_SMTP_MODE: %q is not one of mx, relay", s.Mode))
	}
	if s.TLS != "opportunistic" && s.TLS != "required" {
		errs = append(errs, fmt.Errorf("MAILYARD_SMTP_TLS: %q is not one of opportunistic, required", s.TLS))
	}
	if (s.RelayUsername == "") != (s.RelayPassword == "") {
		errs = append(errs, errors.New("MAILYARD_SMTP_RELAY_USERNAME and MAILYARD_SMTP_RELAY_PASSWORD: set both or neither"))
	}
	return errs
}

// HELOProblem says why the EHLO name will be refused by many receivers, or
// "" when it will do: in mx mode it reaches the world, where a name without
// a domain (a container's or pod's host name, the default) gets 5xx from
// receivers that check (Postfix's reject_non_fqdn_helo_hostname), and a 5xx
// hard-bounces and suppresses the recipient (docs/sending.md). Not refused
// at start: a relay, or a test server, takes any name.
func (s SMTP) HELOProblem() string {
	if s.Mode != "mx" || strings.HasPrefix(s.HELO, "[") {
		return ""
	}
	if _, err := domainname.NormalizeHost(s.HELO); err != nil || !strings.Contains(strings.Trim(s.HELO, "."), ".") {
		return fmt.Sprintf("the EHLO name %q is not a fully qualified host name: receivers that check refuse the mail, and a refusal bounces and suppresses the recipient; set MAILYARD_SMTP_HELO to the name of the sending address's PTR record", s.HELO)
	}
	return ""
}

// hostname is the EHLO name by default: the machine's name, as mail servers
// expect a name that identifies the sender.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
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

// portNumber reports whether port is a number from min to 65535.
func portNumber(port string, min int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= min && n <= 65535
}

// dialAddress reports whether addr is a host and a port to connect to.
func dialAddress(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	return err == nil && host != "" && portNumber(port, 1)
}

// validURL reports whether a database URL parses, as the PostgreSQL driver
// parses it, with a port (if any) that is a port number.
func validURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	port := u.Port()
	return port == "" || portNumber(port, 1)
}

// DefaultRateLimit is MAILYARD_RATE_LIMIT's default.
const DefaultRateLimit = "20/s"

// DefaultInboundMessageRate is MAILYARD_INBOUND_MESSAGE_RATE's default: a
// client address sends the bounce host 60 messages a minute, 120 at once.
// Reports come from many addresses of a provider, and one deferred with a
// 4xx is sent again later, so a limit costs a flood its reach and a real
// sender a delay.
const DefaultInboundMessageRate = "60/m"

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

// What each long-running process and the migration step require. cmd/mailyard loads
// the configuration with these, and the deploy checks use them to prove that every
// process in deploy/ is given its required settings.
var (
	NeedAPI     = Need{Database: true, EncryptionKey: true, InternalToken: true}
	NeedWorker  = Need{Database: true, EncryptionKey: true}
	NeedDNS     = Need{Database: true}
	NeedInbound = Need{Database: true, EncryptionKey: true}
	// Submission reads keys by digest and stores emails; it decrypts nothing.
	NeedSubmission = Need{Database: true}
	NeedMigrate    = Need{Database: true}
)

// Required lists the variables that have no default and that n requires.
func (n Need) Required() []string {
	var names []string
	if n.Database {
		names = append(names, "MAILYARD_DATABASE_URL")
	}
	if n.EncryptionKey {
		names = append(names, "MAILYARD_ENCRYPTION_KEY")
	}
	if n.InternalToken {
		names = append(names, "MAILYARD_INTERNAL_TOKEN")
	}
	return names
}

// variable is one environment variable LoadFrom reads, and how the start-up log
// shows its setting (secrets only as set or unset).
type variable struct {
	name string
	show func(*Config) string
}

func masked(set bool) string {
	if set {
		return "(set)"
	}
	return "(unset)"
}

// variables is the single list of what LoadFrom reads: LoadFrom refuses to read a
// name missing here (listedOnly), a test proves it reads every name here, and String
// prints them all, so the list, the loader and the log cannot drift apart.
var variables = []variable{
	{"MAILYARD_DATABASE_URL", func(c *Config) string { return RedactURL(c.DatabaseURL) }},
	{"TEMPORAL_ADDRESS", func(c *Config) string { return c.TemporalAddress }},
	{"TEMPORAL_NAMESPACE", func(c *Config) string { return c.TemporalNamespace }},
	{"TEMPORAL_TLS_CERT", func(c *Config) string { return c.TemporalTLS.CertFile }},
	{"TEMPORAL_TLS_KEY", func(c *Config) string { return c.TemporalTLS.KeyFile }},
	{"TEMPORAL_TLS_CA", func(c *Config) string { return c.TemporalTLS.CAFile }},
	{"TEMPORAL_API_KEY", func(c *Config) string { return masked(c.TemporalAPIKey != "") }},
	{"MAILYARD_HTTP_ADDR", func(c *Config) string { return c.HTTPAddr }},
	{"MAILYARD_INTERNAL_ADDR", func(c *Config) string { return c.InternalAddr }},
	{"MAILYARD_INTERNAL_TOKEN", func(c *Config) string { return masked(c.InternalToken != "") }},
	{"MAILYARD_METRICS_ADDR", func(c *Config) string { return c.MetricsAddr }},
	{"MAILYARD_ENCRYPTION_KEY", func(c *Config) string { return masked(len(c.EncryptionKey) > 0) }},
	{"MAILYARD_DKIM_HOST", func(c *Config) string { return c.DKIMHost }},
	{"MAILYARD_SPF_HOST", func(c *Config) string { return c.SPFHost }},
	{"MAILYARD_BOUNCE_HOST", func(c *Config) string { return c.BounceHost }},
	{"MAILYARD_MX_PRIORITY", func(c *Config) string { return strconv.Itoa(c.MXPriority) }},
	{"MAILYARD_DNS_PUBLISHER", func(c *Config) string { return c.DNSPublisher }},
	{"MAILYARD_DNS_ADDR", func(c *Config) string { return c.DNSAddr }},
	{"MAILYARD_DNS_NS_ADDRESSES", func(c *Config) string { return formatIPs(c.DNSNameServerAddrs) }},
	{"MAILYARD_DNS_RATE_LIMIT", func(c *Config) string { return strconv.Itoa(c.DNSRateLimit) }},
	{"MAILYARD_RFC2136_SERVER", func(c *Config) string { return c.RFC2136.Server }},
	{"MAILYARD_RFC2136_TSIG", func(c *Config) string { return maskTSIG(c.RFC2136.TSIG) }},
	{"MAILYARD_DNS_RESOLVER", func(c *Config) string { return c.DNSResolver }},
	{"MAILYARD_VERIFY_SCHEDULE", func(c *Config) string { return formatSchedule(c.VerifySchedule) }},
	{"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS", func(c *Config) string { return strconv.FormatBool(c.WebhookAllowPrivateNetworks) }},
	{"MAILYARD_WEBHOOK_ALLOW_HTTP", func(c *Config) string { return strconv.FormatBool(c.WebhookAllowHTTP) }},
	{"MAILYARD_WEBHOOK_DISABLE_AFTER", func(c *Config) string { return c.WebhookDisableAfter.String() }},
	{"MAILYARD_RATE_LIMIT", func(c *Config) string { return c.RateLimit.String() }},
	{"MAILYARD_DKIM_RETAIN", func(c *Config) string { return c.DKIMRetain.String() }},
	{"MAILYARD_DKIM_RECHECK", func(c *Config) string { return c.DKIMRecheck.String() }},
	{"MAILYARD_SMTP_MODE", func(c *Config) string { return c.SMTP.Mode }},
	{"MAILYARD_SMTP_PORT", func(c *Config) string { return strconv.Itoa(c.SMTP.Port) }},
	{"MAILYARD_SMTP_HELO", func(c *Config) string { return c.SMTP.HELO }},
	{"MAILYARD_SMTP_TLS", func(c *Config) string { return c.SMTP.TLS }},
	{"MAILYARD_SMTP_ALLOW_PRIVATE_NETWORKS", func(c *Config) string { return strconv.FormatBool(c.SMTP.AllowPrivateNetworks) }},
	{"MAILYARD_SMTP_RELAY", func(c *Config) string { return c.SMTP.Relay }},
	{"MAILYARD_SMTP_RELAY_IMPLICIT_TLS", func(c *Config) string { return strconv.FormatBool(c.SMTP.RelayImplicitTLS) }},
	{"MAILYARD_SMTP_RELAY_USERNAME", func(c *Config) string { return c.SMTP.RelayUsername }},
	{"MAILYARD_SMTP_RELAY_PASSWORD", func(c *Config) string { return masked(c.SMTP.RelayPassword != "") }},
	{"MAILYARD_EMAIL_RETENTION", func(c *Config) string { return c.EmailRetention.String() }},
	{"MAILYARD_INBOUND_ADDR", func(c *Config) string { return c.InboundAddr }},
	{"MAILYARD_INBOUND_MESSAGE_RATE", func(c *Config) string { return c.InboundMessageRate.String() }},
	{"MAILYARD_SMTP_TLS_CERT", func(c *Config) string { return c.SMTPServer.TLSCertFile }},
	{"MAILYARD_SMTP_TLS_KEY", func(c *Config) string { return c.SMTPServer.TLSKeyFile }},
	{"MAILYARD_SMTP_MAX_CONNECTIONS", func(c *Config) string { return strconv.Itoa(c.SMTPServer.MaxConnections) }},
	{"MAILYARD_SUBMISSION_ADDR", func(c *Config) string { return c.Submission.Addr }},
	{"MAILYARD_SUBMISSION_TLS_ADDR", func(c *Config) string { return c.Submission.TLSAddr }},
	{"MAILYARD_SUBMISSION_ALLOW_INSECURE_AUTH", func(c *Config) string { return strconv.FormatBool(c.Submission.AllowInsecureAuth) }},
	{"MAILYARD_TRACKING_URL", func(c *Config) string { return c.Tracking.URL }},
	{"MAILYARD_TRACKING_HOST", func(c *Config) string { return c.Tracking.Host }},
	{"MAILYARD_TRACKING_TLS_ADDR", func(c *Config) string { return c.Tracking.TLSAddr }},
	{"MAILYARD_ACME_DIRECTORY", func(c *Config) string { return c.Tracking.ACMEDirectory }},
	{"MAILYARD_ACME_EMAIL", func(c *Config) string { return c.Tracking.ACMEEmail }},
	{"MAILYARD_ACME_CA", func(c *Config) string { return c.Tracking.ACMECAFile }},
}

// Tracking is the configuration of open, click and unsubscribe tracking.
type Tracking struct {
	// URL is the base of every tracking link (scheme and host, maybe a
	// port and path); empty: tracking cannot be turned on.
	URL string
	// Host is what custom tracking domains are a CNAME to (default: URL's
	// host).
	Host string
	// TLSAddr is where `mailyard api` serves HTTPS for verified custom
	// tracking domains, with certificates from ACME; empty: not served.
	TLSAddr string
	// ACMEDirectory is the ACME server's directory URL; ACMEEmail the
	// account's contact; ACMECAFile a PEM file of the CA that signed the ACME
	// server's own certificate (a private ACME server), else the system's.
	ACMEDirectory string
	ACMEEmail     string
	ACMECAFile    string

	urlHost string // URL's host name
}

// Hosts are the host names tracking links use without a custom domain:
// URL's, and Host when it differs.
func (t Tracking) Hosts() []string {
	var hosts []string
	if t.urlHost != "" {
		hosts = append(hosts, t.urlHost)
	}
	if t.Host != "" && t.Host != t.urlHost {
		hosts = append(hosts, t.Host)
	}
	return hosts
}

// DefaultACMEDirectory is Let's Encrypt's production directory.
const DefaultACMEDirectory = "https://acme-v02.api.letsencrypt.org/directory"

func (t *Tracking) load(str func(name, def string) string, addr func(name, def string) string) []error {
	var errs []error
	t.URL = strings.TrimSuffix(str("MAILYARD_TRACKING_URL", ""), "/")
	if t.URL != "" {
		u, err := url.Parse(t.URL)
		// No path: the routes are served at /t/ of the host, and the
		// unsubscribe page's form posts to its own path.
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("MAILYARD_TRACKING_URL: %q is not an http or https URL without path or query (e.g. https://t.example.com)", t.URL))
		} else {
			t.urlHost = strings.ToLower(u.Hostname())
		}
	}
	t.Host = strings.TrimSuffix(strings.ToLower(str("MAILYARD_TRACKING_HOST", t.urlHost)), ".")
	// Customers' CNAME records name it (docs/tracking.md): a URL or a port
	// would be handed out and never verify. (The URL's own host may be an
	// address, for a development server.)
	if t.Host != t.urlHost {
		if _, err := domainname.NormalizeHost(t.Host); err != nil {
			errs = append(errs, fmt.Errorf("MAILYARD_TRACKING_HOST: %v", err))
		}
	}
	if t.TLSAddr = str("MAILYARD_TRACKING_TLS_ADDR", ""); t.TLSAddr != "" {
		t.TLSAddr = addr("MAILYARD_TRACKING_TLS_ADDR", "")
	}
	t.ACMEDirectory = str("MAILYARD_ACME_DIRECTORY", DefaultACMEDirectory)
	if u, err := url.Parse(t.ACMEDirectory); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("MAILYARD_ACME_DIRECTORY: %q is not an https URL", t.ACMEDirectory))
	}
	t.ACMEEmail = str("MAILYARD_ACME_EMAIL", "")
	t.ACMECAFile = str("MAILYARD_ACME_CA", "")
	return errs
}

// maskTSIG keeps the key's name and algorithm, which an operator needs to match
// the DNS server's configuration, and hides its secret.
func maskTSIG(tsig string) string {
	if tsig == "" {
		return ""
	}
	parts := strings.SplitN(tsig, ":", 3)
	if len(parts) < 3 {
		return masked(true)
	}
	return parts[0] + ":" + parts[1] + ":" + masked(true)
}

// Variables returns the names of every environment variable the configuration
// reads, in a stable order.
func Variables() []string {
	names := make([]string, len(variables))
	for i, v := range variables {
		names[i] = v.name
	}
	return names
}

// listedOnly wraps getenv so that reading a name missing from variables is a
// programming error caught by any test that loads a configuration.
func listedOnly(getenv Getenv) Getenv {
	return func(name string) string {
		for _, v := range variables {
			if v.name == name {
				return getenv(name)
			}
		}
		panic("config: " + name + " is read but missing from the variables list")
	}
}

// Getenv is os.Getenv's shape, so tests and `mailyard dev` can supply their own.
type Getenv func(string) string

// Load reads the configuration with os.Getenv.
func Load(need Need) (*Config, error) { return LoadFrom(os.Getenv, need) }

// LoadFrom reads the configuration through getenv and returns every problem at once,
// one line per variable, so an operator fixes them all in one go.
func LoadFrom(getenv Getenv, need Need) (*Config, error) {
	getenv = listedOnly(getenv)
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
	// A listener's address may leave the host out (every interface) and
	// take port 0 (any free one).
	addr := func(name, def string) string {
		v := str(name, def)
		if _, port, err := net.SplitHostPort(v); err != nil || !portNumber(port, 0) {
			errs = append(errs, fmt.Errorf("%s: %q is not a host:port address", name, v))
		}
		return v
	}

	c := &Config{
		DatabaseURL:       str("MAILYARD_DATABASE_URL", ""),
		TemporalAddress:   str("TEMPORAL_ADDRESS", "localhost:7233"),
		TemporalNamespace: str("TEMPORAL_NAMESPACE", "default"),
		TemporalTLS: TemporalTLS{
			CertFile: str("TEMPORAL_TLS_CERT", ""), KeyFile: str("TEMPORAL_TLS_KEY", ""), CAFile: str("TEMPORAL_TLS_CA", ""),
		},
		TemporalAPIKey:              strings.TrimSpace(getenv("TEMPORAL_API_KEY")),
		MetricsAddr:                 str("MAILYARD_METRICS_ADDR", ""),
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
		EmailRetention:              duration("MAILYARD_EMAIL_RETENTION", 7*24*time.Hour),
		SMTP: SMTP{
			Mode:                 str("MAILYARD_SMTP_MODE", "mx"),
			HELO:                 str("MAILYARD_SMTP_HELO", hostname()),
			TLS:                  str("MAILYARD_SMTP_TLS", "opportunistic"),
			AllowPrivateNetworks: boolean("MAILYARD_SMTP_ALLOW_PRIVATE_NETWORKS", false),
			Relay:                str("MAILYARD_SMTP_RELAY", ""),
			RelayImplicitTLS:     boolean("MAILYARD_SMTP_RELAY_IMPLICIT_TLS", false),
			RelayUsername:        str("MAILYARD_SMTP_RELAY_USERNAME", ""),
			RelayPassword:        getenv("MAILYARD_SMTP_RELAY_PASSWORD"),
		},
	}
	errs = append(errs, c.SMTP.load(str("MAILYARD_SMTP_PORT", "25"))...)

	// Customers' DNS records name these hosts: a name that is not one would
	// be handed out, and fail only in their zones.
	for name, host := range map[string]string{"MAILYARD_DKIM_HOST": c.DKIMHost, "MAILYARD_SPF_HOST": c.SPFHost, "MAILYARD_BOUNCE_HOST": c.BounceHost} {
		if _, err := domainname.NormalizeHost(host); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
		}
	}
	c.InboundAddr = addr("MAILYARD_INBOUND_ADDR", ":25")
	c.SMTPServer.TLSCertFile, c.SMTPServer.TLSKeyFile = str("MAILYARD_SMTP_TLS_CERT", ""), str("MAILYARD_SMTP_TLS_KEY", "")
	if (c.SMTPServer.TLSCertFile == "") != (c.SMTPServer.TLSKeyFile == "") {
		errs = append(errs, errors.New("MAILYARD_SMTP_TLS_CERT and MAILYARD_SMTP_TLS_KEY: set both or neither"))
	}
	c.Submission.Addr = addr("MAILYARD_SUBMISSION_ADDR", ":587")
	if c.Submission.TLSAddr = str("MAILYARD_SUBMISSION_TLS_ADDR", ""); c.Submission.TLSAddr != "" {
		c.Submission.TLSAddr = addr("MAILYARD_SUBMISSION_TLS_ADDR", "")
		if c.SMTPServer.TLSCertFile == "" {
			errs = append(errs, errors.New("MAILYARD_SUBMISSION_TLS_ADDR: implicit TLS needs MAILYARD_SMTP_TLS_CERT and MAILYARD_SMTP_TLS_KEY"))
		}
	}
	errs = append(errs, c.Tracking.load(str, addr)...)
	c.Submission.AllowInsecureAuth = boolean("MAILYARD_SUBMISSION_ALLOW_INSECURE_AUTH", false)
	if c.Submission.AllowInsecureAuth && !IsLoopback(c.Submission.Addr) {
		// A key sent in clear text over a network is a key given away.
		errs = append(errs, fmt.Errorf("MAILYARD_SUBMISSION_ALLOW_INSECURE_AUTH: AUTH without TLS is allowed on loopback only, not on MAILYARD_SUBMISSION_ADDR %q", c.Submission.Addr))
	}
	maxConns := str("MAILYARD_SMTP_MAX_CONNECTIONS", "500")
	if n, err := strconv.Atoi(maxConns); err != nil || n < 1 || n > 100000 {
		errs = append(errs, fmt.Errorf("MAILYARD_SMTP_MAX_CONNECTIONS: %q is not a number from 1 to 100000", maxConns))
	} else {
		c.SMTPServer.MaxConnections = n
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
		schedule, err := ParseSchedule(raw)
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

	if limit, err := ParseRateLimit(str("MAILYARD_INBOUND_MESSAGE_RATE", DefaultInboundMessageRate)); err != nil {
		errs = append(errs, fmt.Errorf("MAILYARD_INBOUND_MESSAGE_RATE: %v", err))
	} else {
		c.InboundMessageRate = limit
	}

	dnsLimit := str("MAILYARD_DNS_RATE_LIMIT", "50")
	if n, err := strconv.Atoi(dnsLimit); err != nil || n < 0 || n > 1000000 {
		errs = append(errs, fmt.Errorf("MAILYARD_DNS_RATE_LIMIT: %q is not a number of answers per second from 0 (no limit) to 1000000", dnsLimit))
	} else {
		c.DNSRateLimit = n
	}

	prio := str("MAILYARD_MX_PRIORITY", "10")
	if n, err := strconv.Atoi(prio); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("MAILYARD_MX_PRIORITY: %q is not a number from 0 to 65535", prio))
	} else {
		c.MXPriority = n
	}

	if (c.TemporalTLS.CertFile == "") != (c.TemporalTLS.KeyFile == "") {
		errs = append(errs, errors.New("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both (mutual TLS) or neither"))
	}

	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("MAILYARD_METRICS_ADDR: %q is not a host:port address (or leave it empty to serve no metrics)", c.MetricsAddr))
		}
	}

	for _, a := range strings.Split(str("MAILYARD_DNS_NS_ADDRESSES", ""), ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ip := net.ParseIP(a)
		if ip == nil {
			errs = append(errs, fmt.Errorf("MAILYARD_DNS_NS_ADDRESSES: %q is not an IP address", a))
			continue
		}
		c.DNSNameServerAddrs = append(c.DNSNameServerAddrs, ip)
	}

	if !dialAddress(c.TemporalAddress) {
		errs = append(errs, fmt.Errorf("TEMPORAL_ADDRESS: %q is not a host:port address", c.TemporalAddress))
	}
	if c.DNSResolver != "" {
		if !dialAddress(c.DNSResolver) {
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
		case !strings.HasPrefix(c.DatabaseURL, "sqlite://") && !validURL(c.DatabaseURL):
			// The value is not repeated: it holds the password.
			errs = append(errs, errors.New("MAILYARD_DATABASE_URL: not a valid URL; percent-encode any /, ?, #, @, : or % in the user name or password (e.g. / as %2F)"))
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

// String prints every setting as NAME=value for the start-up log, secrets masked,
// in the order of Variables.
func (c *Config) String() string {
	var b strings.Builder
	for i, v := range variables {
		if i > 0 {
			b.WriteByte(' ')
		}
		val := v.show(c)
		if val == "" || strings.ContainsAny(val, " \t\"=") {
			val = strconv.Quote(val)
		}
		b.WriteString(v.name + "=" + val)
	}
	return b.String()
}

// RedactURL hides a password in a database URL, read as the driver reads it
// (net/url: the user information ends at the last "@" before the host, so a
// password may hold "@"). A value that is not a URL is hidden whole.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return masked(true)
	}
	// libpq's form also takes the password as a parameter of the query.
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = strings.Replace(q.Encode(), "password=xxxxx", "password=***", 1)
	}
	// Redacted writes the password as "xxxxx"; shown as the other
	// secrets' "***" (url.UserPassword would escape the asterisks).
	return strings.Replace(u.Redacted(), ":xxxxx@", ":***@", 1)
}

// IsLoopback reports whether addr is host:port on a loopback address.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// formatIPs shows addresses as a comma-separated list.
func formatIPs(ips []net.IP) string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return strings.Join(out, ",")
}
