package secrets

import (
	"bytes"
	"errors"
	"testing"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestSealOpenRoundTrip(t *testing.T) {
	box, err := New(key(1))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("-----BEGIN PRIVATE KEY-----...")
	ct, err := box.Seal(secret, Binding("dkim_keys", 7))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ct, secret) {
		t.Fatal("ciphertext contains the plaintext")
	}
	got, err := box.Open(ct, Binding("dkim_keys", 7))
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q %v", got, err)
	}
	ct2, _ := box.Seal(secret, Binding("dkim_keys", 7))
	if bytes.Equal(ct, ct2) {
		t.Fatal("two seals of the same secret are equal: nonce reused")
	}
}

func TestOpenRefusesWrongRowKeyOrTampering(t *testing.T) {
	box, _ := New(key(1))
	other, _ := New(key(2))
	ct, _ := box.Seal([]byte("s3cret"), Binding("webhooks", 1))
	tampered := append([]byte(nil), ct...)
	tampered[len(tampered)-1] ^= 1
	for name, try := range map[string]func() ([]byte, error){
		"copied to another row":   func() ([]byte, error) { return box.Open(ct, Binding("webhooks", 2)) },
		"copied to another table": func() ([]byte, error) { return box.Open(ct, Binding("dkim_keys", 1)) },
		"another key":             func() ([]byte, error) { return other.Open(ct, Binding("webhooks", 1)) },
		"tampered":                func() ([]byte, error) { return box.Open(tampered, Binding("webhooks", 1)) },
		"truncated":               func() ([]byte, error) { return box.Open(ct[:10], Binding("webhooks", 1)) },
		"empty":                   func() ([]byte, error) { return box.Open(nil, Binding("webhooks", 1)) },
	} {
		if _, err := try(); !errors.Is(err, ErrDecrypt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestNewRejectsShortKeys(t *testing.T) {
	if _, err := New(make([]byte, 16)); err == nil {
		t.Fatal("16-byte key accepted")
	}
}
