// Package tracktoken mints and checks the tokens of the tracking routes
// (docs/tracking.md): opaque, unguessable, unforgeable names of an email, one
// of its recipients and, for a click, one of its links.
//
// A token is the lower-case base32 (RFC 4648, no padding) of
//
//	kind (1 byte) | AES(email id) (16) | recipient position (2) [| link (2)] | MAC (12)
//
// where MAC is HMAC-SHA256 over everything before it, truncated to 96 bits,
// and the email id is one AES-256 block (a permutation: no two ids share a
// ciphertext), both under keys derived from MAILYARD_ENCRYPTION_KEY. It holds
// no address and shows no id (the API's email ids are not in links), and one
// that is not exactly as minted fails Parse: a bad token changes nothing.
// Base32 because the same token is the local part of the mailto: unsubscribe
// address, and mail systems may change the case of a local part; at most 53
// characters, so "unsubscribe+<token>" fits the 64 a local part may have.
package tracktoken

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Kind says which route a token is for; a token of one kind is refused by
// the others.
type Kind byte

// The kinds of token.
const (
	Open        Kind = 'o'
	Click       Kind = 'c'
	Unsubscribe Kind = 'u'
)

// macSize is the MAC's length: 96 bits leave a forger one chance in 2^96
// per request.
const macSize = 12

// MaxLen is the longest token (a click's).
var MaxLen = encoding.EncodedLen(1 + 16 + 2 + 2 + macSize)

var encoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ErrInvalid is every reason a token is refused: malformed, forged, of
// another kind, or minted under another key.
var ErrInvalid = errors.New("invalid tracking token")

// Token is what a token names.
type Token struct {
	Kind    Kind
	EmailID uuid.UUID
	// Recipient is the recipient's position in the email.
	Recipient int
	// Link is the link's position in the email (clicks only).
	Link int
}

// Keys mints and parses tokens.
type Keys struct {
	key   []byte
	block cipher.Block
}

// New derives the token key from the encryption key (32 bytes), so tokens
// need no secret of their own and a token key says nothing of the other.
func New(encryptionKey []byte) (*Keys, error) {
	if len(encryptionKey) != 32 {
		return nil, fmt.Errorf("tracktoken: encryption key must be 32 bytes, got %d", len(encryptionKey))
	}
	key, err := hkdf.Key(sha256.New, encryptionKey, nil, "mailyard tracking tokens v1", 32)
	if err != nil {
		return nil, err
	}
	idKey, err := hkdf.Key(sha256.New, encryptionKey, nil, "mailyard tracking token ids v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(idKey)
	if err != nil {
		return nil, err
	}
	return &Keys{key: key, block: block}, nil
}

// Mint returns the token of t. Recipient and Link must fit in 16 bits (an
// email has at most 50 recipients, and trackhtml caps the links).
func (k *Keys) Mint(t Token) (string, error) {
	if t.Recipient < 0 || t.Recipient > 0xffff || t.Link < 0 || t.Link > 0xffff {
		return "", fmt.Errorf("tracktoken: recipient %d or link %d out of range", t.Recipient, t.Link)
	}
	if t.Kind != Open && t.Kind != Click && t.Kind != Unsubscribe {
		return "", fmt.Errorf("tracktoken: unknown kind %q", t.Kind)
	}
	b := make([]byte, 0, 1+16+4+macSize)
	b = append(b, byte(t.Kind))
	var id [16]byte
	k.block.Encrypt(id[:], t.EmailID[:])
	b = append(b, id[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(t.Recipient))
	if t.Kind == Click {
		b = binary.BigEndian.AppendUint16(b, uint16(t.Link))
	}
	b = append(b, k.mac(b)...)
	return lower(encoding.EncodeToString(b)), nil
}

// MustMint is Mint for values known to be in range.
func (k *Keys) MustMint(t Token) string {
	s, err := k.Mint(t)
	if err != nil {
		panic(err)
	}
	return s
}

// Parse checks s and returns what it names, if it is a token of kind
// minted with these keys. Only lower case is accepted: the routes see the
// token exactly as minted (the mailto: listener lower-cases the local part
// first).
func (k *Keys) Parse(kind Kind, s string) (Token, error) {
	if len(s) > MaxLen || s != lower(s) {
		return Token{}, ErrInvalid
	}
	b, err := encoding.DecodeString(upper(s))
	if err != nil {
		return Token{}, ErrInvalid
	}
	want := 1 + 16 + 2 + macSize
	if kind == Click {
		want += 2
	}
	// The encoding is canonical only if re-encoding gives s back (base32
	// ignores the low bits of the last character otherwise).
	if len(b) != want || Kind(b[0]) != kind || lower(encoding.EncodeToString(b)) != s {
		return Token{}, ErrInvalid
	}
	body, mac := b[:len(b)-macSize], b[len(b)-macSize:]
	if !hmac.Equal(mac, k.mac(body)) {
		return Token{}, ErrInvalid
	}
	t := Token{Kind: kind, Recipient: int(binary.BigEndian.Uint16(body[17:19]))}
	k.block.Decrypt(t.EmailID[:], body[1:17])
	if kind == Click {
		t.Link = int(binary.BigEndian.Uint16(body[19:21]))
	}
	return t, nil
}

func (k *Keys) mac(b []byte) []byte {
	h := hmac.New(sha256.New, k.key)
	h.Write(b)
	return h.Sum(nil)[:macSize]
}

// lower and upper map the base32 alphabet's letters only, so that a token
// with any other byte never becomes a valid one by case mapping.
func lower(s string) string { return mapASCII(s, 'A', 'Z', 'a'-'A') }
func upper(s string) string { return mapASCII(s, 'a', 'z', 'A'-'a') }

func mapASCII(s string, from, to byte, delta int) string {
	b := []byte(s)
	for i, c := range b {
		if c >= from && c <= to {
			b[i] = byte(int(c) + delta)
		}
	}
	return string(b)
}
