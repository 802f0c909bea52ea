package store

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
)

// Domain statuses.
const (
	DomainPending  = "pending"
	DomainVerified = "verified"
	DomainFailed   = "failed"
	// DomainDeleting: deleted for the customer (404, in no list, credentials
	// revoked) while its deletion workflow has not been confirmed started; a
	// repeated DELETE finishes it. DomainDeleted: that workflow runs or ran.
	DomainDeleting = "deleting"
	DomainDeleted  = "deleted"
)

// Record statuses.
const (
	RecordVerified = "verified"
	RecordPending  = "pending"
	RecordMismatch = "mismatch"
)

// Domain is a customer's sending domain.
type Domain struct {
	bun.BaseModel `bun:"table:domains"`

	ID                int64      `bun:"id,pk,autoincrement"`
	OrganizationID    int64      `bun:"organization_id,notnull"`
	Domain            string     `bun:"domain,notnull"`
	MailFromSubdomain string     `bun:"mailfrom_subdomain,notnull"`
	DKIMToken         string     `bun:"dkim_token,notnull"`
	Status            string     `bun:"status,notnull"`
	CreatedAt         time.Time  `bun:"created_at,notnull"`
	LastCheckedAt     *time.Time `bun:"last_checked_at"`
	VerifiedAt        *time.Time `bun:"verified_at"`
	// WindowStartedAt opens the current verification window (72 h by default);
	// Verify on a failed domain starts a new one.
	WindowStartedAt time.Time `bun:"window_started_at,notnull"`
	// DeletedAt is set when the customer deleted the domain; the row stays for
	// its deletion workflow and history.
	DeletedAt *time.Time `bun:"deleted_at"`

	// DKIM rotation settings and the state of the current or last rotation.
	RotationEnabled      bool       `bun:"dkim_rotation_enabled,notnull"`
	RotationIntervalDays int        `bun:"dkim_rotation_interval_days,notnull"`
	LastRotatedAt        *time.Time `bun:"dkim_last_rotated_at"`
	RotationStatus       *string    `bun:"dkim_rotation_status"`

	// Tracking settings (docs/tracking.md), all off by default.
	TrackOpens       bool `bun:"track_opens,notnull"`
	TrackClicks      bool `bun:"track_clicks,notnull"`
	TrackUnsubscribe bool `bun:"track_unsubscribe,notnull"`
	// TrackingDomain is the custom tracking domain; its CNAME is record
	// TrackingRecordPosition while it is set.
	TrackingDomain *string `bun:"tracking_domain"`
}

// RotationInProgress reports whether a DKIM rotation has begun and not finished.
func (d *Domain) RotationInProgress() bool {
	return d.RotationStatus != nil && (*d.RotationStatus == RotationWaitingForDNS || *d.RotationStatus == RotationSwitched)
}

// NextRotationAt is when automatic rotation next replaces the signing key: the
// interval after the last rotation (or after verification), nil when rotation is
// off or the domain is not verified.
func (d *Domain) NextRotationAt() *time.Time {
	if !d.RotationEnabled || d.Status != DomainVerified {
		return nil
	}
	from := d.VerifiedAt
	if d.LastRotatedAt != nil {
		from = d.LastRotatedAt
	}
	if from == nil {
		from = &d.CreatedAt
	}
	next := from.Add(time.Duration(d.RotationIntervalDays) * 24 * time.Hour)
	return &next
}

// Observed is what DNS answered for a record, stored as a JSON array.
type Observed []string

// Value implements driver.Valuer.
func (o Observed) Value() (driver.Value, error) {
	if o == nil {
		o = Observed{}
	}
	b, err := json.Marshal([]string(o))
	return string(b), err
}

// Scan implements sql.Scanner.
func (o *Observed) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	case nil:
		*o = Observed{}
		return nil
	default:
		return fmt.Errorf("observed: cannot scan %T", src)
	}
	return json.Unmarshal(b, (*[]string)(o))
}

// DomainRecord is one of the four records a customer creates, with the result of
// its last check.
type DomainRecord struct {
	bun.BaseModel `bun:"table:domain_records"`

	DomainID  int64      `bun:"domain_id,pk"`
	Position  int        `bun:"position,pk"`
	Purpose   string     `bun:"purpose,notnull"`
	Type      string     `bun:"type,notnull"`
	Name      string     `bun:"name,notnull"`
	Value     string     `bun:"value,notnull"`
	Status    string     `bun:"status,notnull"`
	Observed  Observed   `bun:"observed,notnull"`
	Error     *string    `bun:"error"`
	CheckedAt *time.Time `bun:"checked_at"`
}

// CreateDomain inserts a domain and its records in one transaction. A repeat of
// the same name in the organization, or a token collision, is domain_exists.
func (s *Store) CreateDomain(ctx context.Context, d *Domain, records []DomainRecord) error {
	if d.CreatedAt.IsZero() {
		d.CreatedAt = now()
	}
	if d.WindowStartedAt.IsZero() {
		d.WindowStartedAt = d.CreatedAt
	}
	if d.Status == "" {
		d.Status = DomainPending
	}
	if d.RotationIntervalDays == 0 {
		d.RotationEnabled, d.RotationIntervalDays = true, DefaultRotationIntervalDays
	}
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(d).Returning("id").Exec(ctx); err != nil {
			return err
		}
		if len(records) == 0 {
			return runCommitHook(ctx, tx)
		}
		for i := range records {
			records[i].DomainID = d.ID
			if records[i].Status == "" {
				records[i].Status = RecordPending
			}
		}
		if _, err := tx.NewInsert().Model(&records).Exec(ctx); err != nil {
			return err
		}
		return runCommitHook(ctx, tx)
	})
	if isUniqueViolation(err) {
		return apperr.Errorf(apperr.DomainExists, "domain", "domain %s was already added to this organization", d.Domain)
	}
	return err
}

// ListDomains returns a page of an organization's domains that are not deleted, oldest (lowest id)
// first, and whether more follow. Page.After is a domain id (int64).
func (s *Store) ListDomains(ctx context.Context, orgID int64, page Page) ([]Domain, bool, error) {
	domains := []Domain{}
	q := s.DB.NewSelect().Model(&domains).Where("organization_id = ?", orgID).Where("deleted_at IS NULL")
	more, err := scanPage(ctx, q, &domains, "id", Ascending, page)
	return domains, more, err
}

// DomainInOrganization reads a domain only if it belongs to the organization and
// is not deleted: a foreign or deleted id is ErrNotFound, exactly like an unknown
// one.
func (s *Store) DomainInOrganization(ctx context.Context, orgID, id int64) (*Domain, error) {
	d := new(Domain)
	err := s.DB.NewSelect().Model(d).Where("id = ?", id).Where("organization_id = ?", orgID).
		Where("deleted_at IS NULL").Scan(ctx)
	return d, notFound(err, "domain")
}

// DomainByID reads a domain, deleted or not, for the workers, which act on ids from workflows.
func (s *Store) DomainByID(ctx context.Context, id int64) (*Domain, error) {
	d := new(Domain)
	err := s.DB.NewSelect().Model(d).Where("id = ?", id).Scan(ctx)
	return d, notFound(err, "domain")
}

// DomainRecords returns a domain's records in their fixed order.
func (s *Store) DomainRecords(ctx context.Context, domainID int64) ([]DomainRecord, error) {
	records := []DomainRecord{}
	err := s.DB.NewSelect().Model(&records).Where("domain_id = ?", domainID).OrderExpr("position").Scan(ctx)
	return records, err
}

// RecordCheck is the outcome of checking one record. A failed look-up has Status ""
// and Error set: it keeps the record's previous status.
type RecordCheck struct {
	Position int
	// Name is the record's name when it was checked: a check of a record
	// replaced meanwhile (a new custom tracking domain) is not applied to
	// its successor. Empty matches any.
	Name     string
	Status   string
	Observed []string
	Error    string
}

// SaveChecks stores a round of checks and, when every record is verified, moves a
// pending domain to verified. A record whose look-up failed this round keeps its
// status, but the domain is not verified on it: a CNAME removed since it was
// verified, behind a failing resolver, would otherwise count. It returns the
// domain's status afterwards.
func (s *Store) SaveChecks(ctx context.Context, domainID int64, checks []RecordCheck, at time.Time) (string, error) {
	var status string
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// The domain's row first (this update locks it), then its
		// records: the order of every transaction that writes both
		// (SetDomainTracking replaces record 5 after locking the row).
		// Updating the records first deadlocked with a custom tracking
		// domain changed during a round.
		if _, err := tx.NewUpdate().Model((*Domain)(nil)).Set("last_checked_at = ?", at).Where("id = ?", domainID).Exec(ctx); err != nil {
			return err
		}
		for _, c := range checks {
			q := tx.NewUpdate().Model((*DomainRecord)(nil)).
				Set("checked_at = ?", at).
				Where("domain_id = ?", domainID).Where("position = ?", c.Position)
			if c.Name != "" {
				q = q.Where("name = ?", c.Name)
			}
			if c.Status == "" {
				q = q.Set("error = ?", c.Error)
			} else {
				q = q.Set("status = ?", c.Status).Set("observed = ?", Observed(c.Observed)).Set("error = NULL")
			}
			if _, err := q.Exec(ctx); err != nil {
				return err
			}
		}
		// The custom tracking domain's record is optional: the domain
		// sends without it.
		unverified, err := tx.NewSelect().Model((*DomainRecord)(nil)).
			Where("domain_id = ?", domainID).Where("status <> ?", RecordVerified).
			Where("position <> ?", TrackingRecordPosition).Count(ctx)
		if err != nil {
			return err
		}
		lookupFailed := slices.ContainsFunc(checks, func(c RecordCheck) bool {
			return c.Status == "" && c.Position != TrackingRecordPosition
		})
		if unverified == 0 && !lookupFailed {
			// Guarded: only a pending domain becomes verified, once.
			if _, err := tx.NewUpdate().Model((*Domain)(nil)).
				Set("status = ?", DomainVerified).Set("verified_at = ?", at).
				Where("id = ?", domainID).Where("status = ?", DomainPending).Exec(ctx); err != nil {
				return err
			}
		}
		return tx.NewSelect().Model((*Domain)(nil)).Column("status").Where("id = ?", domainID).Scan(ctx, &status)
	})
	return status, notFound(err, "domain")
}

// FailDomain ends the verification window that opened at windowStart without
// success: a domain still pending in it becomes failed. It returns the status
// afterwards: verified stays verified, and a domain whose window was reopened
// since (a later window_started_at) stays pending, since that window is
// another run's. A zero windowStart ends whichever window is open.
func (s *Store) FailDomain(ctx context.Context, domainID int64, windowStart time.Time) (string, error) {
	q := s.DB.NewUpdate().Model((*Domain)(nil)).Set("status = ?", DomainFailed).
		Where("id = ?", domainID).Where("status = ?", DomainPending)
	if !windowStart.IsZero() {
		q = q.Where("window_started_at <= ?", windowStart.UTC())
	}
	if _, err := q.Exec(ctx); err != nil {
		return "", err
	}
	var status string
	err := s.DB.NewSelect().Model((*Domain)(nil)).Column("status").Where("id = ?", domainID).Scan(ctx, &status)
	return status, notFound(err, "domain")
}

// ReopenDomain starts a new verification window for a failed domain.
func (s *Store) ReopenDomain(ctx context.Context, domainID int64, at time.Time) error {
	_, err := s.DB.NewUpdate().Model((*Domain)(nil)).
		Set("status = ?", DomainPending).Set("window_started_at = ?", at).
		Where("id = ?", domainID).Where("status = ?", DomainFailed).Exec(ctx)
	return err
}

// PendingDomainsWindowBetween returns up to limit pending, not deleted
// domains whose verification window opened in [from, to) (a new domain's
// opens when it is created, a failed domain's again when Verify domain
// reopens it), by id after afterID, so that a caller can walk them all.
func (s *Store) PendingDomainsWindowBetween(ctx context.Context, from, to time.Time, afterID int64, limit int) ([]Domain, error) {
	domains := []Domain{}
	err := s.DB.NewSelect().Model(&domains).
		Where("status = ?", DomainPending).Where("deleted_at IS NULL").
		Where("window_started_at >= ?", from).Where("window_started_at < ?", to).
		Where("id > ?", afterID).
		OrderExpr("id").Limit(int64(limit)).Scan(ctx)
	return domains, err
}

// DeleteDomain removes a domain and its records (used to undo an add whose
// onboarding could not start).
func (s *Store) DeleteDomain(ctx context.Context, domainID int64) error {
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// The row first, then the records, like every writer of both.
		if s.IsPostgres() {
			if _, err := tx.NewRaw("SELECT id FROM domains WHERE id = ? FOR UPDATE", domainID).Exec(ctx); err != nil {
				return err
			}
		}
		if _, err := tx.NewDelete().Model((*DomainRecord)(nil)).Where("domain_id = ?", domainID).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewDelete().Model((*Domain)(nil)).Where("id = ?", domainID).Exec(ctx)
		return err
	})
}

// DevRecordsAt returns the records Mailyard asked customers to create at name,
// for domains under .test that are not deleted: what `mailyard dev`'s DNS
// server answers so that such domains verify by themselves.
func (s *Store) DevRecordsAt(ctx context.Context, name string) ([]DomainRecord, error) {
	var records []DomainRecord
	err := s.DB.NewSelect().Model(&records).
		Join("JOIN domains AS d ON d.id = domain_record.domain_id").
		Where("domain_record.name = ?", name).
		Where("d.deleted_at IS NULL").
		Where("d.domain LIKE ?", "%.test").
		OrderExpr("domain_record.domain_id, domain_record.position").
		Scan(ctx)
	return records, err
}
