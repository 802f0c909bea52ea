package dnscheck

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/freeport"
)

const (
	dkimHost   = "dkim.mailyard.test"
	spfHost    = "spf.mailyard.test"
	bounceHost = "bounces.mailyard.test"
)

// customerZone is what a customer's resolver knows, in zone file syntax.
var customerZone = []string{
	// DKIM CNAMEs: one right, one with upper case, one pointing elsewhere.
	"tok-1._domainkey.good.test. 300 IN CNAME tok-1.dkim.mailyard.test.",
	"TOK-2._DOMAINKEY.good.test. 300 IN CNAME TOK-2.DKIM.MAILYARD.TEST.",
	"tok-1._domainkey.wrong.test. 300 IN CNAME tok-1.dkim.other-provider.test.",
	// A name that exists with another type only.
	"tok-1._domainkey.txtonly.test. 300 IN TXT \"v=DKIM1; p=pasted-instead\"",

	// SPF: ours among other mechanisms and other TXT records.
	"mail.good.test. 300 IN TXT \"google-site-verification=abc\"",
	"mail.good.test. 300 IN TXT \"v=spf1 ip4:192.0.2.0/24 include:_spf.other.test \" \"include:SPF.Mailyard.Test. ~all\"",
	"mail.upper.test. 300 IN TXT \"V=SPF1 +INCLUDE:spf.mailyard.test -all\"",
	"mail.wrong.test. 300 IN TXT \"v=spf1 include:spf.other-provider.test ~all\"",
	"mail.softfail.test. 300 IN TXT \"v=spf1 ~include:spf.mailyard.test -all\"",
	"mail.allfirst.test. 300 IN TXT \"v=spf1 -all include:spf.mailyard.test\"",
	"mail.lowpref.test. 300 IN MX 90 bounces.mailyard.test.",
	"mail.lowpref.test. 300 IN MX 10 mx.provider.test.",
	"mail.tie.test. 300 IN MX 10 bounces.mailyard.test.",
	"mail.tie.test. 300 IN MX 10 mx.provider.test.",
	"mail.twospf.test. 300 IN TXT \"v=spf1 include:spf.mailyard.test ~all\"",
	"mail.twospf.test. 300 IN TXT \"v=spf1 include:_spf.google.com -all\"",
	"mail.prefix.test. 300 IN TXT \"v=spf10 include:spf.mailyard.test\"",
	"mail.tab.test. 300 IN TXT \"v=spf1\\009include:spf.mailyard.test ~all\"",
	"mail.tabterm.test. 300 IN TXT \"v=spf1 include:spf.mailyard.test\\009~all\"",
	"mail.txtonly.test. 300 IN TXT \"hello\"",
	"mail.txtonly.test. 300 IN TXT \"include:spf.mailyard.test\"",

	// MX: several, ours among them; a wrong one; a null MX.
	"mail.good.test. 300 IN MX 20 backup.other.test.",
	"mail.good.test. 300 IN MX 10 Bounces.Mailyard.Test.",
	"mail.wrong.test. 300 IN MX 10 mx.other-provider.test.",
	"mail.wrong.test. 300 IN MX 5 bounces.mailyard.test.other.test.",
	"mail.null.test. 300 IN MX 0 .",

	// An alias: TXT and MX are answered through it.
	"mail.alias.test. 300 IN CNAME mail.good.test.",
}

// testResolver is a recursive resolver stand-in serving customerZone over
// UDP and TCP on one port. "servfail" and "refused" in a name make it fail;
// names containing "big" have a TXT record too large for UDP.
type testResolver struct {
	addr    string
	records []dns.RR

	mu         sync.Mutex
	queries    map[string]int // per transport
	noRecurse  bool           // a query arrived without RD
	bigRecords []dns.RR
	dropUDP    int // UDP queries still to be dropped (lost on the way)
}

func startResolver(t *testing.T) *testResolver {
	t.Helper()
	r := &testResolver{queries: map[string]int{}}
	for _, line := range customerZone {
		rr, err := dns.NewRR(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		r.records = append(r.records, rr)
	}
	// One SPF record (two would be an error) beside other long TXT records.
	long := "v=spf1 " + strings.Repeat("ip4:192.0.2.1 ", 120) + "include:spf.mailyard.test ~all"
	for _, value := range []string{long, "site-verification=" + strings.Repeat("a", 1600), "site-verification=" + strings.Repeat("b", 1600)} {
		r.bigRecords = append(r.bigRecords, &dns.TXT{
			Hdr: dns.RR_Header{Name: "mail.big.test.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 300},
			Txt: splitForTest(value),
		})
	}

	udp, tcp := listenBoth(t)
	r.addr = udp.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: udp, Handler: r}, {Listener: tcp, Handler: r}} {
		// Shutdown fails on a server that has not started yet: wait.
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return r
}

func (r *testResolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	r.mu.Lock()
	if udp {
		r.queries["udp"]++
	} else {
		r.queries["tcp"]++
	}
	r.noRecurse = r.noRecurse || !req.RecursionDesired
	drop := udp && r.dropUDP > 0
	if drop {
		r.dropUDP--
	}
	r.mu.Unlock()
	if drop {
		return
	}

	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	q := req.Question[0]
	switch {
	case strings.Contains(q.Name, "servfail"):
		resp.Rcode = dns.RcodeServerFailure
	case strings.Contains(q.Name, "refused"):
		resp.Rcode = dns.RcodeRefused
	case strings.Contains(q.Name, "big"):
		resp.Answer = r.bigRecords
		if udp {
			resp.Answer = nil
			resp.Truncated = true
		}
	default:
		resp.Answer, resp.Rcode = r.answer(q)
	}
	_ = w.WriteMsg(resp)
}

// answer resolves q like a recursive resolver: it follows CNAMEs unless
// the CNAME itself is asked for, and answers NXDOMAIN for unknown names.
func (r *testResolver) answer(q dns.Question) ([]dns.RR, int) {
	var answer []dns.RR
	name := q.Name
	for range 8 {
		exists, alias := false, ""
		for _, rr := range r.records {
			h := rr.Header()
			if !strings.EqualFold(h.Name, name) {
				continue
			}
			exists = true
			if h.Rrtype == q.Qtype {
				answer = append(answer, rr)
			} else if h.Rrtype == dns.TypeCNAME {
				alias = rr.(*dns.CNAME).Target
			}
		}
		if !exists {
			if len(answer) == 0 {
				return nil, dns.RcodeNameError
			}
			return answer, dns.RcodeNameError
		}
		if alias == "" || q.Qtype == dns.TypeCNAME {
			return answer, dns.RcodeSuccess
		}
		for _, rr := range r.records {
			if strings.EqualFold(rr.Header().Name, name) && rr.Header().Rrtype == dns.TypeCNAME {
				answer = append(answer, rr)
			}
		}
		name = alias
	}
	return answer, dns.RcodeSuccess
}

func (r *testResolver) count(network string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queries[network]
}

func splitForTest(s string) []string {
	var out []string
	for len(s) > 255 {
		out = append(out, s[:255])
		s = s[255:]
	}
	return append(out, s)
}

// listenBoth binds UDP and TCP on one free port of 127.0.0.1.
func listenBoth(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	udp, tcp, err := freeport.ListenBoth("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return udp, tcp
}

func mustNew(t *testing.T, addr string, timeout time.Duration) *Checker {
	t.Helper()
	c, err := New(addr, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheck(t *testing.T) {
	resolver := startResolver(t)
	checker := mustNew(t, resolver.addr, 5*time.Second)

	tests := []struct {
		name         string
		exp          Expectation
		wantStatus   Status
		wantObserved []string
	}{
		// CNAME
		{"cname verified", Expectation{KindCNAME, "tok-1._domainkey.good.test", "tok-1." + dkimHost}, StatusVerified, []string{"tok-1.dkim.mailyard.test"}},
		{"cname case and trailing dots", Expectation{KindCNAME, "Tok-2._DomainKey.Good.Test.", "tok-2." + dkimHost + "."}, StatusVerified, []string{"TOK-2.DKIM.MAILYARD.TEST"}},
		{"cname mismatch", Expectation{KindCNAME, "tok-1._domainkey.wrong.test", "tok-1." + dkimHost}, StatusMismatch, []string{"tok-1.dkim.other-provider.test"}},
		{"cname nxdomain", Expectation{KindCNAME, "tok-1._domainkey.absent.test", "tok-1." + dkimHost}, StatusPending, nil},
		{"cname nodata", Expectation{KindCNAME, "tok-1._domainkey.txtonly.test", "tok-1." + dkimHost}, StatusPending, nil},
		{"cname servfail", Expectation{KindCNAME, "tok-1._domainkey.servfail.test", "tok-1." + dkimHost}, StatusLookupFailed, nil},

		// SPF
		{"spf among other mechanisms and TXT records", Expectation{KindSPF, "mail.good.test", spfHost}, StatusVerified, []string{
			"google-site-verification=abc",
			"v=spf1 ip4:192.0.2.0/24 include:_spf.other.test include:SPF.Mailyard.Test. ~all",
		}},
		{"spf upper case with + qualifier", Expectation{KindSPF, "MAIL.UPPER.TEST", spfHost + "."}, StatusVerified, []string{"V=SPF1 +INCLUDE:spf.mailyard.test -all"}},
		{"spf through a CNAME", Expectation{KindSPF, "mail.alias.test", spfHost}, StatusVerified, []string{
			"google-site-verification=abc",
			"v=spf1 ip4:192.0.2.0/24 include:_spf.other.test include:SPF.Mailyard.Test. ~all",
		}},
		{"spf mismatch", Expectation{KindSPF, "mail.wrong.test", spfHost}, StatusMismatch, []string{"v=spf1 include:spf.other-provider.test ~all"}},
		{"spf softfail include is no pass", Expectation{KindSPF, "mail.softfail.test", spfHost}, StatusMismatch, []string{"v=spf1 ~include:spf.mailyard.test -all"}},
		{"an include after all is never evaluated", Expectation{KindSPF, "mail.allfirst.test", spfHost}, StatusMismatch, []string{"v=spf1 -all include:spf.mailyard.test"}},
		{"two spf records are a permanent error", Expectation{KindSPF, "mail.twospf.test", spfHost}, StatusMismatch, []string{
			"v=spf1 include:_spf.google.com -all", "v=spf1 include:spf.mailyard.test ~all",
		}},
		{"a tab after v=spf1 is not an SPF record (receivers discard it)", Expectation{KindSPF, "mail.tab.test", spfHost}, StatusPending, []string{"v=spf1\tinclude:spf.mailyard.test ~all"}},
		{"a tab between terms leaves one invalid term", Expectation{KindSPF, "mail.tabterm.test", spfHost}, StatusMismatch, []string{"v=spf1 include:spf.mailyard.test\t~all"}},
		{"spf10 is not an SPF record", Expectation{KindSPF, "mail.prefix.test", spfHost}, StatusPending, []string{"v=spf10 include:spf.mailyard.test"}},
		{"non-SPF TXT only", Expectation{KindSPF, "mail.txtonly.test", spfHost}, StatusPending, []string{"hello", "include:spf.mailyard.test"}},
		{"spf nxdomain", Expectation{KindSPF, "mail.absent.test", spfHost}, StatusPending, nil},
		{"spf nodata", Expectation{KindSPF, "mail.null.test", spfHost}, StatusPending, nil},
		{"spf servfail", Expectation{KindSPF, "mail.servfail.test", spfHost}, StatusLookupFailed, nil},
		{"spf refused", Expectation{KindSPF, "mail.refused.test", spfHost}, StatusLookupFailed, nil},

		// MX
		{"mx among several", Expectation{KindMX, "mail.good.test", bounceHost}, StatusVerified, []string{"10 Bounces.Mailyard.Test", "20 backup.other.test"}},
		{"mx through a CNAME", Expectation{KindMX, "mail.alias.test.", "BOUNCES.mailyard.test."}, StatusVerified, []string{"10 Bounces.Mailyard.Test", "20 backup.other.test"}},
		{"mx mismatch", Expectation{KindMX, "mail.wrong.test", bounceHost}, StatusMismatch, []string{"10 mx.other-provider.test", "5 bounces.mailyard.test.other.test"}},
		{"null mx", Expectation{KindMX, "mail.null.test", bounceHost}, StatusMismatch, []string{"0 ."}},
		// Bounces go to the most preferred exchangers: ours behind another
		// one, or beside one at the same preference, does not get them all.
		{"mx only as a backup", Expectation{KindMX, "mail.lowpref.test", bounceHost}, StatusMismatch, []string{"10 mx.provider.test", "90 bounces.mailyard.test"}},
		{"mx tied with another", Expectation{KindMX, "mail.tie.test", bounceHost}, StatusMismatch, []string{"10 bounces.mailyard.test", "10 mx.provider.test"}},
		{"mx nxdomain", Expectation{KindMX, "mail.absent.test", bounceHost}, StatusPending, nil},
		{"mx nodata", Expectation{KindMX, "mail.upper.test", bounceHost}, StatusPending, nil},
		{"mx servfail", Expectation{KindMX, "mail.servfail.test", bounceHost}, StatusLookupFailed, nil},
	}
	exps := make([]Expectation, len(tests))
	for i, tt := range tests {
		exps[i] = tt.exp
	}
	results := checker.Check(context.Background(), exps)
	if len(results) != len(tests) {
		t.Fatalf("%d results for %d expectations", len(results), len(tests))
	}
	for i, tt := range tests {
		got := results[i]
		if got.Status != tt.wantStatus || !slices.Equal(got.Observed, tt.wantObserved) {
			t.Errorf("%s: got %s %q (err %v), want %s %q", tt.name, got.Status, got.Observed, got.Err, tt.wantStatus, tt.wantObserved)
		}
		if (got.Status == StatusLookupFailed) != (got.Err != nil) {
			t.Errorf("%s: status %s with error %v", tt.name, got.Status, got.Err)
		}
	}
	resolver.mu.Lock()
	defer resolver.mu.Unlock()
	if resolver.noRecurse {
		t.Error("a query was sent without the RD bit")
	}
}

func TestLookupFailureSaysWhatHappened(t *testing.T) {
	resolver := startResolver(t)
	checker := mustNew(t, resolver.addr, 5*time.Second)
	res := checker.Check(context.Background(), []Expectation{{KindSPF, "mail.servfail.test", spfHost}})[0]
	if res.Err == nil || !strings.Contains(res.Err.Error(), "SERVFAIL") || !strings.Contains(res.Err.Error(), "mail.servfail.test") {
		t.Errorf("error = %v, want one naming the name and SERVFAIL", res.Err)
	}
	if strings.Contains(res.Err.Error(), "127.0.0.1") {
		t.Errorf("error %q names the resolver's address, which customers see", res.Err)
	}
}

// A resolver that refuses the connection (nothing listens on its port) is
// reported without the addresses of either end.
func TestUnreachableResolverIsNotNamedByAddress(t *testing.T) {
	closed, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.LocalAddr().String()
	closed.Close()
	checker := mustNew(t, addr, 2*time.Second)
	res := checker.Check(context.Background(), []Expectation{{KindSPF, "mail.good.test", spfHost}})[0]
	if res.Status != StatusLookupFailed || res.Err == nil || strings.Contains(res.Err.Error(), "127.0.0.1") {
		t.Errorf("got %s (err %v), want lookup_failed without an address", res.Status, res.Err)
	}
}

func TestTruncatedAnswerIsRetriedOverTCP(t *testing.T) {
	resolver := startResolver(t)
	checker := mustNew(t, resolver.addr, 5*time.Second)
	res := checker.Check(context.Background(), []Expectation{{KindSPF, "mail.big.test", spfHost}})[0]
	if res.Status != StatusVerified || len(res.Observed) != 3 {
		t.Fatalf("got %s with %d values (err %v), want verified with 3", res.Status, len(res.Observed), res.Err)
	}
	if resolver.count("udp") != 1 || resolver.count("tcp") != 1 {
		t.Errorf("queries: %d over UDP, %d over TCP; want 1 and 1", resolver.count("udp"), resolver.count("tcp"))
	}
	spf := slices.IndexFunc(res.Observed, func(v string) bool { return strings.HasPrefix(v, "v=spf1 ip4:192.0.2.1") })
	if spf < 0 || strings.Contains(res.Observed[spf], `\`) || !strings.HasSuffix(res.Observed[spf], "~all") {
		t.Errorf("observed values %.60q are not the joined records", res.Observed)
	}
}

// A query whose datagram is lost is sent again within the check's time,
// rather than failing after the client library's 2 s: two lost in a row
// still verify within 5 s (tries of 1 s and 2 s, then an answer).
func TestLostDatagramsAreSentAgain(t *testing.T) {
	resolver := startResolver(t)
	resolver.mu.Lock()
	resolver.dropUDP = 2
	resolver.mu.Unlock()
	checker := mustNew(t, resolver.addr, 5*time.Second)
	res := checker.Check(context.Background(), []Expectation{{KindSPF, "mail.good.test", spfHost}})[0]
	if res.Status != StatusVerified {
		t.Fatalf("got %s (err %v), want verified after two lost queries", res.Status, res.Err)
	}
	if n := resolver.count("udp"); n != 3 {
		t.Errorf("%d queries over UDP, want 3", n)
	}
}

func TestSilentResolverTimesOut(t *testing.T) {
	// A socket nobody reads: queries vanish.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	const timeout = 300 * time.Millisecond
	checker := mustNew(t, silent.LocalAddr().String(), timeout)

	started := time.Now()
	results := checker.Check(context.Background(), []Expectation{
		{KindCNAME, "tok-1._domainkey.good.test", "tok-1." + dkimHost},
		{KindSPF, "mail.good.test", spfHost},
		{KindMX, "mail.good.test", bounceHost},
	})
	if elapsed := time.Since(started); elapsed > timeout+500*time.Millisecond {
		t.Errorf("Check took %s with a timeout of %s", elapsed, timeout)
	}
	for i, res := range results {
		if res.Status != StatusLookupFailed || res.Err == nil || !strings.Contains(res.Err.Error(), "no answer") {
			t.Errorf("result %d = %s (err %v), want lookup_failed with no answer", i, res.Status, res.Err)
		}
	}
}

func TestCheckHonoursContext(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	checker := mustNew(t, silent.LocalAddr().String(), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	started := time.Now()
	res := checker.Check(ctx, []Expectation{{KindMX, "mail.good.test", bounceHost}})[0]
	if elapsed := time.Since(started); elapsed > time.Second {
		t.Errorf("Check took %s with a context of 200ms", elapsed)
	}
	if res.Status != StatusLookupFailed {
		t.Errorf("status = %s, want lookup_failed", res.Status)
	}
}

func TestUnknownKindAndBadName(t *testing.T) {
	resolver := startResolver(t)
	checker := mustNew(t, resolver.addr, time.Second)
	results := checker.Check(context.Background(), []Expectation{
		{Kind: "a", Name: "good.test", Want: "192.0.2.1"},
		{Kind: KindMX, Name: "bad..name", Want: bounceHost},
	})
	for i, res := range results {
		if res.Status != StatusLookupFailed || res.Err == nil {
			t.Errorf("result %d = %s (err %v), want lookup_failed", i, res.Status, res.Err)
		}
	}
	if got := checker.Check(context.Background(), nil); len(got) != 0 {
		t.Errorf("Check of nothing = %v", got)
	}
}
