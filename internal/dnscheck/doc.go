// Package dnscheck looks up the DNS records that customers add for a sending
// domain (the two DKIM CNAMEs, the SPF TXT record and the bounce MX record)
// and tells for each whether it is in place.
//
// A look-up that fails (time-out, SERVFAIL, REFUSED, network error) is
// reported as such and never as a mismatch: a broken resolver must not tell
// a customer that their records are wrong.
package dnscheck
