package activities_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/temporal"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// deliveryFixture is the delivery activity over a real PostgreSQL database, with
// an HTTPS receiver on loopback that answers with status and counts requests.
type deliveryFixture struct {
	a        *activities.Webhooks
	st       *store.Store
	webhook  *store.Webhook
	received atomic.Int32
	answer   atomic.Int32
	lastBody atomic.Value
}

func newDeliveryFixture(t *testing.T) *deliveryFixture {
	t.Helper()
	f := &deliveryFixture{st: testenv.OpenStore(t, testenv.PostgresURL(t))}
	f.answer.Store(http.StatusOK)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.lastBody.Store(body)
		f.received.Add(1)
		w.WriteHeader(int(f.answer.Load()))
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	box, err := secrets.New(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	f.a = &activities.Webhooks{Store: f.st, Box: box, Client: webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))}

	ctx := context.Background()
	org, err := f.st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "k", Username: "u", Prefix: "p", Digest: []byte("d-" + t.Name()), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	f.webhook = &store.Webhook{OrganizationID: org.ID, URL: srv.URL + "/hook", EventTypes: store.EventTypes{"delivered"}}
	if err := f.st.CreateWebhook(ctx, f.webhook, 20, func(id int64) ([]byte, error) {
		return box.Seal([]byte("whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ="), store.WebhookSecretBinding(id))
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *deliveryFixture) newDelivery(t *testing.T) string {
	t.Helper()
	id := uuid.NewString()
	if err := f.st.CreateDelivery(context.Background(), &store.Delivery{ID: id, OrganizationID: f.webhook.OrganizationID, WebhookID: f.webhook.ID, EventType: "delivered", Body: []byte(`{"event_type":"delivered"}`)}); err != nil {
		t.Fatal(err)
	}
	return id
}

func (f *deliveryFixture) deliveryStatus(t *testing.T, id string) string {
	t.Helper()
	d, _, err := f.st.DeliveryWithWebhook(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d.Status
}

func TestAttemptDeliversAndRecords(t *testing.T) {
	f := newDeliveryFixture(t)
	id := f.newDelivery(t)
	res, err := f.a.Attempt(context.Background(), delivery.AttemptInput{DeliveryID: id, Attempt: 1})
	if err != nil || res.Verdict != delivery.Delivered || res.StatusCode != 200 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := f.lastBody.Load().([]byte); string(got) != `{"event_type":"delivered"}` {
		t.Fatalf("sent %s", got)
	}
	if f.deliveryStatus(t, id) != store.DeliveryDelivered {
		t.Fatal("delivery not marked delivered")
	}
	attempts, _ := f.st.AttemptsOf(context.Background(), []string{id}, 10)
	if log := attempts[id].Latest; len(log) != 1 || log[0].StatusCode == nil || *log[0].StatusCode != 200 {
		t.Fatalf("attempts %+v", attempts)
	}
	// A late retry of the same activity sends nothing more.
	res, err = f.a.Attempt(context.Background(), delivery.AttemptInput{DeliveryID: id, Attempt: 1})
	if err != nil || res.Verdict != delivery.AlreadyFinished || f.received.Load() != 1 {
		t.Fatalf("late retry: %+v %v, %d requests", res, err, f.received.Load())
	}
}

func TestAttemptRetryableFinalAndGone(t *testing.T) {
	f := newDeliveryFixture(t)
	ctx := context.Background()

	f.answer.Store(http.StatusInternalServerError)
	id := f.newDelivery(t)
	res, err := f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: id, Attempt: 1})
	if err != nil || res.Verdict != delivery.Retry || f.deliveryStatus(t, id) != store.DeliveryPending {
		t.Fatalf("500: %+v %v", res, err)
	}
	res, _ = f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: id, Attempt: 8, Final: true})
	if res.Verdict != delivery.Retry || f.deliveryStatus(t, id) != store.DeliveryFailed {
		t.Fatalf("final 500: %+v, status %s", res, f.deliveryStatus(t, id))
	}

	f.answer.Store(http.StatusGone)
	gone := f.newDelivery(t)
	res, _ = f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: gone, Attempt: 1})
	if res.Verdict != delivery.ReceiverGone || f.deliveryStatus(t, gone) != store.DeliveryFailed {
		t.Fatalf("410: %+v", res)
	}
	// The webhook is now disabled: the next delivery ends as gone, unsent.
	before := f.received.Load()
	next := f.newDelivery(t)
	res, _ = f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: next, Attempt: 1})
	if res.Verdict != delivery.WebhookGone || f.received.Load() != before || f.deliveryStatus(t, next) != store.DeliveryFailed {
		t.Fatalf("after 410: %+v, %d requests", res, f.received.Load()-before)
	}
	// An unknown delivery is gone too.
	if res, err := f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: uuid.NewString(), Attempt: 1}); err != nil || res.Verdict != delivery.WebhookGone {
		t.Fatalf("unknown delivery: %+v %v", res, err)
	}
}

func TestAttemptWithUnreadableSecretIsNonRetryable(t *testing.T) {
	f := newDeliveryFixture(t)
	other, _ := secrets.New(bytes.Repeat([]byte{1}, 32))
	f.a.Box = other // as if MAILYARD_ENCRYPTION_KEY changed
	id := f.newDelivery(t)
	_, err := f.a.Attempt(context.Background(), delivery.AttemptInput{DeliveryID: id, Attempt: 1})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("want a non-retryable error, got %v", err)
	}
	if bytes.Contains([]byte(err.Error()), []byte("whsec_")) || f.received.Load() != 0 || f.deliveryStatus(t, id) != store.DeliveryFailed {
		t.Fatalf("error %q, %d requests, status %s", err, f.received.Load(), f.deliveryStatus(t, id))
	}
	// The delivery log says why nothing was sent.
	var attempts []store.DeliveryAttempt
	if err := f.a.Store.DB.NewSelect().Model(&attempts).Where("delivery_id = ?", id).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0].StatusCode != nil || attempts[0].Error == nil || !strings.Contains(*attempts[0].Error, "signing secret cannot be decrypted") {
		t.Fatalf("attempts %+v, want one without a status saying the secret cannot be decrypted", attempts)
	}
}

// Each POST is counted by the verdict of its answer, with its duration;
// attempts that send nothing (a finished delivery) are not.
func TestAttemptMetrics(t *testing.T) {
	f := newDeliveryFixture(t)
	ctx := context.Background()
	series := func(outcome string) []string {
		return []string{
			`mailyard_webhook_attempts_total{outcome="` + outcome + `"}`,
			`mailyard_webhook_attempt_duration_seconds_count{outcome="` + outcome + `"}`,
		}
	}
	before := testenv.ScrapeProcess(t)
	ok := f.newDelivery(t)
	f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: ok, Attempt: 1})
	f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: ok, Attempt: 1}) // already finished
	f.answer.Store(http.StatusServiceUnavailable)
	f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: f.newDelivery(t), Attempt: 1})
	f.answer.Store(http.StatusGone)
	f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: f.newDelivery(t), Attempt: 1})
	after := testenv.ScrapeProcess(t)
	for _, outcome := range []string{"success", "retryable", "gone"} {
		for _, s := range series(outcome) {
			if got := testenv.Sample(t, after, s) - testenv.Sample(t, before, s); got != 1 {
				t.Errorf("%s went up by %v, want 1", s, got)
			}
		}
	}
	if f.received.Load() != 3 {
		t.Fatalf("the receiver got %d requests, want 3", f.received.Load())
	}
}

// queryCounter counts the statements a store sends (BEGIN and COMMIT
// included): each is one round trip to the database.
type queryCounter struct {
	mu      sync.Mutex
	queries []string
}

func (c *queryCounter) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (c *queryCounter) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries = append(c.queries, e.Query)
}

func (c *queryCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queries
	c.queries = nil
	return q
}

// Round trips of one attempt, at most.
const (
	attemptRoundTripsDelivered = 2
	attemptRoundTripsRetry     = 2
)

// An attempt costs few round trips to PostgreSQL: the figures are in
// the README ("Delivery attempts"); more is a regression.
func TestAttemptRoundTrips(t *testing.T) {
	f := newDeliveryFixture(t)
	c := &queryCounter{}
	f.st.DB = f.st.DB.WithQueryHook(c)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		status int
		final  bool
		want   int
		stale  bool // the webhook's failure clock is an hour old
	}{
		{"delivered, failure clock restarted", http.StatusOK, false, attemptRoundTripsDelivered, true},
		{"delivered", http.StatusOK, false, attemptRoundTripsDelivered, false},
		{"retry", http.StatusInternalServerError, false, attemptRoundTripsRetry, false},
		{"final failure", http.StatusInternalServerError, true, attemptRoundTripsDelivered, false},
	} {
		f.answer.Store(int32(tc.status))
		id := f.newDelivery(t)
		old := time.Now().Add(-time.Hour).UTC()
		if tc.stale {
			if _, err := f.st.DB.NewUpdate().Model((*store.Webhook)(nil)).Set("healthy_at = ?", old).Where("id = ?", f.webhook.ID).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		c.take()
		if _, err := f.a.Attempt(ctx, delivery.AttemptInput{DeliveryID: id, Attempt: 1, Final: tc.final}); err != nil {
			t.Fatal(err)
		}
		q := c.take()
		t.Logf("%s: %d round trips", tc.name, len(q))
		d, w, err := f.st.DeliveryWithWebhook(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus := map[int]string{http.StatusOK: store.DeliveryDelivered}[tc.status]
		if wantStatus == "" {
			wantStatus = map[bool]string{true: store.DeliveryFailed, false: store.DeliveryPending}[tc.final]
		}
		if d.Status != wantStatus || (d.FinishedAt != nil) != (wantStatus != store.DeliveryPending) {
			t.Errorf("%s: delivery %s (finished %v), want %s", tc.name, d.Status, d.FinishedAt, wantStatus)
		}
		if tc.stale && !w.HealthyAt.After(old.Add(time.Minute)) {
			t.Errorf("%s: failure clock not restarted: healthy_at %v", tc.name, w.HealthyAt)
		}
		if attempts, err := f.st.AttemptsOf(ctx, []string{id}, 10); err != nil || len(attempts[id].Latest) != 1 || attempts[id].Latest[0].ID == 0 {
			t.Errorf("%s: attempts %+v %v", tc.name, attempts, err)
		}
		if len(q) > tc.want {
			t.Errorf("%s: %d round trips, want at most %d:\n%s", tc.name, len(q), tc.want, strings.Join(q, "\n"))
		}
	}
}
