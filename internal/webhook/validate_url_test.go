package webhook

import (
	"strings"
	"testing"
)

func TestValidateURL(t *testing.T) {
	strict := Policy{}
	httpOK := Policy{AllowHTTP: true}
	long := "https://hooks.example.com/" + strings.Repeat("a", MaxURLLength-len("https://hooks.example.com/"))
	cases := []struct {
		url  string
		p    Policy
		want string // "" when valid, else a fragment of the error
	}{
		{"https://hooks.example.com/mailyard", strict, ""},
		{"https://hooks.example.com:8443/a?b=c", strict, ""},
		{"HTTPS://Hooks.Example.COM/", strict, ""},
		{"https://xn--bcher-kva.example/", strict, ""},
		{"https://bücher.example/", strict, ""},
		{"https://8.8.8.8/hook", strict, ""},
		{"https://[2606:4700:4700::1111]/hook", strict, ""},
		{"https://[::ffff:8.8.8.8]/hook", strict, ""},
		{"https://example.com./", strict, ""},
		{long, strict, ""},
		{long + "a", strict, "at most 2048"},
		{"", strict, "required"},
		{"http://hooks.example.com/", strict, "https://"},
		{"http://hooks.example.com/", httpOK, ""},
		{"ftp://hooks.example.com/", httpOK, "https or http"},
		{"hooks.example.com/path", strict, "https"},
		{"/relative", strict, "https"},
		{"https:hooks.example.com", strict, "absolute"},
		{"https:///path", strict, "absolute"},
		{"https://:443/", strict, "host"},
		{"https://user:pass@hooks.example.com/", strict, "user name"},
		{"https://user@hooks.example.com/", strict, "user name"},
		{"https://hooks.example.com/#frag", strict, "fragment"},
		{"https://hooks.example.com/#", strict, "fragment"},
		{"https://hooks.example.com:0/", strict, "port"},
		{"https://hooks.example.com:65536/", strict, "port"},
		{"https://hooks..example.com/", strict, "labels"},
		{"https://hooks.example.com:x/", strict, "valid URL"},
		{"https://%zz/", strict, "valid URL"},
		{"https://a b/", strict, "valid URL"},
		{"https://hooks!.example.com/", strict, "must not contain"},
		{"https://127。0。0。1/", strict, "special-purpose"},
		{"https://127．0．0．1/", strict, "special-purpose"},
		{"https://[fe80::1%25eth0]/", Policy{AllowPrivateNetworks: true}, "zone"},
		{"https://1.2.3.04/", strict, "canonical"},
		{"https://1.2.3.0x4/", strict, "canonical"},
		{"https://example.123/", strict, "canonical"},
		{"https://123.example/", strict, ""},
		{"https://127.0.0.1/", Policy{AllowPrivateNetworks: true}, ""},
		{"https://foo.localhost/", Policy{AllowPrivateNetworks: true}, ""},
		{"https://localhost/", strict, "localhost"},
		{"https://notlocalhost/", strict, ""},
		{"https://localhost.example.com/", strict, ""},
	}
	for _, c := range cases {
		err := ValidateURL(c.url, c.p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("ValidateURL(%.60q, %+v) = %v, want nil", c.url, c.p, err)
		case c.want != "" && err == nil:
			t.Errorf("ValidateURL(%.60q, %+v) = nil, want an error about %q", c.url, c.p, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("ValidateURL(%.60q, %+v) = %q, want it to mention %q", c.url, c.p, err, c.want)
		}
	}
}
