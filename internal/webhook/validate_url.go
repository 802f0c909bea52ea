package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/mailyard/mailyard/internal/egress"
)

// MaxURLLength is the longest webhook URL accepted, in bytes.
const MaxURLLength = 2048

// ValidateURL checks a webhook URL when a webhook is created. Its errors are
// sentences meant for the API's error detail.
//
// Only what is visible in the URL is judged here: a host name is not
// resolved, because its answer could change before the first delivery. The
// client from NewClient checks every resolved address again at dial time.
func ValidateURL(raw string, p Policy) error {
	if raw == "" {
		return errors.New("url is required")
	}
	if len(raw) > MaxURLLength {
		return fmt.Errorf("url must be at most %d characters long", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("url is not a valid URL")
	}
	if err := checkScheme(u.Scheme, p); err != nil {
		return err
	}
	if u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("url must be absolute, like %s://hooks.example.com/path", allowedSchemes(p))
	}
	if u.User != nil {
		return errors.New("url must not contain a user name or password")
	}
	// url.Parse drops an empty fragment ("https://x/#"), so look for the
	// marker itself.
	if strings.Contains(raw, "#") {
		return errors.New("url must not contain a fragment (#...)")
	}
	if err := checkPort(u.Port()); err != nil {
		return err
	}
	return checkHost(u.Hostname(), p)
}

func checkScheme(scheme string, p Policy) error {
	switch scheme {
	case "https":
		return nil
	case "http":
		if p.AllowHTTP {
			return nil
		}
		return errors.New("url must use https://")
	default:
		return fmt.Errorf("url must use %s://", allowedSchemes(p))
	}
}

func allowedSchemes(p Policy) string {
	if p.AllowHTTP {
		return "https or http"
	}
	return "https"
}

func checkPort(port string) error {
	if port == "" {
		return nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return errors.New("url port must be a number from 1 to 65535")
	}
	return nil
}

func checkHost(host string, p Policy) error {
	if host == "" {
		return errors.New("url must have a host")
	}
	// The host is judged as it will be dialled: Go's HTTP client converts
	// a non-ASCII host to ASCII (IDNA's lookup mapping) first, which makes
	// full-width digits and letters into ASCII ones, so "１２７.０.０.１"
	// and "ｌｏｃａｌｈｏｓｔ" would otherwise pass here as names.
	if strings.ContainsFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }) {
		ascii, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return fmt.Errorf("url host %s is not a valid internationalized domain name", host)
		}
		host = ascii
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" {
			return errors.New("url host must not carry an IPv6 zone")
		}
		if egress.IsBlocked(addr) && !p.AllowPrivateNetworks {
			return fmt.Errorf("url host %s is in a special-purpose address range (loopback, private, link-local, shared, multicast, documentation or reserved) and cannot receive webhooks", addr)
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if looksNumeric(name) {
		// Some resolvers (inet_aton, browsers) read 127.1, 0x7f.0.0.1,
		// 2130706433 or 0177.0.0.1 as IPv4 addresses. Only the canonical
		// dotted-quad form is judged reliably, so every other numeric
		// spelling is refused.
		return fmt.Errorf("url host %s looks like an IP address but is not written in canonical form", host)
	}
	if err := checkHostName(name); err != nil {
		return err
	}
	if (name == "localhost" || strings.HasSuffix(name, ".localhost")) && !p.AllowPrivateNetworks {
		return errors.New("url host must not be localhost")
	}
	return nil
}

// looksNumeric applies the WHATWG URL rule: a host whose last label is a
// decimal or 0x-hexadecimal number is an IPv4 address, never a domain name,
// since no top-level domain is numeric.
func looksNumeric(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		return strings.Trim(last[2:], "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// checkHostName rejects names that no DNS server would answer for, so that
// the mistake is reported at creation and not as failing deliveries.
func checkHostName(name string) error {
	if len(name) > 253 {
		return errors.New("url host name must be at most 253 characters long")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return errors.New("url host name must be made of dot-separated labels of 1 to 63 characters")
		}
		for _, r := range label {
			// An internationalized name is here in its ASCII form.
			ok := r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
			if !ok {
				return fmt.Errorf("url host name must not contain %q", r)
			}
		}
	}
	return nil
}
