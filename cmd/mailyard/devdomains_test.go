package main

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/freeport"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/verification"
)

// In `mailyard dev` a domain under .test verifies by itself: the dev DNS server
// answers its customer names with the records Mailyard asked for, and verification
// asks that server. This runs the dev wiring (SQLite, the real DNS server, the
// real verifier and activities) without Temporal.
func TestDevDomainsUnderTestVerifyThemselves(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.SQLiteURL(t))
	cfg := &config.Config{DKIMHost: "dkim.mailyard.test", SPFHost: "spf.mailyard.test", BounceHost: "bounces.mailyard.test", MXPriority: 10}

	// The dev DNS server, as cmdDev starts it, on a free port.
	pc, ln, err := freeport.ListenBoth("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DNSAddr, cfg.DNSResolver = pc.LocalAddr().String(), pc.LocalAddr().String()
	srv := newDNSServer(cfg, st, slog.New(slog.DiscardHandler)).WithDevDomains(devRecords{st})
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, pc, ln) }()
	t.Cleanup(func() { stop(); <-done })

	verifier, err := verification.New(st, cfg.DNSResolver, cfg.SPFHost, cfg.BounceHost)
	if err != nil {
		t.Fatal(err)
	}
	box, _ := secrets.New(bytes.Repeat([]byte{1}, 32))
	a := &activities.Domains{Store: st, Box: box, Publisher: dnspublish.NewEmbedded(st), Verifier: verifier, DKIMHost: cfg.DKIMHost,
		Events: &platformevents.Emitter{Store: st, Runs: &deliveryruns.Runs{}}}

	org, err := st.CreateOrganizationWithKey(ctx, "dev", &store.APIKey{Label: "k", Username: "u", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	shop := addDomain(t, st, org.ID, "shop.test", "tok0shop0000000000000000000000ab")
	real := addDomain(t, st, org.ID, "shop.example", "tok0real0000000000000000000000ab")
	for _, d := range []*store.Domain{shop, real} {
		if err := a.GenerateDKIMKeys(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		if err := a.PublishDKIMKeys(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
	}

	res, err := a.CheckDNSRecords(ctx, shop.ID)
	if err != nil || res.Status != store.DomainVerified || res.Verified != 4 {
		t.Fatalf("shop.test: %+v %v", res, err)
	}
	// Only .test names are answered: a real domain stays pending.
	if res, err := a.CheckDNSRecords(ctx, real.ID); err != nil || res.Status != store.DomainPending || res.Verified != 0 {
		t.Fatalf("shop.example: %+v %v", res, err)
	}
	// A rotation sees the standby key through the CNAME, as on a real resolver.
	visible, err := a.ConfirmDKIMStandby(ctx, shop.ID)
	if err != nil || !visible {
		t.Fatalf("standby key through the dev CNAME: %v %v", visible, err)
	}
	// A deleted .test domain is no longer answered.
	if _, err := st.DeleteDomainForCustomer(ctx, org.ID, shop.ID); err != nil {
		t.Fatal(err)
	}
	if recs, err := st.DevRecordsAt(ctx, shop.MailFromSubdomain); err != nil || len(recs) != 0 {
		t.Fatalf("records of a deleted dev domain: %v %v", recs, err)
	}
}

func addDomain(t *testing.T, st *store.Store, orgID int64, name, token string) *store.Domain {
	t.Helper()
	d := &store.Domain{OrganizationID: orgID, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: token, WindowStartedAt: time.Now()}
	err := st.CreateDomain(context.Background(), d, []store.DomainRecord{
		{Position: 1, Purpose: "DKIM CNAME 1", Type: "CNAME", Name: token + "-1._domainkey." + name, Value: token + "-1.dkim.mailyard.test"},
		{Position: 2, Purpose: "DKIM CNAME 2", Type: "CNAME", Name: token + "-2._domainkey." + name, Value: token + "-2.dkim.mailyard.test"},
		{Position: 3, Purpose: "SPF", Type: "TXT", Name: "mail." + name, Value: "v=spf1 include:spf.mailyard.test ~all"},
		{Position: 4, Purpose: "MX (bounce routing)", Type: "MX", Name: "mail." + name, Value: "10 bounces.mailyard.test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
