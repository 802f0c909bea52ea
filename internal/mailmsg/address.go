package mailmsg

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mailyard/mailyard/internal/domainname"
)

// Limits of RFC 5321 §4.5.3.1: a mailbox's local part and whole path.
const (
	maxLocalPart = 64
	maxAddress   = 254
)

// ParseAddress parses one address written as "addr" or "Name <addr>" (as
// RFC 5322 allows: quoted display names and RFC 2047 encoded words are
// decoded) and returns its normalised form:
//   - the display name without surrounding spaces;
//   - the local part as written, which must be an ASCII dot-atom
//     ("first.last+tag"): quoted and internationalised local parts would
//     need SMTPUTF8 or quoting on the SMTP envelope, which Mailyard does not do;
//   - the domain lower-case ASCII, internationalised names converted with IDNA
//     the way internal/domainname does for sending domains.
//
// Its errors are sentences for the customer; they never repeat the address.
func ParseAddress(s string) (mail.Address, error) {
	if !utf8.ValidString(s) {
		return mail.Address{}, errors.New("the address is not valid UTF-8")
	}
	// Checked on the raw string and again on the decoded name: a line break
	// here would let the value add headers of its own (header injection).
	if hasControl(s) {
		return mail.Address{}, errors.New("the address contains a line break or another control character")
	}
	if strings.TrimSpace(s) == "" {
		return mail.Address{}, errors.New("the address is empty")
	}
	parsed, err := mail.ParseAddress(s)
	if err != nil {
		return mail.Address{}, errors.New(`not an email address: write one address per entry, as "user@example.com" or "Name <user@example.com>"`)
	}
	name := strings.TrimSpace(parsed.Name)
	// Encoded words ("=?utf-8?q?...?=") decode to any character, CR and LF
	// included.
	if !utf8.ValidString(name) || hasControl(name) {
		return mail.Address{}, errors.New("the display name contains a line break or another control character")
	}
	at := strings.LastIndexByte(parsed.Address, '@')
	if at < 0 {
		return mail.Address{}, errors.New("the address has no @")
	}
	local, domain := parsed.Address[:at], parsed.Address[at+1:]
	if err := checkLocalPart(local); err != nil {
		return mail.Address{}, err
	}
	domain, err = normalizeMailDomain(domain)
	if err != nil {
		return mail.Address{}, err
	}
	addr := local + "@" + domain
	if len(addr) > maxAddress {
		return mail.Address{}, fmt.Errorf("the address is %d characters long; the maximum is %d", len(addr), maxAddress)
	}
	return mail.Address{Name: name, Address: addr}, nil
}

// checkLocalPart accepts the RFC 5322 dot-atom form only: atext characters
// with single dots between them.
func checkLocalPart(local string) error {
	const rule = "the part before @ must be ASCII letters, digits and !#$%&'*+-/=?^_`{|}~ with single dots between them (quoted or internationalised local parts are not supported)"
	if local == "" {
		return errors.New("the part before @ is empty")
	}
	if len(local) > maxLocalPart {
		return fmt.Errorf("the part before @ is %d characters long; the maximum is %d", len(local), maxLocalPart)
	}
	if !isDotAtom(local) {
		return errors.New(rule)
	}
	return nil
}

// normalizeMailDomain normalises the domain of an address. Recipients may be
// at any domain that can receive mail, including names that no customer could
// register as a sending domain (such as a public suffix), so only the host
// name rules apply, plus the checks that rule out what is not a mail domain
// on the Internet: domain literals, single labels, localhost and IPv4-like
// names.
func normalizeMailDomain(domain string) (string, error) {
	if strings.HasPrefix(domain, "[") {
		return "", errors.New("address literals such as user@[192.0.2.1] are not supported; use a domain name")
	}
	if domain == "" {
		return "", errors.New("the part after @ is empty")
	}
	// NormalizeHost trims spaces and a trailing dot, which an address never
	// has: refuse them rather than guess.
	if strings.TrimSpace(domain) != domain || strings.HasSuffix(domain, ".") {
		return "", errors.New("the domain after @ must not end with a dot or contain spaces")
	}
	name, err := domainname.NormalizeHost(domain)
	if err != nil {
		return "", fmt.Errorf("the domain after @: %w", err)
	}
	dot := strings.LastIndexByte(name, '.')
	switch {
	case dot < 0:
		return "", errors.New("the domain after @ has a single label; a full domain such as example.com is required")
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return "", errors.New("the domain after @ is reserved for the local machine (RFC 6761)")
	case isDigits(name[dot+1:]):
		return "", errors.New("the domain after @ looks like an IP address; a domain name is required")
	}
	return name, nil
}

// isDotAtom reports whether s is an RFC 5322 dot-atom-text: atext runs
// separated by single dots.
func isDotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '.' && !isAtext(s[i]) {
			return false
		}
	}
	return true
}

// isAtext reports whether c is an RFC 5322 atext character.
func isAtext(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// hasControl reports whether s contains a control character: C0 (CR, LF and
// TAB included), DEL or C1 (NEL included).
func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// underDomain reports whether name is domain or one of its subdomains. Both
// are normalised lower-case ASCII.
func underDomain(name, domain string) bool {
	return domain != "" && (name == domain || strings.HasSuffix(name, "."+domain))
}

// domainOf returns the part of a normalised address after its last @.
func domainOf(addr string) string {
	return addr[strings.LastIndexByte(addr, '@')+1:]
}
