package dnspublish

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/testenv"
)

const testZone = "dkim.mailyard.test"

// dkimValue returns a TXT value the size of a 2048-bit RSA DKIM key: the
// SubjectPublicKeyInfo is 294 bytes, 392 characters in base64.
func dkimValue(t *testing.T) string {
	t.Helper()
	spki := make([]byte, 294)
	if _, err := rand.Read(spki); err != nil {
		t.Fatal(err)
	}
	return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(spki)
}

func TestRFC2136AgainstBIND(t *testing.T) {
	bind := testenv.StartBIND(t, testZone)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pub, err := NewRFC2136(bind.Addr, bind.UpdateKey, testZone)
	if err != nil {
		t.Fatal(err)
	}
	key1, key2 := "abc-1."+testZone, "ABC-2."+testZone+"."
	long := dkimValue(t)
	if err := pub.Publish(ctx, []Record{{Name: key1, Value: long}, {Name: key2, Value: "v=DKIM1; k=rsa; p=short"}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	txt := queryTXT(t, bind.Addr, key1)
	if len(txt) != 1 || TXTValue(txt[0].Txt) != long {
		t.Fatalf("TXT %s = %v, want one record with the DKIM value", key1, txt)
	}
	if len(txt[0].Txt) != 2 {
		t.Errorf("the DKIM value is stored as %d character-strings, want 2", len(txt[0].Txt))
	}
	if got := queryTXT(t, bind.Addr, "abc-2."+testZone); len(got) != 1 || TXTValue(got[0].Txt) != "v=DKIM1; k=rsa; p=short" {
		t.Fatalf("TXT abc-2 = %v", got)
	}

	// Publishing the same records again is harmless.
	if err := pub.Publish(ctx, []Record{{Name: key1, Value: long}}); err != nil {
		t.Fatalf("Publish again: %v", err)
	}
	if got := queryTXT(t, bind.Addr, key1); len(got) != 1 {
		t.Fatalf("after publishing again there are %d records, want 1", len(got))
	}

	// A new value replaces the old one.
	replacement := dkimValue(t)
	if err := pub.Publish(ctx, []Record{{Name: key1, Value: replacement}}); err != nil {
		t.Fatalf("Publish replacement: %v", err)
	}
	if got := queryTXT(t, bind.Addr, key1); len(got) != 1 || TXTValue(got[0].Txt) != replacement {
		t.Fatalf("after replacement TXT = %v, want only the new value", got)
	}

	if err := pub.Unpublish(ctx, []string{key1, key2}); err != nil {
		t.Fatalf("Unpublish: %v", err)
	}
	for _, name := range []string{key1, "abc-2." + testZone} {
		if rcode := queryRcode(t, bind.Addr, name); rcode != dns.RcodeNameError {
			t.Errorf("after Unpublish %s answers %s, want NXDOMAIN", name, dns.RcodeToString[rcode])
		}
	}
	// Unpublishing again succeeds: the RRsets are already gone.
	if err := pub.Unpublish(ctx, []string{key1}); err != nil {
		t.Fatalf("Unpublish again: %v", err)
	}
}

func TestRFC2136RejectedUpdatesAgainstBIND(t *testing.T) {
	bind := testenv.StartBIND(t, testZone)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	record := []Record{{Name: "rejected-1." + testZone, Value: "v=DKIM1; p=x"}}

	tests := []struct {
		name      string
		tsig      string
		wantRcode int
		wantText  []string
	}{
		{
			name:      "wrong secret",
			tsig:      "mailyard-update:hmac-sha256:" + testenv.RandomSecret(t),
			wantRcode: dns.RcodeNotAuth,
			wantText:  []string{"NOTAUTH", "BADSIG", "check the TSIG secret"},
		},
		{
			name:      "unknown key",
			tsig:      "nobody:hmac-sha256:" + testenv.RandomSecret(t),
			wantRcode: dns.RcodeNotAuth,
			wantText:  []string{"NOTAUTH", "BADKEY"},
		},
		{
			name:      "key without update rights",
			tsig:      bind.OtherKey,
			wantRcode: dns.RcodeRefused,
			wantText:  []string{"REFUSED", "allow-update"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub, err := NewRFC2136(bind.Addr, tt.tsig, testZone)
			if err != nil {
				t.Fatal(err)
			}
			err = pub.Publish(ctx, record)
			t.Logf("Publish: %v", err)
			var updateErr *UpdateError
			if !errors.As(err, &updateErr) {
				t.Fatalf("Publish error = %v, want an *UpdateError", err)
			}
			if updateErr.Rcode != tt.wantRcode {
				t.Errorf("RCODE = %s, want %s", dns.RcodeToString[updateErr.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			for _, text := range tt.wantText {
				if !strings.Contains(err.Error(), text) {
					t.Errorf("error %q does not mention %q", err, text)
				}
			}
		})
	}
	if rcode := queryRcode(t, bind.Addr, record[0].Name); rcode != dns.RcodeNameError {
		t.Errorf("a rejected update changed the zone: %s answers %s", record[0].Name, dns.RcodeToString[rcode])
	}
}

func TestRFC2136UnreachableServer(t *testing.T) {
	// A listener that is closed at once: connections are refused.
	addr := testenv.FreeAddr(t)
	pub, err := NewRFC2136(addr, "k:hmac-sha256:"+testenv.RandomSecret(t), testZone)
	if err != nil {
		t.Fatal(err)
	}
	pub.Timeout = 2 * time.Second
	err = pub.Publish(context.Background(), []Record{{Name: "a." + testZone, Value: "v"}})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Publish to a closed port: error = %v, want one naming %s", err, addr)
	}
}

func queryTXT(t *testing.T, addr, name string) []*dns.TXT {
	t.Helper()
	resp := query(t, addr, name, dns.TypeTXT)
	var out []*dns.TXT
	for _, rr := range resp.Answer {
		if txt, ok := rr.(*dns.TXT); ok {
			out = append(out, txt)
		}
	}
	return out
}

func queryRcode(t *testing.T, addr, name string) int {
	t.Helper()
	return query(t, addr, name, dns.TypeTXT).Rcode
}

func query(t *testing.T, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	msg := new(dns.Msg)
	msg.SetQuestion(dns.Fqdn(name), qtype)
	client := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	resp, _, err := client.Exchange(msg, addr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return resp
}
