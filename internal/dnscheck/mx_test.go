package dnscheck_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/dnscheck"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMX(t *testing.T) {
	zone := testenv.StartDNSZone(t)
	for _, rr := range []string{
		"several.test. 60 IN MX 20 backup.several.test.",
		"several.test. 60 IN MX 10 Primary.Several.Test.",
		"several.test. 60 IN MX 20 other.several.test.",
		"null.test. 60 IN MX 0 .",
		"aonly.test. 60 IN A 192.0.2.7",
		"dotamong.test. 60 IN MX 0 .",
		"dotamong.test. 60 IN MX 10 mx.dotamong.test.",
	} {
		zone.Add(t, rr)
	}
	c, err := dnscheck.New(zone.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	several := []dnscheck.MXHost{{"Primary.Several.Test", 10}, {"backup.several.test", 20}, {"other.several.test", 20}}
	tests := []struct {
		domain   string
		want     []dnscheck.MXHost
		wantNull bool
	}{
		{"several.test", several, false},
		{"null.test", nil, true},
		{"aonly.test", nil, false},  // NODATA: implicit MX is the caller's job
		{"absent.test", nil, false}, // NXDOMAIN
		{"dotamong.test", []dnscheck.MXHost{{"mx.dotamong.test", 10}}, false},
	}
	for _, tt := range tests {
		hosts, null, err := c.MX(context.Background(), tt.domain)
		if err != nil || null != tt.wantNull || !slices.Equal(hosts, tt.want) {
			t.Errorf("MX(%s) = %v, %v, %v; want %v, %v, nil", tt.domain, hosts, null, err, tt.want, tt.wantNull)
		}
	}
	if _, _, err := c.MX(context.Background(), "bad..name"); err == nil {
		t.Error("MX of an invalid name gave no error")
	}
}

func TestAddrs(t *testing.T) {
	zone := testenv.StartDNSZone(t)
	for _, rr := range []string{
		"both.test. 60 IN A 192.0.2.1",
		"both.test. 60 IN AAAA 2001:db8::1",
		"both.test. 60 IN A 192.0.2.2",
		"v6.test. 60 IN AAAA 2001:db8::2",
		"txt.test. 60 IN TXT \"hello\"",
	} {
		zone.Add(t, rr)
	}
	c, err := dnscheck.New(zone.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	both := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::1")}
	tests := []struct {
		host string
		want []netip.Addr
	}{
		{"both.test", both},
		{"v6.test", []netip.Addr{netip.MustParseAddr("2001:db8::2")}},
		{"txt.test", nil},
		{"absent.test", nil},
	}
	for _, tt := range tests {
		got, err := c.Addrs(context.Background(), tt.host)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Addrs(%s) = %v, %v; want %v", tt.host, got, err, tt.want)
		}
	}
}

func TestMXAndAddrsReportResolverFailure(t *testing.T) {
	// A socket nobody reads: queries vanish and the Checker's timeout ends
	// the look-up, which must then be an error, never "no records".
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c, err := dnscheck.New(silent.LocalAddr().String(), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if hosts, null, err := c.MX(context.Background(), "example.test"); err == nil || null || hosts != nil {
		t.Errorf("MX = %v, %v, %v; want an error", hosts, null, err)
	} else if !strings.Contains(err.Error(), "no answer") || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("MX error %q does not say there was no answer, or names the resolver's address", err)
	}
	if addrs, err := c.Addrs(context.Background(), "example.test"); err == nil || addrs != nil {
		t.Errorf("Addrs = %v, %v; want an error", addrs, err)
	}
	if elapsed := time.Since(started); elapsed > 2*time.Second {
		t.Errorf("look-ups took %s with a timeout of 300ms", elapsed)
	}
}
