package testenv

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/searchattr"
)

// The real server keeps a workflow across a restart: it is in PostgreSQL, not
// in the process. A workflow started before Stop is still running after Start,
// one started after the restart runs next to it, and visibility finds the first
// by its search attribute.
func TestRealTemporalRestartKeepsWorkflows(t *testing.T) {
	r := StartRealTemporal(t)
	dial := func() client.Client {
		c, err := client.Dial(client.Options{HostPort: r.Address, Namespace: r.Namespace, Logger: quietSDKLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c := dial()
	// No worker polls this queue: the workflow stays running, only stored. It
	// carries Mailyard's search attributes, as every Mailyard workflow does: the
	// server refuses the start unless they are registered.
	owner := searchattr.Owner{OrganizationID: 7, DomainID: 9}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "before-restart", TaskQueue: "nobody-polls", TypedSearchAttributes: owner.Attributes()}, "Anything")
	c.Close()
	if err != nil {
		t.Fatal(err)
	}

	r.Stop()
	down, cancelDown := context.WithTimeout(ctx, 5*time.Second)
	if c, err := client.DialContext(down, client.Options{HostPort: r.Address, Logger: quietSDKLogger{}}); err == nil {
		c.Close()
		t.Fatal("the frontend still answers after Stop")
	}
	cancelDown()
	r.Start()

	c = dial()
	defer c.Close()
	desc, err := c.DescribeWorkflowExecution(ctx, "before-restart", "")
	if err != nil {
		t.Fatalf("the workflow started before the restart: %v", err)
	}
	if got := desc.WorkflowExecutionInfo.Status; got != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || desc.WorkflowExecutionInfo.Execution.RunId != run.GetRunID() {
		t.Fatalf("after the restart: status %v run %s, want running run %s", got, desc.WorkflowExecutionInfo.Execution.RunId, run.GetRunID())
	}
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "after-restart", TaskQueue: "nobody-polls"}, "Anything"); err != nil {
		t.Fatalf("start after the restart: %v", err)
	}

	// Visibility in PostgreSQL finds the first by its attribute.
	Eventually(t, 30*time.Second, "the workflow listed by organization", func() bool {
		res, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "MailyardOrganizationId = 7"})
		return err == nil && len(res.Executions) == 1 && res.Executions[0].Execution.WorkflowId == "before-restart"
	})
}

// quietSDKLogger drops the SDK's connection-retry chatter.
type quietSDKLogger struct{}

func (quietSDKLogger) Debug(string, ...interface{}) {}
func (quietSDKLogger) Info(string, ...interface{})  {}
func (quietSDKLogger) Warn(string, ...interface{})  {}
func (quietSDKLogger) Error(string, ...interface{}) {}
