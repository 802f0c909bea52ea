package domainname

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

const (
	// MaxNameLength is the longest DNS name, in characters without the
	// trailing dot (RFC 1035 §2.3.4's 255 octets on the wire).
	MaxNameLength  = 253
	maxLabelLength = 63
)

// idnaProfile converts internationalised names the way a resolver looks them
// up (RFC 5891 §5, UTS #46 non-transitional: "faß" stays distinct from
// "fass"). It rejects disallowed code points, invalid punycode ("xn--" labels
// that do not decode) and bidi violations. Length limits are checked by this
// package afterwards so that their errors read well.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.CheckHyphens(true),
	idna.CheckJoiners(true),
)

// Normalize returns the canonical form of a customer domain: trimmed,
// lower-cased, without its trailing dot, converted to ASCII with IDNA, and
// checked to be a name a customer can register (not an IP address, not
// localhost, not a public suffix such as "com", "co.uk" or "github.io").
func Normalize(input string) (string, error) {
	ascii, err := NormalizeHost(input)
	if err != nil {
		return "", err
	}
	if err := checkRegistrable(ascii); err != nil {
		return "", err
	}
	return ascii, nil
}

// NormalizeHost returns the canonical form of any host name, such as the
// domain of an email address: trimmed, lower-cased, without its trailing dot,
// converted to ASCII with IDNA, and checked against the host name syntax and
// length rules. Unlike Normalize it accepts names nobody can register (public
// suffixes, single labels, localhost): callers that need more add their own
// checks.
func NormalizeHost(input string) (string, error) {
	name := strings.ToLower(strings.TrimSpace(input))
	if name == "" {
		return "", errors.New("the domain is empty")
	}
	if isIPLiteral(name) {
		return "", fmt.Errorf("%q is an IP address; a domain name is required", strings.TrimSpace(input))
	}
	name = strings.TrimSuffix(name, ".")

	// ASCII input is checked before IDNA so that common mistakes (an
	// underscore, a stray hyphen, an empty label) get a precise message
	// rather than the IDNA library's terse one.
	if isASCII(name) {
		if err := checkLabels(name); err != nil {
			return "", err
		}
	}
	ascii, err := idnaProfile.ToASCII(name)
	if err != nil {
		return "", fmt.Errorf("%q is not a valid domain name: %s", strings.TrimSpace(input), idnaReason(err))
	}
	// IDNA maps some dots (such as "。") to ".", so the trailing dot may
	// only appear now.
	ascii = strings.TrimSuffix(ascii, ".")
	// Punycode makes labels longer than their Unicode form: check again.
	if err := checkLabels(ascii); err != nil {
		return "", err
	}
	if len(ascii) > MaxNameLength {
		return "", fmt.Errorf("the domain is %d characters long; the maximum is %d", len(ascii), MaxNameLength)
	}
	return ascii, nil
}

// NormalizeMailFrom normalises the MAIL FROM (return-path) name of a domain,
// which must be a strict subdomain of domain, for example "mail.example.com"
// for "example.com". domain is normalised too, so either form may be passed.
func NormalizeMailFrom(input, domain string) (string, error) {
	parent, err := Normalize(domain)
	if err != nil {
		return "", err
	}
	name, err := Normalize(input)
	if err != nil {
		return "", err
	}
	if name == parent {
		return "", fmt.Errorf("the MAIL FROM name must be a subdomain of %q, such as \"mail.%s\", not the domain itself", parent, parent)
	}
	if !strings.HasSuffix(name, "."+parent) {
		return "", fmt.Errorf("%q is not a subdomain of %q", name, parent)
	}
	return name, nil
}

// isIPLiteral reports whether name is an IPv4 or IPv6 address, with or
// without the brackets of a URL host.
func isIPLiteral(name string) bool {
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	_, err := netip.ParseAddr(name)
	return err == nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// idnaReason turns an error of the idna package into a readable clause.
func idnaReason(err error) string {
	msg := strings.TrimPrefix(err.Error(), "idna: ")
	return "it contains a character or label that internationalised domain names do not allow (" + msg + ")"
}
