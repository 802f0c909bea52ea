package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// The store's refusals are typed: they carry the code the API answers, the
// resource and a message a client may read, and the old sentinels still match
// them with errors.Is.
func TestRefusalsCarryCodeResourceAndMessage(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")

		expect := func(t *testing.T, err error, code, resource, message string, sentinel error) {
			t.Helper()
			var e *apperr.Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v, want %s", err, code)
			}
			if e.Code != code || e.Resource != resource || e.Message != message {
				t.Fatalf("got %+v, want %s %s %q", *e, code, resource, message)
			}
			if sentinel != nil && !errors.Is(err, sentinel) {
				t.Fatalf("%v does not match its sentinel %v", err, sentinel)
			}
		}

		_, err := st.DomainInOrganization(ctx, org, 424242)
		expect(t, err, apperr.NotFound, "domain", "domain not found", store.ErrNotFound)
		_, err = st.WebhookInOrganization(ctx, org, 424242)
		expect(t, err, apperr.NotFound, "webhook", "webhook not found", store.ErrNotFound)
		_, err = st.RevokeCredential(ctx, org, 424242)
		expect(t, err, apperr.NotFound, "credential", "credential not found", store.ErrNotFound)
		_, err = st.DeliveryOfWebhook(ctx, 424242, "0193a5c4-2f00-7000-8000-000000000001")
		expect(t, err, apperr.NotFound, "delivery", "delivery not found", store.ErrNotFound)

		d := store.Domain{OrganizationID: org, Domain: "dup.example", MailFromSubdomain: "mail.dup.example", DKIMToken: "tok1"}
		if err := st.CreateDomain(ctx, &d, nil); err != nil {
			t.Fatal(err)
		}
		again := store.Domain{OrganizationID: org, Domain: "dup.example", MailFromSubdomain: "mail.dup.example", DKIMToken: "tok2"}
		err = st.CreateDomain(ctx, &again, nil)
		expect(t, err, apperr.DomainExists, "domain", "domain dup.example was already added to this organization", nil)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			t.Fatalf("domain_exists matches another code's sentinel: %v", err)
		}

		err = st.CreateWebhook(ctx, &store.Webhook{OrganizationID: org, URL: "https://h.example/x", EventTypes: store.EventTypes{"delivered"}}, 0, sealID)
		expect(t, err, apperr.WebhookLimitReached, "webhook", "this organization already has 0 webhooks, the most it can have; delete one first", store.ErrLimitReached)

		// Database failures are not refusals: they stay untyped (a 500 or 503).
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := st.DomainInOrganization(cancelled, org, d.ID); err == nil || apperr.Code(err) != apperr.Internal {
			t.Fatalf("a cancelled query answered %v (code %q)", err, apperr.Code(err))
		}
	})
}
