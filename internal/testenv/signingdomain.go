package testenv

import (
	"context"
	"testing"

	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
)

// SigningDomain stores a verified domain of the organization with an active
// DKIM key sealed by box, as onboarding leaves one, and returns its id.
func SigningDomain(t testing.TB, st *store.Store, box *secrets.Box, orgID int64, name string) int64 {
	t.Helper()
	ctx := context.Background()
	token, err := keys.RandomString(32, keys.LowerAlnum)
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: orgID, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: token, Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	k, err := keys.NewDKIMKey()
	if err != nil {
		t.Fatal(err)
	}
	selector := token + "-1"
	sealed, err := box.Seal(k.PrivatePKCS8, store.DKIMKeyBinding(selector, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertDKIMKeyIfAbsent(ctx, &store.DKIMKey{Selector: selector, DomainID: d.ID, Position: 1, Generation: 1,
		State: store.DKIMActive, Bits: keys.DKIMKeyBits, PrivateKeyEnc: sealed, PublicKey: k.PublicBase64}); err != nil {
		t.Fatal(err)
	}
	return d.ID
}
