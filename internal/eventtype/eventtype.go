// Package eventtype is the event catalogue, defined once: the email events
// the sending pipeline reports and the platform events Mailyard emits itself.
// The API's enums, the CLI's help and the store's checks all come from here.
package eventtype

import (
	"fmt"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Type is one event type of the catalogue.
type Type string

// Email events, reported by the sending pipeline.
const (
	Delivered  Type = "delivered"
	Bounced    Type = "bounced"
	Complained Type = "complained"
	Opened     Type = "opened"
	Clicked    Type = "clicked"
	// Unsubscribed: the recipient used one-click unsubscribe (RFC 8058).
	Unsubscribed Type = "unsubscribed"
)

// Platform events, emitted by Mailyard when a domain or a webhook changes.
const (
	DomainVerified    Type = "domain.verified"
	DomainFailed      Type = "domain.failed"
	DomainDeleted     Type = "domain.deleted"
	DomainDKIMRotated Type = "domain.dkim_rotated"
	WebhookDisabled   Type = "webhook.disabled"
)

var (
	email    = []Type{Delivered, Bounced, Complained, Opened, Clicked, Unsubscribed}
	platform = []Type{DomainVerified, DomainFailed, DomainDeleted, DomainDKIMRotated, WebhookDisabled}
	all      = slices.Concat(email, platform)
)

// All is the whole catalogue, email events first, in documentation order.
func All() []Type { return slices.Clone(all) }

// Email is the email events only (what event ingest accepts).
func Email() []Type { return slices.Clone(email) }

// Platform is the platform events only.
func Platform() []Type { return slices.Clone(platform) }

// Valid reports whether t is in the catalogue.
func (t Type) Valid() bool { return slices.Contains(all, t) }

// IsEmail reports whether t is an email event.
func (t Type) IsEmail() bool { return slices.Contains(email, t) }

// Parse returns the type named s, or an error that lists the catalogue.
func Parse(s string) (Type, error) {
	if t := Type(s); t.Valid() {
		return t, nil
	}
	return "", fmt.Errorf("%q is not an event type; expected one of %s", s, Join(all, ", "))
}

// Join spells a list of types with sep between them (help texts, errors).
func Join(ts []Type, sep string) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, sep)
}

// Strings converts types to plain strings (the store keeps plain words).
func Strings(ts []Type) []string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return s
}

// FromStrings converts stored words back to types.
func FromStrings(s []string) []Type {
	ts := make([]Type, len(s))
	for i, v := range s {
		ts[i] = Type(v)
	}
	return ts
}

// Schema makes every API field of type Type an enum of the whole catalogue
// in the OpenAPI document, and has Huma validate it.
func (Type) Schema(huma.Registry) *huma.Schema { return enumSchema(all) }

// EmailType is a Type restricted to the email events (event ingest, sample
// events): the same words, a narrower enum.
type EmailType Type

// Schema makes the field an enum of the email events only.
func (EmailType) Schema(huma.Registry) *huma.Schema { return enumSchema(email) }

func enumSchema(ts []Type) *huma.Schema {
	enum := make([]any, len(ts))
	for i, t := range ts {
		enum[i] = string(t)
	}
	return &huma.Schema{Type: huma.TypeString, Enum: enum}
}
