// Package bouncetag computes and checks the tagged envelope senders emails
// are sent with (docs/inbound.md): each recipient's own return path,
// bounces+<email_id>.<position>.<tag>@<mailfrom subdomain>, and the email's,
// bounces+<email_id>.<tag>@..., which emails accepted before per-recipient
// return paths were sent with. The tag is 8 lowercase base32 characters of
// an HMAC of the email id (and the recipient's position) under a key
// derived from MAILYARD_ENCRYPTION_KEY, so only Mailyard can name a valid
// return address: a bounce or complaint sent to a made-up or altered
// address is refused at RCPT TO, before any database look-up. A recipient
// sees only its own return path, so a report it forges can name no other
// recipient.
package bouncetag

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strconv"
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

// Tag is the tag of an email id: the tag of its email-wide return path.
func (t *Tagger) Tag(emailID string) string {
	return t.tag(strings.ToLower(emailID))
}

// recipientTag is the tag of a recipient's return path. Its HMAC input,
// "<email id>/<position>", is never an email id, so no recipient's tag is
// the email's or another recipient's.
func (t *Tagger) recipientTag(emailID string, position int) string {
	return t.tag(strings.ToLower(emailID) + "/" + strconv.Itoa(position))
}

func (t *Tagger) tag(message string) string {
	mac := hmac.New(sha256.New, t.key)
	mac.Write([]byte(message))
	return encoding.EncodeToString(mac.Sum(nil))[:tagLength]
}

// Sender is the email-wide envelope sender of an email sent from
// mailFromSubdomain: what the email stores, and what emails accepted before
// per-recipient return paths were sent with.
func (t *Tagger) Sender(emailID, mailFromSubdomain string) string {
	return localPrefix + emailID + "." + t.Tag(emailID) + "@" + mailFromSubdomain
}

// RecipientSender is the envelope sender of the email's recipient at
// position, from the email-wide sender the email stores; ok is false when
// that sender is not tagged (an email from before tags keeps its one
// untagged sender).
func (t *Tagger) RecipientSender(emailSender string, position int) (sender string, ok bool) {
	rp, ok := t.Parse(emailSender)
	if !ok || !rp.Tagged || rp.Recipient != WholeEmail || position < 0 || len(strconv.Itoa(position)) > maxPositionDigits {
		return "", false
	}
	_, domain, _ := strings.Cut(emailSender, "@")
	return localPrefix + rp.EmailID + "." + strconv.Itoa(position) + "." + t.recipientTag(rp.EmailID, position) + "@" + domain, true
}

// HandedOut reports whether address, which Parse read as rp, is a return
// path the email was sent with, given the envelope sender it stores
// (emailSender): that sender itself, or a recipient's path made from it.
// That it parses is not enough: the untagged form can be made up by anyone,
// so it counts only for an email that was sent with it (from before tags).
func (t *Tagger) HandedOut(emailSender, address string, rp ReturnPath) bool {
	want := emailSender
	if rp.Recipient != WholeEmail {
		var ok bool
		if want, ok = t.RecipientSender(emailSender, rp.Recipient); !ok {
			return false
		}
	}
	return strings.EqualFold(strings.TrimSpace(want), strings.TrimSpace(address))
}

// Untagged is the envelope sender emails had before tags; those emails keep
// it.
func Untagged(emailID, mailFromSubdomain string) string {
	return localPrefix + emailID + "@" + mailFromSubdomain
}

// WholeEmail is ReturnPath.Recipient for an email-wide return path.
const WholeEmail = -1

// ReturnPath is what an envelope sender's local part names.
type ReturnPath struct {
	EmailID string
	// Recipient is the position of the recipient whose own return path it
	// is, or WholeEmail.
	Recipient int
	// Tagged is false for the untagged form of emails sent before tags:
	// only a candidate, which the caller accepts only for an email stored
	// with that sender.
	Tagged bool
}

// maxPositionDigits bounds the position in a recipient's return path: an
// email has at most 50 recipients, and the longest local part,
// bounces+<36>.<3>.<8>, stays within RFC 5321's 64 octets.
const maxPositionDigits = 3

// Parse reads an address as a return path, in any of its forms, and reports
// whether it is one: a tagged local part whose tag is wrong is none. The
// local part is compared case-insensitively, as reporting servers may
// change its case.
func (t *Tagger) Parse(address string) (ReturnPath, bool) {
	local, _, found := strings.Cut(address, "@")
	if !found || len(local) <= len(localPrefix) || !strings.EqualFold(local[:len(localPrefix)], localPrefix) {
		return ReturnPath{}, false
	}
	parts := strings.Split(strings.ToLower(local[len(localPrefix):]), ".")
	id := parts[0]
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return ReturnPath{}, false
	}
	switch len(parts) {
	case 1:
		return ReturnPath{EmailID: id, Recipient: WholeEmail}, true
	case 2:
		if !hmac.Equal([]byte(parts[1]), []byte(t.Tag(id))) {
			return ReturnPath{}, false
		}
		return ReturnPath{EmailID: id, Recipient: WholeEmail, Tagged: true}, true
	case 3:
		position, err := strconv.Atoi(parts[1])
		// The position as RecipientSender writes it, and no other
		// spelling of it ("+1", "01").
		if err != nil || len(parts[1]) > maxPositionDigits || position < 0 || strconv.Itoa(position) != parts[1] ||
			!hmac.Equal([]byte(parts[2]), []byte(t.recipientTag(id, position))) {
			return ReturnPath{}, false
		}
		return ReturnPath{EmailID: id, Recipient: position, Tagged: true}, true
	}
	return ReturnPath{}, false
}
