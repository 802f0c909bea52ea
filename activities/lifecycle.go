package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/mailyard/mailyard/internal/dkimname"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/rotation"
)

// errDomainGone ends a rotation whose domain was deleted or is not verified.
func errDomainGone(domainID int64) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("domain %d is deleted or not verified", domainID), rotation.ErrDomainGoneType, nil)
}

// goneOr maps the store's "this domain cannot rotate" errors to errDomainGone.
func goneOr(domainID int64, err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrDomainNotVerified) {
		return errDomainGone(domainID)
	}
	return err
}

// liveDomain reads a domain a rotation step acts on; a deleted one ends the
// rotation.
func (a *Domains) liveDomain(ctx context.Context, domainID int64) (*store.Domain, error) {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		return nil, goneOr(domainID, err)
	}
	if d.DeletedAt != nil {
		return nil, errDomainGone(domainID)
	}
	return d, nil
}

// LoadDKIMRotationPlan tells the rotation workflow when to rotate next.
func (a *Domains) LoadDKIMRotationPlan(ctx context.Context, domainID int64) (rotation.Plan, error) {
	d, err := a.Store.DomainByID(ctx, domainID)
	if errors.Is(err, store.ErrNotFound) {
		return rotation.Plan{}, nil
	}
	if err != nil {
		return rotation.Plan{}, err
	}
	plan := rotation.Plan{Active: d.DeletedAt == nil && d.Status == store.DomainVerified, Enabled: d.RotationEnabled}
	if next := d.NextRotationAt(); next != nil {
		plan.NextRotationAt = *next
	}
	if d.RotationStatus != nil {
		plan.Status = *d.RotationStatus
	}
	return plan, nil
}

// BeginDKIMRotation marks the rotation started and names its selectors.
func (a *Domains) BeginDKIMRotation(ctx context.Context, domainID int64) (rotation.Status, error) {
	r, err := a.Store.BeginRotation(ctx, domainID)
	if err != nil {
		return rotation.Status{}, goneOr(domainID, err)
	}
	return rotation.Status{Status: r.Status, ActiveSelector: r.ActiveSelector, NextSelector: r.StandbySelector}, nil
}

// ConfirmDKIMStandby reports whether the customer's
// <standby selector>._domainkey.<domain> resolves, through their CNAME, to the
// standby key, as a receiver verifying a signature would see it. A failed
// look-up is "not yet": the workflow checks again later.
func (a *Domains) ConfirmDKIMStandby(ctx context.Context, domainID int64) (bool, error) {
	d, err := a.liveDomain(ctx, domainID)
	if err != nil {
		return false, err
	}
	standby, err := a.Store.DKIMKeyInState(ctx, domainID, store.DKIMStandby)
	if err != nil {
		return false, err
	}
	values, err := a.Verifier.Checker.TXT(ctx, dkimname.CustomerName(standby.Selector, d.Domain))
	if err != nil {
		return false, nil
	}
	for _, v := range values {
		if p, ok := keys.DKIMRecordPublicKey(v); ok && p == standby.PublicKey {
			return true, nil
		}
	}
	return false, nil
}

// SwitchDKIMKeys makes the standby key sign and announces domain.dkim_rotated
// (once per rotation: the event is keyed by the key that became active).
func (a *Domains) SwitchDKIMKeys(ctx context.Context, domainID int64) (rotation.Status, error) {
	r, err := a.Store.SwitchActiveKey(ctx, domainID)
	if err != nil {
		return rotation.Status{}, goneOr(domainID, err)
	}
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		return rotation.Status{}, err
	}
	active, err := a.Store.DKIMKeyInState(ctx, domainID, store.DKIMActive)
	if err != nil {
		return rotation.Status{}, err
	}
	key := fmt.Sprintf("domain.dkim_rotated:%d:%d", d.ID, active.ID)
	if err := a.announce(ctx, d, eventtype.DomainDKIMRotated, key, r.ActiveSelector); err != nil {
		return rotation.Status{}, err
	}
	return rotation.Status{Status: r.Status, ActiveSelector: r.ActiveSelector, NextSelector: r.StandbySelector}, nil
}

// ReplaceDKIMKey gives the standby selector (the key that signed before the
// switch) a fresh key: generated, published in its place, then recorded as the
// standby while the old key is retired and its private key erased. Each part
// is idempotent, so a retry after a crash finishes the same replacement.
func (a *Domains) ReplaceDKIMKey(ctx context.Context, domainID int64) error {
	d, err := a.liveDomain(ctx, domainID)
	if err != nil {
		return err
	}
	if d.RotationStatus == nil || *d.RotationStatus != store.RotationSwitched {
		return nil // already replaced
	}
	replacement, err := a.Store.DKIMKeyInState(ctx, domainID, store.DKIMPublishing)
	if errors.Is(err, store.ErrNoDKIMKey) {
		var standby *store.DKIMKey
		if standby, err = a.Store.DKIMKeyInState(ctx, domainID, store.DKIMStandby); err == nil {
			replacement, err = a.newKey(ctx, domainID, standby.Selector, standby.Position, standby.Generation+1)
		}
	}
	if err != nil {
		return err
	}
	if err := a.Publisher.Publish(ctx, a.records(*replacement)); err != nil {
		return err
	}
	return a.Store.FinishRotation(ctx, domainID, replacement.ID)
}

// AnnounceDomainDeleted sends domain.deleted (once).
func (a *Domains) AnnounceDomainDeleted(ctx context.Context, domainID int64) error {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil || d.DeletedAt == nil {
		return err
	}
	return a.announce(ctx, d, eventtype.DomainDeleted, fmt.Sprintf("domain.deleted:%d", d.ID), "")
}

// UnpublishDKIMKeys removes every name a deleted domain's keys were published
// at. It refuses a domain that is not deleted, so no mistake can take a live
// domain's keys out of DNS.
func (a *Domains) UnpublishDKIMKeys(ctx context.Context, domainID int64) error {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		return err
	}
	if d.DeletedAt == nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("domain %d is not deleted", domainID), "DomainNotDeleted", nil)
	}
	selectors, err := a.Store.DKIMSelectors(ctx, domainID)
	if err != nil {
		return err
	}
	names := make([]string, len(selectors))
	for i, s := range selectors {
		names[i] = dkimname.KeyName(s, a.DKIMHost)
	}
	return a.Publisher.Unpublish(ctx, names)
}

// EraseDKIMKeys erases a deleted domain's private keys.
func (a *Domains) EraseDKIMKeys(ctx context.Context, domainID int64) error {
	d, err := a.Store.DomainByID(ctx, domainID)
	if err != nil {
		return err
	}
	if d.DeletedAt == nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("domain %d is not deleted", domainID), "DomainNotDeleted", nil)
	}
	return a.Store.EraseDKIMKeys(ctx, domainID)
}
