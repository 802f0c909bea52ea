package dnspublish

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const validSecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=" // any base64

func TestNewRFC2136(t *testing.T) {
	tests := []struct {
		server, tsig, zone string
		wantServer         string
		wantAlgorithm      string
	}{
		{"ns.example.net", "mailyard:hmac-sha256:" + validSecret, "dkim.mailyard.test", "ns.example.net:53", dns.HmacSHA256},
		{"192.0.2.1:5353", "Mailyard.Key.:HMAC-SHA512:" + validSecret, "DKIM.mailyard.test.", "192.0.2.1:5353", dns.HmacSHA512},
		{"2001:db8::1", "k:hmac-sha1:" + validSecret, "dkim.mailyard.test", "[2001:db8::1]:53", dns.HmacSHA1},
		{"[2001:db8::1]:53", "k:hmac-md5:" + validSecret, "dkim.mailyard.test", "[2001:db8::1]:53", dns.HmacMD5},
	}
	for _, tt := range tests {
		p, err := NewRFC2136(tt.server, tt.tsig, tt.zone)
		if err != nil {
			t.Errorf("NewRFC2136(%q, %q, %q): %v", tt.server, tt.tsig, tt.zone, err)
			continue
		}
		if p.server != tt.wantServer || p.key.algorithm != tt.wantAlgorithm || p.zone != "dkim.mailyard.test." {
			t.Errorf("NewRFC2136(%q, ...) = server %q, algorithm %q, zone %q", tt.server, p.server, p.key.algorithm, p.zone)
		}
		if !strings.HasSuffix(p.key.name, ".") || p.key.name != strings.ToLower(p.key.name) {
			t.Errorf("key name %q is not canonical", p.key.name)
		}
	}
}

func TestNewRFC2136Rejects(t *testing.T) {
	tests := []struct {
		server, tsig, zone, wantInError string
	}{
		{"", "k:hmac-sha256:" + validSecret, "dkim.mailyard.test", "server is empty"},
		{":53", "k:hmac-sha256:" + validSecret, "dkim.mailyard.test", "not host or host:port"},
		{"ns:domain", "k:hmac-sha256:" + validSecret, "dkim.mailyard.test", "not host or host:port"},
		{"ns:53", "", "dkim.mailyard.test", "name:algorithm:base64secret"},
		{"ns:53", "k:" + validSecret, "dkim.mailyard.test", "name:algorithm:base64secret"},
		{"ns:53", ":hmac-sha256:" + validSecret, "dkim.mailyard.test", "key name is empty"},
		{"ns:53", "k:hmac-sha999:" + validSecret, "dkim.mailyard.test", `algorithm "hmac-sha999" is not supported`},
		{"ns:53", "k:hmac-sha256:not base64!", "dkim.mailyard.test", "not valid base64"},
		{"ns:53", "k:hmac-sha256:", "dkim.mailyard.test", "secret of key \"k\" is empty"},
		{"ns:53", "k:hmac-sha256:" + validSecret, "", "not a valid zone name"},
		{"ns:53", "k:hmac-sha256:" + validSecret, "bad..zone", "not a valid zone name"},
	}
	for _, tt := range tests {
		_, err := NewRFC2136(tt.server, tt.tsig, tt.zone)
		if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
			t.Errorf("NewRFC2136(%q, %q, %q) error = %v, want it to contain %q", tt.server, tt.tsig, tt.zone, err, tt.wantInError)
		}
		if err != nil && strings.Contains(err.Error(), validSecret) {
			t.Errorf("error %q reveals the secret", err)
		}
	}
}

func TestRFC2136RejectsNamesOutsideTheZone(t *testing.T) {
	p, err := NewRFC2136("127.0.0.1:1", "k:hmac-sha256:"+validSecret, "dkim.mailyard.test")
	if err != nil {
		t.Fatal(err)
	}
	// Checked before anything is sent, so the unreachable server is never
	// contacted.
	err = p.Publish(context.Background(), []Record{{Name: "abc-1.example.com", Value: "v"}})
	if err == nil || !strings.Contains(err.Error(), "outside the zone dkim.mailyard.test") {
		t.Errorf("Publish outside the zone: error = %v", err)
	}
	err = p.Unpublish(context.Background(), []string{""})
	if err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("Unpublish of an empty name: error = %v", err)
	}
	if err := p.Publish(context.Background(), nil); err != nil {
		t.Errorf("Publish of nothing: %v", err)
	}
}

// An answer to a signed update that is not signed (a forger on the way, a
// proxy that strips the record) is not taken as the update's success.
func TestRFC2136RefusesAnUnsignedAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, MsgAcceptFunc: func(dns.Header) dns.MsgAcceptAction { return dns.MsgAccept }, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		resp := new(dns.Msg)
		resp.SetReply(req)
		resp.Rcode = dns.RcodeSuccess // NOERROR, without TSIG
		_ = w.WriteMsg(resp)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })

	pub, err := NewRFC2136(ln.Addr().String(), "k:hmac-sha256:"+validSecret, "dkim.mailyard.test")
	if err != nil {
		t.Fatal(err)
	}
	pub.Timeout = 5 * time.Second
	err = pub.Publish(context.Background(), []Record{{Name: "a.dkim.mailyard.test", Value: "v=DKIM1; p=abc"}})
	if err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("an unsigned NOERROR answer: %v, want an error saying it is not signed", err)
	}
}
