package temporalclient

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// RunOf tells whether Temporal knows a run of workflowID, and whether its
// latest run is still open: what the sweeps ask before they start, remove or
// erase what a workflow may still need. Temporal forgets a closed run after
// the namespace's retention, so an unknown id may also be one that ended
// long ago.
func RunOf(ctx context.Context, tc client.Client, workflowID string) (known, open bool, err error) {
	desc, err := tc.DescribeWorkflowExecution(ctx, workflowID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}
