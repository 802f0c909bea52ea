package store

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/secrets"
)

// Webhook statuses. A disabled webhook (its receiver answered 410) keeps its
// place in lists; a deleted one is kept only for its deliveries' history.
const (
	WebhookEnabled  = "enabled"
	WebhookDisabled = "disabled"
	WebhookDeleted  = "deleted"
)

// ErrLimitReached is returned when an organization already has the most
// webhooks it may have.
var ErrLimitReached = errors.New("limit reached")

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
		// the organization's row lock makes them take turns. SQLite's
		// immediate transactions already serialise writers.
		if s.IsPostgres() {
			if _, err := tx.ExecContext(ctx, "SELECT id FROM organizations WHERE id = ? FOR UPDATE", w.OrganizationID); err != nil {
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
			return ErrLimitReached
		}
		if _, err := tx.NewInsert().Model(w).Returning("id").Exec(ctx); err != nil {
			return err
		}
		enc, err := seal(w.ID)
		if err != nil {
			return err
		}
		w.SecretEnc = enc
		_, err = tx.NewUpdate().Model(w).Column("secret_enc").WherePK().Exec(ctx)
		return err
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
	return w, notFound(err)
}

// DeleteWebhook marks a webhook deleted and fails its pending deliveries in
// one transaction, returning the webhook as it was and the ids of the
// deliveries it stopped (their workflows can then be cancelled).
func (s *Store) DeleteWebhook(ctx context.Context, orgID, id int64) (*Webhook, []string, error) {
	var stopped []string
	w := new(Webhook)
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewSelect().Model(w).
			Where("id = ?", id).Where("organization_id = ?", orgID).Where("status <> ?", WebhookDeleted).
			Scan(ctx)
		if err != nil {
			return notFound(err)
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
			return ErrNotFound
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
