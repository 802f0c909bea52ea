// Package tracking is opens, clicks and one-click unsubscribe
// (docs/tracking.md): each recipient's own copy of a tracked message
// (Personalize), the public routes its links lead to (Routes), and the
// recording of what the recipient did (Recorder), which the routes and the
// bounce host's unsubscribe address share.
package tracking

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/trackhtml"
	"github.com/mailyard/mailyard/internal/trackmime"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

// Route paths under the tracking base URL.
const (
	OpenPath        = "/t/o/"
	ClickPath       = "/t/c/"
	UnsubscribePath = "/t/u/"
	// pixelSuffix ends an open URL, so that mail clients see an image.
	pixelSuffix = ".gif"
)

// Settings are what is tracked in one email.
type Settings struct {
	Opens, Clicks, Unsubscribe bool
}

// Links mints the tracking links of recipients.
type Links struct {
	Keys *tracktoken.Keys
	// BounceHost is the domain of the mailto: unsubscribe address.
	BounceHost string
}

// Personalized is one recipient's copy of a message.
type Personalized struct {
	// Message is the copy, unsigned.
	Message []byte
	// Links are the email's links (the same for every recipient of the
	// same message): a click token's link is an index into them.
	Links []string
}

// Personalize returns the copy of raw (a complete message, not yet signed)
// for the recipient at position of the email: links of the HTML rewritten
// to click URLs, the open pixel added, {{unsubscribe_url}} replaced, and the
// List-Unsubscribe fields added unless raw has either of its own. base is
// where the links point (MAILYARD_TRACKING_URL, or https://<verified custom
// domain>).
func (l *Links) Personalize(raw []byte, base string, s Settings, emailID uuid.UUID, position int) (Personalized, error) {
	mint := func(t tracktoken.Token) (string, error) {
		t.EmailID, t.Recipient = emailID, position
		return l.Keys.Mint(t)
	}
	var unsubscribeURL, unsubscribeToken string
	if s.Unsubscribe {
		tok, err := mint(tracktoken.Token{Kind: tracktoken.Unsubscribe})
		if err != nil {
			return Personalized{}, err
		}
		unsubscribeToken, unsubscribeURL = tok, base+UnsubscribePath+tok
	}
	var pixel string
	if s.Opens {
		tok, err := mint(tracktoken.Token{Kind: tracktoken.Open})
		if err != nil {
			return Personalized{}, err
		}
		pixel = base + OpenPath + tok + pixelSuffix
	}

	var out Personalized
	var mintErr error
	rewrite := func(body []byte, part trackmime.Part) ([]byte, error) {
		if !part.HTML {
			if unsubscribeURL == "" {
				return body, nil
			}
			return bytes.ReplaceAll(body, []byte(trackhtml.Placeholder), []byte(unsubscribeURL)), nil
		}
		// Several HTML parts (rare) number their links one after another,
		// and share the email's cap on links: an index must fit in a token.
		offset := len(out.Links)
		p := trackhtml.Params{PixelURL: pixel, UnsubscribeURL: unsubscribeURL, LinksBefore: offset, NotUTF8: !part.UTF8()}
		if s.Clicks {
			p.ClickURL = func(i int) string {
				tok, err := mint(tracktoken.Token{Kind: tracktoken.Click, Link: offset + i})
				if err != nil {
					mintErr = err
					return ""
				}
				return base + ClickPath + tok
			}
		}
		res, err := trackhtml.Rewrite(body, p)
		if err != nil {
			return nil, err
		}
		if s.Clicks {
			out.Links = append(out.Links, res.Links...)
		}
		return res.HTML, nil
	}
	msg, err := trackmime.Rewrite(raw, rewrite)
	if err = errors.Join(err, mintErr); err != nil {
		return Personalized{}, fmt.Errorf("tracking: %w", err)
	}
	if s.Unsubscribe {
		own, err := hasListUnsubscribe(msg)
		if err != nil {
			return Personalized{}, fmt.Errorf("tracking: %w", err)
		}
		if !own {
			// RFC 8058: both fields, and the signature covers them
			// (mailmsg.Sign lists them in h= when present).
			mailto := "mailto:" + bouncetag.UnsubscribeAddress(unsubscribeToken, l.BounceHost)
			fields := []string{"List-Unsubscribe: <" + unsubscribeURL + ">, <" + mailto + ">"}
			// One-click is for an https URL only (RFC 8058 §3.1): over
			// http (a tracking URL for development) receivers ignore it.
			if strings.HasPrefix(unsubscribeURL, "https://") {
				fields = append(fields, "List-Unsubscribe-Post: List-Unsubscribe=One-Click")
			}
			msg, err = trackmime.PrependFields(msg, fields...)
			if err != nil {
				return Personalized{}, fmt.Errorf("tracking: %w", err)
			}
		}
	}
	out.Message = msg
	return out, nil
}

// hasListUnsubscribe reports whether the message's header has a
// List-Unsubscribe or a List-Unsubscribe-Post field of its own. Either one
// means the customer handles unsubscribes: adding ours would give the
// message two of a field, and leave the recipient's client to guess which
// counts. The header is read as trackmime reads it, which accepts any
// header it rewrote (raw 8-bit and control bytes in values included).
func hasListUnsubscribe(msg []byte) (bool, error) {
	for _, name := range []string{"List-Unsubscribe", "List-Unsubscribe-Post"} {
		if has, err := trackmime.HasField(msg, name); has || err != nil {
			return has, err
		}
	}
	return false, nil
}

// NewLinks mints links with tokens under a key derived from the encryption
// key.
func NewLinks(encryptionKey []byte, bounceHost string) (*Links, error) {
	keys, err := tracktoken.New(encryptionKey)
	if err != nil {
		return nil, err
	}
	return &Links{Keys: keys, BounceHost: bounceHost}, nil
}
