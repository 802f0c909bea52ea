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
// "ns1.<zone>". The parent zone holds its address as glue, and the zone
// answers it too when it is given (WithNameServerAddresses).
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

// nameServerRecords are the A and AAAA records of the name server that
// qtype asks for (ANY: both).
func (s *Server) nameServerRecords(qtype uint16) []dns.RR {
	var out []dns.RR
	for _, ip := range s.nsAddrs {
		hdr := dns.RR_Header{Name: s.nameServer(), Class: dns.ClassINET, Ttl: apexTTL}
		if v4 := ip.To4(); v4 != nil && (qtype == dns.TypeA || qtype == dns.TypeANY) {
			hdr.Rrtype = dns.TypeA
			out = append(out, &dns.A{Hdr: hdr, A: v4})
		} else if v4 == nil && (qtype == dns.TypeAAAA || qtype == dns.TypeANY) {
			hdr.Rrtype = dns.TypeAAAA
			out = append(out, &dns.AAAA{Hdr: hdr, AAAA: ip})
		}
	}
	return out
}

func txtRecord(owner, value string, ttl uint32) *dns.TXT {
	return &dns.TXT{
		Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: ttl},
		// Values longer than 255 bytes become several character-strings
		// of one record; DKIM verifiers join them (RFC 6376 §3.6.2.2).
		Txt: dnspublish.TXTStrings(value),
	}
}
