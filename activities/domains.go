// Package activities holds the side effects of Mailyard's workflows. Each group is
// a struct whose fields are its dependencies, so tests hand in real or test ones.
package activities

import (
	"context"
	"fmt"
	"time"

	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/workflows/onboarding"
)

// Domains are the onboarding workflow's activities.
type Domains struct {
	Store     *store.Store
	Box       *secrets.Box
	Publisher dnspublish.Publisher
	Verifier  *verification.Verifier
	DKIMHost  string
	// Events emits the domain.* platform events to subscribed webhooks.
	Events *platformevents.Emitter
}

// Selector is the DKIM selector of a domain's key at position 1 or 2.
func Selector(token string, position int) string {
	return fmt.Sprintf("%s-%d", token, position)
}

// GenerateDKIMKeys makes the domain's two RSA-2048 key pairs, encrypts the private
// keys bound to their selector, and stores them. Idempotent: a retry keeps the
// keys a previous attempt stored. Nothing about the keys is returned.
func (a *Domains) GenerateDKIMKeys(ctx context.Context, domainID int64) error {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		return err
	}
	existing, err := a.Store.DKIMKeys(ctx, domainID)
	if err != nil {
		return err
	}
	have := map[int]bool{}
	for _, k := range existing {
		have[k.Position] = true
	}
	for position := 1; position <= 2; position++ {
		if have[position] {
			continue
		}
		pair, err := keys.NewDKIMKey()
		if err != nil {
			return err
		}
		selector := Selector(d.DKIMToken, position)
		enc, err := a.Box.Seal(pair.PrivatePKCS8, secrets.Binding("dkim_keys", selector))
		if err != nil {
			return err
		}
		if _, err := a.Store.InsertDKIMKeyIfAbsent(ctx, &store.DKIMKey{
			Selector: selector, DomainID: domainID, Position: position,
			PrivateKeyEnc: enc, PublicKey: pair.PublicBase64,
		}); err != nil {
			return err
		}
	}
	return nil
}

// PublishDKIMKeys publishes both public keys as TXT records at
// <selector>.<dkim host>, where the customer's CNAMEs point.
func (a *Domains) PublishDKIMKeys(ctx context.Context, domainID int64) error {
	ks, err := a.Store.DKIMKeys(ctx, domainID)
	if err != nil {
		return err
	}
	if len(ks) != 2 {
		return fmt.Errorf("domain %d has %d DKIM keys, want 2", domainID, len(ks))
	}
	records := make([]dnspublish.Record, len(ks))
	for i, k := range ks {
		records[i] = dnspublish.Record{Name: k.Selector + "." + a.DKIMHost, Value: keys.DKIMRecord(k.PublicKey)}
	}
	if err := a.Publisher.Publish(ctx, records); err != nil {
		return err
	}
	return a.Store.MarkDKIMKeysPublished(ctx, domainID, time.Now().UTC())
}

// CheckDNSRecords checks the customer's four records now and stores the result.
func (a *Domains) CheckDNSRecords(ctx context.Context, domainID int64) (onboarding.CheckResult, error) {
	out, err := a.Verifier.Verify(ctx, domainID)
	if err != nil {
		return onboarding.CheckResult{}, err
	}
	return onboarding.CheckResult{Status: out.Status, Verified: out.Verified, LookupFailed: out.LookupFailed, Total: out.Total}, nil
}

// FailDomain closes the verification window: a still-pending domain fails.
func (a *Domains) FailDomain(ctx context.Context, domainID int64) (string, error) {
	return a.Store.FailDomain(ctx, domainID)
}
