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
