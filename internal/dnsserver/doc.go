// Package dnsserver is the authoritative DNS server of the DKIM zone
// (MAILYARD_DKIM_HOST), run by `mailyard dns`. It answers the TXT records of
// published DKIM public keys, read from a Source, with the SOA and NS
// records a delegated zone needs at its apex.
package dnsserver
