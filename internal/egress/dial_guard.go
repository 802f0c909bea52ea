package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrBlockedAddress is wrapped by the error of a dial that was refused
// because the destination is in a special-purpose range.
var ErrBlockedAddress = errors.New("destination address is in a special-purpose range")

// GuardDial is a net.Dialer Control function. It runs after name
// resolution and before connect(2), once for every address the dialer
// tries, so a name that resolves (or re-resolves, as in DNS rebinding) to
// a blocked address cannot slip through between validation and connection.
func GuardDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: the dialer always hands over a numeric address, so
		// anything else is unexpected.
		return fmt.Errorf("%w: cannot parse %q", ErrBlockedAddress, address)
	}
	if IsBlocked(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, ap.Addr().WithZone("").Unmap())
	}
	return nil
}
