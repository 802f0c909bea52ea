package mailmsg

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// An encoded word (RFC 2047) in the Subject or the From display name may
// decode to a control character that the field could not carry written out;
// the message is refused with ErrControl, a NUL above all, which PostgreSQL
// cannot store (before, SMTP answered 451 on every retry). TAB, which a
// header may hold, and C1 controls, which Windows-1252 text labelled
// ISO-8859-1 decodes to, are kept.
func TestPrepareSubmittedControlCharacters(t *testing.T) {
	for _, tc := range []struct {
		header      string
		err         error
		subject     string
		displayName string
	}{
		{header: "From: a@example.com\r\nSubject: =?utf-8?q?a=00b?=\r\n", err: ErrControl},
		{header: "From: a@example.com\r\nSubject: =?utf-8?b?YQBi?=\r\n", err: ErrControl},
		{header: "From: a@example.com\r\nSubject: =?utf-8?q?a=0D=0ABcc:_v@x.example?=\r\n", err: ErrControl},
		{header: "From: a@example.com\r\nSubject: =?utf-8?q?a=7Fb?=\r\n", err: ErrControl},
		{header: "From: =?utf-8?q?Bil=00l?= <billing@example.com>\r\nSubject: s\r\n", err: ErrControl},
		{header: "From: =?utf-8?b?QmlsG2w=?= <billing@example.com>\r\nSubject: s\r\n", err: ErrControl},
		// Written out, a control character makes the header unreadable.
		{header: "From: a@example.com\r\nSubject: a\x00b\r\n", err: errAny},
		// A second From (another domain's) is refused whatever the first.
		{header: "From: a@example.com\r\nFrom: ceo@bank.example\r\n", err: errRepeated},
		{header: "From: a@example.com\r\nMessage-ID: <1@x>\r\nMessage-Id: <2@x>\r\n", err: errRepeated},
		// The From domain is checked first: its reply says more.
		{header: "From: =?utf-8?q?Bil=00l?= <billing@other.example>\r\n", err: ErrFromDomain},

		{header: "From: a@example.com\r\nSubject: a\tb\r\n", subject: "a\tb"},
		{header: "From: a@example.com\r\nSubject: =?utf-8?q?a=09b?=\r\n", subject: "a\tb"},
		{header: "From: a@example.com\r\nSubject: =?iso-8859-1?q?=93Hi=94?=\r\n", subject: "\u0093Hi\u0094"},
		{header: "From: =?utf-8?q?Caf=C3=A9?= <a@example.com>\r\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n", subject: "Grüße", displayName: "Café"},
	} {
		_, info, err := PrepareSubmitted([]byte(tc.header+"\r\nHi.\r\n"), "em_1", testDomain, testDate, false)
		switch {
		case tc.err == errAny && err != nil:
		case tc.err == errRepeated && errors.As(err, new(*RepeatedFieldError)):
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%q: error %v, want %v", tc.header, err, tc.err)
		case tc.err == nil && (err != nil || info.Subject != tc.subject || info.From.Name != tc.displayName):
			t.Errorf("%q: subject %q, display name %q, %v; want %q, %q", tc.header, info.Subject, info.From.Name, err, tc.subject, tc.displayName)
		}
	}
}

// errAny stands for any error in a test table, errRepeated for a
// RepeatedFieldError.
var (
	errAny      = errors.New("any error")
	errRepeated = errors.New("a repeated field")
)

// The To and Cc lists the API shows (recipients in neither are Bcc) survive
// a display name with invalid UTF-8, which made the whole list unreadable,
// and one whose encoded word decodes to a control character: each becomes
// U+FFFD. The message itself goes out as written.
func TestPrepareSubmittedDisplayLists(t *testing.T) {
	header := "From: a@example.com\r\n" +
		"To: \"Ad\xffa\" <ada@example.org>, bob@example.org\r\n" +
		"Cc: =?utf-8?q?C=00y?= <cy@example.org>, =?iso-8859-1?q?=93Di=94?= <di@example.org>\r\n" +
		"Subject: s\r\n"
	raw := []byte(header + "\r\nHi.\r\n")
	out, info, err := PrepareSubmitted(raw, "em_1", testDomain, testDate, true)
	if err != nil {
		t.Fatal(err)
	}
	wantTo := []string{"Ad\uFFFDa <ada@example.org>", "bob@example.org"}
	wantCc := []string{"C\uFFFDy <cy@example.org>", "\u0093Di\u0094 <di@example.org>"}
	if !slices.Equal(info.To, wantTo) || !slices.Equal(info.Cc, wantCc) {
		t.Fatalf("To %q, Cc %q; want %q, %q", info.To, info.Cc, wantTo, wantCc)
	}
	if !bytes.Contains(out, []byte("\"Ad\xffa\" <ada@example.org>")) {
		t.Fatal("the To field was changed in the message")
	}
}
