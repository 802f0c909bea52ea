package bouncereport

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLegacyRecipient(t *testing.T) {
	r := Parse(readTestdata(t, "qmail.eml"), bounce)
	addr, status, ok := r.LegacyRecipient([]string{"someone@example.org", "gone.user@EXAMPLE.org"})
	require.True(t, ok)
	require.Equal(t, "gone.user@EXAMPLE.org", addr, "as the caller wrote it")
	require.Equal(t, "5.1.1", status)

	// The copy of the message below qmail's marker names other@example.org
	// beside "5.1.1"; it is not a finding.
	_, _, ok = r.LegacyRecipient([]string{"other@example.org"})
	require.False(t, ok)
	_, _, ok = r.LegacyRecipient(nil)
	require.False(t, ok)

	two := Parse([]byte("From: MAILER-DAEMON@mx.example.net\n\n"+
		"<a@example.org>:\nSorry, no mailbox here by that name. (#5.1.1)\n\n"+
		"<b@example.org>:\nSorry, no mailbox here by that name. (#5.1.1)\n"), bounce)
	require.Equal(t, KindLegacyBounce, two.Kind)
	require.Len(t, two.Legacy, 2)
	_, _, ok = two.LegacyRecipient([]string{"a@example.org", "b@example.org"})
	require.False(t, ok, "two of the recipients are named")
	addr, _, ok = two.LegacyRecipient([]string{"b@example.org", "c@example.org"})
	require.True(t, ok)
	require.Equal(t, "b@example.org", addr)
}

func TestLegacyFindings(t *testing.T) {
	text := "Delivery to the following recipient failed permanently:\n\n" +
		"    x@example.org\n\n" + // no code in this paragraph
		"host 5.1.1.1 said: unknown user y@example.org\n\n" + // an IP address, not a code
		"z@example.org\nline\nline\nline\n5.2.2 far away\n\n" + // four lines apart
		"version 15.1.1 for w@example.org\n"
	require.Empty(t, legacyFindings([]byte(text)))

	near := legacyFindings([]byte("v@example.org\nline\nline\n550 5.2.2 mailbox full.\n"))
	require.Equal(t, []LegacyFinding{{Address: "v@example.org", Status: "5.2.2", Context: "550 5.2.2 mailbox full."}}, near)

	long := legacyFindings([]byte("u@example.org #5.1.1 " + strings.Repeat("é", 200) + "\n"))
	require.Len(t, long, 1)
	require.LessOrEqual(t, len(long[0].Context), maxContext+2)
}

func TestDSNRecipientMatches(t *testing.T) {
	d := DSNRecipient{FinalRecipient: "nobody@example.org", OriginalRecipient: "Nobody@Example.org"}
	require.True(t, d.Matches("NOBODY@example.ORG"))
	require.True(t, d.Matches(" nobody@example.org "))
	require.False(t, d.Matches("somebody@example.org"))
	require.False(t, DSNRecipient{}.Matches(""))
}

func TestSMTPReply(t *testing.T) {
	for _, c := range []struct {
		in      string
		code    int
		message string
	}{
		{"550 5.1.1 User unknown", 550, "User unknown"},
		{"550 User unknown", 550, "User unknown"},
		{"550-Line one 550 Line two", 550, "Line one Line two"},
		{"550 quota 550 exceeded", 550, "quota 550 exceeded"},
		{"550", 550, ""},
		{"host said: 550 5.1.1", 0, "host said: 550 5.1.1"},
		{"", 0, ""},
		{"5500 x", 0, "5500 x"},
	} {
		code, message := smtpReply(c.in)
		require.Equal(t, c.code, code, c.in)
		require.Equal(t, c.message, message, c.in)
	}
}

func TestAutoSubmitted(t *testing.T) {
	for value, want := range map[string]bool{
		"auto-replied": true, "auto-generated": true, "Auto-Replied; owner-email=\"a@example.org\"": true,
		"no": false, "No": false, " no ; x=y": false, "": true,
	} {
		r := Parse([]byte("From: a@example.org\nAuto-Submitted: "+value+"\n\nhi\n"), Envelope{})
		require.Equal(t, want, r.Kind == KindAutoReply, value)
	}
	r := Parse([]byte("From: a@example.org\nX-Autorespond: on\n\nhi\n"), Envelope{})
	require.Equal(t, KindAutoReply, r.Kind)
}

func TestHugeBody(t *testing.T) {
	// A DSN whose original message is 10 MiB + 1 byte: the report is found,
	// the original's body is skipped.
	raw := string(readTestdata(t, "exim.eml"))
	pad := strings.Repeat("x", 10<<20+1)
	huge := strings.Replace(raw, "Your order has shipped.\n", pad+"\n", 1)
	r := Parse([]byte(huge), bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Equal(t, originalID, r.OriginalMessageID)

	// A plain bounce whose code is beyond the 64 KiB searched is not found.
	plain := "From: MAILER-DAEMON@mx.example.net\n\n" + pad + "\n\n<a@example.org>:\nNo mailbox. (#5.1.1)\n"
	require.Equal(t, KindUnrecognized, Parse([]byte(plain), bounce).Kind)
}

// manyParts is a DSN with n text/plain parts before its delivery-status part.
func manyParts(n int) []byte {
	var b bytes.Buffer
	b.WriteString("From: MAILER-DAEMON@mx.example.net\nMIME-Version: 1.0\n" +
		"Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n")
	for i := range n {
		fmt.Fprintf(&b, "--b\nContent-Type: text/plain\n\npart %d\n", i)
	}
	b.WriteString("--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\n" +
		"Final-Recipient: rfc822; a@example.org\nAction: failed\nStatus: 5.1.1\n\n--b--\n")
	return b.Bytes()
}

func TestManyParts(t *testing.T) {
	require.Equal(t, KindDSN, Parse(manyParts(10), bounce).Kind)
	// Beyond the parts examined: not understood, not slow.
	require.Equal(t, KindUnrecognized, Parse(manyParts(1000), Envelope{}).Kind)
}

func BenchmarkManyParts(b *testing.B) {
	raw := manyParts(1000)
	for b.Loop() {
		Parse(raw, bounce)
	}
}

func TestManyRecipients(t *testing.T) {
	var b strings.Builder
	b.WriteString("Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n" +
		"--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n")
	for i := range 150 {
		fmt.Fprintf(&b, "\n\n\nFinal-Recipient: rfc822; r%d@example.org\nAction: failed\nStatus: 5.1.1\n", i)
	}
	b.WriteString("\n--b--\n")
	r := Parse([]byte(b.String()), bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Len(t, r.Recipients, maxRecipients)
	require.Equal(t, "r99@example.org", r.Recipients[99].FinalRecipient)
}

func TestNestedReport(t *testing.T) {
	dsn := string(readTestdata(t, "postfix-hard.eml"))
	// A DSN forwarded as an attachment is not a DSN to us.
	forwarded := "From: reader@example.org\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=outer\n\n" +
		"--outer\nContent-Type: text/plain\n\nSee the attached bounce.\n" +
		"--outer\nContent-Type: message/rfc822\n\n" + dsn + "\n--outer--\n"
	r := Parse([]byte(forwarded), Envelope{})
	require.Equal(t, KindUnrecognized, r.Kind)
	require.Empty(t, r.Recipients)

	// A DSN whose returned message is itself a DSN: only the outer
	// recipients count, and the original is the inner report.
	outer := "From: MAILER-DAEMON@relay.example.net\nMessage-ID: <outer@relay.example.net>\nMIME-Version: 1.0\n" +
		"Content-Type: multipart/report; report-type=delivery-status; boundary=outer\n\n" +
		"--outer\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; relay.example.net\n\n" +
		"Final-Recipient: rfc822; outer@example.net\nAction: failed\nStatus: 5.4.4\n\n" +
		"--outer\nContent-Type: message/rfc822\n\n" + dsn + "\n--outer--\n"
	r = Parse([]byte(outer), bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Len(t, r.Recipients, 1)
	require.Equal(t, "outer@example.net", r.Recipients[0].FinalRecipient)
	require.Equal(t, "20250603101502.4Xk2Lq0Zz3z9sT@mx.example.net", r.OriginalMessageID)
}

func TestDeepNesting(t *testing.T) {
	nest := func(levels int) []byte {
		var b strings.Builder
		b.WriteString("From: MAILER-DAEMON@mx.example.net\n")
		for i := range levels {
			fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=b%d\n\n--b%d\n", i, i)
		}
		b.WriteString("Content-Type: text/plain\n\n<a@example.org>:\nNo mailbox. (#5.1.1)\n")
		for i := levels - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "--b%d--\n", i)
		}
		return []byte(b.String())
	}
	require.Equal(t, KindLegacyBounce, Parse(nest(maxDepth), bounce).Kind)
	require.Equal(t, KindUnrecognized, Parse(nest(maxDepth+1), bounce).Kind)
}

func TestGarbageHeaders(t *testing.T) {
	raw := readTestdata(t, "postfix-hard.eml")
	// 8-bit garbage in header values is carried, not fatal.
	values := bytes.Replace(raw, []byte("Subject: Undelivered Mail Returned to Sender"), []byte("Subject: \xff\xfe\x80 \x00bad"), 1)
	values = bytes.Replace(values, []byte("Status: 5.1.1"), []byte("Status: 5.1.1\nX-Junk: \xc3\x28\xa0\xa1"), 1)
	r := Parse(values, bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Equal(t, "5.1.1", r.Recipients[0].Status)

	// So is 8-bit garbage in a header name: net/textproto accepts it.
	names := bytes.Replace(raw, []byte("Subject:"), []byte("Sub\xffject:"), 1)
	require.Equal(t, KindDSN, Parse(names, bounce).Kind)

	// A header line without a colon makes the header unreadable.
	colonless := bytes.Replace(raw, []byte("Subject:"), []byte("Subject"), 1)
	require.Equal(t, KindUnrecognized, Parse(colonless, bounce).Kind)
}

func TestMissingBoundary(t *testing.T) {
	raw := readTestdata(t, "postfix-hard.eml")
	broken := bytes.Replace(raw, []byte(";\n\tboundary=\"4Xk2Lq0Zz3z9sT.1748945702/mx.example.net\""), nil, 1)
	require.NotEqual(t, raw, broken)
	r := Parse(broken, Envelope{})
	require.Equal(t, KindAutoReply, r.Kind, "not a report any more, but still Auto-Submitted")
	require.Empty(t, r.Recipients)

	// Without Auto-Submitted, the body is read as a legacy bounce's text.
	broken = bytes.Replace(broken, []byte("Auto-Submitted: auto-replied\n"), nil, 1)
	r = Parse(broken, bounce)
	require.Equal(t, KindLegacyBounce, r.Kind)
	addr, status, ok := r.LegacyRecipient([]string{"nobody@example.org"})
	require.True(t, ok)
	require.Equal(t, "nobody@example.org", addr)
	require.Equal(t, "5.1.1", status)
}

func TestTruncated(t *testing.T) {
	raw := readTestdata(t, "postfix-hard.eml")
	// Cut inside the returned headers: the report is complete.
	cut := raw[:bytes.LastIndex(raw, []byte("MIME-Version"))+4]
	r := Parse(cut, bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Equal(t, "5.1.1", r.Recipients[0].Status)
	require.Equal(t, originalID, r.OriginalMessageID)

	// Cut inside the per-recipient block: what is there is kept.
	cut = raw[:bytes.Index(raw, []byte("Status: 5.1.1"))]
	r = Parse(cut, bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Equal(t, DSNRecipient{FinalRecipient: "nobody@example.org", OriginalRecipient: "Nobody@Example.org", Action: "failed"}, r.Recipients[0])

	// Every prefix of every sample parses without panicking.
	for _, c := range cases {
		raw := readTestdata(t, c.file)
		for n := 0; n < len(raw); n += 13 {
			parse(raw[:n], c.env)
		}
	}
}

// TestInvalidUTF8InFields: a report's facts are stored as text and sent in
// webhooks; invalid UTF-8 in them comes out as U+FFFD, as the store would
// write it. (net/textproto already refuses a field with a NUL: it and the
// fields after it are not read.)
func TestInvalidUTF8InFields(t *testing.T) {
	raw := readTestdata(t, "postfix-hard.eml")
	at := bytes.LastIndex(raw, []byte("User unknown"))
	raw = slices.Concat(raw[:at], []byte("User\xffunknown \xfe"), raw[at+len("User unknown"):])
	r := Parse(raw, bounce)
	require.Equal(t, KindDSN, r.Kind)
	require.Equal(t, "<nobody@example.org>: Recipient address rejected: User\uFFFDunknown \uFFFD", r.Recipients[0].SMTPMessage)
	require.Equal(t, 550, r.Recipients[0].SMTPCode)
	require.Empty(t, unstorable(r))
}

// A Status with trailing punctuation still gives its code, so a temporary
// failure written "4.4.7." is not read as one without a status (which is
// taken for permanent); a code run on into more digits gives none.
func TestStatusCodeWithPunctuation(t *testing.T) {
	for value, want := range map[string]string{"4.4.7.": "4.4.7", "4.4.7,": "4.4.7", "5.1.1": "5.1.1", "5.1.1234": "", "x.1.1": "", "": ""} {
		if got := statusCode(value); got != want {
			t.Errorf("statusCode(%q) = %q, want %q", value, got, want)
		}
	}
	raw := []byte("From: MAILER-DAEMON@mx.example.net\nContent-Type: multipart/report; report-type=delivery-status; boundary=b\n\n" +
		"--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.net\n\n" +
		"Final-Recipient: rfc822; a@example.org\nAction: failed\nStatus: 4.4.7.\nDiagnostic-Code: X-Postfix; connect to mx.example.org: Connection timed out\n\n--b--\n")
	r := Parse(raw, Envelope{NullSender: true})
	if len(r.Recipients) != 1 || r.Recipients[0].Status != "4.4.7" {
		t.Fatalf("%+v", r.Recipients)
	}
}

// A message that is nothing but header (10 MiB of one-line fields) is not
// read whole into net/mail's field map, which cost 30 times its size: past
// maxHeaderBytes without the end of the header, it is unrecognized.
func TestHugeHeaderIsNotRead(t *testing.T) {
	raw := bytes.Repeat([]byte("A: b\r\n"), 10<<20/6)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := Parse(raw, Envelope{NullSender: true})
	runtime.ReadMemStats(&after)
	if r.Kind != KindUnrecognized {
		t.Fatalf("kind %s", r.Kind)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 8<<20 {
		t.Fatalf("parsing allocated %d MiB", allocated>>20)
	}
	if r := Parse(raw, Envelope{Unsubscribe: true}); r.Kind != KindUnsubscribe {
		t.Fatalf("to an unsubscribe address: %s", r.Kind)
	}
}
