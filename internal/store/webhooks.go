package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/secrets"
)

// Webhook statuses. A disabled webhook (its receiver answered 410) keeps its
// place in lists; a deleted one is kept only for its deliveries' history.
const (
	WebhookEnabled  = "enabled"
	WebhookDisabled = "disabled"
	WebhookDeleted  = "deleted"
)

// Why a webhook is disabled.
const (
	DisabledManual       = "manual"
	DisabledReceiverGone = "receiver_gone"
	DisabledFailing      = "failing"
)

// OnDisable runs inside the transaction that disables a webhook, with the
// webhook as it now is (status, reason, disable count), so that what
// announces the disable commits with it or not at all.
type OnDisable func(ctx context.Context, tx bun.Tx, w *Webhook) error

// ErrLimitReached stands, for errors.Is, for the refusal to add a webhook to
// an organization that already has the most it may have.
var ErrLimitReached = &apperr.Error{Code: apperr.WebhookLimitReached, Resource: "webhook", Message: "webhook limit reached"}

// EventTypes are the event types a webhook subscribes to.
type EventTypes = CommaList

// WebhookSecretBinding names the row a webhook's signing secret is sealed to,
// so a ciphertext copied to another webhook does not decrypt.
func WebhookSecretBinding(webhookID int64) []byte { return secrets.Binding("webhooks", webhookID) }

// Webhook is a customer's subscription to email events.
type Webhook struct {
	bun.BaseModel `bun:"table:webhooks"`

	ID             int64      `bun:"id,pk,autoincrement"`
	OrganizationID int64      `bun:"organization_id,notnull"`
	URL            string     `bun:"url,notnull"`
	EventTypes     EventTypes `bun:"event_types,notnull"`
	SecretEnc      []byte     `bun:"secret_enc"`
	Status         string     `bun:"status,notnull"`
	CreatedAt      time.Time  `bun:"created_at,notnull"`
	DisabledAt     *time.Time `bun:"disabled_at"`
	DeletedAt      *time.Time `bun:"deleted_at"`
	// DisabledReason says why a disabled webhook is disabled (manual,
	// receiver_gone, failing); nil while enabled.
	DisabledReason *string `bun:"disabled_reason"`
	// DisableCount counts the disables; it keys each disable's
	// webhook.disabled event.
	DisableCount int `bun:"disable_count,notnull"`
	// HealthyAt starts the failure clock: creation, re-enabling or the last
	// 2xx answer.
	HealthyAt time.Time `bun:"healthy_at,notnull"`
}

// CreateWebhook inserts a webhook unless the organization already has limit
// webhooks (ErrLimitReached). seal encrypts the signing secret for the new
// row's id; the row and its secret are written in one transaction, so no
// webhook ever exists without one.
func (s *Store) CreateWebhook(ctx context.Context, w *Webhook, limit int, seal func(id int64) ([]byte, error)) error {
	if w.CreatedAt.IsZero() {
		w.CreatedAt = now()
	}
	if w.Status == "" {
		w.Status = WebhookEnabled
	}
	if w.HealthyAt.IsZero() {
		w.HealthyAt = w.CreatedAt
	}
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// Two creates racing past the count would both fit under the limit;
		// the organization's row lock makes them take turns. NO KEY UPDATE
		// conflicts with itself but not with the foreign key checks (KEY
		// SHARE) of the rows inserted for the organization meanwhile
		// (emails, deliveries, suppressions…), which FOR UPDATE would hold
		// up. SQLite's immediate transactions already serialise writers.
		if s.IsPostgres() {
			if _, err := tx.ExecContext(ctx, "SELECT id FROM organizations WHERE id = ? FOR NO KEY UPDATE", w.OrganizationID); err != nil {
				return err
			}
		}
		n, err := tx.NewSelect().Model((*Webhook)(nil)).
			Where("organization_id = ?", w.OrganizationID).
			Where("status <> ?", WebhookDeleted).
			Count(ctx)
		if err != nil {
			return err
		}
		if n >= int64(limit) {
			return apperr.Errorf(apperr.WebhookLimitReached, "webhook", "this organization already has %d webhooks, the most it can have; delete one first", limit)
		}
		if _, err := tx.NewInsert().Model(w).Returning("id").Exec(ctx); err != nil {
			return err
		}
		enc, err := seal(w.ID)
		if err != nil {
			return err
		}
		w.SecretEnc = enc
		if _, err = tx.NewUpdate().Model(w).Column("secret_enc").WherePK().Exec(ctx); err != nil {
			return err
		}
		return runCommitHook(ctx, tx)
	})
}

// ListWebhooks returns a page of an organization's webhooks that are not
// deleted, oldest (lowest id) first, and whether more follow. Page.After is a
// webhook id (int64).
func (s *Store) ListWebhooks(ctx context.Context, orgID int64, page Page) ([]Webhook, bool, error) {
	hooks := []Webhook{}
	q := s.DB.NewSelect().Model(&hooks).
		Where("organization_id = ?", orgID).
		Where("status <> ?", WebhookDeleted)
	more, err := scanPage(ctx, q, &hooks, "id", Ascending, page)
	return hooks, more, err
}

// WebhookInOrganization reads a webhook only if it belongs to the organization
// and is not deleted: anything else is ErrNotFound, so a foreign id looks
// exactly like an unknown one.
func (s *Store) WebhookInOrganization(ctx context.Context, orgID, id int64) (*Webhook, error) {
	w := new(Webhook)
	err := s.DB.NewSelect().Model(w).
		Where("id = ?", id).
		Where("organization_id = ?", orgID).
		Where("status <> ?", WebhookDeleted).
		Scan(ctx)
	return w, notFound(err, "webhook")
}

// DeleteWebhook marks a webhook deleted and fails its pending deliveries in
// one transaction, returning the webhook as it was and the ids of the
// deliveries it stopped (their workflows can then be cancelled). Its update
// of the webhook locks the webhook before its deliveries (lock order:
// RecordAttempt).
func (s *Store) DeleteWebhook(ctx context.Context, orgID, id int64) (*Webhook, []string, error) {
	var stopped []string
	w := new(Webhook)
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewSelect().Model(w).
			Where("id = ?", id).Where("organization_id = ?", orgID).Where("status <> ?", WebhookDeleted).
			Scan(ctx)
		if err != nil {
			return notFound(err, "webhook")
		}
		at := now()
		res, err := tx.NewUpdate().Model((*Webhook)(nil)).
			Set("status = ?", WebhookDeleted).Set("deleted_at = ?", at).
			Where("id = ?", id).Where("status <> ?", WebhookDeleted).
			Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return apperr.NotFoundf("webhook")
		}
		if err := tx.NewSelect().Model((*Delivery)(nil)).Column("id").
			Where("webhook_id = ?", id).Where("status = ?", DeliveryPending).
			Scan(ctx, &stopped); err != nil {
			return err
		}
		_, err = tx.NewUpdate().Model((*Delivery)(nil)).
			Set("status = ?", DeliveryFailed).Set("finished_at = ?", at).
			Where("webhook_id = ?", id).Where("status = ?", DeliveryPending).
			Exec(ctx)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return w, stopped, nil
}

// WebhookPatch is a change to a webhook; nil fields stay as they are.
type WebhookPatch struct {
	URL        *string
	EventTypes EventTypes
	// Status is WebhookEnabled or WebhookDisabled (reason manual).
	Status *string
}

// UpdateWebhook applies a patch to a webhook of the organization in one
// transaction. Enabling a disabled webhook clears its reason and restarts
// its failure clock; disabling one fails its pending deliveries (their ids
// are returned so their workflows can be cancelled) and calls onDisable.
// disabled tells whether this update disabled the webhook.
func (s *Store) UpdateWebhook(ctx context.Context, orgID, id int64, p WebhookPatch, onDisable OnDisable) (w *Webhook, stopped []string, disabled bool, err error) {
	w = new(Webhook)
	err = s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		stopped, disabled = nil, false
		q := tx.NewSelect().Model(w).
			Where("id = ?", id).Where("organization_id = ?", orgID).Where("status <> ?", WebhookDeleted)
		if s.IsPostgres() {
			// The webhook before its deliveries (lock order: RecordAttempt).
			// NO KEY UPDATE: onDisable inserts deliveries for the
			// organization's other webhooks, whose foreign key checks take
			// KEY SHARE on their rows, which FOR UPDATE would refuse to
			// another webhook's update doing the same: two disables of one
			// organization would deadlock. The update changes no key.
			q = q.For("NO KEY UPDATE")
		}
		if err := q.Scan(ctx); err != nil {
			return notFound(err, "webhook")
		}
		at := now()
		upd := tx.NewUpdate().Model(w).WherePK()
		changed := false
		if p.URL != nil {
			w.URL = *p.URL
			upd, changed = upd.Column("url"), true
		}
		if p.EventTypes != nil {
			w.EventTypes = p.EventTypes
			upd, changed = upd.Column("event_types"), true
		}
		if p.Status != nil && *p.Status == WebhookEnabled && w.Status == WebhookDisabled {
			w.Status, w.DisabledReason, w.DisabledAt, w.HealthyAt = WebhookEnabled, nil, nil, at
			upd, changed = upd.Column("status", "disabled_reason", "disabled_at", "healthy_at"), true
		}
		if changed {
			if _, err := upd.Exec(ctx); err != nil {
				return err
			}
		}
		if p.Status != nil && *p.Status == WebhookDisabled && w.Status == WebhookEnabled {
			var err error
			if stopped, err = disableWebhook(ctx, tx, w, DisabledManual, at); err != nil {
				return err
			}
			disabled = true
			if onDisable != nil {
				return onDisable(ctx, tx, w)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	return w, stopped, disabled, nil
}

// disableWebhook turns an enabled webhook off and fails its pending
// deliveries, like a delete. w is updated to its new state. On PostgreSQL
// the caller locks the webhook's row before any of its deliveries' (lock
// order: RecordAttempt).
func disableWebhook(ctx context.Context, tx bun.Tx, w *Webhook, reason string, at time.Time) ([]string, error) {
	res, err := tx.NewUpdate().Model((*Webhook)(nil)).
		Set("status = ?", WebhookDisabled).Set("disabled_reason = ?", reason).Set("disabled_at = ?", at).
		Set("disable_count = disable_count + 1").
		Where("id = ?", w.ID).Where("status = ?", WebhookEnabled).
		Exec(ctx)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, apperr.Errorf(apperr.Conflict, "webhook", "this webhook is not enabled")
	}
	if err := tx.NewSelect().Model(w).WherePK().Scan(ctx); err != nil {
		return nil, err
	}
	var stopped []string
	if err := tx.NewSelect().Model((*Delivery)(nil)).Column("id").
		Where("webhook_id = ?", w.ID).Where("status = ?", DeliveryPending).
		Scan(ctx, &stopped); err != nil {
		return nil, err
	}
	_, err = tx.NewUpdate().Model((*Delivery)(nil)).
		Set("status = ?", DeliveryFailed).Set("finished_at = ?", at).
		Where("webhook_id = ?", w.ID).Where("status = ?", DeliveryPending).
		Exec(ctx)
	return stopped, err
}
