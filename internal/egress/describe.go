package egress

import (
	"errors"
	"net"
	"os"
	"strings"
)

// Describe returns the text of a failed outgoing connection's error for the
// customer who asked for it (a webhook's delivery log, an email's
// deferral): what went wrong, without Mailyard's side of it. Go's network
// errors name the resolver's address (net.DNSError) and both ends of the
// connection (net.OpError); the caller names the host it tried.
func Describe(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "DNS lookup of " + dnsErr.Name + " failed: " + dnsReason(dnsErr)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil && (opErr.Op == "dial" || opErr.Op == "read" || opErr.Op == "write") {
		// "remote error" (a TLS alert) and the like keep their operation:
		// it says which side failed.
		err = opErr.Err
		var sysErr *os.SyscallError // "connect: connection refused"
		if errors.As(err, &sysErr) {
			err = sysErr.Err
		}
	}
	return err.Error()
}

// dnsReason is why a look-up failed. When the resolver could not be
// reached, net.DNSError carries the socket error's text, addresses and all.
func dnsReason(e *net.DNSError) string {
	switch {
	case e.IsNotFound:
		return "no such host"
	case e.IsTimeout:
		return "timed out"
	case strings.Contains(e.Err, ":"):
		return "the resolver could not be reached"
	}
	return e.Err
}
