package verification_test

import (
	"context"
	"net"
	"testing"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/verification"
)

// Each record check is counted by record kind and result, through a real
// resolver and database.
func TestChecksAreCounted(t *testing.T) {
	zone := testenv.StartDNSZone(t)
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	ctx := context.Background()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "k", Username: "u", Prefix: "p", Digest: []byte("digest"), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	tok := "tok0123456789abcdefghijklmnopqrs"
	d := &store.Domain{OrganizationID: org.ID, Domain: "example.com", MailFromSubdomain: "mail.example.com", DKIMToken: tok}
	if err := st.CreateDomain(ctx, d, []store.DomainRecord{
		{Position: 1, Purpose: "DKIM CNAME 1", Type: "CNAME", Name: tok + "-1._domainkey.example.com", Value: tok + "-1.dkim.mailyard.test"},
		{Position: 2, Purpose: "DKIM CNAME 2", Type: "CNAME", Name: tok + "-2._domainkey.example.com", Value: tok + "-2.dkim.mailyard.test"},
		{Position: 3, Purpose: "SPF", Type: "TXT", Name: "mail.example.com", Value: "v=spf1 include:spf.mailyard.test ~all"},
		{Position: 4, Purpose: "MX (bounce routing)", Type: "MX", Name: "mail.example.com", Value: "10 bounces.mailyard.test"},
	}); err != nil {
		t.Fatal(err)
	}
	zone.Add(t, tok+"-1._domainkey.example.com. 60 IN CNAME "+tok+"-1.dkim.mailyard.test.")
	zone.Add(t, `mail.example.com. 60 IN TXT "v=spf1 include:_spf.google.com ~all"`)

	v, err := verification.New(st, zone.Addr, "spf.mailyard.test", "bounces.mailyard.test")
	if err != nil {
		t.Fatal(err)
	}
	series := []string{
		`mailyard_verification_checks_total{record="cname",result="verified"}`,
		`mailyard_verification_checks_total{record="cname",result="pending"}`,
		`mailyard_verification_checks_total{record="spf",result="mismatch"}`,
		`mailyard_verification_checks_total{record="mx",result="pending"}`,
		`mailyard_verification_checks_total{record="mx",result="lookup_failed"}`,
	}
	before := testenv.ScrapeProcess(t)
	if out, err := v.Verify(ctx, d.ID); err != nil || out.Verified != 1 {
		t.Fatalf("verify: %+v %v", out, err)
	}
	// A resolver that never answers: every look-up fails.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	v, _ = verification.New(st, silent.LocalAddr().String(), "spf.mailyard.test", "bounces.mailyard.test")
	if out, err := v.Verify(ctx, d.ID); err != nil || out.LookupFailed != 4 {
		t.Fatalf("verify with a silent resolver: %+v %v", out, err)
	}
	after := testenv.ScrapeProcess(t)
	for _, s := range series {
		if got := testenv.Sample(t, after, s) - testenv.Sample(t, before, s); got != 1 {
			t.Errorf("%s went up by %v, want 1", s, got)
		}
	}
	testenv.CheckMetrics(t, []byte(after))
}
