// Package activities holds the side effects of Mailyard's workflows. Each group is
// a struct whose fields are its dependencies, so tests hand in real or test ones.
package activities

import (
	"context"
	"fmt"
	"time"

	"github.com/mailyard/mailyard/internal/dkimname"
	"github.com/mailyard/mailyard/internal/dnspublish"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/workflows/onboarding"
)

// Domains are the activities of a domain's workflows: onboarding, DKIM rotation
// and deletion.
type Domains struct {
	Store     *store.Store
	Box       *secrets.Box
	Publisher dnspublish.Publisher
	Verifier  *verification.Verifier
	DKIMHost  string
	// Events announces domain transitions to subscribed webhooks.
	Events *platformevents.Emitter
	// Rotations starts a verified domain's rotation workflow.
	Rotations RotationStarter
}

// RotationStarter starts (or joins) a domain's DKIM rotation workflow.
type RotationStarter interface {
	StartRotation(ctx context.Context, orgID, domainID int64) error
}

// GenerateDKIMKeys makes the domain's two RSA-2048 key pairs, encrypts the private
// keys bound to their row, and stores them. Idempotent: a retry keeps the keys a
// previous attempt stored. Nothing about the keys is returned.
func (a *Domains) GenerateDKIMKeys(ctx context.Context, domainID int64) error {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		// The API takes back a domain whose onboarding seemed not to start;
		// if it did start, the run ends here instead of retrying for ever.
		return goneOr(domainID, err)
	}
	existing, err := a.Store.CurrentDKIMKeys(ctx, domainID)
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
		if _, err := a.newKey(ctx, d.ID, dkimname.Selector(d.DKIMToken, position), position, 1); err != nil {
			return err
		}
	}
	return nil
}

// newKey generates and stores generation gen of a selector's key unless it
// exists, and returns the stored key.
func (a *Domains) newKey(ctx context.Context, domainID int64, selector string, position, gen int) (*store.DKIMKey, error) {
	pair, err := keys.NewDKIMKey()
	if err != nil {
		return nil, err
	}
	enc, err := a.Box.Seal(pair.PrivatePKCS8, store.DKIMKeyBinding(selector, gen))
	if err != nil {
		return nil, err
	}
	return a.Store.InsertDKIMKeyIfAbsent(ctx, &store.DKIMKey{
		Selector: selector, DomainID: domainID, Position: position, Generation: gen,
		State: store.DKIMPublishing, Bits: keys.DKIMKeyBits, PrivateKeyEnc: enc, PublicKey: pair.PublicBase64,
	})
}

// PublishDKIMKeys publishes both public keys as TXT records at
// <selector>.<dkim host>, where the customer's CNAMEs point; then key 1 is the
// active key and key 2 the standby.
func (a *Domains) PublishDKIMKeys(ctx context.Context, domainID int64) error {
	if _, err := a.Store.DomainByID(ctx, domainID); err != nil {
		return goneOr(domainID, err)
	}
	ks, err := a.Store.CurrentDKIMKeys(ctx, domainID)
	if err != nil {
		return err
	}
	if len(ks) != 2 {
		return fmt.Errorf("domain %d has %d DKIM keys, want 2", domainID, len(ks))
	}
	if err := a.Publisher.Publish(ctx, a.records(ks...)); err != nil {
		return err
	}
	return a.Store.MarkOnboardingKeysPublished(ctx, domainID, time.Now().UTC().Truncate(time.Microsecond))
}

// records are the TXT records that publish keys.
func (a *Domains) records(ks ...store.DKIMKey) []dnspublish.Record {
	records := make([]dnspublish.Record, len(ks))
	for i, k := range ks {
		records[i] = dnspublish.Record{Name: dkimname.KeyName(k.Selector, a.DKIMHost), Value: keys.DKIMRecord(k.PublicKey)}
	}
	return records
}

// CheckDNSRecords checks the customer's four records now and stores the result.
func (a *Domains) CheckDNSRecords(ctx context.Context, domainID int64) (onboarding.CheckResult, error) {
	out, err := a.Verifier.Verify(ctx, domainID)
	if err != nil {
		return onboarding.CheckResult{}, err
	}
	return onboarding.CheckResult{Status: out.Status, Verified: out.Verified, LookupFailed: out.LookupFailed, Total: out.Total}, nil
}

// FailDomain closes the verification window that opened at windowStart: a
// domain still pending in it fails, and domain.failed is announced (once per
// window). A window reopened since (Verify domain on the failed domain, while
// this activity was retried) is left open. windowStart is zero in activities
// scheduled by runs from before it was passed: they close whichever window
// is open.
func (a *Domains) FailDomain(ctx context.Context, domainID int64, windowStart time.Time) (string, error) {
	status, err := a.Store.FailDomain(ctx, domainID, windowStart)
	if err != nil || status != store.DomainFailed {
		return status, err
	}
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("domain.failed:%d:%d", d.ID, d.WindowStartedAt.UnixMicro())
	return status, a.announce(ctx, d, eventtype.DomainFailed, key, "")
}

// DomainVerified announces a verified domain (domain.verified, once) and starts
// its DKIM rotation workflow. A domain deleted meanwhile is left alone.
func (a *Domains) DomainVerified(ctx context.Context, domainID int64) error {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil || d.Status != store.DomainVerified {
		return err
	}
	if err := a.announce(ctx, d, eventtype.DomainVerified, fmt.Sprintf("domain.verified:%d", d.ID), ""); err != nil {
		return err
	}
	return a.Rotations.StartRotation(ctx, d.OrganizationID, d.ID)
}
