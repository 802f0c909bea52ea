package activities_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/dnscheck"
	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/verification"
)

// domainActivities are the real activities over a real PostgreSQL database and a
// real DNS zone on loopback as the resolver.
func domainActivities(t *testing.T, resolver string) (*activities.Domains, *store.Store, *store.Domain) {
	t.Helper()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	box, err := secrets.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	checker, err := dnscheck.New(resolver, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Domains{
		Store: st, Box: box, Publisher: dnspublish.NewEmbedded(st), DKIMHost: "dkim.mailyard.test",
		// No webhook subscribes in these tests, so no delivery workflow is started.
		Events:   &platformevents.Emitter{Store: st, Runs: &deliveryruns.Runs{}},
		Verifier: &verification.Verifier{Store: st, Checker: checker, SPFHost: "spf.mailyard.test", BounceHost: "bounces.mailyard.test"},
	}
	ctx := context.Background()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "k", Username: "u", Prefix: "p", Digest: []byte("digest-" + t.Name()), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	token := "tok0123456789abcdefghijklmnopqrs"
	d := &store.Domain{OrganizationID: org.ID, Domain: "example.com", MailFromSubdomain: "mail.example.com", DKIMToken: token}
	if err := st.CreateDomain(ctx, d, []store.DomainRecord{
		{Position: 1, Purpose: "DKIM CNAME 1", Type: "CNAME", Name: token + "-1._domainkey.example.com", Value: token + "-1.dkim.mailyard.test"},
		{Position: 2, Purpose: "DKIM CNAME 2", Type: "CNAME", Name: token + "-2._domainkey.example.com", Value: token + "-2.dkim.mailyard.test"},
		{Position: 3, Purpose: "SPF", Type: "TXT", Name: "mail.example.com", Value: "v=spf1 include:spf.mailyard.test ~all"},
		{Position: 4, Purpose: "MX (bounce routing)", Type: "MX", Name: "mail.example.com", Value: "10 bounces.mailyard.test"},
	}); err != nil {
		t.Fatal(err)
	}
	return a, st, d
}

// A domain the API took back (its onboarding seemed not to start, but did)
// ends the run's key steps with a non-retryable error, instead of retrying
// them for ever.
func TestKeyStepsOfATakenBackDomainEnd(t *testing.T) {
	zone := testenv.StartDNSZone(t)
	a, st, d := domainActivities(t, zone.Addr)
	if err := st.DeleteDomain(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	for name, step := range map[string]func(context.Context, int64) error{"generate": a.GenerateDKIMKeys, "publish": a.PublishDKIMKeys} {
		var appErr *temporal.ApplicationError
		if err := step(context.Background(), d.ID); !errors.As(err, &appErr) || !appErr.NonRetryable() {
			t.Errorf("%s for a deleted domain: %v, want a non-retryable error", name, err)
		}
	}
}

func TestGenerateAndPublishDKIMKeys(t *testing.T) {
	zone := testenv.StartDNSZone(t)
	a, st, d := domainActivities(t, zone.Addr)
	ctx := context.Background()

	if err := a.GenerateDKIMKeys(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	first, _ := st.CurrentDKIMKeys(ctx, d.ID)
	if len(first) != 2 || first[0].Selector != d.DKIMToken+"-1" || first[1].Selector != d.DKIMToken+"-2" {
		t.Fatalf("keys %+v", first)
	}
	for _, k := range first {
		der, err := a.Box.Open(k.PrivateKeyEnc, secrets.Binding("dkim_keys", k.Selector))
		if err != nil || len(der) < 1000 {
			t.Fatalf("private key of %s does not decrypt: %v", k.Selector, err)
		}
		if bytes.Contains(k.PrivateKeyEnc, der[:32]) {
			t.Fatal("private key stored in clear")
		}
	}
	// Bound to its row: key 1's ciphertext does not open as key 2's.
	if _, err := a.Box.Open(first[0].PrivateKeyEnc, secrets.Binding("dkim_keys", first[1].Selector)); !errors.Is(err, secrets.ErrDecrypt) {
		t.Fatalf("ciphertext opens under another selector: %v", err)
	}

	// A retried activity keeps the keys it made.
	if err := a.GenerateDKIMKeys(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	again, _ := st.CurrentDKIMKeys(ctx, d.ID)
	if again[0].PublicKey != first[0].PublicKey || again[1].PublicKey != first[1].PublicKey {
		t.Fatal("retry replaced the keys")
	}

	for i := 0; i < 2; i++ { // publishing twice is harmless
		if err := a.PublishDKIMKeys(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range first {
		txt, err := st.LookupTXT(ctx, k.Selector+".dkim.mailyard.test")
		if err != nil || len(txt) != 1 || txt[0] != "v=DKIM1; k=rsa; p="+k.PublicKey {
			t.Fatalf("published %s: %v %v", k.Selector, txt, err)
		}
	}
	published, _ := st.CurrentDKIMKeys(ctx, d.ID)
	if published[0].PublishedAt == nil {
		t.Fatal("published_at not recorded")
	}
}

func TestCheckDNSRecordsAgainstARealZone(t *testing.T) {
	zone := testenv.StartDNSZone(t)
	a, st, d := domainActivities(t, zone.Addr)
	ctx := context.Background()
	tok := d.DKIMToken

	// Nothing yet: pending.
	res, err := a.CheckDNSRecords(ctx, d.ID)
	if err != nil || res.Status != "pending" || res.Verified != 0 || res.Total != 4 {
		t.Fatalf("empty zone: %+v %v", res, err)
	}
	// CNAME 1 right, CNAME 2 wrong, SPF without our include, MX missing.
	zone.Add(t, tok+"-1._domainkey.example.com. 60 IN CNAME "+tok+"-1.dkim.mailyard.test.")
	zone.Add(t, tok+"-2._domainkey.example.com. 60 IN CNAME elsewhere.example.net.")
	zone.Add(t, `mail.example.com. 60 IN TXT "v=spf1 include:_spf.google.com ~all"`)
	res, _ = a.CheckDNSRecords(ctx, d.ID)
	if res.Status != "pending" || res.Verified != 1 {
		t.Fatalf("partial zone: %+v", res)
	}
	recs, _ := st.DomainRecords(ctx, d.ID)
	want := []string{"verified", "mismatch", "mismatch", "pending"}
	for i, r := range recs {
		if r.Status != want[i] || r.CheckedAt == nil {
			t.Fatalf("record %d: %s (checked %v), want %s", i+1, r.Status, r.CheckedAt, want[i])
		}
	}
	if got := strings.Join(recs[1].Observed, ","); got != "elsewhere.example.net" {
		t.Fatalf("observed %q", got)
	}

	// A second zone with everything right: verified, and the domain with it.
	good := testenv.StartDNSZone(t)
	good.Add(t, tok+"-1._domainkey.example.com. 60 IN CNAME "+tok+"-1.dkim.mailyard.test.")
	good.Add(t, tok+"-2._domainkey.example.com. 60 IN CNAME "+strings.ToUpper(tok)+"-2.DKIM.mailyard.test.")
	good.Add(t, `mail.example.com. 60 IN TXT "v=spf1 ip4:192.0.2.0/24 include:spf.mailyard.test -all"`)
	good.Add(t, `mail.example.com. 60 IN TXT "google-site-verification=abc"`)
	good.Add(t, "mail.example.com. 60 IN MX 10 bounces.mailyard.test.")
	a.Verifier.Checker, _ = dnscheck.New(good.Addr, 2*time.Second)
	res, _ = a.CheckDNSRecords(ctx, d.ID)
	if res.Status != "verified" || res.Verified != 4 {
		t.Fatalf("full zone: %+v", res)
	}
	if dom, _ := st.DomainByID(ctx, d.ID); dom.Status != "verified" || dom.VerifiedAt == nil || dom.LastCheckedAt == nil {
		t.Fatalf("domain after full check: %+v", dom)
	}
	// The window closing later leaves a verified domain verified.
	if status, _ := a.FailDomain(ctx, d.ID, d.WindowStartedAt); status != "verified" {
		t.Fatalf("FailDomain on verified: %s", status)
	}
}

func TestLookupFailureKeepsStatus(t *testing.T) {
	// A resolver that never answers.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	a, st, d := domainActivities(t, silent.LocalAddr().String())
	ctx := context.Background()
	res, err := a.CheckDNSRecords(ctx, d.ID)
	if err != nil || res.LookupFailed != 4 || res.Status != "pending" {
		t.Fatalf("silent resolver: %+v %v", res, err)
	}
	recs, _ := st.DomainRecords(ctx, d.ID)
	for _, r := range recs {
		if r.Status != "pending" || r.Error == nil || r.CheckedAt == nil {
			t.Fatalf("record after failed look-up: %+v", r)
		}
	}
	if status, _ := a.FailDomain(ctx, d.ID, time.Time{}); status != "failed" {
		t.Fatalf("FailDomain on pending: %s", status)
	}
}

// FailDomain closes the window its run was given, not one opened since:
// Verify domain reopens a failed domain while the activity that failed it
// is retried (its domain.failed did not go out). Before, the retry failed
// the new window at once and announced a second domain.failed.
func TestFailDomainClosesOnlyItsWindow(t *testing.T) {
	a, st, d := domainActivities(t, "127.0.0.1:1")
	ctx := context.Background()
	failedEvents := func() int64 {
		t.Helper()
		n, err := st.DB.NewSelect().Model((*store.PlatformEvent)(nil)).Where("event_type = ?", "domain.failed").Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if status, err := a.FailDomain(ctx, d.ID, d.WindowStartedAt); err != nil || status != store.DomainFailed || failedEvents() != 1 {
		t.Fatalf("closing the window: %s, %v, %d events", status, err, failedEvents())
	}
	reopened := d.WindowStartedAt.Add(72 * time.Hour)
	if err := st.ReopenDomain(ctx, d.ID, reopened); err != nil {
		t.Fatal(err)
	}
	if status, err := a.FailDomain(ctx, d.ID, d.WindowStartedAt); err != nil || status != store.DomainPending || failedEvents() != 1 {
		t.Fatalf("the old window's retry: %s, %v, %d events; want the new window pending", status, err, failedEvents())
	}
	if status, err := a.FailDomain(ctx, d.ID, reopened); err != nil || status != store.DomainFailed || failedEvents() != 2 {
		t.Fatalf("closing the new window: %s, %v, %d events", status, err, failedEvents())
	}
}
