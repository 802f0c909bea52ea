package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/egress"
)

// How a refused destination is expected to fail at dial time.
type dialFailure int

const (
	// refusedByGuard: the host resolves and the address guard refuses it.
	refusedByGuard dialFailure = iota
	// resolvesNowhere: a non-canonical numeric spelling that the resolver
	// does not read as an address; it must fail without connecting.
	resolvesNowhere
	// anyFailure: any error will do, as long as nothing is connected.
	anyFailure
)

type refusedDestination struct {
	host string // as written in a URL, brackets included for IPv6
	// literal is true when the address is visible in the URL, so creation
	// must refuse it already. Names are only refused at dial time.
	literal bool
	dial    dialFailure
}

// refusedDestinationRecords are served by the test DNS server: names that
// resolve to every kind of blocked address.
var refusedDestinationRecords = map[string][]string{
	"loopback.example.test":       {"127.0.0.1"},
	"loopback-other.example.test": {"127.53.0.1"},
	"loopback6.example.test":      {"::1"},
	"unspecified.example.test":    {"0.0.0.0"},
	"unspecified6.example.test":   {"::"},
	"private10.example.test":      {"10.0.0.1"},
	"private172.example.test":     {"172.16.5.4"},
	"private192.example.test":     {"192.168.0.10"},
	"metadata.example.test":       {"169.254.169.254"},
	"cgnat.example.test":          {"100.64.0.1"},
	"multicast.example.test":      {"224.0.0.1"},
	"documentation.example.test":  {"192.0.2.1"},
	"reserved.example.test":       {"240.0.0.1"},
	"ula.example.test":            {"fd00::1"},
	"linklocal6.example.test":     {"fe80::1"},
	"multicast6.example.test":     {"ff02::1"},
	"mapped.example.test":         {"::ffff:127.0.0.1"},
	"mapped-private.example.test": {"::ffff:10.0.0.1"},
	"nat64.example.test":          {"64:ff9b::a9fe:a9fe"},
	"sixtofour.example.test":      {"2002:7f00:1::"},
	"teredo.example.test":         {"2001::1"},
	"documentation6.example.test": {"2001:db8::1"},
	// Every address tried is checked, in both families.
	"dualstack.example.test": {"10.1.2.3", "fd00::2"},
}

var refusedDestinations = []refusedDestination{
	// Loopback, in many spellings.
	{host: "127.0.0.1", literal: true},
	{host: "127.255.255.254", literal: true},
	{host: "127.1", literal: true, dial: resolvesNowhere},
	{host: "0x7f.0.0.1", literal: true, dial: resolvesNowhere},
	{host: "0x7F000001", literal: true, dial: resolvesNowhere},
	{host: "2130706433", literal: true, dial: resolvesNowhere},
	{host: "017700000001", literal: true, dial: resolvesNowhere},
	{host: "0177.0.0.1", literal: true, dial: resolvesNowhere},
	{host: "127.000.000.001", literal: true, dial: resolvesNowhere},
	{host: "[::1]", literal: true},
	{host: "[0:0:0:0:0:0:0:1]", literal: true},
	{host: "[::ffff:127.0.0.1]", literal: true},
	{host: "[0:0:0:0:0:ffff:7f00:1]", literal: true},
	{host: "[::127.0.0.1]", literal: true},
	{host: "localhost", literal: true},
	{host: "LocalHost.", literal: true},
	{host: "foo.localhost", literal: true},
	// Full-width forms, which the HTTP client maps to ASCII before it
	// dials: creation judges them as mapped.
	{host: "\uff11\uff12\uff17.\uff10.\uff10.\uff11", literal: true},
	{host: "127\u30020\u30020\u30021", literal: true},
	{host: "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54", literal: true},
	// Unspecified, which connects to the local host.
	{host: "0.0.0.0", literal: true},
	{host: "0", literal: true, dial: resolvesNowhere},
	{host: "[::]", literal: true},
	// Private and shared.
	{host: "10.0.0.1", literal: true},
	{host: "172.16.0.1", literal: true},
	{host: "172.31.255.255", literal: true},
	{host: "192.168.1.1", literal: true},
	{host: "100.64.0.1", literal: true},
	{host: "100.127.255.254", literal: true},
	{host: "[fc00::1]", literal: true},
	{host: "[fd12:3456::1]", literal: true},
	{host: "[fec0::1]", literal: true},
	// Link-local and cloud metadata.
	{host: "169.254.169.254", literal: true},
	{host: "169.254.169.\uff12\uff15\uff14", literal: true},
	{host: "169.254.0.1", literal: true},
	{host: "[fe80::1]", literal: true},
	{host: "[fe80::1%25lo]", literal: true, dial: anyFailure},
	{host: "[::ffff:169.254.169.254]", literal: true},
	{host: "[::ffff:a9fe:a9fe]", literal: true},
	// Multicast, broadcast and reserved.
	{host: "224.0.0.1", literal: true},
	{host: "239.255.255.250", literal: true},
	{host: "255.255.255.255", literal: true},
	{host: "240.0.0.1", literal: true},
	{host: "[ff02::1]", literal: true},
	{host: "[ff05::1:3]", literal: true},
	// Documentation, benchmarking and protocol assignments.
	{host: "192.0.2.1", literal: true},
	{host: "198.51.100.7", literal: true},
	{host: "203.0.113.9", literal: true},
	{host: "198.18.0.1", literal: true},
	{host: "192.0.0.8", literal: true},
	{host: "192.88.99.1", literal: true},
	{host: "[2001:db8::1]", literal: true},
	{host: "[3fff::1]", literal: true},
	{host: "[100::1]", literal: true},
	// Translation forms that embed IPv4 addresses.
	{host: "[64:ff9b::7f00:1]", literal: true},
	{host: "[64:ff9b::a00:1]", literal: true},
	{host: "[64:ff9b::169.254.169.254]", literal: true},
	{host: "[64:ff9b:1::a00:1]", literal: true},
	{host: "[2002:7f00:1::]", literal: true},
	{host: "[2002:a9fe:a9fe::1]", literal: true},
	{host: "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", literal: true},
	{host: "[2001::1]", literal: true},
}

func init() {
	for _, name := range slices.Sorted(maps.Keys(refusedDestinationRecords)) {
		refusedDestinations = append(refusedDestinations, refusedDestination{host: name})
	}
}

// TestRefusedDestinations checks every destination twice: creation refuses
// what the URL shows, and the client refuses to connect at dial time even
// when creation could not know (names) or was bypassed. A canary listener
// on loopback, at the port every URL names, must see no connection.
func TestRefusedDestinations(t *testing.T) {
	if len(refusedDestinations) < 40 {
		t.Fatalf("only %d destinations", len(refusedDestinations))
	}
	resolver := startTestDNS(t, refusedDestinationRecords)
	can := startCanary(t)
	hook := &loopbackOnly{}
	client := NewClient(Policy{AllowHTTP: true}, WithResolver(resolver), WithTimeout(5*time.Second), withAfterGuard(hook.control))

	for _, dst := range refusedDestinations {
		t.Run(dst.host, func(t *testing.T) {
			httpURL := fmt.Sprintf("http://%s:%d/hook", dst.host, can.port)
			httpsURL := fmt.Sprintf("https://%s:%d/hook", dst.host, can.port)

			for _, c := range []struct {
				url string
				p   Policy
			}{{httpsURL, Policy{}}, {httpURL, Policy{AllowHTTP: true}}} {
				err := ValidateURL(c.url, c.p)
				switch {
				case dst.literal && err == nil:
					t.Errorf("ValidateURL(%q) accepted a special-purpose destination", c.url)
				case !dst.literal && err != nil:
					t.Errorf("ValidateURL(%q) = %v; a name is judged at dial time", c.url, err)
				}
			}

			out := Send(context.Background(), client, testDelivery(httpURL))
			if out.StatusCode != 0 || out.Verdict != Retryable || out.Error == "" {
				t.Fatalf("Send reached a receiver: %+v", out)
			}
			switch dst.dial {
			case refusedByGuard:
				if !strings.Contains(out.Error, egress.ErrBlockedAddress.Error()) {
					t.Errorf("dial error %q does not come from the address guard", out.Error)
				}
			case resolvesNowhere:
				if !strings.Contains(out.Error, "no such host") {
					t.Errorf("dial error %q: want no such host", out.Error)
				}
				if strings.Contains(out.Error, " on ") || strings.Contains(out.Error, "127.0.0.1") {
					t.Errorf("dial error %q names the resolver", out.Error)
				}
			}
			if passed := hook.take(); len(passed) > 0 {
				t.Errorf("the address guard let %v through", passed)
			}
		})
	}
	// Give a connection that slipped through time to be accepted.
	time.Sleep(50 * time.Millisecond)
	if n := can.conns.Load(); n != 0 {
		t.Fatalf("canary saw %d connections", n)
	}
}

// TestPrivateNetworksSwitch shows the operator switch at work: the same
// loopback receiver is refused by default and reachable when private
// networks are allowed.
func TestPrivateNetworksSwitch(t *testing.T) {
	rcv := startReceiver(t, nil)
	url := rcv.URL + "/hook"

	if err := ValidateURL(url, Policy{AllowHTTP: true}); err == nil {
		t.Error("ValidateURL accepted loopback without AllowPrivateNetworks")
	}
	if err := ValidateURL(url, Policy{AllowHTTP: true, AllowPrivateNetworks: true}); err != nil {
		t.Errorf("ValidateURL with AllowPrivateNetworks: %v", err)
	}
	if err := ValidateURL("http://localhost:8080/hook", Policy{AllowHTTP: true, AllowPrivateNetworks: true}); err != nil {
		t.Errorf("ValidateURL(localhost) with AllowPrivateNetworks: %v", err)
	}

	out := Send(context.Background(), NewClient(Policy{AllowHTTP: true}), testDelivery(url))
	if out.StatusCode != 0 || !strings.Contains(out.Error, egress.ErrBlockedAddress.Error()) {
		t.Errorf("default policy: %+v", out)
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Fatalf("receiver saw %d requests under the default policy", n)
	}

	out = Send(context.Background(), NewClient(Policy{AllowHTTP: true, AllowPrivateNetworks: true}), testDelivery(url))
	if out.Verdict != Success || out.StatusCode != 200 {
		t.Fatalf("AllowPrivateNetworks: %+v", out)
	}
	if n := rcv.requests.Load(); n != 1 {
		t.Fatalf("receiver saw %d requests, want 1", n)
	}
}

// TestHTTPRefusedUnlessAllowed: a client for the default policy refuses an
// http:// URL without connecting, even when the address is allowed.
func TestHTTPRefusedUnlessAllowed(t *testing.T) {
	rcv := startReceiver(t, nil)
	client := NewClient(Policy{AllowPrivateNetworks: true})
	out := Send(context.Background(), client, testDelivery(rcv.URL))
	if out.StatusCode != 0 || !strings.Contains(out.Error, "https://") {
		t.Fatalf("http:// under the default policy: %+v", out)
	}
	if n := rcv.requests.Load(); n != 0 {
		t.Fatalf("receiver saw %d requests", n)
	}
}

// legacyLoopbackSpellings are hosts that inet_aton-style resolvers
// (glibc's getaddrinfo among them) read as 127.0.0.1. Go's own resolver
// never queries all-digit names such as 127.1 or 2130706433 (they fail as
// no such host, see TestRefusedDestinations), so only the hexadecimal
// spellings can be answered by the test DNS server.
var legacyLoopbackSpellings = []string{"0x7f.0.0.1", "0x7f000001", "0x7f.1"}

// TestLegacySpellingsReadAsAddresses covers the system resolver that turns
// legacy spellings into 127.0.0.1: simulated by a DNS server answering
// them so, the address guard must still refuse the connection.
func TestLegacySpellingsReadAsAddresses(t *testing.T) {
	records := map[string][]string{}
	for _, h := range legacyLoopbackSpellings {
		records[h] = []string{"127.0.0.1"}
	}
	resolver := startTestDNS(t, records)
	can := startCanary(t)
	hook := &loopbackOnly{}
	client := NewClient(Policy{AllowHTTP: true}, WithResolver(resolver), withAfterGuard(hook.control))
	for _, h := range legacyLoopbackSpellings {
		out := Send(context.Background(), client, testDelivery(fmt.Sprintf("http://%s:%d/", h, can.port)))
		// Refused by the guard, and the log does not say where the name
		// led inside the network.
		if out.StatusCode != 0 || !strings.Contains(out.Error, egress.ErrBlockedAddress.Error()) || strings.Contains(out.Error, "127.0.0.1") {
			t.Errorf("%s: %+v", h, out)
		}
	}
	if passed := hook.take(); len(passed) > 0 {
		t.Errorf("the address guard let %v through", passed)
	}
	time.Sleep(50 * time.Millisecond)
	if n := can.conns.Load(); n != 0 {
		t.Fatalf("canary saw %d connections", n)
	}
}
