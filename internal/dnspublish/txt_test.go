package dnspublish

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestTXTStringsSplitsAt255Bytes(t *testing.T) {
	value := "v=DKIM1; k=rsa; p=" + strings.Repeat("A", 392)
	strs := TXTStrings(value)
	if len(strs) != 2 || len(strs[0]) != 255 || strings.Join(strs, "") != value {
		t.Fatalf("TXTStrings split %d bytes into %d strings of %v bytes", len(value), len(strs), lengths(strs))
	}
	if got := TXTStrings(""); len(got) != 1 || got[0] != "" {
		t.Errorf("TXTStrings(\"\") = %q, want one empty string", got)
	}
	if got := TXTStrings(strings.Repeat("x", 510)); len(got) != 2 {
		t.Errorf("510 bytes split into %d strings, want 2", len(got))
	}
}

// TestTXTRoundTrip packs and unpacks a record through miekg/dns, the way the
// values travel, including bytes that need escaping.
func TestTXTRoundTrip(t *testing.T) {
	values := []string{
		"v=DKIM1; k=rsa; p=" + strings.Repeat("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A", 13),
		`quote " and backslash \ and \065`,
		"tab\tnewline\nhigh\xff" + strings.Repeat(`\`, 300),
		"",
	}
	for _, value := range values {
		rr := &dns.TXT{Hdr: dns.RR_Header{Name: "a.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: TXTStrings(value)}
		msg := new(dns.Msg)
		msg.SetQuestion("a.example.", dns.TypeTXT)
		msg.Answer = []dns.RR{rr}
		packed, err := msg.Pack()
		if err != nil {
			t.Fatalf("pack %q: %v", value, err)
		}
		var back dns.Msg
		if err := back.Unpack(packed); err != nil {
			t.Fatal(err)
		}
		if got := TXTValue(back.Answer[0].(*dns.TXT).Txt); got != value {
			t.Errorf("round trip of %q gave %q", value, got)
		}
	}
}

func lengths(strs []string) []int {
	var out []int
	for _, s := range strs {
		out = append(out, len(s))
	}
	return out
}
