package mailmsg

import (
	"errors"
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
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%q: error %v, want %v", tc.header, err, tc.err)
		case tc.err == nil && (err != nil || info.Subject != tc.subject || info.From.Name != tc.displayName):
			t.Errorf("%q: subject %q, display name %q, %v; want %q, %q", tc.header, info.Subject, info.From.Name, err, tc.subject, tc.displayName)
		}
	}
}

// errAny stands for any error in a test table.
var errAny = errors.New("any error")
