package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/uptrace/bun"
)

// TrackingRecordPosition is the position of the custom tracking domain's
// CNAME among a domain's records (docs/tracking.md): present only while a
// custom domain is set, and not needed for the domain itself to verify.
const TrackingRecordPosition = 5

// TrackingSettings is a change to a domain's tracking: nil fields stay as
// they are. CustomDomainSet with a nil CustomDomain removes the custom
// domain.
type TrackingSettings struct {
	Opens, Clicks, Unsubscribe *bool
	CustomDomainSet            bool
	CustomDomain               *string
	// CustomRecord is the custom domain's CNAME (when CustomDomain is set).
	CustomRecord *DomainRecord
}

// SetDomainTracking changes a domain's tracking settings and, when the
// custom domain changes, replaces its record, in one transaction; the same
// custom domain given again keeps its record and its verification. It
// decides on the domain's row as read, locked, inside the transaction (d
// may be stale: two changes at once each see the other's name) and leaves
// d as it stored it.
func (s *Store) SetDomainTracking(ctx context.Context, d *Domain, t TrackingSettings) error {
	cur := new(Domain)
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// The row first, then record 5: SaveChecks' order too.
		*cur = Domain{}
		sel := tx.NewSelect().Model(cur).Where("id = ?", d.ID)
		if s.IsPostgres() {
			sel = sel.For("NO KEY UPDATE")
		}
		if err := sel.Scan(ctx); err != nil {
			return notFound(err, "domain")
		}
		q := tx.NewUpdate().Model((*Domain)(nil)).Where("id = ?", d.ID)
		set := func(col string, v *bool, field *bool) {
			if v != nil {
				q = q.Set(col+" = ?", *v)
				*field = *v
			}
		}
		set("track_opens", t.Opens, &cur.TrackOpens)
		set("track_clicks", t.Clicks, &cur.TrackClicks)
		set("track_unsubscribe", t.Unsubscribe, &cur.TrackUnsubscribe)
		old := cur.TrackingDomain
		changed := t.CustomDomainSet && deref(t.CustomDomain) != deref(old)
		if changed {
			q = q.Set("tracking_domain = ?", t.CustomDomain)
			cur.TrackingDomain = t.CustomDomain
		}
		if t.Opens == nil && t.Clicks == nil && t.Unsubscribe == nil && !changed {
			return nil
		}
		if _, err := q.Exec(ctx); err != nil {
			return err
		}
		if !changed {
			return nil
		}
		if old != nil {
			if err := forgetCertificates(ctx, tx, *old, d.ID); err != nil {
				return err
			}
		}
		if _, err := tx.NewDelete().Model((*DomainRecord)(nil)).
			Where("domain_id = ?", d.ID).Where("position = ?", TrackingRecordPosition).Exec(ctx); err != nil {
			return err
		}
		if t.CustomDomain == nil || t.CustomRecord == nil {
			return nil
		}
		r := *t.CustomRecord
		r.DomainID, r.Position, r.Status = d.ID, TrackingRecordPosition, RecordPending
		_, err := tx.NewInsert().Model(&r).Exec(ctx)
		return err
	})
	if err == nil {
		*d = *cur
	}
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TrackingDomainStatus is the status of the domain's custom tracking domain
// record, "" when it has none.
func (s *Store) TrackingDomainStatus(ctx context.Context, domainID int64) (string, error) {
	var status string
	err := s.DB.NewSelect().Model((*DomainRecord)(nil)).Column("status").
		Where("domain_id = ?", domainID).Where("position = ?", TrackingRecordPosition).Scan(ctx, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return status, err
}

// VerifiedTrackingDomain reports whether host is the custom tracking domain
// of a verified domain, with its record verified: the only names the
// tracking TLS listener obtains certificates for. (Two organizations may
// add the same domain; only the one that verified it owns its subdomains.)
func (s *Store) VerifiedTrackingDomain(ctx context.Context, host string) (bool, error) {
	n, err := s.DB.NewSelect().TableExpr("domains AS d").
		Join("JOIN domain_records AS r ON r.domain_id = d.id AND r.position = ?", TrackingRecordPosition).
		Where("d.tracking_domain = ?", host).Where("d.deleted_at IS NULL").Where("d.status = ?", DomainVerified).
		Where("r.status = ?", RecordVerified).Count(ctx)
	return n > 0, err
}

// SaveRecipientMessage stores a tracked email's message for one recipient
// unless one is stored already: a step run again after a crash sends what
// the first run stored (RecipientMessage).
func (s *Store) SaveRecipientMessage(ctx context.Context, emailID string, position int, signed []byte) error {
	_, err := s.DB.NewUpdate().Model((*EmailRecipient)(nil)).Set("signed_message = ?", signed).
		Where("email_id = ?", emailID).Where("position = ?", position).
		Where("signed_message IS NULL").Exec(ctx)
	return err
}

// EmailLink is one link of a tracked email.
type EmailLink struct {
	bun.BaseModel `bun:"table:email_links"`

	EmailID  string `bun:"email_id,pk"`
	Position int    `bun:"position,pk"`
	URL      string `bun:"url,notnull"`
}

// SaveEmailLinks stores the links of a tracked email's HTML; links stored
// before (by a run that crashed) are kept, so tokens minted then still work.
func (s *Store) SaveEmailLinks(ctx context.Context, emailID string, urls []string) error {
	if len(urls) == 0 {
		return nil
	}
	rows := make([]EmailLink, len(urls))
	for i, u := range urls {
		rows[i] = EmailLink{EmailID: emailID, Position: i, URL: u}
	}
	_, err := s.DB.NewInsert().Model(&rows).On("CONFLICT (email_id, position) DO NOTHING").Exec(ctx)
	return err
}

// ClickTarget is what the click route needs of a link: where to send the
// browser, and the custom tracking domain of the email's domain (a click on
// another organization's custom domain is refused).
type ClickTarget struct {
	URL            string  `bun:"url"`
	TrackingDomain *string `bun:"tracking_domain"`
}

// ClickTarget reads a link of an email, in one indexed read.
func (s *Store) ClickTarget(ctx context.Context, emailID string, position int) (*ClickTarget, error) {
	t := new(ClickTarget)
	err := s.DB.NewSelect().TableExpr("email_links AS l").
		ColumnExpr("l.url, d.tracking_domain").
		Join("JOIN emails AS e ON e.id = l.email_id").
		Join("JOIN domains AS d ON d.id = e.domain_id").
		Where("l.email_id = ?", emailID).Where("l.position = ?", position).Scan(ctx, t)
	return t, notFound(err, "link")
}

// Engagement is what a recipient did with a tracked email.
type Engagement string

// The engagements.
const (
	EngagedOpen        Engagement = "opened_at"
	EngagedClick       Engagement = "clicked_at"
	EngagedUnsubscribe Engagement = "unsubscribed_at"
)

// RecordEngagement records, in tx, that the recipient at position opened,
// clicked or unsubscribed, and reports whether it is the recipient's first
// time (the one that counts in the statistics). An open also raises the
// recipient's open count. ErrNotFound when the email has no such recipient.
func RecordEngagement(ctx context.Context, tx bun.IDB, emailID string, position int, what Engagement, at time.Time) (first bool, r *EmailRecipient, err error) {
	res, err := tx.NewUpdate().Model((*EmailRecipient)(nil)).Set("? = ?", bun.Ident(string(what)), at).
		Where("email_id = ?", emailID).Where("position = ?", position).
		Where("? IS NULL", bun.Ident(string(what))).Exec(ctx)
	if err != nil {
		return false, nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, nil, err
	}
	if what == EngagedOpen {
		if _, err := tx.NewUpdate().Model((*EmailRecipient)(nil)).Set("opens = opens + 1").
			Where("email_id = ?", emailID).Where("position = ?", position).Exec(ctx); err != nil {
			return false, nil, err
		}
	}
	r = new(EmailRecipient)
	err = tx.NewSelect().Model(r).ExcludeColumn("signed_message").
		Where("email_id = ?", emailID).Where("position = ?", position).Scan(ctx)
	if err != nil {
		return false, nil, notFound(err, "recipient")
	}
	return n == 1, r, nil
}

// forgetCertificates deletes the cached certificates of a custom tracking
// domain that domainID no longer has (autocert's keys: the name, and +rsa,
// +token after it), so they are not served or renewed any more, unless
// another domain has the name too: the cache is the platform's, keyed by
// name, and another organization's domain of the same name (which can be
// added, and pending) must not take the verified one's certificate away.
func forgetCertificates(ctx context.Context, tx bun.Tx, name string, domainID int64) error {
	_, err := tx.NewDelete().Model((*ACMECacheEntry)(nil)).
		Where("key IN (?)", bun.List([]string{name, name + "+rsa", name + "+token"})).
		Where("NOT EXISTS (SELECT 1 FROM domains WHERE tracking_domain = ? AND id <> ? AND deleted_at IS NULL)", name, domainID).
		Exec(ctx)
	return err
}
