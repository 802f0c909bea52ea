package dnsserver

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzServeDNS feeds arbitrary wire bytes to the server's request handling,
// as a UDP and as a TCP client would send them. Whatever miekg/dns can
// unpack gets exactly one answer, and that answer:
//   - packs, unpacks again, and carries the request's id, opcode and the QR
//     bit;
//   - fits what the client can receive: 512 bytes over UDP, or its EDNS
//     buffer size up to 1232; 65535 bytes over TCP;
//   - over UDP, holds fewer records than over TCP only with TC set, so a
//     resolver knows to ask again;
//   - never answers with records for names outside the zone (or, in dev,
//     .test), never answers a zone transfer or a message that is itself a
//     response.
func FuzzServeDNS(f *testing.F) {
	seed := func(name string, qtype uint16, edns uint16, mutate func(*dns.Msg)) {
		m := new(dns.Msg).SetQuestion(name, qtype)
		if edns > 0 {
			m.SetEdns0(edns, true)
		}
		if mutate != nil {
			mutate(m)
		}
		wire, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	for _, name := range []string{
		"dkim.mailyard.test.", "DKIM.Mailyard.Test.", "sel1._domainkey.acme.dkim.mailyard.test.",
		"big._domainkey.acme.dkim.mailyard.test.", "many.dkim.mailyard.test.", "fail.dkim.mailyard.test.",
		"missing.dkim.mailyard.test.", "example.com.", "mailyard.test.", ".", "sel1._domainkey.shop.test.",
		"shop.test.", "broken.test.", "a\\000b.dkim.mailyard.test.", strings.Repeat("a.", 100) + "dkim.mailyard.test.",
	} {
		for _, qtype := range []uint16{dns.TypeTXT, dns.TypeANY, dns.TypeSOA, dns.TypeNS, dns.TypeA, dns.TypeCNAME, dns.TypeMX, dns.TypeAXFR, dns.TypeOPT} {
			seed(name, qtype, 0, nil)
		}
		seed(name, dns.TypeTXT, 4096, nil)
		seed(name, dns.TypeTXT, 600, nil)
	}
	seed("dkim.mailyard.test.", dns.TypeSOA, 0, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify })
	seed("dkim.mailyard.test.", dns.TypeSOA, 0, func(m *dns.Msg) { m.Response = true })
	seed("dkim.mailyard.test.", dns.TypeSOA, 0, func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) })
	seed("dkim.mailyard.test.", dns.TypeSOA, 0, func(m *dns.Msg) { m.Question = nil })
	seed("dkim.mailyard.test.", dns.TypeSOA, 1232, func(m *dns.Msg) { m.IsEdns0().SetVersion(1) })
	seed("dkim.mailyard.test.", dns.TypeSOA, 0, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS })
	f.Add([]byte{})
	f.Add([]byte{0, 0})
	f.Add(make([]byte, 12))

	srv := New(zone, fuzzSource(), nil).WithDevDomains(fuzzDevSource{})
	f.Fuzz(func(t *testing.T, wire []byte) {
		if new(dns.Msg).Unpack(wire) != nil {
			return // miekg/dns drops it before any handler sees it
		}
		udp := serveOnce(t, srv, wire, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 53000})
		tcp := serveOnce(t, srv, wire, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 53000})

		var req dns.Msg
		_ = req.Unpack(wire)
		limit := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			limit = max(dns.MinMsgSize, min(int(opt.UDPSize()), ednsUDPSize))
		}
		if udp.size > limit {
			t.Fatalf("UDP answer of %d bytes; the client takes %d", udp.size, limit)
		}
		udpRecords := len(udp.msg.Answer) + len(udp.msg.Ns) + len(udp.msg.Extra)
		tcpRecords := len(tcp.msg.Answer) + len(tcp.msg.Ns) + len(tcp.msg.Extra)
		if udpRecords < tcpRecords && !udp.msg.Truncated {
			t.Fatalf("UDP answer holds %d records, TCP %d, and TC is not set", udpRecords, tcpRecords)
		}
		for _, a := range []*answer{udp, tcp} {
			m := a.msg
			if m.Id != req.Id || !m.Response || m.Opcode != req.Opcode {
				t.Fatalf("answer id %d, QR %v, opcode %d to request id %d, opcode %d", m.Id, m.Response, m.Opcode, req.Id, req.Opcode)
			}
			if len(m.Answer) == 0 {
				continue
			}
			if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
				t.Fatalf("records answered to a message that is not one query: %v", m)
			}
			if q := req.Question[0].Qtype; q == dns.TypeAXFR || q == dns.TypeIXFR {
				t.Fatalf("records answered to a zone transfer: %v", m)
			}
			for _, rr := range m.Answer {
				owner := dns.CanonicalName(rr.Header().Name)
				if !dns.IsSubDomain(srv.zone, owner) && !dns.IsSubDomain(DevTLD, owner) {
					t.Fatalf("record for %q, outside the zone: %v", owner, m)
				}
			}
		}
	})
}

// answer is what one request got back.
type answer struct {
	msg  *dns.Msg
	size int
}

// serveOnce runs the server's handler on wire as if it came from remote, and
// returns the answer after checking that there is exactly one and that it
// packs and unpacks.
func serveOnce(t *testing.T, srv *Server, wire []byte, remote net.Addr) *answer {
	t.Helper()
	req := new(dns.Msg)
	if err := req.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	w := &recordingWriter{remote: remote}
	(&handler{server: srv, ctx: context.Background()}).ServeDNS(w, req)
	if len(w.written) != 1 {
		t.Fatalf("%d answers over %s; want 1 (pack errors: %v)", len(w.written), remote.Network(), w.errs)
	}
	got := new(dns.Msg)
	if err := got.Unpack(w.written[0]); err != nil {
		t.Fatalf("answer over %s does not unpack: %v", remote.Network(), err)
	}
	if len(w.written[0]) > dns.MaxMsgSize {
		t.Fatalf("answer of %d bytes over %s", len(w.written[0]), remote.Network())
	}
	return &answer{msg: got, size: len(w.written[0])}
}

// recordingWriter keeps what the handler writes, packed as miekg/dns's own
// writer packs it.
type recordingWriter struct {
	remote  net.Addr
	written [][]byte
	errs    []error
}

func (w *recordingWriter) WriteMsg(m *dns.Msg) error {
	wire, err := m.Pack()
	if err != nil {
		w.errs = append(w.errs, err)
		return err
	}
	w.written = append(w.written, wire)
	return nil
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.written = append(w.written, append([]byte(nil), b...))
	return len(b), nil
}

func (w *recordingWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w *recordingWriter) RemoteAddr() net.Addr { return w.remote }
func (w *recordingWriter) Close() error         { return nil }
func (w *recordingWriter) TsigStatus() error    { return nil }
func (w *recordingWriter) TsigTimersOnly(bool)  {}
func (w *recordingWriter) Hijack()              {}

// fuzzKey is a deterministic DKIM value with a key of the size of a real
// RSA key of bits.
func fuzzKey(bits int) string {
	spki := make([]byte, bits/8+38)
	for i := range spki {
		spki[i] = byte(i * 7)
	}
	return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(spki)
}

func fuzzSource() *fakeSource {
	many := make([]string, 40)
	for i := range many {
		many[i] = fuzzKey(1024)
	}
	return &fakeSource{
		records: map[string][]string{
			"sel1._domainkey.acme.dkim.mailyard.test": {fuzzKey(2048)},
			"big._domainkey.acme.dkim.mailyard.test":  {fuzzKey(4096)},
			"many.dkim.mailyard.test":                 many,
			"shop-sel1.dkim.mailyard.test":            {fuzzKey(2048)},
		},
		failing: map[string]bool{"fail.dkim.mailyard.test": true},
	}
}

// fuzzDevSource answers the dev records of shop.test; broken.test fails.
type fuzzDevSource struct{}

func (fuzzDevSource) DevRecords(_ context.Context, name string) ([]DevRecord, error) {
	switch name {
	case "broken.test":
		return nil, errors.New("database connection lost")
	case "shop.test":
		return []DevRecord{{Type: "TXT", Value: "v=spf1 include:mailyard.test ~all"}, {Type: "MX", Value: "10 feedback.mailyard.test"}, {Type: "MX", Value: "x y"}}, nil
	case "sel1._domainkey.shop.test":
		return []DevRecord{{Type: "CNAME", Value: "shop-sel1.dkim.mailyard.test"}}, nil
	}
	return nil, nil
}
