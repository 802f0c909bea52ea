package smtpsend_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailyard/mailyard/internal/dnscheck"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/testenv"
)

const (
	ourHELO = "out.mailyard.test"
	sender  = "bounces+0190a3c4-7d1e-7c4a-9b2f-1a2b3c4d5e6f@mailyard.test"
)

// message is DKIM-signed in spirit: its bytes must arrive unchanged,
// including the lines SMTP has to dot-stuff and 8-bit text.
var message = []byte("DKIM-Signature: v=1; a=rsa-sha256; d=mailyard.test; s=k1;\r\n" +
	"\tbh=abc; b=def\r\n" +
	"From: Sender <sender@mailyard.test>\r\n" +
	"To: a@example.test\r\n" +
	"Subject: test\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"\r\n" +
	"Hello.\r\n" +
	".\r\n" +
	"..two dots\r\n" +
	".leading dot\r\n" +
	"Grüße \r\n" +
	"\r\n")

// quick time-outs keep the tests of hanging servers short.
func quick(c *smtpsend.Config) {
	c.CommandTimeout = 500 * time.Millisecond
	c.DataTimeout = 500 * time.Millisecond
	c.DialTimeout = 500 * time.Millisecond
}

// dnsZone is a DNS server answering with records.
func dnsZone(t *testing.T, records ...string) *testenv.DNSZone {
	t.Helper()
	zone := testenv.StartDNSZone(t)
	for _, rr := range records {
		zone.Add(t, rr)
	}
	return zone
}

// mxSender delivers in mx mode through zone to port, private networks
// allowed (the test servers are on loopback).
func mxSender(t *testing.T, zone *testenv.DNSZone, port int, adjust ...func(*smtpsend.Config)) *smtpsend.Sender {
	t.Helper()
	resolver, err := dnscheck.New(zone.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smtpsend.Config{
		Mode:                 smtpsend.ModeMX,
		Port:                 port,
		HELO:                 ourHELO,
		AllowPrivateNetworks: true,
		Resolver:             resolver,
	}
	quick(&cfg)
	for _, f := range adjust {
		f(&cfg)
	}
	s, err := smtpsend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// twoDomainsZone routes one.test and two.test to exchangers of their own,
// both at 127.0.0.1.
func twoDomainsZone(t *testing.T) *testenv.DNSZone {
	return dnsZone(t,
		"one.test. 60 IN MX 10 mx.one.test.",
		"two.test. 60 IN MX 10 mx.two.test.",
		"mx.one.test. 60 IN A 127.0.0.1",
		"mx.two.test. 60 IN A 127.0.0.1",
	)
}

// exampleZone routes example.test to mx.example.test at 127.0.0.1.
func exampleZone(t *testing.T) *testenv.DNSZone {
	return dnsZone(t,
		"example.test. 60 IN MX 10 mx.example.test.",
		"mx.example.test. 60 IN A 127.0.0.1",
	)
}

func send(t *testing.T, s *smtpsend.Sender, rcpts ...string) []smtpsend.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	results := s.Send(ctx, sender, rcpts, message)
	if len(results) != len(rcpts) {
		t.Fatalf("%d results for %d recipients", len(results), len(rcpts))
	}
	for i, r := range results {
		if r.Recipient != rcpts[i] {
			t.Errorf("result %d is for %q, want %q", i, r.Recipient, rcpts[i])
		}
		if len(r.Message) > smtpsend.MaxMessageLen {
			t.Errorf("result %d message is %d bytes", i, len(r.Message))
		}
	}
	return results
}

func wantResult(t *testing.T, r smtpsend.Result, status smtpsend.Status, code int, msgPart string) {
	t.Helper()
	if r.Status != status || r.Code != code || !strings.Contains(r.Message, msgPart) {
		t.Errorf("%s: got %s %d %q, want %s %d containing %q", r.Recipient, r.Status, r.Code, r.Message, status, code, msgPart)
	}
}

func TestDeliveredUnchanged(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, exampleZone(t), srv.port)

	results := send(t, s, "a@example.test", "b@EXAMPLE.test")
	for _, r := range results {
		wantResult(t, r, smtpsend.Delivered, 250, "")
	}
	_, _, messages, helos := srv.stats()
	if len(messages) != 1 {
		t.Fatalf("server received %d messages, want 1", len(messages))
	}
	m := messages[0]
	if !bytes.Equal(m.data, message) {
		t.Errorf("received bytes differ from those sent:\n got %q\nwant %q", m.data, message)
	}
	if m.from != sender || !slices.Equal(m.rcpts, []string{"a@example.test", "b@EXAMPLE.test"}) {
		t.Errorf("envelope = %q → %q", m.from, m.rcpts)
	}
	for _, h := range helos {
		if h != ourHELO {
			t.Errorf("the server was greeted as %q, want %q", h, ourHELO)
		}
	}
}

// A message with UTF-8 header fields is sent with SMTPUTF8 where the
// server takes it, and as it is where it does not; an ASCII one never asks.
func TestUTF8HeadersAskForSMTPUTF8(t *testing.T) {
	utf8Message := []byte("From: Zoë <a@shop.test>\r\nSubject: Grüße\r\n\r\nbody\r\n")
	asciiHeader := []byte("Subject: hi\r\n\r\nGrüße im Text\r\n")
	for _, c := range []struct {
		name      string
		advertise bool
		msg       []byte
		want      bool
	}{
		{"utf-8 header, server takes SMTPUTF8", true, utf8Message, true},
		{"utf-8 header, server does not", false, utf8Message, false},
		{"8-bit body only", true, asciiHeader, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startServer(t, serverOptions{smtputf8: c.advertise})
			s := mxSender(t, exampleZone(t), srv.port)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results := s.Send(ctx, sender, []string{"a@example.test"}, c.msg)
			wantResult(t, results[0], smtpsend.Delivered, 250, "")
			_, _, messages, _ := srv.stats()
			if len(messages) != 1 || messages[0].utf8 != c.want || !bytes.Equal(messages[0].data, c.msg) {
				t.Fatalf("received %+v, want one message with SMTPUTF8 %v", messages, c.want)
			}
		})
	}
}

func TestTemporaryFailureThenSuccess(t *testing.T) {
	srv := startServer(t, serverOptions{})
	var calls atomic.Int32
	srv.onRcpt = func(string) error {
		if calls.Add(1) == 1 {
			return smtpError(451, smtp.EnhancedCode{4, 7, 1}, "greylisted, try again later")
		}
		return nil
	}
	s := mxSender(t, exampleZone(t), srv.port)

	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 451, "4.7.1 greylisted")
	if _, _, messages, _ := srv.stats(); len(messages) != 0 {
		t.Fatalf("server received %d messages after refusing the only recipient", len(messages))
	}
	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Delivered, 250, "")
	if _, _, messages, _ := srv.stats(); len(messages) != 1 {
		t.Fatalf("server received %d messages, want 1", len(messages))
	}
}

func TestAnswersPerRecipient(t *testing.T) {
	srv := startServer(t, serverOptions{})
	srv.onRcpt = func(to string) error {
		switch {
		case strings.HasPrefix(to, "unknown"):
			return smtpError(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		case strings.HasPrefix(to, "full"):
			return smtpError(452, smtp.EnhancedCode{4, 2, 2}, "mailbox full")
		}
		return nil
	}
	s := mxSender(t, exampleZone(t), srv.port)

	results := send(t, s, "unknown@example.test", "ok@example.test", "full@example.test", "ok2@example.test")
	wantResult(t, results[0], smtpsend.HardBounce, 550, "5.1.1 no such user")
	wantResult(t, results[1], smtpsend.Delivered, 250, "")
	wantResult(t, results[2], smtpsend.Deferred, 452, "4.2.2 mailbox full")
	wantResult(t, results[3], smtpsend.Delivered, 250, "")
	_, _, messages, _ := srv.stats()
	if len(messages) != 1 || !slices.Equal(messages[0].rcpts, []string{"ok@example.test", "ok2@example.test"}) {
		t.Errorf("server received %+v, want one message to the two accepted recipients", messages)
	}
}

func TestRefusalsForTheWholeTransaction(t *testing.T) {
	tests := []struct {
		name       string
		mail, data error
		rcpt       func(string) error
		status     smtpsend.Status
		code       int
		text       string
		// refusedAtRCPT is the outcome of the recipient the server
		// refused at RCPT, which the DATA answer must not change.
		refusedAtRCPT smtpsend.Status
	}{
		{name: "5xx to MAIL FROM", mail: smtpError(550, smtp.EnhancedCode{5, 7, 1}, "sender blocked"),
			status: smtpsend.HardBounce, code: 550, text: "5.7.1 sender blocked", refusedAtRCPT: smtpsend.HardBounce},
		// 530: the server wants STARTTLS (or AUTH) first, as after a TLS
		// handshake that failed; that says nothing of the recipients.
		{name: "530 to MAIL FROM", mail: smtpError(530, smtp.EnhancedCode{5, 7, 0}, "Must issue a STARTTLS command first"),
			status: smtpsend.Deferred, code: 530, text: "5.7.0 Must issue a STARTTLS command first", refusedAtRCPT: smtpsend.Deferred},
		{name: "4xx to MAIL FROM", mail: smtpError(421, smtp.EnhancedCode{4, 3, 2}, "shutting down"),
			status: smtpsend.Deferred, code: 421, text: "shutting down", refusedAtRCPT: smtpsend.Deferred},
		{name: "5xx to DATA", data: smtpError(554, smtp.EnhancedCode{5, 6, 0}, "content rejected"),
			status: smtpsend.HardBounce, code: 554, text: "5.6.0 content rejected", refusedAtRCPT: smtpsend.Deferred},
		{name: "4xx to DATA", data: smtpError(451, smtp.EnhancedCode{4, 3, 0}, "local error"),
			status: smtpsend.Deferred, code: 451, text: "local error", refusedAtRCPT: smtpsend.Deferred},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t, serverOptions{})
			srv.onMail = func(string) error { return tt.mail }
			srv.onRcpt = func(to string) error {
				if strings.HasPrefix(to, "later") {
					return smtpError(450, smtp.EnhancedCode{4, 2, 0}, "try later")
				}
				return nil
			}
			srv.onData = func(*smtp.Conn) error { return tt.data }
			s := mxSender(t, exampleZone(t), srv.port)

			results := send(t, s, "a@example.test", "later@example.test", "b@example.test")
			wantResult(t, results[0], tt.status, tt.code, tt.text)
			wantResult(t, results[2], tt.status, tt.code, tt.text)
			if tt.mail == nil {
				wantResult(t, results[1], smtpsend.Deferred, 450, "try later")
			} else if results[1].Status != tt.refusedAtRCPT || results[1].Code != tt.code {
				t.Errorf("recipient never asked for: %+v", results[1])
			}
			if _, _, messages, _ := srv.stats(); len(messages) != 0 {
				t.Errorf("server kept %d messages", len(messages))
			}
		})
	}
}

func TestSilentServerIsDeferredWithinCommandTimeout(t *testing.T) {
	addr, conns := testenv.SilentServer(t, "127.0.0.1:0", false)
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	s := mxSender(t, exampleZone(t), p)

	started := time.Now()
	r := send(t, s, "a@example.test")[0]
	if elapsed := time.Since(started); elapsed > 3*time.Second {
		t.Errorf("Send took %s with a command time-out of 500ms", elapsed)
	}
	wantResult(t, r, smtpsend.Deferred, 0, "greeting: no reply in time")
	if conns() != 1 {
		t.Errorf("%d connections, want 1", conns())
	}
}

func TestServerHangingAfterDataIsDeferred(t *testing.T) {
	srv := startServer(t, serverOptions{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv.onData = func(*smtp.Conn) error {
		<-release
		return nil
	}
	s := mxSender(t, exampleZone(t), srv.port)

	started := time.Now()
	r := send(t, s, "a@example.test")[0]
	if elapsed := time.Since(started); elapsed > 3*time.Second {
		t.Errorf("Send took %s with a data time-out of 500ms", elapsed)
	}
	wantResult(t, r, smtpsend.Deferred, 0, "end of data: no reply in time")
}

func TestDroppedConnectionIsDeferred(t *testing.T) {
	t.Run("at once", func(t *testing.T) {
		addr, conns := testenv.SilentServer(t, "127.0.0.1:0", true)
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		s := mxSender(t, exampleZone(t), p)
		wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 0, "greeting")
		if conns() != 1 {
			t.Errorf("%d connections, want 1", conns())
		}
	})
	t.Run("after the message", func(t *testing.T) {
		srv := startServer(t, serverOptions{})
		srv.onData = func(c *smtp.Conn) error {
			_ = c.Close()
			return nil
		}
		s := mxSender(t, exampleZone(t), srv.port)
		wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 0, "end of data")
	})
}

func TestAttemptEndsWithTheContext(t *testing.T) {
	// A server that greets, then never answers MAIL FROM: the transaction's
	// replies wait the whole command time-out, unlike the greeting's.
	srv := startServer(t, serverOptions{})
	stalled := make(chan struct{})
	t.Cleanup(func() { close(stalled) })
	srv.onMail = func(string) error { <-stalled; return nil }
	s := mxSender(t, exampleZone(t), srv.port, func(c *smtpsend.Config) { c.CommandTimeout = time.Minute })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	started := time.Now()
	r := s.Send(ctx, sender, []string{"a@example.test"}, message)[0]
	if elapsed := time.Since(started); elapsed > 2*time.Second {
		t.Errorf("Send took %s with a context of 300ms", elapsed)
	}
	wantResult(t, r, smtpsend.Deferred, 0, "ran out of time")
}

func TestSTARTTLS(t *testing.T) {
	pki := newTestPKI(t, []string{"mx.example.test"}, nil)
	srv := startServer(t, serverOptions{startTLS: pki.serverConfig()})
	s := mxSender(t, exampleZone(t), srv.port, func(c *smtpsend.Config) { c.RootCAs = pki.pool })

	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Delivered, 250, "")
	_, _, messages, helos := srv.stats()
	if len(messages) != 1 || !messages[0].tls {
		t.Fatalf("server received %+v, want one message over TLS", messages)
	}
	if !bytes.Equal(messages[0].data, message) {
		t.Error("received bytes differ from those sent")
	}
	// Greeted before and after TLS, by our name both times.
	if !slices.Equal(helos, []string{ourHELO, ourHELO}) {
		t.Errorf("server was greeted as %q, want %q twice", helos, ourHELO)
	}
}

func TestTLSRequiredWithoutSTARTTLS(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, exampleZone(t), srv.port, func(c *smtpsend.Config) { c.TLS = smtpsend.TLSRequired })

	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 0, "does not offer STARTTLS and TLS is required")
	if conns, mails, messages, _ := srv.stats(); conns != 1 || mails != 0 || len(messages) != 0 {
		t.Errorf("server saw %d connections, %d MAIL commands, %d messages; want 1, 0, 0", conns, mails, len(messages))
	}
}

func TestFailedTLSHandshake(t *testing.T) {
	// A server that wants a client certificate we do not have: the
	// handshake fails (TLS 1.2 makes it fail in the handshake itself).
	pki := newTestPKI(t, []string{"mx.example.test"}, nil)
	cfg := pki.serverConfig()
	cfg.MaxVersion = tls.VersionTLS12
	cfg.ClientAuth = tls.RequireAnyClientCert

	t.Run("opportunistic sends in clear", func(t *testing.T) {
		srv := startServer(t, serverOptions{startTLS: cfg})
		s := mxSender(t, exampleZone(t), srv.port)
		wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Delivered, 250, "")
		conns, _, messages, _ := srv.stats()
		if conns != 2 || len(messages) != 1 || messages[0].tls {
			t.Errorf("server saw %d connections and %+v; want 2 connections and one message in clear", conns, messages)
		}
	})
	t.Run("required does not", func(t *testing.T) {
		srv := startServer(t, serverOptions{startTLS: cfg})
		s := mxSender(t, exampleZone(t), srv.port, func(c *smtpsend.Config) { c.TLS = smtpsend.TLSRequired })
		wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 0, "TLS handshake")
		if conns, mails, _, _ := srv.stats(); conns != 1 || mails != 0 {
			t.Errorf("server saw %d connections and %d MAIL commands; want 1 and 0", conns, mails)
		}
	})
}

func TestNullMXBouncesWithoutDialing(t *testing.T) {
	srv := startServer(t, serverOptions{})
	zone := dnsZone(t,
		"nomail.test. 60 IN MX 0 .",
		"nomail.test. 60 IN A 127.0.0.1", // must not be used as an implicit MX
	)
	s := mxSender(t, zone, srv.port)

	for _, r := range send(t, s, "a@nomail.test", "b@nomail.test") {
		wantResult(t, r, smtpsend.HardBounce, 556, "domain does not accept mail (null MX)")
	}
	if conns, _, _, _ := srv.stats(); conns != 0 {
		t.Errorf("server saw %d connections, want none", conns)
	}
}

func TestNoMXFallsBackToAddressRecords(t *testing.T) {
	srv := startServer(t, serverOptions{})
	zone := dnsZone(t, "plain.test. 60 IN A 127.0.0.1")
	s := mxSender(t, zone, srv.port)

	wantResult(t, send(t, s, "a@plain.test")[0], smtpsend.Delivered, 250, "")
	if _, _, messages, _ := srv.stats(); len(messages) != 1 {
		t.Errorf("server received %d messages, want 1", len(messages))
	}
}

func TestDomainWithoutMailHost(t *testing.T) {
	zone := dnsZone(t,
		"txtonly.test. 60 IN TXT \"v=spf1 -all\"",
		"brokenmx.test. 60 IN MX 10 nowhere.brokenmx.test.",
	)
	s := mxSender(t, zone, 25)
	results := send(t, s, "a@txtonly.test", "a@absent.test", "a@brokenmx.test")
	wantResult(t, results[0], smtpsend.HardBounce, 550, "no MX or address records")
	wantResult(t, results[1], smtpsend.HardBounce, 550, "no MX or address records")
	// An MX naming a host without addresses may be fixed in time.
	wantResult(t, results[2], smtpsend.Deferred, 0, "nowhere.brokenmx.test of brokenmx.test has no address records")
}

func TestDNSFailureIsDeferred(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	resolver, err := dnscheck.New(silent.LocalAddr().String(), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s, err := smtpsend.New(smtpsend.Config{HELO: ourHELO, Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 0, "MX look-up for example.test failed")
}

func TestMXPreferenceOrderAndFallback(t *testing.T) {
	// Two servers on one port: the preferred one on 127.0.0.2.
	backup := startServer(t, serverOptions{})
	preferred := startServer(t, serverOptions{host: "127.0.0.2", port: backup.port})
	zone := dnsZone(t,
		"example.test. 60 IN MX 20 backup.example.test.",
		"example.test. 60 IN MX 10 preferred.example.test.",
		"backup.example.test. 60 IN A 127.0.0.1",
		"preferred.example.test. 60 IN A 127.0.0.2",
	)
	s := mxSender(t, zone, backup.port)

	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Delivered, 250, "")
	if _, _, m, _ := preferred.stats(); len(m) != 1 {
		t.Errorf("preferred exchanger received %d messages, want 1", len(m))
	}
	if conns, _, _, _ := backup.stats(); conns != 0 {
		t.Errorf("backup exchanger saw %d connections, want none", conns)
	}

	// The preferred exchanger is busy: the backup gets the mail.
	busy := dnsZone(t,
		"example.test. 60 IN MX 10 preferred.example.test.",
		"example.test. 60 IN MX 20 backup.example.test.",
		"preferred.example.test. 60 IN A 127.0.0.3", // nobody listens there
		"backup.example.test. 60 IN A 127.0.0.1",
	)
	s = mxSender(t, busy, backup.port)
	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Delivered, 250, "")
	if _, _, m, _ := backup.stats(); len(m) != 1 {
		t.Errorf("backup exchanger received %d messages, want 1", len(m))
	}

	// Nobody answers: deferred, saying what happened at the last one.
	dead := dnsZone(t,
		"example.test. 60 IN MX 10 a.example.test.",
		"example.test. 60 IN MX 20 b.example.test.",
		"a.example.test. 60 IN A 127.0.0.3",
		"b.example.test. 60 IN A 127.0.0.4",
	)
	s = mxSender(t, dead, backup.port)
	wantResult(t, send(t, s, "a@example.test")[0], smtpsend.Deferred, 0, "b.example.test [127.0.0.4]:"+strconv.Itoa(backup.port)+": connect:")
}

// A preferred exchanger whose addresses accept connections and never greet
// leaves time for the next one: each reply before the transaction waits at
// most half the attempt's time left. Before, each waited the whole command
// time-out, and two such addresses used up the attempt, every attempt, so
// the backup exchanger never got the mail.
func TestSilentPreferredExchangerLeavesTimeForTheNext(t *testing.T) {
	backup := startServer(t, serverOptions{})
	for _, host := range []string{"127.0.0.2", "127.0.0.3"} {
		testenv.SilentServer(t, net.JoinHostPort(host, strconv.Itoa(backup.port)), false)
	}
	zone := dnsZone(t,
		"example.test. 60 IN MX 10 silent.example.test.",
		"example.test. 60 IN MX 20 backup.example.test.",
		"silent.example.test. 60 IN A 127.0.0.2",
		"silent.example.test. 60 IN A 127.0.0.3",
		"backup.example.test. 60 IN A 127.0.0.1",
	)
	// The command time-out is longer than the attempt, as in production
	// (5 minutes for one reply, 10 for the attempt).
	s := mxSender(t, zone, backup.port, func(c *smtpsend.Config) { c.CommandTimeout = time.Minute })
	// 4 s and 2 s for the silent ones leave 2 s for the backup, plenty
	// on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	r := s.Send(ctx, sender, []string{"a@example.test"}, message)[0]
	wantResult(t, r, smtpsend.Delivered, 250, "")
	if _, _, m, _ := backup.stats(); len(m) != 1 {
		t.Errorf("the backup exchanger received %d messages, want 1", len(m))
	}
}

func TestPrivateAddressRefusedAtDialTime(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, exampleZone(t), srv.port, func(c *smtpsend.Config) { c.AllowPrivateNetworks = false })

	r := send(t, s, "a@example.test")[0]
	wantResult(t, r, smtpsend.Deferred, 0, "mx.example.test: connect: refused: destination address is in a special-purpose range")
	wantResult(t, r, smtpsend.Deferred, 0, "private networks are not allowed")
	// Where the exchanger's name led inside the network is not told.
	if strings.Contains(r.Message, "127.0.0.1") {
		t.Errorf("the deferral names the refused address: %q", r.Message)
	}
	if conns, _, _, _ := srv.stats(); conns != 0 {
		t.Errorf("server saw %d connections, want none", conns)
	}
}

func TestTwoDomainsTwoTransactions(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, twoDomainsZone(t), srv.port)

	for _, r := range send(t, s, "a@one.test", "b@two.test", "c@One.Test") {
		wantResult(t, r, smtpsend.Delivered, 250, "")
	}
	_, _, messages, _ := srv.stats()
	var got []string
	for _, m := range messages {
		got = append(got, strings.Join(m.rcpts, ","))
		if !bytes.Equal(m.data, message) {
			t.Error("received bytes differ from those sent")
		}
	}
	slices.Sort(got)
	if want := []string{"a@one.test,c@One.Test", "b@two.test"}; !slices.Equal(got, want) {
		t.Errorf("transactions = %q, want %q", got, want)
	}
}

// SendReporting tells of each session's results as the session ends: the
// answers of a fast domain are known while a slow one's session still runs,
// so the caller records them before a crash could lose them.
func TestSendReportingTellsEachSessionAsItEnds(t *testing.T) {
	srv := startServer(t, serverOptions{})
	release := make(chan struct{})
	srv.onRcpt = func(to string) error {
		if strings.HasSuffix(to, "@two.test") {
			<-release
		}
		return nil
	}
	s := mxSender(t, twoDomainsZone(t), srv.port)
	reported := make(chan []int, 2)
	var mu sync.Mutex
	var got []smtpsend.Result
	done := func(positions []int, results []smtpsend.Result) {
		mu.Lock()
		got = append(got, results...)
		mu.Unlock()
		reported <- positions
	}
	finished := make(chan []smtpsend.Result, 1)
	go func() {
		finished <- s.SendReporting(context.Background(), sender, []string{"a@one.test", "b@two.test", "c@one.test"}, message, done)
	}()
	select {
	case first := <-reported:
		if !slices.Equal(first, []int{0, 2}) {
			t.Errorf("the first session reported %v, want [0 2]", first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing reported while the slow domain's session runs")
	}
	close(release)
	results := <-finished
	if second := <-reported; !slices.Equal(second, []int{1}) {
		t.Errorf("the second session reported %v, want [1]", second)
	}
	for _, r := range results {
		wantResult(t, r, smtpsend.Delivered, 250, "")
	}
	if len(got) != 3 || got[0].Recipient != "a@one.test" || got[2].Recipient != "b@two.test" {
		t.Errorf("reported results %+v", got)
	}
}

// SendEach gives each recipient a transaction of its own, with its own
// envelope sender and message; a bad envelope sender defers only its own
// recipient.
func TestSendEachEnvelopeOfItsOwn(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, exampleZone(t), srv.port)

	envs := []smtpsend.Envelope{
		{From: "bounces+0.aaaa@bounces.test", Recipient: "a@example.test", Message: message},
		{From: "bounces+1.bbbb@bounces.test", Recipient: "b@example.test", Message: []byte("Subject: b\r\n\r\nb\r\n")},
		{From: "bounces@", Recipient: "c@example.test", Message: message},
		{From: "bounces+3.dddd@bounces.test", Recipient: "no-at-sign", Message: message},
	}
	results := s.SendEach(context.Background(), envs)
	wantResult(t, results[0], smtpsend.Delivered, 250, "")
	wantResult(t, results[1], smtpsend.Delivered, 250, "")
	wantResult(t, results[2], smtpsend.Deferred, 0, "invalid envelope sender")
	wantResult(t, results[3], smtpsend.HardBounce, 553, "invalid recipient address")
	_, _, messages, _ := srv.stats()
	got := map[string]string{}
	for _, m := range messages {
		if len(m.rcpts) != 1 {
			t.Fatalf("a transaction to %q", m.rcpts)
		}
		got[m.rcpts[0]] = m.from + " " + string(m.data)
	}
	want := map[string]string{
		"a@example.test": envs[0].From + " " + string(message),
		"b@example.test": envs[1].From + " " + string(envs[1].Message),
	}
	if !maps.Equal(got, want) {
		t.Errorf("transactions %q, want %q", got, want)
	}
	if conns, _, _, _ := srv.stats(); conns != 1 {
		t.Errorf("%d connections for two transactions to one domain, want 1", conns)
	}
}

// A message given by Load is read as its transaction begins, after the
// transactions before it on the connection ended, so a SendEach holds a few
// messages at a time; a recipient whose Load fails is deferred and never
// sent anything.
func TestSendEachLoadsEachMessageWhenItsTurnComes(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, exampleZone(t), srv.port)
	var sentBefore []int
	envs := make([]smtpsend.Envelope, 4)
	for i := range envs {
		envs[i] = smtpsend.Envelope{From: "bounces+x@bounces.test", Recipient: fmt.Sprintf("r%d@example.test", i),
			Load: func(context.Context) ([]byte, error) {
				_, _, messages, _ := srv.stats()
				sentBefore = append(sentBefore, len(messages))
				if i == 2 {
					return nil, errors.New("database gone")
				}
				return []byte(fmt.Sprintf("Subject: %d\r\n\r\nfor r%d\r\n", i, i)), nil
			}}
	}
	results := s.SendEach(context.Background(), envs)
	for i, r := range results {
		if i == 2 {
			wantResult(t, r, smtpsend.Deferred, 0, "the message could not be read")
			continue
		}
		wantResult(t, r, smtpsend.Delivered, 250, "")
	}
	if !slices.Equal(sentBefore, []int{0, 1, 2, 2}) {
		t.Errorf("messages received before each load: %v, want [0 1 2 2]", sentBefore)
	}
	_, mails, messages, _ := srv.stats()
	if mails != 3 || len(messages) != 3 {
		t.Fatalf("%d MAIL commands, %d messages, want 3 and 3", mails, len(messages))
	}
	for _, m := range messages {
		if want := fmt.Sprintf("for %s\r\n", strings.TrimSuffix(m.rcpts[0], "@example.test")); !strings.HasSuffix(string(m.data), want) {
			t.Errorf("%s received %q", m.rcpts[0], m.data)
		}
	}
}

// The transactions to one domain share connections, up to 20 each, which
// run in parallel. A refused transaction leaves the connection usable for
// the next; one that the server stops taking (421 before MAIL FROM is
// accepted, as from a receiver limiting messages per connection) is opened
// again for the rest, without losing the transaction that met the 421.
func TestSendEachSharesConnections(t *testing.T) {
	srv := startServer(t, serverOptions{})
	srv.perConnection = 3
	srv.onRcpt = func(to string) error {
		if strings.HasPrefix(to, "refused") {
			return smtpError(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		}
		return nil
	}
	s := mxSender(t, twoDomainsZone(t), srv.port)
	var envs []smtpsend.Envelope
	for i := range 25 {
		envs = append(envs, smtpsend.Envelope{From: fmt.Sprintf("bounces+%d@bounces.test", i), Recipient: fmt.Sprintf("r%d@one.test", i), Message: message})
	}
	envs[4].Recipient = "refused@one.test"
	envs = append(envs, smtpsend.Envelope{From: "bounces+x@bounces.test", Recipient: "x@two.test", Message: message})
	results := s.SendEach(context.Background(), envs)
	for i, r := range results {
		if i == 4 {
			wantResult(t, r, smtpsend.HardBounce, 550, "no such user")
			continue
		}
		wantResult(t, r, smtpsend.Delivered, 250, "")
	}
	conns, _, messages, _ := srv.stats()
	if len(messages) != 25 {
		t.Fatalf("%d messages, want 25", len(messages))
	}
	for _, m := range messages {
		if len(m.rcpts) != 1 || m.from != envs[slices.IndexFunc(envs, func(e smtpsend.Envelope) bool { return e.Recipient == m.rcpts[0] })].From {
			t.Fatalf("transaction %s → %q", m.from, m.rcpts)
		}
	}
	// one.test: 20 + 5 transactions (one refused) in sessions of at most
	// three messages: 7 and 2 connections; two.test: 1.
	if conns != 10 {
		t.Errorf("%d connections, want 10", conns)
	}
}

// A server that answers 421 on a connection opened for the transaction
// (a rate limit) gets no new connection for each transaction left: they
// are deferred with its reply. One that closes a connection it has carried
// mail on is tried again on a new one (TestSendEachSharesConnections).
func TestRefusalWith421DefersTheRest(t *testing.T) {
	srv := startServer(t, serverOptions{})
	srv.onMail = func(string) error {
		return smtpError(421, smtp.EnhancedCode{4, 7, 28}, "rate limited, try again later")
	}
	s := mxSender(t, exampleZone(t), srv.port)
	var envs []smtpsend.Envelope
	for i := range 5 {
		envs = append(envs, smtpsend.Envelope{From: sender, Recipient: fmt.Sprintf("r%d@example.test", i), Message: message})
	}
	for _, r := range s.SendEach(context.Background(), envs) {
		wantResult(t, r, smtpsend.Deferred, 421, "4.7.28 rate limited")
	}
	if conns, _, _, _ := srv.stats(); conns != 1 {
		t.Errorf("%d connections, want 1", conns)
	}
}

func TestInvalidAndRepeatedRecipients(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := mxSender(t, exampleZone(t), srv.port)

	results := send(t, s, "a@example.test", "no-at-sign", "x@example.test>\r\nRSET", "a@example.test", "b@[127.0.0.1]")
	wantResult(t, results[0], smtpsend.Delivered, 250, "")
	wantResult(t, results[1], smtpsend.HardBounce, 553, "invalid recipient address")
	wantResult(t, results[2], smtpsend.HardBounce, 553, "invalid recipient address")
	wantResult(t, results[3], smtpsend.Delivered, 250, "")
	wantResult(t, results[4], smtpsend.HardBounce, 553, "address literals are not supported")
	_, _, messages, _ := srv.stats()
	if len(messages) != 1 || !slices.Equal(messages[0].rcpts, []string{"a@example.test"}) {
		t.Errorf("server received %+v, want one message to a@example.test once", messages)
	}

	// Our own bad envelope sender bounces nobody.
	r := s.Send(context.Background(), "bounces@", []string{"a@example.test"}, message)[0]
	wantResult(t, r, smtpsend.Deferred, 0, "invalid envelope sender")
}

func TestLongReplyIsTruncated(t *testing.T) {
	srv := startServer(t, serverOptions{})
	srv.onRcpt = func(string) error {
		return smtpError(550, smtp.EnhancedCode{5, 1, 1}, strings.Repeat("é", 400))
	}
	s := mxSender(t, exampleZone(t), srv.port)
	r := send(t, s, "a@example.test")[0]
	if r.Status != smtpsend.HardBounce || len(r.Message) > smtpsend.MaxMessageLen || len(r.Message) < smtpsend.MaxMessageLen-1 ||
		!strings.HasPrefix(r.Message, "5.1.1 éé") || !strings.HasSuffix(r.Message, "é") {
		t.Errorf("got %s with a %d-byte message %q", r.Status, len(r.Message), r.Message)
	}
}

// An exchanger that answers without end is cut off at a bounded reply, not
// read into memory until the command's time runs out: before TLS (the
// greeting, read by our own dialogue) and after it (MAIL FROM, read by
// go-smtp, whose lines are bounded but not their number).
func TestEndlessReplyIsCutOff(t *testing.T) {
	for _, tc := range []struct {
		name, step string
		// answer is what the server says to each line we send (the
		// empty line: on connecting); endless answers repeat line
		// for 8 MiB (then wait).
		answer func(command string) (line string, endless bool)
	}{
		{"greeting", "greeting", func(string) (string, bool) { return "220-" + strings.Repeat("x", 1000), true }},
		{"one long line before TLS", "greeting", func(string) (string, bool) { return "220 " + strings.Repeat("x", 8<<20), false }},
		{"MAIL FROM", "MAIL FROM", func(command string) (string, bool) {
			switch {
			case command == "":
				return "220 mx.example.test", false
			case strings.HasPrefix(command, "EHLO"):
				return "250 mx.example.test", false
			case strings.HasPrefix(command, "MAIL"):
				return "250-" + strings.Repeat("y", 1000), true
			}
			return "250 ok", false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := chattyServer(t, tc.answer)
			// A long command time-out: only the cap can end the session
			// quickly.
			s := mxSender(t, exampleZone(t), port, func(c *smtpsend.Config) { c.CommandTimeout = 20 * time.Second })
			started := time.Now()
			r := send(t, s, "a@example.test")[0]
			if elapsed := time.Since(started); elapsed > 5*time.Second {
				t.Errorf("Send took %s", elapsed)
			}
			wantResult(t, r, smtpsend.Deferred, 0, tc.step+": the server's reply is longer than 64 KiB")
		})
	}
}

// Each reply before TLS has a command time-out of its own: a slow greeting
// does not leave EHLO with what is left of it.
func TestEachReplyHasItsOwnTimeOut(t *testing.T) {
	inData := false
	port := chattyServer(t, func(command string) (string, bool) {
		switch {
		case inData && command == ".":
			inData = false
			return "250 2.0.0 queued", false
		case inData:
			return "", false
		case command == "":
			time.Sleep(350 * time.Millisecond)
			return "220 mx.example.test", false
		case strings.HasPrefix(command, "EHLO"):
			time.Sleep(350 * time.Millisecond)
			return "250 mx.example.test", false
		case command == "DATA":
			inData = true
			return "354 go on", false
		}
		return "250 ok", false
	})
	// quick: a command time-out of 500 ms, less than the two waits.
	r := send(t, mxSender(t, exampleZone(t), port), "a@example.test")[0]
	wantResult(t, r, smtpsend.Delivered, 250, "queued")
}

// chattyServer answers each command line with what answer says (nothing
// for ""), written once or, when endless, over and over up to 8 MiB. One
// connection at a time.
func chattyServer(t *testing.T, answer func(command string) (line string, endless bool)) (port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		_ = ln.Close()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				say := func(command string) bool {
					line, endless := answer(command)
					if line == "" {
						return true
					}
					for sent := 0; ; sent += len(line) + 2 {
						if _, err := io.WriteString(c, line+"\r\n"); err != nil || !endless {
							return err == nil
						}
						if sent > 8<<20 {
							<-done
							return false
						}
					}
				}
				r := bufio.NewReader(c)
				for command := ""; say(command); {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					command = strings.TrimSpace(line)
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func relaySender(t *testing.T, relay string, adjust ...func(*smtpsend.Config)) *smtpsend.Sender {
	t.Helper()
	cfg := smtpsend.Config{Mode: smtpsend.ModeRelay, Relay: relay, HELO: ourHELO}
	quick(&cfg)
	for _, f := range adjust {
		f(&cfg)
	}
	s, err := smtpsend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRelayWithAuth(t *testing.T) {
	pki := newTestPKI(t, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	const password = "s3cret-relay-password"
	for _, implicit := range []bool{false, true} {
		t.Run(fmt.Sprintf("implicit TLS %v", implicit), func(t *testing.T) {
			opts := serverOptions{startTLS: pki.serverConfig()}
			if implicit {
				opts = serverOptions{implicitTLS: pki.serverConfig()}
			}
			srv := startServer(t, opts)
			srv.username, srv.password = "mailyard", password
			// Private networks are not allowed, yet the relay on
			// loopback is used: the operator chose it.
			s := relaySender(t, srv.addr, func(c *smtpsend.Config) {
				c.RootCAs = pki.pool
				c.RelayImplicitTLS = implicit
				c.RelayUsername, c.RelayPassword = "mailyard", password
				c.TLS = smtpsend.TLSRequired
			})

			// Two domains, one transaction: the relay routes them.
			for _, r := range send(t, s, "a@one.test", "b@two.test") {
				wantResult(t, r, smtpsend.Delivered, 250, "")
			}
			_, _, messages, _ := srv.stats()
			if len(messages) != 1 {
				t.Fatalf("relay received %d messages, want 1", len(messages))
			}
			m := messages[0]
			if !m.tls || m.user != "mailyard" || !slices.Equal(m.rcpts, []string{"a@one.test", "b@two.test"}) || !bytes.Equal(m.data, message) {
				t.Errorf("relay received %+v over TLS %v as %q", m.rcpts, m.tls, m.user)
			}

			// A wrong password: deferred with the relay's answer, and the
			// password never in the result.
			wrong := relaySender(t, srv.addr, func(c *smtpsend.Config) {
				c.RootCAs = pki.pool
				c.RelayImplicitTLS = implicit
				c.RelayUsername, c.RelayPassword = "mailyard", "not-"+password
			})
			r := send(t, wrong, "a@one.test")[0]
			wantResult(t, r, smtpsend.Deferred, 535, "AUTH")
			if strings.Contains(r.Message, password) {
				t.Errorf("result message %q holds the password", r.Message)
			}
			if _, _, messages, _ := srv.stats(); len(messages) != 1 {
				t.Errorf("relay received %d messages, want still 1", len(messages))
			}
		})
	}
}

func TestRelayCertificateIsVerified(t *testing.T) {
	pki := newTestPKI(t, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	srv := startServer(t, serverOptions{startTLS: pki.serverConfig()})
	s := relaySender(t, srv.addr) // system roots: the test CA is unknown

	wantResult(t, send(t, s, "a@one.test")[0], smtpsend.Deferred, 0, "TLS handshake")
	// Not retried in clear, unlike mx delivery: a relay's certificate
	// failing is what an attacker in the middle looks like.
	if conns, mails, _, _ := srv.stats(); conns != 1 || mails != 0 {
		t.Errorf("relay saw %d connections and %d MAIL commands; want 1 and 0", conns, mails)
	}
}

func TestRelayCredentialsNeverInClear(t *testing.T) {
	ip := nonLoopbackAddress(t)
	srv := startServer(t, serverOptions{host: ip})
	srv.username, srv.password = "mailyard", "secret"
	s := relaySender(t, srv.addr, func(c *smtpsend.Config) {
		c.RelayUsername, c.RelayPassword = "mailyard", "secret"
	})

	wantResult(t, send(t, s, "a@one.test")[0], smtpsend.Deferred, 0, "not sending the relay credentials over an unencrypted connection")
	if _, mails, _, _ := srv.stats(); mails != 0 {
		t.Errorf("relay saw %d MAIL commands, want 0", mails)
	}
}

// nonLoopbackAddress is an IPv4 address of this machine outside loopback.
func nonLoopbackAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipnet, ok := a.(*net.IPNet); ok && !ipnet.IP.IsLoopback() && ipnet.IP.To4() != nil {
			return ipnet.IP.String()
		}
	}
	t.Skip("this machine has no IPv4 address outside loopback")
	return ""
}

func TestNewValidates(t *testing.T) {
	resolver, err := dnscheck.New("127.0.0.1:53", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  smtpsend.Config
		want string
	}{
		{"no HELO", smtpsend.Config{Resolver: resolver}, "HELO name is required"},
		{"HELO with a space", smtpsend.Config{HELO: "a b", Resolver: resolver}, "not a host name"},
		{"unknown mode", smtpsend.Config{Mode: "smarthost", HELO: ourHELO}, `mode "smarthost"`},
		{"unknown TLS", smtpsend.Config{TLS: "always", HELO: ourHELO, Resolver: resolver}, `TLS: "always"`},
		{"mx without resolver", smtpsend.Config{HELO: ourHELO}, "needs a DNS resolver"},
		{"mx with relay settings", smtpsend.Config{HELO: ourHELO, Resolver: resolver, Relay: "smtp.example.com:587"}, "mode is mx"},
		{"bad port", smtpsend.Config{HELO: ourHELO, Resolver: resolver, Port: 70000}, "port 70000"},
		{"relay without address", smtpsend.Config{Mode: smtpsend.ModeRelay, HELO: ourHELO}, "needs the relay's host:port"},
		{"relay without port", smtpsend.Config{Mode: smtpsend.ModeRelay, Relay: "smtp.example.com", HELO: ourHELO}, "not host:port"},
		{"username without password", smtpsend.Config{Mode: smtpsend.ModeRelay, Relay: "smtp.example.com:587", HELO: ourHELO, RelayUsername: "u"}, "set both or neither"},
	}
	for _, tt := range tests {
		if _, err := smtpsend.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := smtpsend.New(smtpsend.Config{HELO: ourHELO, Resolver: resolver}); err != nil {
		t.Errorf("minimal mx configuration: %v", err)
	}
}

// A reply is stored as the recipient's last response: a NUL or invalid
// UTF-8 in it would make that write fail on every retry.
func TestHostileReplyIsCleaned(t *testing.T) {
	srv := startServer(t, serverOptions{})
	srv.onRcpt = func(string) error {
		return smtpError(550, smtp.EnhancedCode{5, 1, 1}, "no\x00such \xffuser")
	}
	s := mxSender(t, exampleZone(t), srv.port)
	r := send(t, s, "a@example.test")[0]
	wantResult(t, r, smtpsend.HardBounce, 550, "5.1.1 no\uFFFDsuch \uFFFDuser")
}

// A network error reaches the customer as what happened at the server the
// message names, without the connection's own addresses.
func TestNetworkErrorNamesNoLocalAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := relaySender(t, addr).Send(context.Background(), "bounces@shop.example", []string{"a@example.test"}, message)[0]
	wantResult(t, r, smtpsend.Deferred, 0, addr+": connect: connection refused")
	if strings.Contains(r.Message, "dial tcp") {
		t.Errorf("message %q repeats the dialer's addresses", r.Message)
	}
}
