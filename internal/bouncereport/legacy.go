package bouncereport

import (
	"bytes"
	"regexp"
	"strings"

	"github.com/mailyard/mailyard/internal/textclean"
)

// LegacyFinding is an address a legacy bounce's text names beside a 5.x.x
// enhanced status code.
type LegacyFinding struct {
	// Address is as written.
	Address string
	// Status is the enhanced status code nearest the address, "5.1.1".
	Status string
	// Context is the line the status code is on, trimmed and at most
	// maxContext bytes, for people reading the event.
	Context string
}

const (
	// maxContext is the length of a LegacyFinding's Context.
	maxContext = 200
	// nearLines is how many lines apart an address and a status code may
	// be and still be "beside" each other: qmail writes the code on the
	// line after the address, Exchange two lines after.
	nearLines = 3
)

var (
	// legacyAddress is a pragmatic address: dot-atom-ish local part, a
	// domain of letters, digits, dots and hyphens.
	legacyAddress = regexp.MustCompile(`[A-Za-z0-9!#$%&'*+/=?^_{|}~.-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?`)
	// legacyStatus is a permanent enhanced status code candidate; its
	// surroundings are checked by permanentCodes, RE2 has no look-around.
	legacyStatus = regexp.MustCompile(`5\.[0-9]{1,3}\.[0-9]{1,3}`)
	// copyMarkers start the copy of the original message in qmail's and
	// Exim's plain bounces; addresses in that copy are not findings.
	copyMarkers = []string{"--- Below this line is a copy of the message", "------ This is a copy of the message"}
)

// LegacyRecipient returns which one of recipients (the addresses the bounced
// email was sent to) the legacy bounce names beside a 5.x.x code, and that
// code. Addresses are compared ignoring case; addr is returned as the caller
// wrote it. ok is false unless exactly one of the recipients is named: a
// bounce that names none or several cannot be pinned on anyone.
func (r *Report) LegacyRecipient(recipients []string) (addr, status string, ok bool) {
	var found string
	for _, f := range r.Legacy {
		for _, rcpt := range recipients {
			if !strings.EqualFold(strings.TrimSpace(rcpt), f.Address) {
				continue
			}
			switch {
			case found == "":
				found, addr, status = strings.ToLower(f.Address), rcpt, f.Status
			case found != strings.ToLower(f.Address):
				return "", "", false
			}
		}
	}
	return addr, status, found != ""
}

// legacyFindings finds addresses beside 5.x.x codes in a bounce's text:
// in the same paragraph and at most nearLines lines apart, the nearest code
// (the same line first, then following lines) going with each address.
// Repeated address and code pairs are reported once.
func legacyFindings(text []byte) []LegacyFinding {
	type line struct {
		text     string
		addrs    []string
		statuses []string
	}
	var out []LegacyFinding
	seen := map[string]bool{}
	var para []line
	flush := func() {
		for i, l := range para {
			for _, a := range l.addrs {
				j, ok := nearestStatus(len(para), i, func(k int) bool { return len(para[k].statuses) > 0 })
				if !ok || len(out) == maxRecipients {
					continue
				}
				key := strings.ToLower(a) + " " + para[j].statuses[0]
				if seen[key] {
					continue
				}
				seen[key] = true
				out = append(out, LegacyFinding{Address: a, Status: para[j].statuses[0], Context: context(para[j].text)})
			}
		}
		para = para[:0]
	}
	for raw := range bytes.Lines(text) {
		s := string(bytes.TrimSpace(raw))
		if isCopyMarker(s) {
			break
		}
		if s == "" {
			flush()
			continue
		}
		para = append(para, line{text: s, addrs: addresses(s), statuses: permanentCodes(s)})
	}
	flush()
	return out
}

// nearestStatus returns the line of n nearest line i, at most nearLines
// away, for which has is true: i itself, then i+1, i-1, i+2, ...
func nearestStatus(n, i int, has func(int) bool) (int, bool) {
	for d := 0; d <= nearLines; d++ {
		for _, k := range []int{i + d, i - d} {
			if k >= 0 && k < n && has(k) {
				return k, true
			}
		}
	}
	return 0, false
}

func isCopyMarker(s string) bool {
	for _, m := range copyMarkers {
		if strings.HasPrefix(s, m) {
			return true
		}
	}
	return false
}

func addresses(s string) []string {
	var out []string
	for _, a := range legacyAddress.FindAllString(s, -1) {
		// A sentence's full stop or a path's dot is not part of it.
		if a = strings.Trim(a, "."); strings.Contains(a, "@") && !strings.HasPrefix(a, "@") {
			out = append(out, a)
		}
	}
	return out
}

// permanentCodes returns the 5.x.x codes in s that are not part of a longer
// number such as an IP address (5.1.1.1) or a version (15.1.1).
func permanentCodes(s string) []string {
	var out []string
	for _, m := range legacyStatus.FindAllStringIndex(s, -1) {
		start, end := m[0], m[1]
		if start > 0 && (isDigit(s[start-1]) || s[start-1] == '.') {
			continue
		}
		if end < len(s) && (isDigit(s[end]) || (s[end] == '.' && end+1 < len(s) && isDigit(s[end+1]))) {
			continue
		}
		out = append(out, s[start:end])
	}
	return out
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// context shortens a line to maxContext bytes, made storable like a
// field's value (see clean).
func context(s string) string {
	return textclean.Line(s, maxContext)
}
