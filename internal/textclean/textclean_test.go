package textclean

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"550 5.1.1 User unknown", 0, "550 5.1.1 User unknown"},
		{"line one\r\nline two\tend", 0, "line one  line two end"},
		{"x509: certificate is valid for a\x00b, not c", 0, "x509: certificate is valid for a\uFFFDb, not c"},
		{"bad \xff\xfe utf-8", 0, "bad \uFFFD\uFFFD utf-8"},
		{"del\x7f and c1\u0085", 0, "del\uFFFD and c1\uFFFD"},
		{"héllo wörld", 0, "héllo wörld"},
		{"abcdef", 4, "abcd"},
		{"ééé", 5, "éé"},             // é is two bytes: no half character
		{"a\x00é\x00", 4, "a\uFFFD"}, // U+FFFD is three bytes
		{"", 10, ""},
	} {
		if got := Line(tc.in, tc.max); got != tc.want {
			t.Errorf("Line(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x00b", "\xff\xfe", "é\r\nü", strings.Repeat("\u2028", 200)} {
		f.Add(s, 0)
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, maxBytes int) {
		got := Line(s, maxBytes)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 %q", got)
		}
		if strings.IndexFunc(got, unicode.IsControl) >= 0 {
			t.Fatalf("control character in %q", got)
		}
		if maxBytes > 0 && len(got) > maxBytes {
			t.Fatalf("%d bytes, more than %d", len(got), maxBytes)
		}
		if utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0 && (maxBytes <= 0 || len(s) <= maxBytes) && got != s {
			t.Fatalf("clean text changed: %q to %q", s, got)
		}
		if again := Line(got, maxBytes); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
	})
}
