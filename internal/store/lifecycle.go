package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
)

// DefaultRotationIntervalDays is how often a domain's DKIM key rotates unless
// the customer says otherwise (README "Domain lifecycle").
const DefaultRotationIntervalDays = 180

// DKIM rotation statuses, stored on the domain (README "Domain lifecycle").
const (
	// RotationWaitingForDNS: the standby key is not yet seen through the
	// customer's CNAME.
	RotationWaitingForDNS = "waiting_for_dns"
	// RotationSwitched: the standby key signs; the old key stays published.
	RotationSwitched = "switched"
	// RotationDone: the old selector holds a fresh, published standby key.
	RotationDone = "done"
)

// Errors of the domain lifecycle (the API's rotate answers them too, for what
// the rotation workflow refuses).
var (
	ErrDomainNotVerified  = &apperr.Error{Code: apperr.DomainNotVerified, Resource: "domain", Message: "the domain is not verified"}
	ErrRotationInProgress = &apperr.Error{Code: apperr.RotationInProgress, Resource: "domain", Message: "a DKIM rotation of this domain is in progress"}
)

// lockDomain reads a domain inside tx, locking its row on PostgreSQL so that
// lifecycle steps of one domain take turns (SQLite's immediate transactions
// already serialise writers). NO KEY UPDATE still excludes every other
// update or delete of the row, but not the foreign key checks (KEY SHARE)
// of rows inserted for the domain meanwhile (emails, DKIM keys, records);
// the steps change no key column (id, dkim_token).
func (s *Store) lockDomain(ctx context.Context, tx bun.Tx, id int64) (*Domain, error) {
	d := new(Domain)
	q := tx.NewSelect().Model(d).Where("id = ?", id)
	if s.IsPostgres() {
		q = q.For("NO KEY UPDATE")
	}
	return d, notFound(q.Scan(ctx), "domain")
}

// inLiveDomainTx runs fn in a transaction with the domain's row locked; a
// deleted domain is ErrNotFound.
func (s *Store) inLiveDomainTx(ctx context.Context, id int64, fn func(context.Context, bun.Tx, *Domain) error) error {
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		d, err := s.lockDomain(ctx, tx, id)
		if err != nil {
			return err
		}
		if d.DeletedAt != nil {
			return apperr.NotFoundf("domain")
		}
		return fn(ctx, tx, d)
	})
}

// DeleteDomainForCustomer takes a domain away from its organization in one
// transaction: it leaves every list and answers 404 from then on, and every
// credential scoped to it is revoked (the next request with one gets 401, on
// every API process, because keys are read from the database on each request),
// and the certificates of its custom tracking domain are deleted.
// The domain is left "deleting" until ConfirmDomainDeleted; calling this again
// for a domain still deleting returns it unchanged, so a DELETE whose workflow
// did not start can be repeated.
func (s *Store) DeleteDomainForCustomer(ctx context.Context, orgID, id int64) (*Domain, error) {
	var d *Domain
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		if d, err = s.lockDomain(ctx, tx, id); err != nil {
			return err
		}
		if d.OrganizationID != orgID || (d.DeletedAt != nil && d.Status != DomainDeleting) {
			return apperr.NotFoundf("domain")
		}
		if d.Status == DomainDeleting {
			return nil
		}
		at := now()
		d.Status, d.DeletedAt = DomainDeleting, &at
		if _, err := tx.NewUpdate().Model(d).Column("status", "deleted_at").WherePK().Exec(ctx); err != nil {
			return err
		}
		if d.TrackingDomain != nil {
			// Its custom tracking domain is no longer served; its
			// certificates go as they go when it is removed.
			if err := forgetCertificates(ctx, tx, *d.TrackingDomain, d.ID); err != nil {
				return err
			}
		}
		_, err = tx.NewUpdate().Model((*APIKey)(nil)).
			Set("status = ?", KeyRevoked).Set("revoked_at = ?", at).
			Where("sending_domain_id = ?", id).Where("status = ?", KeyActive).
			Exec(ctx)
		return err
	})
	return d, err
}

// DeletingDomainsBefore returns up to limit domains deleted for their
// customer before the time given whose deletion workflow was never
// confirmed started (Temporal was unreachable during the DELETE), oldest
// first.
func (s *Store) DeletingDomainsBefore(ctx context.Context, before time.Time, limit int) ([]Domain, error) {
	domains := []Domain{}
	err := s.DB.NewSelect().Model(&domains).Where("status = ?", DomainDeleting).Where("deleted_at < ?", before).
		OrderExpr("deleted_at").Limit(int64(limit)).Scan(ctx)
	return domains, err
}

// ConfirmDomainDeleted records that the domain's deletion workflow is running.
func (s *Store) ConfirmDomainDeleted(ctx context.Context, id int64) error {
	_, err := s.DB.NewUpdate().Model((*Domain)(nil)).Set("status = ?", DomainDeleted).
		Where("id = ?", id).Where("status = ?", DomainDeleting).Exec(ctx)
	return err
}

// UpdateRotationSettings changes a domain's automatic rotation; nil leaves a
// setting as it is. It returns the domain afterwards.
func (s *Store) UpdateRotationSettings(ctx context.Context, orgID, id int64, enabled *bool, intervalDays *int) (*Domain, error) {
	q := s.DB.NewUpdate().Model((*Domain)(nil)).
		Where("id = ?", id).Where("organization_id = ?", orgID).Where("deleted_at IS NULL")
	if enabled != nil {
		q = q.Set("dkim_rotation_enabled = ?", *enabled)
	}
	if intervalDays != nil {
		q = q.Set("dkim_rotation_interval_days = ?", *intervalDays)
	}
	if enabled != nil || intervalDays != nil {
		if _, err := q.Exec(ctx); err != nil {
			return nil, err
		}
	}
	return s.DomainInOrganization(ctx, orgID, id)
}

// DKIMRotation is a rotation's progress as the workflow sees it: statuses and
// selectors, nothing secret.
type DKIMRotation struct {
	Status          string
	ActiveSelector  string
	StandbySelector string
}

// rotationOf reads the selectors of a domain's active and standby keys.
func rotationOf(ctx context.Context, db bun.IDB, d *Domain) (DKIMRotation, error) {
	var ks []DKIMKey
	if err := db.NewSelect().Model(&ks).Column("selector", "state").Where("domain_id = ?", d.ID).
		Where("state IN (?)", bun.List([]string{DKIMActive, DKIMStandby})).Scan(ctx); err != nil {
		return DKIMRotation{}, err
	}
	r := DKIMRotation{}
	if d.RotationStatus != nil {
		r.Status = *d.RotationStatus
	}
	for _, k := range ks {
		if k.State == DKIMActive {
			r.ActiveSelector = k.Selector
		} else {
			r.StandbySelector = k.Selector
		}
	}
	if r.ActiveSelector == "" || r.StandbySelector == "" {
		return r, ErrNoDKIMKey
	}
	return r, nil
}

// BeginRotation marks a rotation of a verified domain as started (waiting for
// the standby key in DNS) and returns its selectors. It is idempotent: for a
// rotation already under way it returns that rotation unchanged.
func (s *Store) BeginRotation(ctx context.Context, domainID int64) (DKIMRotation, error) {
	var r DKIMRotation
	err := s.inLiveDomainTx(ctx, domainID, func(ctx context.Context, tx bun.Tx, d *Domain) error {
		if !d.RotationInProgress() {
			if d.Status != DomainVerified {
				return ErrDomainNotVerified
			}
			status := RotationWaitingForDNS
			d.RotationStatus = &status
			if _, err := tx.NewUpdate().Model(d).Column("dkim_rotation_status").WherePK().Exec(ctx); err != nil {
				return err
			}
		}
		var err error
		r, err = rotationOf(ctx, tx, d)
		return err
	})
	return r, err
}

// SwitchActiveKey makes the standby key sign and the active key the standby
// (still published), in one transaction. Repeating it after the switch returns
// the rotation unchanged instead of switching back.
func (s *Store) SwitchActiveKey(ctx context.Context, domainID int64) (DKIMRotation, error) {
	var r DKIMRotation
	err := s.inLiveDomainTx(ctx, domainID, func(ctx context.Context, tx bun.Tx, d *Domain) error {
		if d.RotationStatus != nil && *d.RotationStatus == RotationWaitingForDNS {
			if _, err := tx.NewUpdate().Model((*DKIMKey)(nil)).
				Set("state = CASE WHEN state = ? THEN ? ELSE ? END", DKIMActive, DKIMStandby, DKIMActive).
				Where("domain_id = ?", domainID).Where("state IN (?)", bun.List([]string{DKIMActive, DKIMStandby})).
				Exec(ctx); err != nil {
				return err
			}
			at, status := now(), RotationSwitched
			d.LastRotatedAt, d.RotationStatus = &at, &status
			if _, err := tx.NewUpdate().Model(d).Column("dkim_last_rotated_at", "dkim_rotation_status").WherePK().Exec(ctx); err != nil {
				return err
			}
		}
		var err error
		r, err = rotationOf(ctx, tx, d)
		return err
	})
	return r, err
}

// FinishRotation puts the published replacement key in place of the standby key
// of its selector: the old key is retired and its private key erased, the
// replacement becomes the standby, and the rotation is done. Repeating it is
// harmless.
func (s *Store) FinishRotation(ctx context.Context, domainID, replacementID int64) error {
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		d, err := s.lockDomain(ctx, tx, domainID)
		if err != nil {
			return err
		}
		if d.RotationStatus == nil || *d.RotationStatus != RotationSwitched {
			return nil
		}
		repl := new(DKIMKey)
		if err := tx.NewSelect().Model(repl).Where("id = ?", replacementID).Where("domain_id = ?", domainID).Scan(ctx); err != nil {
			return notFound(err, "DKIM key")
		}
		at := now()
		if _, err := tx.NewUpdate().Model((*DKIMKey)(nil)).
			Set("state = ?", DKIMRetired).Set("private_key_enc = NULL").Set("retired_at = ?", at).
			Where("selector = ?", repl.Selector).Where("state = ?", DKIMStandby).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewUpdate().Model((*DKIMKey)(nil)).
			Set("state = ?", DKIMStandby).Set("published_at = COALESCE(published_at, ?)", at).
			Where("id = ?", replacementID).Where("state = ?", DKIMPublishing).Exec(ctx); err != nil {
			return err
		}
		_, err = tx.NewUpdate().Model((*Domain)(nil)).Set("dkim_rotation_status = ?", RotationDone).
			Where("id = ?", domainID).Exec(ctx)
		return err
	})
}

// CurrentDKIMRotation reads a domain's rotation status and the selectors of its
// active and standby keys.
func (s *Store) CurrentDKIMRotation(ctx context.Context, domainID int64) (DKIMRotation, error) {
	d, err := s.DomainByID(ctx, domainID)
	if err != nil {
		return DKIMRotation{}, err
	}
	return rotationOf(ctx, s.DB, d)
}
