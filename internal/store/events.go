package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
)

// Event is an email event from the sending pipeline. It holds personal data
// (the recipient and the subject), which is why it lives only here and in the
// delivery bodies, never in workflow histories.
type Event struct {
	bun.BaseModel `bun:"table:events"`

	ID         int64     `bun:"id,pk,autoincrement"`
	EventID    string    `bun:"event_id,notnull"`
	Domain     string    `bun:"domain,notnull"`
	EventType  string    `bun:"event_type,notnull"`
	OccurredAt time.Time `bun:"occurred_at,notnull"`
	MessageID  string    `bun:"message_id,notnull"`
	ToEmail    string    `bun:"to_email,notnull"`
	Subject    string    `bun:"subject,notnull"`
	// Body is the event's delivery body, its envelope with data (nil for
	// events stored before it was kept).
	Body      []byte    `bun:"body"`
	CreatedAt time.Time `bun:"created_at,notnull"`
}

// DomainOwner is an organization that has a domain name verified, with the
// id of its domain of that name.
type DomainOwner struct {
	OrganizationID int64 `bun:"organization_id"`
	DomainID       int64 `bun:"id"`
}

// VerifiedDomainOrganizations returns the organizations that have the domain
// name verified, with their domain's id: only they send from it, so only
// their webhooks hear of it and only their statistics count it.
func (s *Store) VerifiedDomainOrganizations(ctx context.Context, name string) ([]DomainOwner, error) {
	var owners []DomainOwner
	err := s.DB.NewSelect().Model((*Domain)(nil)).Column("organization_id", "id").
		Where("domain = ?", name).Where("status = ?", DomainVerified).
		OrderExpr("organization_id").
		Scan(ctx, &owners)
	return owners, err
}

// ErrEventIDReused refuses an event whose event_id an event of another
// domain, type, message or recipient has: a repeat must be the same event.
var ErrEventIDReused = errors.New("event_id was already used for another event")

// sameEvent reports whether b, sent with a's event_id, is a's repeat: the
// same domain, type, message and recipient (the rest, such as the
// timestamp's spelling, may differ between tries).
func sameEvent(a, b *Event) bool {
	return a.Domain == b.Domain && a.EventType == b.EventType && a.MessageID == b.MessageID && a.ToEmail == b.ToEmail
}

// IngestEvent stores an event and one pending delivery, carrying body, per
// enabled webhook of the owners' organizations that subscribes to its type, in
// one transaction. In the same transaction it counts the event in each owner's
// daily statistics (on the UTC day of OccurredAt) and, for a complaint, puts
// ToEmail on each owner's suppression list. It is idempotent on EventID: for
// an event seen before it creates and counts nothing and returns the
// deliveries made the first time, with created false; another event under
// the same EventID is ErrEventIDReused.
func (s *Store) IngestEvent(ctx context.Context, ev *Event, owners []DomainOwner, body []byte, newID func() (string, error)) (deliveries []Delivery, created bool, err error) {
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = now()
	}
	ev.Body = body
	err = s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		deliveries, created = nil, false
		// A concurrent ingest of the same event_id waits here for the first
		// one to commit, then sees its rows.
		res, err := tx.NewInsert().Model(ev).On("CONFLICT (event_id) DO NOTHING").Returning("id").Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var first *Event
			first, deliveries, err = firstIngested(ctx, tx, ev)
			if err != nil {
				return err
			}
			if first == nil {
				return sql.ErrNoRows // events are never deleted: not reached
			}
			*ev = *first
			return nil
		}
		created = true
		if len(owners) == 0 {
			return nil
		}
		orgIDs := make([]int64, len(owners))
		for i, o := range owners {
			orgIDs[i] = o.OrganizationID
			if err := countIngested(ctx, tx, ev, o); err != nil {
				return err
			}
		}
		deliveries, err = fanOutEvent(ctx, tx, ev, orgIDs, newID)
		return err
	})
	return deliveries, created, err
}

// IngestedEventDeliveries returns the deliveries made when ev (its
// EventID, Domain, EventType, MessageID and ToEmail) was first ingested, and
// whether it was; for an event sent again after its domain stopped being
// verified, whose deliveries still need their workflows. Another event
// stored under the same EventID (event ids are unique across domains) is
// ErrEventIDReused, as IngestEvent says of it.
func (s *Store) IngestedEventDeliveries(ctx context.Context, ev *Event) (deliveries []Delivery, found bool, err error) {
	first, deliveries, err := firstIngested(ctx, s.DB, ev)
	return deliveries, first != nil && err == nil, err
}

// firstIngested reads the event stored under ev's EventID and its
// deliveries: nil when there is none, ErrEventIDReused when it is another
// event than ev.
func firstIngested(ctx context.Context, db bun.IDB, ev *Event) (*Event, []Delivery, error) {
	first := new(Event)
	err := db.NewSelect().Model(first).Where("event_id = ?", ev.EventID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if !sameEvent(first, ev) {
		return nil, nil, ErrEventIDReused
	}
	deliveries, err := eventDeliveries(ctx, db, first.ID)
	return first, deliveries, err
}

// eventDeliveries lists an event's deliveries, without their bodies.
func eventDeliveries(ctx context.Context, db bun.IDB, eventID int64) ([]Delivery, error) {
	var deliveries []Delivery
	err := db.NewSelect().Model(&deliveries).ExcludeColumn("body").Where("event_id = ?", eventID).OrderExpr("id").Scan(ctx)
	return deliveries, err
}

// StageEmailEvent stores the outcome event of an email Mailyard sent, with
// one pending delivery per enabled webhook of the sending organization that
// subscribes to its type, and counts it in the domain's statistics (counter;
// "" counts nothing), in db (the transaction that records the outcome). Its
// event_id makes it idempotent like an ingested event: a repeat creates and
// counts nothing and reports created false.
func StageEmailEvent(ctx context.Context, db bun.IDB, ev *Event, orgID, domainID int64, counter StatCounter, body []byte, newID func() (string, error)) (created bool, err error) {
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = now()
	}
	ev.Body = body
	if db.Dialect().Name() == dialect.PG {
		return stageEmailEventInOneStatement(ctx, db, ev, orgID, domainID, counter, newID)
	}
	return stageEmailEventInSteps(ctx, db, ev, orgID, domainID, counter, newID)
}

// stageEmailEventInOneStatement is StageEmailEvent on PostgreSQL: the
// event, its count and the list of the organization's webhooks are one
// statement. An outcome is recorded for every recipient of every email, and
// each round trip there is one the database serves for each of them
// (README, "Benchmarks").
func stageEmailEventInOneStatement(ctx context.Context, db bun.IDB, ev *Event, orgID, domainID int64, counter StatCounter, newID func() (string, error)) (bool, error) {
	q := db.NewSelect().With("staged", db.NewInsert().Model(ev).On("CONFLICT (event_id) DO NOTHING").Returning("id"))
	if counter != "" {
		count, err := statUpsert(counter, bun.SafeQuery("SELECT ?, ?, ?::date, 1, ? FROM staged", orgID, domainID, ev.OccurredAt.UTC().Format(dayLayout), statShard(db)))
		if err != nil {
			return false, err
		}
		q = q.With("counted", db.NewRaw("?", count))
	}
	// One row per enabled webhook (or one without a webhook) when the event
	// is new; none when its event_id was seen before.
	var rows []struct {
		EventID        int64      `bun:"event_id"`
		WebhookID      *int64     `bun:"webhook_id"`
		OrganizationID *int64     `bun:"organization_id"`
		EventTypes     EventTypes `bun:"event_types"`
	}
	err := q.TableExpr("staged").
		Join("LEFT JOIN webhooks AS w ON w.organization_id = ? AND w.status = ?", orgID, WebhookEnabled).
		ColumnExpr("staged.id AS event_id, w.id AS webhook_id, w.organization_id, w.event_types").
		OrderExpr("w.id").Scan(ctx, &rows)
	if err != nil || len(rows) == 0 {
		return false, err
	}
	ev.ID = rows[0].EventID
	var hooks []Webhook
	for _, r := range rows {
		if r.WebhookID != nil {
			hooks = append(hooks, Webhook{ID: *r.WebhookID, OrganizationID: *r.OrganizationID, EventTypes: r.EventTypes})
		}
	}
	_, err = insertDeliveries(ctx, db, ev, hooks, newID)
	return true, err
}

// stageEmailEventInSteps is StageEmailEvent on SQLite, which has no
// data-modifying WITH: the same writes one after another.
func stageEmailEventInSteps(ctx context.Context, db bun.IDB, ev *Event, orgID, domainID int64, counter StatCounter, newID func() (string, error)) (bool, error) {
	res, err := db.NewInsert().Model(ev).On("CONFLICT (event_id) DO NOTHING").Returning("id").Exec(ctx)
	if err != nil {
		return false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if counter != "" {
		if err := CountEmailEvent(ctx, db, orgID, domainID, counter, ev.OccurredAt, 1); err != nil {
			return true, err
		}
	}
	_, err = fanOutEvent(ctx, db, ev, []int64{orgID}, newID)
	return true, err
}

// fanOutEvent stores one pending delivery of a stored event per enabled
// webhook of orgIDs that subscribes to its type.
func fanOutEvent(ctx context.Context, db bun.IDB, ev *Event, orgIDs []int64, newID func() (string, error)) ([]Delivery, error) {
	if len(orgIDs) == 0 {
		return nil, nil
	}
	hooks, err := enabledWebhooks(ctx, db, orgIDs)
	if err != nil {
		return nil, err
	}
	return insertDeliveries(ctx, db, ev, hooks, newID)
}

// enabledWebhooks lists the enabled webhooks of orgIDs with the event
// types they subscribe to, by id.
func enabledWebhooks(ctx context.Context, db bun.IDB, orgIDs []int64) ([]Webhook, error) {
	var hooks []Webhook
	err := db.NewSelect().Model(&hooks).Column("id", "organization_id", "event_types").
		Where("organization_id IN (?)", bun.List(orgIDs)).Where("status = ?", WebhookEnabled).
		OrderExpr("id").Scan(ctx)
	return hooks, err
}

// insertDeliveries stores one pending delivery of a stored event, carrying
// its body, per hook that subscribes to its type.
func insertDeliveries(ctx context.Context, db bun.IDB, ev *Event, hooks []Webhook, newID func() (string, error)) ([]Delivery, error) {
	var deliveries []Delivery
	for _, h := range hooks {
		if !h.EventTypes.Has(ev.EventType) {
			continue
		}
		id, err := newID()
		if err != nil {
			return nil, err
		}
		deliveries = append(deliveries, Delivery{
			ID: id, OrganizationID: h.OrganizationID, WebhookID: h.ID, EventID: &ev.ID,
			EventType: ev.EventType, Body: ev.Body, Status: DeliveryPending, CreatedAt: ev.CreatedAt,
		})
	}
	if len(deliveries) == 0 {
		return nil, nil
	}
	_, err := db.NewInsert().Model(&deliveries).Exec(ctx)
	return deliveries, err
}

// countIngested records a newly stored event in one owner's statistics and,
// for a complaint, its suppression list.
func countIngested(ctx context.Context, tx bun.Tx, ev *Event, o DomainOwner) error {
	// Every email event type has the rollup counter of its name; one without
	// is refused here (and the transaction with it) rather than not counted.
	if err := CountEmailEvent(ctx, tx, o.OrganizationID, o.DomainID, StatCounter(ev.EventType), ev.OccurredAt, 1); err != nil {
		return err
	}
	// An ingested bounce does not say whether it was hard or soft, so it
	// suppresses nothing; the platform's own hard bounces do. An address
	// that cannot be a suppression (empty, or longer than one may be once
	// its domain is in IDNA form: no recipient is) is counted, not
	// suppressed, rather than refusing the event for good.
	if !suppressible(ev.ToEmail) {
		return nil
	}
	switch ev.EventType {
	case "complained":
		return Suppress(ctx, tx, o.OrganizationID, ev.ToEmail, SuppressionComplaint)
	case "unsubscribed":
		return Suppress(ctx, tx, o.OrganizationID, ev.ToEmail, SuppressionUnsubscribe)
	}
	return nil
}

// EmailEvents pages through the events of an email the scope may see,
// oldest first: the outcomes the platform recorded and any event ingested
// with the email's id as its message_id for the email's sending domain. Any
// other email id is ErrNotFound.
func (s *Store) EmailEvents(ctx context.Context, sc EmailScope, emailID string, page Page) ([]Event, bool, error) {
	var domain string
	q := s.DB.NewSelect().TableExpr("emails AS e").ColumnExpr("d.domain").
		Join("JOIN domains AS d ON d.id = e.domain_id").
		Where("e.id = ?", emailID).Where("e.organization_id = ?", sc.OrganizationID)
	if sc.DomainID != nil {
		q = q.Where("e.domain_id = ?", *sc.DomainID)
	}
	err := q.Scan(ctx, &domain)
	if err != nil {
		return nil, false, notFound(err, "email")
	}
	events := []Event{}
	more, err := scanPage(ctx, s.DB.NewSelect().Model(&events).Where("message_id = ?", emailID).Where("domain = ?", domain),
		&events, "id", Ascending, page)
	return events, more, err
}
