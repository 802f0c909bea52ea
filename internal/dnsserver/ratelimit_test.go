package dnsserver

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/testenv"
)

// A client network gets its rate per second, after a burst of as many;
// past it, one limited answer in two is truncated and the other dropped,
// and the bucket fills again with time.
func TestResponseLimiterPerNetwork(t *testing.T) {
	l := newResponseLimiter(5)
	now := time.Unix(1_700_000_000, 0)
	client := netip.MustParseAddr("198.51.100.7")
	for i := range 5 {
		if got := l.decide(client, now); got != answerFully {
			t.Fatalf("answer %d within the burst: %v", i+1, got)
		}
	}
	// Its neighbour in the same /24 shares the bucket.
	neighbour := netip.MustParseAddr("198.51.100.200")
	want := []limitAction{answerTruncated, answerDropped, answerTruncated, answerDropped}
	for i, w := range want {
		if got := l.decide(neighbour, now); got != w {
			t.Fatalf("limited answer %d: %v, want %v", i+1, got, w)
		}
	}
	// Another network, and the same network as an IPv4-mapped address of
	// a dual-stack socket, are counted as they should be.
	if got := l.decide(netip.MustParseAddr("198.51.101.7"), now); got != answerFully {
		t.Fatalf("another /24: %v", got)
	}
	if got := l.decide(netip.MustParseAddr("::ffff:198.51.100.9"), now); got == answerFully {
		t.Fatal("an IPv4-mapped address escaped its network's limit")
	}
	// A fifth of a second later, one more answer is due.
	if got := l.decide(client, now.Add(200*time.Millisecond)); got != answerFully {
		t.Fatalf("after 200 ms: %v", got)
	}
	// IPv6 clients are counted by /56.
	v6 := netip.MustParseAddr("2001:db8:0:aa00::1")
	for range 5 {
		l.decide(v6, now)
	}
	if got := l.decide(netip.MustParseAddr("2001:db8:0:aaff::2"), now); got == answerFully {
		t.Fatal("another address of the same /56 was not limited")
	}
	if got := l.decide(netip.MustParseAddr("2001:db8:0:ab00::1"), now); got != answerFully {
		t.Fatalf("another /56: %v", got)
	}
	// Loopback is never limited.
	for range 20 {
		if got := l.decide(netip.MustParseAddr("127.0.0.1"), now); got != answerFully {
			t.Fatalf("loopback: %v", got)
		}
	}
}

// The table of networks is bounded: when it is full, networks that have
// been quiet are forgotten, and a network that finds no room is answered
// truncated or not at all, never in full.
func TestResponseLimiterTableIsBounded(t *testing.T) {
	l := newResponseLimiter(1)
	now := time.Unix(1_700_000_000, 0)
	network := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(10 + i>>16), byte(i >> 8), byte(i), 1})
	}
	for i := range maxLimitedNetworks {
		l.decide(network(i), now)
	}
	if got := l.decide(network(maxLimitedNetworks), now); got == answerFully {
		t.Fatal("a network beyond the full table was answered in full")
	}
	if len(l.networks) != maxLimitedNetworks {
		t.Fatalf("%d networks tracked, want %d", len(l.networks), maxLimitedNetworks)
	}
	// A second on, every bucket is full again: the sweep makes room.
	later := now.Add(time.Second)
	if got := l.decide(network(maxLimitedNetworks), later); got != answerFully {
		t.Fatalf("after the sweep: %v", got)
	}
	if len(l.networks) != 1 {
		t.Fatalf("%d networks after the sweep, want 1", len(l.networks))
	}
}

// Over real UDP, a client past its rate gets empty truncated answers (with
// the OPT record of its EDNS query) and silence, and its answers over TCP
// are not limited.
func TestResponseRateLimitOverUDP(t *testing.T) {
	value := dkimValue(t, 2048)
	name := "abc-1." + zone + "."
	srv := startConfigured(t, &fakeSource{records: map[string][]string{"abc-1." + zone: {value}}}, func(s *Server) {
		s.WithResponseRateLimit(3)
		s.limiter.unlimited = func(netip.Addr) bool { return false }
	})
	full, truncated, silent := 0, 0, 0
	c := &dns.Client{Net: "udp", Timeout: 300 * time.Millisecond, UDPSize: ednsUDPSize}
	for range 9 {
		msg := question(name, dns.TypeTXT)
		msg.SetEdns0(ednsUDPSize, false)
		resp, _, err := c.Exchange(msg, srv.addr)
		switch {
		case err != nil:
			silent++
		case resp.Truncated && len(resp.Answer) == 0:
			if resp.IsEdns0() == nil {
				t.Fatal("a truncated answer to an EDNS query without its OPT record (RFC 6891 §7)")
			}
			truncated++
		case len(resp.Answer) == 1:
			full++
		default:
			t.Fatalf("unexpected answer %v", resp)
		}
	}
	// 3 within the burst (a fourth may be due if the loop is slow), then
	// every other answer truncated.
	if full < 3 || full > 4 || truncated < 2 || silent < 2 || full+truncated+silent != 9 {
		t.Fatalf("%d full, %d truncated, %d silent", full, truncated, silent)
	}
	resp := exchange(t, "tcp", srv.addr, question(name, dns.TypeTXT))
	if len(resp.Answer) != 1 || resp.Truncated {
		t.Fatalf("over TCP: %v", resp)
	}
}

// TCP is not rate limited, so its connections are capped: a client address
// past maxTCPConnectionsPerClient open connections has the next one closed
// at once, and once one of its connections closes it is answered again.
func TestTCPConnectionsPerClientAreCapped(t *testing.T) {
	name := "abc-1." + zone + "."
	srv := startConfigured(t, &fakeSource{records: map[string][]string{"abc-1." + zone: {"v=DKIM1; p=abc"}}}, func(s *Server) {
		s.tcpCounted = func(netip.Addr) bool { return true }
	})
	held := make([]*dns.Conn, maxTCPConnectionsPerClient)
	for i := range held {
		c, err := dns.Dial("tcp", srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A query answered on each: each connection was accepted and counted.
		if err := c.WriteMsg(question(name, dns.TypeTXT)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ReadMsg(); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		held[i] = c
	}
	extra, err := dns.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetDeadline(time.Now().Add(2 * time.Second))
	_ = extra.WriteMsg(question(name, dns.TypeTXT))
	if _, err := extra.ReadMsg(); err == nil {
		t.Fatalf("connection %d of one client was answered", maxTCPConnectionsPerClient+1)
	}
	held[0].Close()
	testenv.Eventually(t, 5*time.Second, "a connection once another closed", func() bool {
		c, err := dns.DialTimeout("tcp", srv.addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if c.WriteMsg(question(name, dns.TypeTXT)) != nil {
			return false
		}
		resp, err := c.ReadMsg()
		return err == nil && len(resp.Answer) == 1
	})
}
