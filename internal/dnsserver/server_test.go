package dnsserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/dnspublish"

	"github.com/mailyard/mailyard/internal/testenv"
)

const zone = "dkim.mailyard.test"

// fakeSource serves TXT values from a map; names in failing return an error.
type fakeSource struct {
	records map[string][]string
	failing map[string]bool
}

func (f *fakeSource) LookupTXT(_ context.Context, name string) ([]string, error) {
	if f.failing[name] {
		return nil, errors.New("database connection lost")
	}
	return f.records[name], nil
}

// dkimValue returns a DKIM TXT value with an RSA key of the given size; the
// key is random bytes of the length of a real SubjectPublicKeyInfo.
func dkimValue(t *testing.T, bits int) string {
	t.Helper()
	spki := make([]byte, bits/8+38)
	if _, err := rand.Read(spki); err != nil {
		t.Fatal(err)
	}
	return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(spki)
}

type testServer struct {
	addr string
	logs *testenv.SyncBuffer
}

// startServer runs a Server on 127.0.0.1, one free port for UDP and TCP,
// until the test ends.
func startServer(t *testing.T, src Source, nameServerAddrs ...net.IP) *testServer {
	t.Helper()
	return startConfigured(t, src, func(srv *Server) { srv.WithNameServerAddresses(nameServerAddrs) })
}

// startConfigured is startServer with the server configured by configure
// before it serves.
func startConfigured(t *testing.T, src Source, configure func(*Server)) *testServer {
	t.Helper()
	udp, tcp, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	srv := New(strings.ToUpper(zone)+".", src, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	configure(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, udp, tcp) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after cancellation", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after cancellation")
		}
	})
	return &testServer{addr: udp.LocalAddr().String(), logs: logs}
}

// exchange sends msg over network ("udp" or "tcp").
func exchange(t *testing.T, network, addr string, msg *dns.Msg) *dns.Msg {
	t.Helper()
	client := &dns.Client{Net: network, Timeout: 2 * time.Second}
	resp, _, err := client.Exchange(msg, addr)
	if err != nil {
		t.Fatalf("%s query for %v: %v", network, msg.Question, err)
	}
	return resp
}

func question(name string, qtype uint16) *dns.Msg {
	msg := new(dns.Msg)
	msg.SetQuestion(name, qtype)
	// Resolvers ask with EDNS; 1232 bytes hold a 2048-bit key.
	msg.SetEdns0(1232, false)
	return msg
}

func checkHeader(t *testing.T, resp *dns.Msg, rcode int, authoritative bool) {
	t.Helper()
	if resp.Rcode != rcode {
		t.Errorf("RCODE = %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[rcode])
	}
	if resp.Authoritative != authoritative {
		t.Errorf("AA = %v, want %v", resp.Authoritative, authoritative)
	}
	if resp.RecursionAvailable {
		t.Error("RA is set, but the server does not recurse")
	}
}

// checkNegative checks the SOA in the authority section of NXDOMAIN and
// NODATA answers, which resolvers need for negative caching.
func checkNegative(t *testing.T, resp *dns.Msg) {
	t.Helper()
	if len(resp.Answer) != 0 {
		t.Errorf("answer = %v, want none", resp.Answer)
	}
	if len(resp.Ns) != 1 {
		t.Fatalf("authority = %v, want the SOA", resp.Ns)
	}
	soa, ok := resp.Ns[0].(*dns.SOA)
	if !ok || soa.Hdr.Name != zone+"." || soa.Hdr.Ttl != negativeTTL || soa.Minttl != negativeTTL {
		t.Errorf("authority = %v, want the SOA of the zone with the negative TTL", resp.Ns[0])
	}
}

var transports = []string{"udp", "tcp"}

func TestApexRecords(t *testing.T) {
	srv := startServer(t, &fakeSource{})
	for _, network := range transports {
		t.Run(network, func(t *testing.T) {
			resp := exchange(t, network, srv.addr, question(zone+".", dns.TypeSOA))
			checkHeader(t, resp, dns.RcodeSuccess, true)
			if len(resp.Answer) != 1 {
				t.Fatalf("SOA answer = %v", resp.Answer)
			}
			soa := resp.Answer[0].(*dns.SOA)
			if soa.Ns != "ns1."+zone+"." || soa.Mbox != "hostmaster."+zone+"." || soa.Serial == 0 ||
				soa.Refresh == 0 || soa.Retry == 0 || soa.Expire <= soa.Refresh || soa.Minttl != negativeTTL {
				t.Errorf("SOA = %v", soa)
			}

			resp = exchange(t, network, srv.addr, question(zone+".", dns.TypeNS))
			checkHeader(t, resp, dns.RcodeSuccess, true)
			if len(resp.Answer) != 1 || resp.Answer[0].(*dns.NS).Ns != "ns1."+zone+"." {
				t.Errorf("NS answer = %v", resp.Answer)
			}

			// The apex exists: other types are NODATA, not NXDOMAIN.
			for _, qtype := range []uint16{dns.TypeA, dns.TypeTXT, dns.TypeMX} {
				resp = exchange(t, network, srv.addr, question(zone+".", qtype))
				checkHeader(t, resp, dns.RcodeSuccess, true)
				checkNegative(t, resp)
			}
		})
	}
}

// With its addresses given, the zone answers A and AAAA for its name
// server ns1.<zone>, as the parent's glue does; without, the name does not
// exist, as before.
func TestNameServerAddresses(t *testing.T) {
	srv := startServer(t, &fakeSource{}, net.ParseIP("192.0.2.53"), net.ParseIP("2001:db8::53"))
	ns := "ns1." + zone + "."
	for qtype, want := range map[uint16]string{dns.TypeA: "192.0.2.53", dns.TypeAAAA: "2001:db8::53"} {
		resp := exchange(t, "udp", srv.addr, question(strings.ToUpper(ns), qtype))
		checkHeader(t, resp, dns.RcodeSuccess, true)
		if len(resp.Answer) != 1 || resp.Answer[0].Header().Name != ns || !strings.HasSuffix(resp.Answer[0].String(), want) {
			t.Errorf("%s of the name server: %v", dns.TypeToString[qtype], resp.Answer)
		}
	}
	resp := exchange(t, "udp", srv.addr, question(ns, dns.TypeTXT))
	checkHeader(t, resp, dns.RcodeSuccess, true)
	checkNegative(t, resp)

	bare := startServer(t, &fakeSource{})
	resp = exchange(t, "udp", bare.addr, question(ns, dns.TypeA))
	checkHeader(t, resp, dns.RcodeNameError, true)
}

func TestTXTRecords(t *testing.T) {
	dkim := dkimValue(t, 2048)
	src := &fakeSource{records: map[string][]string{
		"abc-1." + zone:   {dkim},
		"multi." + zone:   {"first", "second"},
		"escaped." + zone: {`a "quoted" \ value`},
	}}
	srv := startServer(t, src)
	for _, network := range transports {
		t.Run(network, func(t *testing.T) {
			// Names are case-insensitive; the question keeps its case.
			for _, name := range []string{"abc-1." + zone + ".", "ABC-1.Dkim.Mailyard.TEST."} {
				resp := exchange(t, network, srv.addr, question(name, dns.TypeTXT))
				checkHeader(t, resp, dns.RcodeSuccess, true)
				if resp.Question[0].Name != name {
					t.Errorf("question echoed as %q, want %q", resp.Question[0].Name, name)
				}
				if resp.Truncated || len(resp.Answer) != 1 {
					t.Fatalf("answer for %s = %v (TC=%v), want one TXT record", name, resp.Answer, resp.Truncated)
				}
				txt := resp.Answer[0].(*dns.TXT)
				if len(txt.Txt) != 2 {
					t.Errorf("the %d-byte DKIM value came as %d character-strings, want 2", len(dkim), len(txt.Txt))
				}
				for _, s := range txt.Txt {
					if len(s) > 255 {
						t.Errorf("character-string of %d bytes", len(s))
					}
				}
				if got := dnspublish.TXTValue(txt.Txt); got != dkim {
					t.Errorf("TXT value = %q, want %q", got, dkim)
				}
			}

			resp := exchange(t, network, srv.addr, question("multi."+zone+".", dns.TypeTXT))
			checkHeader(t, resp, dns.RcodeSuccess, true)
			if len(resp.Answer) != 2 {
				t.Errorf("answer = %v, want two TXT records", resp.Answer)
			}

			resp = exchange(t, network, srv.addr, question("escaped."+zone+".", dns.TypeTXT))
			if len(resp.Answer) != 1 || dnspublish.TXTValue(resp.Answer[0].(*dns.TXT).Txt) != `a "quoted" \ value` {
				t.Errorf("answer = %v", resp.Answer)
			}

			resp = exchange(t, network, srv.addr, question("abc-1."+zone+".", dns.TypeANY))
			checkHeader(t, resp, dns.RcodeSuccess, true)
			if len(resp.Answer) != 1 || resp.Answer[0].Header().Rrtype != dns.TypeTXT {
				t.Errorf("ANY answer = %v", resp.Answer)
			}
		})
	}
}

func TestLargeAnswerIsTruncatedOverUDPWithoutEDNS(t *testing.T) {
	dkim := dkimValue(t, 4096)
	srv := startServer(t, &fakeSource{records: map[string][]string{"big-1." + zone: {dkim}}})
	msg := new(dns.Msg)
	msg.SetQuestion("big-1."+zone+".", dns.TypeTXT)

	resp := exchange(t, "udp", srv.addr, msg)
	if !resp.Truncated {
		t.Errorf("a %d-byte value over plain UDP was not truncated", len(dkim))
	}
	resp = exchange(t, "tcp", srv.addr, msg)
	if resp.Truncated || len(resp.Answer) != 1 || dnspublish.TXTValue(resp.Answer[0].(*dns.TXT).Txt) != dkim {
		t.Errorf("TCP answer = %v (TC=%v), want the whole value", resp.Answer, resp.Truncated)
	}
}

func TestNegativeAnswers(t *testing.T) {
	src := &fakeSource{records: map[string][]string{"abc-1." + zone: {"v=DKIM1; p=x"}}}
	srv := startServer(t, src)
	for _, network := range transports {
		t.Run(network, func(t *testing.T) {
			// NODATA: the name exists with TXT only.
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeMX} {
				resp := exchange(t, network, srv.addr, question("abc-1."+zone+".", qtype))
				checkHeader(t, resp, dns.RcodeSuccess, true)
				checkNegative(t, resp)
			}
			// NXDOMAIN, for any type, also below an existing name.
			for _, name := range []string{"missing." + zone + ".", "sub.abc-1." + zone + "."} {
				for _, qtype := range []uint16{dns.TypeTXT, dns.TypeA} {
					resp := exchange(t, network, srv.addr, question(name, qtype))
					checkHeader(t, resp, dns.RcodeNameError, true)
					checkNegative(t, resp)
				}
			}
		})
	}
}

func TestRefusesOtherZones(t *testing.T) {
	srv := startServer(t, &fakeSource{records: map[string][]string{"abc-1." + zone: {"v"}}})
	for _, network := range transports {
		t.Run(network, func(t *testing.T) {
			for _, name := range []string{"example.com.", "mailyard.test.", "xdkim.mailyard.test.", "."} {
				resp := exchange(t, network, srv.addr, question(name, dns.TypeTXT))
				checkHeader(t, resp, dns.RcodeRefused, false)
				if len(resp.Answer)+len(resp.Ns) != 0 {
					t.Errorf("REFUSED answer for %s carries records: %v %v", name, resp.Answer, resp.Ns)
				}
			}
			// Other classes, such as CHAOS "version.bind", are not ours.
			msg := question(zone+".", dns.TypeTXT)
			msg.Question[0].Qclass = dns.ClassCHAOS
			checkHeader(t, exchange(t, network, srv.addr, msg), dns.RcodeRefused, false)
		})
	}
	// Zone transfers would list every selector.
	for _, qtype := range []uint16{dns.TypeAXFR, dns.TypeIXFR} {
		resp := exchange(t, "tcp", srv.addr, question(zone+".", qtype))
		checkHeader(t, resp, dns.RcodeRefused, false)
	}
}

func TestSourceErrorAnswersServfail(t *testing.T) {
	secret := "v=DKIM1; k=rsa; p=SECRETVALUE"
	src := &fakeSource{
		records: map[string][]string{"broken." + zone: {secret}},
		failing: map[string]bool{"broken." + zone: true},
	}
	srv := startServer(t, src)
	for _, network := range transports {
		resp := exchange(t, network, srv.addr, question("Broken."+zone+".", dns.TypeTXT))
		checkHeader(t, resp, dns.RcodeServerFailure, false)
	}
	logs := srv.logs.String()
	if !strings.Contains(logs, "broken."+zone) || !strings.Contains(logs, "database connection lost") {
		t.Errorf("the failure is not logged with its name and cause:\n%s", logs)
	}
	if strings.Contains(logs, "SECRETVALUE") {
		t.Errorf("a record value was logged:\n%s", logs)
	}
}

func TestMalformedAndUnsupportedRequests(t *testing.T) {
	srv := startServer(t, &fakeSource{})
	for _, network := range transports {
		t.Run(network, func(t *testing.T) {
			// No question.
			msg := new(dns.Msg)
			msg.Id = dns.Id()
			checkHeader(t, exchange(t, network, srv.addr, msg), dns.RcodeFormatError, false)

			// Two questions.
			msg = question("a."+zone+".", dns.TypeTXT)
			msg.Question = append(msg.Question, dns.Question{Name: "b." + zone + ".", Qtype: dns.TypeTXT, Qclass: dns.ClassINET})
			checkHeader(t, exchange(t, network, srv.addr, msg), dns.RcodeFormatError, false)

			// NOTIFY and UPDATE are not implemented.
			msg = question(zone+".", dns.TypeSOA)
			msg.Opcode = dns.OpcodeNotify
			checkHeader(t, exchange(t, network, srv.addr, msg), dns.RcodeNotImplemented, false)
			msg = new(dns.Msg)
			msg.SetUpdate(zone + ".")
			msg.Insert([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x." + zone + ".", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"forged"}}})
			checkHeader(t, exchange(t, network, srv.addr, msg), dns.RcodeNotImplemented, false)

			// EDNS versions other than 0 (RFC 6891 §6.1.3).
			msg = question(zone+".", dns.TypeSOA)
			msg.IsEdns0().SetVersion(1)
			resp := exchange(t, network, srv.addr, msg)
			if resp.Rcode != dns.RcodeBadVers || resp.IsEdns0() == nil {
				t.Errorf("EDNS version 1: RCODE %s, OPT %v; want BADVERS with an OPT record", dns.RcodeToString[resp.Rcode], resp.IsEdns0())
			}
		})
	}
}

func TestListenAndServeStopsWithContext(t *testing.T) {
	// Learn a free port, then let ListenAndServe bind it.
	udp, tcp, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := udp.LocalAddr().String()
	udp.Close()
	tcp.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(zone, &fakeSource{}, nil).ListenAndServe(ctx, addr) }()

	var answered bool
	for i := 0; i < 50 && !answered; i++ {
		client := &dns.Client{Net: "tcp", Timeout: 200 * time.Millisecond}
		resp, _, err := client.Exchange(question(zone+".", dns.TypeSOA), addr)
		answered = err == nil && resp.Rcode == dns.RcodeSuccess
		if !answered {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !answered {
		t.Fatal("ListenAndServe did not answer")
	}
	resp := exchange(t, "udp", addr, question(zone+".", dns.TypeNS))
	checkHeader(t, resp, dns.RcodeSuccess, true)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not return after cancellation")
	}
	// The port is free again.
	udp2, tcp2, err := listen(addr)
	if err != nil {
		t.Fatalf("port still bound after shutdown: %v", err)
	}
	udp2.Close()
	tcp2.Close()
}

func TestListenAndServeReportsBadAddress(t *testing.T) {
	err := New(zone, &fakeSource{}, nil).ListenAndServe(context.Background(), "not-an-address")
	if err == nil {
		t.Fatal("no error for an address without a port")
	}
}

// A selector answered from memory while the database fails carries a TTL
// of 30 s instead of the record's 300 (RFC 8767 §4), so resolvers ask again
// soon after the database is back.
func TestStaleAnswersHaveAShortTTL(t *testing.T) {
	name := "k1._domainkey." + zone
	src := &failableSource{values: []string{dkimValue(t, 1024)}}
	var srv *Server
	ts := startConfigured(t, src, func(s *Server) { srv = s })
	ttlOf := func() uint32 {
		t.Helper()
		resp := exchange(t, "udp", ts.addr, question(name+".", dns.TypeTXT))
		checkHeader(t, resp, dns.RcodeSuccess, true)
		if len(resp.Answer) != 1 {
			t.Fatalf("answer %v", resp.Answer)
		}
		return resp.Answer[0].Header().Ttl
	}
	if ttl := ttlOf(); ttl != recordTTL {
		t.Fatalf("a fresh answer's TTL is %d, want %d", ttl, recordTTL)
	}
	srv.lookups.age(name, cacheTTL)
	src.failing.Store(true)
	if ttl := ttlOf(); ttl != staleAnswerTTL {
		t.Fatalf("a stale answer's TTL is %d, want %d", ttl, staleAnswerTTL)
	}
}

// failableSource answers values for every name until failing is set.
type failableSource struct {
	values  []string
	failing atomic.Bool
}

func (f *failableSource) LookupTXT(context.Context, string) ([]string, error) {
	if f.failing.Load() {
		return nil, errors.New("database connection lost")
	}
	return f.values, nil
}
