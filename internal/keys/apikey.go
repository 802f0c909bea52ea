// Package keys makes and checks Mailyard's API keys and DKIM key pairs.
package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"hash/crc32"
	"math/big"
	"strings"
)

// API key layout: "myk_" + 32 random base62 characters + 6 base62 characters of the
// CRC32 of everything before them. The prefix makes a leaked key recognisable to
// secret scanners; the checksum rejects a mistyped key without a database look-up.
const (
	KeyPrefix      = "myk_"
	randomLength   = 32
	checksumLength = 6 // 62^6 > 2^32
	KeyLength      = len(KeyPrefix) + randomLength + checksumLength
	// DisplayLength is how much of a key is kept in clear to tell keys apart.
	DisplayLength = len(KeyPrefix) + 8
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ErrMalformedKey means the string cannot be a Mailyard key.
var ErrMalformedKey = errors.New("malformed API key")

// NewAPIKey returns a fresh key.
func NewAPIKey() (string, error) {
	random, err := RandomString(randomLength, base62)
	if err != nil {
		return "", err
	}
	body := KeyPrefix + random
	return body + checksum(body), nil
}

// CheckAPIKey validates the format and checksum of a presented key.
func CheckAPIKey(key string) error {
	if len(key) != KeyLength || !strings.HasPrefix(key, KeyPrefix) {
		return ErrMalformedKey
	}
	for i := len(KeyPrefix); i < len(key); i++ {
		if strings.IndexByte(base62, key[i]) < 0 {
			return ErrMalformedKey
		}
	}
	body := key[:len(key)-checksumLength]
	if checksum(body) != key[len(key)-checksumLength:] {
		return ErrMalformedKey
	}
	return nil
}

// Digest is what the database stores instead of the key.
func Digest(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

func checksum(body string) string {
	n := crc32.ChecksumIEEE([]byte(body))
	out := make([]byte, checksumLength)
	for i := checksumLength - 1; i >= 0; i-- {
		out[i] = base62[n%62]
		n /= 62
	}
	return string(out)
}

// RandomString draws n characters uniformly from alphabet with crypto/rand.
func RandomString(n int, alphabet string) (string, error) {
	max := big.NewInt(int64(len(alphabet)))
	out := make([]byte, n)
	for i := range out {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		out[i] = alphabet[v.Int64()]
	}
	return string(out), nil
}

// LowerAlnum is the alphabet of DKIM tokens and usernames.
const LowerAlnum = "abcdefghijklmnopqrstuvwxyz0123456789"
