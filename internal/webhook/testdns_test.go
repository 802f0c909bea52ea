package webhook

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// startTestDNS serves the given A and AAAA records on 127.0.0.1 and returns
// a resolver that sends every query there. Names ending in .localhost
// answer with loopback, as systemd-resolved does. Any other name is
// NXDOMAIN, so no lookup in these tests depends on the machine's DNS.
func startTestDNS(t *testing.T, records map[string][]string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	zone := map[string][]dns.RR{}
	add := func(name, value string) {
		fqdn := dns.Fqdn(strings.ToLower(name))
		rrType := "A"
		if strings.Contains(value, ":") {
			rrType = "AAAA"
		}
		rr, err := dns.NewRR(fqdn + " 60 IN " + rrType + " " + value)
		if err != nil {
			t.Fatalf("record %s %s: %v", name, value, err)
		}
		zone[fqdn] = append(zone[fqdn], rr)
	}
	for name, values := range records {
		for _, v := range values {
			add(name, v)
		}
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		name := strings.ToLower(q.Question[0].Name)
		answers, known := zone[name]
		if !known && (name == "localhost." || strings.HasSuffix(name, ".localhost.")) {
			a, _ := dns.NewRR(name + " 60 IN A 127.0.0.1")
			aaaa, _ := dns.NewRR(name + " 60 IN AAAA ::1")
			answers, known = []dns.RR{a, aaaa}, true
		}
		if !known {
			m.Rcode = dns.RcodeNameError
		}
		for _, rr := range answers {
			if rr.Header().Rrtype == q.Question[0].Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: handler, NotifyStartedFunc: func() { close(started) }}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })

	addr := pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
}
