// Package bouncetag computes and checks the tagged envelope sender every
// email is sent with, bounces+<email_id>.<tag>@<mailfrom subdomain>
// (docs/inbound.md). The tag is 8 lowercase base32 characters of an HMAC of
// the email id under a key derived from MAILYARD_ENCRYPTION_KEY, so only
// Mailyard can name a valid return address: a bounce or complaint sent to a
// made-up or altered address is refused at RCPT TO, before any database
// look-up.
package bouncetag

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Local parts of the bounce host's own addresses (docs/inbound.md):
// fbl@<bounce host> receives feedback-loop reports, and
// unsubscribe+<token>@<bounce host> the mailto: form of one-click
// unsubscribe.
const (
	FeedbackLocal     = "fbl"
	UnsubscribePrefix = "unsubscribe+"
)

// UnsubscribeAddress is the mailto: address of one-click unsubscribe for
// token at the bounce host.
func UnsubscribeAddress(token, bounceHost string) string {
	return UnsubscribePrefix + token + "@" + bounceHost
}

// UnsubscribeToken returns the token of an unsubscribe+<token> address (or
// local part), in lower case: mail systems may change the case of a local
// part, and tokens are minted in lower case. ok is false for any other
// address.
func UnsubscribeToken(addr string) (token string, ok bool) {
	local, _, _ := strings.Cut(addr, "@")
	if len(local) <= len(UnsubscribePrefix) || !strings.EqualFold(local[:len(UnsubscribePrefix)], UnsubscribePrefix) {
		return "", false
	}
	return strings.ToLower(local[len(UnsubscribePrefix):]), true
}

// localPrefix starts the local part of every envelope sender.
const localPrefix = "bounces+"

// tagLength is the tag's length in characters: 40 bits of the HMAC, enough
// that guessing one is hopeless within any connection or rate limit.
const tagLength = 8

// encoding is base32 in lower case, without padding (a-z, 2-7).
var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Tagger computes and checks tags.
type Tagger struct {
	key []byte
}

// New derives the tag key from the encryption key. The derivation has a
// purpose label of its own, so the tag key says nothing about the key that
// encrypts secrets.
func New(encryptionKey []byte) (*Tagger, error) {
	if len(encryptionKey) == 0 {
		return nil, fmt.Errorf("bounce tags need the encryption key")
	}
	key, err := hkdf.Key(sha256.New, encryptionKey, nil, "mailyard envelope-sender tag v1", sha256.Size)
	if err != nil {
		return nil, err
	}
	return &Tagger{key: key}, nil
}

// Tag is the tag of an email id.
func (t *Tagger) Tag(emailID string) string {
	mac := hmac.New(sha256.New, t.key)
	mac.Write([]byte(strings.ToLower(emailID)))
	return encoding.EncodeToString(mac.Sum(nil))[:tagLength]
}

// Sender is the envelope sender of an email sent from mailFromSubdomain.
func (t *Tagger) Sender(emailID, mailFromSubdomain string) string {
	return localPrefix + emailID + "." + t.Tag(emailID) + "@" + mailFromSubdomain
}

// Untagged is the envelope sender emails had before tags; those emails keep
// it.
func Untagged(emailID, mailFromSubdomain string) string {
	return localPrefix + emailID + "@" + mailFromSubdomain
}

// EmailID returns the email id an address's local part names, in either form,
// and whether the local part has the form at all. A tagged local part whose
// tag is wrong names nothing. The local part is compared case-insensitively,
// as reporting servers may change its case. An untagged local part is only a
// candidate: the caller accepts it only for an email stored with the
// untagged sender.
func (t *Tagger) EmailID(address string) (id string, ok bool) {
	local, _, found := strings.Cut(address, "@")
	if !found || len(local) <= len(localPrefix) || !strings.EqualFold(local[:len(localPrefix)], localPrefix) {
		return "", false
	}
	rest := strings.ToLower(local[len(localPrefix):])
	id, tag, tagged := strings.Cut(rest, ".")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return "", false
	}
	if tagged && !hmac.Equal([]byte(tag), []byte(t.Tag(id))) {
		return "", false
	}
	return id, true
}
