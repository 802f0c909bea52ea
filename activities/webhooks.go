package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// Webhooks makes delivery attempts.
type Webhooks struct {
	Store *store.Store
	Box   *secrets.Box
	// Client is a webhook.NewClient client: SSRF-safe, no proxies, no
	// redirects, 15 s per attempt.
	Client *http.Client
	// Events emits webhook.disabled when an attempt disables a webhook.
	Events *platformevents.Emitter
	// DisableAfter disables a webhook (reason failing) when one of its
	// deliveries runs out of its schedule and no attempt has had a 2xx
	// answer for this long; zero never does.
	DisableAfter time.Duration
}

// secretUnreadable is the delivery log's error for an attempt that sent
// nothing because the webhook's signing secret could not be decrypted.
var secretUnreadable = "not sent: the webhook's signing secret cannot be decrypted (MAILYARD_ENCRYPTION_KEY is not the key it was created with); restore that key, or rotate the secret with expire_previous_in_seconds 0"

// Attempt makes one delivery attempt: it loads the webhook, its secret and
// the stored body, signs and POSTs them, and records the attempt. Receiver
// failures are results, not errors; an error means the attempt could not be
// made or recorded, and Temporal retries it.
func (a *Webhooks) Attempt(ctx context.Context, in delivery.AttemptInput) (delivery.AttemptResult, error) {
	d, w, err := a.Store.DeliveryWithWebhook(ctx, in.DeliveryID)
	if errors.Is(err, store.ErrNotFound) {
		return delivery.AttemptResult{Verdict: delivery.WebhookGone}, nil
	}
	if err != nil {
		return delivery.AttemptResult{}, err
	}
	// A deleted or disabled webhook is checked first: deleting one also
	// fails its pending deliveries, and the series should end as "gone".
	if w.Status != store.WebhookEnabled {
		if err := a.announceDisable(ctx, w); err != nil {
			return delivery.AttemptResult{}, err
		}
		return delivery.AttemptResult{Verdict: delivery.WebhookGone}, a.Store.FinishDelivery(ctx, d.ID, store.DeliveryFailed)
	}
	if d.Status != store.DeliveryPending {
		return delivery.AttemptResult{Verdict: delivery.AlreadyFinished}, nil
	}
	secret, err := a.Box.Open(w.SecretEnc, store.WebhookSecretBinding(w.ID))
	if err != nil {
		// No retry can fix a secret sealed under another key; the operator
		// must. The delivery log says why nothing was sent, and the run
		// fails for the Temporal UI. The messages name ids only.
		row := &store.DeliveryAttempt{DeliveryID: d.ID, AttemptedAt: time.Now().UTC().Truncate(time.Microsecond), Error: &secretUnreadable}
		if _, rerr := a.Store.RecordAttempt(ctx, row, w.ID, store.AttemptEffect{Status: store.DeliveryFailed}, nil); rerr != nil {
			return delivery.AttemptResult{}, rerr
		}
		return delivery.AttemptResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("signing secret of webhook %d cannot be decrypted (is MAILYARD_ENCRYPTION_KEY the one it was created with?)", w.ID),
			"SecretUnreadable", nil)
	}

	var previous []string
	if d.PreviousSecretCount > 0 {
		if previous, err = a.previousSecrets(ctx, w.ID); err != nil {
			return delivery.AttemptResult{}, err
		}
	}

	started := time.Now()
	out := webhook.Send(ctx, a.Client, webhook.Delivery{
		URL: w.URL, Secret: string(secret), PreviousSecrets: previous, ID: d.ID, EventType: d.EventType, Body: d.Body, AttemptTime: started,
	})
	if err := ctx.Err(); err != nil {
		// The worker is stopping or the workflow was cancelled: nothing to
		// report to the customer, and Temporal decides whether to retry.
		return delivery.AttemptResult{}, err
	}
	metrics.ObserveWebhookAttempt(out.Verdict.String(), out.Duration)
	result, effect := judge(out, in.Final)
	effect.HealthyAt = w.HealthyAt
	if in.Final && a.DisableAfter > 0 && result.Verdict == delivery.Retry {
		effect.DisableIfUnhealthySince = started.Add(-a.DisableAfter)
	}
	var announce []string
	var onDisable store.OnDisable
	if a.Events != nil {
		onDisable = a.Events.StageDisable(&announce)
	}
	if _, err := a.Store.RecordAttempt(ctx, attemptRow(d.ID, started, out), w.ID, effect, onDisable); err != nil {
		return delivery.AttemptResult{}, err
	}
	if a.Events != nil {
		// Should this fail, the retried activity finds the webhook disabled
		// and announces the same disable again (announceDisable).
		if err := a.Events.Start(ctx, announce); err != nil {
			return delivery.AttemptResult{}, err
		}
	}
	return result, nil
}

// announceDisable makes sure the webhook.disabled event of a disabled
// webhook's latest disable has its delivery workflows started. The event was
// stored with the disable; emitting it again creates nothing and only starts
// workflows a crash left unstarted.
func (a *Webhooks) announceDisable(ctx context.Context, w *store.Webhook) error {
	if a.Events == nil || w.Status != store.WebhookDisabled || w.DisableCount == 0 {
		return nil
	}
	return a.Events.Emit(ctx, platformevents.WebhookDisabled(w))
}

// judge maps an outcome to the workflow's verdict and to the change in the
// database.
func judge(out webhook.Outcome, final bool) (delivery.AttemptResult, store.AttemptEffect) {
	r := delivery.AttemptResult{StatusCode: out.StatusCode}
	switch out.Verdict {
	case webhook.Success:
		r.Verdict = delivery.Delivered
		return r, store.AttemptEffect{Status: store.DeliveryDelivered, Healthy: true}
	case webhook.Gone:
		r.Verdict = delivery.ReceiverGone
		return r, store.AttemptEffect{Status: store.DeliveryFailed, Disable: store.DisabledReceiverGone}
	}
	r.Verdict, r.RetryAfter = delivery.Retry, out.RetryAfter
	if final {
		return r, store.AttemptEffect{Status: store.DeliveryFailed}
	}
	return r, store.AttemptEffect{}
}

func attemptRow(deliveryID string, started time.Time, out webhook.Outcome) *store.DeliveryAttempt {
	row := &store.DeliveryAttempt{
		DeliveryID:        deliveryID,
		AttemptedAt:       started.UTC().Truncate(time.Microsecond),
		DurationMS:        out.Duration.Milliseconds(),
		ResponseBody:      out.ResponseBody,
		ResponseTruncated: out.ResponseTruncated,
	}
	if out.StatusCode != 0 {
		code := out.StatusCode
		row.StatusCode = &code
	}
	if out.Error != "" {
		msg := out.Error
		row.Error = &msg
	}
	return row
}

// previousSecrets opens the webhook's unexpired previous secrets, newest
// first. One that no longer opens (sealed under another key) is left out:
// the current secret still signs.
func (a *Webhooks) previousSecrets(ctx context.Context, webhookID int64) ([]string, error) {
	rows, err := a.Store.PreviousSecrets(ctx, webhookID)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		if secret, err := a.Box.Open(r.SecretEnc, store.PreviousSecretBinding(r.ID)); err == nil {
			out = append(out, string(secret))
		}
	}
	return out, nil
}
