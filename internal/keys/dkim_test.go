package keys

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
)

func TestNewDKIMKey(t *testing.T) {
	k, err := NewDKIMKey()
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.ParsePKCS8PrivateKey(k.PrivatePKCS8)
	if err != nil {
		t.Fatal(err)
	}
	der, err := base64.StdEncoding.DecodeString(k.PublicBase64)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		t.Fatal(err)
	}
	rsaPub := pub.(*rsa.PublicKey)
	if rsaPub.N.BitLen() != 2048 || !rsaPub.Equal(&priv.(*rsa.PrivateKey).PublicKey) {
		t.Fatalf("public key of %d bits does not match the private key", rsaPub.N.BitLen())
	}
	if rec := DKIMRecord(k.PublicBase64); !strings.HasPrefix(rec, "v=DKIM1; k=rsa; p=MII") {
		t.Fatalf("record %q", rec[:30])
	}
}
