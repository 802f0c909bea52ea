package deletion

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func TestDeletionKeepsTheRecordsForTheRetainTimeThenRemovesThem(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	start := env.Now()
	at := map[string][]time.Duration{}
	record := func(name string) { at[name] = append(at[name], env.Now().Sub(start)) }
	env.RegisterActivityWithOptions(func(context.Context, int64) error { record("announce"); return nil },
		activity.RegisterOptions{Name: AnnounceActivity})
	// The publisher is down for the first three attempts (BIND stopped).
	failures := 3
	env.RegisterActivityWithOptions(func(context.Context, int64) error {
		record("unpublish")
		if failures > 0 {
			failures--
			return errors.New("dns update: connection refused")
		}
		return nil
	}, activity.RegisterOptions{Name: UnpublishActivity})
	env.RegisterActivityWithOptions(func(context.Context, int64) error { record("erase"); return nil },
		activity.RegisterOptions{Name: EraseActivity})

	retain := 7 * 24 * time.Hour
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(ProgressQuery)
		require.NoError(t, err)
		var p Progress
		require.NoError(t, v.Get(&p))
		require.Equal(t, StageRetaining, p.Stage)
		require.True(t, start.Add(retain).Equal(p.RemoveAt), "remove at %v", p.RemoveAt)
	}, time.Hour)
	env.ExecuteWorkflow(WorkflowName, Input{DomainID: 9, Retain: retain})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []time.Duration{0}, at["announce"])
	require.Len(t, at["unpublish"], 4, "retried until the publisher came back")
	require.Equal(t, retain, at["unpublish"][0], "nothing removed before the retain time")
	require.Len(t, at["erase"], 1)
	require.GreaterOrEqual(t, at["erase"][0], at["unpublish"][3], "keys erased only after the records are gone")
}
