package smtpsend

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strconv"

	"github.com/mailyard/mailyard/internal/dnscheck"
)

// mxAddressLimit bounds the addresses tried for one domain, so a domain
// listing many dead exchangers cannot take up the whole attempt.
const mxAddressLimit = 10

// viaRelay opens a session with the relay.
func (s *Sender) viaRelay(ctx context.Context) (*session, outcome) {
	srv := server{host: s.relayHost, addr: s.cfg.Relay, where: "relay " + s.cfg.Relay}
	sess, err := s.open(ctx, srv, true)
	if err != nil {
		return nil, sessionOutcome(ctx, srv, err)
	}
	return sess, outcome{}
}

// viaMX opens a session with the first of domain's mail exchangers that
// gets as far as one (RFC 5321 §5.1). Once a transaction has begun, its
// answers are final for this attempt.
func (s *Sender) viaMX(ctx context.Context, domain string) (*session, outcome) {
	hosts, nullMX, err := s.cfg.Resolver.MX(ctx, domain)
	switch {
	case err != nil:
		return nil, deferred("MX look-up for %s failed: %v", domain, err)
	case nullMX:
		return nil, outcome{status: HardBounce, code: codeNullMX, message: "domain does not accept mail (null MX)"}
	}
	implicit := len(hosts) == 0
	if implicit {
		// No MX: the domain itself is the exchanger (RFC 5321 §5.1).
		hosts = []dnscheck.MXHost{{Host: domain}}
	}
	shuffleEqualPreferences(hosts)

	var last outcome
	tried := 0
	for hi, h := range hosts {
		addrs, err := s.cfg.Resolver.Addrs(ctx, h.Host)
		if err != nil {
			last = deferred("address look-up for %s failed: %v", h.Host, err)
			continue
		}
		if len(addrs) == 0 {
			if implicit {
				return nil, outcome{status: HardBounce, code: codeNoMailHost, message: "domain " + domain + " has no MX or address records"}
			}
			// An MX naming a host without addresses is a broken setup
			// its owner may fix before the retries run out.
			last = deferred("mail exchanger %s of %s has no address records", h.Host, domain)
			continue
		}
		for ai, addr := range addrs {
			if tried == mxAddressLimit {
				return nil, last
			}
			tried++
			srv := server{
				host:  h.Host,
				addr:  netip.AddrPortFrom(addr, uint16(s.cfg.Port)).String(),
				where: h.Host + " [" + addr.String() + "]:" + strconv.Itoa(s.cfg.Port),
				// A later exchanger may have no address; then the wait
				// was shortened for nothing, and the next attempt retries.
				more: tried < mxAddressLimit && (ai < len(addrs)-1 || hi < len(hosts)-1),
			}
			sess, err := s.open(ctx, srv, true)
			var se *stepError
			if errors.As(err, &se) && se.tlsFailed && s.cfg.TLS == TLSOpportunistic {
				// Opportunistic: a server we cannot agree on TLS with
				// still gets the mail, as it would without STARTTLS.
				sess, err = s.open(ctx, srv, false)
			}
			if err != nil {
				last = sessionOutcome(ctx, srv, err)
				continue
			}
			return sess, outcome{}
		}
	}
	return nil, last
}

// shuffleEqualPreferences spreads the load over exchangers of equal
// preference, as RFC 5321 §5.1 asks; hosts is sorted by preference.
func shuffleEqualPreferences(hosts []dnscheck.MXHost) {
	for start := 0; start < len(hosts); {
		end := start + 1
		for end < len(hosts) && hosts[end].Preference == hosts[start].Preference {
			end++
		}
		group := hosts[start:end]
		rand.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
		start = end
	}
}

func same(n int, o outcome) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}
