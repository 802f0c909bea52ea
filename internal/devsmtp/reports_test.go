package devsmtp_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/devsmtp"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/testenv"
)

// bounceHost is a real go-smtp server playing the inbound listener: it
// keeps each message with its envelope, and answers 451 to the first
// refuse messages.
type bounceHost struct {
	mu     sync.Mutex
	got    []received
	refuse int
}

type received struct {
	from string
	to   []string
	data []byte
}

func (b *bounceHost) NewSession(*smtp.Conn) (smtp.Session, error) { return &bhSession{b: b}, nil }

type bhSession struct {
	b   *bounceHost
	msg received
}

func (s *bhSession) Mail(from string, _ *smtp.MailOptions) error { s.msg.from = from; return nil }
func (s *bhSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.msg.to = append(s.msg.to, to)
	return nil
}
func (s *bhSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.b.refuse > 0 {
		s.b.refuse--
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"}
	}
	s.msg.data = data
	s.b.got = append(s.b.got, s.msg)
	return nil
}
func (s *bhSession) Reset()        { s.msg = received{} }
func (s *bhSession) Logout() error { return nil }

func (b *bounceHost) messages() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]received(nil), b.got...)
}

func startBounceHost(t *testing.T, refuse int) (*bounceHost, string) {
	t.Helper()
	b := &bounceHost{refuse: refuse}
	srv := smtp.NewServer(b)
	srv.Domain = "bounces.mailyard.test"
	return b, testenv.ServeSMTP(t, srv)
}

// reportSink starts a sink with reports, routed through a real DNS zone to
// the bounce host at addr; unrouted MX hosts are left out of Route.
func reportSink(t *testing.T, addr string) (*devsmtp.Server, *smtpsend.Sender) {
	t.Helper()
	zone := testenv.StartDNSZone(t)
	zone.Add(t, "mail.shop.test. 60 IN MX 10 bounces.mailyard.test.")
	zone.Add(t, "mail.elsewhere.test. 60 IN MX 10 mx.elsewhere.test.")
	sink, err := devsmtp.StartWithReports("127.0.0.1:0", filepath.Join(t.TempDir(), "mail"), slog.New(slog.DiscardHandler), &devsmtp.Reports{
		Hostname: "mx.recipient.test", Resolver: zone.Addr, BounceHost: "bounces.mailyard.test",
		Route: map[string]string{"bounces.mailyard.test": addr},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	sender, err := smtpsend.New(smtpsend.Config{Mode: smtpsend.ModeRelay, Relay: sink.Addr(), HELO: "out.mailyard.test"})
	if err != nil {
		t.Fatal(err)
	}
	return sink, sender
}

func sendTo(t *testing.T, sender *smtpsend.Sender, from string, to ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range sender.Send(ctx, from, to, message) {
		if r.Status != smtpsend.Delivered {
			t.Fatalf("%s: %s %d %s", r.Recipient, r.Status, r.Code, r.Message)
		}
	}
}

// reportParts splits a multipart/report into its parts, checking its
// report-type.
func reportParts(t *testing.T, data []byte, reportType string) []*multipart.Part {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || params["report-type"] != reportType {
		t.Fatalf("Content-Type %q: %v", msg.Header.Get("Content-Type"), err)
	}
	var parts []*multipart.Part
	r := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			return parts
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(p)
		p.Header.Set("X-Test-Body", string(body))
		parts = append(parts, p)
	}
}

// A bounce-later recipient gets a real DSN from the null sender at the
// tagged envelope sender, a complain recipient an ARF report at fbl@, both
// through the MX look-up; an ordinary recipient nothing.
func TestReportsReachTheBounceHost(t *testing.T) {
	host, addr := startBounceHost(t, 1) // the first try is answered 451
	_, sender := reportSink(t, addr)
	envelope := "bounces+" + uuid.NewString() + ".abcdefgh@mail.shop.test"
	sendTo(t, sender, envelope, "bounce-later@rcpt.test", "complain-1@rcpt.test", "ok@rcpt.test")

	testenv.Eventually(t, 15*time.Second, "two reports", func() bool { return len(host.messages()) >= 2 })
	time.Sleep(time.Second) // a third would be wrong
	msgs := host.messages()
	if len(msgs) != 2 {
		t.Fatalf("%d reports", len(msgs))
	}
	for _, m := range msgs {
		switch {
		case m.from == "" && len(m.to) == 1 && m.to[0] == envelope:
			parts := reportParts(t, m.data, "delivery-status")
			if len(parts) != 3 || parts[1].Header.Get("Content-Type") != "message/delivery-status" || parts[2].Header.Get("Content-Type") != "text/rfc822-headers" {
				t.Fatalf("DSN parts %v", parts)
			}
			status := parts[1].Header.Get("X-Test-Body")
			blocks := strings.Split(strings.ReplaceAll(status, "\r\n", "\n"), "\n\n")
			h, err := textproto.NewReader(bufio.NewReader(strings.NewReader(blocks[1] + "\n\n"))).ReadMIMEHeader()
			if err != nil || h.Get("Final-Recipient") != "rfc822; bounce-later@rcpt.test" || h.Get("Action") != "failed" || h.Get("Status") != "5.1.1" {
				t.Fatalf("per-recipient block %v (%v) of %q", h, err, status)
			}
			if !strings.Contains(parts[2].Header.Get("X-Test-Body"), "Subject: hello") {
				t.Fatalf("no original headers in the DSN")
			}
		case m.from == "fbl-reports@mx.recipient.test" && len(m.to) == 1 && m.to[0] == "fbl@bounces.mailyard.test":
			parts := reportParts(t, m.data, "feedback-report")
			if len(parts) != 3 || parts[1].Header.Get("Content-Type") != "message/feedback-report" || parts[2].Header.Get("Content-Type") != "message/rfc822" {
				t.Fatalf("ARF parts %v", parts)
			}
			fb := parts[1].Header.Get("X-Test-Body")
			if !strings.Contains(fb, "Feedback-Type: abuse") || !strings.Contains(fb, "Original-Rcpt-To: <complain-1@rcpt.test>") {
				t.Fatalf("feedback report %q", fb)
			}
			if got := parts[2].Header.Get("X-Test-Body"); got != string(message) {
				t.Fatalf("attached original %q, want the message sent", got)
			}
		default:
			t.Fatalf("unexpected report from %q to %v", m.from, m.to)
		}
	}
}

// An MX host that is not routed gets nothing: the sink sends nowhere else.
func TestReportsGoNowhereElse(t *testing.T) {
	host, addr := startBounceHost(t, 0)
	_, sender := reportSink(t, addr)
	sendTo(t, sender, "bounces+"+uuid.NewString()+".abcdefgh@mail.elsewhere.test", "bounce-later@rcpt.test")
	time.Sleep(2 * time.Second)
	if n := len(host.messages()); n != 0 {
		t.Fatalf("%d reports reached the bounce host", n)
	}
}
