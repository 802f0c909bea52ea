// Package mailmsg is the pure core of sending an email: it validates a send
// request (POST /api/v1/emails) against the sender's domain, renders the
// validated message as RFC 5322 bytes, and DKIM-signs those bytes. It does no
// I/O: the API, the store and the delivery workflow build on it.
//
// Everything a header receives from a customer passes through this package's
// checks, so that no input can add or change a header (header injection), and
// the rendered message is 7-bit ASCII with CRLF line endings that any SMTP
// server accepts without SMTPUTF8 or 8BITMIME. docs/sending.md describes what
// the receiver sees and what the DKIM signature covers.
package mailmsg
