// Package dnspublish publishes the DKIM public keys of sending domains as TXT
// records in the DKIM zone (MAILYARD_DKIM_HOST).
//
// Two publishers exist: Embedded stores the records in Mailyard's own
// database, from which `mailyard dns` answers authoritatively, and RFC2136
// sends dynamic updates signed with TSIG to an existing authoritative server
// (BIND, Knot, PowerDNS).
package dnspublish
