package deliveryruns

import (
	"context"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/mailyard/mailyard/workflows/delivery"
)

// Two retries at once: the one that did not reopen the delivery starts the
// new series first (StartIfIdle), then the one that reopened it starts the
// same series (StartAgain), and joins that run instead of ending it after
// it may have sent. A run of an older series, or of before series were
// numbered, is only finishing, and is replaced.
func TestStartAgainJoinsItsOwnSeries(t *testing.T) {
	tc := dialTemporal(t)
	ctx := context.Background()
	r := &Runs{Temporal: tc}
	id, _ := NewDeliveryID()
	// No worker runs the delivery's workflow: its runs stay open.
	current := func() (runID string, series int64) {
		t.Helper()
		desc, err := tc.DescribeWorkflowExecution(ctx, delivery.WorkflowID(id), "")
		if err != nil {
			t.Fatal(err)
		}
		info := desc.GetWorkflowExecutionInfo()
		if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the current run is %s", info.GetStatus())
		}
		series, err = r.seriesOf(ctx, id, info.GetExecution().GetRunId())
		if err != nil {
			t.Fatal(err)
		}
		return info.GetExecution().GetRunId(), series
	}

	// A run of before series were numbered.
	if err := delivery.Start(ctx, tc, delivery.Starting{DeliveryID: id, OrganizationID: 1, WebhookID: 1}, delivery.Input{DeliveryID: id}); err != nil {
		t.Fatal(err)
	}
	old, series := current()
	if series != -1 {
		t.Fatalf("an unnumbered run has series %d", series)
	}
	if err := r.StartIfIdle(ctx, id, 1); err != ErrSeriesRunning {
		t.Fatalf("StartIfIdle beside an open run: %v", err)
	}
	if err := r.StartAgain(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	first, series := current()
	if first == old || series != 1 {
		t.Fatalf("the old run was not replaced by series 1: %s, series %d", first, series)
	}
	if err := r.StartAgain(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if again, _ := current(); again != first {
		t.Fatal("a second start of series 1 replaced its run")
	}
	if err := r.StartForRecovery(ctx, id, 2, "rec-1"); err != nil {
		t.Fatal(err)
	}
	if second, series := current(); second == first || series != 2 {
		t.Fatalf("series 1 was not replaced by series 2: %s, series %d", second, series)
	}
}
