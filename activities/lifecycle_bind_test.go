package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// A domain's keys published to BIND with RFC 2136, rotated and deleted, with
// BIND stopped in the middle of the replacement and of the removal: each step
// fails while BIND is down, leaves nothing half-done, and completes once BIND is
// back. Real PostgreSQL, a real BIND 9, and a customer zone whose CNAMEs
// resolve into BIND's zone.
func TestRotationAndDeletionThroughBINDSurviveAnOutage(t *testing.T) {
	const dkimZone = "dkim.mailyard.test"
	bind := testenv.StartBIND(t, dkimZone)
	customer := testenv.StartDNSZone(t)
	customer.Forward(dkimZone, bind.Addr)
	a, st, d := domainActivities(t, customer.Addr)
	pub, err := dnspublish.NewRFC2136(bind.Addr, bind.UpdateKey, dkimZone)
	if err != nil {
		t.Fatal(err)
	}
	pub.Timeout = 2 * time.Second
	a.Publisher = pub
	ctx := context.Background()
	tok := d.DKIMToken
	sel1, sel2 := tok+"-1", tok+"-2"

	// Onboarded and verified.
	if err := a.GenerateDKIMKeys(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishDKIMKeys(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	customer.Add(t, sel1+"._domainkey.example.com. 300 IN CNAME "+sel1+"."+dkimZone+".")
	customer.Add(t, sel2+"._domainkey.example.com. 300 IN CNAME "+sel2+"."+dkimZone+".")
	customer.Add(t, `mail.example.com. 300 IN TXT "v=spf1 include:spf.mailyard.test ~all"`)
	customer.Add(t, "mail.example.com. 300 IN MX 10 bounces.mailyard.test.")
	if res, err := a.CheckDNSRecords(ctx, d.ID); err != nil || res.Status != store.DomainVerified {
		t.Fatalf("verification: %+v %v", res, err)
	}
	oldActive, _ := st.DKIMKeyInState(ctx, d.ID, store.DKIMActive)

	// Rotation: the standby key is seen through the customer's CNAME, then signs.
	if r, err := a.BeginDKIMRotation(ctx, d.ID); err != nil || r.Status != store.RotationWaitingForDNS || r.NextSelector != sel2 {
		t.Fatalf("begin: %+v %v", r, err)
	}
	if visible, err := a.ConfirmDKIMStandby(ctx, d.ID); err != nil || !visible {
		t.Fatalf("standby through the CNAME: %v %v", visible, err)
	}
	if r, err := a.SwitchDKIMKeys(ctx, d.ID); err != nil || r.ActiveSelector != sel2 {
		t.Fatalf("switch: %+v %v", r, err)
	}
	active, _ := st.DKIMKeyInState(ctx, d.ID, store.DKIMActive)
	if got := bindTXT(t, bind.Addr, sel2+"."+dkimZone); got != "v=DKIM1; k=rsa; p="+active.PublicKey {
		t.Fatalf("BIND serves %q at the active selector", got)
	}

	// BIND down during the replacement: it fails and nothing is half-switched.
	bind.Stop()
	if err := a.ReplaceDKIMKey(ctx, d.ID); err == nil {
		t.Fatal("replacement succeeded with BIND stopped")
	}
	dom, _ := st.DomainByID(ctx, d.ID)
	standby, _ := st.DKIMKeyInState(ctx, d.ID, store.DKIMStandby)
	if *dom.RotationStatus != store.RotationSwitched || standby.ID != oldActive.ID || standby.PrivateKeyEnc == nil {
		t.Fatalf("after a failed replacement: status %s, standby %+v", *dom.RotationStatus, standby)
	}
	bind.Start()
	if err := a.ReplaceDKIMKey(ctx, d.ID); err != nil {
		t.Fatalf("replacement after BIND came back: %v", err)
	}
	if err := a.ReplaceDKIMKey(ctx, d.ID); err != nil { // repeating is harmless
		t.Fatal(err)
	}
	dom, _ = st.DomainByID(ctx, d.ID)
	fresh, _ := st.DKIMKeyInState(ctx, d.ID, store.DKIMStandby)
	if *dom.RotationStatus != store.RotationDone || fresh.Selector != sel1 || fresh.Generation != 2 || fresh.PublicKey == oldActive.PublicKey {
		t.Fatalf("after the replacement: status %s, standby %+v", *dom.RotationStatus, fresh)
	}
	if got := bindTXT(t, bind.Addr, sel1+"."+dkimZone); got != "v=DKIM1; k=rsa; p="+fresh.PublicKey {
		t.Fatalf("BIND serves %q at the replaced selector", got)
	}

	// Deletion: BIND down while the records are removed, then back.
	if _, err := st.DeleteDomainForCustomer(ctx, d.OrganizationID, d.ID); err != nil {
		t.Fatal(err)
	}
	bind.Stop()
	if err := a.UnpublishDKIMKeys(ctx, d.ID); err == nil {
		t.Fatal("removal succeeded with BIND stopped")
	}
	bind.Start()
	if got := bindTXT(t, bind.Addr, sel2+"."+dkimZone); got == "" {
		t.Fatal("the key left BIND although the removal failed")
	}
	if err := a.UnpublishDKIMKeys(ctx, d.ID); err != nil {
		t.Fatalf("removal after BIND came back: %v", err)
	}
	for _, sel := range []string{sel1, sel2} {
		if rcode := bindRcode(t, bind.Addr, sel+"."+dkimZone); rcode != dns.RcodeNameError {
			t.Fatalf("%s answers %s after removal, want NXDOMAIN", sel, dns.RcodeToString[rcode])
		}
	}
	if err := a.EraseDKIMKeys(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	var withKeys int64
	withKeys, err = st.DB.NewSelect().Model((*store.DKIMKey)(nil)).Where("domain_id = ?", d.ID).Where("private_key_enc IS NOT NULL").Count(ctx)
	if err != nil || withKeys != 0 {
		t.Fatalf("%d private keys left after erasure: %v", withKeys, err)
	}
}

func bindExchange(t *testing.T, addr, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeTXT)
	in, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return in
}

func bindTXT(t *testing.T, addr, name string) string {
	t.Helper()
	in := bindExchange(t, addr, name)
	if len(in.Answer) == 0 {
		return ""
	}
	return dnspublish.TXTValue(in.Answer[0].(*dns.TXT).Txt)
}

func bindRcode(t *testing.T, addr, name string) int {
	t.Helper()
	return bindExchange(t, addr, name).Rcode
}
