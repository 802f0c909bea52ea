package testenv

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// DNSZone is a real DNS server on loopback that answers from records the test sets
// while it runs: the customer's zone in end-to-end tests, used as the resolver.
type DNSZone struct {
	Addr string // host:port, UDP and TCP

	mu      sync.Mutex
	records map[string][]dns.RR // by lower-case FQDN with trailing dot
}

// StartDNSZone serves until the test ends.
func StartDNSZone(t testing.TB) *DNSZone {
	t.Helper()
	z := &DNSZone{records: map[string][]dns.RR{}}
	// UDP picks a free port; TCP must get the same one, which another process
	// may hold, so try a few ports.
	var pc net.PacketConn
	var ln net.Listener
	for attempt := 0; ln == nil; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if attempt == 10 {
				t.Fatal(err)
			}
		}
	}
	z.Addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: z}
	tcp := &dns.Server{Listener: ln, Handler: z}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return z
}

// Add adds a record in zone-file syntax, e.g. "mail.example.com. 60 IN MX 10 bounces.example.".
func (z *DNSZone) Add(t testing.TB, record string) {
	t.Helper()
	rr, err := dns.NewRR(record)
	if err != nil {
		t.Fatalf("record %q: %v", record, err)
	}
	name := strings.ToLower(rr.Header().Name)
	z.mu.Lock()
	z.records[name] = append(z.records[name], rr)
	z.mu.Unlock()
}

// ServeDNS answers from the records: the CNAME at a name for any type, the records
// of the asked type, NXDOMAIN for unknown names.
func (z *DNSZone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	if len(req.Question) == 1 {
		q := req.Question[0]
		z.mu.Lock()
		rrs, found := z.records[strings.ToLower(q.Name)]
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				m.Answer = append(m.Answer, dns.Copy(rr))
			}
		}
		z.mu.Unlock()
		if !found {
			m.Rcode = dns.RcodeNameError
		}
	}
	_ = w.WriteMsg(m)
}
