package deliveryruns

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A delivery stopped (its webhook disabled) has its open run canceled; a
// run started after the stop, a new series of the same delivery, is left
// alone: before, the cancel by workflow id alone ended whichever run was
// current, and a delivery retried meanwhile stayed pending with nothing to
// send it.
func TestCancelSparesASeriesStartedAfterTheStop(t *testing.T) {
	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx := context.Background()
	r := &Runs{Temporal: tc}
	id, _ := NewDeliveryID()
	// No worker runs the delivery's workflow: its run stays open.
	if err := delivery.Start(ctx, tc, delivery.Starting{DeliveryID: id, OrganizationID: 1, WebhookID: 1}, delivery.Input{DeliveryID: id}); err != nil {
		t.Fatal(err)
	}
	cancelRequested := func() bool {
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

	r.cancelStartedBefore(ctx, []string{id}, time.Now().Add(-time.Minute))
	if cancelRequested() {
		t.Fatal("a run started after the stop was canceled")
	}
	r.cancelStartedBefore(ctx, []string{id}, time.Now().Add(time.Minute))
	if !cancelRequested() {
		t.Fatal("the run open at the stop was not canceled")
	}
}
