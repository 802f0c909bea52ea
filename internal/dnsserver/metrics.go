package dnsserver

import (
	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/metrics"
)

// countedTypes are the query types counted by name; any other is "other", so
// that a client sending every type number cannot make 65,536 series.
var countedTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeTXT: true, dns.TypeCNAME: true, dns.TypeMX: true,
	dns.TypeNS: true, dns.TypeSOA: true, dns.TypeANY: true, dns.TypeCAA: true, dns.TypeHTTPS: true,
	dns.TypeSVCB: true, dns.TypeDS: true, dns.TypeDNSKEY: true, dns.TypeAXFR: true, dns.TypeIXFR: true,
}

// countQuery counts an answered query by type and response code. A message
// without exactly one question has type "none".
func countQuery(req, resp *dns.Msg) {
	qtype := "none"
	if len(req.Question) == 1 {
		qtype = "other"
		if t := req.Question[0].Qtype; countedTypes[t] {
			qtype = dns.TypeToString[t]
		}
	}
	// The server answers a handful of codes; an unnamed one would still
	// be one of at most 4096 (extended) values, and we set none of those.
	rcode, ok := dns.RcodeToString[resp.Rcode]
	if !ok {
		rcode = "other"
	}
	metrics.CountDNSQuery(qtype, rcode)
}
