package dnsserver

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/testenv"
)

// Every answered query is counted by type and response code; rare types
// share one label value, so clients cannot grow the series.
func TestQueriesAreCounted(t *testing.T) {
	name := "s1._domainkey.example." + zone
	srv := startServer(t, &fakeSource{records: map[string][]string{name: {dkimValue(t, 2048)}}})
	series := []string{
		`mailyard_dns_queries_total{qtype="TXT",rcode="NOERROR"}`,
		`mailyard_dns_queries_total{qtype="TXT",rcode="NXDOMAIN"}`,
		`mailyard_dns_queries_total{qtype="A",rcode="REFUSED"}`,
		`mailyard_dns_queries_total{qtype="other",rcode="NXDOMAIN"}`,
	}
	before := testenv.ScrapeProcess(t)
	exchange(t, "udp", srv.addr, question(name+".", dns.TypeTXT))
	exchange(t, "tcp", srv.addr, question(name+".", dns.TypeTXT))
	exchange(t, "udp", srv.addr, question("nope._domainkey.example."+zone+".", dns.TypeTXT))
	exchange(t, "udp", srv.addr, question("example.org.", dns.TypeA))
	exchange(t, "udp", srv.addr, question("nope."+zone+".", 65280)) // a private-use type
	exchange(t, "udp", srv.addr, question("nope."+zone+".", 65281))
	after := testenv.ScrapeProcess(t)
	for i, want := range []float64{2, 1, 1, 2} {
		if got := testenv.Sample(t, after, series[i]) - testenv.Sample(t, before, series[i]); got != want {
			t.Errorf("%s went up by %v, want %v", series[i], got, want)
		}
	}
	testenv.CheckMetrics(t, []byte(after))
}
