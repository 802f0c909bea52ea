package dnsserver

import (
	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/dnspublish"
)

// Timers of the zone, in seconds.
const (
	apexTTL = 3600 // SOA and NS change only when the operator redeploys
	// recordTTL is short so that a rotated DKIM key spreads quickly.
	recordTTL = 300
	// negativeTTL is how long resolvers cache "no such name" (RFC 2308):
	// short, because a verifier may ask for a key just before it is
	// published.
	negativeTTL = 60
	refresh     = 3600
	retry       = 600
	expire      = 1209600
)

// nameServer is the host name in the NS record and SOA MNAME:
// "ns1.<zone>". The parent zone holds its address as glue.
func (s *Server) nameServer() string {
	return "ns1." + s.zone
}

func (s *Server) soa() *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: s.zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: apexTTL},
		Ns:      s.nameServer(),
		Mbox:    "hostmaster." + s.zone,
		Serial:  s.serial,
		Refresh: refresh,
		Retry:   retry,
		Expire:  expire,
		Minttl:  negativeTTL,
	}
}

// negativeSOA is the SOA of the authority section of NXDOMAIN and NODATA
// answers; its TTL is the negative caching time (RFC 2308 §3).
func (s *Server) negativeSOA() *dns.SOA {
	soa := s.soa()
	soa.Hdr.Ttl = negativeTTL
	return soa
}

func (s *Server) ns() *dns.NS {
	return &dns.NS{
		Hdr: dns.RR_Header{Name: s.zone, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: apexTTL},
		Ns:  s.nameServer(),
	}
}

func txtRecord(owner, value string) *dns.TXT {
	return &dns.TXT{
		Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: recordTTL},
		// Values longer than 255 bytes become several character-strings
		// of one record; DKIM verifiers join them (RFC 6376 §3.6.2.2).
		Txt: dnspublish.TXTStrings(value),
	}
}
