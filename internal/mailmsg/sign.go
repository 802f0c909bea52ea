package mailmsg

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/textproto"

	"github.com/emersion/go-msgauth/dkim"
)

// signedHeaders are the header fields every signature covers (its h= tag),
// in this order, after From: the ones that say who sent what to whom, when,
// and how to read the body. Each is listed once more than the message has
// it (oversigned, RFC 6376 §8.15): an instance listed beyond those present
// signs their absence (§5.4.2), so a field added later (a second Reply-To
// or Subject above the signed one, which many readers would show) breaks
// the signature.
var signedHeaders = []string{"To", "Cc", "Subject", "Date", "Message-ID", "Reply-To", "MIME-Version", "Content-Type"}

// signedWhenPresent are the customer headers that are signed when the
// message has them: RFC 8058 §4 requires List-Unsubscribe and
// List-Unsubscribe-Post to be covered for one-click unsubscribe, and the
// threading headers place the message in a conversation. Present ones are
// oversigned like signedHeaders; absent ones are not listed, so that a
// mailing list may still add its own List-* fields.
var signedWhenPresent = []string{"List-Unsubscribe", "List-Unsubscribe-Post", "In-Reply-To", "References"}

// Sign returns raw with a DKIM-Signature field prepended (RFC 6376):
// rsa-sha256, relaxed/relaxed canonicalisation, d=domain, s=selector. From
// and the rest of signedHeaders are listed once more than the message has
// them (oversigned), so that none can be added without breaking the
// signature. key must be an RSA key.
func Sign(raw []byte, domain, selector string, key crypto.Signer) ([]byte, error) {
	if key == nil {
		return nil, errors.New("mailmsg: no DKIM key")
	}
	if _, ok := key.Public().(*rsa.PublicKey); !ok {
		return nil, fmt.Errorf("mailmsg: the DKIM key is a %T; an RSA key is required", key.Public())
	}
	header, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw))).ReadMIMEHeader()
	if err != nil {
		return nil, fmt.Errorf("mailmsg: reading the message header to sign it: %w", err)
	}
	froms := len(header.Values("From"))
	if froms == 0 {
		return nil, errors.New("mailmsg: the message has no From header, which DKIM must sign")
	}
	var keys []string
	oversign := func(name string, present int) {
		for range present + 1 {
			keys = append(keys, name)
		}
	}
	oversign("From", froms)
	for _, name := range signedHeaders {
		oversign(name, len(header.Values(name)))
	}
	for _, name := range signedWhenPresent {
		if n := len(header.Values(name)); n > 0 {
			oversign(name, n)
		}
	}

	var out bytes.Buffer
	err = dkim.Sign(&out, bytes.NewReader(raw), &dkim.SignOptions{
		Domain:                 domain,
		Selector:               selector,
		Signer:                 key,
		Hash:                   crypto.SHA256,
		HeaderCanonicalization: dkim.CanonicalizationRelaxed,
		BodyCanonicalization:   dkim.CanonicalizationRelaxed,
		HeaderKeys:             keys,
	})
	if err != nil {
		return nil, fmt.Errorf("mailmsg: DKIM signing: %w", err)
	}
	return out.Bytes(), nil
}
