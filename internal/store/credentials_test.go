package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func newTestKey(t *testing.T, orgID int64, domainID *int64, label string, perms ...string) (*store.APIKey, string) {
	t.Helper()
	secret, err := keys.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	return keyauth.WithSecret(secret, &store.APIKey{
		OrganizationID: orgID, SendingDomainID: domainID, Label: label, Username: label + "@example.com",
		Permissions: perms}), secret
}

func TestCredentialsListAndRevoke(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		boot, _ := newTestKey(t, 0, nil, "boot", "admin")
		org, err := st.CreateOrganizationWithKey(ctx, "acme", boot)
		if err != nil {
			t.Fatal(err)
		}
		otherBoot, _ := newTestKey(t, 0, nil, "other-boot", "admin")
		other, err := st.CreateOrganizationWithKey(ctx, "other", otherBoot)
		if err != nil {
			t.Fatal(err)
		}
		dom := &store.Domain{OrganizationID: org.ID, Domain: "acme.example", MailFromSubdomain: "mail.acme.example", DKIMToken: "tok", Status: store.DomainVerified}
		if err := st.CreateDomain(ctx, dom, nil); err != nil {
			t.Fatal(err)
		}
		scoped, secret := newTestKey(t, org.ID, &dom.ID, "sender", "send", "stats")
		if err := st.CreateCredential(ctx, scoped); err != nil {
			t.Fatal(err)
		}
		if scoped.ID == 0 || scoped.Status != store.KeyActive {
			t.Fatalf("created %+v", scoped)
		}

		list, _, err := st.ActiveCredentials(ctx, org.ID, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].ID != boot.ID || list[1].ID != scoped.ID {
			t.Fatalf("list %+v", list)
		}
		if list[0].SendingDomain != nil {
			t.Fatalf("bootstrap key has domain %q", *list[0].SendingDomain)
		}
		if list[1].SendingDomain == nil || *list[1].SendingDomain != "acme.example" {
			t.Fatalf("scoped key domain %v", list[1].SendingDomain)
		}
		if got := list[1].Permissions; len(got) != 2 || got[0] != "send" || got[1] != "stats" {
			t.Fatalf("permissions %v", got)
		}

		// Another organization can neither see nor revoke the key.
		if _, err := st.RevokeCredential(ctx, other.ID, scoped.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("foreign revoke: %v", err)
		}
		revoked, err := st.RevokeCredential(ctx, org.ID, scoped.ID)
		if err != nil {
			t.Fatal(err)
		}
		if revoked.Status != store.KeyRevoked || revoked.RevokedAt == nil || revoked.Label != "sender" {
			t.Fatalf("revoked %+v", revoked)
		}
		if _, err := st.RevokeCredential(ctx, org.ID, scoped.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second revoke: %v", err)
		}
		if _, err := st.ActiveAPIKeyByDigest(ctx, keys.Digest(secret)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoked key still authenticates: %v", err)
		}
		if list, _, _ := st.ActiveCredentials(ctx, org.ID, store.Page{}); len(list) != 1 {
			t.Fatalf("revoked key still listed: %+v", list)
		}
	})
}

// Concurrent revocations of one key: exactly one wins.
func TestRevokeCredentialOnce(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		boot, _ := newTestKey(t, 0, nil, "boot", "admin")
		org, err := st.CreateOrganizationWithKey(ctx, "acme", boot)
		if err != nil {
			t.Fatal(err)
		}
		const racers = 8
		var wg sync.WaitGroup
		results := make(chan error, racers)
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := st.RevokeCredential(ctx, org.ID, boot.ID)
				results <- err
			}()
		}
		wg.Wait()
		close(results)
		won := 0
		for err := range results {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrNotFound):
				t.Fatalf("revoke: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d revocations succeeded, want 1", won)
		}
	})
}
