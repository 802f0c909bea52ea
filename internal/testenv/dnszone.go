package testenv

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/freeport"
)

// DNSZone is a real DNS server on loopback that answers from records the test sets
// while it runs: the customer's zone in end-to-end tests, used as the resolver.
type DNSZone struct {
	Addr string // host:port, UDP and TCP

	mu      sync.Mutex
	records map[string][]dns.RR // by lower-case FQDN with trailing dot
	// forwards maps a zone (lower-case FQDN) to the server that answers for it.
	forwards map[string]string
}

// StartDNSZone serves until the test ends.
func StartDNSZone(t testing.TB) *DNSZone {
	t.Helper()
	z := &DNSZone{records: map[string][]dns.RR{}, forwards: map[string]string{}}
	pc, ln, err := freeport.ListenBoth("127.0.0.1")
	if err != nil {
		t.Fatal(err)
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

// forwarder asks forwarded zones over TCP, so a DKIM key never arrives truncated.
var forwarder = &dns.Client{Net: "tcp", Timeout: 2 * time.Second}

// Forward makes the zone answer questions under zone by asking addr, and follow
// its own CNAMEs into that zone, as a recursive resolver would: the customer's
// DKIM CNAMEs then resolve to the keys `mailyard dns` serves.
func (z *DNSZone) Forward(zone, addr string) {
	z.mu.Lock()
	z.forwards[dns.CanonicalName(zone)] = addr
	z.mu.Unlock()
}

// forwardTo returns the server for name, if a forwarded zone holds it.
func (z *DNSZone) forwardTo(name string) string {
	z.mu.Lock()
	defer z.mu.Unlock()
	for zone, addr := range z.forwards {
		if dns.IsSubDomain(zone, dns.CanonicalName(name)) {
			return addr
		}
	}
	return ""
}

// ServeDNS answers from the records: the CNAME at a name for any type (followed
// into a forwarded zone), the records of the asked type, NXDOMAIN for unknown
// names.
func (z *DNSZone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) == 1 {
		if addr := z.forwardTo(req.Question[0].Name); addr != "" {
			if in, _, err := forwarder.Exchange(req, addr); err == nil {
				in.Id = req.Id
				_ = w.WriteMsg(in)
				return
			}
		}
	}
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
		z.followCNAME(m, q)
	}
	_ = w.WriteMsg(m)
}

// followCNAME appends the target's records when the answer is a CNAME into a
// forwarded zone and the question was for another type.
func (z *DNSZone) followCNAME(m *dns.Msg, q dns.Question) {
	if q.Qtype == dns.TypeCNAME || len(m.Answer) != 1 {
		return
	}
	cname, ok := m.Answer[0].(*dns.CNAME)
	if !ok {
		return
	}
	addr := z.forwardTo(cname.Target)
	if addr == "" {
		return
	}
	ask := new(dns.Msg)
	ask.SetQuestion(cname.Target, q.Qtype)
	if in, _, err := forwarder.Exchange(ask, addr); err == nil {
		m.Answer = append(m.Answer, in.Answer...)
	}
}
