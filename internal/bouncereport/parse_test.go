package bouncereport

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	envelopeSender = "bounces+0193a7c2-5b1e-7c3d-9f00-123456789abc.k3j5m2q7@mail.shop.example"
	originalID     = "0193a7c2-5b1e-7c3d-9f00-123456789abc@shop.example"
)

var bounce = Envelope{NullSender: true}

// cases are the files in testdata with the facts Parse must find in them.
var cases = []struct {
	file string
	env  Envelope
	want Report
}{
	{"postfix-hard.eml", bounce, Report{
		Kind: KindDSN, MessageID: "20250603101502.4Xk2Lq0Zz3z9sT@mx.example.net", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "nobody@example.org", OriginalRecipient: "Nobody@Example.org",
			Action: "failed", Status: "5.1.1",
			DiagnosticCode: "smtp; 550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown",
			SMTPCode:       550, SMTPMessage: "<nobody@example.org>: Recipient address rejected: User unknown",
			RemoteMTA: "mx.example.org",
		}},
	}},
	{"postfix-delayed.eml", bounce, Report{
		Kind: KindDSN, MessageID: "20250603141502.4Xk9Rt1Mm2z7pQ@mx.example.net", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "slow@example.org", OriginalRecipient: "slow@example.org",
			Action: "delayed", Status: "4.4.1",
			DiagnosticCode: "X-Postfix; connect to mx.example.org[192.0.2.25]:25: Connection timed out",
		}},
	}},
	{"exim.eml", bounce, Report{
		Kind: KindDSN, MessageID: "E1uMbq2-000Abc-0X@mx.example.net", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "gone@example.org", Action: "failed", Status: "5.0.0",
			DiagnosticCode: "smtp; 550 5.1.1 <gone@example.org>: Recipient address rejected: User unknown in virtual mailbox table",
			SMTPCode:       550, SMTPMessage: "<gone@example.org>: Recipient address rejected: User unknown in virtual mailbox table",
			RemoteMTA: "mx.example.org",
		}},
	}},
	{"m365.eml", bounce, Report{
		Kind: KindDSN, MessageID: "7f3e9c1a-0b2d-4c6e-9a8f-1234567890ab@DM6PR01MB0002.prod.outlook.example", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "missing@example.org", OriginalRecipient: "missing@example.org",
			Action: "failed", Status: "5.1.10",
			DiagnosticCode: "smtp;550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
			SMTPCode:       550, SMTPMessage: "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
			RemoteMTA: "DM6PR01MB0003.prod.outlook.example",
		}},
	}},
	{"gmail.eml", bounce, Report{
		Kind: KindDSN, MessageID: "684ecb1e.050a0220.2a3b4c.0001.GMR@mx.google.example", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "no.such.user@example.com", Action: "failed", Status: "5.1.1",
			DiagnosticCode: "smtp; 550-5.1.1 The email account that you tried to reach does not exist. Please try " +
				"550-5.1.1 double-checking the recipient's email address for typos or 550-5.1.1 unnecessary spaces. " +
				"For more information, go to 550 5.1.1 https://support.google.com/mail/?p=NoSuchUser " +
				"d2e1a72fcca58-74890b1c2f1si1234567b3a.123 - gsmtp",
			SMTPCode: 550,
			SMTPMessage: "The email account that you tried to reach does not exist. Please try double-checking the " +
				"recipient's email address for typos or unnecessary spaces. For more information, go to " +
				"https://support.google.com/mail/?p=NoSuchUser d2e1a72fcca58-74890b1c2f1si1234567b3a.123 - gsmtp",
			RemoteMTA: "gmail-smtp-in.l.google.com. (2001:db8::1b, the server for the domain example.com.)",
		}},
	}},
	{"soft-failed-mailbox-full.eml", bounce, Report{
		Kind: KindDSN, MessageID: "20250608101502.4Xm3Pp8Qq1z2sS@mx.example.net", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "full@example.org", Action: "failed", Status: "4.2.2",
			DiagnosticCode: "smtp; 452 4.2.2 Mailbox full", SMTPCode: 452, SMTPMessage: "Mailbox full",
			RemoteMTA: "mx.example.org",
		}},
	}},
	{"two-recipients.eml", bounce, Report{
		Kind: KindDSN, MessageID: "20250603101502.4Xn4Ss9Tt2z3uU@mx.example.net", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "bad@example.org", OriginalRecipient: "bad@example.org",
			Action: "failed", Status: "5.1.1",
			DiagnosticCode: "smtp; 550 5.1.1 <bad@example.org>: Recipient address rejected: User unknown",
			SMTPCode:       550, SMTPMessage: "<bad@example.org>: Recipient address rejected: User unknown",
			RemoteMTA: "mx.example.org",
		}, {
			FinalRecipient: "good@example.org", OriginalRecipient: "good@example.org",
			Action: "delivered", Status: "2.0.0",
			DiagnosticCode: "smtp; 250 2.0.0 Ok: queued as 4Xn4T0Vv5z3wW",
			SMTPCode:       250, SMTPMessage: "Ok: queued as 4Xn4T0Vv5z3wW",
			RemoteMTA: "mx.example.org",
		}},
	}},
	{"original-recipient-only.eml", bounce, Report{
		Kind: KindDSN, MessageID: "202506031015.553AFQ2x012345@relay.example.net",
		Recipients: []DSNRecipient{{
			OriginalRecipient: "List@Example.org", Action: "failed", Status: "5.1.2",
			DiagnosticCode: "smtp; 550 5.1.2 Host unknown (Name server: example.org: host not found)",
			SMTPCode:       550, SMTPMessage: "Host unknown (Name server: example.org: host not found)",
		}},
	}},
	{"arf-yahoo.eml", Envelope{}, Report{
		Kind: KindARF, MessageID: "1748948400.12345.arf@arf.mail.example.org", OriginalMessageID: originalID,
		Feedback: &Feedback{
			Type: "abuse", UserAgent: "Yahoo!-Mail-Feedback/2.0", OriginalRcptTo: []string{"reader@example.org"},
			OriginalMailFrom: envelopeSender, ArrivalDate: "Tue, 03 Jun 2025 10:15:01 +0000", SourceIP: "198.51.100.7",
			OriginalReturnPath: envelopeSender, OriginalFrom: "Shop <news@shop.example>", OriginalTo: "reader@example.org",
		},
	}},
	// Microsoft's JMRP in its traditional form is not a report: only the
	// X-HmXmrOriginalRecipient of the attached message tells, and the
	// classification rules (docs/inbound.md) recognise reports only.
	{"jmrp-traditional.eml", Envelope{}, Report{Kind: KindUnrecognized, MessageID: "JMRP-1748948400-0001@hotmail.example"}},
	{"arf-microsoft.eml", Envelope{}, Report{
		Kind: KindARF, MessageID: "JMRP-1748948400-0002@hotmail.example", OriginalMessageID: originalID,
		Feedback: &Feedback{
			Type: "abuse", UserAgent: "Microsoft JMRP/1.0",
			OriginalMailFrom: envelopeSender, ArrivalDate: "Tue, 03 Jun 2025 10:15:01 +0000", SourceIP: "198.51.100.7",
			OriginalReturnPath: envelopeSender, OriginalFrom: "Shop <news@shop.example>", OriginalTo: "reader@example.org",
		},
	}},
	{"arf-headers-only.eml", Envelope{}, Report{
		Kind: KindARF, MessageID: "arf-0003@isp.example.net", OriginalMessageID: originalID,
		Feedback: &Feedback{
			Type: "abuse", UserAgent: "SomeGenerator/1.0", OriginalRcptTo: []string{"first@example.net", "second@example.net"},
			OriginalMailFrom: envelopeSender, ArrivalDate: "Tue, 03 Jun 2025 10:15:01 +0000", SourceIP: "198.51.100.7",
			OriginalReturnPath: envelopeSender, OriginalFrom: "Shop <news@shop.example>", OriginalTo: "first@example.net, second@example.net",
		},
	}},
	{"arf-redacted.eml", Envelope{}, Report{
		Kind: KindARF, MessageID: "arf-0004@isp.example.net", OriginalMessageID: originalID,
		Feedback: &Feedback{
			Type: "abuse", UserAgent: "ReportGenerator/2.1", OriginalRcptTo: []string{"xxxxxx@example.org", "redacted@example.org"},
			OriginalMailFrom: envelopeSender, ArrivalDate: "Tue, 03 Jun 2025 10:15:01 +0000", SourceIP: "2001:db8::7",
			OriginalReturnPath: envelopeSender, OriginalFrom: "Shop <news@shop.example>", OriginalTo: "xxxxxx@example.org",
		},
	}},
	{"arf-not-spam.eml", Envelope{}, Report{
		Kind: KindARF, MessageID: "arf-0005@isp.example.net", OriginalMessageID: originalID,
		Feedback: &Feedback{
			Type: "not-spam", UserAgent: "ReportGenerator/2.1", OriginalRcptTo: []string{"reader@example.org"},
			OriginalMailFrom: envelopeSender, ArrivalDate: "Tue, 03 Jun 2025 10:15:01 +0000", SourceIP: "2001:db8::7",
			OriginalReturnPath: envelopeSender, OriginalFrom: "Shop <news@shop.example>", OriginalTo: "reader@example.org",
		},
	}},
	{"arf-fraud.eml", Envelope{}, Report{
		Kind: KindARF, MessageID: "arf-0006@bank-watch.example.net", OriginalMessageID: originalID,
		Feedback: &Feedback{
			Type: "fraud", UserAgent: "FraudWatch/0.9", OriginalRcptTo: []string{"reader@example.org"},
			OriginalMailFrom: envelopeSender, ArrivalDate: "Tue, 03 Jun 2025 10:15:01 +0000", SourceIP: "198.51.100.7",
			OriginalReturnPath: envelopeSender, OriginalFrom: "Shop <news@shop.example>", OriginalTo: "reader@example.org",
		},
	}},
	{"qmail.eml", bounce, Report{
		Kind: KindLegacyBounce,
		Legacy: []LegacyFinding{{
			Address: "Gone.User@example.org", Status: "5.1.1", Context: "Sorry, no mailbox here by that name. (#5.1.1)",
		}},
	}},
	// Not from the null sender: not a bounce, whatever it says.
	{"qmail.eml", Envelope{}, Report{Kind: KindUnrecognized}},
	{"exchange-legacy.eml", bounce, Report{
		Kind: KindLegacyBounce, MessageID: "A1B2C3D4E5F6@exch01.corp.example.com",
		Legacy: []LegacyFinding{{
			Address: "user@corp.example.com", Status: "5.1.1",
			Context: "<exch01.corp.example.com #550 5.1.1 RESOLVER.ADR.RecipNotFound; not found>",
		}},
	}},
	{"ooo-auto-submitted.eml", Envelope{}, Report{Kind: KindAutoReply, MessageID: "ooo-1748945760@example.org"}},
	// An auto-reply to the unsubscribe address is not a request to unsubscribe.
	{"ooo-auto-submitted.eml", Envelope{Unsubscribe: true}, Report{Kind: KindAutoReply, MessageID: "ooo-1748945760@example.org"}},
	{"x-autoreply.eml", Envelope{}, Report{Kind: KindAutoReply, MessageID: "autoreply-2@example.org"}},
	// Auto-replies come before legacy bounces even from the null sender.
	{"precedence-auto-reply.eml", bounce, Report{Kind: KindAutoReply, MessageID: "autoreply-3@example.org"}},
	{"human-reply.eml", Envelope{}, Report{Kind: KindUnrecognized, MessageID: "human-1@example.org"}},
	// An out-of-office reply from the null sender whose text has a date
	// like a 5.x.x code beside its author's address is not a bounce: it
	// does not come from a mail system.
	{"ooo-null-sender.eml", bounce, Report{Kind: KindUnrecognized, MessageID: "ooo-null-1@example.org"}},
	{"human-reply.eml", Envelope{Unsubscribe: true}, Report{Kind: KindUnsubscribe, MessageID: "human-1@example.org"}},
	// A DSN to the unsubscribe address is still a DSN.
	{"postfix-hard.eml", Envelope{Unsubscribe: true}, Report{
		Kind: KindDSN, MessageID: "20250603101502.4Xk2Lq0Zz3z9sT@mx.example.net", OriginalMessageID: originalID,
		Recipients: []DSNRecipient{{
			FinalRecipient: "nobody@example.org", OriginalRecipient: "Nobody@Example.org",
			Action: "failed", Status: "5.1.1",
			DiagnosticCode: "smtp; 550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown",
			SMTPCode:       550, SMTPMessage: "<nobody@example.org>: Recipient address rejected: User unknown",
			RemoteMTA: "mx.example.org",
		}},
	}},
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// crlf converts the LF line ends of the files in testdata to the CRLF of
// mail on the wire, which is how the inbound server stores it.
func crlf(b []byte) []byte {
	return bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))
}

// Mail without a header block (an empty message, or one whose header
// cannot be read) is unrecognized, except at an unsubscribe address, which
// it reaches to unsubscribe.
func TestParseWithoutHeader(t *testing.T) {
	for _, raw := range []string{"", "no header here, no colon and no blank line"} {
		require.Equal(t, &Report{Kind: KindUnrecognized}, Parse([]byte(raw), Envelope{}), "%q", raw)
		require.Equal(t, &Report{Kind: KindUnrecognized}, Parse([]byte(raw), Envelope{NullSender: true}), "%q", raw)
		require.Equal(t, &Report{Kind: KindUnsubscribe}, Parse([]byte(raw), Envelope{Unsubscribe: true}), "%q", raw)
		require.Equal(t, &Report{Kind: KindUnrecognized}, Parse([]byte(raw), Envelope{Unsubscribe: true, NullSender: true}), "%q", raw)
	}
}

// A bounce sent to an unsubscribe address that is neither a readable report
// nor a legacy bounce naming a recipient (qmail's "failure notice" without
// a status beside an address, a report whose blocks cannot be read) asks
// for nothing, as an auto-reply does: before, it unsubscribed the token's
// recipient.
func TestBounceToUnsubscribeAddressIsNoRequest(t *testing.T) {
	qmail := "From: MAILER-DAEMON@mx.example.org\r\nSubject: failure notice\r\n\r\n" +
		"Hi. This is the qmail-send program. I'm afraid I wasn't able to deliver your message.\r\n"
	report := "From: someone@example.org\r\nContent-Type: multipart/report; report-type=delivery-status; boundary=b\r\n\r\n" +
		"--b\r\nContent-Type: text/plain\r\n\r\nnot delivered\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\nbroken\r\n--b--\r\n"
	for name, c := range map[string]struct {
		raw string
		env Envelope
	}{
		"qmail from the null sender":     {qmail, Envelope{Unsubscribe: true, NullSender: true}},
		"unreadable report":              {report, Envelope{Unsubscribe: true}},
		"unreadable report, null sender": {report, Envelope{Unsubscribe: true, NullSender: true}},
	} {
		if r := Parse([]byte(c.raw), c.env); r.Kind != KindUnrecognized {
			t.Errorf("%s: %s, want unrecognized", name, r.Kind)
		}
	}
	// A person's mail, whatever it says, still unsubscribes.
	if r := Parse([]byte("From: ada@example.org\r\nSubject: failure notice\r\n\r\nplease stop\r\n"), Envelope{Unsubscribe: true}); r.Kind != KindUnsubscribe {
		t.Errorf("a person's mail: %s", r.Kind)
	}
}

func TestParse(t *testing.T) {
	for _, c := range cases {
		raw := readTestdata(t, c.file)
		for _, ending := range []string{"LF", "CRLF"} {
			t.Run(c.file+"/"+ending, func(t *testing.T) {
				input := raw
				if ending == "CRLF" {
					input = crlf(raw)
				}
				got := Parse(input, c.env)
				want := c.want
				require.Equal(t, &want, got)
			})
		}
	}
}
