package dnsserver

import (
	"context"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// DevTLD is the top-level domain whose customer domains verify by themselves in
// `mailyard dev` (README "Trying the whole lifecycle with make run").
const DevTLD = "test."

// DevRecord is one record Mailyard asked a customer to create: Type is CNAME,
// TXT or MX; Value is the CNAME target, the TXT value, or "<priority> <host>".
type DevRecord struct {
	Type  string
	Value string
}

// DevSource returns the records Mailyard asked for at a name of a dev domain.
type DevSource interface {
	DevRecords(ctx context.Context, name string) ([]DevRecord, error)
}

// WithDevDomains makes the server also answer, in `mailyard dev` only, for the
// customer names of domains under .test, with exactly the records Mailyard
// asked for, so that such domains verify (and rotate) without a real DNS
// provider. A CNAME into the DKIM zone is answered with its target's TXT too,
// as a resolver would.
func (s *Server) WithDevDomains(src DevSource) *Server {
	s.dev = src
	return s
}

// isDevName reports whether name (canonical) is a dev customer name.
func (s *Server) isDevName(name string) bool {
	return s.dev != nil && dns.IsSubDomain(DevTLD, name) && !dns.IsSubDomain(s.zone, name)
}

// answerDev fills resp for a question about a dev customer name.
func (s *Server) answerDev(ctx context.Context, q dns.Question, resp *dns.Msg) *dns.Msg {
	owner := strings.TrimSuffix(q.Name, ".")
	lookupCtx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	records, err := s.dev.DevRecords(lookupCtx, strings.ToLower(owner))
	if err != nil {
		s.logger.Error("dev DNS look-up failed", "name", owner, "error", err)
		resp.Rcode = dns.RcodeServerFailure
		return resp
	}
	if len(records) == 0 {
		resp.Rcode = dns.RcodeNameError
		return resp
	}
	resp.Authoritative = true
	hdr := func(rrtype uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: 60}
	}
	wants := func(rrtype uint16) bool { return q.Qtype == rrtype || q.Qtype == dns.TypeANY }
	for _, r := range records {
		switch r.Type {
		case "CNAME":
			target := dns.Fqdn(r.Value)
			resp.Answer = append(resp.Answer, &dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: target})
			if q.Qtype == dns.TypeCNAME || !dns.IsSubDomain(s.zone, dns.CanonicalName(target)) {
				continue
			}
			values, err := s.src.LookupTXT(lookupCtx, strings.TrimSuffix(dns.CanonicalName(target), "."))
			if err != nil {
				resp.Rcode = dns.RcodeServerFailure
				return resp
			}
			if wants(dns.TypeTXT) {
				for _, v := range values {
					resp.Answer = append(resp.Answer, txtRecord(target, v, recordTTL))
				}
			}
		case "TXT":
			if wants(dns.TypeTXT) {
				resp.Answer = append(resp.Answer, txtRecord(q.Name, r.Value, recordTTL))
			}
		case "MX":
			prio, host, _ := strings.Cut(r.Value, " ")
			p, err := strconv.Atoi(prio)
			if wants(dns.TypeMX) && err == nil {
				resp.Answer = append(resp.Answer, &dns.MX{Hdr: hdr(dns.TypeMX), Preference: uint16(p), Mx: dns.Fqdn(host)})
			}
		}
	}
	return resp
}
