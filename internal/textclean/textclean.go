// Package textclean makes text from outside (a remote server's reply, a
// report's field, an error naming a receiver's certificate) fit to store and
// show: one line of valid UTF-8 without control characters, of bounded
// length. A NUL makes a write fail (Bun refuses it in a string, and a text
// column could not hold it): without this, one hostile byte would fail the
// write on every retry. Invalid UTF-8 would be stored changed, each bad
// byte as U+FFFD; here it is replaced the same way before, so what is kept
// is what callers see.
package textclean

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line returns s as one line: invalid UTF-8 and control characters become
// U+FFFD, except tabs and line breaks, which become spaces. When maxBytes is
// positive the result is cut to at most maxBytes bytes, never inside a
// character.
func Line(s string, maxBytes int) string {
	if isClean(s) {
		return cut(s, maxBytes)
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if maxBytes > 0 && b.Len() >= maxBytes {
			break
		}
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case unicode.IsControl(r):
			b.WriteRune(utf8.RuneError)
		default:
			// An invalid byte comes out of range as U+FFFD.
			b.WriteRune(r)
		}
	}
	return cut(b.String(), maxBytes)
}

// isClean reports whether Line would leave s as it is, apart from its length:
// the common case, checked without copying.
func isClean(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, unicode.IsControl) < 0
}

// cut shortens s to at most maxBytes bytes (when positive), at a character
// boundary.
func cut(s string, maxBytes int) string {
	if maxBytes <= 0 || len(s) <= maxBytes {
		return s
	}
	n := maxBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
