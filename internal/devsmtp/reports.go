package devsmtp

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"github.com/miekg/dns"
)

// Reports makes the sink play the remote side of what happens after a
// 250 (docs/inbound.md, "Trying it with make run"): a recipient whose local
// part starts with bounce-later is answered with an RFC 3464 DSN from the
// null sender to the email's envelope sender, one starting with complain
// with an RFC 5965 ARF report to fbl@<BounceHost>. Both are delivered the
// way a real server would: through the MX look-up of the envelope sender's
// domain (the email's MAIL FROM subdomain).
type Reports struct {
	// Hostname is the sink's name in the reports it writes.
	Hostname string
	// Resolver is the host:port of the DNS server that answers the MX
	// look-up (dev's own).
	Resolver string
	// BounceHost receives complaints at fbl@.
	BounceHost string
	// Route maps an MX host (lower case, no final dot) to the host:port the
	// sink connects to. The sink sends nowhere else: an MX host that is
	// not here is logged and the report dropped.
	Route map[string]string
}

// Timing of a report: a real server reports a moment after its 250, and
// retries while the bounce host is not answering.
const (
	reportDelay = 500 * time.Millisecond
	reportTries = 5
	firstRetry  = 500 * time.Millisecond
)

// reporter sends the reports of accepted messages in the background.
type reporter struct {
	cfg    Reports
	logger *slog.Logger
	wg     sync.WaitGroup
	stop   chan struct{}
	once   sync.Once
}

// answer schedules the reports an accepted message's recipients ask for.
func (r *reporter) answer(emailID, envelopeSender string, recipients []string, savedPath string) {
	for _, rcpt := range recipients {
		local, _, _ := strings.Cut(strings.ToLower(rcpt), "@")
		var kind string
		switch {
		case strings.HasPrefix(local, "bounce-later"):
			kind = "dsn"
		case strings.HasPrefix(local, "complain"):
			kind = "arf"
		default:
			continue
		}
		_, domain, ok := strings.Cut(envelopeSender, "@")
		if !ok {
			r.logger.Warn("dev SMTP: no envelope sender to report to", "email_id", emailID, "kind", kind)
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			select {
			case <-time.After(reportDelay):
			case <-r.stop:
				return
			}
			original, err := os.ReadFile(savedPath)
			if err != nil {
				r.logger.Warn("dev SMTP: cannot read the message to report on", "email_id", emailID, "error", err)
				return
			}
			from, to, msg := "", envelopeSender, r.dsn(envelopeSender, rcpt, original)
			if kind == "arf" {
				from, to = "fbl-reports@"+r.cfg.Hostname, "fbl@"+r.cfg.BounceHost
				msg = r.arf(envelopeSender, rcpt, to, original)
			}
			if err := r.deliver(domain, from, to, msg); err != nil {
				r.logger.Warn("dev SMTP: report not delivered", "email_id", emailID, "kind", kind, "error", err)
				return
			}
			r.logger.Info("dev SMTP: report delivered to the bounce host", "email_id", emailID, "kind", kind)
		}()
	}
}

// close stops waiting reports and waits for those being sent.
func (r *reporter) close() {
	r.once.Do(func() { close(r.stop) })
	r.wg.Wait()
}

// deliver looks up the MX of domain and sends msg there, retrying while
// the server answers 4xx or does not answer.
func (r *reporter) deliver(domain, from, to string, msg []byte) error {
	host, err := r.lowestMX(domain)
	if err != nil {
		return err
	}
	addr, ok := r.cfg.Route[host]
	if !ok {
		return fmt.Errorf("the MX host %s of %s is not one the sink may send to", host, domain)
	}
	wait := firstRetry
	for try := 1; ; try++ {
		err = r.send(addr, from, to, msg)
		var reply *smtp.SMTPError
		if err == nil || errors.As(err, &reply) && reply.Code/100 == 5 || try == reportTries {
			return err
		}
		select {
		case <-time.After(wait):
		case <-r.stop:
			return err
		}
		wait *= 2
	}
}

// send hands msg over in one SMTP session, in plain text: the bounce host
// of `mailyard dev` offers no STARTTLS (go-smtp's SendMail insists on it).
func (r *reporter) send(addr, from, to string, msg []byte) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello(r.cfg.Hostname); err != nil {
		return err
	}
	if err := c.SendMail(from, []string{to}, bytes.NewReader(msg)); err != nil {
		return err
	}
	return c.Quit()
}

// lowestMX is the MX host of domain with the lowest preference.
func (r *reporter) lowestMX(domain string) (string, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(domain), dns.TypeMX)
	c := &dns.Client{Timeout: 5 * time.Second}
	in, _, err := c.Exchange(q, r.cfg.Resolver)
	if err == nil && in.Truncated {
		c.Net = "tcp"
		in, _, err = c.Exchange(q, r.cfg.Resolver)
	}
	if err != nil {
		return "", fmt.Errorf("MX look-up of %s: %w", domain, err)
	}
	best, pref := "", -1
	for _, rr := range in.Answer {
		if mx, ok := rr.(*dns.MX); ok && (pref < 0 || int(mx.Preference) < pref) {
			best, pref = strings.ToLower(strings.TrimSuffix(mx.Mx, ".")), int(mx.Preference)
		}
	}
	if best == "" {
		return "", fmt.Errorf("no MX record for %s", domain)
	}
	return best, nil
}

// headerBlock is the original's header section.
func headerBlock(original []byte) []byte {
	if i := bytes.Index(original, []byte("\r\n\r\n")); i >= 0 {
		return original[:i+2]
	}
	return original
}

// lineWriter writes lines to b, each ended with CRLF.
func lineWriter(b *bytes.Buffer) func(lines ...string) {
	return func(lines ...string) {
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
}

// dsn writes a delivery status notification the way Postfix does: a
// human-readable part, the machine-readable report, the original's headers.
func (r *reporter) dsn(envelopeSender, rcpt string, original []byte) []byte {
	host, now := r.cfg.Hostname, time.Now().UTC().Format(time.RFC1123Z)
	boundary := uuid.NewString() + "/" + host
	var b bytes.Buffer
	w := lineWriter(&b)
	w("From: Mail Delivery System <MAILER-DAEMON@"+host+">",
		"To: "+envelopeSender,
		"Subject: Undelivered Mail Returned to Sender",
		"Date: "+now,
		"Message-ID: <"+uuid.NewString()+"@"+host+">",
		"Auto-Submitted: auto-replied",
		"MIME-Version: 1.0",
		`Content-Type: multipart/report; report-type=delivery-status; boundary="`+boundary+`"`,
		"",
		"This is a MIME-encapsulated message.",
		"",
		"--"+boundary,
		"Content-Description: Notification",
		"Content-Type: text/plain; charset=us-ascii",
		"",
		"This is the mail system at host "+host+".",
		"",
		"I'm sorry to have to inform you that your message could not",
		"be delivered to one or more recipients.",
		"",
		"<"+rcpt+">: User unknown in virtual mailbox table",
		"",
		"--"+boundary,
		"Content-Description: Delivery report",
		"Content-Type: message/delivery-status",
		"",
		"Reporting-MTA: dns; "+host,
		"Arrival-Date: "+now,
		"",
		"Final-Recipient: rfc822; "+rcpt,
		"Original-Recipient: rfc822;"+rcpt,
		"Action: failed",
		"Status: 5.1.1",
		"Remote-MTA: dns; "+host,
		"Diagnostic-Code: smtp; 550 5.1.1 <"+rcpt+">: Recipient address rejected: User unknown in virtual mailbox table",
		"",
		"--"+boundary,
		"Content-Description: Undelivered Message Headers",
		"Content-Type: text/rfc822-headers",
		"")
	b.Write(headerBlock(original))
	w("", "--"+boundary+"--")
	return b.Bytes()
}

// arf writes a feedback-loop complaint in RFC 5965 form, the original
// attached whole.
func (r *reporter) arf(envelopeSender, rcpt, to string, original []byte) []byte {
	host, now := r.cfg.Hostname, time.Now().UTC().Format(time.RFC1123Z)
	boundary := "arf-" + uuid.NewString()
	var b bytes.Buffer
	w := lineWriter(&b)
	w("From: Feedback Loop <fbl-reports@"+host+">",
		"To: "+to,
		"Subject: Abuse report",
		"Date: "+now,
		"Message-ID: <"+uuid.NewString()+"@"+host+">",
		"MIME-Version: 1.0",
		`Content-Type: multipart/report; report-type=feedback-report; boundary="`+boundary+`"`,
		"",
		"--"+boundary,
		"Content-Type: text/plain; charset=us-ascii",
		"",
		"This is an email abuse report: a user of "+host+" marked the attached message as spam.",
		"",
		"--"+boundary,
		"Content-Type: message/feedback-report",
		"",
		"Feedback-Type: abuse",
		"User-Agent: mailyard-dev-fbl/1.0",
		"Version: 1",
		"Original-Mail-From: <"+envelopeSender+">",
		"Original-Rcpt-To: <"+rcpt+">",
		"Arrival-Date: "+now,
		"",
		"--"+boundary,
		"Content-Type: message/rfc822",
		"")
	b.Write(original)
	if !bytes.HasSuffix(original, []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	w("", "--"+boundary+"--")
	return b.Bytes()
}
