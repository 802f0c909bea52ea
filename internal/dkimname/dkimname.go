// Package dkimname writes the names of a domain's DKIM records once
// (docs/domains.md): its two selectors <token>-1 and <token>-2, the CNAME the
// customer creates at <selector>._domainkey.<domain>, and its target
// <selector>.<MAILYARD_DKIM_HOST>, where Mailyard publishes the public key.
// Keys keep their selector for life; a rotation swaps which one signs.
package dkimname

import "strconv"

// Selector is the selector of a domain's key at position 1 or 2.
func Selector(token string, position int) string {
	return token + "-" + strconv.Itoa(position)
}

// CustomerName is the name of the customer's CNAME for a selector.
func CustomerName(selector, domain string) string {
	return selector + "._domainkey." + domain
}

// KeyName is where Mailyard publishes a selector's key: the CNAME's target.
func KeyName(selector, dkimHost string) string {
	return selector + "." + dkimHost
}
