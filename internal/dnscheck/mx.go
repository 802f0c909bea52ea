package dnscheck

import (
	"context"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// The look-ups below serve mail delivery (internal/smtpsend): they go through
// the same resolver as the record checks, so the operator's resolver setting
// holds for delivery too, and tests can answer from a DNS zone of their own.

// MXHost is one mail exchanger of a domain.
type MXHost struct {
	// Host is the exchanger's name, without the trailing dot.
	Host       string
	Preference uint16
}

// MX returns the mail exchangers of domain, lowest preference first. No
// records at all (NXDOMAIN or no MX) gives no hosts and no error: the caller
// then falls back to the domain's own addresses (RFC 5321 §5.1). nullMX
// reports a null MX (RFC 7505), a domain that declares it accepts no mail:
// its only record has the root "." as exchanger. A "." among other records
// is skipped, as it names no host to deliver to. The look-up is bounded by
// the Checker's timeout.
func (c *Checker) MX(ctx context.Context, domain string) (hosts []MXHost, nullMX bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	rrs, err := c.lookup(ctx, domain, dns.TypeMX)
	if err != nil {
		return nil, false, err
	}
	for _, rr := range rrs {
		mx := rr.(*dns.MX)
		host := strings.TrimSuffix(mx.Mx, ".")
		if host == "" {
			continue
		}
		hosts = append(hosts, MXHost{Host: host, Preference: mx.Preference})
	}
	if len(rrs) > 0 && len(hosts) == 0 {
		// RFC 7505 asks for preference 0 and a single record; any set made
		// of "." alone means the same thing and can only be answered so.
		return nil, true, nil
	}
	sort.SliceStable(hosts, func(i, j int) bool { return hosts[i].Preference < hosts[j].Preference })
	return hosts, false, nil
}

// Addrs returns the IPv4 (A) and then IPv6 (AAAA) addresses of host. No
// records gives none and no error. When one of the two look-ups fails and
// the other finds addresses, those are returned: a broken AAAA answer must
// not stop delivery over IPv4. The look-ups are bounded by the Checker's
// timeout.
func (c *Checker) Addrs(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var (
		wg         sync.WaitGroup
		v4, v6     []dns.RR
		err4, err6 error
	)
	wg.Go(func() { v4, err4 = c.lookup(ctx, host, dns.TypeA) })
	wg.Go(func() { v6, err6 = c.lookup(ctx, host, dns.TypeAAAA) })
	wg.Wait()

	var addrs []netip.Addr
	for _, rr := range v4 {
		if a, ok := netip.AddrFromSlice(rr.(*dns.A).A.To4()); ok {
			addrs = append(addrs, a)
		}
	}
	for _, rr := range v6 {
		if a, ok := netip.AddrFromSlice(rr.(*dns.AAAA).AAAA.To16()); ok {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 && (err4 != nil || err6 != nil) {
		return nil, errors.Join(err4, err6)
	}
	return addrs, nil
}
