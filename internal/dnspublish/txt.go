package dnspublish

import (
	"fmt"
	"strings"
)

// maxCharacterString is the length limit of one DNS character-string
// (RFC 1035 §3.3): one length byte.
const maxCharacterString = 255

// TXTStrings splits a logical TXT value into the character-strings of one
// TXT record, each at most 255 bytes, in the form that the Txt field of
// github.com/miekg/dns expects. A 2048-bit DKIM key (about 410 bytes) becomes
// two strings; verifiers concatenate them again (RFC 6376 §3.6.2.2).
//
// miekg/dns reads backslash escapes in Txt when it packs a message, so a
// backslash or a quote in the value is escaped here; the byte limit applies to
// the unescaped bytes.
func TXTStrings(value string) []string {
	if value == "" {
		return []string{""}
	}
	var out []string
	for len(value) > 0 {
		n := min(len(value), maxCharacterString)
		out = append(out, escapeTXT(value[:n]))
		value = value[n:]
	}
	return out
}

// TXTValue joins the character-strings of a TXT record as received from
// github.com/miekg/dns back into the logical value, undoing its escapes
// (\" and \\ and \DDD for unprintable bytes).
func TXTValue(strs []string) string {
	var b strings.Builder
	for _, s := range strs {
		b.WriteString(unescapeTXT(s))
	}
	return b.String()
}

func escapeTXT(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescapeTXT(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i+2 < len(s) && isDigit(s[i]) && isDigit(s[i+1]) && isDigit(s[i+2]) {
			b.WriteByte((s[i]-'0')*100 + (s[i+1]-'0')*10 + (s[i+2] - '0'))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
