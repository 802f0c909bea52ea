package egress

import "net/netip"

// blockedIPv4 lists the IPv4 ranges that are not globally reachable: the
// IANA IPv4 Special-Purpose Address Registry plus multicast. A webhook must
// never be a way to reach the operator's own network, a cloud metadata
// service or the host itself.
var blockedIPv4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network" (RFC 791); 0.0.0.0 reaches the local host
	netip.MustParsePrefix("10.0.0.0/8"),         // private (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),      // shared address space, CGNAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback (RFC 1122)
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, incl. 169.254.169.254 metadata (RFC 3927)
	netip.MustParsePrefix("172.16.0.0/12"),      // private (RFC 1918)
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments, DS-Lite, NAT64 discovery (RFC 6890)
	netip.MustParsePrefix("192.0.2.0/24"),       // documentation TEST-NET-1 (RFC 5737)
	netip.MustParsePrefix("192.88.99.0/24"),     // deprecated 6to4 relay anycast (RFC 7526)
	netip.MustParsePrefix("192.168.0.0/16"),     // private (RFC 1918)
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"),    // documentation TEST-NET-2 (RFC 5737)
	netip.MustParsePrefix("203.0.113.0/24"),     // documentation TEST-NET-3 (RFC 5737)
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast (RFC 5771)
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved (RFC 1112)
	netip.MustParsePrefix("255.255.255.255/32"), // limited broadcast (RFC 919)
}

// globalUnicastIPv6 is the only IPv6 block IANA allocates for global
// unicast. Everything outside it is either special-purpose (loopback,
// unspecified, IPv4-compatible, NAT64, discard, SRv6, unique-local,
// link-local, deprecated site-local, multicast) or unallocated, and none of
// it is a legitimate webhook receiver. Allowing only this block keeps the
// check closed against ranges a deny-list would forget.
var globalUnicastIPv6 = netip.MustParsePrefix("2000::/3")

// blockedIPv6 lists the special-purpose ranges inside 2000::/3 (IANA IPv6
// Special-Purpose Address Registry).
var blockedIPv6 = []netip.Prefix{
	// IETF protocol assignments (RFC 2928), incl. Teredo 2001::/32 (RFC 4380)
	// which embeds an arbitrary IPv4 address, benchmarking 2001:2::/48 and
	// ORCHID. A few anycast services inside are global, but none of them is
	// a webhook receiver, so the whole block is refused.
	netip.MustParsePrefix("2001::/23"),
	netip.MustParsePrefix("2001:db8::/32"), // documentation (RFC 3849)
	netip.MustParsePrefix("2002::/16"),     // 6to4 (RFC 3056): embeds an arbitrary IPv4 address
	netip.MustParsePrefix("3fff::/20"),     // documentation (RFC 9637)
}

// IsBlocked reports whether addr is in a special-purpose range that webhook
// deliveries must not reach. IPv4-mapped IPv6 addresses are judged by the
// IPv4 address they carry, because that is where the kernel connects. The
// translation forms that embed an IPv4 address (NAT64 64:ff9b::/96 and
// 64:ff9b:1::/48, 6to4, Teredo) are refused as whole ranges, which also
// covers every loopback or private address they could carry. The invalid
// zero Addr is blocked so that a parsing slip fails closed.
func IsBlocked(addr netip.Addr) bool {
	if !addr.IsValid() {
		return true
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is4() {
		return inAny(addr, blockedIPv4)
	}
	if !globalUnicastIPv6.Contains(addr) {
		return true
	}
	return inAny(addr, blockedIPv6)
}

func inAny(addr netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
