package dnspublish

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// tsigKey is a parsed MAILYARD_RFC2136_TSIG value.
type tsigKey struct {
	name      string // canonical: lower-case, fully qualified
	algorithm string // a miekg/dns algorithm constant such as dns.HmacSHA256
	secret    string // base64, as miekg/dns wants it
}

// tsigAlgorithms maps the names operators write (as in BIND's key
// statements and `tsig-keygen -a`) to the algorithm names of RFC 8945.
var tsigAlgorithms = map[string]string{
	"hmac-md5":                 dns.HmacMD5,
	"hmac-md5.sig-alg.reg.int": dns.HmacMD5,
	"hmac-sha1":                dns.HmacSHA1,
	"hmac-sha224":              dns.HmacSHA224,
	"hmac-sha256":              dns.HmacSHA256,
	"hmac-sha384":              dns.HmacSHA384,
	"hmac-sha512":              dns.HmacSHA512,
}

// parseTSIG parses "name:algorithm:base64secret". Base64 has no colon, so
// the secret is everything after the second one.
func parseTSIG(spec string) (tsigKey, error) {
	parts := strings.SplitN(strings.TrimSpace(spec), ":", 3)
	if len(parts) != 3 {
		return tsigKey{}, fmt.Errorf("TSIG key must be name:algorithm:base64secret, such as \"mailyard:hmac-sha256:c2VjcmV0...\"")
	}
	name, algorithm, secret := parts[0], parts[1], parts[2]

	if name == "" {
		return tsigKey{}, fmt.Errorf("TSIG key name is empty")
	}
	if _, ok := dns.IsDomainName(name); !ok {
		return tsigKey{}, fmt.Errorf("TSIG key name %q is not a valid DNS name", name)
	}
	alg, ok := tsigAlgorithms[strings.TrimSuffix(strings.ToLower(algorithm), ".")]
	if !ok {
		return tsigKey{}, fmt.Errorf("TSIG algorithm %q is not supported; use one of hmac-sha256, hmac-sha512, hmac-sha384, hmac-sha224, hmac-sha1, hmac-md5", algorithm)
	}
	raw, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		return tsigKey{}, fmt.Errorf("TSIG secret of key %q is not valid base64", name)
	}
	if len(raw) == 0 {
		return tsigKey{}, fmt.Errorf("TSIG secret of key %q is empty", name)
	}
	return tsigKey{
		name:      dns.CanonicalName(name),
		algorithm: alg,
		// Re-encoded so that the form miekg/dns decodes is canonical.
		secret: base64.StdEncoding.EncodeToString(raw),
	}, nil
}
