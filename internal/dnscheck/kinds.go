package dnscheck

import (
	"context"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/dnspublish"
)

func (c *Checker) checkCNAME(ctx context.Context, e Expectation) Result {
	// Asking for the CNAME itself: a resolver would otherwise follow it and
	// answer with the records of the target.
	rrs, err := c.lookup(ctx, e.Name, dns.TypeCNAME)
	if err != nil {
		return Result{Status: StatusLookupFailed, Err: err}
	}
	var observed []string
	found := false
	for _, rr := range rrs {
		target := rr.(*dns.CNAME).Target
		observed = append(observed, strings.TrimSuffix(target, "."))
		found = found || sameName(target, e.Want)
	}
	return result(observed, found)
}

func (c *Checker) checkSPF(ctx context.Context, e Expectation) Result {
	rrs, err := c.lookup(ctx, e.Name, dns.TypeTXT)
	if err != nil {
		return Result{Status: StatusLookupFailed, Err: err}
	}
	var observed []string
	spfRecords, found := 0, false
	for _, rr := range rrs {
		value := dnspublish.TXTValue(rr.(*dns.TXT).Txt)
		observed = append(observed, value)
		if terms, ok := spfTerms(value); ok {
			spfRecords++
			found = found || includes(terms, e.Want)
		}
	}
	// Other TXT records (site verifications and the like) are shown but do
	// not make a mismatch: the SPF record is still missing.
	if spfRecords == 0 {
		return Result{Status: StatusPending, Observed: observed}
	}
	// Two SPF records are a permanent error (RFC 7208 §4.5): receivers
	// then fail SPF whatever either says, so ours among them is no match.
	return result(observed, found && spfRecords == 1)
}

func (c *Checker) checkMX(ctx context.Context, e Expectation) Result {
	rrs, err := c.lookup(ctx, e.Name, dns.TypeMX)
	if err != nil {
		return Result{Status: StatusLookupFailed, Err: err}
	}
	var observed []string
	// Senders try the most preferred exchangers (the lowest preference)
	// first and the others only when those fail: bounces come back to the
	// bounce host only if every most preferred MX is it. One of them
	// elsewhere (a provider's MX copied to the name) takes the bounces.
	best := -1
	for _, rr := range rrs {
		mx := rr.(*dns.MX)
		host := strings.TrimSuffix(mx.Mx, ".")
		if host == "" {
			host = "." // a null MX (RFC 7505)
		}
		observed = append(observed, strconv.Itoa(int(mx.Preference))+" "+host)
		if best < 0 || int(mx.Preference) < best {
			best = int(mx.Preference)
		}
	}
	found := best >= 0
	for _, rr := range rrs {
		if mx := rr.(*dns.MX); int(mx.Preference) == best && !sameName(mx.Mx, e.Want) {
			found = false
		}
	}
	return result(observed, found)
}

// result is verified when the wanted value was found, pending when nothing
// was, and mismatch otherwise.
func result(observed []string, found bool) Result {
	switch {
	case found:
		return Result{Status: StatusVerified, Observed: observed}
	case len(observed) == 0:
		return Result{Status: StatusPending}
	default:
		return Result{Status: StatusMismatch, Observed: observed}
	}
}

// spfTerms returns the terms of an SPF record (RFC 7208 §4.5: the record
// starts with "v=spf1" followed by a space or nothing, in any case), or
// false if value is not one.
func spfTerms(value string) ([]string, bool) {
	const version = "v=spf1"
	if len(value) < len(version) || !strings.EqualFold(value[:len(version)], version) ||
		len(value) > len(version) && value[len(version)] != ' ' {
		// "v=spf1\tinclude:x" is no SPF record to a receiver, which
		// would find none; it must not verify here either.
		return nil, false
	}
	// Terms are separated by spaces alone: a tab stays inside its term,
	// which then matches nothing, as a receiver reads it.
	return strings.FieldsFunc(value[len(version):], func(r rune) bool { return r == ' ' }), true
}

// includes reports whether terms have "include:<host>" with the pass
// qualifier ("+" or none) before any "all"; mechanism names are
// case-insensitive (RFC 7208 §4.6.1). "~include:" or "-include:" would not
// let our mail pass, and mechanisms after "all" are never evaluated
// (RFC 7208 §5.1): "v=spf1 -all include:<host>" fails our mail.
func includes(terms []string, host string) bool {
	for _, term := range terms {
		if mechanism := strings.TrimLeft(term, "+-~?"); strings.EqualFold(mechanism, "all") {
			return false
		}
		term = strings.TrimPrefix(term, "+")
		if len(term) > len("include:") && strings.EqualFold(term[:len("include:")], "include:") &&
			sameName(term[len("include:"):], host) {
			return true
		}
	}
	return false
}
