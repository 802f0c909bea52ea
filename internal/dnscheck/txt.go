package dnscheck

import (
	"context"
	"strings"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/dnspublish"
)

// TXT returns the TXT values at name as a mail receiver would find them,
// following CNAMEs: through the resolver's answer chain, or, when a server
// answers with the alias alone (an authoritative server that does not serve the
// target), by asking again for the target.
func (c *Checker) TXT(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	for range maxCNAMEChain {
		rrs, err := c.lookup(ctx, name, dns.TypeTXT)
		if err != nil {
			return nil, err
		}
		if len(rrs) > 0 {
			values := make([]string, len(rrs))
			for i, rr := range rrs {
				values[i] = dnspublish.TXTValue(rr.(*dns.TXT).Txt)
			}
			return values, nil
		}
		aliases, err := c.lookup(ctx, name, dns.TypeCNAME)
		if err != nil || len(aliases) == 0 {
			return nil, err
		}
		name = strings.TrimSuffix(aliases[0].(*dns.CNAME).Target, ".")
	}
	return nil, nil
}
