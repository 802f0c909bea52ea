// Package bouncereport parses and classifies the mail that arrives at the
// bounce host: delivery status notifications (RFC 3464), feedback-loop
// complaints (RFC 5965 ARF), auto-replies (RFC 3834), legacy non-standard
// bounces and mail to unsubscribe addresses.
//
// It is pure: Parse takes the raw bytes the inbound SMTP server stored and
// returns the facts it found; applying them (suppressions, events) is the
// caller's job. Parse never fails: what it cannot understand is
// "unrecognized". Because anyone can send mail to the bounce host, every
// input is treated as hostile: the parts, nesting, bytes and blocks it looks
// at are capped so that time and memory stay linear in the input.
//
// docs/inbound.md describes the classification rules and what the caller does
// with each kind.
package bouncereport
