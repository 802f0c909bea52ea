package domainname

import (
	"strings"
	"testing"

	"golang.org/x/net/idna"
)

// domainSeeds are good and nasty domain inputs: IDNs, punycode (valid and
// broken), trailing dots, IP literals, reserved names, public suffixes, huge
// labels, control bytes and IDNA full stops.
var domainSeeds = []string{
	"example.com", " Example.COM. ", "mail.example.co.uk", "bücher.example",
	"xn--bcher-kva.example", "xn--zz.example", "xn--.example", "faß.de", "FASS.de",
	"例え.テスト", "例え。テスト。", "ex\u3002ample\uff0ecom", "a..b", ".example.com",
	"example.com..", "", " ", ".", "-a.com", "a-.com", "ab--c.com", "a_b.com",
	"127.0.0.1", "[::1]", "::1", "1.2.3.4.", "0x7f.1", "example.123", "localhost",
	"foo.localhost.", "com", "co.uk", "github.io", "user.github.io", "a\x00b.com",
	"exa mple.com", "user@example.com", "example.com:443", "http://example.com",
	strings.Repeat("a", 63) + ".com", strings.Repeat("a", 64) + ".com",
	strings.Repeat("a.", 126) + "com", strings.Repeat("ü", 60) + ".com",
	"\u200d.com", "a\u200db.com", "ﬀ.com", "ＥＸＡＭＰＬＥ.ｃｏｍ", "\xff\xfe.com",
	"xn--mnchen-3ya.de", "münchen.DE", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629.example",
}

// FuzzNormalize checks, for any input, that Normalize either answers an error
// (and an empty name) or a canonical name, where canonical means:
//   - normalising it again gives the same name (idempotent), and so do its
//     upper-case and trailing-dot spellings;
//   - it is lower-case LDH ASCII, at most 253 characters, with labels of 1 to
//     63 characters that neither start nor end with a hyphen, at least two
//     labels, no trailing dot, and a non-numeric top-level label;
//   - its Unicode (display) form normalises back to it.
func FuzzNormalize(f *testing.F) {
	for _, s := range domainSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		got, err := Normalize(input)
		if err != nil {
			if got != "" {
				t.Fatalf("Normalize(%q) = %q with error %v; want an empty name with the error", input, got, err)
			}
			if err.Error() == "" {
				t.Fatalf("Normalize(%q): empty error message", input)
			}
			return
		}
		checkCanonical(t, input, got)

		again, err := Normalize(got)
		if err != nil || again != got {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q, %v; want the same name", input, got, got, again, err)
		}
		for _, spelling := range []string{strings.ToUpper(got), got + ".", " " + got + ". "} {
			if other, err := Normalize(spelling); err != nil || other != got {
				t.Fatalf("Normalize(%q) = %q, %v; want %q like its canonical form", spelling, other, err, got)
			}
		}
		unicode, err := idna.ToUnicode(got)
		if err != nil {
			t.Fatalf("idna.ToUnicode(%q): %v", got, err)
		}
		if back, err := Normalize(unicode); err != nil || back != got {
			t.Fatalf("Normalize(%q) = %q, but its Unicode form %q normalises to %q, %v", input, got, unicode, back, err)
		}
	})
}

// FuzzNormalizeMailFrom checks that an accepted MAIL FROM name is the
// canonical form of the input, a strict subdomain of the canonical domain,
// and accepted again unchanged; and that anything else is an error, not a
// panic.
func FuzzNormalizeMailFrom(f *testing.F) {
	for _, s := range domainSeeds {
		f.Add("mail."+s, s)
		f.Add(s, "example.com")
	}
	f.Add("bounces.mail.example.com", "EXAMPLE.com.")
	f.Add("post.bücher.example", "xn--bcher-kva.example")
	f.Add("mailexample.com", "example.com")
	f.Add("mail.co.uk", "co.uk")
	f.Fuzz(func(t *testing.T, input, domain string) {
		got, err := NormalizeMailFrom(input, domain)
		if err != nil {
			if got != "" {
				t.Fatalf("NormalizeMailFrom(%q, %q) = %q with error %v; want an empty name with the error", input, domain, got, err)
			}
			return
		}
		checkCanonical(t, input, got)
		parent, err := Normalize(domain)
		if err != nil {
			t.Fatalf("NormalizeMailFrom(%q, %q) accepted a domain that Normalize refuses: %v", input, domain, err)
		}
		if name, err := Normalize(input); err != nil || name != got {
			t.Fatalf("NormalizeMailFrom(%q, %q) = %q, but Normalize(%q) = %q, %v", input, domain, got, input, name, err)
		}
		if got == parent || !strings.HasSuffix(got, "."+parent) {
			t.Fatalf("NormalizeMailFrom(%q, %q) = %q, not a strict subdomain of %q", input, domain, got, parent)
		}
		if again, err := NormalizeMailFrom(got, parent); err != nil || again != got {
			t.Fatalf("NormalizeMailFrom(%q, %q) = %q, %v; want %q again", got, parent, again, err, got)
		}
	})
}

// checkCanonical fails unless name satisfies the documented rules of a
// normalised domain.
func checkCanonical(t *testing.T, input, name string) {
	t.Helper()
	if name == "" || len(name) > MaxNameLength {
		t.Fatalf("Normalize(%q) = %q: length %d is outside 1..%d", input, name, len(name), MaxNameLength)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		t.Fatalf("Normalize(%q) = %q: a single label", input, name)
	}
	for _, label := range labels {
		if label == "" || len(label) > maxLabelLength || label[0] == '-' || label[len(label)-1] == '-' {
			t.Fatalf("Normalize(%q) = %q: bad label %q", input, name, label)
		}
		for i := 0; i < len(label); i++ {
			if !isLDH(rune(label[i])) {
				t.Fatalf("Normalize(%q) = %q: label %q has byte %q", input, name, label, label[i])
			}
		}
	}
	if isDigits(labels[len(labels)-1]) {
		t.Fatalf("Normalize(%q) = %q: numeric top-level label", input, name)
	}
}
