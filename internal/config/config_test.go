package config

import (
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) Getenv { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := LoadFrom(env(nil), Need{})
	if err != nil {
		t.Fatal(err)
	}
	if c.TemporalAddress != "localhost:7233" || c.HTTPAddr != ":8080" || c.DKIMHost != "dkim.mailyard.test" || c.MXPriority != 10 || c.DNSPublisher != "embedded" || c.WebhookAllowHTTP {
		t.Fatalf("defaults %+v", c)
	}
}

// Every problem is reported, one line each, naming its variable.
func TestEveryProblemNamesItsVariable(t *testing.T) {
	_, err := LoadFrom(env(map[string]string{
		"MAILYARD_DATABASE_URL":       "mysql://x",
		"MAILYARD_ENCRYPTION_KEY":     "c2hvcnQ=",
		"MAILYARD_MX_PRIORITY":        "high",
		"MAILYARD_DNS_PUBLISHER":      "route53",
		"MAILYARD_HTTP_ADDR":          "8080",
		"MAILYARD_WEBHOOK_ALLOW_HTTP": "maybe",
		"MAILYARD_VERIFY_SCHEDULE":    "1m",
		"MAILYARD_DNS_RESOLVER":       "8.8.8.8",
		"MAILYARD_RATE_LIMIT":         "fast",
	}), Need{Database: true, EncryptionKey: true, InternalToken: true})
	if err == nil {
		t.Fatal("no error")
	}
	for _, name := range []string{"MAILYARD_DATABASE_URL", "MAILYARD_ENCRYPTION_KEY", "MAILYARD_MX_PRIORITY", "MAILYARD_DNS_PUBLISHER", "MAILYARD_HTTP_ADDR", "MAILYARD_WEBHOOK_ALLOW_HTTP", "MAILYARD_VERIFY_SCHEDULE", "MAILYARD_DNS_RESOLVER", "MAILYARD_INTERNAL_TOKEN", "MAILYARD_RATE_LIMIT"} {
		found := 0
		for _, l := range strings.Split(err.Error(), "\n") {
			if strings.HasPrefix(l, name+":") {
				found++
			}
		}
		if found != 1 {
			t.Errorf("%s reported %d times in:\n%s", name, found, err)
		}
	}
}

func TestRateLimit(t *testing.T) {
	c, err := LoadFrom(env(nil), Need{})
	if err != nil {
		t.Fatal(err)
	}
	if c.RateLimit.Requests != 20 || c.RateLimit.Per != time.Second || c.RateLimit.Burst() != 40 || c.RateLimit.PerSecond() != 20 || c.RateLimit.String() != "20/s" {
		t.Fatalf("default rate limit %+v", c.RateLimit)
	}
	for in, want := range map[string]RateLimit{
		"20/s":     {20, time.Second},
		"600/m":    {600, time.Minute},
		" 1000/H ": {1000, time.Hour},
		"off":      {},
		"OFF":      {},
	} {
		got, err := ParseRateLimit(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	if r, _ := ParseRateLimit("600/m"); r.PerSecond() != 10 || r.Burst() != 1200 || r.String() != "600/m" {
		t.Errorf("600/m: %+v", r)
	}
	for _, bad := range []string{"20", "20/d", "0/s", "-1/s", "x/s", "20/", "/s", "1.5/s", "2000000/s"} {
		if _, err := ParseRateLimit(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := LoadFrom(env(map[string]string{"MAILYARD_RATE_LIMIT": "20 per second"}), Need{}); err == nil ||
		!strings.HasPrefix(err.Error(), "MAILYARD_RATE_LIMIT: ") || !strings.Contains(err.Error(), "600/m") {
		t.Fatalf("invalid rate limit: %v", err)
	}
}

func TestRFC2136NeedsServerAndKey(t *testing.T) {
	_, err := LoadFrom(env(map[string]string{"MAILYARD_DNS_PUBLISHER": "rfc2136"}), Need{})
	if err == nil || !strings.Contains(err.Error(), "MAILYARD_RFC2136_SERVER") || !strings.Contains(err.Error(), "MAILYARD_RFC2136_TSIG") {
		t.Fatalf("%v", err)
	}
}

func TestStringMasksSecrets(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{
		"MAILYARD_DATABASE_URL":   "postgres://u:hunter2@db/x",
		"MAILYARD_INTERNAL_TOKEN": "tok-secret",
		"MAILYARD_ENCRYPTION_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
	}), Need{Database: true})
	if err != nil {
		t.Fatal(err)
	}
	s := c.String()
	for _, secret := range []string{"hunter2", "tok-secret", "AAECAw"} {
		if strings.Contains(s, secret) {
			t.Fatalf("%q printed: %s", secret, s)
		}
	}
}

func TestWebhookDisableAfter(t *testing.T) {
	c, err := LoadFrom(env(nil), Need{})
	if err != nil || c.WebhookDisableAfter != 120*time.Hour {
		t.Fatalf("default %v %v", c, err)
	}
	c, err = LoadFrom(env(map[string]string{"MAILYARD_WEBHOOK_DISABLE_AFTER": "30s"}), Need{})
	if err != nil || c.WebhookDisableAfter != 30*time.Second {
		t.Fatalf("30s: %v", err)
	}
	for _, bad := range []string{"5 days", "-1h", "0s"} {
		_, err := LoadFrom(env(map[string]string{"MAILYARD_WEBHOOK_DISABLE_AFTER": bad}), Need{})
		if err == nil || !strings.HasPrefix(err.Error(), "MAILYARD_WEBHOOK_DISABLE_AFTER:") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	steps, err := ParseSchedule("1m/10m, 5m/1h,30m/72h")
	if err != nil || len(steps) != 3 || steps[2] != (ScheduleStep{Every: 30 * time.Minute, Until: 72 * time.Hour}) {
		t.Fatalf("%v %v", steps, err)
	}
	for _, bad := range []string{"", "1m", "1m/10m,5m/5m", "0s/1m", "x/1h"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	c, err := LoadFrom(env(map[string]string{"MAILYARD_VERIFY_SCHEDULE": "10s/1m,1m/5m"}), Need{})
	if err != nil || len(c.VerifySchedule) != 2 || c.VerifySchedule[0] != (ScheduleStep{Every: 10 * time.Second, Until: time.Minute}) {
		t.Fatalf("%+v %v", c, err)
	}
}

// LoadFrom reads every listed variable (and listedOnly makes it panic on any
// other), so Variables is exactly what the binary reads.
func TestVariablesAreWhatLoadFromReads(t *testing.T) {
	read := map[string]bool{}
	if _, err := LoadFrom(func(name string) string { read[name] = true; return "" }, Need{}); err != nil {
		t.Fatal(err)
	}
	names := Variables()
	for _, name := range names {
		if !read[name] {
			t.Errorf("%s is listed but LoadFrom never reads it", name)
		}
	}
	if len(read) != len(names) {
		t.Errorf("LoadFrom read %d names, %d listed", len(read), len(names))
	}
	defer func() {
		if recover() == nil {
			t.Error("reading an unlisted name did not panic")
		}
	}()
	listedOnly(env(nil))("MAILYARD_NOT_A_SETTING")
}

// The start-up log names every variable with its value, secrets masked, the
// webhook safety switches included.
func TestStringShowsEverySetting(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{
		"MAILYARD_DATABASE_URL":                   "postgres://u:hunter2@db/x",
		"MAILYARD_INTERNAL_TOKEN":                 "tok-secret",
		"MAILYARD_ENCRYPTION_KEY":                 "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"MAILYARD_DNS_PUBLISHER":                  "rfc2136",
		"MAILYARD_RFC2136_SERVER":                 "ns1.example.net:53",
		"MAILYARD_RFC2136_TSIG":                   "upd.:hmac-sha256:c2VjcmV0LXRzaWc=",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
		"MAILYARD_VERIFY_SCHEDULE":                "1m/10m,5m/1h",
	}), NeedAPI)
	if err != nil {
		t.Fatal(err)
	}
	s := c.String()
	for _, name := range Variables() {
		if !strings.Contains(s, name+"=") {
			t.Errorf("%s missing from %s", name, s)
		}
	}
	for _, want := range []string{
		"MAILYARD_DATABASE_URL=postgres://u:***@db/x", "MAILYARD_INTERNAL_TOKEN=(set)", "MAILYARD_ENCRYPTION_KEY=(set)",
		"MAILYARD_RFC2136_TSIG=upd.:hmac-sha256:(set)", "MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=false", "MAILYARD_VERIFY_SCHEDULE=1m0s/10m0s,5m0s/1h0m0s", `MAILYARD_DNS_RESOLVER=""`,
		"MAILYARD_RATE_LIMIT=20/s", "MAILYARD_DKIM_RETAIN=168h0m0s", "MAILYARD_INBOUND_MESSAGE_RATE=60/m",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("%q missing from %s", want, s)
		}
	}
	for _, secret := range []string{"hunter2", "tok-secret", "AAECAw", "c2VjcmV0"} {
		if strings.Contains(s, secret) {
			t.Errorf("%q printed: %s", secret, s)
		}
	}
}

// Need.Required names exactly the variables LoadFrom demands for that need.
func TestRequiredMatchesLoadFrom(t *testing.T) {
	for _, need := range []Need{NeedAPI, NeedWorker, NeedDNS, NeedMigrate, {}} {
		_, err := LoadFrom(env(nil), need)
		var got []string
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				name, _, _ := strings.Cut(line, ":")
				got = append(got, name)
			}
		}
		if strings.Join(got, ",") != strings.Join(need.Required(), ",") {
			t.Errorf("%+v: LoadFrom demands %v, Required says %v", need, got, need.Required())
		}
	}
}

// The Temporal connection's settings: the API key is a secret, the TLS files
// are paths (shown), and a certificate needs its key.
func TestTemporalTLSAndAPIKey(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{
		"TEMPORAL_TLS_CERT": "/etc/mailyard/temporal.crt",
		"TEMPORAL_TLS_KEY":  "/etc/mailyard/temporal.key",
		"TEMPORAL_TLS_CA":   "/etc/mailyard/ca.crt",
		"TEMPORAL_API_KEY":  "tmprl-api-key-secret",
	}), Need{})
	if err != nil {
		t.Fatal(err)
	}
	want := TemporalTLS{CertFile: "/etc/mailyard/temporal.crt", KeyFile: "/etc/mailyard/temporal.key", CAFile: "/etc/mailyard/ca.crt"}
	if c.TemporalTLS != want || !c.TemporalTLS.Enabled() || c.TemporalAPIKey != "tmprl-api-key-secret" {
		t.Fatalf("loaded %+v %q", c.TemporalTLS, c.TemporalAPIKey)
	}
	s := c.String()
	if strings.Contains(s, "tmprl-api-key-secret") || !strings.Contains(s, "TEMPORAL_API_KEY=(set)") ||
		!strings.Contains(s, "TEMPORAL_TLS_CERT=/etc/mailyard/temporal.crt") || !strings.Contains(s, "TEMPORAL_TLS_CA=/etc/mailyard/ca.crt") {
		t.Fatalf("start-up line: %s", s)
	}
	if c, _ := LoadFrom(env(nil), Need{}); c.TemporalTLS.Enabled() || !strings.Contains(c.String(), "TEMPORAL_API_KEY=(unset)") {
		t.Fatalf("defaults: %+v %s", c.TemporalTLS, c.String())
	}
	for _, only := range []string{"TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY"} {
		_, err := LoadFrom(env(map[string]string{only: "/x.pem"}), Need{})
		if err == nil || !strings.HasPrefix(err.Error(), "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both") {
			t.Errorf("only %s: %v", only, err)
		}
	}
}

func TestMetricsAddr(t *testing.T) {
	if c, err := LoadFrom(env(nil), Need{}); err != nil || c.MetricsAddr != "" || !strings.Contains(c.String(), `MAILYARD_METRICS_ADDR=""`) {
		t.Fatalf("default: %v", err)
	}
	if c, err := LoadFrom(env(map[string]string{"MAILYARD_METRICS_ADDR": "0.0.0.0:9090"}), Need{}); err != nil || c.MetricsAddr != "0.0.0.0:9090" {
		t.Fatalf("0.0.0.0:9090: %v", err)
	}
	if _, err := LoadFrom(env(map[string]string{"MAILYARD_METRICS_ADDR": "9090"}), Need{}); err == nil || !strings.HasPrefix(err.Error(), "MAILYARD_METRICS_ADDR:") {
		t.Fatalf("9090: %v", err)
	}
}

func TestTrackingHosts(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"MAILYARD_TRACKING_URL": "https://T.Example.com/"}), Need{})
	if err != nil || c.Tracking.URL != "https://T.Example.com" || c.Tracking.Host != "t.example.com" || strings.Join(c.Tracking.Hosts(), " ") != "t.example.com" {
		t.Fatalf("%+v %v %v", c.Tracking, c.Tracking.Hosts(), err)
	}
	c, _ = LoadFrom(env(map[string]string{"MAILYARD_TRACKING_URL": "https://t.example.com", "MAILYARD_TRACKING_HOST": "cname.example.net."}), Need{})
	if strings.Join(c.Tracking.Hosts(), " ") != "t.example.com cname.example.net" {
		t.Fatalf("hosts %v", c.Tracking.Hosts())
	}
	if c, _ := LoadFrom(env(nil), Need{}); len(c.Tracking.Hosts()) != 0 {
		t.Fatalf("hosts without tracking: %v", c.Tracking.Hosts())
	}
	// The routes are at /t/ of the host: a path would be handed out in
	// links that the unsubscribe page's form does not follow.
	for _, bad := range []string{"ftp://t.example.com", "https://t.example.com/track"} {
		if _, err := LoadFrom(env(map[string]string{"MAILYARD_TRACKING_URL": bad}), Need{}); err == nil || !strings.Contains(err.Error(), "MAILYARD_TRACKING_URL") {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}

// AUTH without TLS sends a key in clear text: it is allowed on loopback
// only, for `mailyard submission` as for dev.
func TestInsecureAuthOnLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:2587": true, "localhost:2587": true, "[::1]:2587": true, ":587": false, "0.0.0.0:587": false, "10.0.0.5:587": false} {
		_, err := LoadFrom(env(map[string]string{"MAILYARD_SUBMISSION_ALLOW_INSECURE_AUTH": "true", "MAILYARD_SUBMISSION_ADDR": addr}), Need{})
		if got := err == nil; got != ok {
			t.Errorf("insecure AUTH on %s: %v, want allowed %v", addr, err, ok)
		} else if err != nil && !strings.Contains(err.Error(), "MAILYARD_SUBMISSION_ALLOW_INSECURE_AUTH") {
			t.Errorf("the error does not name the variable: %v", err)
		}
	}
}

// The hosts customers' records name must be host names: a space or an
// underscore would be handed out and fail only in their zones.
func TestPublicHostsAreHostNames(t *testing.T) {
	for _, name := range []string{"MAILYARD_DKIM_HOST", "MAILYARD_SPF_HOST", "MAILYARD_BOUNCE_HOST", "MAILYARD_TRACKING_HOST"} {
		for _, bad := range []string{"a b.example", "bad_host.example", "-x.example", "192.0.2.1", "https://t.example.com", "t.example.com:443"} {
			_, err := LoadFrom(env(map[string]string{name: bad}), Need{})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: %v, want an error naming the variable", name, bad, err)
			}
		}
		if _, err := LoadFrom(env(map[string]string{name: "Mail.Example.NET."}), Need{}); err != nil {
			t.Errorf("%s of a good name: %v", name, err)
		}
	}
}

// The DKIM zone's name server addresses are IP addresses, v4 and v6.
func TestDNSNameServerAddresses(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"MAILYARD_DNS_NS_ADDRESSES": "192.0.2.53, 2001:db8::53"}), Need{})
	if err != nil || len(c.DNSNameServerAddrs) != 2 || c.DNSNameServerAddrs[1].String() != "2001:db8::53" {
		t.Fatalf("%v, %v", c.DNSNameServerAddrs, err)
	}
	if _, err := LoadFrom(env(map[string]string{"MAILYARD_DNS_NS_ADDRESSES": "ns1.example.net"}), Need{}); err == nil || !strings.Contains(err.Error(), "MAILYARD_DNS_NS_ADDRESSES") {
		t.Fatalf("a host name: %v", err)
	}
}

// The DNS server's rate limit is answers per second, 50 unless set, 0 for
// none; anything else is refused.
func TestDNSRateLimit(t *testing.T) {
	for value, want := range map[string]int{"": 50, "0": 0, " 200 ": 200} {
		c, err := LoadFrom(env(map[string]string{"MAILYARD_DNS_RATE_LIMIT": value}), Need{})
		if err != nil || c.DNSRateLimit != want {
			t.Errorf("%q: %d, %v; want %d", value, c.DNSRateLimit, err, want)
		}
	}
	for _, value := range []string{"-1", "fast", "1e3"} {
		if _, err := LoadFrom(env(map[string]string{"MAILYARD_DNS_RATE_LIMIT": value}), Need{}); err == nil || !strings.Contains(err.Error(), "MAILYARD_DNS_RATE_LIMIT") {
			t.Errorf("%q: %v", value, err)
		}
	}
}

// The inbound server's message rate per client address is 60/m unless set,
// "off" for none, and is read as MAILYARD_RATE_LIMIT is.
func TestInboundMessageRate(t *testing.T) {
	for value, want := range map[string]string{"": "60/m", "off": "off", "10/s": "10/s"} {
		c, err := LoadFrom(env(map[string]string{"MAILYARD_INBOUND_MESSAGE_RATE": value}), Need{})
		if err != nil || c.InboundMessageRate.String() != want {
			t.Errorf("%q: %v, %v; want %s", value, c.InboundMessageRate, err, want)
		}
	}
	if _, err := LoadFrom(env(map[string]string{"MAILYARD_INBOUND_MESSAGE_RATE": "lots"}), Need{}); err == nil ||
		!strings.HasPrefix(err.Error(), "MAILYARD_INBOUND_MESSAGE_RATE: ") {
		t.Errorf("lots: %v", err)
	}
}

// The database URL is printed with its password hidden, read as the driver
// reads it: a password may hold "@" (the user information ends at the last
// one), and before, what followed the first "@" was printed.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://mailyard:S3cr@tP4ss@db:5432/x?sslmode=disable": "postgres://mailyard:***@db:5432/x?sslmode=disable",
		"postgres://mailyard@db/x":                                 "postgres://mailyard@db/x",
		"postgres://db/x":                                          "postgres://db/x",
		"postgres://u:p%zz@db/x":                                   "(set)",
		"postgres://mailyard@db/x?password=S3cret&sslmode=disable": "postgres://mailyard@db/x?password=***&sslmode=disable",
		"postgres://u:p@db/x?password=S3cret":                      "postgres://u:***@db/x?password=***",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// A database URL the driver cannot read (a password with an unencoded "/")
// is refused at start with a message that does not repeat the password.
func TestDatabaseURLMustParse(t *testing.T) {
	for _, bad := range []string{"postgres://mailyard:ab/c+d=@db/mailyard", "postgres://u:p@db:99999/x"} {
		_, err := LoadFrom(env(map[string]string{"MAILYARD_DATABASE_URL": bad}), Need{Database: true})
		if err == nil || !strings.Contains(err.Error(), "MAILYARD_DATABASE_URL: not a valid URL") || strings.Contains(err.Error(), "ab/c") || strings.Contains(err.Error(), ":p@") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := LoadFrom(env(map[string]string{"MAILYARD_DATABASE_URL": "postgres://u:p%2Fq@db:5432/x?sslmode=disable"}), Need{Database: true}); err != nil && strings.Contains(err.Error(), "MAILYARD_DATABASE_URL") {
		t.Errorf("an encoded password: %v", err)
	}
}

// Addresses with a port that is not one are refused at start, naming the
// variable, instead of failing later (a bind error without the name, or
// emails deferred for a relay that cannot be dialled). A listener may take
// port 0 and leave the host out; an address to connect to needs both.
func TestAddressesNeedPortNumbers(t *testing.T) {
	for name, value := range map[string]string{
		"TEMPORAL_ADDRESS":      "temporal:72333",
		"MAILYARD_HTTP_ADDR":    ":99999",
		"MAILYARD_DNS_RESOLVER": "8.8.8.8:abc",
		"MAILYARD_SMTP_RELAY":   ":25",
	} {
		vars := map[string]string{name: value}
		if name == "MAILYARD_SMTP_RELAY" {
			vars["MAILYARD_SMTP_MODE"] = "relay"
		}
		if _, err := LoadFrom(env(vars), Need{}); err == nil || !strings.Contains(err.Error(), name+": ") {
			t.Errorf("%s=%s: %v", name, value, err)
		}
	}
	if _, err := LoadFrom(env(map[string]string{"MAILYARD_HTTP_ADDR": "127.0.0.1:0", "TEMPORAL_ADDRESS": "[::1]:7233"}), Need{}); err != nil {
		t.Errorf("a listener on port 0 and an IPv6 Temporal address: %v", err)
	}
}

// In mx mode the EHLO name reaches the world: one without a domain (a
// container's host name, the default) is named as a problem, which the
// worker logs at start; relay mode takes any name.
func TestHELOProblem(t *testing.T) {
	for helo, ok := range map[string]bool{"mail.example.net": true, "Mail.Example.NET.": true, "[192.0.2.25]": true, "3f2a9c1d7e4b": false, "localhost": false, "bad_host.example": false} {
		s := SMTP{Mode: "mx", HELO: helo}
		if got := s.HELOProblem() == ""; got != ok {
			t.Errorf("EHLO %q in mx mode: problem %q, want fine %v", helo, s.HELOProblem(), ok)
		}
		if s.Mode = "relay"; s.HELOProblem() != "" {
			t.Errorf("EHLO %q in relay mode: %q", helo, s.HELOProblem())
		}
	}
}
