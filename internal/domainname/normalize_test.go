package domainname

import (
	"strings"
	"testing"
)

func TestNormalizeAccepts(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	// Four 63-character labels and one of 1 make 4*64+1 = 257: use 61 for
	// the last label to reach exactly 253.
	name253 := strings.Join([]string{label63, label63, label63, strings.Repeat("b", 61)}, ".")
	if len(name253) != 253 {
		t.Fatalf("test name is %d characters", len(name253))
	}
	tests := []struct {
		input, want string
	}{
		{"example.com", "example.com"},
		{"  example.com \t\n", "example.com"},
		{"Example.COM", "example.com"},
		{"example.com.", "example.com"},
		{"sub.domain.example.co.uk", "sub.domain.example.co.uk"},
		{"example.co.uk", "example.co.uk"},
		{"my-site.github.io", "my-site.github.io"},
		{"a1-b2.example", "a1-b2.example"},
		{"1password.com", "1password.com"},
		{"123.example.com", "123.example.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"Bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.EXAMPLE.", "xn--bcher-kva.example"},
		{"faß.de", "xn--fa-hia.de"},
		{"例え.テスト", "xn--r8jz45g.xn--zckzah"},
		{"ｅｘａｍｐｌｅ.com", "example.com"},
		{"ex\u200bample.com", "example.com"}, // IDNA maps a zero-width space to nothing
		{"example。com", "example.com"},
		{"mail.example.com", "mail.example.com"},
		{"acme.test", "acme.test"},
		{"www.ck", "www.ck"}, // an exception to the "*.ck" wildcard rule
		{label63 + ".com", label63 + ".com"},
		{name253, name253},
	}
	for _, tt := range tests {
		got, err := Normalize(tt.input)
		if err != nil {
			t.Errorf("Normalize(%q): unexpected error: %v", tt.input, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.input, got, tt.want)
		}
	}
}

func TestNormalizeRejects(t *testing.T) {
	label64 := strings.Repeat("a", 64)
	label63 := strings.Repeat("a", 63)
	name254 := strings.Join([]string{label63, label63, label63, strings.Repeat("b", 58), "com"}, ".")
	if len(name254) != 254 {
		t.Fatalf("test name is %d characters", len(name254))
	}
	tests := []struct {
		input string
		// wantInError is a fragment of the message, which the API shows.
		wantInError string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{".", "empty label"},
		{"example..com", "empty label"},
		{".example.com", "empty label"},
		{"example.com..", "empty label"},
		{"1.2.3.4", "IP address"},
		{"192.168.0.1.", "IP address"},
		{"10.0.1", "looks like an IP address"},
		{"::1", "IP address"},
		{"2001:db8::1", "IP address"},
		{"[2001:db8::1]", "IP address"},
		{"::ffff:192.0.2.1", "IP address"},
		{"localhost", "local machine"},
		{"LOCALHOST.", "local machine"},
		{"app.localhost", "local machine"},
		{"com", "public suffix"},
		{"COM.", "public suffix"},
		{"co.uk", `"co.uk" is a public suffix; add a domain registered under it`},
		{"github.io", "public suffix"},
		{"blogspot.com", "public suffix"},
		{"foo.ck", "public suffix"}, // "*.ck" wildcard rule
		{"com.cn", "public suffix"},
		{"xn--55qx5d.cn", "public suffix"},
		{"公司.cn", "public suffix"},
		{"example", "single label"},
		{"intranet", "single label"},
		{"my_domain.com", `contains '_'`},
		{"_dmarc.example.com", `contains '_'`},
		{"exa mple.com", `contains ' '`},
		{"example.com/path", `contains '/'`},
		{"user@example.com", `contains '@'`},
		{"-example.com", "starts with a hyphen"},
		{"example-.com", "ends with a hyphen"},
		{"ab--cd.com", "third and fourth positions"},
		{"xn--zz.com", "not a valid domain name"},
		{"a\u200db.com", "not a valid domain name"},      // a joiner outside its allowed context
		{"exa\u00a0mple.com", "not a valid domain name"}, // no-break space maps to a space
		{"a\x00b.com", "contains"},
		{label64 + ".com", "64 characters long; the maximum is 63"},
		{strings.Repeat("ü", 60) + ".com", "the maximum is 63"}, // too long once in punycode
		{name254, "254 characters long; the maximum is 253"},
	}
	for _, tt := range tests {
		got, err := Normalize(tt.input)
		if err == nil {
			t.Errorf("Normalize(%q) = %q, want an error containing %q", tt.input, got, tt.wantInError)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantInError) {
			t.Errorf("Normalize(%q) error = %q, want it to contain %q", tt.input, err, tt.wantInError)
		}
	}
}

func TestNormalizeErrorsAreSentences(t *testing.T) {
	for _, input := range []string{"", "com", "a_b.com", "1.2.3.4", "localhost", "xn--zz.com"} {
		_, err := Normalize(input)
		if err == nil {
			t.Fatalf("Normalize(%q): no error", input)
		}
		msg := err.Error()
		if strings.HasPrefix(msg, "idna:") || strings.Contains(msg, "\n") {
			t.Errorf("Normalize(%q) error %q is not fit for an API error detail", input, msg)
		}
	}
}

// NormalizeHost applies the syntax and IDNA rules of Normalize but not its
// registrability rules: mail can go to any host name.
func TestNormalizeHost(t *testing.T) {
	for input, want := range map[string]string{
		"github.io":         "github.io",
		"co.uk":             "co.uk",
		"localhost":         "localhost",
		" Bücher.Example. ": "xn--bcher-kva.example",
	} {
		if got, err := NormalizeHost(input); err != nil || got != want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", input, got, err, want)
		}
	}
	for _, input := range []string{"", "a_b.example", "192.0.2.1", "[::1]", "a..b", strings.Repeat("a", 64) + ".example", "xn--zz.example"} {
		if got, err := NormalizeHost(input); err == nil {
			t.Errorf("NormalizeHost(%q) = %q, want an error", input, got)
		}
	}
}
