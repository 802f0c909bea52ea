package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// The ceiling is the baseline of the Temporal benchmarks: the smallest
// workflow that could do the job — one activity doing the same network send
// (a signed POST, an SMTP transaction) with everything it needs handed to it
// — on the same dev server, worker process and receiver. The product's
// workflows read and write the database around the send; the ceiling shows
// what the server and the send alone allow.
const (
	ceilingWorkflow = "CeilingWorkflow"
	ceilingActivity = "CeilingActivity"
)

// The floor is the other bound of the email benchmark: a run of the email
// workflow's own shape (started as emails are, with an owner's search
// attributes and summary; one workflow task whose one local step is
// recorded as a marker; completed) whose step does nothing but note that it
// ran. No path that gives each email a run of its own can be faster on the
// same server, so the floor's rate over the ceiling's is the most that such a
// path can reach there.
const (
	floorWorkflow = "FloorWorkflow"
	floorStep     = "FloorStep"
)

// registerCeiling registers the ceiling workflow, whose one activity calls
// send with the workflow's id (the id the receiver notes).
func registerCeiling(w sdkworker.Worker, send func(ctx context.Context, id string) error) {
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, id string) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
		return workflow.ExecuteActivity(ctx, ceilingActivity, id).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: ceilingWorkflow})
	w.RegisterActivityWithOptions(send, activity.RegisterOptions{Name: ceilingActivity})
}

// registerFloor registers the floor workflow, whose one local step notes its
// workflow's id in rcv.
func registerFloor(w sdkworker.Worker, rcv *arrivals) {
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, id string) error {
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
		return workflow.ExecuteLocalActivity(ctx, floorStep, id).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: floorWorkflow})
	w.RegisterActivityWithOptions(func(_ context.Context, id string) error {
		rcv.note(id, time.Now())
		return nil
	}, activity.RegisterOptions{Name: floorStep})
}

// runCeiling starts n ceiling workflows on queue, senders at a time, and
// returns how many per second reached the receiver.
func runCeiling(ctx context.Context, tc client.Client, queue string, rcv *arrivals, n int) (float64, error) {
	return runBaseline(ctx, tc, rcv, n, ceilingWorkflow, func(id string) client.StartWorkflowOptions {
		return client.StartWorkflowOptions{ID: "ceiling:" + id, TaskQueue: queue}
	})
}

// runFloor starts n floor workflows on queue as email workflows are started
// (searchattr.Owner), senders at a time, and returns how many per second
// ran their step.
func runFloor(ctx context.Context, tc client.Client, queue string, rcv *arrivals, n int) (float64, error) {
	owner := searchattr.Owner{OrganizationID: 1, DomainID: 1}
	return runBaseline(ctx, tc, rcv, n, floorWorkflow, func(id string) client.StartWorkflowOptions {
		return client.StartWorkflowOptions{ID: "floor:" + id, TaskQueue: queue,
			TypedSearchAttributes: owner.Attributes(), StaticSummary: owner.Summary("floor " + id)}
	})
}

// runBaseline starts n workflows of workflowType with the options that
// start gives for each id, senders at a time, and returns how many per
// second reached rcv.
func runBaseline(ctx context.Context, tc client.Client, rcv *arrivals, n int, workflowType string, start func(id string) client.StartWorkflowOptions) (float64, error) {
	rcv.expect(n)
	began := time.Now()
	if err := parallel(n, func(int) error {
		id := uuid.NewString()
		_, err := tc.ExecuteWorkflow(ctx, start(id), workflowType, id)
		return err
	}); err != nil {
		return 0, err
	}
	if err := rcv.wait(ctx, 10*time.Minute); err != nil {
		return 0, fmt.Errorf("%s: %w", workflowType, err)
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// Visibility queries for waitIdle.
const (
	anyRunning     = "ExecutionStatus = 'Running'"
	ceilingRunning = "WorkflowType = '" + ceilingWorkflow + "' AND ExecutionStatus = 'Running'"
	floorRunning   = "WorkflowType = '" + floorWorkflow + "' AND ExecutionStatus = 'Running'"
)

// waitIdle lets the previous run's workflows close (their last workflow tasks
// run after the send has arrived), so no run pays for the one before.
func waitIdle(ctx context.Context, tc client.Client, query string) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		res, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err == nil && res.GetCount() == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
