package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/secrets"
)

// ErrTooManySecrets stands, for errors.Is, for the refusal to rotate while a
// webhook already has the most unexpired previous secrets it may have.
var ErrTooManySecrets = &apperr.Error{Code: apperr.TooManySecrets, Resource: "webhook", Message: "too many unexpired previous secrets"}

// PreviousSecret is a signing secret replaced by a rotation and still valid
// until ExpiresAt. SecretEnc is sealed to this row (PreviousSecretBinding).
type PreviousSecret struct {
	bun.BaseModel `bun:"table:webhook_previous_secrets"`

	ID         int64     `bun:"id,pk,autoincrement"`
	WebhookID  int64     `bun:"webhook_id,notnull"`
	SecretEnc  []byte    `bun:"secret_enc"`
	ReplacedAt time.Time `bun:"replaced_at,notnull"`
	ExpiresAt  time.Time `bun:"expires_at,notnull"`
}

// PreviousSecretBinding names the row a previous secret is sealed to.
func PreviousSecretBinding(id int64) []byte {
	return secrets.Binding("webhook_previous_secrets", id)
}

// Rotation is how RotateWebhookSecret re-encrypts: Reseal opens the current
// secret (sealed to the webhook) and seals it to the previous-secret row
// prevID; SealNew seals the new secret to the webhook.
type Rotation struct {
	ExpireIn    time.Duration
	MaxPrevious int
	Reseal      func(currentEnc []byte, prevID int64) ([]byte, error)
	SealNew     func(webhookID int64) ([]byte, error)
}

// RotateWebhookSecret replaces a webhook's signing secret in one
// transaction. The replaced secret stays valid for ExpireIn; older previous
// secrets keep their expiry, except that ExpireIn 0 expires them all (and
// the replaced one is not kept at all). Expired previous secrets are erased.
// It returns when the replaced secret expires.
func (s *Store) RotateWebhookSecret(ctx context.Context, orgID, id int64, r Rotation) (time.Time, error) {
	var expires time.Time
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		w := new(Webhook)
		q := tx.NewSelect().Model(w).
			Where("id = ?", id).Where("organization_id = ?", orgID).Where("status <> ?", WebhookDeleted)
		if s.IsPostgres() {
			// Rotations, updates and deletes of the webhook take turns;
			// NO KEY UPDATE (the secret is no key) leaves the foreign key
			// checks of deliveries inserted for the webhook alone.
			q = q.For("NO KEY UPDATE")
		}
		if err := q.Scan(ctx); err != nil {
			return notFound(err, "webhook")
		}
		at := now()
		expires = at.Add(r.ExpireIn)
		del := tx.NewDelete().Model((*PreviousSecret)(nil)).Where("webhook_id = ?", id)
		if r.ExpireIn > 0 {
			del = del.Where("expires_at <= ?", at)
		}
		if _, err := del.Exec(ctx); err != nil {
			return err
		}
		if r.ExpireIn > 0 {
			n, err := tx.NewSelect().Model((*PreviousSecret)(nil)).Where("webhook_id = ?", id).Count(ctx)
			if err != nil {
				return err
			}
			if n >= int64(r.MaxPrevious) {
				return apperr.Errorf(apperr.TooManySecrets, "webhook",
					"this webhook already has %d previous secrets that have not expired; wait for one to expire, or rotate with expire_previous_in_seconds 0 to end every overlap", r.MaxPrevious)
			}
			prev := &PreviousSecret{WebhookID: id, ReplacedAt: at, ExpiresAt: expires}
			if _, err := tx.NewInsert().Model(prev).Returning("id").Exec(ctx); err != nil {
				return err
			}
			enc, err := r.Reseal(w.SecretEnc, prev.ID)
			if err != nil {
				return err
			}
			prev.SecretEnc = enc
			if _, err := tx.NewUpdate().Model(prev).Column("secret_enc").WherePK().Exec(ctx); err != nil {
				return err
			}
		}
		enc, err := r.SealNew(id)
		if err != nil {
			return err
		}
		_, err = tx.NewUpdate().Model((*Webhook)(nil)).Set("secret_enc = ?", enc).Where("id = ?", id).Exec(ctx)
		return err
	})
	return expires, err
}

// PreviousSecrets returns a webhook's unexpired previous secrets, newest
// first (the order their signatures are sent in).
func (s *Store) PreviousSecrets(ctx context.Context, webhookID int64) ([]PreviousSecret, error) {
	var rows []PreviousSecret
	err := s.DB.NewSelect().Model(&rows).
		Where("webhook_id = ?", webhookID).Where("expires_at > ?", now()).
		OrderExpr("replaced_at DESC, id DESC").Scan(ctx)
	return rows, err
}

// ErasePreviousSecrets deletes every expired previous secret and reports
// how many it deleted. On PostgreSQL it skips rows another transaction holds:
// a rotation deletes its webhook's expired secrets too, and two deletes of
// the same rows in different orders could deadlock; the next sweep takes
// what this one left.
func (s *Store) ErasePreviousSecrets(ctx context.Context) (int64, error) {
	del := s.DB.NewDelete().Model((*PreviousSecret)(nil))
	if s.IsPostgres() {
		expired := s.DB.NewSelect().Model((*PreviousSecret)(nil)).Column("id").
			Where("expires_at <= ?", now()).For("UPDATE SKIP LOCKED")
		del = del.Where("id IN (?)", expired)
	} else {
		del = del.Where("expires_at <= ?", now())
	}
	res, err := del.Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
