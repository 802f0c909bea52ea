package deliveryruns

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// dialTemporal is a client of the tests' Temporal dev server, closed at the
// end of the test.
func dialTemporal(t *testing.T) client.Client {
	t.Helper()
	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return tc
}

// A delivery stopped (its webhook disabled) has its open run canceled; a
// run started after the stop, a new series of the same delivery, is left
// alone: before, the cancel by workflow id alone ended whichever run was
// current, and a delivery retried meanwhile stayed pending with nothing to
// send it.
func TestCancelSparesASeriesStartedAfterTheStop(t *testing.T) {
	tc := dialTemporal(t)
	ctx := context.Background()
	r := &Runs{Temporal: tc}
	id, _ := NewDeliveryID()
	// No worker runs the delivery's workflow: its run stays open.
	if err := delivery.Start(ctx, tc, delivery.Starting{DeliveryID: id, OrganizationID: 1, WebhookID: 1}, delivery.Input{DeliveryID: id}); err != nil {
		t.Fatal(err)
	}
	cancelRequested := cancelRequestedOf(t, tc, id)

	r.cancelStartedBefore(ctx, []string{id}, time.Now().Add(-time.Minute))
	if cancelRequested() {
		t.Fatal("a run started after the stop was canceled")
	}
	r.cancelStartedBefore(ctx, []string{id}, time.Now().Add(time.Minute))
	if !cancelRequested() {
		t.Fatal("the run open at the stop was not canceled")
	}
}

// The delivery's status decides before any clock: a delivery no longer
// failed (reopened for a new series) keeps its run even when the run looks
// started before the stop (this process's clock ahead of the Temporal
// server's), and one still failed has its run canceled.
func TestCancelSparesADeliveryNoLongerFailed(t *testing.T) {
	tc := dialTemporal(t)
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	_, row, err := keyauth.New("boot", "boot", store.Permissions{"admin"})
	if err != nil {
		t.Fatal(err)
	}
	org, err := st.CreateOrganizationWithKey(ctx, "shop", row)
	if err != nil {
		t.Fatal(err)
	}
	wh := &store.Webhook{OrganizationID: org.ID, URL: "https://hooks.example/in", EventTypes: store.EventTypes{"delivered"}}
	if err := st.CreateWebhook(ctx, wh, 20, func(int64) ([]byte, error) { return []byte("sealed"), nil }); err != nil {
		t.Fatal(err)
	}
	r := &Runs{Temporal: tc, Store: st}
	later := time.Now().Add(time.Minute) // every run looks started before it
	for _, status := range []string{store.DeliveryPending, store.DeliveryFailed} {
		id, _ := NewDeliveryID()
		if err := st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: org.ID, WebhookID: wh.ID, EventType: "delivered", Body: []byte("{}"), Status: status}); err != nil {
			t.Fatal(err)
		}
		if err := delivery.Start(ctx, tc, delivery.Starting{DeliveryID: id, OrganizationID: org.ID, WebhookID: wh.ID}, delivery.Input{DeliveryID: id}); err != nil {
			t.Fatal(err)
		}
		r.cancelStartedBefore(ctx, []string{id}, later)
		if got, want := cancelRequestedOf(t, tc, id)(), status == store.DeliveryFailed; got != want {
			t.Errorf("a %s delivery: run canceled %v, want %v", status, got, want)
		}
	}
}

// cancelRequestedOf reports whether the delivery's run was asked to cancel.
func cancelRequestedOf(t *testing.T, tc client.Client, id string) func() bool {
	ctx := context.Background()
	return func() bool {
		it := tc.GetWorkflowHistory(ctx, delivery.WorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED {
				return true
			}
		}
		return false
	}
}
