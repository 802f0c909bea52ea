package webhook

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/idna"

	"github.com/mailyard/mailyard/internal/egress"
)

// FuzzValidateURL checks, for any string and policy, that ValidateURL
// answers an error or accepts a URL that satisfies the documented rules:
// at most MaxURLLength bytes, parses, https (or http when allowed), absolute
// with a host, no user info, no fragment, a port from 1 to 65535, and,
// under the strict policy, a host that is neither localhost nor an address
// any parser (netip or net.ParseIP) reads as special-purpose, the host
// judged as the HTTP client dials it. An accepted URL re-encoded by net/url
// is accepted too (if still short enough), and whatever the strict policy
// accepts the relaxed one accepts.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.com/path?q=1", "http://hooks.example.com/", "https://example.com:8443/x",
		"https://user:pass@example.com/", "https://@example.com/", "https://example.com/#", "https://example.com#frag",
		"https://127.0.0.1/", "https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://[fe80::1%25eth0]/",
		"https://[2606:4700::1111]/", "https://1.1.1.1/", "https://0x7f.1/", "https://2130706433/", "https://0177.0.0.1/",
		"https://127.1/", "https://localhost/", "https://LOCALHOST./", "https://a.localhost/", "https://example.com:0/",
		"https://example.com:65536/", "https://example.com:-1/", "https://example.com:/", "https:///path", "https:example.com",
		"//example.com/", "ftp://example.com/", "HTTPS://EXAMPLE.COM/", "https://bücher.example/", "https://xn--bcher-kva.example/",
		"https://127\u30020\u30020\u30021/", "https://ex ample.com/", "https://ex%41mple.com/", "https://a..b/", "https://a_b.example/",
		"https://example.com./", "https://" + strings.Repeat("a", 64) + ".com/", "https://" + strings.Repeat("a.", 127) + "com/",
		"https://example.com/" + strings.Repeat("x", MaxURLLength), "https://exa\x00mple.com/", "https://example.com/\x7f",
		"", " https://example.com/", "https://[::1", "https://%31%32%37.0.0.1/", "https://[0:0:0:0:0:0:0:1]/",
		"https://\uff11\uff12\uff17.0.0.1/", "https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/", "https://169.254.169.\uff12\uff15\uff14/",
	} {
		f.Add(s, false, false)
		f.Add(s, true, true)
	}
	f.Fuzz(func(t *testing.T, raw string, allowHTTP, allowPrivate bool) {
		p := Policy{AllowHTTP: allowHTTP, AllowPrivateNetworks: allowPrivate}
		err := ValidateURL(raw, p)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ValidateURL(%q): empty error message", raw)
			}
			return
		}
		if raw == "" || len(raw) > MaxURLLength || strings.Contains(raw, "#") {
			t.Fatalf("ValidateURL accepted %q: empty, too long or with a fragment", raw)
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			t.Fatalf("ValidateURL accepted %q, which url.Parse refuses: %v", raw, perr)
		}
		if u.Scheme != "https" && !(allowHTTP && u.Scheme == "http") {
			t.Fatalf("ValidateURL accepted %q with scheme %q under %+v", raw, u.Scheme, p)
		}
		if u.Host == "" || u.Hostname() == "" || u.Opaque != "" || u.User != nil {
			t.Fatalf("ValidateURL accepted %q: not absolute, no host, or user info", raw)
		}
		if port := u.Port(); port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("ValidateURL accepted %q with port %q", raw, port)
			}
		}
		// Judged as the HTTP client dials it: a non-ASCII host mapped to
		// ASCII first (net/http leaves an ASCII one as it is).
		host := u.Hostname()
		if strings.ContainsFunc(host, func(r rune) bool { return r > 0x7f }) {
			if host, err = idna.Lookup.ToASCII(host); err != nil {
				t.Fatalf("ValidateURL accepted %q, whose host the HTTP client cannot map to ASCII: %v", raw, err)
			}
		}
		if !allowPrivate {
			name := strings.TrimSuffix(strings.ToLower(host), ".")
			if name == "localhost" || strings.HasSuffix(name, ".localhost") {
				t.Fatalf("ValidateURL accepted %q: localhost under the strict policy", raw)
			}
			if addr, err := netip.ParseAddr(host); err == nil && egress.IsBlocked(addr) {
				t.Fatalf("ValidateURL accepted %q: blocked address %s", raw, addr)
			}
			if ip := net.ParseIP(host); ip != nil {
				addr, _ := netip.AddrFromSlice(ip)
				if egress.IsBlocked(addr) {
					t.Fatalf("ValidateURL accepted %q: blocked address %s", raw, addr)
				}
			}
		}
		// Re-encoding escapes raw bytes (one becomes three), which may take
		// a URL past MaxURLLength on its own.
		if err := ValidateURL(u.String(), p); err != nil && len(u.String()) <= MaxURLLength {
			t.Fatalf("ValidateURL accepted %q but refuses its re-encoding %q: %v", raw, u.String(), err)
		}
		if err := ValidateURL(raw, Policy{AllowHTTP: true, AllowPrivateNetworks: true}); err != nil {
			t.Fatalf("ValidateURL accepted %q under %+v but refuses it under the relaxed policy: %v", raw, p, err)
		}
	})
}
