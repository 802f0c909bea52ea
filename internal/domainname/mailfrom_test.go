package domainname

import (
	"strings"
	"testing"
)

func TestNormalizeMailFromAccepts(t *testing.T) {
	tests := []struct {
		input, domain, want string
	}{
		{"mail.example.com", "example.com", "mail.example.com"},
		{" MAIL.Example.COM. ", "example.com", "mail.example.com"},
		{"bounces.mail.example.com", "example.com", "bounces.mail.example.com"},
		{"mail.example.co.uk", "example.co.uk", "mail.example.co.uk"},
		{"post.bücher.example", "xn--bcher-kva.example", "post.xn--bcher-kva.example"},
		{"post.xn--bcher-kva.example", "Bücher.example", "post.xn--bcher-kva.example"},
	}
	for _, tt := range tests {
		got, err := NormalizeMailFrom(tt.input, tt.domain)
		if err != nil {
			t.Errorf("NormalizeMailFrom(%q, %q): unexpected error: %v", tt.input, tt.domain, err)
			continue
		}
		if got != tt.want {
			t.Errorf("NormalizeMailFrom(%q, %q) = %q, want %q", tt.input, tt.domain, got, tt.want)
		}
	}
}

func TestNormalizeMailFromRejects(t *testing.T) {
	tests := []struct {
		input, domain, wantInError string
	}{
		{"example.com", "example.com", "not the domain itself"},
		{"Example.com.", "example.com", "not the domain itself"},
		{"mail.other.com", "example.com", `"mail.other.com" is not a subdomain of "example.com"`},
		{"mailexample.com", "example.com", "not a subdomain"},
		{"com", "example.com", "public suffix"},
		{"mail_from.example.com", "example.com", "contains '_'"},
		{"", "example.com", "empty"},
		{"mail.co.uk", "co.uk", "public suffix"},
	}
	for _, tt := range tests {
		got, err := NormalizeMailFrom(tt.input, tt.domain)
		if err == nil {
			t.Errorf("NormalizeMailFrom(%q, %q) = %q, want an error", tt.input, tt.domain, got)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantInError) {
			t.Errorf("NormalizeMailFrom(%q, %q) error = %q, want it to contain %q", tt.input, tt.domain, err, tt.wantInError)
		}
	}
}
