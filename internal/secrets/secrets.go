// Package secrets encrypts secrets at rest (DKIM private keys, webhook signing
// secrets) with AES-256-GCM under MAILYARD_ENCRYPTION_KEY.
//
// Every ciphertext is bound to where it belongs through the GCM additional data
// (e.g. "dkim_keys:42"): a ciphertext copied into another row fails to decrypt
// instead of silently handing out another customer's key.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// version is the first byte of every ciphertext, so the scheme can change later
// without guessing what old rows hold.
const version byte = 1

// ErrDecrypt hides why decryption failed: wrong key, wrong row, or tampering.
var ErrDecrypt = errors.New("secret cannot be decrypted with this key for this record")

// Box seals and opens secrets.
type Box struct {
	aead cipher.AEAD
}

// New builds a Box from a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("encryption key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Binding names the record a secret belongs to, e.g. Binding("dkim_keys",
// "abc-1") or Binding("webhooks", 42): a table and a key unique within it.
func Binding(table string, id any) []byte {
	return []byte(fmt.Sprintf("%s:%v", table, id))
}

// Seal encrypts plaintext for the record named by binding.
func (b *Box) Seal(plaintext, binding []byte) ([]byte, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+b.aead.Overhead())
	out = append(out, version)
	out = append(out, nonce...)
	return b.aead.Seal(out, nonce, plaintext, binding), nil
}

// Open decrypts a ciphertext made by Seal with the same key and binding.
func (b *Box) Open(ciphertext, binding []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(ciphertext) < 1+n+b.aead.Overhead() || ciphertext[0] != version {
		return nil, ErrDecrypt
	}
	plain, err := b.aead.Open(nil, ciphertext[1:1+n], ciphertext[1+n:], binding)
	if err != nil {
		return nil, ErrDecrypt
	}
	return plain, nil
}
