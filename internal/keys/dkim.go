package keys

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"strings"
)

// DKIMKeyBits is the RSA size of DKIM keys: 2048 bits is what receivers expect
// today and still fits a TXT record (as several character-strings).
const DKIMKeyBits = 2048

// DKIMKey is a fresh key pair: the private key as PKCS #8 DER, to be encrypted at
// once, and the public key as base64 SubjectPublicKeyInfo, the `p=` of the record.
type DKIMKey struct {
	PrivatePKCS8 []byte
	PublicBase64 string
}

// NewDKIMKey generates an RSA-2048 key pair.
func NewDKIMKey() (DKIMKey, error) {
	priv, err := rsa.GenerateKey(rand.Reader, DKIMKeyBits)
	if err != nil {
		return DKIMKey{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return DKIMKey{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return DKIMKey{}, err
	}
	return DKIMKey{PrivatePKCS8: der, PublicBase64: base64.StdEncoding.EncodeToString(pub)}, nil
}

// DKIMRecord is the TXT value published for a public key.
func DKIMRecord(publicBase64 string) string {
	return "v=DKIM1; k=rsa; p=" + publicBase64
}

// DKIMRecordPublicKey returns the p= tag of a DKIM key record (RFC 6376 §3.6.1),
// with the whitespace a record may fold into it removed, and false when value
// is not a DKIM key record with a key.
func DKIMRecordPublicKey(value string) (string, bool) {
	for _, tag := range strings.Split(value, ";") {
		name, v, ok := strings.Cut(tag, "=")
		if !ok || strings.TrimSpace(name) != "p" {
			continue
		}
		p := strings.Join(strings.Fields(v), "")
		return p, p != ""
	}
	return "", false
}
